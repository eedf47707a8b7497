"""Empty tensors (a dimension of 0) and a model's float64 / float16 tensors: compiled, loaded and run
through Session and IRuntime, against onnxruntime (or onnx's reference)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pydla
from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from pydla.loadable.container import Loadable
from pydla.session import Session
from tests.compiler.support import reference


def typed(nodes: list[Any], inputs: dict[str, np.ndarray], outputs: dict[str, tuple[np.dtype[Any], Any]],
          inits: dict[str, np.ndarray] | None = None, opset: int = 18) -> Any:
    """A model with inputs typed as the arrays and outputs of the given (dtype, shape)."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), s)
         for n, (d, s) in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run_both(m: Any, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    with Session(compile_model(m).blob) as sess:
        got = sess.run(feeds)
    return got, reference(m, feeds)


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-6, err_msg=name)


F32 = np.float32
rng = np.random.default_rng(0)


def test_an_empty_input_is_still_an_input_and_concat_leaves_it_out() -> None:
    nodes = [helper.make_node("Concat", ["x", "e"], ["c"], axis=0),
             helper.make_node("Relu", ["c"], ["y"])]
    feeds = {"x": rng.standard_normal((2, 3)).astype(F32), "e": np.zeros((0, 3), F32)}
    m = typed(nodes, feeds, {"y": (F32, [2, 3])})
    result = compile_model(m)
    assert result.operations == {"SDP": 1}  # the concat of one tensor is the tensor itself
    lo = Loadable.open(result.blob)
    empty = next(t for t in lo.tensors() if t.name == "e")
    assert empty.dims == (0, 3) and empty.size == 0
    got, want = run_both(m, feeds)
    assert_same(got, want)
    with Session(result.blob) as sess:
        assert [(t.name, t.shape) for t in sess.inputs] == [("x", (2, 3)), ("e", (0, 3))]
        with pytest.raises(DlaError, match=r"input 'e': expected float32 of shape \(0, 3\)"):
            sess.run({"x": feeds["x"], "e": np.zeros((1, 3), F32)})


def test_split_with_an_empty_part_gives_an_empty_output() -> None:
    nodes = [helper.make_node("Split", ["x", "s"], ["a", "b", "c"], axis=1)]
    feeds = {"x": rng.standard_normal((2, 5)).astype(F32)}
    m = typed(nodes, feeds, {"a": (F32, [2, 2]), "b": (F32, [2, 0]), "c": (F32, [2, 3])},
              {"s": np.array([2, 0, 3], np.int64)})
    got, want = run_both(m, feeds)
    assert got["b"].shape == (2, 0)
    assert_same(got, want)


def test_a_model_whose_only_output_is_empty_runs_nothing() -> None:
    nodes = [helper.make_node("Slice", ["x", "starts", "ends"], ["y"])]
    feeds = {"x": rng.standard_normal((4, 3)).astype(F32)}
    m = typed(nodes, feeds, {"y": (F32, [0, 3])},
              {"starts": np.array([9], np.int64), "ends": np.array([12], np.int64)})
    result = compile_model(m)
    assert result.operations == {}
    got, want = run_both(m, feeds)
    assert_same(got, want)
    assert got["y"].shape == (0, 3)


@pytest.mark.parametrize(("op", "dtype"), [
    ("ReduceSum", F32), ("ReduceL1", F32), ("ReduceL2", F32), ("ReduceSumSquare", F32), ("ReduceProd", F32),
    ("ReduceLogSum", F32), ("ReduceLogSumExp", F32), ("ReduceMax", F32), ("ReduceMin", F32),
    ("ReduceMax", np.int32), ("ReduceMin", np.int64), ("ReduceSum", np.int64),
])
def test_a_reduction_of_an_empty_tensor_is_its_identity(op: str, dtype: Any) -> None:
    """ONNX's values (onnxruntime 1.32 agrees; 1.23 gives 0 for Max and Min of integers)."""
    nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)]
    feeds = {"x": np.zeros((2, 0, 4), dtype), "axes": np.array([1], np.int64)}  # axes given at run time
    m = typed(nodes, feeds, {"y": (dtype, [2, 1, 4])})
    result = compile_model(m)
    assert result.operations == {"BDMA": 1}  # the known result copied into place
    with Session(result.blob) as sess:
        got = sess.run(feeds)["y"]
    extreme = np.iinfo(dtype) if np.dtype(dtype).kind == "i" else None
    value = {"ReduceProd": 1, "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf,
             "ReduceMax": extreme.min if extreme else -np.inf,
             "ReduceMin": extreme.max if extreme else np.inf}.get(op, 0)
    assert got.dtype == dtype and got.shape == (2, 1, 4)
    np.testing.assert_array_equal(got, np.full((2, 1, 4), value, dtype))


def test_reduce_max_and_min_of_an_empty_bool_tensor() -> None:
    """ONNX: an empty reduction gives the type's least value for Max (False < True) and its
    greatest for Min (onnx's reference evaluator gives True for both)."""
    for op, value in (("ReduceMax", False), ("ReduceMin", True)):
        nodes = [helper.make_node(op, ["x"], ["y"], axes=[0], keepdims=0)]
        m = typed(nodes, {"x": np.zeros((0, 3), np.bool_)}, {"y": (np.bool_, [3])}, opset=17)
        with Session(compile_model(m).blob) as sess:
            got = sess.run({"x": np.zeros((0, 3), np.bool_)})["y"]
        assert got.dtype == np.bool_ and got.tolist() == [value] * 3


@pytest.mark.parametrize("noop", [0, 1])
def test_empty_axes_reduce_everything_or_nothing(noop: int) -> None:
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, noop_with_empty_axes=noop)]
    feeds = {"x": rng.standard_normal((2, 3)).astype(F32), "axes": np.zeros((0,), np.int64)}
    m = typed(nodes, feeds, {"y": (F32, [2, 3] if noop else [1, 1])})
    got, want = run_both(m, feeds)
    assert_same(got, want)


def test_an_empty_tensor_that_would_need_computing_is_refused_with_its_name() -> None:
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["y"])]
    feeds = {"a": np.zeros((2, 0), F32), "b": np.zeros((0, 3), F32), "c": np.zeros((2, 3), F32)}
    with pytest.raises(DlaError, match=r"input 'a' has shape \(2, 0\) \(empty\)") as e:
        compile_model(typed(nodes, feeds, {"y": (F32, [2, 3])}))
    assert e.value.code == NvError.NotSupported


def test_the_runtime_needs_no_memory_for_an_empty_tensor() -> None:
    nodes = [helper.make_node("Concat", ["x", "e"], ["y"], axis=0)]
    feeds = {"x": rng.standard_normal((2, 3)).astype(F32), "e": np.zeros((0, 3), F32)}
    blob = compile_model(typed(nodes, feeds, {"y": (F32, [2, 3])})).blob
    with pydla.createRuntime() as rt:
        rt.load(blob)
        empty = rt.getInputTensorDesc(1)
        assert empty.name == "e" and empty.size == 0
        with pytest.raises(DlaError, match="leave it unbound") as e:
            rt.allocateSystemMemory(empty.size)
        assert e.value.code == NvError.BadParameter
        x = rt.allocateSystemMemory(rt.getInputTensorDesc(0).size)
        y = rt.allocateSystemMemory(rt.getOutputTensorDesc(0).size)
        x.array(F32, (2, 3))[...] = feeds["x"]
        rt.bindInputTensor(0, x)
        rt.bindOutputTensor(0, y)
        rt.submit()  # 'e' unbound: nothing reads it
        np.testing.assert_array_equal(y.array(F32, (2, 3)), feeds["x"])
        rt.bindInputTensor(1, x)  # binding it anyway is harmless
        rt.submit()
        moved = empty.__class__(**{**empty.__dict__, "strides": (4, 8)})
        with pytest.raises(DlaError, match="is empty: it has no layout to change"):
            rt.setInputTensorDesc(1, moved)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
@pytest.mark.parametrize("op", ["Max", "Min", "Add", "Sub", "Mul", "Div"])
def test_float64_and_float16_element_wise_runs_on_the_cpu_in_their_type(op: str, dtype: Any) -> None:
    feeds = {"a": rng.standard_normal((3, 4)).astype(dtype), "b": rng.standard_normal((4,)).astype(dtype)}
    m = typed([helper.make_node(op, ["a", "b"], ["y"])], feeds, {"y": (dtype, [3, 4])})
    result = compile_model(m)
    got, want = run_both(m, feeds)
    if dtype == np.float64:
        assert result.operations == {"CPU": 1}
        assert_same(got, want)
        return
    # A float16 model computes on the device at FP16 (pydla.compiler.half), its output float16.
    assert "CPU" not in result.operations and got["y"].dtype == np.float16
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-3, atol=1e-3)


def test_float64_division_by_zero_is_infinite_as_in_onnx() -> None:
    feeds = {"a": np.array([1.0, -1.0, 0.0]), "b": np.zeros(3)}
    m = typed([helper.make_node("Div", ["a", "b"], ["y"])], feeds, {"y": (np.float64, [3])})
    with Session(compile_model(m).blob) as sess:
        got = sess.run(feeds)["y"]
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


def test_float64_reductions_and_math_keep_float64() -> None:
    nodes = [helper.make_node("ReduceLogSumExp", ["x", "axes"], ["r"], keepdims=0),
             helper.make_node("Exp", ["r"], ["y"])]
    feeds = {"x": rng.standard_normal((3, 4, 5))}
    m = typed(nodes, feeds, {"y": (np.float64, [3, 5])}, {"axes": np.array([1], np.int64)})
    got, want = run_both(m, feeds)
    assert_same(got, want)
    assert Loadable.open(compile_model(m).blob).tensors()[0].data_type.name == "FLOAT64"


def test_empty_inputs_and_outputs_in_fp16_mode_are_not_converted() -> None:
    """fp16 mode converts float inputs and outputs with SDP; an empty one has nothing to convert
    (and its buffer is never bound)."""
    nodes = [helper.make_node("Concat", ["x", "e"], ["c"], axis=0),
             helper.make_node("Split", ["c", "s"], ["a", "b"], axis=0)]
    feeds = {"x": rng.standard_normal((2, 3)).astype(F32), "e": np.zeros((0, 3), F32)}
    m = typed(nodes, feeds, {"a": (F32, [2, 3]), "b": (F32, [0, 3])}, {"s": np.array([2, 0], np.int64)})
    result = compile_model(m, precision="fp16")
    with Session(result.blob) as sess:
        got = sess.run(feeds)
    assert got["b"].shape == (0, 3) and got["b"].dtype == F32
    np.testing.assert_allclose(got["a"], feeds["x"], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("node", "shape", "inits"), [
    (helper.make_node("Relu", ["x"], ["y"]), (0, 3), {}),
    (helper.make_node("Add", ["x", "x"], ["y"]), (2, 0, 3), {}),
    (helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0]), (0, 3), {}),
    (helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1), (0, 3), {"s": np.array([3, 0], np.int64)}),
    (helper.make_node("Softmax", ["x"], ["y"], axis=-1), (0, 3), {}),
    (helper.make_node("Pad", ["x", "p", "v"], ["y"]), (0, 3),  # an empty tensor padded has elements
     {"p": np.array([1, 0, 1, 0], np.int64), "v": np.array(2.5, F32)}),
    (helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), (0, 2, 4, 4),
     {"w": np.ones((3, 2, 3, 3), F32)}),
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2]), (0, 2, 4, 4), {}),
    (helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=1), (0, 3), {"a": np.array([1], np.int64)}),
    (helper.make_node("Expand", ["x", "s"], ["y"]), (1, 3), {"s": np.array([0, 3], np.int64)}),
])
def test_empty_tensors_through_operators_match_onnxruntime(node: Any, shape: tuple[int, ...],
                                                           inits: dict[str, np.ndarray]) -> None:
    feeds = {"x": np.zeros(shape, F32) if 0 in shape else rng.standard_normal(shape).astype(F32)}
    m = typed([node], feeds, {"y": (F32, None)}, inits)
    got, want = run_both(m, feeds)
    assert_same(got, want)


@pytest.mark.parametrize("form", ["scales", "sizes"])
def test_empty_parameters_are_constants_like_any_other(form: str) -> None:
    """Exported opset-11 models give Resize an empty roi (and an empty scales beside sizes): those
    are parameters, not data, and compile as before."""
    x = rng.standard_normal((1, 2, 4, 4)).astype(F32)
    inits = {"roi": np.zeros((0,), F32)}
    if form == "scales":
        inits["scales"] = np.array([1, 1, 2, 2], F32)
        inputs = ["x", "roi", "scales"]
    else:
        inits["scales"], inits["sizes"] = np.zeros((0,), F32), np.array([1, 2, 8, 6], np.int64)
        inputs = ["x", "roi", "scales", "sizes"]
    m = typed([helper.make_node("Resize", inputs, ["y"], mode="nearest")], {"x": x}, {"y": (F32, None)},
              inits, opset=11)
    m.ir_version = 7
    got, want = run_both(m, {"x": x})
    assert_same(got, want)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_float64_softmax_keeps_float64_precision(op: str) -> None:
    feeds = {"x": rng.standard_normal((3, 7))}
    m = typed([helper.make_node(op, ["x"], ["y"], axis=-1)], feeds, {"y": (np.float64, [3, 7])})
    with Session(compile_model(m).blob) as sess:
        got = sess.run(feeds)["y"]
    x = feeds["x"]
    shifted = x - x.max(axis=-1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    want = want if op == "LogSoftmax" else np.exp(want)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)  # float32 would be ~1e-7 off


_A = rng.standard_normal((2, 3))
_B = rng.standard_normal((2, 3))


def _i64(name: str, *values: int) -> Any:
    return numpy_helper.from_array(np.array(values, np.int64), name)


@pytest.mark.parametrize(("node", "feeds", "inits"), [
    (helper.make_node("Equal", ["a", "b"], ["y"]), {"a": _A, "b": _A.copy()}, []),
    (helper.make_node("Less", ["a", "b"], ["y"]), {"a": _A, "b": _B}, []),
    (helper.make_node("Where", ["c", "a", "b"], ["y"]), {"c": _A > 0, "a": _A, "b": _B}, []),
    (helper.make_node("Cast", ["a"], ["y"], to=TensorProto.FLOAT), {"a": _A}, []),
    (helper.make_node("Cast", ["a"], ["y"], to=TensorProto.DOUBLE), {"a": _A.astype(F32)}, []),
    (helper.make_node("Transpose", ["a"], ["y"], perm=[1, 0]), {"a": _A}, []),
    (helper.make_node("Concat", ["a", "b"], ["y"], axis=1), {"a": _A, "b": _B}, []),
    (helper.make_node("Reshape", ["a", "s"], ["y"]), {"a": _A}, [_i64("s", 3, 2)]),
    (helper.make_node("Slice", ["a", "st", "en"], ["y"]), {"a": _A}, [_i64("st", 1), _i64("en", 3)]),
    (helper.make_node("Gather", ["a", "i"], ["y"], axis=1), {"a": _A}, [_i64("i", 2, 0)]),
    (helper.make_node("Expand", ["a", "s"], ["y"]), {"a": _A[:1]}, [_i64("s", 4, 3)]),
    (helper.make_node("Tile", ["a", "s"], ["y"]), {"a": _A}, [_i64("s", 2, 1)]),
    (helper.make_node("ArgMax", ["a"], ["y"], axis=1), {"a": _A}, []),
    (helper.make_node("Sum", ["a", "b", "a"], ["y"]), {"a": _A, "b": _B}, []),
    (helper.make_node("Mean", ["a", "b"], ["y"]), {"a": _A, "b": _B}, []),
    (helper.make_node("Neg", ["a"], ["y"]), {"a": _A}, []),
    (helper.make_node("Abs", ["a"], ["y"]), {"a": _A}, []),
    (helper.make_node("Reciprocal", ["a"], ["y"]), {"a": _A}, []),
    (helper.make_node("Pow", ["a", "b"], ["y"]), {"a": np.abs(_A), "b": _B}, []),
    (helper.make_node("Sqrt", ["a"], ["y"]), {"a": np.abs(_A)}, []),
    (helper.make_node("ReduceMean", ["a"], ["y"], axes=[1]), {"a": _A}, []),
])
def test_float64_models_compute_in_float64(node: Any, feeds: dict[str, np.ndarray], inits: list[Any]) -> None:
    """What the README says runs on a model's float64 tensors: exactly (or to float64 precision)
    as onnx's reference computes it."""
    graph = helper.make_graph([node], "test", [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", 0, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with Session(compile_model(m).blob) as sess:
        got = sess.run(feeds)["y"]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
