"""HardSigmoid (SDP's lookup table) and HardSwish (the table, then a product) run on the device,
alone and after a convolution, and agree with onnxruntime; where the device has no form for them
(alpha 0, float64) they stay CPU runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from pydla.compiler.api import compile_model
from pydla.loadable.container import Loadable
from tests.compiler.support import model, reference, run_loadable


def _runs(blob: bytes) -> list[str]:
    return [r.where for r in Loadable.open(blob).recipe.runs]


def _feeds(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    x = (np.random.default_rng(3).standard_normal(shape) * 4).astype(np.float32)
    x.flat[:5] = [3.0, -3.0, np.inf, -np.inf, 0.0]  # the kinks and the ends
    return {"x": x}


@pytest.mark.parametrize("attrs", [{}, {"alpha": 1 / 6, "beta": 0.5}, {"alpha": -0.3, "beta": 0.9},
                                   {"alpha": 2.0, "beta": -1.0}])
def test_hard_sigmoid_on_the_device(attrs: dict[str, float]) -> None:
    m = model([helper.make_node("HardSigmoid", ["x"], ["y"], **attrs)], {"x": (1, 3, 6, 6)}, ["y"])
    blob = compile_model(m).blob
    assert _runs(blob) == ["npu"]
    feeds = _feeds((1, 3, 6, 6))
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-6, atol=1e-6)


def test_hard_swish_on_the_device() -> None:
    m = model([helper.make_node("HardSwish", ["x"], ["y"])], {"x": (1, 4, 5, 7)}, ["y"], opset=14)
    blob = compile_model(m).blob
    assert _runs(blob) == ["npu"]
    feeds = _feeds((1, 4, 5, 7))
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fp16", [False, True])
def test_squeeze_excite_after_convolutions(fp16: bool) -> None:
    """MobileNet-v3's pattern: conv -> HardSwish, then squeeze-excite (pool, conv, relu, conv,
    HardSigmoid, Mul): one NPU run, no CPU split."""
    rng = np.random.default_rng(7)
    inits = {"w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
             "w1": rng.standard_normal((4, 8, 1, 1)).astype(np.float32) * 0.3,
             "w2": rng.standard_normal((8, 4, 1, 1)).astype(np.float32) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c"], ["h"]),
             helper.make_node("GlobalAveragePool", ["h"], ["p"]),
             helper.make_node("Conv", ["p", "w1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["s2"]),
             helper.make_node("HardSigmoid", ["s2"], ["g"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["h", "g"], ["y"])]
    m = model(nodes, {"x": (1, 3, 8, 8)}, ["y"], inits, opset=14)
    options: dict[str, Any] = {"precision": "fp16"} if fp16 else {}
    blob = compile_model(m, **options).blob
    assert "cpu" not in _runs(blob)
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    tol = 2e-2 if fp16 else 1e-5
    np.testing.assert_allclose(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"], rtol=tol, atol=tol)


def test_alpha_zero_stays_a_cpu_run() -> None:
    node = helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.0, beta=0.7)
    m = model([node], {"x": (1, 2, 3, 3)}, ["y"])
    blob = compile_model(m).blob
    assert _runs(blob) == ["cpu"]
    feeds = _feeds((1, 2, 3, 3))
    np.testing.assert_array_equal(run_loadable(blob, feeds)["y"], reference(m, feeds)["y"])


def test_float64_stays_a_cpu_run() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 2, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 2, 3, 3])
    graph = helper.make_graph([helper.make_node("HardSwish", ["x"], ["y"])], "f64", [x], [y])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    blob = compile_model(m).blob
    assert "cpu" in _runs(blob)
    from pydla import Session

    feeds = {"x": np.random.default_rng(1).standard_normal((1, 2, 3, 3)) * 4}
    with Session(blob) as sess:
        got = sess.run(feeds)["y"]
    # onnxruntime's HardSwish takes its 1/6 as a float32 attribute: 1e-8 apart from exact float64
    np.testing.assert_allclose(got, reference(m, feeds)["y"], rtol=1e-6, atol=1e-7)
    assert got.dtype == np.float64
