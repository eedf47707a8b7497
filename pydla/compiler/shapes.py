"""The shape arithmetic of exported models, node by node, as the import folds constants.

onnx's whole-graph shape inference runs once, before anything is folded: it cannot see through a
Reshape whose shape a Concat of Gathers of a Shape computes, so every tensor after the first such
Reshape (and every Shape of those) is unknown to it. The import therefore walks the nodes in order
and, for each node whose output shapes are still unknown, asks onnx's inference of that node alone
with its inputs' shapes and the values of its small constant inputs (:func:`infer_node`); a node
whose inputs are all known is then evaluated (:mod:`pydla.compiler.fold`). Shapes and values so
flow forward together through any depth of shape arithmetic.

The operators exporters use for shape arithmetic are evaluated here in numpy
(:func:`evaluate`): onnx's reference implementation builds a model per node, which cost more than
the rest of importing a transformer's graph; it stays the fallback for every other operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from pydla.compiler import ceil_mode
from pydla.errors import DlaError, NvError
from pydla.logconfig import Detail, first_line, printable

# Constant inputs up to this many elements are handed to per-node inference as data (a Reshape's
# shape, a Slice's starts, a Resize's scales); larger ones are weights, whose values no output
# shape depends on and whose serialisation would cost more than the inference.
SMALL_DATA = 4096


def known(shape: tuple[int, ...] | None) -> bool:
    return shape is not None and min(shape, default=0) >= 0


def infer_node(graph: Any, node: Any, proto: onnx.NodeProto, opset: int) -> onnx.NodeProto:
    """Record the shapes and element types of ``node``'s outputs that are not known yet, when its
    inputs' are. A pooling whose ``ceil_mode`` adds only windows in the end padding becomes the
    same pooling without it first (see :mod:`pydla.compiler.ceil_mode`): the node as it is now is
    returned."""
    outputs = [o for o in node.outputs if o]
    if node.op_type == "Constant" or all(known(graph.shapes.get(o)) and o in graph.dtypes for o in outputs):
        return proto
    inputs = [i for i in node.inputs if i]
    if not all(i in graph.dtypes and known(graph.shapes.get(i)) for i in inputs):
        return proto
    if not onnx.defs.has(node.op_type, opset):
        return proto  # no schema: the import refuses the operator by name
    if node.op_type in ceil_mode.POOLS:
        shapes = {i: graph.shapes[i] for i in inputs}
        if ceil_mode.floor_nodes(helper.make_graph([proto], "pool", [], []), shapes, opset):
            node.attrs["ceil_mode"] = 0
            proto = helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name, **node.attrs)
    types = {i: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(graph.dtypes[i]),
                                              graph.shapes[i]) for i in inputs}
    data = {i: numpy_helper.from_array(np.asarray(graph.consts[i]), i) for i in inputs
            if i in graph.consts and graph.consts[i].size <= SMALL_DATA}
    try:
        result = shape_inference.infer_node_outputs(
            onnx.defs.get_schema(node.op_type, opset), proto, types, data,
            opset_imports=[helper.make_opsetid("", opset)])
    except Exception as e:  # onnx's InferenceError and the like: the inputs do not fit the node
        given = ", ".join(f"'{printable(i)}' {graph.shapes[i]}" for i in inputs)
        raise DlaError(NvError.BadValue, f"{node.where()}: its inputs ({given}) do not fit it: "
                                         f"{first_line(e)}") from Detail(str(e))
    for name, value in result.items():
        t = value.tensor_type
        if name not in outputs or not t.HasField("shape") or not t.elem_type:
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        if not known(graph.shapes.get(name)):
            graph.shapes[name] = dims
        graph.dtypes.setdefault(name, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)))
    return proto


# Operators that keep their input's elements as they are (the lowering makes them aliases).
SAME_ELEMENTS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def check_same_elements(graph: Any) -> None:
    """A Reshape (or Flatten, Squeeze, ...) keeps the number of elements: onnx's inference of a
    Reshape to a shape without -1 does not check it, and the lowering would alias tensors of two
    sizes."""
    for node in graph.nodes:
        if node.op_type not in SAME_ELEMENTS or not node.inputs or not node.outputs[0]:
            continue
        x, y = node.inputs[0], node.outputs[0]
        before, after = np.prod(graph.shapes[x], dtype=np.float64), np.prod(graph.shapes[y], dtype=np.float64)
        if before != after:
            raise DlaError(NvError.BadValue,
                           f"{node.where()}: '{x}' of shape {graph.shapes[x]} has {before:.0f} elements, its "
                           f"output '{y}' of shape {graph.shapes[y]} {after:.0f}")


# -- numpy evaluation of the shape arithmetic ------------------------------------------------------

Values = list[np.ndarray | None]


def _axes(attrs: dict[str, Any], values: Values, opset: int, since: int) -> list[int] | None:
    """A node's axes: an attribute before opset ``since``, its second input from then on."""
    if opset < since:
        return [int(a) for a in attrs["axes"]] if "axes" in attrs else None
    axes = values[1] if len(values) > 1 else None
    return None if axes is None else [int(a) for a in axes.ravel()]


def _unsqueeze(attrs: dict[str, Any], values: Values, opset: int) -> np.ndarray:
    x = values[0]
    assert x is not None
    axes = _axes(attrs, values, opset, 13) or []
    rank = x.ndim + len(axes)
    normal = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(normal)) != len(normal) or any(not 0 <= a < rank for a in normal):
        raise ValueError(f"axes {axes} for an output of rank {rank}")
    return np.expand_dims(x, tuple(normal))


def _squeeze(attrs: dict[str, Any], values: Values, opset: int) -> np.ndarray:
    x = values[0]
    assert x is not None
    axes = _axes(attrs, values, opset, 13)
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, tuple(a + x.ndim if a < 0 else a for a in axes))


def _slice(attrs: dict[str, Any], values: Values, opset: int) -> np.ndarray | None:
    x, starts, ends = values[0], values[1], values[2]
    assert x is not None and starts is not None and ends is not None
    axes = values[3] if len(values) > 3 and values[3] is not None else np.arange(starts.size)
    steps = values[4] if len(values) > 4 and values[4] is not None else np.ones(starts.size, np.int64)
    if not starts.size == ends.size == axes.size == steps.size or (steps <= 0).any():
        return None  # negative steps clamp differently from Python's slices: the reference does them
    index: list[slice] = [slice(None)] * x.ndim
    for s, e, a, k in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist(), strict=True):
        # ONNX's rules for positive steps are Python's: a negative index counts from the end, and
        # both ends are clamped to the axis.
        index[a + x.ndim if a < 0 else a] = slice(s, e, k)
    return x[tuple(index)]


def _reshape(attrs: dict[str, Any], values: Values, opset: int) -> np.ndarray:
    x, shape = values[0], values[1]
    assert x is not None and shape is not None
    zero_is_size = not attrs.get("allowzero", 0)
    dims = [x.shape[i] if d == 0 and zero_is_size else int(d) for i, d in enumerate(shape.tolist())]
    return x.reshape(dims)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if a.dtype.kind == "f":
        return np.asarray(a / b, dtype=a.dtype)
    if (b == 0).any():
        return None  # the reference says what a division by zero of integers is
    quotient = np.abs(a) // np.abs(b)  # integers round toward zero, as onnxruntime's Div does
    return np.asarray(np.where((a < 0) != (b < 0), -quotient, quotient), dtype=a.dtype)


def _range(values: Values) -> np.ndarray:
    start, limit, delta = (v for v in values if v is not None)
    if delta == 0:
        raise ValueError("delta 0")
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return (start + delta * np.arange(count)).astype(start.dtype)


def _constant_of_shape(attrs: dict[str, Any], values: Values) -> np.ndarray:
    shape = values[0]
    assert shape is not None
    value = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
    if (shape < 0).any():
        raise ValueError(f"a negative dimension in {shape.tolist()}")
    return np.full(shape.astype(np.int64).tolist(), value.ravel()[0], value.dtype)


def _trilu(attrs: dict[str, Any], values: Values) -> np.ndarray:
    x = values[0]
    assert x is not None
    k = int(values[1]) if len(values) > 1 and values[1] is not None else 0
    return np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)


def _batch_norm(attrs: dict[str, Any], values: Values, opset: int) -> np.ndarray | None:
    """BatchNormalization as inference computes it, with the given mean and variance: onnx's
    reference implementation of opsets 9 to 13 uses the batch's own statistics instead (its default
    momentum taken for training), which onnxruntime and the ONNX spec do not."""
    if attrs.get("training_mode", 0):
        return None  # the import refuses training mode by name
    x, scale, bias, mean, var = (_at(values, i) for i in range(5))
    if x.dtype.kind != "f" or x.ndim < 2:
        return None
    channel = (-1,) + (1,) * (x.ndim - 2)
    scale, bias, mean, var = (np.asarray(v, np.float64).reshape(channel) for v in (scale, bias, mean, var))
    with np.errstate(all="ignore"):  # NaN and infinities as float arithmetic gives them
        y = (x - mean) / np.sqrt(var + float(attrs.get("epsilon", 1e-5))) * scale + bias
    return np.asarray(y, dtype=x.dtype)


def _at(values: Values, index: int) -> np.ndarray:
    """Input ``index``, which the operator requires (onnx's checker saw that it is given)."""
    value = values[index] if index < len(values) else None
    if value is None:
        raise ValueError(f"input {index} is missing")
    return value


def _first(values: Values) -> np.ndarray:
    return _at(values, 0)


def _present(values: Values) -> list[np.ndarray]:
    return [x for x in values if x is not None]


def _pair(f: Callable[[np.ndarray, np.ndarray], Any]) -> Callable[[dict[str, Any], Values, int], Any]:
    def apply(attrs: dict[str, Any], values: Values, opset: int) -> Any:
        a, b = values[0], values[1]
        assert a is not None and b is not None
        return f(a, b)
    return apply


_SIMPLE: dict[str, Callable[[dict[str, Any], Values, int], Any]] = {
    "Identity": lambda attrs, v, opset: _first(v),
    "Cast": lambda attrs, v, opset: _first(v).astype(helper.tensor_dtype_to_np_dtype(attrs["to"])),
    "Gather": lambda attrs, v, opset: np.take(_first(v), _at(v, 1), axis=int(attrs.get("axis", 0))),
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Slice": _slice, "Reshape": _reshape,
    "Concat": lambda attrs, v, opset: np.concatenate(_present(v), axis=int(attrs["axis"])),
    "Add": _pair(np.add), "Sub": _pair(np.subtract), "Mul": _pair(np.multiply), "Div": _pair(_divide),
    "Equal": _pair(np.equal), "Less": _pair(np.less), "Greater": _pair(np.greater),
    "LessOrEqual": _pair(np.less_equal), "GreaterOrEqual": _pair(np.greater_equal),
    "And": _pair(np.logical_and), "Or": _pair(np.logical_or), "Xor": _pair(np.logical_xor),
    "Not": lambda attrs, v, opset: np.logical_not(_first(v)),
    "Neg": lambda attrs, v, opset: -_first(v), "Abs": lambda attrs, v, opset: np.abs(_first(v)),
    "Where": lambda attrs, v, opset: np.where(_first(v), _at(v, 1), _at(v, 2)),
    "Range": lambda attrs, v, opset: _range(v),
    "ConstantOfShape": lambda attrs, v, opset: _constant_of_shape(attrs, v),
    "Expand": lambda attrs, v, opset: np.broadcast_to(
        _first(v), np.broadcast_shapes(_first(v).shape, tuple(int(d) for d in _at(v, 1).ravel()))),
    "Transpose": lambda attrs, v, opset: np.transpose(_first(v), attrs.get("perm")),
    "Tile": lambda attrs, v, opset: np.tile(_first(v), [int(r) for r in _at(v, 1).ravel()]),
    "Trilu": lambda attrs, v, opset: _trilu(attrs, v),
    "Max": lambda attrs, v, opset: np.maximum.reduce(np.broadcast_arrays(*_present(v))),
    "BatchNormalization": _batch_norm,
    "Min": lambda attrs, v, opset: np.minimum.reduce(np.broadcast_arrays(*_present(v))),
}
# Float math a shape computation applies to a length (attention's 1 / sqrt(head size)).
_FLOAT_MATH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Floor": np.floor, "Ceil": np.ceil,
}
# Cast's targets evaluated here (others, such as the float8 types with their saturation, by the
# reference).
_CAST_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13})


def evaluate(op_type: str, attrs: dict[str, Any], values: Values, opset: int) -> list[np.ndarray] | None:
    """The outputs of a node of ``op_type`` on the constant ``values`` (None for an absent
    input), or None when it is not one of the operators evaluated here (or a case left to the
    reference implementation). A value that does not fit the node raises ValueError or
    IndexError (numpy's)."""
    if op_type == "Cast" and attrs.get("to") not in _CAST_TYPES:
        return None
    if op_type in _FLOAT_MATH:
        x = values[0]
        if x is None or x.dtype.kind != "f":
            return None
        with np.errstate(all="ignore"):  # sqrt(-1) is NaN, as ONNX's is
            return [np.asarray(_FLOAT_MATH[op_type](x), dtype=x.dtype)]
    apply = _SIMPLE.get(op_type)
    if apply is None or (op_type == "Gather" and values[1] is not None and values[1].dtype.kind not in "iu"):
        return None
    result = apply(attrs, values, opset)
    if result is None:
        return None
    # Arithmetic on 0-D arrays gives numpy scalars, and numpy may widen a type: keep ONNX's.
    out = np.asarray(result)
    if op_type in ("Add", "Sub", "Mul", "Neg", "Abs", "Where", "Max", "Min") and values[-1] is not None:
        out = out.astype(values[-1].dtype, copy=False)
    return [np.array(out)]  # a dense copy (np.ascontiguousarray would make a 0-D array 1-D)
