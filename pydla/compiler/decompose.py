"""Operators the import writes as the ones pydla lowers: LayerNormalization (opset 17) as the
decomposed form exporters emit before it (ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div, Mul,
Add), so that a transformer's normalisation compiles; the element-wise parts run on SDP, the means
and the root as CPU runs (a later step puts them on the device).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.compiler.graph_types import Graph, Node
from pydla.errors import DlaError, NvError

# The opset from which ReduceMean takes its axes as an input, not an attribute.
REDUCE_MEAN_AXES_INPUT = 18


def layer_norm(graph: Graph, node: Node) -> list[Node]:
    """LayerNormalization: normalise over the axes from ``axis`` on, then scale (and shift).
    Its optional Mean and InvStdDev outputs are the mean and 1 / sqrt(var + epsilon), with the
    normalised axes kept as 1, as ONNX defines them."""
    x, scale = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    y = node.outputs[0]
    mean_out = node.outputs[1] if len(node.outputs) > 1 else ""
    inv_out = node.outputs[2] if len(node.outputs) > 2 else ""
    shape, dtype = graph.shapes[x], graph.dtypes[x]
    rank = len(shape)
    axis = int(node.attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise DlaError(NvError.BadValue, f"{node.where()}: axis {axis} of a rank-{rank} input '{x}'")
    axis %= rank
    kept = tuple(d if i < axis else 1 for i, d in enumerate(shape))
    base = y or mean_out or inv_out
    parts: list[Node] = []

    def tensor(suffix: str, like: tuple[int, ...], name: str = "") -> str:
        name = name or f"{base}/{suffix}"
        graph.shapes[name], graph.dtypes[name] = like, dtype
        return name

    def const(suffix: str, value: Any, kind: Any = dtype) -> str:
        name = f"{base}/{suffix}"
        graph.consts[name] = np.asarray(value, dtype=kind)
        graph.shapes[name], graph.dtypes[name] = graph.consts[name].shape, graph.consts[name].dtype
        return name

    def add(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        parts.append(Node(f"{node.name}/{op}_{len(parts)}", op, inputs, [output], attrs))
        return output

    axes = list(range(axis, rank))
    reduce_attrs: dict[str, Any] = {"keepdims": 1}
    if graph.opset >= REDUCE_MEAN_AXES_INPUT:
        reduce_inputs = [const("axes", axes, np.int64)]
    else:
        reduce_inputs, reduce_attrs["axes"] = [], axes
    mean = add("ReduceMean", [x, *reduce_inputs], tensor("mean", kept, mean_out), **reduce_attrs)
    centred = add("Sub", [x, mean], tensor("centred", shape))
    squares = add("Mul", [centred, centred], tensor("squares", shape))
    variance = add("ReduceMean", [squares, *reduce_inputs], tensor("variance", kept), **reduce_attrs)
    epsilon = const("epsilon", float(node.attrs.get("epsilon", 1e-5)))
    std = add("Sqrt", [add("Add", [variance, epsilon], tensor("variance_eps", kept))], tensor("std", kept))
    if inv_out:
        add("Div", [const("one", 1.0), std], tensor("", kept, inv_out))
    if not y:
        return parts
    normalised = add("Div", [centred, std], tensor("normalised", shape))
    scaled = add("Mul", [normalised, scale], tensor("scaled", shape) if bias else y)
    if bias:
        add("Add", [scaled, bias], y)
    return parts
