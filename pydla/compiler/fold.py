"""Constant folding, and tensors of no element: what the import evaluates while compiling.

A node whose inputs are all known is evaluated (the shape subgraphs of exported models: Shape,
Gather, Concat, ...): in numpy for the shape operators (:func:`pydla.compiler.shapes.evaluate`),
with onnx's reference implementation for the others; a tensor with a dimension of 0 holds nothing
and is known too, so the nodes computing only such tensors go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pydla.compiler.shapes import evaluate
from pydla.errors import DlaError, NvError
from pydla.logconfig import Detail, first_line

if TYPE_CHECKING:  # graph.py imports this module: the types are for annotations only
    from pydla.compiler.graph_types import Graph, Node

FOLD_LIMIT = 1 << 24  # elements: larger constant results stay as they are


# What a reduction of no value gives (ONNX: the identity of the operation; Max and Min of floats
# -inf and +inf, of integers the type's extremes).
_EMPTY_REDUCTION = {"ReduceSum": 0, "ReduceL1": 0, "ReduceL2": 0, "ReduceSumSquare": 0, "ReduceProd": 1,
                    "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf, "ReduceMean": np.nan,
                    "ReduceMax": -np.inf, "ReduceMin": np.inf}


def _empty_reduction(op_type: str, dtype: np.dtype[Any]) -> Any:
    value = _EMPTY_REDUCTION[op_type]
    if dtype == np.bool_ and op_type in ("ReduceMax", "ReduceMin"):
        return op_type == "ReduceMin"
    if dtype.kind in "iu" and op_type in ("ReduceMax", "ReduceMin"):
        info = np.iinfo(dtype)
        return info.min if op_type == "ReduceMax" else info.max
    return value


# Operators whose second input is data too (a product's other factor, a convolution's weights).
_WEIGHTED = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})


def settle_empty(graph: Graph, opset: int) -> None:
    """Tensors of no element (a dimension of 0) hold nothing: each is known when compiling, as a
    constant. A node all of whose outputs are known goes; one whose inputs all became known is
    folded; a reduction of an empty tensor into a non-empty one is its identity value everywhere;
    Concat leaves empty inputs out. What remains computes only tensors with elements."""
    changed = True
    while changed:
        changed = False
        kept: list[Node] = []
        for node in graph.nodes:
            for o in node.outputs:
                if o and o not in graph.consts and 0 in graph.shapes[o]:
                    graph.consts[o] = np.empty(graph.shapes[o], graph.dtypes[o])
            if all(not o or o in graph.consts for o in node.outputs):
                changed = True
                continue
            data = node.inputs[0] if node.inputs else ""
            if node.op_type in _EMPTY_REDUCTION and graph.is_empty(data):
                out = node.outputs[0]
                dtype = graph.dtypes[out]
                graph.consts[out] = np.full(graph.shapes[out], _empty_reduction(node.op_type, dtype), dtype)
                changed = True
                continue
            if node.op_type == "Concat":
                node.inputs = [i for i in node.inputs if not graph.is_empty(i)]
                if len(node.inputs) == 1:  # the concatenation of one tensor is that tensor
                    node.op_type, node.attrs = "Identity", {}
            if all(i == "" or i in graph.consts for i in node.inputs) and any(
                    graph.is_empty(i) for i in node.inputs):
                proto = helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name,
                                         **node.attrs)
                if fold(graph, node, proto, opset):
                    changed = True
                    continue
            # An empty parameter (Resize's roi, a Reduce's axes) is a constant like any other; empty
            # data that must be computed on is not (an element-wise result of it is empty, gone above).
            empty = [i for k, i in enumerate(node.inputs) if graph.is_empty(i)
                     and (k == 0 or (k == 1 and node.op_type in _WEIGHTED))]
            if empty:
                raise DlaError(NvError.NotSupported,
                               f"{node.where()}: input '{empty[0]}' has shape {graph.shapes[empty[0]]} "
                               f"(empty) and an output has elements; pydla computes {node.op_type} of "
                               "non-empty tensors")
            kept.append(node)
        graph.nodes = kept


def fold(graph: Graph, node: Node, proto: onnx.NodeProto, opset: int) -> bool:
    """Evaluate ``node`` now when all its inputs are known; record its outputs as constants."""
    if node.op_type == "Constant":
        value = _constant(node)
        graph.consts[node.outputs[0]] = value
        graph.shapes[node.outputs[0]], graph.dtypes[node.outputs[0]] = tuple(value.shape), value.dtype
        return True
    source = graph.shapes.get(node.inputs[0]) if node.inputs else None
    if node.op_type in ("Shape", "Size") and source is not None and min(source, default=1) > 0:
        shape = np.array(source, dtype=np.int64)
        start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
        # Python's slice is ONNX's: negative ends count from the back, both are clamped.
        value = shape[start:end] if node.op_type == "Shape" else np.array(np.prod(shape), dtype=np.int64)
        graph.consts[node.outputs[0]] = value
        graph.shapes[node.outputs[0]], graph.dtypes[node.outputs[0]] = tuple(value.shape), value.dtype
        return True
    if not all(i == "" or i in graph.consts for i in node.inputs):
        return False
    if node.op_type in _EMPTY_REDUCTION and graph.is_empty(node.inputs[0]):
        return False  # left to settle_empty, which gives ONNX's value of an empty reduction
    feeds = {i: graph.consts[i] for i in node.inputs if i}
    if sum(v.size for v in feeds.values()) > FOLD_LIMIT:
        return False
    if any(min(graph.shapes.get(o, (-1,)), default=1) < 0
           or np.prod(graph.shapes[o], dtype=np.float64) > FOLD_LIMIT for o in node.outputs if o):
        return False  # an output of unknown or large size (ConstantOfShape, Expand...): left to run
    try:
        values = [graph.consts[i] if i else None for i in node.inputs]
        fast = evaluate(node.op_type, node.attrs, values, opset)
    except (ValueError, IndexError, TypeError, KeyError) as e:
        raise DlaError(NvError.BadValue,
                       f"{node.where()}: constant folding failed: {first_line(e)}") from Detail(str(e))
    outputs = [o for o in node.outputs if o]
    if fast is not None and len(fast) == len(outputs):  # (a BatchNormalization's training outputs: not)
        _record(graph, outputs, fast)
        return True
    model = helper.make_model(
        helper.make_graph([proto], "fold",
                          [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                           for i, v in feeds.items()],
                          [helper.make_tensor_value_info(o, 0, None) for o in node.outputs if o]),
        opset_imports=[helper.make_opsetid("", opset)])
    try:
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:
        raise DlaError(NvError.BadValue,
                       f"{node.where()}: constant folding failed: {first_line(e)}") from Detail(str(e))
    _record(graph, [o for o in node.outputs if o], list(results))
    return True


def _record(graph: Graph, names: list[str], values: list[Any]) -> None:
    for name, value in zip(names, values, strict=True):
        arr = np.asarray(value)
        graph.consts[name] = arr
        graph.shapes[name], graph.dtypes[name] = tuple(arr.shape), arr.dtype


# Constant's forms other than 'value' (a TensorProto): the attribute and the type it makes.
_CONSTANT_FORMS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                   "value_ints": np.int64}


def _constant(node: Node) -> np.ndarray:
    """The tensor a Constant node holds: its 'value', or a float / int (list) form."""
    if "value" in node.attrs:
        return np.asarray(numpy_helper.to_array(node.attrs["value"]))
    for name, dtype in _CONSTANT_FORMS.items():
        if name in node.attrs:
            return np.asarray(node.attrs[name], dtype=dtype)
    forms = ", ".join(sorted(node.attrs)) or "no attribute"
    raise DlaError(NvError.NotSupported, f"{node.where()}: a Constant of {forms}: pydla takes the value, "
                                         f"{', '.join(_CONSTANT_FORMS)} forms")
