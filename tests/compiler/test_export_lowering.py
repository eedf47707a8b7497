"""What torch.onnx's exporters write, lowered to the device's forms: the dynamo exporter's
ReduceMean over H and W (``adaptive_avg_pool2d(x, 1)``) as PDP's whole-map pooling inside the NPU
task, not a SHAVE reduction splitting it; checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.compiler.api import compile_model
from pydla.loadable.container import Loadable
from pydla.loadable.taskbuilder import TaskBuilder
from tests.compiler.support import model, reference, run_loadable


def _runs(blob: bytes) -> list[str]:
    return [r.where for r in Loadable.open(blob).recipe.runs]


def _squeeze_excite(axes: list[int], keepdims: int, opset: int) -> object:
    """conv -> Relu -> ReduceMean(axes) -> conv 1x1 -> HardSigmoid -> Mul: a squeeze-excite gate
    as the dynamo exporter writes it (keepdims 1); with keepdims 0 the mean feeds a Reshape back."""
    rng = np.random.default_rng(5)
    inits: dict[str, np.ndarray] = {"w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
                                    "w1": rng.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.3}
    mean_inputs = ["r"]
    attrs: dict[str, object] = {"keepdims": keepdims}
    if opset >= 18:
        inits["axes"] = np.array(axes, np.int64)
        mean_inputs.append("axes")
    else:
        attrs["axes"] = axes
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ReduceMean", mean_inputs, ["m"], **attrs)]
    if not keepdims:
        inits["back"] = np.array([1, 8, 1, 1], np.int64)
        nodes.append(helper.make_node("Reshape", ["m", "back"], ["m4"]))
    nodes += [helper.make_node("Conv", ["m4" if not keepdims else "m", "w1"], ["s"]),
              helper.make_node("HardSigmoid", ["s"], ["g"], alpha=1 / 6, beta=0.5),
              helper.make_node("Mul", ["r", "g"], ["y"])]
    return model(nodes, {"x": (1, 3, 12, 10)}, ["y"], inits, opset=opset)


@pytest.mark.parametrize(("axes", "keepdims", "opset"), [([2, 3], 1, 18), ([-1, -2], 1, 18),
                                                         ([3, 2], 0, 18), ([2, 3], 1, 13),
                                                         ([-2, -1], 0, 13)])
def test_spatial_mean_is_pooled_in_the_npu_task(axes: list[int], keepdims: int, opset: int) -> None:
    m = _squeeze_excite(axes, keepdims, opset)
    blob = compile_model(m).blob
    assert _runs(blob) == ["npu"]
    feeds = {"x": np.random.default_rng(6).standard_normal((1, 3, 12, 10)).astype(np.float32)}
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-5, atol=1e-6)


def test_a_mean_over_other_axes_is_not_pooled() -> None:
    """A mean over C and H is no GlobalAveragePool: it stays the SHAVE reduction (a run of its own
    after the NPU's Relu) and keeps its result."""
    axes = np.array([1, 2], np.int64)
    m = model([helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("ReduceMean", ["r", "axes"], ["y"], keepdims=1)],
              {"x": (1, 4, 6, 5)}, ["y"], {"axes": axes}, opset=18)
    blob = compile_model(m).blob
    assert len(_runs(blob)) == 2
    feeds = {"x": np.random.default_rng(8).standard_normal((1, 4, 6, 5)).astype(np.float32)}
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-5, atol=1e-6)


def _lookup_tables(m: object, monkeypatch: pytest.MonkeyPatch, **options: str) -> tuple[bytes, int]:
    """The compiled loadable and how many lookup tables its compilation made."""
    made: list[int] = []
    lut = TaskBuilder.lut

    def counted(self: TaskBuilder, *args: object, **kwargs: object) -> int:
        made.append(1)
        return lut(self, *args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(TaskBuilder, "lut", counted)
    return compile_model(m, **options).blob, len(made)


def _kinks(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    x = (np.random.default_rng(3).standard_normal(shape) * 4).astype(np.float32)
    x.flat[:9] = [3.0, -3.0, np.inf, -np.inf, 0.0, np.nan, 2.5, -2.5, 1e30]  # kinks, ends, NaN
    return {"x": x}


@pytest.mark.parametrize("attrs", [{"alpha": 1 / 6, "beta": 0.5}, {}, {"alpha": -0.3, "beta": 0.9},
                                   {"alpha": 2.0, "beta": -1.0}])
def test_hard_sigmoid_alone_is_a_line_and_a_clamp(attrs: dict[str, float],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """HardSigmoid in an SDP operation of its own: batch-norm stage (x * alpha + beta) then clamp to
    [0, 1], no lookup table; onnxruntime's values at the kinks, the ends and NaN."""
    m = model([helper.make_node("HardSigmoid", ["x"], ["y"], **attrs)], {"x": (1, 5, 6, 7)}, ["y"])
    blob, tables = _lookup_tables(m, monkeypatch)
    assert (_runs(blob), tables) == (["npu"], 0)
    feeds = _kinks((1, 5, 6, 7))
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-6, atol=1e-7)


def test_hard_swish_gate_is_a_line_and_a_clamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """HardSwish after a convolution (MobileNet-v3's pattern): its gate by the batch-norm stage and
    the clamp, then the product; fp16 keeps the lookup table (alpha 1/6 is not a half)."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("HardSwish", ["c"], ["y"])], {"x": (1, 3, 9, 8)}, ["y"], {"w": w}, opset=14)
    blob, tables = _lookup_tables(m, monkeypatch)
    assert (_runs(blob), tables) == (["npu"], 0)
    feeds = {"x": (rng.standard_normal((1, 3, 9, 8)) * 4).astype(np.float32)}  # the convolution's sums
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-5, atol=1e-5)
    blob, tables = _lookup_tables(m, monkeypatch, precision="fp16")
    assert tables == 1
    feeds = {"x": rng.standard_normal((1, 3, 9, 8)).astype(np.float32)}
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=2e-2, atol=2e-2)


def _shuffle_units(units: int, c: int = 8) -> object:
    """ShuffleNet-v2's stride-1 units as torch.onnx writes them: the channels split in halves
    (Slice), the second half through conv 1x1 / Relu, then Concat with the first half and the channel
    shuffle (Reshape, Transpose, Reshape)."""
    rng = np.random.default_rng(9)
    half = c // 2
    inits: dict[str, np.ndarray] = {
        "w0": rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3,
        "zero": np.array([0], np.int64), "half": np.array([half], np.int64),
        "full": np.array([c], np.int64), "one": np.array([1], np.int64),
        "split": np.array([1, 2, half, 6, 5], np.int64), "flat": np.array([1, c, 6, 5], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["t0"], pads=[1, 1, 1, 1])]
    for u in range(units):
        inits[f"w{u + 1}"] = rng.standard_normal((half, half, 1, 1)).astype(np.float32) * 0.5
        t = f"t{u}"
        nodes += [helper.make_node("Slice", [t, "zero", "half", "one"], [f"a{u}"]),
                  helper.make_node("Slice", [t, "half", "full", "one"], [f"b{u}"]),
                  helper.make_node("Conv", [f"b{u}", f"w{u + 1}"], [f"cb{u}"]),
                  helper.make_node("Relu", [f"cb{u}"], [f"r{u}"]),
                  helper.make_node("Concat", [f"a{u}", f"r{u}"], [f"cat{u}"], axis=1),
                  helper.make_node("Reshape", [f"cat{u}", "split"], [f"s{u}"]),
                  helper.make_node("Transpose", [f"s{u}"], [f"p{u}"], perm=[0, 2, 1, 3, 4]),
                  helper.make_node("Reshape", [f"p{u}", "flat"], [f"t{u + 1}"])]
    return model(nodes, {"x": (1, 3, 6, 5)}, [f"t{units}"], inits)


def test_a_channel_split_feeding_a_convolution_is_a_range_not_a_copy() -> None:
    """Each unit: the half that a convolution reads is a byte range of the shuffled tensor (no
    copy); the half that the next Concat takes stays one copy (into the concatenation), and the
    shuffle's Transpose one: 2 copies a unit, not 3."""
    m = _shuffle_units(3)
    result = compile_model(m)
    assert result.operations["BDMA"] == 2 * 3
    feeds = {"x": np.random.default_rng(10).standard_normal((1, 3, 6, 5)).astype(np.float32)}
    np.testing.assert_allclose(run_loadable(result.blob, feeds)["t3"], reference(m, feeds)["t3"],
                               rtol=1e-5, atol=1e-5)


def test_slices_that_must_stay_copies() -> None:
    """A slice of a graph input, a slice that is a graph output, and a slice reshaped into a graph
    output each keep their own bytes; a slice of a middle axis is no one range. All against
    onnxruntime."""
    inits = {"s": np.array([2], np.int64), "e": np.array([5], np.int64), "ax": np.array([1], np.int64),
             "ax2": np.array([2], np.int64), "flat": np.array([1, 30], np.int64)}
    nodes = [helper.make_node("Slice", ["x", "s", "e", "ax"], ["in_part"]),  # of the graph input
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Slice", ["r", "s", "e", "ax"], ["out_part"]),  # a graph output
             helper.make_node("Slice", ["r", "s", "e", "ax"], ["mid"]),
             helper.make_node("Reshape", ["mid", "flat"], ["flat_part"]),  # reshaped into an output
             helper.make_node("Slice", ["r", "s", "e", "ax2"], ["rows"]),  # lines before the cut
             helper.make_node("Relu", ["rows"], ["rows_out"]),
             helper.make_node("Relu", ["in_part"], ["in_out"])]
    m = model(nodes, {"x": (1, 6, 5, 2)}, ["out_part", "flat_part", "rows_out", "in_out"], inits)
    result = compile_model(m)
    feeds = {"x": np.random.default_rng(11).standard_normal((1, 6, 5, 2)).astype(np.float32)}
    got, want = run_loadable(result.blob, feeds), reference(m, feeds)
    for name in want:
        np.testing.assert_array_equal(got[name].reshape(want[name].shape), want[name], err_msg=name)


@pytest.mark.parametrize(("op", "gate_first"), [("Mul", True), ("Mul", False), ("Sub", True), ("Div", False),
                                               ("Add", True)])
def test_a_per_channel_tensor_is_sdp_s_per_channel_operand(op: str, gate_first: bool) -> None:
    """A computed (1, C, 1, 1) tensor with a (1, C, H, W) map (squeeze-excite's Mul): SDP's
    per-channel operand where the tensor lies, no BDMA broadcast; either order, and the
    non-commutative operations, as onnxruntime computes them."""
    rng = np.random.default_rng(12)
    w = rng.standard_normal((5, 3, 1, 1)).astype(np.float32)
    pair = ["g", "r2"] if gate_first else ["r2", "g"]
    m = model([helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("GlobalAveragePool", ["r"], ["p"]),
               helper.make_node("Conv", ["p", "w"], ["c"]),
               helper.make_node("Sigmoid", ["c"], ["s"]),
               helper.make_node("Add", ["s", "half"], ["g"]),  # away from 0 for Div
               helper.make_node("Relu", ["x2"], ["r2"]),
               helper.make_node(op, pair, ["y"])],
              {"x": (1, 3, 4, 4), "x2": (1, 5, 7, 6)}, ["y"], {"w": w, "half": np.array(0.5, np.float32)})
    result = compile_model(m)
    assert result.operations.get("BDMA", 0) == 0
    feeds = {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32),
             "x2": rng.standard_normal((1, 5, 7, 6)).astype(np.float32)}
    np.testing.assert_allclose(run_loadable(result.blob, feeds)["y"], reference(m, feeds)["y"],
                               rtol=1e-6, atol=1e-6)
