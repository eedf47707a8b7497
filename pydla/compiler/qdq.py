"""Quantized ONNX models read as quantization annotations: QDQ models (QuantizeLinear and
DequantizeLinear around float operators, as onnxruntime.quantization and PyTorch export them) and
QOperator models (QLinearConv, QLinearMatMul, com.microsoft's QGemm, QLinearAdd, QLinearMul,
QLinearAveragePool, QLinearGlobalAveragePool, QLinearConcat, QLinearSigmoid, QLinearLeakyRelu, and
ConvInteger, MatMulInteger).

Each quantized tensor gets a :class:`QuantParam`: its scale (per tensor, or per channel along an
axis: the weights'), zero point and integer type, checked as onnxruntime requires it: scales
constant, finite and positive; zero points of the quantized type with the scale's shape; a
per-channel axis within the tensor's rank and as long as that dimension. Each failure is a DlaError
naming the node.

Usage::

    q = read_quantization(model)      # None for a float model
    q.params["conv1_out_quantized"]   # QuantParam(scale=array(0.02), zero_point=array(128, uint8), ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from pydla.errors import DlaError, NvError
from pydla.logconfig import printable

QDQ = {"QuantizeLinear", "DequantizeLinear"}
# Each QOperator's quantized operands: (tensor, scale, zero point) input indices (-1: none), and
# whether the tensor is the node's output (the output's tensor index is then unused).
_Q = tuple[int, int, int, bool]
QOPERATORS: dict[str, tuple[_Q, ...]] = {
    "QLinearConv": ((0, 1, 2, False), (3, 4, 5, False), (-1, 6, 7, True)),
    "QLinearMatMul": ((0, 1, 2, False), (3, 4, 5, False), (-1, 6, 7, True)),
    "QLinearAdd": ((0, 1, 2, False), (3, 4, 5, False), (-1, 6, 7, True)),
    "QLinearMul": ((0, 1, 2, False), (3, 4, 5, False), (-1, 6, 7, True)),
    "QLinearAveragePool": ((0, 1, 2, False), (-1, 3, 4, True)),
    "QLinearGlobalAveragePool": ((0, 1, 2, False), (-1, 3, 4, True)),
    "QLinearSigmoid": ((0, 1, 2, False), (-1, 3, 4, True)),
    "QLinearLeakyRelu": ((0, 1, 2, False), (-1, 3, 4, True)),
    "QGemm": ((0, 1, 2, False), (3, 4, 5, False), (-1, 7, 8, True)),
    "ConvInteger": ((0, -1, 2, False), (1, -1, 3, False)),
    "MatMulInteger": ((0, -1, 2, False), (1, -1, 3, False)),
}
QUANTIZED_OPS = QDQ | set(QOPERATORS) | {"QLinearConcat", "DynamicQuantizeLinear"}
INTEGER_TYPES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255),
                 np.dtype(np.int32): (-(2**31), 2**31 - 1)}  # int32: a bias, zero point 0


@dataclass(frozen=True)
class QuantParam:
    """A quantized tensor's parameters: ``real = scale * (q - zero_point)``; ``axis`` is None for
    one scale for the whole tensor, else the axis of the per-channel scales."""

    tensor: str
    scale: np.ndarray
    zero_point: np.ndarray
    dtype: np.dtype[Any]
    axis: int | None
    node: str

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def bounds(self) -> tuple[int, int]:
        return INTEGER_TYPES[self.dtype]


@dataclass
class Quantization:
    """What a quantized model says: its parameters by quantized tensor, its operators counted."""

    params: dict[str, QuantParam] = field(default_factory=dict)
    operators: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """``"QDQ: 12 QuantizeLinear/DequantizeLinear"``-style summary of its quantized operators."""
        qdq = sum(n for op, n in self.operators.items() if op in QDQ)
        parts = [f"QDQ: {qdq} QuantizeLinear/DequantizeLinear nodes"] if qdq else []
        others = sorted((op, n) for op, n in self.operators.items() if op not in QDQ)
        if others:
            parts.append("QOperator: " + ", ".join(f"{n} {op}" for op, n in others))
        return "; ".join(parts)


def is_quantized(model: onnx.ModelProto) -> bool:
    return any(n.op_type in QUANTIZED_OPS for n in model.graph.node)


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The model's initializers and Constant nodes' values, by name."""
    out = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def ranks(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The shapes onnx's inference knows (a dimension it does not: -1)."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    out: dict[str, tuple[int, ...]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
    return out


def read_quantization(model: onnx.ModelProto) -> Quantization | None:
    """The quantization annotations of ``model`` (None when it has no quantized operator), checked."""
    if not is_quantized(model):
        return None
    consts = constants(model)
    shapes = ranks(model)
    shapes.update({k: v.shape for k, v in consts.items()})
    q = Quantization()
    for i, n in enumerate(model.graph.node):
        if n.op_type not in QUANTIZED_OPS:
            continue
        q.operators[n.op_type] = q.operators.get(n.op_type, 0) + 1
        where = f"node '{printable(n.name or f'{n.op_type}_{i}')}' ({n.op_type})"
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "DynamicQuantizeLinear":
            raise DlaError(NvError.NotSupported, f"{where}: dynamic quantization computes its scale at run "
                                                 "time: pydla compiles static scales (quantize the model "
                                                 "with calibration, e.g. onnxruntime's quantize_static)")
        if n.op_type in QDQ:
            tensor = n.output[0] if n.op_type == "QuantizeLinear" else n.input[0]
            other = n.input[0] if n.op_type == "QuantizeLinear" else n.output[0]
            _add(q, _param(where, tensor, other, n, 1, 2, int(attrs.get("axis", 1)), consts, shapes))
            continue
        if n.op_type == "QLinearConcat":  # Y_scale, Y_zero_point, then (X, X_scale, X_zero_point)...
            _add(q, _param(where, n.output[0], "", n, 0, 1, None, consts, shapes))
            for k in range(2, len(n.input) - 2, 3):
                _add(q, _param(where, n.input[k], "", n, k + 1, k + 2, None, consts, shapes))
            continue
        for tensor_index, scale, zero, is_output in QOPERATORS[n.op_type]:
            if n.op_type == "QGemm" and scale >= len(n.input):
                continue  # a QGemm without y_scale gives float
            tensor = n.output[0] if is_output else n.input[tensor_index]
            weights = n.op_type in ("QLinearConv", "ConvInteger") and tensor_index in (1, 3)
            axis: int | None = 0 if weights else (-1 if n.op_type == "QLinearMatMul" and tensor_index == 3
                                                  else None)
            if n.op_type == "QGemm" and tensor_index == 3:  # per output column of B
                axis = 0 if attrs.get("transB", 0) else 1
            _add(q, _param(where, tensor, "", n, scale, zero, axis, consts, shapes))
    return q


def _add(q: Quantization, p: QuantParam | None) -> None:
    if p is not None:
        q.params.setdefault(p.tensor, p)


def _param(where: str, tensor: str, other: str, n: onnx.NodeProto, scale_index: int, zero_index: int,
           axis: int | None, consts: Mapping[str, np.ndarray],
           shapes: Mapping[str, tuple[int, ...]]) -> QuantParam | None:
    """The checked parameters of ``tensor`` from the node's inputs at ``scale_index`` and
    ``zero_index`` (-1 or absent: no scale, or zero point 0 of uint8)."""
    scale_name = n.input[scale_index] if 0 <= scale_index < len(n.input) else ""
    zero_name = n.input[zero_index] if 0 <= zero_index < len(n.input) else ""
    if scale_index >= 0 and not scale_name:
        raise DlaError(NvError.BadValue, f"{where}: input {scale_index} (a scale) is missing")
    for role, name in (("scale", scale_name), ("zero point", zero_name)):
        if name and name not in consts:
            raise DlaError(NvError.NotSupported, f"{where}: {role} '{printable(name)}' is computed at run "
                                                 "time: pydla compiles constant quantization parameters")
    scale = np.asarray(consts[scale_name]) if scale_name else np.ones((), np.float32)
    zero = np.asarray(consts[zero_name]) if zero_name else None
    known = consts.get(tensor)
    dtype = _quantized_type(where, tensor, zero, known.dtype if known is not None else None)
    if zero is None:
        zero = np.zeros(scale.shape, dtype)
    if scale.dtype.kind != "f":
        raise DlaError(NvError.BadValue, f"{where}: scale '{printable(scale_name)}' is {scale.dtype}, not a "
                                         "float type")
    if not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        bad = scale.ravel()[~(np.isfinite(scale.ravel()) & (scale.ravel() > 0))][0]
        raise DlaError(NvError.BadValue, f"{where}: scale '{printable(scale_name)}' holds {bad}: a scale is "
                                         "finite and positive")
    if zero.size != scale.size:
        raise DlaError(NvError.BadValue, f"{where}: zero point of shape {zero.shape} for scale of shape "
                                         f"{scale.shape}: they have one shape")
    if zero.dtype != dtype:
        raise DlaError(NvError.BadValue, f"{where}: zero point '{printable(zero_name)}' is {zero.dtype}, "
                                         f"but '{printable(tensor)}' is {dtype}")
    if scale.ndim > 1:
        raise DlaError(NvError.BadValue, f"{where}: scale of shape {scale.shape}: a scalar or a 1-D tensor")
    if scale.size == 1:
        return QuantParam(tensor, scale.reshape(()), zero.reshape(()), dtype, None, where)
    shape = shapes.get(tensor) or shapes.get(other) or ()
    if axis is None:
        raise DlaError(NvError.BadValue, f"{where}: {scale.size} scales for '{printable(tensor)}', which "
                                         "takes one (per-tensor)")
    if shape and not -len(shape) <= axis < len(shape):
        raise DlaError(NvError.BadValue, f"{where}: axis {axis} is outside the rank {len(shape)} of "
                                         f"'{printable(tensor)}'")
    if shape and shape[axis] > 0 and shape[axis] != scale.size:
        raise DlaError(NvError.BadValue, f"{where}: {scale.size} scales for '{printable(tensor)}' of shape "
                                         f"{shape}: axis {axis} has {shape[axis]} channels")
    return QuantParam(tensor, scale, zero, dtype, axis % len(shape) if shape else axis, where)


def _quantized_type(where: str, tensor: str, zero: np.ndarray | None,
                    known: np.dtype[Any] | None) -> np.dtype[Any]:
    """The quantized tensor's integer type: the zero point's (without one: the constant's, else
    uint8); int8 or uint8, or int32 with zero point 0 (a bias)."""
    dtype = zero.dtype if zero is not None else known if known is not None else np.dtype(np.uint8)
    if dtype not in INTEGER_TYPES:
        raise DlaError(NvError.NotSupported, f"{where}: '{printable(tensor)}' is quantized to {dtype}: pydla "
                                             "reads int8 and uint8 quantization (and int32 biases)")
    if dtype == np.int32 and zero is not None and np.any(zero != 0):
        bad = zero.ravel()[np.flatnonzero(zero)[0]]
        raise DlaError(NvError.BadValue, f"{where}: the int32 '{printable(tensor)}' has a zero point of "
                                         f"{bad}: an int32 bias has zero point 0")
    return dtype
