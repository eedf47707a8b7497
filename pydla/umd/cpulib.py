"""pydla's own CPU library: the functions the compiler emits as CPU runs (XRT run recipe CPU functions).

It is loaded the way any CPU library is (a Python module exposing ``library_init``): the runner
calls ``library_init(args)``, which sets ``args.lookup_fn``; ``lookup_fn(name, lookup_args)`` fills
in ``lookup_args.num_args`` and ``lookup_args.callable``. A callable takes the run's argument list,
in argidx order: buffers arrive as numpy uint8 arrays (the argument's sub-buffer), constants as
Python values. Every size is checked against the buffers it is given.

Functions:

- ``softmax(src, dst, axis, shape, src_dtype, dst_dtype)``: ONNX Softmax (opset 13: along one
  axis) of the tensor of ``shape`` ("d0,d1,...") stored densely in ``src``.
- ``log_softmax(...)``: the same arguments, ONNX LogSoftmax.
- ``pad(src, dst, shape, pads, mode, value, src_dtype, dst_dtype)``: ONNX Pad (constant, reflect,
  edge).
- ``slice(src, dst, shape, starts, ends, axes, steps, src_dtype, dst_dtype)``: ONNX Slice (any
  steps).
- ``resize(src, dst, in_shape, out_shape, mode, coordinate_transformation_mode, nearest_mode,
  src_dtype, dst_dtype)``: ONNX Resize of H and W, nearest or linear.
- ``pad_nd(src, dst, shape, pads, axes, mode, value, src_dtype, dst_dtype)``: ONNX Pad (constant,
  reflect, edge, wrap; negative pads crop) of any rank and element type, over ``axes`` ("" for all).
- ``resize_nd(src, dst, in_shape, out_shape, mode, coordinate_transformation_mode, nearest_mode,
  roi, scales, sizes, axes, keep_aspect_ratio_policy, extrapolation_value, src_dtype, dst_dtype)``:
  ONNX Resize (nearest or linear, every coordinate transformation mode) of any axes.
- ``resize_filtered(<the arguments of resize_nd>, cubic_coeff_a, exclude_outside, antialias)``:
  ONNX Resize with cubic interpolation, or linear / cubic with the antialiasing filter
  (:mod:`pydla.umd.resize_filters`).
- ``pool(src, dst, shape, out_shape, method, kernel, strides, pads, dilations, count_include_pad,
  src_dtype, dst_dtype)``: ONNX MaxPool / AveragePool ("max" / "avg") of any number of spatial axes,
  with dilations; ``pads`` are the begins then the ends. MaxPool also of integers (exactly).
- ``eltwise_int(a, b, dst, a_shape, b_shape, out_shape, op, dtype)``: Add / Sub / Mul / Div / Max /
  Min of integer tensors, broadcasting, wrapping around; Div rounds toward zero.
- ``eltwise(<the arguments of eltwise_int>)``: the same of tensors of any numeric type: integers as
  eltwise_int, floats (a model's float64 or float16 tensors, which the device does not compute) in
  their own type, as numpy computes them.
- ``clip_int(src, dst, min, max, shape, dtype)``: Clip of an integer tensor.
- ``maxpool_indices(src, dst, indices, shape, out_shape, kernel, strides, pads, dilations,
  storage_order, src_dtype, dst_dtype)``: ONNX MaxPool with its Indices output.
- ``unary(src, dst, shape, op, alpha, beta, src_dtype, dst_dtype)``: ONNX's element-wise math that
  SDP has no form for (Exp, Log, Sqrt, trigonometric and hyperbolic functions, Floor, Ceil, Round,
  Sign, Erf, Softplus, Softsign, Elu, Celu, Selu, ThresholdedRelu, HardSigmoid, HardSwish, Mish,
  Gelu; see :data:`pydla.loadable.cpuops.UNARY_OPS`), computed in float64.
- ``reduce(src, dst, shape, axes, noop_with_empty_axes, op, src_dtype, dst_dtype)``: ONNX ReduceSum /
  Max / Min / Prod / Mean / L1 / L2 / SumSquare / LogSum / LogSumExp over ``axes`` (text or an int64
  buffer; none: all axes, or a copy with ``noop_with_empty_axes``; see
  :data:`pydla.loadable.cpuops.REDUCE_OPS`); the result keeps the reduced axes as 1 (the same bytes
  with or without keepdims).
- ``pow(a, b, dst, a_shape, b_shape, out_shape, a_dtype, b_dtype, dst_dtype)``: ONNX Pow of any
  numeric types, broadcasting, in float64 (an integer result rounded toward zero).
- ``compare(a, b, dst, a_shape, b_shape, out_shape, op, a_dtype, b_dtype)``: ONNX Equal / Less /
  LessOrEqual / Greater / GreaterOrEqual / And / Or / Xor, broadcasting, into bools.
- ``where(cond, x, y, dst, cond_shape, x_shape, y_shape, out_shape, x_dtype, y_dtype, dst_dtype)``:
  ONNX Where.
- ``cast(src, dst, shape, src_dtype, dst_dtype)``: ONNX Cast between the loadable's element types.
- ``argmax(src, dst, shape, axis, select_last_index, op, dtype)``: ONNX ArgMax / ArgMin (int64).
- ``gather(data, indices, dst, data_shape, indices_shape, axis, dtype, indices_dtype, dst_dtype)``:
  ONNX Gather (an index out of range is an error).
- ``expand(src, dst, src_shape, out_shape, dtype, dst_dtype)``: ONNX Expand.
- ``tile(src, dst, shape, repeats, dtype, dst_dtype)``: ONNX Tile.
- ``batchnorm_params(scale, bias, mean, var, dst, epsilon, repeat, param_dtype, dst_dtype)``: a
  BatchNormalization's per-channel scale ``scale / sqrt(var + epsilon)`` and shift
  ``bias - mean * scale'``, each repeated ``repeat`` times, one after the other, into ``dst``.

Parameters (pads, starts, scales, ...) are text ("1,2,3") known when the network was compiled, or
buffers holding the tensor given at run time: int64 for indices and sizes, float32 for scales and
regions of interest. Data-movement functions (slice, pad_nd) take any of the element types below;
the others compute in floating point. A function whose parameters arrive at run time checks that
the result has exactly the size of its destination.

This module holds the table of functions and the data movement, pooling and element-wise ones;
the resize functions are in :mod:`pydla.umd.cpuresize`, the math in :mod:`pydla.umd.cpumath`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.umd import cpumath, cpuresize
from pydla.umd.cpuargs import (
    DTYPES,
    INT_DTYPES,
    broadcast_args,
    ints_arg,
    shape_arg,
    tensor_arg,
)


def _softmax_like(log: bool) -> Callable[[list[Any]], None]:
    def run(args: list[Any]) -> None:
        src, dst, axis, shape_text, src_dtype, dst_dtype = args
        shape = shape_arg(shape_text)
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise DlaError(NvError.BadParameter, f"cpulib: axis {axis!r} of a rank-{len(shape)} tensor")
        # float32 as onnxruntime computes a float32 model (and float16); a float64 model in float64.
        x = tensor_arg(src, shape, src_dtype, "source").astype(np.float64 if src_dtype == "float64"
                                                                else np.float32)
        y = tensor_arg(dst, shape, dst_dtype, "destination")
        shifted = x - x.max(axis=axis, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=axis, keepdims=True)
        y[...] = shifted - np.log(total) if log else e / total

    return run


def _pad(args: list[Any]) -> None:
    """pad(src, dst, shape, pads "b0,b1,..,e0,e1,..", mode constant|reflect|edge, value, src_dtype,
    dst_dtype): ONNX Pad."""
    src, dst, shape_text, pads_text, mode, value, src_dtype, dst_dtype = args
    shape = shape_arg(shape_text)
    try:
        pads = [int(p) for p in str(pads_text).split(",")]
    except ValueError:
        raise DlaError(NvError.BadParameter, f"cpulib: pads '{pads_text}'") from None
    rank = len(shape)
    if len(pads) != 2 * rank or min(pads) < 0:
        raise DlaError(NvError.BadParameter, f"cpulib: pads {pads} for a rank-{rank} tensor")
    if mode not in ("constant", "reflect", "edge"):
        raise DlaError(NvError.BadParameter, f"cpulib: pad mode '{mode}'")
    out_shape = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shape))
    x = tensor_arg(src, shape, src_dtype, "source")
    y = tensor_arg(dst, out_shape, dst_dtype, "destination")
    widths = [(pads[i], pads[i + rank]) for i in range(rank)]
    if mode == "constant":
        y[...] = np.pad(x, widths, mode="constant", constant_values=float(value))
    else:
        if mode == "reflect" and any(w[0] >= d or w[1] >= d for w, d in zip(widths, shape, strict=True)):
            raise DlaError(NvError.BadParameter, f"cpulib: reflect pads {pads} need dims > pads {shape}")
        y[...] = np.pad(x, widths, mode=mode)


def _slice(args: list[Any]) -> None:
    """slice(src, dst, shape, starts, ends, axes, steps, src_dtype, dst_dtype): ONNX Slice."""
    src, dst, shape_text, starts_t, ends_t, axes_t, steps_t, src_dtype, dst_dtype = args
    shape = shape_arg(shape_text)
    starts, ends = ints_arg(starts_t, "starts"), ints_arg(ends_t, "ends")
    axes, steps = ints_arg(axes_t, "axes"), ints_arg(steps_t, "steps")
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        raise DlaError(NvError.BadParameter, "cpulib: slice starts, ends, axes, steps disagree or step 0")
    index: list[Any] = [np.arange(d) for d in shape]
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if not -len(shape) <= axis < len(shape):
            raise DlaError(NvError.BadParameter, f"cpulib: slice axis {axis}")
        dim = shape[axis]
        start, end = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = np.arange(start, end, step)
    x = tensor_arg(src, shape, src_dtype, "source", any_type=True)
    out_shape = tuple(len(i) for i in index)
    if 0 in out_shape:
        raise DlaError(NvError.BadValue, f"cpulib: slice to the empty shape {out_shape}")
    y = tensor_arg(dst, out_shape, dst_dtype, "destination", any_type=True, exact=True)
    y[...] = x[np.ix_(*index)]


def _pad_nd(args: list[Any]) -> None:
    """pad_nd(src, dst, shape, pads, axes, mode, value, src_dtype, dst_dtype): ONNX Pad."""
    src, dst, shape_text, pads_arg, axes_arg, mode, value, src_dtype, dst_dtype = args
    shape = shape_arg(shape_text)
    rank = len(shape)
    pads = ints_arg(pads_arg, "pads")
    axes = [a + rank if a < 0 else a for a in ints_arg(axes_arg, "axes")] or list(range(rank))
    if len(pads) != 2 * len(axes) or any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise DlaError(NvError.BadParameter, f"cpulib: pads {pads} for axes {axes} of a rank-{rank} tensor")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise DlaError(NvError.BadParameter, f"cpulib: pad mode '{mode}'")
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    x = tensor_arg(src, shape, src_dtype, "source", any_type=True)
    # Negative pads crop first.
    x = x[tuple(slice(max(0, -b), d - max(0, -e)) for b, e, d in zip(before, after, shape, strict=True))]
    if 0 in x.shape:
        raise DlaError(NvError.BadValue, f"cpulib: pads {pads} crop the whole tensor {shape}")
    widths = [(max(0, b), max(0, e)) for b, e in zip(before, after, strict=True)]
    out_shape = tuple(d + b + e for d, (b, e) in zip(x.shape, widths, strict=True))
    y = tensor_arg(dst, out_shape, dst_dtype, "destination", any_type=True, exact=True)
    if mode == "constant":
        fill = (tensor_arg(value, (), src_dtype, "constant_value", any_type=True)[()]
                if isinstance(value, np.ndarray) else value)
        y[...] = np.pad(x, widths, mode="constant", constant_values=fill)
    else:
        if mode == "reflect" and any(max(w) >= d for w, d in zip(widths, x.shape, strict=True)):
            raise DlaError(NvError.BadParameter, f"cpulib: reflect pads {pads} need dims > pads {x.shape}")
        y[...] = np.pad(x, widths, mode=mode)


def _pool(args: list[Any]) -> None:
    """pool(src, dst, shape, out_shape, method, kernel, strides, pads, dilations, count_include_pad,
    src_dtype, dst_dtype): ONNX MaxPool / AveragePool; windows past the padded input (ceil_mode)
    count nothing."""
    (src, dst, shape_text, out_text, method, kernel_t, strides_t, pads_t, dilations_t, include,
     src_dtype, dst_dtype) = args
    shape, out_shape = shape_arg(shape_text), shape_arg(out_text)
    nd = len(shape) - 2
    kernel, strides = ints_arg(kernel_t, "kernel"), ints_arg(strides_t, "strides")
    pads, dilations = ints_arg(pads_t, "pads"), ints_arg(dilations_t, "dilations")
    if (nd < 1 or len(out_shape) != len(shape) or out_shape[:2] != shape[:2] or method not in ("max", "avg")
            or not len(kernel) == len(strides) == len(dilations) == nd or len(pads) != 2 * nd
            or min(kernel + strides + dilations) < 1 or min(pads) < 0):
        raise DlaError(NvError.BadParameter,
                       f"cpulib: {method} pool of {shape} to {out_shape}: kernel {kernel}, strides "
                       f"{strides}, pads {pads}, dilations {dilations}")
    integer = src_dtype in INT_DTYPES
    if integer and (method != "max" or dst_dtype != src_dtype):
        raise DlaError(NvError.BadParameter, f"cpulib: {method} pool of {src_dtype} into {dst_dtype}")
    x = tensor_arg(src, shape, src_dtype, "source", any_type=integer)
    x = x if integer else x.astype(np.float64)  # integers compare exactly as they are
    y = tensor_arg(dst, out_shape, dst_dtype, "destination", any_type=integer)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    total = [max(n + pads[i] + pads[i + nd], (o - 1) * s + span) for i, (n, o, s, span)
             in enumerate(zip(shape[2:], out_shape[2:], strides, spans, strict=True))]
    inside: tuple[Any, ...] = tuple(slice(pads[i], pads[i] + n) for i, n in enumerate(shape[2:]))
    fill = np.iinfo(x.dtype).min if integer else (-np.inf if method == "max" else 0.0)
    values = np.full((*shape[:2], *total), fill, dtype=x.dtype)
    whole: tuple[Any, ...] = (slice(None), slice(None))
    values[whole + inside] = x
    positions: tuple[Any, ...] = tuple(slice(None, (o - 1) * s + 1, s)
                                       for o, s in zip(out_shape[2:], strides, strict=True))
    taps: tuple[Any, ...] = tuple(slice(None, None, d) for d in dilations)
    windows = np.lib.stride_tricks.sliding_window_view(values, spans, axis=tuple(range(2, 2 + nd)))
    windows = windows[whole + positions + taps]
    window_axes = tuple(range(-nd, 0))
    if method == "max":
        y[...] = windows.max(axis=window_axes)
        return
    counted: tuple[Any, ...] = (tuple(slice(0, n + pads[i] + pads[i + nd]) for i, n in enumerate(shape[2:]))
                                if include else inside)
    counts = np.zeros(total)
    counts[counted] = 1.0
    count = np.lib.stride_tricks.sliding_window_view(counts, spans)[positions + taps].sum(axis=window_axes)
    y[...] = windows.sum(axis=window_axes) / np.maximum(count, 1.0)


def _truncating_divide(a: Any, b: Any, out: Any) -> None:
    """ONNX's integer Div: the quotient rounded toward zero (numpy's // rounds down); the most
    negative value divided by -1 wraps around. A zero divisor is refused, not given a value."""
    if not np.all(b):
        raise DlaError(NvError.BadValue, "cpulib: eltwise_int div: division by zero")
    q = np.floor_divide(a, b)  # not into ``out``: it may share memory with ``a``
    if q.dtype.kind == "i":
        q += (np.multiply(q, b) != a) & ((a < 0) != (b < 0))
    out[...] = q


_INT_OPS: dict[str, Callable[..., Any]] = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                                            "max": np.maximum, "min": np.minimum,
                                            "div": _truncating_divide}


_FLOAT_OPS: dict[str, Callable[..., Any]] = {**_INT_OPS, "div": np.divide}


def _eltwise_int(args: list[Any]) -> None:
    """eltwise_int(a, b, dst, a_shape, b_shape, out_shape, op, dtype): ONNX Add / Sub / Mul / Div /
    Max / Min of two integer tensors of one type with numpy broadcasting; results wrap around as the
    type's two's-complement arithmetic does."""
    _eltwise_typed(args, "eltwise_int")


def _eltwise(args: list[Any]) -> None:
    """eltwise(a, b, dst, a_shape, b_shape, out_shape, op, dtype): as eltwise_int, of any numeric
    type (floats in their own type, Div a true division)."""
    _eltwise_typed(args, "eltwise")


def _eltwise_typed(args: list[Any], name: str) -> None:
    a_buf, b_buf, dst, a_text, b_text, out_text, op, dtype = args
    integer = dtype in INT_DTYPES
    fn = (_INT_OPS if integer else _FLOAT_OPS).get(op)
    if fn is None or not (integer or (name == "eltwise" and dtype in DTYPES)):
        raise DlaError(NvError.BadParameter, f"cpulib: {name} '{op}' of {dtype}")
    a_shape, b_shape, out_shape = broadcast_args(name, out_text, a_text, b_text)
    a = tensor_arg(a_buf, a_shape, dtype, "a", any_type=True)
    b = tensor_arg(b_buf, b_shape, dtype, "b", any_type=True)
    y = tensor_arg(dst, out_shape, dtype, "destination", any_type=True, exact=True)
    with np.errstate(all="ignore"):  # a float division by zero gives inf or nan, as in ONNX
        fn(a, b, out=y)


def _clip_int(args: list[Any]) -> None:
    """clip_int(src, dst, low, high, shape, dtype): ONNX Clip of an integer tensor; ``low`` and
    ``high`` are "" (no bound), a constant, or a one-element buffer of the tensor's type."""
    src, dst, low, high, shape_text, dtype = args
    if dtype not in INT_DTYPES:
        raise DlaError(NvError.BadParameter, f"cpulib: clip_int of {dtype}")
    shape = shape_arg(shape_text)
    x = tensor_arg(src, shape, dtype, "source", any_type=True)
    y = tensor_arg(dst, shape, dtype, "destination", any_type=True, exact=True)
    info = np.iinfo(INT_DTYPES[dtype])
    bounds = []
    for value, what, default in ((low, "min", info.min), (high, "max", info.max)):
        if isinstance(value, np.ndarray):
            value = tensor_arg(value, (1,), dtype, what, any_type=True, exact=True)[0]
        elif value == "":
            value = default
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise DlaError(NvError.BadParameter, f"cpulib: clip_int {what} {value!r} is not an integer")
        bound = int(value)
        if not info.min <= bound <= info.max:
            raise DlaError(NvError.BadParameter, f"cpulib: clip_int {what} {bound} outside {dtype}")
        bounds.append(bound)
    np.clip(x, INT_DTYPES[dtype](bounds[0]), INT_DTYPES[dtype](bounds[1]), out=y)


def _maxpool_indices(args: list[Any]) -> None:
    """maxpool_indices(src, dst, indices, shape, out_shape, kernel, strides, pads, dilations,
    storage_order, src_dtype, dst_dtype): ONNX MaxPool with its Indices output (int64, each the
    first maximum's flat index in the input, spatial axes row-major or, with storage_order 1,
    column-major)."""
    (src, dst, indices, shape_text, out_text, kernel_t, strides_t, pads_t, dilations_t, order,
     src_dtype, dst_dtype) = args
    shape, out_shape = shape_arg(shape_text), shape_arg(out_text)
    nd = len(shape) - 2
    kernel, strides = ints_arg(kernel_t, "kernel"), ints_arg(strides_t, "strides")
    pads, dilations = ints_arg(pads_t, "pads"), ints_arg(dilations_t, "dilations")
    if (nd < 1 or len(out_shape) != len(shape) or out_shape[:2] != shape[:2] or order not in (0, 1)
            or not len(kernel) == len(strides) == len(dilations) == nd or len(pads) != 2 * nd
            or min(kernel + strides + dilations) < 1 or min(pads) < 0):
        raise DlaError(NvError.BadParameter,
                       f"cpulib: max pool of {shape} to {out_shape}: kernel {kernel}, strides {strides}, "
                       f"pads {pads}, dilations {dilations}, storage_order {order!r}")
    x = tensor_arg(src, shape, src_dtype, "source").astype(np.float64)
    y = tensor_arg(dst, out_shape, dst_dtype, "destination")
    where = tensor_arg(indices, out_shape, "int64", "indices", any_type=True)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    total = [max(n + pads[i] + pads[i + nd], (o - 1) * s + span) for i, (n, o, s, span)
             in enumerate(zip(shape[2:], out_shape[2:], strides, spans, strict=True))]
    values = np.full((*shape[:2], *total), -np.inf)
    whole: tuple[Any, ...] = (slice(None), slice(None))
    values[whole + tuple(slice(pads[i], pads[i] + n) for i, n in enumerate(shape[2:]))] = x
    positions: tuple[Any, ...] = tuple(slice(None, (o - 1) * s + 1, s)
                                       for o, s in zip(out_shape[2:], strides, strict=True))
    taps: tuple[Any, ...] = tuple(slice(None, None, d) for d in dilations)
    windows = np.lib.stride_tricks.sliding_window_view(values, spans, axis=tuple(range(2, 2 + nd)))
    flat = windows[whole + positions + taps].reshape(*out_shape, -1)
    best = flat.argmax(axis=-1)  # the first maximum in the window, row-major, as ONNX scans
    y[...] = np.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
    offsets = np.unravel_index(best, kernel)
    index = np.arange(shape[0] * shape[1]).reshape(*shape[:2], *([1] * nd)) * int(np.prod(shape[2:]))
    weight = 1
    axes = range(nd) if order else range(nd - 1, -1, -1)
    for i in axes:  # the spatial part of the flat index
        grid = np.arange(out_shape[2 + i]).reshape([-1 if a == i else 1 for a in range(nd)])
        coord = grid * strides[i] + offsets[i] * dilations[i] - pads[i]
        index = index + coord * weight
        weight *= shape[2 + i]
    where[...] = index


def _batchnorm_params(args: list[Any]) -> None:
    """batchnorm_params(scale, bias, mean, var, dst, epsilon, repeat, param_dtype, dst_dtype)."""
    scale_b, bias_b, mean_b, var_b, dst, epsilon, repeat, param_dtype, dst_dtype = args
    if not isinstance(scale_b, np.ndarray) or not isinstance(repeat, int) or repeat < 1:
        raise DlaError(NvError.BadParameter, f"cpulib: batchnorm_params repeat {repeat!r}")
    size = np.dtype(DTYPES.get(param_dtype, np.float32)).itemsize
    channels = scale_b.size // size
    scale, bias, mean, var = (tensor_arg(b, (channels,), param_dtype, what).astype(np.float64)
                              for b, what in ((scale_b, "scale"), (bias_b, "bias"), (mean_b, "mean"),
                                              (var_b, "var")))
    y = tensor_arg(dst, (2, repeat, channels), dst_dtype, "destination", exact=True)
    factor = scale / np.sqrt(var + float(epsilon))
    y[0] = factor
    y[1] = bias - mean * factor


FUNCTIONS: dict[str, tuple[int, Callable[[list[Any]], None]]] = {
    "unary": (8, cpumath.unary),
    "compare": (9, cpumath.compare),
    "where": (11, cpumath.where),
    "cast": (5, cpumath.cast),
    "argmax": (7, cpumath.argmax),
    "pow": (9, cpumath.power),
    "reduce": (8, cpumath.reduce),
    "gather": (9, cpumath.gather),
    "expand": (6, cpumath.expand),
    "tile": (6, cpumath.tile),
    "slice": (9, _slice),
    "softmax": (6, _softmax_like(False)),
    "log_softmax": (6, _softmax_like(True)),
    "pad": (8, _pad),
    "resize": (9, cpuresize.resize),
    "pad_nd": (9, _pad_nd),
    "resize_nd": (15, cpuresize.resize_nd),
    "resize_filtered": (18, cpuresize.resize_filtered),
    "eltwise_int": (8, _eltwise_int),
    "eltwise": (8, _eltwise),
    "clip_int": (6, _clip_int),
    "pool": (12, _pool),
    "batchnorm_params": (9, _batchnorm_params),
    "maxpool_indices": (12, _maxpool_indices),
}


def lookup(name: str, lookup_args: Any) -> None:
    """The run recipe's lookup: fill in the function's argument count and callable."""
    if name not in FUNCTIONS:
        raise DlaError(NvError.NotSupported,
                       f"CPU library pydla.umd.cpulib has no function '{name}' "
                       f"(it has {', '.join(sorted(FUNCTIONS))})")
    count, fn = FUNCTIONS[name]

    def quietly(args: list[Any]) -> None:
        with np.errstate(all="ignore"):  # IEEE arithmetic, as the device's: NaN and inf, no warnings
            fn(args)

    lookup_args.num_args, lookup_args.callable = count, quietly


def library_init(args: Any) -> None:
    """The library's entry point: hands the runner the lookup function."""
    args.lookup_fn = lookup
