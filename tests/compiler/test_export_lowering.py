"""What torch.onnx's exporters write, lowered to the device's forms: the dynamo exporter's
ReduceMean over H and W (``adaptive_avg_pool2d(x, 1)``) as PDP's whole-map pooling inside the NPU
task, not a SHAVE reduction splitting it; checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.compiler.api import compile_model
from pydla.loadable.container import Loadable
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
