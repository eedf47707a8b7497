"""A quantized model (:mod:`pydla.compiler.qdq`) as the float model it approximates, for a device
configuration without an INT8 path (``--dequantize-qdq``).

QOperators are first written in QDQ form (QLinearConv: DequantizeLinear of x and w, Conv with the
int32 bias times x_scale * w_scale, QuantizeLinear of the result; ConvInteger / MatMulInteger:
their zero points subtracted in float, the int32 result cast back). Then every QuantizeLinear /
DequantizeLinear goes:

- DequantizeLinear of a constant (weights, biases): the float constant ``(q - zero_point) * scale``;
- QuantizeLinear followed by DequantizeLinear (an activation's fake quantization): computed in
  float as onnxruntime's QDQ reference computes it, ``clip(round(x / scale), qmin - zp, qmax - zp) *
  scale``, so the float model sees the same values (the rounding is a CPU run; the clip and the
  multiplication are SDP's);
- a QuantizeLinear whose integers leave the model: ``clip(round(x / scale) + zp)`` cast to its type;
  a DequantizeLinear of a model input: ``(float(q) - zp) * scale``.

Usage: ``float_model = dequantized(model)``
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pydla.compiler.qdq import INTEGER_TYPES, constants, ranks
from pydla.errors import DlaError, NvError
from pydla.logconfig import printable

_FLOAT_OPS = {"QLinearAdd": "Add", "QLinearMul": "Mul", "QLinearSigmoid": "Sigmoid",
              "QLinearLeakyRelu": "LeakyRelu", "QLinearAveragePool": "AveragePool",
              "QLinearGlobalAveragePool": "GlobalAveragePool"}


class _Builder:
    """New nodes and constants, named after the node they come from."""

    def __init__(self, consts: dict[str, np.ndarray]) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.consts = consts
        self.new_consts: dict[str, np.ndarray] = {}

    def const(self, name: str, value: np.ndarray) -> str:
        self.consts[name] = self.new_consts[name] = value
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output


def dequantized(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with no quantized operator left (see the module); its inputs and outputs keep
    their types."""
    consts = constants(model)
    shapes = ranks(model)
    shapes.update({k: v.shape for k, v in consts.items()})
    b = _Builder(consts)
    for n in model.graph.node:
        _qoperator_as_qdq(b, n)
    qdq = b.nodes
    graph_outputs = {o.name for o in model.graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in qdq:
        for name in n.input:
            readers.setdefault(name, []).append(n)
    producer = {o: n for n in qdq for o in n.output}
    out = _Builder(consts)
    out.new_consts.update(b.new_consts)  # the QOperators' float biases
    for n in qdq:
        if n.op_type == "DequantizeLinear":
            _dequantize(out, n, producer, shapes, graph_outputs, readers)
        elif n.op_type == "QuantizeLinear":
            _quantize(out, n, shapes, graph_outputs, readers)
        else:
            out.nodes.append(n)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    g = result.graph
    used = {name for n in out.nodes for name in n.input} | graph_outputs
    inits = [i for i in g.initializer if i.name in used and i.name not in out.new_consts]
    inits += [numpy_helper.from_array(v, k) for k, v in out.new_consts.items() if k in used]
    del g.node[:]
    g.node.extend(out.nodes)
    del g.initializer[:]
    g.initializer.extend(inits)
    del g.value_info[:]  # the quantized tensors' types are gone: inferred again
    return result


def _params(b: _Builder, n: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray, int]:
    scale = np.asarray(b.consts[n.input[1]])
    zero = np.asarray(b.consts[n.input[2]]) if len(n.input) > 2 and n.input[2] else np.zeros((), np.uint8)
    axis = next((int(a.i) for a in n.attribute if a.name == "axis"), 1)
    return scale, zero, axis


def _along(value: np.ndarray, axis: int, rank: int, where: str) -> np.ndarray:
    """A scale or zero point shaped to broadcast along ``axis`` of a tensor of ``rank``."""
    if value.size == 1:
        return value.reshape(())
    if rank <= 0:
        raise DlaError(NvError.NotSupported, f"{where}: per-channel quantization of a tensor of unknown rank")
    shape = [1] * rank
    shape[axis % rank] = value.size
    return value.reshape(shape)


def _dequantize(b: _Builder, n: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto],
                shapes: Mapping[str, tuple[int, ...]], graph_outputs: set[str],
                readers: Mapping[str, list[onnx.NodeProto]]) -> None:
    x, y = n.input[0], n.output[0]
    where = f"node '{printable(n.name or y)}' (DequantizeLinear)"
    scale, zero, axis = _params(b, n)
    ftype = scale.dtype
    if x in b.consts:  # weights, biases: folded
        q = np.asarray(b.consts[x])
        s, z = _along(scale, axis, q.ndim, where), _along(zero, axis, q.ndim, where)
        b.const(y, ((q.astype(np.float64) - z.astype(np.float64)) * s.astype(np.float64)).astype(ftype))
        return
    q_node = producer.get(x)
    if q_node is not None and q_node.op_type == "QuantizeLinear" and _same(b, q_node, n) \
            and x not in graph_outputs and all(r.op_type == "DequantizeLinear" for r in readers.get(x, [])):
        fake = f"{x}/fake_quantized"
        if not any(o.output[0] == fake for o in b.nodes):
            _fake_quantize(b, q_node, fake, shapes)
        b.node("Identity", [fake], y)
        return
    rank = len(shapes.get(x, ()))
    s, z = _along(scale, axis, rank, where), _along(zero, axis, rank, where)
    as_float = b.node("Cast", [x], f"{y}/float", to=helper.np_dtype_to_tensor_dtype(ftype))
    centred = b.node("Sub", [as_float, b.const(f"{y}/zero_point", z.astype(ftype))], f"{y}/centred")
    b.node("Mul", [centred, b.const(f"{y}/scale", s.astype(ftype))], y)


def _same(b: _Builder, q: onnx.NodeProto, dq: onnx.NodeProto) -> bool:
    (s1, z1, a1), (s2, z2, a2) = _params(b, q), _params(b, dq)
    return bool(s1.shape == s2.shape and np.array_equal(s1, s2) and np.array_equal(z1.astype(np.int64),
                z2.astype(np.int64)) and z1.dtype == z2.dtype and (s1.size == 1 or a1 == a2))


def _rounded(b: _Builder, n: onnx.NodeProto, name: str, shapes: Mapping[str, tuple[int, ...]]
             ) -> tuple[str, np.ndarray, np.ndarray, int, int]:
    """round(x / scale) (ties to even, as QuantizeLinear rounds), with the shaped scale and zero
    point and the quantized type's bounds."""
    x = n.input[0]
    where = f"node '{printable(n.name or n.output[0])}' (QuantizeLinear)"
    scale, zero, axis = _params(b, n)
    if zero.dtype not in INTEGER_TYPES or zero.dtype == np.int32:
        raise DlaError(NvError.NotSupported, f"{where}: quantized to {zero.dtype}: int8 and uint8 are read")
    rank = len(shapes.get(x, ()))
    s, z = _along(scale, axis, rank, where), _along(zero, axis, rank, where)
    ftype = scale.dtype
    divided = b.node("Div", [x, b.const(f"{name}/scale", s.astype(ftype))], f"{name}/divided")
    lo, hi = INTEGER_TYPES[zero.dtype]
    return b.node("Round", [divided], f"{name}/rounded"), s.astype(ftype), z, lo, hi


def _clip(b: _Builder, x: str, lo: np.ndarray, hi: np.ndarray, name: str, ftype: np.dtype[Any]) -> str:
    low = b.node("Max", [x, b.const(f"{name}/low", np.asarray(lo, ftype))], f"{name}/at_least")
    return b.node("Min", [low, b.const(f"{name}/high", np.asarray(hi, ftype))], f"{name}/clipped")


def _fake_quantize(b: _Builder, n: onnx.NodeProto, name: str, shapes: Mapping[str, tuple[int, ...]]) -> None:
    rounded, s, z, lo, hi = _rounded(b, n, name, shapes)
    zf = z.astype(np.float64)
    clipped = _clip(b, rounded, lo - zf, hi - zf, name, s.dtype)
    b.node("Mul", [clipped, b.const(f"{name}/step", s)], name)


def _quantize(b: _Builder, n: onnx.NodeProto, shapes: Mapping[str, tuple[int, ...]], graph_outputs: set[str],
              readers: Mapping[str, list[onnx.NodeProto]]) -> None:
    y = n.output[0]
    dequantized_only = all(r.op_type == "DequantizeLinear" and _same(b, n, r) for r in readers.get(y, []))
    if y not in graph_outputs and readers.get(y) and dequantized_only:
        return  # each reader computes the fake quantization (see _dequantize)
    rounded, s, z, lo, hi = _rounded(b, n, y, shapes)
    shifted = b.node("Add", [rounded, b.const(f"{y}/zero_point", z.astype(s.dtype))], f"{y}/shifted")
    clipped = _clip(b, shifted, np.asarray(lo), np.asarray(hi), y, s.dtype)
    b.node("Cast", [clipped], y, to=helper.np_dtype_to_tensor_dtype(z.dtype))


def _qoperator_as_qdq(b: _Builder, n: onnx.NodeProto) -> None:
    """``n`` in QDQ form (a QOperator), else as it is."""
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    ins, y = list(n.input), n.output[0] if n.output else ""
    where = f"node '{printable(n.name or y)}' ({n.op_type})"

    def dq(index: int, scale: int, zero: int, axis: int | None = None) -> str:
        out = f"{y}/input{index}"
        extra = {"axis": axis} if axis is not None else {}
        return b.node("DequantizeLinear", [ins[index], ins[scale], ins[zero] if zero < len(ins) else ""],
                      out, **extra)

    def q(value: str, scale: int, zero: int) -> None:
        b.node("QuantizeLinear", [value, ins[scale], ins[zero]], y)

    if attrs.get("channels_last"):
        raise DlaError(NvError.NotSupported, f"{where}: channels_last: pydla reads channels-first tensors")
    if n.op_type == "QLinearConv":
        inputs = [dq(0, 1, 2), dq(3, 4, 5, axis=0)]
        if len(ins) > 8 and ins[8]:
            xs, ws = np.asarray(b.consts[ins[1]]), np.asarray(b.consts[ins[4]])
            bias = np.asarray(b.consts[ins[8]]).astype(np.float64) * xs.astype(np.float64) * ws.ravel()
            inputs.append(b.const(f"{y}/bias", bias.astype(xs.dtype)))
        q(b.node("Conv", inputs, f"{y}/float", **attrs), 6, 7)
    elif n.op_type == "QLinearMatMul":
        per_column = np.asarray(b.consts[ins[4]]).size > 1
        q(b.node("MatMul", [dq(0, 1, 2), dq(3, 4, 5, axis=-1 if per_column else None)], f"{y}/float"), 6, 7)
    elif n.op_type == "QGemm":
        per_column = np.asarray(b.consts[ins[4]]).size > 1
        a, w = dq(0, 1, 2), dq(3, 4, 5, axis=(0 if attrs.get("transB", 0) else 1) if per_column else None)
        inputs = [a, w]
        if len(ins) > 6 and ins[6]:  # int32 C, of scale a_scale * b_scale
            scales = np.asarray(b.consts[ins[1]]).astype(np.float64) * np.asarray(b.consts[ins[4]]).ravel()
            bias = np.asarray(b.consts[ins[6]]).astype(np.float64) * scales
            inputs.append(b.const(f"{y}/bias", bias.astype(np.asarray(b.consts[ins[1]]).dtype)))
        quantized_out = len(ins) > 7 and ins[7]
        gemm = b.node("Gemm", inputs, f"{y}/float" if quantized_out else y, **attrs)
        if quantized_out:
            q(gemm, 7, 8)
    elif n.op_type in ("QLinearAdd", "QLinearMul"):
        q(b.node(_FLOAT_OPS[n.op_type], [dq(0, 1, 2), dq(3, 4, 5)], f"{y}/float"), 6, 7)
    elif n.op_type in _FLOAT_OPS:
        kept = {k: v for k, v in attrs.items() if k != "channels_last"}
        q(b.node(_FLOAT_OPS[n.op_type], [dq(0, 1, 2)], f"{y}/float", **kept), 3, 4)
    elif n.op_type == "QLinearConcat":
        parts = [dq(k, k + 1, k + 2) for k in range(2, len(ins) - 2, 3)]
        q(b.node("Concat", parts, f"{y}/float", axis=attrs.get("axis", 0)), 0, 1)
    elif n.op_type in ("ConvInteger", "MatMulInteger"):
        one = b.const(f"{y}/one", np.ones((), np.float32))
        zeros = [ins[k] if k < len(ins) and ins[k] else "" for k in (2, 3)]
        x = b.node("DequantizeLinear", [ins[0], one, zeros[0]], f"{y}/input0")
        w_zero = zeros[1]
        if w_zero and np.asarray(b.consts[w_zero]).size > 1:
            b.const(f"{y}/ones", np.ones(np.asarray(b.consts[w_zero]).size, np.float32))
            w = b.node("DequantizeLinear", [ins[1], f"{y}/ones", w_zero], f"{y}/input1",
                       axis=0 if n.op_type == "ConvInteger" else -1)
        else:
            w = b.node("DequantizeLinear", [ins[1], one, w_zero], f"{y}/input1")
        op = "Conv" if n.op_type == "ConvInteger" else "MatMul"
        b.node("Cast", [b.node(op, [x, w], f"{y}/float", **attrs)], y, to=TensorProto.INT32)
    else:
        b.nodes.append(n)
