"""pydla as an onnx.backend Backend: prepare/run, run_model, run_node, supports_device."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import pydla.onnx_backend as backend
from pydla import DlaError
from pydla.demo import build_demo_model, reference


def test_prepare_and_run_the_demo_model(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path))
    model = build_demo_model()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    rep = backend.prepare(model)
    (out,) = rep.run([x])
    np.testing.assert_allclose(out, reference(model, {"input": x})[0], atol=1e-5)
    (out2,) = backend.run_model(model, {"input": x})
    np.testing.assert_allclose(out2, out)
    with pytest.raises(DlaError, match="2 inputs given"):
        rep.run([x, x])
    rep.session.close()


def test_run_node_and_devices(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path))
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)
    (y,) = backend.run_node(node, [x])
    np.testing.assert_array_equal(y, x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)))
    softmax = helper.make_node("Softmax", ["x"], ["y"])
    (p,) = backend.run_node(softmax, [np.array([[1.0, 2.0, 3.0]], np.float32)])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(p.ravel(), e / e.sum(), rtol=1e-6)
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    with pytest.raises(DlaError, match="device 'CUDA'"):
        backend.prepare(helper.make_model(helper.make_graph(
            [], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [])), "CUDA")


def test_prepare_a_model_with_dynamic_axes(monkeypatch, tmp_path) -> None:
    """As onnxruntime's backend: prepared once, run with any batch (compiled per shape at the run)."""
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    rep = backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    for batch in (1, 3):
        x = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4) - 5
        (y,) = rep.run([x])
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    rep.session.close()
