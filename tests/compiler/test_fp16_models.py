"""Float16 ONNX models (as exporters and float16 converters make them) compile as they are: float16
inputs, outputs and weights; the loadable keeps float16 inputs and outputs; results against
onnxruntime running the same float16 model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.compiler.api import compile_model
from pydla.compiler.half import float32_view, has_float16
from pydla.errors import DlaError, NvError
from pydla.loadable.container import Loadable
from pydla.session import Session

F16 = TensorProto.FLOAT16


def to_float16(m: onnx.ModelProto) -> onnx.ModelProto:
    """The float32 model ``m`` as onnxconverter-common's float16 conversion makes it (inputs,
    outputs, value infos, initializers and Constant tensors float16; keep_io_types off)."""
    out = onnx.ModelProto()
    out.CopyFrom(m)
    g = out.graph
    for i, init in enumerate(g.initializer):
        if init.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16),
                                                              init.name))
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = F16
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    return out


def cnn(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv + BatchNorm + Relu + MaxPool + residual Add + Flatten + Gemm, float32."""
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    inits = {"w1": w1, "b1": (rng.standard_normal(8) * 0.1).astype(np.float32), "w2": w2,
             "gamma": (1 + rng.random(8) * 0.2).astype(np.float32), "beta": np.zeros(8, np.float32),
             "mean": (rng.standard_normal(8) * 0.1).astype(np.float32), "var": np.ones(8, np.float32),
             "wf": (rng.standard_normal((10, 8 * 4 * 4)) * 0.1).astype(np.float32),
             "bf": np.zeros(10, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c2", "gamma", "beta", "mean", "var"], ["bn"]),
             helper.make_node("Add", ["bn", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def ort_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Any]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


@pytest.fixture(scope="module")
def half_cnn() -> onnx.ModelProto:
    return to_float16(cnn(np.random.default_rng(3)))


def test_float16_model_compiles_at_fp16_with_float16_io(half_cnn: onnx.ModelProto) -> None:
    result = compile_model(half_cnn, config="full")  # precision: the model's (fp16 on this config)
    lo = Loadable(result.blob)
    types = {t.name: t.data_type.name for t in lo.tensors()}
    assert types == {"x": "FLOAT16", "y": "FLOAT16"}
    assert {t.name: t.size for t in lo.tensors()} == {"x": 3 * 8 * 8 * 2, "y": 10 * 2}
    assert "CPU" not in result.operations  # the device reads and writes float16 itself
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float16)
    with Session(result.blob) as sess:
        assert [(t.name, t.dtype) for t in sess.inputs] == [("x", np.dtype(np.float16))]
        got = sess.run({"x": x})["y"]
    want = ort_run(half_cnn, {"x": x})[0]
    assert got.dtype == np.float16 and want.dtype == np.float16
    # Both compute in float16 (the device keeps FP16 products exact and rounds its sums once per
    # operation; onnxruntime rounds differently): within a few float16 steps of the values' size.
    scale = float(np.abs(want.astype(np.float32)).max())
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=scale * 4e-3, rtol=0)


def test_float16_model_at_fp32_casts_its_edges(half_cnn: onnx.ModelProto) -> None:
    result = compile_model(half_cnn, config="full", precision="fp32")
    lo = Loadable(result.blob)
    assert {t.name: t.data_type.name for t in lo.tensors()} == {"x": "FLOAT16", "y": "FLOAT16"}
    assert result.operations.get("CPU") == 2  # the two Casts at the model's edges, exact
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float16)
    with Session(result.blob) as sess:
        got = sess.run({"x": x})["y"]
    # In float32 throughout, rounded to float16 once: the float32 model's output, rounded.
    m32 = onnx.ModelProto()
    m32.CopyFrom(float32_view(half_cnn, "fp16").model)  # type: ignore[union-attr]
    want32 = ort_run(m32, {"x": x.astype(np.float32)})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want32, atol=2e-3 * np.abs(want32).max(), rtol=1e-3)


def test_float16_input_with_float32_output_and_cast_inside() -> None:
    """A mixed model: float16 in, a Cast to float32 inside, float32 out (keep_io_types-style)."""
    w = numpy_helper.from_array(np.array([[1.5, -2.0], [0.25, 4.0]], np.float16), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", F16, [3, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    assert has_float16(m)
    x = np.array([[1, 2], [-3, 0.5], [0.125, -1]], np.float16)
    for precision in ("fp16", "fp32"):
        blob = compile_model(m, precision=precision).blob
        with Session(blob) as sess:
            got = sess.run({"x": x})["y"]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, ort_run(m, {"x": x})[0])  # small exact values


def test_float32_models_are_unchanged() -> None:
    m = cnn(np.random.default_rng(0))
    assert not has_float16(m) and float32_view(m, "fp16") is None
    lo = Loadable(compile_model(m, precision="fp16").blob)
    assert {t.name: t.data_type.name for t in lo.tensors()} == {"x": "FLOAT32", "y": "FLOAT32"}


def test_session_refuses_float32_arrays_for_a_float16_input(half_cnn: onnx.ModelProto) -> None:
    with Session(compile_model(half_cnn).blob) as sess, pytest.raises(DlaError) as e:
        sess.run({"x": np.zeros((1, 3, 8, 8), np.float32)})
    assert e.value.code in (NvError.BadParameter, NvError.BadValue) and "float16" in e.value.message


def test_pydla_compile_and_run_a_float16_model(tmp_path: Path, half_cnn: onnx.ModelProto) -> None:
    model = tmp_path / "half.onnx"
    onnx.save(half_cnn, str(model))
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    cmd = [sys.executable, "-m", "pydla"]
    done = subprocess.run([*cmd, "compile", str(model)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    info = subprocess.run([*cmd, "info", str(tmp_path / "half.dla")], capture_output=True, text=True,
                          timeout=300)
    assert "FLOAT16" in info.stdout
    out = tmp_path / "out"
    ran = subprocess.run([*cmd, "run", str(tmp_path / "half.dla"), "--input", f"x={tmp_path / 'x.npy'}",
                          "--output-dir", str(out)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    got = np.load(out / "y.npy")
    want = ort_run(half_cnn, {"x": x})[0]
    assert got.dtype == np.float16
    scale = float(np.abs(want.astype(np.float32)).max())
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=scale * 4e-3, rtol=0)
