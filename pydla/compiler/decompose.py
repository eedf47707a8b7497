"""Operators the import writes as the ones pydla lowers: LayerNormalization (opset 17) as the
decomposed form exporters emit before it (ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div, Mul,
Add), so that a transformer's normalisation compiles; and a mean or sum over the last axis alone
(the means of that form, also as exporters emit them) as a MatMul by a constant column, which the
device computes. The element-wise parts run on SDP, the root as a CPU run (a later step puts it on
the device).
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
    if y:
        normalised = add("Div", [centred, std], tensor("normalised", shape))
        scaled = add("Mul", [normalised, scale], tensor("scaled", shape) if bias else y)
        if bias:
            add("Add", [scaled, bias], y)
    return [part for n in parts for part in (last_axis_product(graph, n) if n.op_type == "ReduceMean"
                                             else None) or [n]]


# The opsets from which a reduction takes its axes as an input, not an attribute.
AXES_INPUT_SINCE = {"ReduceSum": 13, "ReduceMean": REDUCE_MEAN_AXES_INPUT}


def last_axis_product(graph: Graph, node: Node) -> list[Node] | None:
    """ReduceMean / ReduceSum of a float32 tensor over its last axis alone as a MatMul by a
    constant column of 1 / D (or ones): a CONV operation on the device instead of a CPU run, which
    would split the NPU work (a transformer's normalisations reduce so, twice each). None when the
    node reduces otherwise."""
    x, out = node.inputs[0], node.outputs[0]
    shape = graph.shapes.get(x, ())
    if graph.dtypes.get(x) != np.float32 or len(shape) < 2 or shape[-1] < 1:
        return None
    if _reduced_axes(graph, node, len(shape)) != [len(shape) - 1]:
        return None
    depth = shape[-1]
    column = f"{out}/reduce_column"
    value = 1.0 / depth if node.op_type == "ReduceMean" else 1.0
    graph.consts[column] = np.full((depth, 1), value, np.float32)
    graph.shapes[column], graph.dtypes[column] = (depth, 1), np.dtype(np.float32)
    if int(node.attrs.get("keepdims", 1)):
        return [Node(node.name, "MatMul", [x, column], [out], {})]
    kept, target = f"{out}/kept", f"{out}/shape"
    graph.shapes[kept], graph.dtypes[kept] = (*shape[:-1], 1), np.dtype(np.float32)
    graph.consts[target] = np.array(shape[:-1], np.int64)
    graph.shapes[target], graph.dtypes[target] = (len(shape) - 1,), np.dtype(np.int64)
    return [Node(f"{node.name}/product", "MatMul", [x, column], [kept], {}),
            Node(node.name, "Reshape", [kept, target], [out], {})]


def _reduced_axes(graph: Graph, node: Node, rank: int) -> list[int] | None:
    """The axes a ReduceMean / ReduceSum reduces, each in [0, rank), as written (an attribute, or
    from the opset that made it one, a constant input); None when they are computed, empty, or
    outside the rank (left to the operator's own checks)."""
    if graph.opset >= AXES_INPUT_SINCE[node.op_type]:
        name = node.inputs[1] if len(node.inputs) > 1 else ""
        if name not in graph.consts:
            return None
        axes = [int(a) for a in np.asarray(graph.consts[name]).ravel()]
    else:
        axes = [int(a) for a in node.attrs.get("axes", [])]
    if not axes or not all(-rank <= a < rank for a in axes):
        return None
    return [a % rank for a in axes]


def spatial_mean_as_pool(graph: Graph, node: Node) -> list[Node] | None:
    """ReduceMean of a float32 NCHW tensor over H and W (how the dynamo exporter writes
    ``adaptive_avg_pool2d(x, 1)``: a squeeze-excite gate, a classifier's pooling) as
    GlobalAveragePool, which PDP computes in the NPU task, instead of a SHAVE reduction that ends
    the task before it and starts one after it (MobileNet-v3-small: 10 such splits). Without
    keepdims, a Reshape then drops the two axes. None for any other reduction."""
    x, out = node.inputs[0], node.outputs[0]
    shape = graph.shapes.get(x, ())
    if (node.op_type != "ReduceMean" or graph.dtypes.get(x) != np.float32 or len(shape) != 4
            or min(shape, default=0) < 1):
        return None
    axes = _reduced_axes(graph, node, 4)
    if axes is None or sorted(axes) != [2, 3]:
        return None
    if int(node.attrs.get("keepdims", 1)):
        return [Node(node.name, "GlobalAveragePool", [x], [out], {})]
    pooled, target = f"{out}/pooled", f"{out}/shape"
    graph.shapes[pooled], graph.dtypes[pooled] = (*shape[:2], 1, 1), np.dtype(np.float32)
    graph.consts[target] = np.array(shape[:2], np.int64)
    graph.shapes[target], graph.dtypes[target] = (2,), np.dtype(np.int64)
    return [Node(f"{node.name}/pool", "GlobalAveragePool", [x], [pooled], {}),
            Node(node.name, "Reshape", [pooled, target], [out], {})]


def gather_as_slice(graph: Graph, node: Node) -> list[Node] | None:
    """Gather of a computed tensor by constant indices that step evenly forward (one index, as
    ``x[:, 0]`` exports; or i, i + d, i + 2d, ...: a packed projection's parts) as a Slice, which
    the device copies, and for one index a Reshape dropping the axis: no CPU run. None for other
    indices (left to the CPU library's gather). An index outside the axis is refused here, as
    ONNX refuses it."""
    data, indices, out = node.inputs[0], node.inputs[1], node.outputs[0]
    if data in graph.consts or indices not in graph.consts:
        return None
    shape = graph.shapes[data]
    values = np.asarray(graph.consts[indices])
    if values.dtype.kind not in "iu" or values.ndim > 1 or values.size == 0 or not shape:
        return None
    axis = int(node.attrs.get("axis", 0))
    if not -len(shape) <= axis < len(shape):
        raise DlaError(NvError.BadValue, f"{node.where()}: axis {axis} of a rank-{len(shape)} input '{data}'")
    axis %= len(shape)
    dim = shape[axis]
    flat = [int(v) for v in values.ravel()]
    bad = [v for v in flat if not -dim <= v < dim]
    if bad:
        raise DlaError(NvError.BadValue, f"{node.where()}: index {bad[0]} is outside axis {axis} of '{data}' "
                                         f"(size {dim})")
    flat = [v % dim for v in flat]
    step = flat[1] - flat[0] if len(flat) > 1 else 1
    if step < 1 or flat != list(range(flat[0], flat[0] + step * len(flat), step)):
        return None
    # A slice along one axis is one BDMA operation whatever the shape (the axes before it are its
    # surfaces, the axis its lines, the axes after it one line), so it never exceeds a copy's limit.

    def const(suffix: str, value: int) -> str:
        name = f"{out}/{suffix}"
        graph.consts[name] = np.array([value], np.int64)
        graph.shapes[name], graph.dtypes[name] = (1,), np.dtype(np.int64)
        return name

    params = [const("starts", flat[0]), const("ends", flat[-1] + 1), const("axes", axis),
              const("steps", step)]
    if values.ndim == 1:
        return [Node(node.name, "Slice", [data, *params], [out], {})]
    part = f"{out}/slice"
    graph.shapes[part] = (*shape[:axis], 1, *shape[axis + 1:])
    graph.dtypes[part] = graph.dtypes[data]
    target = f"{out}/shape"
    graph.consts[target] = np.array(graph.shapes[out], np.int64)
    graph.shapes[target], graph.dtypes[target] = (len(graph.shapes[out]),), np.dtype(np.int64)
    return [Node(f"{node.name}/slice", "Slice", [data, *params], [part], {}),
            Node(node.name, "Reshape", [part, target], [out], {})]
