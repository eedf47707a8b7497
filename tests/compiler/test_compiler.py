"""The compiler: each operator lowered, compiled into a loadable, run through the KMD on the virtual
device and compared with onnxruntime; fusion, folding of shape subgraphs, memory planning, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.compiler.api import compile_model
from pydla.loadable.container import Loadable
from tests.compiler.support import model, reference, run_loadable

RNG = np.random.default_rng(11)


def r(*shape: int, positive: bool = False) -> np.ndarray:
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def check(m, feeds, rtol: float = 1e-4, atol: float = 1e-4):
    result = compile_model(m)
    got = run_loadable(result.blob, feeds)
    want = reference(m, feeds)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)
    return result


def conv_case(**attrs):
    c_in = 4
    groups = attrs.get("group", 1)
    k = attrs.pop("k", 6)
    kernel = attrs.pop("kernel", (3, 3))
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], **attrs)]
    return model(nodes, {"x": (1, c_in, 11, 9)}, ["y"], {"W": r(k, c_in // groups, *kernel), "B": r(k)})


CONVS = {
    "plain": {},
    "stride-pads": dict(strides=[2, 2], pads=[1, 0, 2, 1]),
    "dilation": dict(dilations=[2, 1], pads=[2, 1, 2, 1]),
    "groups": dict(group=2),
    "depthwise": dict(group=4, k=4),
    "1x1": dict(kernel=(1, 1)),
    "stride-beyond-kernel": dict(kernel=(2, 2), strides=[3, 3]),
    "non-square": dict(kernel=(1, 5), pads=[0, 2, 0, 2]),
    "same-upper": dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    "same-lower": dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    "valid": dict(auto_pad="VALID"),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_conv(case: str) -> None:
    check(conv_case(**dict(CONVS[case])), {"x": r(1, 4, 11, 9)})


def test_conv_transpose() -> None:
    nodes = [helper.make_node("ConvTranspose", ["x", "W", "B"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                              output_padding=[1, 1], group=2)]
    m = model(nodes, {"x": (1, 4, 5, 6)}, ["y"], {"W": r(4, 3, 3, 3), "B": r(6)})
    check(m, {"x": r(1, 4, 5, 6)})


def test_conv_bn_add_relu_fuse_into_one_pair() -> None:
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"], epsilon=1e-3),
             helper.make_node("Add", ["bn", "x"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    m = model(nodes, {"x": (1, 4, 6, 6)}, ["y"],
              {"W": r(4, 4, 3, 3), "g": r(4, positive=True), "b": r(4), "m": r(4), "v": r(4, positive=True)})
    result = check(m, {"x": r(1, 4, 6, 6)})
    assert result.operations == {"CONV": 1, "SDP": 1}


@pytest.mark.parametrize("batch", [1, 2])
def test_wide_convolutions_get_tap_major_weights(batch: int) -> None:
    """From the configuration's tap_major_min_channels input channels, 3x3 convolutions (stride 1 and
    2) of wide enough lines are compiled with RSKC weights, which the device runs as shift-GEMM; 1x1,
    grouped and narrow ones keep KCRS. The numbers agree."""
    from pydla.deviceapi.generated import dla_regs as R
    from pydla.deviceapi.generated import dla_task as T
    from pydla.deviceapi.generated.device_api import dla_block_e
    from pydla.firmware.graph import OP_DESC_SIZE
    from pydla.target.config import load_config

    cfg = load_config("full")
    c = cfg.tap_major_min_channels
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "g", "b", "m", "v"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["x", "W3"], ["c3"], strides=[2, 2]),
             helper.make_node("Add", ["c2", "c3"], ["a"]),
             helper.make_node("Conv", ["a", "W4"], ["c4"], pads=[1, 1, 1, 1], group=2),
             helper.make_node("Conv", ["c4", "W5"], ["y"], pads=[1, 1, 1, 1])]
    def w(*shape: int) -> np.ndarray:  # He-scaled, so values stay near 1 through the layers
        return r(*shape) / np.float32(np.sqrt(np.prod(shape[1:])))

    width = 14  # stride 1: 2 extra columns on 14, stride 2: 1 on 7 (both <= 15%)
    assert cfg.tap_major_pays(3, 1, 1, width) and cfg.tap_major_pays(3, 1, 2, width // 2)
    assert not cfg.tap_major_pays(3, 1, 2, 6) and not cfg.tap_major_pays(3, 1, 1, 7)  # 1/6, 2/7 > 15%
    assert cfg.tap_major_max_extra < 1 / 6
    m = model(nodes, {"x": (batch, c, 9, width)}, ["y"],
              {"W1": w(c, c, 3, 3), "B1": r(c), "g": r(c, positive=True), "b": r(c), "m": r(c),
               "v": r(c, positive=True), "W2": w(24, c, 3, 3), "B2": r(24), "W3": w(24, c, 1, 1),
               "W4": w(24, 12, 3, 3), "W5": w(8, 24, 3, 3)})
    result = check(m, {"x": r(batch, c, 9, width)})
    formats = []
    for code in Loadable.open(result.blob)._ctrl.values():
        ops = bytes(code.sections[".dla.ops"])
        for i, op_type in enumerate(code.op_types()):
            if op_type == dla_block_e.CONV:
                desc = T.dla_conv_op_desc_t.from_buffer_copy(ops, i * OP_DESC_SIZE)
                formats.append((desc.kernel_height * desc.kernel_width, desc.groups, desc.kernel_channels,
                                R.conv_weight_format_e(desc.weight_format).name))
    # Tap-major for the two 3x3 of wide enough lines (stride 1 and 2); the 1x1, the grouped one and
    # the last (stride 1 on lines of 7: 2 extra columns per 7) keep KCRS.
    expected = [(9, 1, c, "RSKC"), (9, 1, c, "RSKC"), (1, 1, c, "KCRS"), (9, 2, 12, "KCRS"),
                (9, 1, 24, "KCRS")]
    assert sorted(formats) == sorted(expected * batch)  # one of each per image of the batch


@pytest.mark.parametrize("act", ["Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "PRelu"])
@pytest.mark.parametrize("fused", [True, False])
def test_activations(act: str, fused: bool) -> None:
    inits = {"W": r(3, 3, 1, 1)}
    extra: list[str] = []
    attrs = {}
    if act == "LeakyRelu":
        attrs["alpha"] = 0.2
    if act == "Clip":
        inits.update(lo=np.array(-0.5, np.float32), hi=np.array(0.7, np.float32))
        extra = ["lo", "hi"]
    if act == "PRelu":
        inits["s"] = r(3, 1, 1)
        extra = ["s"]
    src = "c" if fused else "x"
    nodes = ([helper.make_node("Conv", ["x", "W"], ["c"])] if fused else []) + [
        helper.make_node(act, [src, *extra], ["y"], **attrs)]
    used = inits if fused else {k: v for k, v in inits.items() if k != "W"}
    m = model(nodes, {"x": (1, 3, 4, 5)}, ["y"], used)
    result = check(m, {"x": r(1, 3, 4, 5)})
    assert result.operations == ({"CONV": 1, "SDP": 1} if fused else {"SDP": 1})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("operand", ["scalar", "per-channel", "full", "tensor", "const-first"])
def test_eltwise(op: str, operand: str) -> None:
    shapes = {"scalar": (), "per-channel": (1, 3, 1, 1), "full": (1, 3, 4, 5), "const-first": (1, 3, 1, 1)}
    inputs = {"x": (1, 3, 4, 5)}
    feeds = {"x": r(1, 3, 4, 5)}
    inits = {}
    if operand == "tensor":
        inputs["z"] = (1, 3, 4, 5)
        feeds["z"] = r(1, 3, 4, 5, positive=True)
        names = ["x", "z"]
    else:
        inits["k"] = r(*shapes[operand], positive=True) if shapes[operand] else np.array(1.5, np.float32)
        names = ["k", "x"] if operand == "const-first" else ["x", "k"]
    m = model([helper.make_node(op, names, ["y"])], inputs, ["y"], inits)
    check(m, feeds)


def test_batchnorm_alone() -> None:
    m = model([helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])], {"x": (1, 3, 4, 4)},
              ["y"], {"g": r(3, positive=True), "b": r(3), "m": r(3), "v": r(3, positive=True)})
    check(m, {"x": r(1, 3, 4, 4)})


POOLS = {
    "max": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max-ceil": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "avg": ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    "avg-pad-exclude": ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    "avg-pad-include": ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                            count_include_pad=1)),
    "avg-ceil": ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    "global-avg": ("GlobalAveragePool", {}),
    "global-max": ("GlobalMaxPool", {}),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_pools(case: str) -> None:
    op, attrs = POOLS[case]
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": (1, 3, 9, 7)}, ["y"])
    check(m, {"x": r(1, 3, 9, 7)})


def test_lrn() -> None:
    m = model([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=1e-3, beta=0.75, bias=2.0)],
              {"x": (1, 6, 4, 4)}, ["y"])
    check(m, {"x": r(1, 6, 4, 4)})


@pytest.mark.parametrize("variant", ["gemm-transB", "gemm-alpha-beta", "matmul"])
def test_fully_connected(variant: str) -> None:
    if variant == "matmul":
        nodes = [helper.make_node("MatMul", ["x", "B"], ["y"])]
        inits = {"B": r(12, 5)}
    elif variant == "gemm-transB":
        nodes = [helper.make_node("Gemm", ["x", "B", "C"], ["y"], transB=1)]
        inits = {"B": r(5, 12), "C": r(5)}
    else:
        nodes = [helper.make_node("Gemm", ["x", "B", "C"], ["y"], alpha=0.5, beta=2.0)]
        inits = {"B": r(12, 5), "C": r(1, 5)}
    m = model(nodes, {"x": (1, 12)}, ["y"], inits)
    check(m, {"x": r(1, 12)})


def test_concat_transpose_and_aliases() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Sigmoid", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Identity", ["t"], ["i"]),
             helper.make_node("Flatten", ["i"], ["y"])]
    m = model(nodes, {"x": (1, 2, 3, 4)}, ["y"])
    check(m, {"x": r(1, 2, 3, 4)})


def test_shape_subgraph_is_folded() -> None:
    """Reshape to a shape computed from Shape/Gather/Concat, as exported models do."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Shape", ["a"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["a", "shape"], ["y"])]
    m = model(nodes, {"x": (1, 3, 2, 2)}, ["y"],
              {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64),
               "minus1": np.array([-1], np.int64)})
    result = check(m, {"x": r(1, 3, 2, 2)})
    assert result.operations == {"SDP": 1}


def test_memory_plan_reuses_scratch() -> None:
    nodes = [helper.make_node("Relu" if i % 2 else "Sigmoid", [f"t{i}"], [f"t{i + 1}"]) for i in range(8)]
    nodes[0].input[0] = "x"
    nodes[-1].output[0] = "y"
    m = model(nodes, {"x": (1, 4, 16, 16)}, ["y"])
    result = check(m, {"x": r(1, 4, 16, 16)})
    tensor = 4 * 16 * 16 * 4
    assert result.memory.total == 7 * tensor
    assert result.memory.peak == 2 * tensor  # two tensors alive at a time
    assert "saved" in result.memory.report()


def test_unsupported_operator_names_the_node() -> None:
    m = model([helper.make_node("Hardmax", ["x"], ["y"], name="pick")], {"x": (1, 4)}, ["y"])
    with pytest.raises(DlaError) as e:
        compile_model(m)
    assert e.value.code == NvError.NotSupported
    assert "node 'pick' (Hardmax)" in str(e.value)


def test_batch_two_folds_into_the_channels_of_one_operation() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], {"x": (2, 3, 4, 4)}, ["y"])
    assert check(m, {"x": r(2, 3, 4, 4)}).operations == {"SDP": 1}


def test_dynamic_input_shape_is_refused() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(DlaError, match="static shapes"):
        compile_model(m)


def test_an_old_opset_is_upgraded_or_refused_with_the_reason() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], {"x": (1, 3)}, ["y"], opset=9)
    assert compile_model(m).operations == {"SDP": 1}  # upgraded to opset 11 by onnx's converter
    m = model([helper.make_node("Frobnicate", ["x"], ["y"])], {"x": (1, 3)}, ["y"], opset=9)
    with pytest.raises(DlaError, match=r"node 'Frobnicate_0' \(Frobnicate\): Frobnicate is not an ONNX "
                                       r"operator \(the model's opset 9 is upgraded to 11 first\)") as e:
        compile_model(m)
    assert e.value.code == NvError.NotSupported
    m = model([helper.make_node("Relu", ["x"], ["y"])], {"x": (1, 3)}, ["y"], opset=0)
    with pytest.raises(DlaError, match=r"opset_import: domain '' \(ONNX\) version 0: opset versions start "
                                       r"at 1"):
        compile_model(m)


def test_compile_and_info_commands(tmp_path: Path, capsys) -> None:
    import onnx

    path = tmp_path / "net.onnx"
    onnx.save(conv_case(strides=[2, 2]), str(path))
    assert main(["compile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "net.dla" in out and "device operations (CONV 1, SDP 1)" in out
    lo = Loadable.open(tmp_path / "net.dla")
    assert [t.name for t in lo.tensors("input")] == ["x"]
    assert main(["info", str(tmp_path / "net.dla")]) == 0
    assert "npu task task0: 2 operations" in capsys.readouterr().out
    assert main(["compile", str(tmp_path / "missing.onnx")]) == 1


def test_residual_with_projection_shortcut_first() -> None:
    """Exporters often emit the shortcut's convolution before the main branch: the Add must fuse into
    the branch's last convolution (computed last), never into the shortcut's."""
    nodes = [helper.make_node("Conv", ["x", "Ws", "Bs"], ["s"], strides=[2, 2]),
             helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "s"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    m = model(nodes, {"x": (1, 4, 8, 8)}, ["y"],
              {"Ws": r(6, 4, 1, 1), "Bs": r(6), "W1": r(6, 4, 3, 3), "B1": r(6),
               "W2": r(6, 6, 3, 3), "B2": r(6)})
    result = check(m, {"x": r(1, 4, 8, 8)})
    assert result.operations == {"CONV": 3, "SDP": 3}


FP16_MODELS = {
    "conv-bn-relu-pool": lambda: model(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
         helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"]),
         helper.make_node("Relu", ["bn"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["p"], ["g2"]),
         helper.make_node("Flatten", ["g2"], ["f"]),
         helper.make_node("Gemm", ["f", "F", "FB"], ["y"], transB=1)],
        {"x": (1, 3, 16, 16)}, ["y"],
        {"W": r(8, 3, 3, 3), "B": r(8), "g": r(8, positive=True), "b": r(8), "m": r(8),
         "v": r(8, positive=True), "F": r(5, 8), "FB": r(5)}),
    "residual-and-eltwise": lambda: model(
        [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c2", "x"], ["a"]),
         helper.make_node("Mul", ["a", "k"], ["y"])],
        {"x": (1, 4, 6, 6)}, ["y"], {"W1": r(4, 4, 3, 3), "W2": r(4, 4, 3, 3), "k": r(1, 4, 1, 1)}),
}


@pytest.mark.parametrize("case", list(FP16_MODELS))
def test_fp16_precision(case: str) -> None:
    m = FP16_MODELS[case]()
    x = {i.name: r(*[d.dim_value for d in i.type.tensor_type.shape.dim]) for i in m.graph.input}
    result = compile_model(m, precision="fp16")
    got = run_loadable(result.blob, x)
    want = reference(m, x)
    for name, value in want.items():
        assert got[name].dtype == np.float32  # the model's own type at the boundary
        scale = float(np.abs(value).max())
        np.testing.assert_allclose(got[name], value, atol=2e-2 * scale, rtol=2e-2)
    # fp32 in -> fp16 on the device -> fp32 out: one conversion per input and output.
    lo = Loadable.open(result.blob)
    assert lo.memory["weights"].size <= 0.6 * compile_model(m).weights_bytes + 1024


def test_fp16_needs_a_device_with_fp16() -> None:
    with pytest.raises(DlaError, match="precision 'fp8'"):
        compile_model(FP16_MODELS["residual-and-eltwise"](), precision="fp8")


MOVES = {
    "slice-channels": ([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
                       {"s": np.array([1], np.int64), "e": np.array([3], np.int64),
                        "a": np.array([1], np.int64)}),
    "slice-hw-negative": ([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
                          {"s": np.array([1, -4], np.int64), "e": np.array([4, 100], np.int64),
                           "a": np.array([2, 3], np.int64)}),
    "split-channels": ([helper.make_node("Split", ["x", "sp"], ["y", "z"], axis=1)],
                       {"sp": np.array([1, 3], np.int64)}),
    "split-height": ([helper.make_node("Split", ["x", "sp"], ["y", "z"], axis=2)],
                     {"sp": np.array([2, 3], np.int64)}),
    "pad-constant": ([helper.make_node("Pad", ["x", "p", "v"], ["y"])],
                     {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "v": np.array(0.5, np.float32)}),
    "resize-nearest-2x": ([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")],
                          {"sc": np.array([1, 1, 2, 2], np.float32)}),
    "resize-nearest-3x1": ([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                                             coordinate_transformation_mode="asymmetric",
                                             nearest_mode="floor")],
                           {"sc": np.array([1, 1, 3, 1], np.float32)}),
}


@pytest.mark.parametrize("case", list(MOVES))
def test_data_movement_ops(case: str) -> None:
    nodes, inits = MOVES[case]
    outputs = list(nodes[0].output)
    m = model(nodes, {"x": (1, 4, 5, 6)}, outputs, inits)
    result = check(m, {"x": r(1, 4, 5, 6)})
    assert set(result.operations) == {"BDMA"}


CPU_FALLBACKS = {
    "resize-linear-half-pixel": (helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear"),
                                 {"sc": np.array([1, 1, 2, 1.5], np.float32)}),
    "resize-linear-align-corners": (helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear",
                                                     coordinate_transformation_mode="align_corners"),
                                    {"sz": np.array([1, 4, 9, 4], np.int64)}),
    "resize-nearest-asymmetric-round": (helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                                                         coordinate_transformation_mode="asymmetric"),
                                        {"sc": np.array([1, 1, 3, 3], np.float32)}),
    "slice-steps": (helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]),
                    {"s": np.array([0, 5, 1], np.int64),
                     "e": np.array([9223372036854775807, -100, 4], np.int64),
                     "a": np.array([1, 3, 2], np.int64), "st": np.array([2, -2, 1], np.int64)}),
    "pad-reflect": (helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"),
                    {"p": np.array([0, 0, 2, 1, 0, 0, 1, 2], np.int64)}),
    "pad-edge": (helper.make_node("Pad", ["x", "p"], ["y"], mode="edge"),
                 {"p": np.array([0, 1, 1, 0, 0, 0, 0, 3], np.int64)}),
}


@pytest.mark.parametrize("case", list(CPU_FALLBACKS))
def test_cpu_fallbacks(case: str) -> None:
    node, inits = CPU_FALLBACKS[case]
    m = model([helper.make_node("Relu", ["x0"], ["x"]), node, helper.make_node("Sigmoid", ["y"], ["z"])],
              {"x0": (1, 4, 5, 6)}, ["z"], inits)
    result = check(m, {"x0": r(1, 4, 5, 6)}, rtol=1e-5, atol=1e-5)
    assert result.operations["CPU"] == 1 and result.operations["SDP"] == 2


def test_resize_cubic_is_a_cpu_run_and_an_unknown_mode_is_refused() -> None:
    m = model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="cubic", exclude_outside=1)],
              {"x": (1, 2, 3, 3)}, ["y"], {"sc": np.array([1, 1, 2, 2], np.float32)})
    check(m, {"x": r(1, 2, 3, 3)})
    m = model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="bicubic")], {"x": (1, 2, 3, 3)},
              ["y"], {"sc": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(DlaError, match="Resize mode 'bicubic' is not one of nearest, linear, cubic"):
        compile_model(m)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_softmax_becomes_a_cpu_run_between_npu_tasks(op: str, precision: str) -> None:
    """Without the SHAVE tiles (shave=False; a configuration without tiles does the same)."""
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["logits"], transB=1),
             helper.make_node(op, ["logits"], ["p"]),
             helper.make_node("Mul", ["p", "k"], ["y"])]
    m = model(nodes, {"x": (1, 6)}, ["y"], {"W": r(10, 6), "B": r(10), "k": np.array(2.0, np.float32)})
    x = {"x": r(1, 6)}
    result = compile_model(m, precision=precision, shave=False)
    lo = Loadable.open(result.blob)
    assert [(w, [run.name for run in runs]) for w, runs in lo.recipe.runlists()] == [
        ("npu", ["task0"]), ("cpu", [op.lower().replace("logsoftmax", "log_softmax")]), ("npu", ["task1"])]
    on_tiles = compile_model(m, precision=precision)  # the default: a SHAVE task list between them
    assert [w for w, _ in Loadable.open(on_tiles.blob).recipe.runlists()] == ["npu"]
    assert on_tiles.operations["SHAVE"] == 1 and "CPU" not in on_tiles.operations
    assert lo.recipe.cpus[lo.recipe.runs[1].name].library_path == "umd/cpulib.py"
    assert result.operations["CPU"] == 1
    got, want = run_loadable(result.blob, x), reference(m, x)
    tol = 1e-5 if precision == "fp32" else 2e-2
    np.testing.assert_allclose(got["y"], want["y"], rtol=tol, atol=tol)


def test_concat_writes_producers_in_place_when_it_can() -> None:
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["x"], ["b"], kernel_shape=[3, 3], strides=[1, 1],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, {"x": (1, 3, 5, 5)}, ["y"], {"W1": r(4, 3, 3, 3)})
    result = check(m, {"x": r(1, 3, 5, 5)})
    assert "BDMA" not in result.operations  # no copies: conv and pool wrote into the concat
    # One input also feeds another node: that input must stay whole, so the concat copies.
    nodes.append(helper.make_node("Sigmoid", ["a"], ["z"]))
    m2 = model(nodes, {"x": (1, 3, 5, 5)}, ["y", "z"], {"W1": r(4, 3, 3, 3)})
    result2 = check(m2, {"x": r(1, 3, 5, 5)})
    assert result2.operations["BDMA"] == 2


def test_progress_bar_text() -> None:
    import io

    from pydla.compiler.progress import TerminalProgress

    calls = []
    result = compile_model(conv_case(), progress=lambda done, total, what: calls.append((done, total, what)))
    lowering = [c for c in calls if c[2].startswith("lowering: ")]
    assert lowering[-1][:2] == (result.steps, result.steps) and calls[-1] == (1, 1, "done")
    stream = io.StringIO()
    bar = TerminalProgress(stream, interval=0)
    bar(1, 2, "lowering: conv1")
    bar(2, 2, "lowering: relu")
    out = stream.getvalue()
    assert "\rcompiling [###############...............] 1/2 lowering: conv1" in out
    # padded to the length of the line before, so that nothing of it is left on the screen
    assert out.endswith("\rcompiling [##############################] 2/2 lowering: relu ")
