"""An ONNX model read as the INT8 back end's layers: float operators (Conv, Gemm/MatMul, pooling,
Add, Concat, Relu/Clip, Flatten/Reshape) over tensors that each have a quantization (scale and zero
point, INT8: an unsigned tensor is stored minus 128), from one of three sources:

- a float model and a calibration table (the weights are quantized here, per output channel);
- a QDQ model: QuantizeLinear/DequantizeLinear pairs give the activations' quantization, a
  DequantizeLinear of a constant gives the weights (int8, per channel or per tensor) and the bias;
- a QOperator model: QLinearConv, QLinearMatMul, QLinearAdd, QLinearConcat, QLinearAveragePool,
  QLinearGlobalAveragePool (and MaxPool on a quantized tensor).

Usage::

    net = read_layers(onnx_model, table)     # table None for a quantized model
    net.layers[0].op, net.quant["x"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from pydla.errors import DlaError, NvError

Quant = tuple[float, int]  # (scale, zero point of the INT8 value)


@dataclass
class Weights:
    """A convolution's (or fully connected layer's) kernels: float, or int8 with per-channel scales."""

    values: np.ndarray  # K x C x R x S (float32, or int8 when scales is set)
    scales: np.ndarray | None = None  # per output channel
    bias: np.ndarray | None = None  # float, per output channel
    bias_int: np.ndarray | None = None  # int32 sums' units (a QDQ/QOperator model's)


@dataclass
class Layer:
    op: str  # conv, maxpool, avgpool, gap, add, concat, relu, clip, reshape
    inputs: list[str]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)
    weights: Weights | None = None
    name: str = ""


@dataclass
class Network:
    layers: list[Layer]
    inputs: list[tuple[str, tuple[int, ...]]]
    outputs: list[str]
    quant: dict[str, Quant] = field(default_factory=dict)
    kind: str = "float"  # "calibrated", "qdq", "qoperator"
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # from onnx's shape inference


def _int8_quant(scale: Any, zero: Any, where: str) -> Quant:
    s = np.asarray(scale, np.float64).ravel()
    z = np.asarray(zero) if zero is not None else np.zeros(1, np.uint8)
    if s.size != 1:
        raise DlaError(NvError.NotSupported, f"{where}: an activation quantized per channel")
    zi = int(np.asarray(z).ravel()[0])
    if np.asarray(z).dtype == np.uint8:
        zi -= 128
    return float(s[0]), zi


class _Reader:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        g = model.graph
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        self.consts[n.output[0]] = numpy_helper.to_array(a.t)
            elif n.op_type == "Identity" and n.input and n.input[0] in self.consts:
                # torch.onnx.export shares equal weights or biases of several layers this way
                self.consts[n.output[0]] = self.consts[n.input[0]]
        self.alias: dict[str, str] = {}
        self.quant: dict[str, Quant] = {}
        self.layers: list[Layer] = []
        self.dq_const: dict[str, tuple[np.ndarray, Any, Any]] = {}

    def name(self, t: str) -> str:
        while t in self.alias:
            t = self.alias[t]
        return str(t)

    def const(self, t: str) -> np.ndarray | None:
        return self.consts.get(t)

    def opt(self, n: onnx.NodeProto, i: int) -> np.ndarray | None:
        return self.const(n.input[i]) if len(n.input) > i and n.input[i] else None


def _attrs(n: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


def _conv_attrs(n: onnx.NodeProto, kernel: tuple[int, int]) -> dict[str, Any]:
    a = _attrs(n)
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise DlaError(NvError.NotSupported, f"node '{n.name}': auto_pad {a['auto_pad']!r} (give pads)")
    pads = list(a.get("pads", [0, 0, 0, 0]))
    return {
        "kernel": tuple(a.get("kernel_shape", kernel)),
        "strides": tuple(a.get("strides", [1, 1])),
        "dilations": tuple(a.get("dilations", [1, 1])),
        "pads": (pads[1], pads[3], pads[0], pads[2]),
        "group": int(a.get("group", 1)),
        "ceil_mode": int(a.get("ceil_mode", 0)),
        "count_include_pad": int(a.get("count_include_pad", 0)),
    }


def calibrated_quant(t: Any) -> Quant:
    """A calibrated tensor's INT8 quantization: a tensor never negative (after a ReLU) uses all 256
    steps from 0 (zero point -128), any other the table's symmetric scale."""
    low, _high = t.range
    if low >= 0 and t.threshold > 0:
        return float(t.threshold) / 255.0, -128
    return float(t.scale), int(t.zero_point)


def read_layers(model: onnx.ModelProto, table: Any = None) -> Network:
    """The layers of ``model`` (see the module); ``table`` a CalibrationTable for a float model."""
    from pydla.compiler.nvdla.layers_nodes import read_node

    r = _Reader(model)
    g = model.graph
    kind = "calibrated" if table is not None else "float"
    for n in g.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear", "QLinearConv"):
            kind = "qdq" if n.op_type != "QLinearConv" else "qoperator"
            if kind == "qoperator":
                break
    for n in g.node:
        read_node(r, n)
    init = set(r.consts)
    inputs = []
    for vi in g.input:
        if vi.name in init:
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        inputs.append((vi.name, dims))
    if table is not None:
        for name, t in table.tensors.items():
            r.quant.setdefault(name, calibrated_quant(t))
    rename = {r.name(o.name): o.name for o in g.output}  # the graph's outputs keep their names

    def final(t: str) -> str:
        return str(rename.get(r.name(t), r.name(t)))

    outputs = [o.name for o in g.output]
    layers = [
        Layer(x.op, [final(i) for i in x.inputs], final(x.output), x.attrs, x.weights, x.name)
        for x in r.layers
    ]
    quant = {final(k): v for k, v in r.quant.items()}
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        for vi in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input):
            dims = vi.type.tensor_type.shape.dim
            if dims and all(d.HasField("dim_value") for d in dims):
                shapes[final(vi.name)] = tuple(d.dim_value for d in dims)
    except Exception:  # shapes are a help for Concat only; the lowering computes its own
        shapes = {}
    return Network(layers, inputs, outputs, quant, kind, shapes)
