"""A float model's BatchNormalization after a convolution is folded into it before calibration's
quantization (the calibrated INT8 network then follows the float one)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from pydla.compiler.api import compile_model
from pydla.compiler.nvdla.compile import dequantize, quantize
from pydla.compiler.nvdla.reference import run_reference
from pydla.errors import DlaError
from tests.compiler.nvdla.models import Builder, images


def _with_batch_norm(after_relu: bool = False) -> object:
    b = Builder((3, 8, 8), seed=2)
    x = b.conv("input", 8, relu=after_relu)
    rng = np.random.default_rng(0)
    names = []
    for i, v in enumerate((1 + 0.2 * rng.standard_normal(8), 0.3 * rng.standard_normal(8),
                           0.2 * rng.standard_normal(8), 1 + np.abs(rng.standard_normal(8)))):
        names.append(b._const(f"bn_{i}", v))
    b.nodes.append(helper.make_node("BatchNormalization", [x, *names], ["bn"], name="bn", epsilon=1e-5))
    b.channels["bn"] = 8
    return b.model(b.head("bn", 4))


def test_a_batch_norm_after_a_convolution_is_folded() -> None:
    model = _with_batch_norm()
    data = images(8, (3, 8, 8))
    result = compile_model(model, config="nv_small", calibration=[{"input": x} for x in data],
                           calibration_method="minmax")
    assert result.operations == {"CONV": 3, "SDP": 3}  # conv, global pooling, fully connected
    inb, outb = result.plan.role("input")[0], result.plan.role("output")[0]
    f = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in data[:4]:  # inside the calibrated ranges (beyond them the INT8 network saturates)
        q = run_reference(result.plan, {"input": quantize(x[0], inb.scale, inb.zero_point)})[outb.name]
        expected = f.run(None, {"input": x})[0].ravel()
        got = dequantize(q, outb.scale, outb.zero_point).ravel()
        assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()
        assert np.argmax(got) == np.argmax(expected)


def test_a_batch_norm_elsewhere_is_refused() -> None:
    model = _with_batch_norm(after_relu=True)
    with pytest.raises(DlaError, match="batch normalization that does not follow a float convolution"):
        compile_model(model, config="nv_small", calibration=[{"input": x} for x in images(2, (3, 8, 8))])
