"""The compiler's view of an ONNX model: tensors with static shapes, constants folded.

Exported models compute shapes and pads at run time (Shape, Gather, Concat, ConstantOfShape, Cast,
Slice, Unsqueeze, ...). The inputs' symbolic dimensions are sized first
(:mod:`pydla.compiler.input_shapes`); every node whose inputs are all known is then evaluated
(:mod:`pydla.compiler.fold`), so what is left is the network itself. Shapes come from onnx's shape
inference of the whole graph, and, where that could not know them before folding, of each node as it
is reached (:mod:`pydla.compiler.shapes`); they must be static.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from pydla.compiler import ceil_mode, custom_kernel
from pydla.compiler.decompose import gather_as_slice, last_axis_product, layer_norm, spatial_mean_as_pool
from pydla.compiler.fold import fold, settle_empty
from pydla.compiler.fuse import fold_scalar_factors, fold_transposed_operands, fuse_gelu
from pydla.compiler.graph_types import Graph as Graph
from pydla.compiler.graph_types import Node as Node
from pydla.compiler.input_shapes import InputShapes, with_input_shapes
from pydla.compiler.onnx_model import (
    MIN_OPSET,
    check_attributes,
    check_names,
    check_not_empty,
    check_type_constraints,
    upgraded,
)
from pydla.compiler.onnx_rules import check_model_rules
from pydla.compiler.operators import SHAVE_KERNEL, SUPPORTED, unsupported
from pydla.compiler.progress import Progress, report
from pydla.compiler.shapes import check_same_elements, infer_node
from pydla.errors import DlaError, NvError
from pydla.logconfig import Detail, first_line, printable


def import_graph(model: onnx.ModelProto, progress: Progress | None = None,
                 input_shapes: InputShapes | None = None, whole: frozenset[str] = frozenset(),
                 base_dir: Path | None = None) -> Graph:
    """Static shapes, folded constants, and the remaining nodes in order (``progress``: see
    :mod:`pydla.compiler.progress`; ``input_shapes``: the sizes of the inputs' symbolic
    dimensions, see :mod:`pydla.compiler.input_shapes`; ``whole``: operators to keep whole where
    the target computes them, see :func:`keeps_whole`; ``base_dir``: where custom kernels' relative
    paths start, see :mod:`pydla.compiler.custom_kernel`)."""
    report(progress, "checking")
    check_not_empty(model)
    check_names(model.graph, check_model_rules(model))
    model = with_input_shapes(model, input_shapes if input_shapes is not None else {})
    check_attributes(model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        model = upgraded(model, opset)
        opset = MIN_OPSET
    # Shape inference sees every opset the model imports (its other domains' nodes were refused by
    # name already, bar pydla's own), the default one as upgraded.
    imports = {o.domain: o.version for o in model.opset_import if o.domain not in ("", "ai.onnx")}
    imports = {"": opset, custom_kernel.DOMAIN: 1, **imports}
    report(progress, "shape inference")
    g, inferred, _ = _infer_with_pools_fixed(model.graph, imports, "ONNX shape inference")
    consts = {init.name: _initializer(init) for init in g.initializer}
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, np.dtype[Any]] = {}
    for vi in _typed(g.input, inferred):
        t = vi.type.tensor_type
        shapes[vi.name] = _dims(t)
        dtypes[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
    for vi in model.graph.output:  # a declared shape that inference of a rewritten graph lacks
        t = vi.type.tensor_type
        declared = _dims(t)
        known = min(shapes.get(vi.name, (-1,)), default=1) > 0
        if t.HasField("shape") and not known and min(declared, default=1) > 0:
            shapes[vi.name] = declared
    for name, value in consts.items():
        shapes[name], dtypes[name] = tuple(value.shape), value.dtype
    check_type_constraints(g, opset, {vi.name: vi.type.tensor_type.elem_type for vi in
                                       [*g.input, *inferred.graph.value_info, *inferred.graph.output]}
                            | {init.name: init.data_type for init in g.initializer})
    inputs = [i.name for i in g.input if i.name not in consts]
    for name in inputs:
        if name not in shapes or min(shapes[name], default=1) < 0:
            raise DlaError(NvError.NotSupported,
                           f"input '{name}' has shape {shapes.get(name)}: pydla needs static shapes "
                           "(fix the batch and image size when exporting)")
        _check_size("graph input", name, shapes, dtypes)
        if 0 in shapes[name]:  # an empty input holds nothing: it is known now (and still an input)
            consts[name] = np.empty(shapes[name], dtypes[name])
    graph = Graph(inputs, [o.name for o in g.output], shapes, dtypes, consts, opset=opset, whole=whole,
                  imports=imports)
    report(progress, "folding constants")
    for i, n in enumerate(g.node):
        node = Node(n.name or f"{n.op_type}_{i}", n.op_type, list(n.input), list(n.output),
                    {a.name: helper.get_attribute_value(a) for a in n.attribute})
        if custom_kernel.is_custom(n):  # a kernel author's: neither inferred by onnx nor folded
            graph.nodes.append(custom_kernel.import_node(node, n, base_dir))
            custom_kernel.infer(graph, graph.nodes[-1])
            continue
        n = infer_node(graph, node, n, opset)
        if not fold(graph, node, n, opset):
            graph.nodes.append(node)
    _check_operators(graph)
    missing = [o for n in graph.nodes for o in n.outputs
               if o and (o not in shapes or min(shapes[o], default=1) < 0)]
    if missing:
        _reinfer(graph, g)
    for node in graph.nodes:
        for name in node.outputs:
            if name and (name not in graph.shapes or min(graph.shapes[name], default=1) < 0):
                raise DlaError(NvError.NotSupported,
                               f"{node.where()}: the shape of '{name}' is not static")
            if name:
                _check_size(node.where(), name, graph.shapes, graph.dtypes)
    check_same_elements(graph)
    settle_empty(graph, opset)
    for node in graph.nodes:
        index = VECTOR_INPUTS.get(node.op_type)
        name = node.inputs[index] if index is not None and index < len(node.inputs) else ""
        if name and len(graph.shapes.get(name, (0,))) != 1:
            raise DlaError(NvError.BadValue, f"{node.where()}: '{name}' has shape {graph.shapes.get(name)}; "
                                             f"{node.op_type} takes it as a 1-D tensor")
    graph.nodes = [part for node in graph.nodes for part in _rewrite(graph, node)]
    fuse_gelu(graph)
    fold_transposed_operands(graph)
    fold_scalar_factors(graph)
    _distinct_outputs(graph)
    return graph


def _check_operators(graph: Graph) -> None:
    """Each remaining node's operator is one pydla compiles. Asked before the shapes must be static:
    an operator whose output shape depends on the data (NonMaxSuppression, NonZero) is refused as
    the operator it is. A node all of whose outputs are known to be empty is left to
    :func:`pydla.compiler.fold.settle_empty`, which removes it."""
    for node in graph.nodes:
        if node.op_type in SUPPORTED or node.op_type == SHAVE_KERNEL:
            continue
        shapes = [graph.shapes.get(o) for o in node.outputs if o]
        if shapes and all(s is not None and min(s, default=1) >= 0 and 0 in s for s in shapes):
            continue
        raise DlaError(NvError.NotSupported, f"{node.where()}: {unsupported(node.op_type)}")


def _distinct_outputs(graph: Graph) -> None:
    """Each output its own tensor: an output that is a graph input, or an output listed before,
    becomes a copy under an internal name (the loadable still names it as the model does), so its
    buffer is written (it was left as allocated)."""
    graph.output_names = list(graph.outputs)
    seen = set(graph.inputs)
    for j, name in enumerate(graph.outputs):
        if name in seen and not graph.is_empty(name):
            copy = f"{name}/output{j}"
            graph.shapes[copy], graph.dtypes[copy] = graph.shapes[name], graph.dtypes[name]
            if name in graph.consts:
                graph.consts[copy] = graph.consts[name]
            else:
                graph.nodes.append(Node(f"output {j} '{name}'", "Identity", [name], [copy], {}))
            graph.outputs[j] = copy
        seen.add(name)


# Inputs that ONNX defines as 1-D tensors (onnxruntime refuses others; a 2-D one would be flattened).
VECTOR_INPUTS = {"Reshape": 1, "Expand": 1, "Tile": 1}


# The largest normalised group a layer normalisation kept whole may have: its rows, scale and bias
# must fit a SHAVE tile's CMX (pydla.compiler.shave_ops), in and out.
WHOLE_LAYERNORM_MAX_GROUP = 64 << 10


def keeps_whole(graph: Graph, node: Node) -> bool:
    """Whether ``node`` stays whole: a LayerNormalization of a float32 tensor with constant scale
    and bias and no Mean / InvStdDev output, when the import was asked to keep them
    (``whole``); else it is decomposed."""
    if node.op_type not in graph.whole or node.op_type != "LayerNormalization":
        return False
    x = node.inputs[0]
    shape = graph.shapes.get(x, ())
    rank = len(shape)
    axis = int(node.attrs.get("axis", -1))
    params = [t for t in node.inputs[1:3] if t]
    return (graph.dtypes.get(x) == np.dtype(np.float32) and rank > 0 and -rank <= axis < rank
            and all(t in graph.consts for t in params) and not any(node.outputs[1:])
            and int(np.prod(shape[axis % rank:])) <= WHOLE_LAYERNORM_MAX_GROUP)


def _rewrite(graph: Graph, node: Node) -> list[Node]:
    """``node`` as the nodes the device computes it with (most nodes: itself)."""
    if node.op_type in VARIADIC:
        return _binary(graph, node)
    if node.op_type == "Dropout":
        return _dropout(graph, node)
    if node.op_type == "LayerNormalization" and not keeps_whole(graph, node):
        return layer_norm(graph, node)
    if node.op_type in ("ReduceMean", "ReduceSum"):
        return last_axis_product(graph, node) or spatial_mean_as_pool(graph, node) or [node]
    if node.op_type == "Gather":
        return gather_as_slice(graph, node) or [node]
    if node.op_type == "PRelu" and len(node.inputs) == 2 and not _prelu_on_sdp(graph, *node.inputs):
        return _prelu_of_a_tensor(graph, node)
    if node.op_type in ("Neg", "Abs", "Reciprocal"):
        return _unary(graph, node)
    if node.op_type == "Pow":
        return _pow(graph, node)
    if node.op_type == "Not":  # the CPU library's comparison: x == false
        false = f"{node.outputs[0]}/false"
        graph.consts[false] = np.zeros((), np.bool_)
        graph.shapes[false], graph.dtypes[false] = (), np.dtype(np.bool_)
        return [Node(node.name, "Equal", [node.inputs[0], false], [node.outputs[0]], {})]
    return [node]


def _pow(graph: Graph, node: Node) -> list[Node]:
    """Pow by a constant exponent the same everywhere: 1 -> x, 2 -> x * x, 0.5 -> Sqrt, -1 -> 1 / x
    (the device's or a cheaper CPU run's forms); any other Pow stays a CPU run of its own."""
    x, exponent = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    value = np.asarray(graph.consts.get(exponent, np.array([np.nan])))
    if (value.size != 1 or graph.dtypes.get(x) != np.float32 or graph.shapes.get(out) != graph.shapes.get(x)):
        return [node]
    e = float(value.ravel()[0])
    if e == 1.0:
        return [Node(node.name, "Identity", [x], [out], {})]
    if e == 2.0:
        return [Node(node.name, "Mul", [x, x], [out], {})]
    if e == 0.5:
        return [Node(node.name, "Sqrt", [x], [out], {})]
    if e == -1.0:
        return _unary(graph, Node(node.name, "Reciprocal", [x], [out], {}))
    return [node]


def _unary(graph: Graph, node: Node) -> list[Node]:
    """Neg as x * -1, Abs as max(x, x * -1) (of an unsigned tensor: x itself), Reciprocal as 1 / x:
    element-wise operations with a constant, which SDP (or the CPU library, for integers) computes."""
    x, out = node.inputs[0], node.outputs[0]
    dtype = graph.dtypes[x]

    def const(name: str, value: int) -> str:
        graph.consts[name] = np.array(value, dtype=dtype)
        graph.shapes[name], graph.dtypes[name] = (), dtype
        return name

    if node.op_type == "Reciprocal":
        return [Node(node.name, "Div", [const(f"{out}/one", 1), x], [out], {})]
    if node.op_type == "Abs" and dtype.kind == "u":
        return [Node(node.name, "Identity", [x], [out], {})]
    if node.op_type == "Neg":
        return [Node(node.name, "Mul", [x, const(f"{out}/minus_one", -1)], [out], {})]
    negated = f"{out}/negated"
    graph.shapes[negated], graph.dtypes[negated] = graph.shapes[x], dtype
    return [Node(f"{node.name}/neg", "Mul", [x, const(f"{out}/minus_one", -1)], [negated], {}),
            Node(node.name, "Max", [x, negated], [out], {})]


def _dropout(graph: Graph, node: Node) -> list[Node]:
    """Dropout at inference: the data passes unchanged and the mask, if asked for, is all true."""
    training = node.inputs[2] if len(node.inputs) > 2 else ""
    if training and training not in graph.consts:
        raise DlaError(NvError.NotSupported, f"{node.where()}: training_mode '{training}' is given at run "
                                             "time: pydla runs inference only (training_mode false)")
    if training and np.asarray(graph.consts[training]).any():
        raise DlaError(NvError.NotSupported, f"{node.where()}: training_mode true drops values at random: "
                                             "pydla runs inference only")
    mask = node.outputs[1] if len(node.outputs) > 1 else ""
    if mask:
        graph.consts[mask] = np.ones(graph.shapes[node.inputs[0]], dtype=np.bool_)
        graph.shapes[mask], graph.dtypes[mask] = graph.shapes[node.inputs[0]], np.dtype(np.bool_)
    if not node.outputs[0]:
        return []
    return [Node(node.name, "Identity", [node.inputs[0]], [node.outputs[0]], {})]


def _prelu_on_sdp(graph: Graph, x: str, slope: str) -> bool:
    """SDP computes it: a float tensor and a constant slope (fused into the convolution before it
    when one value per channel, else an SDP operation or several of its own)."""
    return slope in graph.consts and graph.dtypes.get(x) == np.float32


def _prelu_of_a_tensor(graph: Graph, node: Node) -> list[Node]:
    """PRelu whose slope is given at run time: max(x, 0) + slope * min(x, 0), with the slope
    broadcast as Mul broadcasts (SDP's PReLU takes its slopes from the task, not from a tensor)."""
    x, slope = node.inputs
    out = node.outputs[0]
    dtype, shape = graph.dtypes[out], graph.shapes[x]
    zero, neg, scaled, pos = (f"{out}/{part}" for part in ("zero", "negative", "scaled", "positive"))
    graph.consts[zero] = np.zeros((), dtype)
    graph.shapes[zero], graph.dtypes[zero] = (), dtype
    for name in (neg, scaled, pos):
        graph.shapes[name], graph.dtypes[name] = shape, dtype
    return [Node(f"{node.name}/min", "Min", [x, zero], [neg], {}),
            Node(f"{node.name}/mul", "Mul", [neg, slope], [scaled], {}),
            Node(f"{node.name}/max", "Max", [x, zero], [pos], {}),
            Node(f"{node.name}/add", "Add", [pos, scaled], [out], {})]


VARIADIC = {"Max": "Max", "Min": "Min", "Sum": "Add", "Mean": "Add"}


def _binary(graph: Graph, node: Node) -> list[Node]:
    """Variadic Max / Min / Sum / Mean as a chain of two-input nodes, which is what the device
    computes (one input: Identity; Mean: the sum divided by the count)."""
    if node.op_type not in VARIADIC:
        return [node]
    names = [i for i in node.inputs if i]
    if not names:
        raise DlaError(NvError.BadValue, f"{node.where()}: no inputs")
    out = node.outputs[0]
    mean = node.op_type == "Mean" and len(names) > 1
    parts: list[Node] = []
    acc = names[0]
    for i, name in enumerate(names[1:], start=1):
        last = i == len(names) - 1 and not mean
        target = out if last else f"{out}/{node.op_type.lower()}{i}"
        if not last:
            graph.shapes[target] = tuple(np.broadcast_shapes(graph.shapes[acc], graph.shapes[name]))
            graph.dtypes[target] = graph.dtypes[out]
        parts.append(Node(f"{node.name}/{i}", VARIADIC[node.op_type], [acc, name], [target], {}))
        acc = target
    if mean:
        count = f"{out}/count"
        graph.consts[count] = np.array(len(names), dtype=graph.dtypes[out])
        graph.shapes[count], graph.dtypes[count] = (), graph.dtypes[out]
        parts.append(Node(f"{node.name}/mean", "Div", [acc, count], [out], {}))
    if not parts:
        parts.append(Node(node.name, "Identity", [acc], [out], {}))
    return parts


MAX_TENSOR_BYTES = 1 << 32  # a tensor beyond this is a corrupt model or none a device could hold


def _initializer(init: onnx.TensorProto) -> np.ndarray:
    count = int(math.prod(float(d) for d in init.dims))
    if count * 8 > MAX_TENSOR_BYTES or min(init.dims, default=0) < 0:
        raise DlaError(NvError.NotSupported, f"initializer '{init.name}' of dims {list(init.dims)}: "
                                             f"more than {MAX_TENSOR_BYTES >> 30} GiB, or negative")
    try:
        return numpy_helper.to_array(init)
    except Exception as e:  # onnx raises several types for malformed tensors
        raise DlaError(NvError.BadValue, f"initializer '{printable(init.name)}' cannot be read: "
                                         f"{type(e).__name__}: {first_line(e)}") from Detail(str(e))


def _check_size(where: str, name: str, shapes: dict[str, tuple[int, ...]],
                dtypes: dict[str, np.dtype[Any]]) -> None:
    size = math.prod(float(d) for d in shapes[name]) * dtypes.get(name, np.dtype(np.float32)).itemsize
    if size > MAX_TENSOR_BYTES:
        raise DlaError(NvError.NotSupported, f"{where}: '{name}' of shape {shapes[name]} takes {size:.3g} "
                                             f"bytes, more than {MAX_TENSOR_BYTES >> 30} GiB")


def _reinfer(graph: Graph, g: onnx.GraphProto) -> None:
    """Shapes that depended on folded values (a Reshape to a computed shape): infer them again on
    the folded graph."""
    used = {i for n in graph.nodes for i in n.inputs if i in graph.consts}
    nodes = [helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name, **n.attrs) for n in graph.nodes
             if n.op_type != SHAVE_KERNEL]
    graph_inputs = set(graph.inputs)
    inputs = [i for i in g.input if i.name in graph_inputs] + custom_kernel.output_infos(graph)
    folded = helper.make_graph(nodes, "folded", inputs, list(g.output),
                               [numpy_helper.from_array(graph.consts[name], name) for name in sorted(used)])
    # Pools whose input shapes only folding made known get their ceil_mode fixed here.
    _, inferred, pools = _infer_with_pools_fixed(folded, graph.imports,
                                                 "ONNX shape inference of the folded graph")
    for i in pools:
        graph.nodes[i].attrs["ceil_mode"] = 0
    for vi in _typed([], inferred):
        t = vi.type.tensor_type
        if vi.name not in graph.consts:
            graph.shapes[vi.name] = _dims(t)
            graph.dtypes[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))


def _dims(t: onnx.TypeProto.Tensor) -> tuple[int, ...]:
    return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)


def _typed(inputs: Any, inferred: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """``inputs`` and the values shape inference described, those with a shape."""
    return [vi for vi in [*inputs, *inferred.graph.value_info, *inferred.graph.output]
            if vi.type.tensor_type.HasField("shape")]


def _infer_with_pools_fixed(g: onnx.GraphProto, imports: dict[str, int],
                            what: str) -> tuple[onnx.GraphProto, onnx.ModelProto, list[int]]:
    """Shape inference of ``g`` with the opsets ``imports`` (by domain), with the pools whose
    ceil_mode adds only padding windows rewritten first (see :mod:`pydla.compiler.ceil_mode`): the
    graph, its inference, the rewritten nodes."""
    opset = imports[""]
    inferred = _infer(_without_big_weights(g), imports, what)
    fixed: list[int] = []
    for _ in range(len(g.node)):  # each pass may make the input shapes of later pools known
        shapes = {vi.name: _dims(vi.type.tensor_type) for vi in _typed(g.input, inferred)}
        shapes.update({init.name: tuple(init.dims) for init in g.initializer})
        pools = ceil_mode.floor_nodes(g, shapes, opset)
        if not pools:
            break
        fixed += pools
        g = ceil_mode.without_padding_windows(g, pools)
        inferred = _infer(_without_big_weights(g), imports, what)
    return g, inferred, fixed


def _without_big_weights(g: onnx.GraphProto) -> onnx.GraphProto:
    """The graph with its large initializers turned into typed inputs: shape inference needs their
    shapes, not their values, and serialising 100 MB of weights for it costs more than compiling."""
    small: list[onnx.TensorProto] = []
    big: list[onnx.TensorProto] = []
    for init in g.initializer:
        count = 1
        for d in init.dims:
            count *= d
        (small if count <= 4096 or init.data_type not in (1, 10, 11) else big).append(init)
    typed = [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in big]
    names = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in names] + typed
    # An output that is a graph input is declared as the input is: an output entry without a shape
    # would otherwise make onnx's inference forget the input's shape for every node reading it.
    declared = {i.name: i for i in g.input}
    outputs = [declared.get(o.name, o) for o in g.output]
    return helper.make_graph(list(g.node), g.name or "graph", inputs, outputs, small,
                             value_info=list(g.value_info))


def _infer(g: onnx.GraphProto, imports: dict[str, int], what: str) -> onnx.ModelProto:
    model = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()])
    try:
        return shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:  # onnx's report: several lines, the first says what failed
        raise DlaError(NvError.BadValue, f"{what} failed: {first_line(e)}") from Detail(str(e))
