"""The numpy evaluation of shape arithmetic (pydla.compiler.shapes.evaluate) computes what onnx's
reference implementation computes, node by node; shapes flow through folded values (a pooling with
ceil_mode after a computed Reshape, a Reshape that does not fit is named); LayerNormalization's
forms agree with onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pydla.compiler.api import compile_model
from pydla.compiler.graph import import_graph
from pydla.compiler.shapes import evaluate
from pydla.errors import DlaError, NvError
from tests.compiler.support import model, reference, run_loadable

I64 = np.int64
SHAPE = np.array([2, 8, 32], I64)

CASES: list[tuple[str, list[Any], dict[str, Any]]] = [
    ("Gather", [SHAPE, np.array(-1, I64)], {"axis": 0}),
    ("Gather", [SHAPE, np.array([0, 2], I64)], {}),
    ("Unsqueeze", [np.array(5, I64), np.array([0], I64)], {}),
    ("Unsqueeze", [SHAPE, np.array([-1, 0], I64)], {}),
    ("Squeeze", [np.array([[7]], I64), None], {}),
    ("Squeeze", [np.array([[7, 8]], I64), np.array([-2], I64)], {}),
    ("Concat", [SHAPE[:1], np.array([-1, 4], I64)], {"axis": 0}),
    ("Slice", [SHAPE, np.array([-1], I64), np.array([(1 << 63) - 1], I64)], {}),
    ("Slice", [SHAPE, np.array([0], I64), np.array([-1], I64), np.array([0], I64), np.array([2], I64)], {}),
    ("Slice", [SHAPE, np.array([-1], I64), np.array([-(1 << 63)], I64), None, np.array([-1], I64)], {}),
    ("Div", [np.array([-7, 7, -8], I64), np.array([2, -2, 3], I64)], {}),
    ("Div", [np.array(1.0, np.float32), np.array(8.0, np.float32)], {}),
    ("Mul", [SHAPE, np.array(-1, I64)], {}),
    ("Sub", [np.array(1.0, np.float32), np.array([0.0, 1.0], np.float32)], {}),
    ("Range", [np.array(0, I64), np.array(7, I64), np.array(2, I64)], {}),
    ("Range", [np.array(1.0, np.float32), np.array(0.0, np.float32), np.array(-0.3, np.float32)], {}),
    ("Range", [np.array(5, I64), np.array(1, I64), np.array(1, I64)], {}),
    ("ConstantOfShape", [np.array([2, 3], I64)], {}),
    ("ConstantOfShape", [np.array([2, 3], I64)], {"value": numpy_helper.from_array(np.array([-1], I64))}),
    ("Equal", [SHAPE, np.array([2, -1, 32], I64)], {}),
    ("Where", [np.array([True, False, True]), np.array([1, 1, 1], I64), SHAPE], {}),
    ("Expand", [np.array([[1.0], [2.0]], np.float32), np.array([1, 3], I64)], {}),
    ("Expand", [np.array([1, 2, 3], I64), np.array([2, 1], I64)], {}),
    ("Reshape", [np.arange(24, dtype=I64).reshape(2, 3, 4), np.array([0, -1], I64)], {}),
    ("Reshape", [np.zeros((0, 3), I64), np.array([0, 3], I64)], {"allowzero": 1}),
    ("Cast", [SHAPE], {"to": TensorProto.FLOAT}),
    ("Cast", [np.array([1.7, -1.7], np.float32)], {"to": TensorProto.INT32}),
    ("Sqrt", [np.array(64.0, np.float32)], {}),
    ("Trilu", [np.ones((3, 4), np.float32), np.array(1, I64)], {"upper": 0}),
    ("Trilu", [np.ones((2, 3, 3), np.float32)], {}),
    ("Less", [np.arange(3, dtype=I64)[None, :], np.arange(3, dtype=I64)[:, None] + 1], {}),
    ("Not", [np.array([True, False])], {}),
    ("Max", [SHAPE, np.array(4, I64), np.array([1, 9, 1], I64)], {}),
    ("Tile", [np.array([[1, 2]], I64), np.array([2, 2], I64)], {}),
    ("Transpose", [np.arange(6, dtype=I64).reshape(2, 3)], {"perm": [1, 0]}),
]


@pytest.mark.parametrize("op,values,attrs", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_numpy_evaluation_matches_the_reference(op: str, values: list[Any], attrs: dict[str, Any]) -> None:
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
    node = helper.make_node(op, names, ["out"], **attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in zip(names, values, strict=True) if n]
    out = helper.make_tensor_value_info("out", 0, None)
    m = helper.make_model(helper.make_graph([node], "g", inputs, [out]),
                          opset_imports=[helper.make_opsetid("", 17)])
    want = ReferenceEvaluator(m).run(None, {n: v for n, v in zip(names, values, strict=True) if n})[0]
    raw = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    got = evaluate(op, raw, values, 17)
    if got is None:  # left to the reference: only negative steps of Slice
        assert op == "Slice" and (values[4] < 0).any()
        return
    assert got[0].dtype == want.dtype and got[0].shape == want.shape
    np.testing.assert_array_equal(got[0], want)


def test_a_bad_index_in_shape_arithmetic_is_named() -> None:
    m = model([helper.make_node("Shape", ["x"], ["s"]),
               helper.make_node("Gather", ["s", "k"], ["g"], axis=0),
               helper.make_node("Unsqueeze", ["g", "zero"], ["u"]),
               helper.make_node("Reshape", ["x", "u"], ["y"])],
              {"x": (2, 3)}, ["y"], {"k": np.array(5, I64), "zero": np.array([0], I64)})
    with pytest.raises(DlaError) as info:
        import_graph(m)
    assert info.value.code == NvError.BadValue
    assert "node 'Gather_1' (Gather): constant folding failed" in info.value.message


def test_a_computed_reshape_that_does_not_fit_is_named() -> None:
    """(2, 3) reshaped to (size(0), 4) from its own shape: 6 elements into 8."""
    m = model([helper.make_node("Shape", ["x"], ["s"]),
               helper.make_node("Slice", ["s", "zero", "one"], ["lead"]),
               helper.make_node("Concat", ["lead", "four"], ["shape"], axis=0),
               helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("Reshape", ["r", "shape"], ["y"])],
              {"x": (2, 3)}, ["y"], {"zero": np.array([0], I64), "one": np.array([1], I64),
                                     "four": np.array([4], I64)})
    with pytest.raises(DlaError) as info:
        compile_model(m)
    assert info.value.code == NvError.BadValue
    assert info.value.message == ("node 'Reshape_4' (Reshape): 'r' of shape (2, 3) has 6 elements, its "
                                  "output 'y' of shape (2, 4) 8")


def _batch_reshape_then(nodes: list[Any], out: str, x_shape: tuple[int, ...], opset: int = 17) -> Any:
    """x (symbolic batch) reshaped to (batch, C, H, W) read from its own shape, then ``nodes``."""
    pre = [helper.make_node("Shape", ["x"], ["s"]),
           helper.make_node("Slice", ["s", "zero", "one"], ["b"]),
           helper.make_node("Concat", ["b", "chw"], ["shape"], axis=0),
           helper.make_node("Reshape", ["x", "shape"], ["r"])]
    m = model(pre + nodes, {"x": ("batch", x_shape[1])}, [out],
              {"zero": np.array([0], I64), "one": np.array([1], I64), "chw": np.array(x_shape[2:], I64)},
              opset=opset)
    return m


def test_ceil_mode_pooling_after_a_computed_reshape() -> None:
    """Its input shape is known only once the Reshape's shape is folded: the window that would
    start in the end padding is dropped then too (as onnxruntime drops it)."""
    m = _batch_reshape_then([helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[1, 1], strides=[2, 2],
                                              ceil_mode=1)], "y", (2, 3 * 8 * 8, 3, 8, 8))
    x = np.random.default_rng(0).standard_normal((2, 192)).astype(np.float32)
    blob = compile_model(m, input_shapes={"x": (2, 192)}).blob
    want = reference(m, {"x": x})["y"]
    assert want.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(run_loadable(blob, {"x": x})["y"], want, rtol=1e-6)


@pytest.mark.parametrize("axis,bias,opset,extra", [(-1, True, 17, False), (1, False, 17, False),
                                                   (-2, True, 18, True), (2, True, 17, True)])
def test_layer_normalization_forms(axis: int, bias: bool, opset: int, extra: bool) -> None:
    rng = np.random.default_rng(1)
    shape = (2, 3, 4, 5)
    normalised = shape[axis % 4:]
    inits = {"scale": rng.standard_normal(normalised).astype(np.float32)}
    inputs = ["x", "scale"]
    if bias:
        inits["bias"] = rng.standard_normal(normalised).astype(np.float32)
        inputs.append("bias")
    outputs = ["y", "mean", "inv"] if extra else ["y"]
    m = model([helper.make_node("LayerNormalization", inputs, outputs, axis=axis, epsilon=1e-3)],
              {"x": shape}, outputs, inits, opset=opset)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    want = reference(m, {"x": x})
    got = run_loadable(compile_model(m).blob, {"x": x})
    for name in outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_constant_reshape_that_does_not_fit_is_named() -> None:
    m = model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="view")], {"x": (2, 3)}, ["y"],
              {"shape": np.array([2, 4], I64)})
    with pytest.raises(DlaError, match=r"node 'view' \(Reshape\): 'x' of shape \(2, 3\) has 6 elements"):
        compile_model(m)


def test_a_node_that_does_not_fit_its_computed_input_shape_is_named() -> None:
    """x (batch, 6) viewed as (batch, 3, 2) from its own shape, then a MatMul by a (4, 5) weight:
    known to mismatch only once the view's shape is folded."""
    m = _batch_reshape_then([helper.make_node("MatMul", ["r", "w"], ["y"], name="proj")], "y", (2, 6, 3, 2))
    m.graph.initializer.append(numpy_helper.from_array(np.ones((4, 5), np.float32), "w"))
    with pytest.raises(DlaError) as info:
        compile_model(m, input_shapes={"x": (2, 6)})
    assert info.value.code == NvError.BadValue
    assert info.value.message.startswith(
        "node 'proj' (MatMul): its inputs ('r' (2, 3, 2), 'w' (4, 5)) do not fit")


@pytest.mark.parametrize("op,keepdims,opset", [("ReduceMean", 1, 17), ("ReduceMean", 0, 18),
                                               ("ReduceSum", 1, 13), ("ReduceSum", 0, 11)])
def test_a_mean_or_sum_over_the_last_axis_is_a_product_on_the_device(op: str, keepdims: int,
                                                                      opset: int) -> None:
    """An exported LayerNorm's ReduceMean(x, axes=[-1]): a MatMul by a constant column, no CPU run."""
    from pydla.loadable.container import Loadable

    since = 18 if op == "ReduceMean" else 13
    inits = {"axes": np.array([-1], I64)} if opset >= since else {}
    attrs = {} if opset >= since else {"axes": [-1]}
    m = model([helper.make_node(op, ["x", *inits], ["y"], keepdims=keepdims, **attrs)], {"x": (2, 3, 7)},
              ["y"], inits, opset=opset)
    x = np.random.default_rng(2).standard_normal((2, 3, 7)).astype(np.float32)
    blob = compile_model(m).blob
    assert [r.where for r in Loadable.open(blob).recipe.runs] == ["npu"]
    want = reference(m, {"x": x})["y"]
    got = run_loadable(blob, {"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_reshape_of_computed_data_with_0_and_minus_1() -> None:
    """x (batch, 4, 6) -> Reshape [0, 0, 2, -1] -> Transpose -> Reshape [0, -1]: the 0s copy the
    input's sizes, the -1 takes what is left, with the batch symbolic."""
    m = model([helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("Reshape", ["r", "split"], ["s"]),
               helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 1, 3]),
               helper.make_node("Reshape", ["t", "flat"], ["y"])],
              {"x": ("batch", 4, 6)}, ["y"], {"split": np.array([0, 0, 2, -1], I64),
                                               "flat": np.array([0, -1], I64)})
    x = np.random.default_rng(3).standard_normal((3, 4, 6)).astype(np.float32)
    blob = compile_model(m, input_shapes={"x": (3, 4, 6)}).blob
    want = reference(m, {"x": x})["y"]
    assert want.shape == (3, 24)
    np.testing.assert_array_equal(run_loadable(blob, {"x": x})["y"], want)


@pytest.mark.parametrize("indices,axis,on_device", [
    (np.array(0, I64), 1, True),          # x[:, 0]: a class token
    (np.array(-1, I64), 2, True),
    (np.array([1, 3, 5], I64), 2, True),  # evenly stepped: a strided slice
    (np.array([2], I64), 0, True),
    (np.array([-3, -2], I64), 1, True),
    (np.array([0, 2, 3], I64), 2, False),  # not evenly stepped: the CPU library's gather
    (np.array([[0, 1]], I64), 1, False),
])
def test_gather_by_constant_indices_of_computed_data(indices: np.ndarray, axis: int, on_device: bool) -> None:
    from pydla.loadable.container import Loadable

    m = model([helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("Gather", ["r", "i"], ["y"], axis=axis)],
              {"x": (3, 4, 6)}, ["y"], {"i": indices})
    x = np.random.default_rng(4).standard_normal((3, 4, 6)).astype(np.float32)
    blob = compile_model(m).blob
    assert ([r.where for r in Loadable.open(blob).recipe.runs] == ["npu"]) == on_device
    want = reference(m, {"x": x})["y"]
    np.testing.assert_array_equal(run_loadable(blob, {"x": x})["y"], want)


def test_a_constant_gather_index_outside_the_axis_is_refused_when_compiling() -> None:
    m = model([helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("Gather", ["r", "i"], ["y"], axis=1, name="pick")],
              {"x": (3, 4)}, ["y"], {"i": np.array(4, I64)})
    with pytest.raises(DlaError) as info:
        compile_model(m)
    assert info.value.code == NvError.BadValue
    assert info.value.message == "node 'pick' (Gather): index 4 is outside axis 1 of 'r' (size 4)"


@pytest.mark.parametrize("shape,target,dtype", [((2, 1, 3), (2, 4, 3), np.float32),
                                                ((3,), (2, 1, 3), np.float32),
                                                ((2, 1, 1, 5), (2, 1, 5, 5), np.int64),
                                                ((4, 1), (1, 3), np.float32)])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_expand_of_computed_data_is_one_broadcast_copy(shape: tuple[int, ...], target: tuple[int, ...],
                                                       dtype: Any, precision: str) -> None:
    from pydla.loadable.container import Loadable
    from pydla.session import Session

    kind = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["r"]), helper.make_node("Expand", ["r", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", kind, shape)], [helper.make_tensor_value_info("y", kind, None)],
        [numpy_helper.from_array(np.array(target, I64), "shape")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = (np.random.default_rng(5).standard_normal(shape) * 10).astype(dtype)
    compiled = compile_model(m, precision=precision)
    assert compiled.cpu_runs == [] and [r.where for r in Loadable.open(compiled.blob).recipe.runs] == ["npu"]
    with Session(compiled.blob) as sess:
        got = sess.run({"x": x})["y"]
    want = reference(m, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-3 if precision == "fp16" else 0)


@pytest.mark.parametrize("op,values,attrs", [
    ("Unsqueeze", [np.array(5, I64)], {"axes": [0]}),
    ("Unsqueeze", [SHAPE], {"axes": [-1, 1]}),
    ("Squeeze", [np.array([[7]], I64)], {"axes": [0]}),
    ("Squeeze", [np.array([[7]], I64)], {}),
])
def test_axes_as_attributes_before_opset_13(op: str, values: list[Any], attrs: dict[str, Any]) -> None:
    names = [f"i{k}" for k in range(len(values))]
    node = helper.make_node(op, names, ["out"], **attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in zip(names, values, strict=True)]
    out = helper.make_tensor_value_info("out", 0, None)
    m = helper.make_model(helper.make_graph([node], "g", inputs, [out]),
                          opset_imports=[helper.make_opsetid("", 11)])
    want = ReferenceEvaluator(m).run(None, dict(zip(names, values, strict=True)))[0]
    got = evaluate(op, {a.name: helper.get_attribute_value(a) for a in node.attribute}, values, 11)
    assert got is not None and got[0].shape == want.shape
    np.testing.assert_array_equal(got[0], want)


def test_an_expand_too_scattered_for_bdma_copies_stays_a_cpu_run() -> None:
    """(8200, 1, 2, 1) -> (8200, 2, 2, 2): 8200 * 2 BDMA operations of 2 x 2 elements, more than one
    copy may take: the CPU library's expand, and still right."""
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Expand", ["r", "shape"], ["y"])],
              {"x": (8200, 1, 2, 1)}, ["y"], {"shape": np.array([8200, 2, 2, 2], I64)})
    compiled = compile_model(m)
    assert [n["op"] for n in compiled.cpu_runs] == ["Expand"]
    x = np.random.default_rng(6).standard_normal((8200, 1, 2, 1)).astype(np.float32)
    np.testing.assert_array_equal(run_loadable(compiled.blob, {"x": x})["y"], reference(m, {"x": x})["y"])


@pytest.mark.parametrize("opset", [9, 13, 15])
def test_a_batch_norm_of_constants_folds_with_the_given_statistics(opset: int) -> None:
    """onnx's reference implementation of BatchNormalization 9 to 13 normalizes by the batch's own
    mean and variance (it takes its default momentum for training); folding a batch norm of
    constants (found by the fuzz campaign: a convolution of its own weights) gives what onnxruntime
    and the spec give."""
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    stats = {"g": rng.standard_normal(3), "be": rng.standard_normal(3), "m": rng.standard_normal(3),
             "v": np.abs(rng.standard_normal(3)) + 0.5}
    inits = {"c": data, **{k: v.astype(np.float32) for k, v in stats.items()}}
    nodes = [helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"]),
             helper.make_node("Add", ["n", "x"], ["y"])]
    m = model(nodes, {"x": (4, 3, 2, 2)}, ["y"], inits=inits, opset=opset)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    scale = stats["g"] / np.sqrt(stats["v"] + 1e-5)
    spec = (data - stats["m"][:, None, None]) * scale[:, None, None] + stats["be"][:, None, None] + x
    np.testing.assert_allclose(want, spec, rtol=1e-5, atol=1e-5)
    got = run_loadable(compile_model(m).blob, {"x": x})["y"]
    np.testing.assert_allclose(got, spec, rtol=1e-4, atol=1e-5)
