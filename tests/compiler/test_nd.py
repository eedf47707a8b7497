"""The compiler beyond batch-1 images: batches, ranks 0 to 5, broadcasting, weights and parameters
given at run time, integer tensors through data movement; each model compiled, run through the
whole stack and compared with onnxruntime."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from pydla.compiler.layout import copy_plan, flat_cube
from pydla.loadable.container import Loadable
from pydla.session import Session
from tests.compiler.support import NotImplementedByOrt, model, reference

RNG = np.random.default_rng(7)


def r(*shape: int, positive: bool = False) -> np.ndarray:
    a = np.asarray(RNG.standard_normal(shape), dtype=np.float32)
    return np.asarray(np.abs(a) + 0.5 if positive else a, dtype=np.float32)


def typed_model(nodes: list[Any], inputs: dict[str, np.ndarray], outputs: dict[str, Any],
                inits: dict[str, np.ndarray] | None = None, opset: int = 17) -> Any:
    """A model whose inputs take the dtypes of the given arrays; its outputs the first input's
    dtype, with the given shapes (None: inferred)."""
    dtype = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, dtype, shape) for n, shape in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def check(m: Any, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-4,
          precision: str = "fp32") -> Any:
    result = compile_model(m, precision=precision)
    with Session(result.blob) as sess:
        got = sess.run({t.name: np.asarray(feeds[t.name]).reshape(t.shape) for t in sess.inputs})
    want = reference(m, feeds)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_allclose(got[name].reshape(value.shape), value, rtol=rtol, atol=atol, err_msg=name)
    return result


def test_conv_bn_add_relu_over_a_batch_is_one_pair_per_image() -> None:
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], strides=[1, 2]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]),
             helper.make_node("Add", ["bn", "k"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    m = model(nodes, {"x": (3, 4, 6, 8)}, ["y"],
              {"W": r(5, 4, 3, 3), "B": r(5), "g": r(5, positive=True), "b": r(5), "m": r(5),
               "v": r(5, positive=True), "k": r(5, 1, 1)})
    result = check(m, {"x": r(3, 4, 6, 8)})
    assert result.operations == {"CONV": 3, "SDP": 3}


def test_conv_1d_and_conv_transpose_1d() -> None:
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[2, 1], dilations=[2], strides=[1]),
             helper.make_node("ConvTranspose", ["c", "T", "TB"], ["y"], strides=[2], output_padding=[1])]
    m = model(nodes, {"x": (2, 3, 11)}, ["y"], {"W": r(4, 3, 3), "T": r(4, 2, 3), "TB": r(2)})
    check(m, {"x": r(2, 3, 11)})


@pytest.mark.parametrize("attrs", [dict(output_shape=[11, 9], strides=[3, 2]),
                                   dict(auto_pad="SAME_UPPER", strides=[2, 2]),
                                   dict(auto_pad="SAME_LOWER", strides=[2, 3], group=2)])
def test_conv_transpose_output_shape_and_auto_pad(attrs: dict[str, Any]) -> None:
    groups = attrs.get("group", 1)
    m = model([helper.make_node("ConvTranspose", ["x", "W"], ["y"], **attrs)], {"x": (2, 2, 3, 4)}, ["y"],
              {"W": r(2, 4 // groups, 3, 3)})
    check(m, {"x": r(2, 2, 3, 4)})


def test_weights_and_bias_given_at_run_time() -> None:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["y"])]
    m = model(nodes, {"x": (2, 3, 5, 5), "w": (4, 3, 3, 3), "b": (4,)}, ["y"],
              {"g": r(4, positive=True), "be": r(4), "m": r(4), "v": r(4, positive=True)})
    check(m, {"x": r(2, 3, 5, 5), "w": r(4, 3, 3, 3), "b": r(4)})


GEMMS: dict[str, tuple[dict[str, Any], dict[str, tuple[int, ...]], dict[str, np.ndarray]]] = {
    "rows-const-B-full-C": ({}, {"a": (3, 5)}, {"B": r(5, 4), "C": r(3, 4)}),
    "transA-transB-alpha-beta": (dict(transA=1, transB=1, alpha=0.5, beta=2.0), {"a": (5, 3)},
                                 {"B": r(4, 5), "C": r(4)}),
    "runtime-B-and-C-column": (dict(alpha=0.25, beta=0.5), {"a": (3, 6), "B": (6, 2), "C": (3, 1)}, {}),
    "runtime-B-scalar-C": (dict(beta=3.0), {"a": (2, 6), "B": (6, 3), "C": ()}, {}),
}


@pytest.mark.parametrize("case", list(GEMMS))
def test_gemm(case: str) -> None:
    attrs, inputs, inits = GEMMS[case]
    m = model([helper.make_node("Gemm", ["a", "B", "C"], ["y"], **attrs)], inputs, ["y"], inits)
    check(m, {name: r(*shape) for name, shape in inputs.items()})


@pytest.mark.parametrize(("a", "b", "const_b"), [
    ((2, 3, 4, 5), (5, 6), True),     # one B: all rows of A in one product
    ((2, 1, 4, 5), (3, 5, 2), False),  # broadcast batches, B at run time
    ((5,), (2, 5, 3), True),
    ((2, 3, 5), (5,), False),
])
def test_matmul(a: tuple[int, ...], b: tuple[int, ...], const_b: bool) -> None:
    inputs = {"a": a} if const_b else {"a": a, "b": b}
    inits = {"b": r(*b)} if const_b else {}
    m = model([helper.make_node("MatMul", ["a", "b"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
              inputs, ["z"], inits)
    check(m, {name: r(*shape) for name, shape in inputs.items()})


@pytest.mark.parametrize(("x", "y", "const"), [
    ((2, 3, 4), (4,), True),          # a constant along W (not a per-channel one)
    ((2, 3, 4, 5), (3, 1, 1), True),  # per channel, repeated for each image
    ((3, 1, 5), (1, 4, 1), False),    # both operands broadcast
    ((2, 3), (), False),              # a scalar read as SDP's scalar operand
])
@pytest.mark.parametrize("op", ["Sub", "Div", "Max"])
def test_eltwise_broadcasting(op: str, x: tuple[int, ...], y: tuple[int, ...], const: bool) -> None:
    inputs = {"x": x} if const else {"x": x, "k": y}
    inits = {"k": r(*y, positive=True)} if const else {}
    m = model([helper.make_node(op, ["k", "x"], ["z"])], inputs, ["z"], inits)
    feeds = {"x": r(*x)}
    if not const:
        feeds["k"] = r(*y, positive=True)
    check(m, feeds)


def test_activations_batchnorm_and_clip_of_any_rank() -> None:
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["bn"]),
             helper.make_node("LeakyRelu", ["bn"], ["l"], alpha=0.3),
             helper.make_node("Clip", ["l", "lo", "hi"], ["y"])]
    m = model(nodes, {"x": (2, 3, 7), "lo": (), "hi": ()}, ["y"],
              {"g": r(3, positive=True), "b": r(3), "m": r(3), "v": r(3, positive=True)})
    check(m, {"x": r(2, 3, 7), "lo": np.array(-0.4, np.float32), "hi": np.array(0.6, np.float32)})


POOLS = {
    "max-1d": ("MaxPool", (2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "avg-2d-batch": ("AveragePool", (3, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    "max-3d": ("MaxPool", (2, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2],
                                                 pads=[1, 0, 1, 0, 1, 1])),
    "avg-3d-include": ("AveragePool", (1, 2, 5, 4, 6), dict(kernel_shape=[3, 2, 3], strides=[2, 2, 2],
                                                            pads=[1, 1, 1, 1, 0, 1], count_include_pad=1)),
    "max-2d-dilated": ("MaxPool", (2, 2, 8, 7), dict(kernel_shape=[2, 3], dilations=[2, 2],
                                                     pads=[1, 1, 1, 1])),
    "max-3d-dilated-ceil": ("MaxPool", (1, 1, 9, 9, 9), dict(kernel_shape=[3, 3, 2], dilations=[2, 1, 2],
                                                             strides=[2, 2, 3], ceil_mode=1)),
    "global-avg-3d": ("GlobalAveragePool", (2, 3, 4, 5, 6), {}),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_pooling(case: str) -> None:
    op, shape, attrs = POOLS[case]
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": shape}, ["y"])
    result = check(m, {"x": r(*shape)})
    assert ("CPU" in result.operations) == ("dilated" in case)


def test_average_pool_with_dilations_is_a_cpu_run() -> None:
    x = r(2, 1, 9, 9, 8)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3, 2], dilations=[2, 1, 2],
                            strides=[2, 2, 3], pads=[1, 0, 0, 1, 1, 1], ceil_mode=1)
    check(typed_model([node], {"x": x}, {"y": None}, opset=19), {"x": x})


def test_lrn_over_a_batch() -> None:
    m = model([helper.make_node("LRN", ["x"], ["y"], size=3)], {"x": (3, 5, 4, 4)}, ["y"])
    assert check(m, {"x": r(3, 5, 4, 4)}).operations == {"CDP": 3}


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_data_movement_of_any_rank_and_type(dtype: Any) -> None:
    x = (RNG.standard_normal((2, 3, 4, 5)) * 100).astype(dtype)
    z = (RNG.standard_normal((2, 1, 4, 5)) * 100).astype(dtype)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[3, 1, 0, 2]),
             helper.make_node("Concat", ["x", "z"], ["c"], axis=1),
             helper.make_node("Slice", ["c", "s", "e", "a", "st"], ["sl"]),
             helper.make_node("Split", ["x"], ["p", "q"], axis=3, num_outputs=2),
             helper.make_node("Pad", ["x", "pads", "v"], ["pd"]),
             helper.make_node("Pad", ["x", "pads"], ["pw"], mode="wrap"),
             helper.make_node("Reshape", ["x", "shape"], ["rs"]),
             helper.make_node("Identity", ["z"], ["iz"])]
    inits = {"s": np.array([1, 0], np.int64), "e": np.array([4, 5], np.int64),
             "a": np.array([1, 3], np.int64), "st": np.array([2, 2], np.int64),
             "pads": np.array([1, 0, 0, 2, 0, 1, 1, 0], np.int64),
             "v": np.array(7, dtype), "shape": np.array([6, -1], np.int64)}
    outputs = dict.fromkeys(["t", "c", "sl", "p", "q", "pd", "pw", "rs", "iz"])
    m = typed_model(nodes, {"x": x, "z": z}, outputs, inits, opset=18)
    result = check(m, {"x": x, "z": z}, rtol=0, atol=0)
    assert result.operations["CPU"] == 1  # the wrap padding; everything else is BDMA copies


def test_parameters_given_at_run_time_are_read_by_cpu_runs() -> None:
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["sl"]),
             helper.make_node("Pad", ["x", "pads", "v"], ["pd"]),
             helper.make_node("Resize", ["x", "", "sc"], ["rz"], mode="linear")]
    feeds = {"x": r(1, 2, 4, 6), "s": np.array([1, -5], np.int64), "e": np.array([3, 100], np.int64),
             "a": np.array([2, 3], np.int64), "pads": np.array([0, 0, 1, 2, 0, 1, 0, 1], np.int64),
             "v": np.array(0.5, np.float32), "sc": np.array([1, 1, 1.5, 0.5], np.float32)}
    # Computed parameters leave the output shapes to the model: it declares them.
    m = typed_model(nodes, feeds, {"sl": (1, 2, 2, 5), "pd": (1, 3, 5, 9), "rz": (1, 2, 6, 3)})
    assert check(m, feeds).operations == {"CPU": 3}


def test_resize_tf_crop_and_resize_with_constant_roi() -> None:
    node = helper.make_node("Resize", ["x", "roi", "", "sz"], ["y"], mode="linear",
                            coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0)
    m = model([node], {"x": (2, 1, 5, 5)}, ["y"],
              {"roi": np.array([0, 0, -0.2, 0.3, 1, 1, 0.8, 1.2], np.float32),
               "sz": np.array([2, 1, 4, 3], np.int64)})
    check(m, {"x": r(2, 1, 5, 5)})


def test_scalar_inputs_and_outputs_keep_their_shape(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path))
    m = model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (4,), "b": (4,)}, ["y"])
    with Session(m) as sess:
        assert [t.shape for t in sess.outputs] == [()]
        out = sess.run({"a": np.ones(4, np.float32), "b": np.arange(4, dtype=np.float32)})["y"]
    assert out.shape == () and float(out) == 6.0
    # A loadable describes a scalar itself (ndims 0, loadable 1.2.0): the same from the compiled file.
    m = model([helper.make_node("Mul", ["x", "s"], ["y"]), helper.make_node("Relu", ["s"], ["t"])],
              {"x": (2, 3), "s": ()}, ["y", "t"])
    blob = compile_model(m).blob
    with Session(blob) as sess:
        assert [t.shape for t in [*sess.inputs, *sess.outputs]] == [(2, 3), (), (2, 3), ()]
        got = sess.run({"x": np.ones((2, 3), np.float32), "s": np.array(-2.5, np.float32)})
        with pytest.raises(DlaError, match=r"input 's': expected float32 of shape \(\), got .* \(1,\)"):
            sess.run({"x": np.ones((2, 3), np.float32), "s": np.array([-2.5], np.float32)})
    assert got["y"].tolist() == [[-2.5] * 3] * 2 and got["t"].shape == () and float(got["t"]) == 0.0
    desc = Loadable.open(blob).tensors("input")[1]
    assert (desc.dims, desc.strides, desc.size) == ((), (), 4)


def test_fp16_with_a_batch_and_runtime_weights() -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["c", "k"], ["y"])]
    m = model(nodes, {"x": (2, 3, 4, 4), "w": (2, 3, 3, 3), "k": (4, 3)}, ["y"])
    feeds = {"x": r(2, 3, 4, 4), "w": r(2, 3, 3, 3), "k": r(4, 3)}
    check(m, feeds, rtol=3e-2, atol=3e-2, precision="fp16")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_integer_arithmetic_is_exact_on_the_cpu_library(dtype: Any) -> None:
    pool = (helper.make_node("MaxPool", ["m"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
            if dtype in (np.int8, np.uint8) else helper.make_node("Identity", ["m"], ["p"]))  # ONNX's types
    nodes = [helper.make_node("Add", ["x", "k"], ["a"]),
             helper.make_node("Mul", ["a", "s"], ["m"]),
             pool,
             helper.make_node("Clip", ["p", "lo", "hi"], ["c"]),
             helper.make_node("Max", ["c", "x", "k"], ["y"])]
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (2, 3, 4, 4), dtype=dtype, endpoint=True)
    inputs = {"x": x, "s": np.array(3, dtype), "hi": np.array(info.max // 2, dtype)}
    m = typed_model(nodes, inputs, {"y": (2, 3, 4, 4)},
                    {"k": np.array([[[1]], [[7]], [[info.max]]], dtype),
                     "lo": np.array(info.min // 3, dtype)})
    with np.errstate(over="ignore"):
        # The expected values by numpy (wrapping as the type does), then onnxruntime's where it has
        # every kernel (1.23, the last release for Python 3.10, lacks int8 Max).
        k = np.array([[[1]], [[7]], [[info.max]]], dtype)
        mul = (x + k) * inputs["s"]
        if dtype in (np.int8, np.uint8):
            padded = np.pad(mul, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=info.min)
            mul = np.max([padded[:, :, i:i + 4, j:j + 4] for i in range(3) for j in range(3)], axis=0)
        want = np.maximum(np.maximum(np.clip(mul, info.min // 3, inputs["hi"]), x), k)
        with Session(m) as sess:
            got = sess.run(inputs)["y"]
        assert got.dtype == want.dtype and np.array_equal(got, want)
        with contextlib.suppress(ValueError, NotImplementedByOrt):  # no reference for every part
            check(m, inputs, rtol=0, atol=0)


def test_variadic_max_min_sum_mean_are_chains_of_two_input_operations() -> None:
    nodes = [helper.make_node("Max", ["a", "b", "c"], ["mx"]),
             helper.make_node("Min", ["a", "b", "c"], ["mn"]),
             helper.make_node("Sum", ["mx", "mn", "b", "c"], ["sm"]),
             helper.make_node("Mean", ["sm", "a", "c"], ["y"]),
             helper.make_node("Max", ["y"], ["z"])]
    m = model(nodes, {"a": (2, 3), "b": (3,), "c": (2, 1)}, ["y", "mx", "mn", "sm", "z"])
    check(m, {"a": r(2, 3), "b": r(3), "c": r(2, 1)})


def test_integer_div_rounds_toward_zero_and_a_zero_divisor_is_an_error() -> None:
    a = np.array([[-7, 7, -7, 7, 1 - 2**31, 0]], np.int32)
    b = np.array([[2, -2, -2, 2, -1, 5]], np.int32)
    m = typed_model([helper.make_node("Div", ["a", "b"], ["y"])], {"a": a, "b": b}, {"y": (1, 6)})
    check(m, {"a": a, "b": b}, rtol=0, atol=0)
    with Session(compile_model(m).blob) as sess:
        assert sess.run({"a": a, "b": b})["y"].tolist() == [[-3, -3, 3, 3, 2**31 - 1, 0]]
        with pytest.raises(DlaError, match="division by zero"):
            sess.run({"a": a, "b": np.zeros_like(b)})


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_prelu_with_a_runtime_slope_or_one_varying_within_a_channel(precision: str) -> None:
    nodes = [helper.make_node("PRelu", ["x", "s"], ["p"]),
             helper.make_node("PRelu", ["p", "k"], ["y"])]
    m = model(nodes, {"x": (2, 3, 4, 5), "s": (3, 1, 1)}, ["y"],
              {"k": np.linspace(0.1, 0.9, 5, dtype=np.float32)})  # varies along W
    tol = 3e-2 if precision == "fp16" else 1e-5
    check(m, {"x": r(2, 3, 4, 5), "s": r(3, 1, 1)}, rtol=tol, atol=tol, precision=precision)


def test_integer_prelu_with_a_constant_or_runtime_slope() -> None:
    x, slope = np.array([[-5, 3], [7, -2]], np.int32), np.array([2, -3], np.int32)
    node = helper.make_node("PRelu", ["x", "s"], ["y"])
    check(typed_model([node], {"x": x, "s": slope}, {"y": (2, 2)}), {"x": x, "s": slope}, rtol=0, atol=0)
    result = check(typed_model([node], {"x": x}, {"y": (2, 2)}, {"s": slope}), {"x": x}, rtol=0, atol=0)
    assert result.operations == {"CPU": 4}  # min, mul, max, add of integers


_MATMUL = helper.make_node("MatMul", ["x", "w"], ["t"])


@pytest.mark.parametrize(("first", "inits", "shape", "slope", "fused"), [
    # MatMul's cube channels are its output's last axis: a slope along axis 1 is not fusable (here
    # both have 3 entries, which once fused it wrongly), one along the last axis is.
    (_MATMUL, {"w": RNG.standard_normal((6, 3))}, (2, 3, 8, 6), (3, 1, 1), False),
    (_MATMUL, {"w": RNG.standard_normal((6, 3))}, (2, 3, 8, 6), (3,), True),
    (helper.make_node("Conv", ["x", "w"], ["t"], pads=[0, 1, 1, 0, 1, 1]),
     {"w": RNG.standard_normal((4, 3, 1, 3, 3))}, (2, 3, 4, 5, 5), (4, 1, 1, 1), True),
    (helper.make_node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2]),
     {"w": RNG.standard_normal((3, 4, 2, 2))}, (2, 3, 4, 5), (4, 1, 1), True),
    (helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]),
     {"w": RNG.standard_normal((4, 3, 3, 3))}, (2, 3, 4, 5), (1, 5), False),
])
def test_prelu_after_a_convolution_or_product_is_fused_only_per_channel(
        first: Any, inits: dict[str, Any], shape: tuple[int, ...], slope: tuple[int, ...],
        fused: bool) -> None:
    nodes = [first, helper.make_node("PRelu", ["t", "s"], ["y"])]
    values = {**inits, "s": np.abs(RNG.standard_normal(slope)) * 0.5}
    result = check(model(nodes, {"x": shape}, ["y"], values), {"x": r(*shape)})
    sdp = result.operations.get("SDP", 0)
    assert (sdp == result.operations.get("CONV", 0)) == fused, result.operations


def test_dropout_mask_and_constant_outputs_are_copied_from_the_weights() -> None:
    nodes = [helper.make_node("Dropout", ["x", "ratio"], ["d", "mask"]),
             helper.make_node("Relu", ["d"], ["y"]),
             helper.make_node("Shape", ["x"], ["shape"])]
    m = typed_model(nodes, {"x": r(2, 3, 4)}, {"y": (2, 3, 4), "mask": (2, 3, 4), "shape": (3,)},
                    {"ratio": np.array(0.5, np.float32)})
    m.graph.output[1].type.tensor_type.elem_type = TensorProto.BOOL
    m.graph.output[2].type.tensor_type.elem_type = TensorProto.INT64
    for precision in ("fp32", "fp16"):
        check(m, {"x": r(2, 3, 4)}, rtol=1e-2, atol=1e-2, precision=precision)
    with Session(compile_model(m).blob) as sess:
        got = sess.run({"x": r(2, 3, 4)})
    assert got["mask"].dtype == np.bool_ and got["mask"].all() and got["shape"].tolist() == [2, 3, 4]


@pytest.mark.parametrize(("training", "message"), [
    ({"t": np.array(True)}, "training_mode true"),
    (None, "given at run time"),
])
def test_dropout_in_training_mode_is_refused(training: Any, message: str) -> None:
    node = helper.make_node("Dropout", ["x", "", "t"], ["y"])
    inputs = {"x": r(2, 3)} if training else {"x": r(2, 3), "t": np.array(True)}
    with pytest.raises(DlaError, match=message) as e:
        compile_model(typed_model([node], inputs, {"y": (2, 3)}, training))
    assert e.value.code == NvError.NotSupported


def test_a_model_of_only_constant_outputs_copies_them() -> None:
    """Its outputs are known when compiling: the loadable copies them into place (BDMA); the input
    is still the model's, and checked, though nothing reads it."""
    node = helper.make_node("Shape", ["x"], ["y"])
    m = typed_model([node], {"x": r(2, 3)}, {"y": (2,)})
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    result = compile_model(m)
    assert result.operations == {"BDMA": 1}
    with Session(result.blob) as sess:
        assert [t.name for t in sess.inputs] == ["x"]
        got = sess.run({"x": r(2, 3)})["y"]
        assert got.dtype == np.int64 and got.tolist() == [2, 3]
        with pytest.raises(DlaError, match="expected float32 of shape"):
            sess.run({"x": r(3, 2)})


@pytest.mark.parametrize(("op", "attrs", "size", "opset"), [
    ("MaxPool", dict(kernel_shape=[1, 1], strides=[2, 2]), 8, 17),  # inference: 5, computed: 4
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1), 5, 13),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1]), 5, 22),
])
@pytest.mark.parametrize("declared", [False, True])
def test_ceil_mode_drops_the_window_that_starts_in_the_padding(op: str, attrs: dict[str, Any], size: int,
                                                               opset: int, declared: bool) -> None:
    """As onnx's reference and onnxruntime compute it at every opset (onnx's shape inference counts
    that window before opset 22); also when an earlier shape inference stored its wrong shapes in the
    model (value_info and the output's declared shape)."""
    from onnx import shape_inference

    nodes = [helper.make_node(op, ["x"], ["p"], ceil_mode=1, **attrs), helper.make_node("Relu", ["p"], ["y"])]
    m = model(nodes, {"x": (1, 2, size, size)}, ["y"], opset=opset)
    if opset >= 21:
        m.ir_version = 10
    if declared:
        m = shape_inference.infer_shapes(m)  # the wrong shapes, for opsets before 22
    x = r(1, 2, size, size)
    result = check(m, {"x": x})
    assert result.operations.get("PDP", 0) >= 1
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    with Session(result.blob) as sess:
        assert sess.outputs[0].shape == want.shape


def test_ceil_mode_with_a_padding_window_on_one_axis_only_is_refused_before_opset_22() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 1, 0],
                            ceil_mode=1)
    with pytest.raises(DlaError, match="some axes and one that does not on others") as e:
        compile_model(model([node], {"x": (1, 1, 5, 6)}, ["y"], opset=17))
    assert e.value.code == NvError.NotSupported
    m = model([node], {"x": (1, 1, 5, 6)}, ["y"], opset=22)
    m.ir_version = 10
    check(m, {"x": r(1, 1, 5, 6)})  # opset 22's shape inference is right: nothing to rewrite


@pytest.mark.parametrize(("nodes", "shapes", "message"), [
    ([helper.make_node("Relu", ["x"], ["y"])], {"x": np.zeros((2, 3), np.int32)}, "floating point"),
    ([helper.make_node("Sigmoid", ["x"], ["y"])], {"x": np.zeros((2, 3), np.int64)}, "floating point"),
    ([helper.make_node("Relu", ["x"], ["y"])], {"x": np.zeros((2, 3), np.float64)}, "float32 models"),
    ([helper.make_node("Conv", ["x", "w"], ["y"])],
     {"x": np.zeros((1, 1, 2, 2, 3, 3), np.float32), "w": np.zeros((1, 1, 1, 1, 1, 1), np.float32)},
     "3-D images"),
    ([helper.make_node("Gemm", ["x", "w", "c"], ["y"])],  # (c given at run time: nothing to fold)
     {"x": np.zeros((2, 0), np.float32), "w": np.zeros((0, 3), np.float32),
      "c": np.zeros((2, 3), np.float32)},
     r"\(empty\) and an output has"),
])
def test_what_stays_unsupported_says_why(nodes: list[Any], shapes: dict[str, np.ndarray],
                                         message: str) -> None:
    with pytest.raises(DlaError, match=message) as e:
        compile_model(typed_model(nodes, shapes, {"y": None}))
    assert e.value.code == NvError.NotSupported


def test_layout_helpers() -> None:
    assert flat_cube((2, 3, 4, 5), "t") == (6, 4, 5)
    assert flat_cube((2, 3), "t") == (6, 1, 1)
    assert flat_cube((), "t") == (1, 1, 1)
    assert flat_cube((1, 1 << 17), "t") == (1, 2, 1 << 16)  # too wide for a cube: refactored
    # A transpose of (2, 3, 4) by (2, 0, 1): the last two axes merge; lines of one element.
    (t,) = copy_plan((4, 2, 3), (4, 48, 16), (24, 12, 4), 4, "t")
    assert (t.line_bytes, t.lines, t.surfaces) == (4, 6, 4)
    # A dense copy merges into one line.
    (one,) = copy_plan((2, 3, 4), (48, 16, 4), (48, 16, 4), 4, "t")
    assert one.line_bytes == 96 and one.lines == one.surfaces == 1


@pytest.mark.parametrize(("op", "attrs", "w_shape"), [
    ("Conv", dict(pads=[1, 0, 1, 2, 1, 0], strides=[2, 1, 1], dilations=[2, 1, 1]), (4, 3, 3, 2, 3)),
    ("Conv", dict(group=3, strides=[1, 2, 2]), (3, 1, 2, 3, 3)),
    ("ConvTranspose", dict(strides=[2, 1, 2], output_padding=[1, 0, 1], pads=[1, 0, 0, 0, 1, 1]),
     (3, 2, 3, 2, 2)),
])
@pytest.mark.parametrize("runtime_weights", [False, True])
def test_3d_convolution_as_sums_of_2d_ones(op: str, attrs: dict[str, Any], w_shape: tuple[int, ...],
                                            runtime_weights: bool) -> None:
    x, w, b = r(2, 3, 4, 5, 6), r(*w_shape), r(w_shape[1] * attrs.get("group", 1) if op == "ConvTranspose"
                                             else w_shape[0])
    nodes = [helper.make_node(op, ["x", "w", "b"], ["c"], **attrs), helper.make_node("Relu", ["c"], ["y"])]
    if runtime_weights:
        m = model(nodes, {"x": x.shape, "w": w.shape, "b": b.shape}, ["y"])
        check(m, {"x": x, "w": w, "b": b})
    else:
        check(model(nodes, {"x": x.shape}, ["y"], {"w": w, "b": b}), {"x": x})


def test_maxpool_indices_output_is_a_cpu_run() -> None:
    x = r(2, 3, 6, 7)
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 2],
                              pads=[1, 0, 1, 1], storage_order=1),
             helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                              [helper.make_tensor_value_info("z", 1, None),
                               helper.make_tensor_value_info("i", 7, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    assert check(m, {"x": x}, rtol=0, atol=0).operations == {"CPU": 1, "SDP": 1}


def test_malformed_models_are_dlaerrors() -> None:
    dangling = model([helper.make_node("Relu", ["nowhere"], ["y"])], {"x": (1, 2)}, ["y"])
    with pytest.raises(DlaError, match="input 'nowhere' is not a graph input") as e:
        compile_model(dangling)
    assert e.value.code == NvError.BadValue
    bad_attr = model([helper.make_node("LRN", ["x"], ["y"], size=3)], {"x": (1, 2, 3, 3)}, ["y"])
    bad_attr.graph.node[0].attribute.append(helper.make_attribute("beta", "text"))
    with pytest.raises(DlaError, match=r"node 'LRN_0' \(LRN\): .*beta.*'FLOAT', actual: 'STRING'") as e:
        compile_model(bad_attr)
    assert e.value.code == NvError.BadValue


@pytest.mark.parametrize(("attrs", "message"), [
    ({"stride": [2, 2]}, r"Unrecognized attribute: stride for operator Conv"),  # a typo of strides
    ({"strides": [1.0, 1.0]}, r"Mismatched attribute type in 'c1 : strides'.*'INTS', actual: 'FLOATS'"),
    ({"kernel_shape": [5, 5]}, r"kernel_shape \[5, 5\], but the weights \(4, 2, 3, 3\) have a 3x3 kernel"),
    ({"group": 0}, r"group 0 must be at least 1"),
    ({"group": 3}, r"2 input channels in 3 groups"),
    ({"auto_pad": "SAME"}, r"auto_pad 'SAME' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"),
])
def test_bad_conv_attributes_are_named_at_compile_time(attrs: dict[str, Any], message: str) -> None:
    """Attributes onnx's schema or pydla's own checks refuse are a BadValue naming the node, before
    anything reaches the device (a misspelled attribute is not silently replaced by its default)."""
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], name="c1", **attrs)], {"x": (1, 2, 8, 8)}, ["y"],
              inits={"w": np.ones((4, 2, 3, 3), np.float32)})
    with pytest.raises(DlaError, match=r"node 'c1' \(Conv\): " + message) as e:
        compile_model(m)
    assert e.value.code == NvError.BadValue


def test_bad_conv_transpose_and_pool_attributes_are_named() -> None:
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="d1", kernel_shape=[2, 2])],
              {"x": (1, 3, 5, 5)}, ["y"], inits={"w": np.ones((3, 4, 3, 3), np.float32)})
    with pytest.raises(DlaError, match=r"'d1' \(ConvTranspose\): kernel_shape \[2, 2\], but the weights"):
        compile_model(m)
    m = model([helper.make_node("MaxPool", ["x"], ["y"], name="p1", kernel_shape=[2, 2], auto_pad="same")],
              {"x": (1, 3, 5, 5)}, ["y"])
    with pytest.raises(DlaError, match=r"node 'p1' \(MaxPool\): auto_pad 'same' is not one of"):
        compile_model(m)
    m = model([helper.make_node("MaxPool", ["x"], ["y"], name="p2")], {"x": (1, 3, 5, 5)}, ["y"])
    with pytest.raises(DlaError, match=r"'p2' \(MaxPool\): Required attribute 'kernel_shape' is missing"):
        compile_model(m)


def test_element_wise_math_without_a_device_form_is_a_cpu_run() -> None:
    """A MobileNet-v3 block (HardSwish, a squeeze-excite gate with HardSigmoid: these two on SDP)
    and a chain of math the device's blocks have no form for, against onnxruntime: Sqrt, Exp, Log and
    Erf on the SHAVE tiles, Selu and Gelu's tanh form as CPU runs between the NPU tasks."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c"], ["h"]),
             helper.make_node("GlobalAveragePool", ["h"], ["g"]),
             helper.make_node("HardSigmoid", ["g"], ["gate"], alpha=0.25),
             helper.make_node("Mul", ["h", "gate"], ["se"]),
             helper.make_node("Abs", ["se"], ["a"]),
             helper.make_node("Sqrt", ["a"], ["s"]),
             helper.make_node("Exp", ["s"], ["e"]),
             helper.make_node("Log", ["e"], ["l"]),
             helper.make_node("Erf", ["l"], ["f"]),
             helper.make_node("Selu", ["f"], ["u"], gamma=2.0),
             helper.make_node("Gelu", ["u"], ["y"], approximate="tanh")]
    m = model(nodes, {"x": (2, 3, 6, 6)}, ["y"], {"w": r(4, 3, 3, 3)}, opset=20)
    result = check(m, {"x": r(2, 3, 6, 6)})
    assert (result.operations["SHAVE"], result.operations["CPU"]) == (4, 2)
    with pytest.raises(DlaError, match=r"Gelu is not an operator of the model's opset 17 "
                                       r"\(it first appears in opset 20\)") as e:
        compile_model(model([helper.make_node("Gelu", ["x"], ["y"])], {"x": (2, 3)}, ["y"], opset=17))
    assert e.value.code == NvError.BadValue
    x = np.array([[1, -2, 3]], np.int32)
    with pytest.raises(DlaError, match=r"Sign of a int32 tensor: pydla computes it on floating-point"):
        compile_model(typed_model([helper.make_node("Sign", ["x"], ["y"])], {"x": x}, {"y": (1, 3)}))


def test_reductions_with_constant_or_run_time_axes() -> None:
    """An EfficientNet-style squeeze-excite gate (ReduceMean over H and W, opset 13 attribute axes:
    PDP's whole-map pooling) and ReduceSum with its axes as a constant input and as a graph input
    read at run time: adjacent constant axes on the SHAVE tiles, the others (and integer tensors)
    CPU runs."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1),
             helper.make_node("Sigmoid", ["m"], ["g"]),
             helper.make_node("Mul", ["x", "g"], ["y"]),
             helper.make_node("ReduceSum", ["y", "k"], ["s"], keepdims=0),
             helper.make_node("ReduceL2", ["x"], ["l2"], axes=[-1], keepdims=0)]
    m = model(nodes, {"x": (2, 3, 4, 5)}, ["y", "s", "l2"], {"k": np.array([1, -1], np.int64)})
    result = check(m, {"x": r(2, 3, 4, 5)})
    assert (result.operations["SHAVE"], result.operations["CPU"]) == (1, 1)  # ReduceSum's axes 1, 3
    assert result.operations["PDP"] == 1  # the mean over H and W
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)]
    axes = np.array([0, 2], np.int64)
    m = typed_model(nodes, {"x": r(3, 4, 5), "axes": axes}, {"y": (1, 4, 1)}, opset=13)
    check(m, {"x": r(3, 4, 5), "axes": axes})
    x = np.arange(-12, 12, dtype=np.int32).reshape(2, 3, 4)
    m = typed_model([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)], {"x": x},
                    {"y": (2, 4)}, opset=13)
    check(m, {"x": x}, rtol=0, atol=0)


def test_layer_norm_decomposed_as_exported_runs_with_pow_by_two_on_sdp() -> None:
    """LayerNorm as exporters write it (ReduceMean, Sub, Pow 2, ReduceMean, Add, Sqrt, Div, Mul, Add):
    Pow by 2 is x * x on SDP, Pow by 0.5 is Sqrt (on a SHAVE tile), other exponents are CPU runs; the
    means over the last axis are MatMuls by a column of 1 / D on the device."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Pow", ["ve", "half"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]),
             helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["y"]),
             helper.make_node("Pow", ["y", "three"], ["cube"])]
    consts = {"two": np.array(2.0, np.float32), "half": np.array(0.5, np.float32),
              "three": np.array(3.0, np.float32), "eps": np.array(1e-5, np.float32), "g": r(8), "b": r(8)}
    m = model(nodes, {"x": (2, 5, 8)}, ["y", "cube"], consts)
    result = check(m, {"x": r(2, 5, 8)})
    assert (result.operations["SHAVE"], result.operations["CPU"]) == (1, 1)  # the square root, the cube


def test_comparisons_where_cast_and_argmax_are_cpu_runs() -> None:
    """A classifier's post-processing: ArgMax of the scores, a mask from comparisons and logic,
    Where picking between two tensors, Casts both ways."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["hi"]),
             helper.make_node("LessOrEqual", ["x", "u"], ["lo"]),
             helper.make_node("And", ["hi", "lo"], ["band"]),
             helper.make_node("Not", ["band"], ["out"]),
             helper.make_node("Where", ["band", "x", "z"], ["w"]),
             helper.make_node("ArgMax", ["w"], ["am"], axis=-1, keepdims=0, select_last_index=1),
             helper.make_node("Cast", ["am"], ["amf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT32)]
    x = np.round(r(2, 3, 6) * 4) / 4  # ties for select_last_index
    graph = helper.make_graph(
        nodes, "post", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("out", TensorProto.BOOL),
                                                                 ("w", TensorProto.FLOAT),
                                                                 ("amf", TensorProto.FLOAT),
                                                                 ("xi", TensorProto.INT32))],
        [numpy_helper.from_array(np.float32(v), n) for n, v in (("t", -0.5), ("u", 0.75), ("z", 9.0))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    result = check(m, {"x": x}, rtol=0, atol=0)
    assert result.operations["CPU"] == 8


def test_a_model_of_an_old_opset_is_upgraded_by_onnx_version_converter() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Clip", ["r"], ["y"], min=0.0, max=0.5)]
    m = model(nodes, {"x": (2, 3)}, ["y"], opset=7)
    check(m, {"x": r(2, 3)})


def test_gather_expand_tile_and_a_gather_index_out_of_range_is_an_error() -> None:
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=1),
             helper.make_node("Expand", ["g", "shape"], ["e"]),
             helper.make_node("Tile", ["e", "reps"], ["y"])]
    x, i = r(2, 5, 3), np.array([[4, -1], [0, 2]], np.int64)
    m = typed_model(nodes, {"x": x, "i": i}, {"y": (4, 2, 2, 6)},
                    {"shape": np.array([2, 2, 2, 3], np.int64), "reps": np.array([2, 1, 1, 2], np.int64)})
    check(m, {"x": x, "i": i})
    with Session(compile_model(m).blob) as sess:
        with pytest.raises(DlaError, match=r"gather index 5 outside -5..4") as e:
            sess.run({"x": x, "i": np.array([[5, 0], [0, 0]], np.int64)})
        assert e.value.code == NvError.BadValue
        np.testing.assert_allclose(sess.run({"x": x, "i": i})["y"], reference(m, {"x": x, "i": i})["y"])


def test_inputs_of_one_type_parameter_must_have_one_type() -> None:
    """Gemm's A, B and C are all "T": a float64 weight beside a float32 input is refused (onnxruntime
    refuses it too) rather than quietly converted."""
    m = model([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fc")], {"x": (2, 3)}, ["y"],
              {"w": np.ones((4, 3), np.float64)})
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((4, 3), np.float64), "w"))
    with pytest.raises(DlaError, match=r"node 'fc' \(Gemm\): 'x' is float and 'w' is double, but Gemm takes "
                                       r"one type for both \(T\)") as e:
        compile_model(m)
    assert e.value.code == NvError.BadValue


def test_a_shape_input_that_is_not_1d_is_refused() -> None:
    m = model([helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
              {"x": (2, 6)}, ["y"], {"s": np.array([[3, 4]], np.int64)})
    with pytest.raises(DlaError, match=r"'s' has shape \(1, 2\); Reshape takes it as a 1-D tensor") as e:
        compile_model(m)
    assert e.value.code == NvError.BadValue


def test_clip_bounds_are_one_value() -> None:
    """ONNX defines Clip's min and max as scalars; one element of another shape is taken (as
    onnxruntime takes it), more than one is refused (it was a TypeError)."""
    x = r(2, 3)
    node = helper.make_node("Clip", ["x", "lo"], ["y"])
    check(model([node], {"x": (2, 3)}, ["y"], {"lo": np.array([0.25], np.float32)}), {"x": x})
    with pytest.raises(DlaError, match=r"min has shape \(2,\); a scalar is expected") as e:
        compile_model(model([node], {"x": (2, 3)}, ["y"], {"lo": np.array([0.0, 1.0], np.float32)}))
    assert e.value.code == NvError.BadValue


@pytest.mark.parametrize(("nodes", "outputs"), [
    ([], ["x"]),  # the model returns its input
    ([helper.make_node("Relu", ["x"], ["y"])], ["y", "x"]),
    ([helper.make_node("Relu", ["x"], ["y"])], ["y", "y"]),  # one tensor, two outputs
])
def test_an_output_that_is_an_input_or_a_repeated_output_is_written(nodes: list[Any],
                                                                     outputs: list[str]) -> None:
    """Each such output gets its own copy (its buffer was left as allocated: zeros)."""
    graph = helper.make_graph(nodes, "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = r(2, 3)
    with Session(compile_model(m).blob) as sess:
        assert [t.name for t in sess.outputs] == outputs
        got = sess.run({"x": x})
    if "x" in outputs:
        np.testing.assert_array_equal(got["x"], x)
    if "y" in outputs:
        np.testing.assert_array_equal(got["y"], np.maximum(x, 0))


def test_the_input_as_an_output_declared_without_a_shape_keeps_its_shape() -> None:
    """onnx's shape inference takes the output entry's (absent) shape for the input too, and every
    node reading it lost its shape ("not static"); the compiler now declares it as the input."""
    nodes = [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Relu", ["f"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    graph = helper.make_graph(nodes, "test", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    check(m, {"x": r(2, 3, 4)})


def test_batch_norm_with_statistics_given_at_run_time_writes_the_output() -> None:
    """Its scale and shift are a CPU run, which ends the NPU task in which the cubes were made: the
    next task must still address the output (a KeyError 'out0' before)."""
    nodes = [helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("BatchNormalization", ["t", "g", "b", "m", "v"], ["y"], epsilon=1e-3)]
    graph = helper.make_graph(
        nodes, "test", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                        for n, s in (("x", [2, 3, 4, 5]), ("m", [3]), ("v", [3]))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(r(3), "g"), numpy_helper.from_array(r(3), "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    check(m, {"x": r(2, 3, 4, 5), "m": r(3), "v": r(3, positive=True)})
