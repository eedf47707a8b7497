"""Half-precision (float16) ONNX models, as exporters and onnxconverter-common's float16 conversion
make them: inputs, outputs, weights and the tensors between them in float16.

The device computes FP16 itself (a configuration whose precisions include FP16), so such a model
is compiled as the float32 model it describes (every float16 tensor, weight, Cast and constant made
float32: the compiler's graph holds one floating-point type), computed at the precision asked for,
with the graph's float16 inputs and outputs kept float16 in the loadable:

- at fp16 precision the device reads and writes them as they are (SDP's conversion into and out of
  the device's scratch copies is then a copy): :attr:`HalfModel.inputs` / ``outputs`` name them;
- at fp32 precision the model computes in float32 and its float16 inputs and outputs are converted
  at its edges (Cast nodes, which the host's CPU library computes exactly).

Usage::

    half = float32_view(model, precision="fp16")  # None for a model without float16 tensors
    graph = import_graph(half.model, ...)          # then Lowering(..., half_io=half.io(graph))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pydla.compiler.graph_types import Graph

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
# The attributes naming an element type a node makes (Cast's "to", the generators' "dtype").
_TYPE_ATTRIBUTES = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                    "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Multinomial": "dtype"}


@dataclass(frozen=True)
class HalfModel:
    """The float32 view of a float16 model and its float16 inputs and outputs (by ONNX name)."""

    model: onnx.ModelProto
    inputs: frozenset[str]
    outputs: frozenset[str]

    def io(self, graph: Graph) -> frozenset[str]:
        """The names ``graph`` gives the float16 inputs and outputs (an output may have been renamed
        to an internal copy: its loadable name is in ``graph.output_names``)."""
        public = graph.output_names or graph.outputs
        outs = {graph.outputs[j] for j, name in enumerate(public) if name in self.outputs}
        return frozenset(outs | {name for name in graph.inputs if name in self.inputs})


def has_float16(model: onnx.ModelProto) -> bool:
    """Whether any of the model's tensors, declared values or Cast targets is float16."""
    g = model.graph
    if any(vi.type.tensor_type.elem_type == F16 for vi in [*g.input, *g.output, *g.value_info]):
        return True
    if any(init.data_type == F16 for init in g.initializer):
        return True
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F16:
                return True
            if a.name == _TYPE_ATTRIBUTES.get(n.op_type) and a.i == F16:
                return True
    return False


def float32_view(model: onnx.ModelProto, precision: str) -> HalfModel | None:
    """``model`` with every float16 tensor made float32 (None when it has none); at ``precision``
    "fp32" its float16 inputs and outputs stay float16 and are cast at the graph's edges, at "fp16"
    they become float32 in the graph and the lowering keeps them float16 (``HalfModel.inputs``)."""
    if not has_float16(model):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    half_in = [vi.name for vi in g.input if vi.type.tensor_type.elem_type == F16]
    half_out = [vi.name for vi in g.output if vi.type.tensor_type.elem_type == F16]
    initializers = {init.name for init in g.initializer}
    half_in = [name for name in half_in if name not in initializers]
    for i, init in enumerate(g.initializer):
        if init.data_type == F16:
            g.initializer[i].CopyFrom(_as_float32(init))
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type == F16:
            vi.type.tensor_type.elem_type = F32
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F16:
                a.t.CopyFrom(_as_float32(a.t))
            elif a.type == onnx.AttributeProto.INT and a.i == F16 \
                    and a.name == _TYPE_ATTRIBUTES.get(n.op_type):
                a.i = F32
    if precision == "fp16":
        return HalfModel(out, frozenset(half_in), frozenset(half_out))
    _cast_edges(g, half_in, half_out)
    return HalfModel(out, frozenset(), frozenset())


def _as_float32(t: TensorProto) -> TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)


def _cast_edges(g: onnx.GraphProto, half_in: list[str], half_out: list[str]) -> None:
    """The float16 inputs and outputs declared float16 again, each read or written through a Cast
    between it and the float32 graph (an output that is an input stays the input, uncast)."""
    renamed = {name: f"{name}/float32" for name in half_in}
    outputs = {name: f"{name}/float32" for name in half_out if name not in renamed}
    for n in g.node:
        for k, name in enumerate(n.input):
            if name in renamed:
                n.input[k] = renamed[name]
            elif name in outputs:  # an output read by a later node: the float32 value
                n.input[k] = outputs[name]
        for k, name in enumerate(n.output):
            if name in outputs:
                n.output[k] = outputs[name]
    first = [helper.make_node("Cast", [name], [renamed[name]], name=f"{name}/to_float32", to=F32)
             for name in half_in]
    last = [helper.make_node("Cast", [outputs[name]], [name], name=f"{name}/to_float16", to=F16)
            for name in half_out if name in outputs]
    nodes = [*first, *g.node, *last]
    del g.node[:]
    g.node.extend(nodes)
    for vi in [*g.input, *g.output]:
        if vi.name in half_in or vi.name in half_out:
            vi.type.tensor_type.elem_type = F16
    kept = [vi for vi in g.value_info if vi.name not in renamed and vi.name not in outputs]
    del g.value_info[:]
    g.value_info.extend(kept)
