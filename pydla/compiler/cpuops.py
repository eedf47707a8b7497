"""CPU runs of pydla's CPU library (``umd/cpulib.py`` in the package) between NPU tasks.

They take what the device cannot: Softmax / LogSoftmax; element-wise math SDP has no form for
(Exp, Log, Sqrt, Erf, Gelu, HardSwish, ...); Slice, Pad and Resize whose parameters
arrive at run time (their parameter tensors are passed as buffers: int64 indices, float32 scales and
regions of interest) or whose modes have no device form (negative steps; reflect, edge and wrap
padding; linear and non-whole-factor Resize); pooling with dilations; and the folding of batch-norm
parameters given at run time into per-channel scale and shift for SDP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.compiler import cpu_reasons
from pydla.compiler.graph import Node
from pydla.compiler.layout import normalize_axis, prod
from pydla.compiler.plan import Step, attr
from pydla.errors import DlaError, NvError

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering


@dataclass(frozen=True)
class Buf:
    """A buffer argument: ``size`` bytes at ``offset`` of recipe buffer ``buffer``."""

    buffer: str
    offset: int
    size: int


Arg = Buf | tuple[Any, str]  # a buffer, or a constant (value, "int" | "float" | "string")


def cpu_run(lw: Lowering, function: str, args: list[Arg]) -> None:
    """A CPU run of ``function`` with ``args`` in argidx order."""
    lw.finish_task()
    lw.cpu_notes.append(cpu_reasons.note(function, lw.node, len(lw.runs)))
    arguments: list[dict[str, Any]] = []
    constants: list[dict[str, Any]] = []
    for i, a in enumerate(args):
        if isinstance(a, Buf):
            arguments.append({"name": a.buffer, "offset": a.offset, "size": a.size, "argidx": i})
        else:
            constants.append({"value": a[0], "type": a[1], "argidx": i})
    lw.runs.append(("cpu", {"name": function, "where": "cpu", "arguments": arguments,
                            "constants": constants}))


def tensor(lw: Lowering, name: str) -> Buf:
    buf, offset = lw.storage(name)
    return Buf(buf, offset, prod(lw.g.shapes[name]) * lw.elsize(name))


def operand(lw: Lowering, name: str) -> Buf:
    """A tensor's bytes for a CPU run: where it is stored, or, for a constant, in the weights."""
    if name in lw.g.consts:
        ref = lw.const_raw(lw.g.consts[name], lw.g.dtypes[name])
        return Buf(ref.buffer, ref.offset, prod(lw.g.shapes[name]) * lw.g.dtypes[name].itemsize)
    return tensor(lw, name)


def eltwise_cpu_run(lw: Lowering, step: Step, op: str) -> None:
    """Add / Sub / Mul / Div / Max / Min of integer tensors (the device computes floating point
    only), or of a model's float64 or float16 tensors (the device computes float32 models)."""
    n = step.head
    a, b = n.inputs[0], n.inputs[1]
    dtype = lw.g.dtypes[step.output]
    if lw.g.dtypes[a] != dtype or lw.g.dtypes[b] != dtype:
        raise DlaError(NvError.BadValue,
                       f"{n.where()}: {n.op_type} of {lw.g.dtypes[a]} and {lw.g.dtypes[b]} into {dtype}")
    # A scalar is passed as one element: it broadcasts alike and holds the same bytes.
    shapes = [_shape(lw, t) for t in (a, b, step.output)]
    cpu_run(lw, "eltwise_int" if dtype.kind in "iu" else "eltwise",
            [operand(lw, a), operand(lw, b), tensor(lw, step.output), *shapes, (op, "string"),
             (str(dtype), "string")])


def clip_int_run(lw: Lowering, step: Step) -> None:
    """Clip of an integer tensor (bounds constant, given at run time, or absent)."""
    n = step.head
    src = n.inputs[0]
    dtype = lw.g.dtypes[src]
    bounds: list[Arg] = []
    for name in [*n.inputs[1:], "", ""][:2]:
        if not name:
            bounds.append(("", "string"))
        elif name in lw.g.consts:
            bounds.append((int(np.asarray(lw.g.consts[name]).reshape(-1)[0]), "int"))
        else:
            if lw.g.dtypes[name] != dtype or prod(lw.g.shapes[name]) != 1:
                raise DlaError(NvError.BadValue, f"{n.where()}: Clip bound '{name}' is not one {dtype}")
            bounds.append(tensor(lw, name))
    cpu_run(lw, "clip_int", [tensor(lw, src), tensor(lw, step.output), *bounds,
                             _shape(lw, src), (str(dtype), "string")])


def dtype_of(lw: Lowering, name: str) -> tuple[str, str]:
    return (str(lw.storage_dtype(name)), "string")


def _text(values: Any) -> str:
    return ",".join(str(v) for v in np.asarray(values).ravel().tolist())


def _shape(lw: Lowering, name: str) -> tuple[str, str]:
    """A tensor's shape as a CPU run's text argument (a scalar as one element: the same bytes)."""
    return (_text(lw.g.shapes[name] or (1,)), "string")


def param(lw: Lowering, node: Node, index: int, what: str, kind: str, default: str = "") -> Arg:
    """Parameter ``index`` of ``node``: its values as text when constant, else its buffer (int64
    for ``kind`` "int", float32 for "float"); ``default`` when absent."""
    name = node.inputs[index] if index < len(node.inputs) else ""
    if not name:
        return (default, "string")
    if name in lw.g.consts:
        value = lw.g.consts[name]
        if kind == "int":
            return (",".join(str(int(min(max(v, -(1 << 62)), 1 << 62))) for v in value.ravel().tolist()),
                    "string")
        return (",".join(repr(float(v)) for v in value.ravel().tolist()), "string")
    want = np.dtype(np.int64 if kind == "int" else np.float32)
    if lw.g.dtypes[name] != want:
        raise DlaError(NvError.NotSupported, f"{node.where()}: {what} '{name}' computed at run time is "
                                             f"{lw.g.dtypes[name]}; pydla's CPU library reads {want}")
    return lw.param_buffer(name, node.where())


def softmax(lw: Lowering, step: Step) -> None:
    """Softmax / LogSoftmax (opset 13: along one axis; earlier: over the axes from ``axis`` on, as
    one flattened axis)."""
    n = step.head
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    rank = len(shape)
    default_axis = -1 if lw.g.opset >= 13 else 1
    axis = normalize_axis(int(attr(n, "axis", default_axis)), rank, n.where())
    text = _text(shape)
    if lw.g.opset < 13 and axis != rank - 1:
        text = _text([*shape[:axis], prod(shape[axis:])])  # the same bytes, one flattened axis
    function = {"Softmax": "softmax", "LogSoftmax": "log_softmax"}[n.op_type]
    cpu_run(lw, function, [tensor(lw, src), tensor(lw, step.output), (axis, "int"), (text, "string"),
                           dtype_of(lw, src), dtype_of(lw, step.output)])


# ONNX's defaults of the attributes the CPU library's unary functions take as alpha and beta.
UNARY_ATTRIBUTES: dict[str, tuple[tuple[str, float], tuple[str, float]]] = {
    "Elu": (("alpha", 1.0), ("", 0.0)),
    "Celu": (("alpha", 1.0), ("", 0.0)),
    "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    "ThresholdedRelu": (("alpha", 1.0), ("", 0.0)),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
}


def unary_run(lw: Lowering, step: Step) -> None:
    """Element-wise math the device has no form for (Exp, Log, Sqrt, Erf, Gelu, HardSwish, ...), on
    a floating-point tensor (float32, or a model's float16 or float64): a CPU run of the library's
    ``unary``."""
    n = step.head
    src = n.inputs[0]
    if lw.g.dtypes[src].kind != "f":
        raise DlaError(NvError.NotSupported, f"{n.where()}: {n.op_type} of a {lw.g.dtypes[src]} tensor: "
                                             "pydla computes it on floating-point tensors only")
    op = n.op_type
    if op == "Gelu":
        approximate = attr(n, "approximate", "none")
        approximate = approximate.decode() if isinstance(approximate, bytes) else str(approximate)
        if approximate not in ("none", "tanh"):
            raise DlaError(NvError.BadValue,
                           f"{n.where()}: approximate '{approximate}' is not 'none' or 'tanh'")
        op = "GeluTanh" if approximate == "tanh" else "Gelu"
    params = [float(attr(n, name, default)) if name else default
              for name, default in UNARY_ATTRIBUTES.get(op, (("", 0.0), ("", 0.0)))]
    if op == "Celu" and params[0] == 0:
        raise DlaError(NvError.BadValue, f"{n.where()}: alpha 0 (Celu divides by it)")
    shape = _shape(lw, src)
    cpu_run(lw, "unary", [tensor(lw, src), tensor(lw, step.output), shape, (op, "string"),
                          (params[0], "float"), (params[1], "float"), dtype_of(lw, src),
                          dtype_of(lw, step.output)])


# The opset from which a reduction takes its axes as an input rather than an attribute.
AXES_INPUT_SINCE = {"ReduceSum": 13}


def reduce_run(lw: Lowering, step: Step) -> None:
    """ReduceSum / Mean / Max / ...: a CPU run of ``reduce``, its axes known when compiling or read
    at run time."""
    n = step.head
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    if lw.g.opset >= AXES_INPUT_SINCE.get(n.op_type, 18):
        axes = param(lw, n, 1, "axes", "int")
    else:
        axes = (_text(attr(n, "axes", [])), "string")
    noop = int(bool(attr(n, "noop_with_empty_axes", 0)))
    if not shape:  # a scalar: nothing to reduce
        axes, noop = ("", "string"), 1
    cpu_run(lw, "reduce", [tensor(lw, src), tensor(lw, step.output), _shape(lw, src), axes,
                           (noop, "int"), (n.op_type, "string"), dtype_of(lw, src),
                           dtype_of(lw, step.output)])


def pow_run(lw: Lowering, step: Step) -> None:
    """Pow (of floats: exponents other than 1, 2, 0.5 and -1 everywhere, see graph._pow), of any
    numeric types."""
    n = step.head
    a, b = n.inputs[0], n.inputs[1]
    if np.dtype(np.bool_) in (lw.g.dtypes[a], lw.g.dtypes[b]):
        raise DlaError(NvError.BadValue, f"{n.where()}: Pow of {lw.g.dtypes[a]} by {lw.g.dtypes[b]}")
    shapes = [_shape(lw, t) for t in (a, b, step.output)]
    cpu_run(lw, "pow", [operand(lw, a), operand(lw, b), tensor(lw, step.output), *shapes,
                        _operand_dtype(lw, a), _operand_dtype(lw, b), dtype_of(lw, step.output)])


def _operand_dtype(lw: Lowering, name: str) -> tuple[str, str]:
    """The element type of :func:`operand`'s bytes (a constant lies in the weights in its own type)."""
    return (str(lw.g.dtypes[name]), "string") if name in lw.g.consts else dtype_of(lw, name)


def compare_run(lw: Lowering, step: Step) -> None:
    """Equal / Less / ... / And / Or / Xor into a bool tensor."""
    n = step.head
    a, b = n.inputs[0], n.inputs[1]
    shapes = [_shape(lw, t) for t in (a, b, step.output)]
    cpu_run(lw, "compare", [operand(lw, a), operand(lw, b), tensor(lw, step.output), *shapes,
                            (n.op_type, "string"), _operand_dtype(lw, a), _operand_dtype(lw, b)])


def where_run(lw: Lowering, step: Step) -> None:
    n = step.head
    cond, x, y = n.inputs[:3]
    shapes = [_shape(lw, t) for t in (cond, x, y, step.output)]
    cpu_run(lw, "where", [operand(lw, cond), operand(lw, x), operand(lw, y), tensor(lw, step.output), *shapes,
                          _operand_dtype(lw, x), _operand_dtype(lw, y), dtype_of(lw, step.output)])


def cast_run(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    shape = _shape(lw, src)
    cpu_run(lw, "cast", [tensor(lw, src), tensor(lw, step.output), shape, dtype_of(lw, src),
                         dtype_of(lw, step.output)])


def argmax_run(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    axis = normalize_axis(int(attr(n, "axis", 0)), len(shape), n.where())
    cpu_run(lw, "argmax", [tensor(lw, src), tensor(lw, step.output), (_text(shape), "string"), (axis, "int"),
                           (int(bool(attr(n, "select_last_index", 0))), "int"), (n.op_type, "string"),
                           dtype_of(lw, src)])


def gather_run(lw: Lowering, step: Step) -> None:
    n = step.head
    data, indices = n.inputs[0], n.inputs[1]
    rank = len(lw.g.shapes[data])
    axis = normalize_axis(int(attr(n, "axis", 0)), rank, n.where())
    shapes = [_shape(lw, t) for t in (data, indices)]
    cpu_run(lw, "gather", [operand(lw, data), operand(lw, indices), tensor(lw, step.output), *shapes,
                           (axis, "int"), _operand_dtype(lw, data), _operand_dtype(lw, indices),
                           dtype_of(lw, step.output)])


def expand_run(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    shapes = [_shape(lw, t) for t in (src, step.output)]
    cpu_run(lw, "expand", [operand(lw, src), tensor(lw, step.output), *shapes, _operand_dtype(lw, src),
                           dtype_of(lw, step.output)])


def tile_run(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    shape = _shape(lw, src)
    cpu_run(lw, "tile", [operand(lw, src), tensor(lw, step.output), shape, param(lw, n, 1, "repeats", "int"),
                         _operand_dtype(lw, src), dtype_of(lw, step.output)])


def slice_run(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    if not lw.g.shapes[src]:
        raise DlaError(NvError.BadValue, f"{n.where()}: Slice of a scalar")
    count = prod(lw.g.shapes[n.inputs[1]]) if n.inputs[1] else 0
    cpu_run(lw, "slice", [tensor(lw, src), tensor(lw, step.output), _shape(lw, src),
                          param(lw, n, 1, "starts", "int"), param(lw, n, 2, "ends", "int"),
                          param(lw, n, 3, "axes", "int", _text(range(count))),
                          param(lw, n, 4, "steps", "int", _text([1] * count)),
                          dtype_of(lw, src), dtype_of(lw, step.output)])


def pad_run(lw: Lowering, step: Step, mode: str) -> None:
    n = step.head
    src = n.inputs[0]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise DlaError(NvError.NotSupported, f"{n.where()}: Pad mode '{mode}'")
    pads = (param(lw, n, 1, "pads", "int") if len(n.inputs) > 1 and n.inputs[1]
            else (_text(attr(n, "pads", [])), "string"))
    value_name = n.inputs[2] if len(n.inputs) > 2 else ""
    value: Arg
    if not value_name:
        value = (0.0, "float")
    elif value_name in lw.g.consts:
        value = (float(lw.g.consts[value_name].ravel()[0]), "float")
    else:
        if lw.g.dtypes[value_name] != lw.g.dtypes[src]:
            raise DlaError(NvError.BadValue, f"{n.where()}: constant_value is {lw.g.dtypes[value_name]}, "
                                             f"the data {lw.g.dtypes[src]}")
        value = tensor(lw, value_name)
    cpu_run(lw, "pad_nd", [tensor(lw, src), tensor(lw, step.output), _shape(lw, src), pads,
                           param(lw, n, 3, "axes", "int"), (mode, "string"), value,
                           dtype_of(lw, src), dtype_of(lw, step.output)])


def static_resize_scales(lw: Lowering, n: Node, shape: tuple[int, ...],
                         out_shape: tuple[int, ...]) -> list[float] | None:
    """Resize's scale per axis when known at compile time (constant scales; sizes with the
    stretch policy, whose scales are the output's size over the input's), else None."""
    rank = len(shape)
    axes = [normalize_axis(int(a), rank, n.where()) for a in attr(n, "axes", list(range(rank)))]
    scales_name = n.inputs[2] if len(n.inputs) > 2 else ""
    sizes_name = n.inputs[3] if len(n.inputs) > 3 else ""
    full = [1.0] * rank
    if scales_name and prod(lw.g.shapes[scales_name]):
        if scales_name not in lw.g.consts:
            return None
        for a, s in zip(axes, lw.g.consts[scales_name].ravel().tolist(), strict=True):
            full[a] = float(s)
        return full
    if sizes_name and lw.text_attr(n, "keep_aspect_ratio_policy", "stretch") == "stretch":
        return [o / i for o, i in zip(out_shape, shape, strict=True)]
    return None


def resize_run(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    rank = len(lw.g.shapes[src])
    mode = lw.text_attr(n, "mode", "nearest")
    ctm = lw.text_attr(n, "coordinate_transformation_mode", "half_pixel")
    axes = attr(n, "axes", None)
    axes_text = "" if axes is None else _text([normalize_axis(int(a), rank, n.where()) for a in axes])
    scales = param(lw, n, 2, "scales", "float")
    if isinstance(scales, tuple) and scales[0] == "" and len(n.inputs) <= 3:
        raise DlaError(NvError.BadValue, f"{n.where()}: Resize needs scales or sizes")
    args: list[Arg] = [
        tensor(lw, src), tensor(lw, step.output), _shape(lw, src), _shape(lw, step.output),
        (mode, "string"), (ctm, "string"),
        (lw.text_attr(n, "nearest_mode", "round_prefer_floor"), "string"),
        param(lw, n, 1, "roi", "float"), scales, param(lw, n, 3, "sizes", "int"), (axes_text, "string"),
        (lw.text_attr(n, "keep_aspect_ratio_policy", "stretch"), "string"),
        (float(attr(n, "extrapolation_value", 0.0)), "float"),
        dtype_of(lw, src), dtype_of(lw, step.output)]
    antialias = int(attr(n, "antialias", 0))  # ignored by nearest, as ONNX says
    if mode == "cubic" or (antialias and mode == "linear"):
        cpu_run(lw, "resize_filtered", [*args, (float(attr(n, "cubic_coeff_a", -0.75)), "float"),
                                        (int(attr(n, "exclude_outside", 0)), "int"), (antialias, "int")])
    else:
        cpu_run(lw, "resize_nd", args)


def pool_run(lw: Lowering, step: Step, kernel: list[int], strides: list[int], pads: list[int],
             dilations: list[int]) -> None:
    n = step.head
    src = n.inputs[0]
    method = "max" if n.op_type == "MaxPool" else "avg"
    cpu_run(lw, "pool", [tensor(lw, src), tensor(lw, step.output), _shape(lw, src),
                         _shape(lw, step.output), (method, "string"), (_text(kernel), "string"),
                         (_text(strides), "string"), (_text(pads), "string"), (_text(dilations), "string"),
                         (int(attr(n, "count_include_pad", 0)), "int"),
                         dtype_of(lw, src), dtype_of(lw, step.output)])


def maxpool_indices_run(lw: Lowering, step: Step, kernel: list[int], strides: list[int], pads: list[int],
                        dilations: list[int]) -> None:
    n = step.head
    src, indices = n.inputs[0], n.outputs[1]
    if lw.g.dtypes[indices] != np.int64:
        raise DlaError(NvError.BadValue, f"{n.where()}: Indices '{indices}' is {lw.g.dtypes[indices]}")
    cpu_run(lw, "maxpool_indices", [tensor(lw, src), tensor(lw, step.output), tensor(lw, indices),
                                    _shape(lw, src), _shape(lw, step.output), (_text(kernel), "string"),
                                    (_text(strides), "string"), (_text(pads), "string"),
                                    (_text(dilations), "string"), (int(attr(n, "storage_order", 0)), "int"),
                                    dtype_of(lw, src), dtype_of(lw, step.output)])


def batchnorm_params(lw: Lowering, n: Node, repeat: int) -> Buf:
    """Scale and shift per channel, each repeated ``repeat`` times (once per image of a batch),
    computed on the CPU from BatchNormalization's parameters given at run time: a temporary of
    2 * repeat * C values in the device's precision."""
    names = n.inputs[1:5]
    for name, what in zip(names, ("scale", "B", "input_mean", "input_var"), strict=True):
        if lw.g.dtypes[name] != np.float32:
            raise DlaError(NvError.NotSupported, f"{n.where()}: {what} '{name}' is {lw.g.dtypes[name]}")
    channels = prod(lw.g.shapes[names[0]])
    el = lw.np_dtype.itemsize
    buf, offset = lw.temp(2 * repeat * channels * el)
    out = Buf(buf, offset, 2 * repeat * channels * el)
    cpu_run(lw, "batchnorm_params", [*(lw.param_buffer(name, n.where()) for name in names), out,
                                     (float(attr(n, "epsilon", 1e-5)), "float"), (repeat, "int"),
                                     ("float32", "string"), (str(lw.np_dtype), "string")])
    return out
