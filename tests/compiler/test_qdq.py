"""Quantized ONNX models: QDQ (onnxruntime.quantization's quantize_static, made here) and QOperator
(QLinearConv, QGemm, QLinearAdd, ConvInteger, MatMulInteger ...) read as quantization annotations,
checked naming the node; refused on a configuration without INT8 unless dequantized, and then
matching onnxruntime running the quantized model."""

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
from pydla.compiler.qdq import read_quantization
from pydla.errors import DlaError, NvError
from pydla.session import Session

from .test_fp16_models import cnn

quantization = pytest.importorskip("onnxruntime.quantization")


def ort_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, feeds)[0])


def inputs(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


class Reader(quantization.CalibrationDataReader):  # type: ignore[misc]
    def __init__(self) -> None:
        self.items = iter(inputs(16))

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.items, None)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, onnx.ModelProto]:
    d = tmp_path_factory.mktemp("qdq")
    onnx.save(cnn(np.random.default_rng(0)), str(d / "f.onnx"))
    out = {}
    for fmt in ("QDQ", "QOperator"):
        for per_channel in (False, True):
            path = d / f"{fmt}{per_channel}.onnx"
            quantization.quantize_static(str(d / "f.onnx"), str(path), Reader(),
                                         quant_format=getattr(quantization.QuantFormat, fmt),
                                         per_channel=per_channel,
                                         activation_type=quantization.QuantType.QUInt8,
                                         weight_type=quantization.QuantType.QInt8)
            out[f"{fmt}-{'channel' if per_channel else 'tensor'}"] = onnx.load(str(path))
    return out


def output_step(m: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that makes the model's output (its quantization step)."""
    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    y = m.graph.output[0].name
    dq = next(n for n in m.graph.node if y in n.output)
    assert dq.op_type == "DequantizeLinear"
    return float(consts[dq.input[1]])


@pytest.mark.parametrize("kind", ["QDQ-tensor", "QDQ-channel", "QOperator-tensor", "QOperator-channel"])
def test_quantized_model_dequantized_matches_onnxruntime(quantized: dict[str, onnx.ModelProto],
                                                         kind: str) -> None:
    m = quantized[kind]
    result = compile_model(m, dequantize_qdq=True)
    step = output_step(m)
    with Session(result.blob) as sess:
        for feeds in inputs(4, seed=50):
            got = sess.run(feeds)["y"]
            want = ort_run(m, feeds)
            assert np.abs(got - want).max() <= step * 1.0001  # within one quantization step
            # in fact the same values: the rounding is onnxruntime's (ties to even), in float32
            assert np.mean(got == want) >= 0.9


def test_annotations_per_channel_weights_per_tensor_activations(
        quantized: dict[str, onnx.ModelProto]) -> None:
    q = read_quantization(quantized["QDQ-channel"])
    assert q is not None
    weights = q.params["w1_quantized"]
    assert weights.per_channel and weights.axis == 0 and weights.scale.shape == (8,)
    assert weights.dtype == np.int8 and not weights.zero_point.any()
    quantize_x = next(n for n in quantized["QDQ-channel"].graph.node
                      if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    x = q.params[quantize_x.output[0]]
    assert not x.per_channel and x.scale.shape == () and x.dtype == np.uint8 and x.bounds() == (0, 255)
    assert q.operators["QuantizeLinear"] > 0 and "QDQ:" in q.describe()
    op = read_quantization(quantized["QOperator-channel"])
    assert op is not None and op.operators["QLinearConv"] == 2 and "QOperator: " in op.describe()
    assert op.params["w1_quantized"].axis == 0


def test_a_quantized_model_is_refused_without_int8_naming_the_configuration(
        quantized: dict[str, onnx.ModelProto]) -> None:
    m = quantized["QDQ-tensor"]
    with pytest.raises(DlaError) as e:
        compile_model(m, config="small")
    assert e.value.code == NvError.NotSupported
    assert "device config 'small' has no INT8 path" in e.value.message
    assert "--dequantize-qdq" in e.value.message
    with pytest.raises(DlaError) as e:
        compile_model(m, precision="int8")
    assert e.value.code == NvError.NotSupported and "no INT8 path" in e.value.message
    with pytest.raises(DlaError) as e:
        compile_model(cnn(np.random.default_rng(0)), dequantize_qdq=True)
    assert e.value.code == NvError.BadParameter and "quantized models" in e.value.message


def test_dequantized_at_fp16(quantized: dict[str, onnx.ModelProto]) -> None:
    m = quantized["QDQ-channel"]
    step = output_step(m)
    with Session(compile_model(m, dequantize_qdq=True, precision="fp16").blob) as sess:
        feeds = inputs(1, seed=7)[0]
        got = sess.run(feeds)["y"]
    # FP16 arithmetic may move a value across a rounding boundary of an activation's step.
    assert np.abs(got - ort_run(m, feeds)).max() <= 2 * step


def qdq_model(x_scale: Any = 0.1, x_zero: Any = None, w_scale: Any = None, axis: int = 0,
              w_zero: Any = None, op: str = "DequantizeLinear") -> onnx.ModelProto:
    """x -> QuantizeLinear -> DequantizeLinear -> Conv with DequantizeLinear'd int8 weights."""
    w = np.arange(-8, 8, dtype=np.int8).reshape(4, 1, 2, 2)
    inits = {"xs": np.asarray(x_scale, np.float32),
             "xz": np.asarray(x_zero if x_zero is not None else 128, np.uint8), "w": w,
             "ws": np.asarray(w_scale if w_scale is not None else [0.5, 0.25, 0.125, 1.0], np.float32),
             "wz": np.asarray(w_zero if w_zero is not None else [0, 0, 0, 0], np.int8)}
    if x_zero is not None and np.asarray(x_zero).dtype != np.uint8:
        inits["xz"] = np.asarray(x_zero)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="quant_x"),
             helper.make_node(op, ["xq", "xs", "xz"], ["xd"], name="dequant_x"),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="dequant_w", axis=axis),
             helper.make_node("Conv", ["xd", "wd"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_a_hand_made_qdq_model_dequantized_matches() -> None:
    m = qdq_model()
    x = np.random.default_rng(0).uniform(-12, 12, (1, 1, 5, 5)).astype(np.float32)  # some saturate
    with Session(compile_model(m, dequantize_qdq=True).blob) as sess:
        got = sess.run({"x": x})["y"]
    # The activations' values are onnxruntime's exactly; the sums' order differs (float32 rounding).
    np.testing.assert_allclose(got, ort_run(m, {"x": x}), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("kwargs", "node", "said"), [
    (dict(x_scale=0.0), "quant_x", "scale 'xs' holds 0.0: a scale is finite and positive"),
    (dict(x_scale=np.nan), "quant_x", "finite and positive"),
    (dict(w_scale=[0.5, -1, 1, 1]), "dequant_w", "holds -1.0"),
    (dict(w_scale=[0.5, 1, 1], w_zero=[0, 0, 0]), "dequant_w",
     "3 scales for 'w' of shape (4, 1, 2, 2): axis 0 has 4 channels"),
    (dict(axis=5), "dequant_w", "axis 5 is outside the rank 4"),
    (dict(w_zero=[0, 0, 0, 0, 0]), "dequant_w", "zero point of shape (5,) for scale of shape (4,)"),
    (dict(x_zero=np.int16(3)), "quant_x", "is quantized to int16"),
    (dict(w_scale=[[0.5, 1, 1, 1]]), "dequant_w", "a scalar or a 1-D tensor"),
])
def test_bad_quantization_parameters_are_refused_naming_the_node(kwargs: dict[str, Any], node: str,
                                                                   said: str) -> None:
    with pytest.raises(DlaError) as e:
        compile_model(qdq_model(**kwargs), dequantize_qdq=True)
    assert e.value.code in (NvError.BadValue, NvError.NotSupported)
    assert f"node '{node}'" in e.value.message and said in e.value.message, e.value.message


def test_a_scale_computed_at_run_time_and_dynamic_quantization_are_not_supported() -> None:
    m = qdq_model()
    m.graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, []))
    m.graph.node[0].input[1] = "s"
    with pytest.raises(DlaError) as e:
        compile_model(m, dequantize_qdq=True)
    assert e.value.code == NvError.NotSupported and "scale 's' is computed at run time" in e.value.message
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dyn"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    with pytest.raises(DlaError) as e:
        compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), dequantize_qdq=True)
    assert e.value.code == NvError.NotSupported and "node 'dyn'" in e.value.message


@pytest.mark.parametrize("op", ["ConvInteger", "MatMulInteger"])
def test_integer_operators_dequantized_compute_exact_integers(op: str) -> None:
    rng = np.random.default_rng(4)
    if op == "ConvInteger":
        shape, w = [1, 2, 4, 4], rng.integers(-20, 20, (3, 2, 3, 3)).astype(np.int8)
        out_shape = [1, 3, 2, 2]
    else:
        shape, w = [3, 5], rng.integers(-20, 20, (5, 2)).astype(np.int8)
        out_shape = [3, 2]
    nodes = [helper.make_node(op, ["x", "w", "xz"], ["y"], name="integer")]
    g = helper.make_graph(nodes, "int", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, out_shape)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(100), "xz")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = rng.integers(0, 256, shape).astype(np.uint8)
    with Session(compile_model(m, dequantize_qdq=True).blob) as sess:
        got = sess.run({"x": x})["y"]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ort_run(m, {"x": x}))


def test_pydla_compile_a_qdq_model(tmp_path: Path, quantized: dict[str, onnx.ModelProto]) -> None:
    model = tmp_path / "q.onnx"
    onnx.save(quantized["QDQ-tensor"], str(model))
    cmd = [sys.executable, "-m", "pydla", "compile", str(model)]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert "is a quantized model (QDQ: " in refused.stderr and "no INT8 path" in refused.stderr
    done = subprocess.run([*cmd, "--dequantize-qdq"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    info = subprocess.run([sys.executable, "-m", "pydla", "info", str(tmp_path / "q.dla")],
                          capture_output=True, text=True, timeout=300)
    q = read_quantization(quantized["QDQ-tensor"])
    assert q is not None
    line = next(t for t in info.stdout.splitlines() if t.startswith("quantized model: "))
    assert line == (f"quantized model: {q.operators['DequantizeLinear']} DequantizeLinear, "
                    f"{q.operators['QuantizeLinear']} QuantizeLinear; {len(q.params)} quantized tensors "
                    "(0 per channel), computed dequantized in float")
