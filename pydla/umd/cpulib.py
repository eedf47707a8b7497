"""pydla's own CPU library: the functions the compiler emits as CPU runs (seed 000's CPU functions).

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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError

DTYPES = {"float32": np.float32, "float16": np.float16}


def _tensor(buf: Any, shape: tuple[int, ...], dtype: str, what: str) -> Any:
    if dtype not in DTYPES:
        raise DlaError(NvError.BadParameter, f"cpulib: {what} dtype '{dtype}' (float32 or float16)")
    if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8:
        raise DlaError(NvError.BadParameter, f"cpulib: {what} must be a buffer")
    need = int(np.prod(shape)) * np.dtype(DTYPES[dtype]).itemsize
    if buf.size < need:
        raise DlaError(NvError.InvalidSize, f"cpulib: {what} holds {buf.size} bytes, the tensor {shape} "
                                            f"of {dtype} needs {need}")
    return buf[:need].view(DTYPES[dtype]).reshape(shape)


def _shape(text: Any) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in str(text).split(","))
    except ValueError:
        raise DlaError(NvError.BadParameter, f"cpulib: shape '{text}' is not d0,d1,...") from None
    if not dims or min(dims) < 1 or len(dims) > 8:
        raise DlaError(NvError.BadParameter, f"cpulib: shape '{text}'")
    return dims


def _softmax_like(log: bool) -> Callable[[list[Any]], None]:
    def run(args: list[Any]) -> None:
        src, dst, axis, shape_text, src_dtype, dst_dtype = args
        shape = _shape(shape_text)
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise DlaError(NvError.BadParameter, f"cpulib: axis {axis!r} of a rank-{len(shape)} tensor")
        x = _tensor(src, shape, src_dtype, "source").astype(np.float32)
        y = _tensor(dst, shape, dst_dtype, "destination")
        shifted = x - x.max(axis=axis, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=axis, keepdims=True)
        y[...] = shifted - np.log(total) if log else e / total

    return run


def _pad(args: list[Any]) -> None:
    """pad(src, dst, shape, pads "b0,b1,..,e0,e1,..", mode constant|reflect|edge, value, src_dtype,
    dst_dtype): ONNX Pad."""
    src, dst, shape_text, pads_text, mode, value, src_dtype, dst_dtype = args
    shape = _shape(shape_text)
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
    x = _tensor(src, shape, src_dtype, "source")
    y = _tensor(dst, out_shape, dst_dtype, "destination")
    widths = [(pads[i], pads[i + rank]) for i in range(rank)]
    if mode == "constant":
        y[...] = np.pad(x, widths, mode="constant", constant_values=float(value))
    else:
        if mode == "reflect" and any(w[0] >= d or w[1] >= d for w, d in zip(widths, shape, strict=True)):
            raise DlaError(NvError.BadParameter, f"cpulib: reflect pads {pads} need dims > pads {shape}")
        y[...] = np.pad(x, widths, mode=mode)


def _source_coords(n_out: int, n_in: int, scale: float, mode: str) -> Any:
    i = np.arange(n_out, dtype=np.float64)
    if mode == "align_corners":
        return i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return i / scale
    if mode == "pytorch_half_pixel" and n_out == 1:
        return np.zeros(n_out)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return (i + 0.5) / scale - 0.5
    raise DlaError(NvError.NotSupported, f"cpulib: coordinate_transformation_mode '{mode}'")


def _resize(args: list[Any]) -> None:
    """resize(src, dst, in_shape, out_shape, mode nearest|linear, coordinate_transformation_mode,
    nearest_mode, src_dtype, dst_dtype): ONNX Resize over the last two axes of an NCHW tensor."""
    src, dst, in_text, out_text, mode, ctm, nearest_mode, src_dtype, dst_dtype = args
    in_shape, out_shape = _shape(in_text), _shape(out_text)
    if len(in_shape) != 4 or len(out_shape) != 4 or in_shape[:2] != out_shape[:2]:
        raise DlaError(NvError.NotSupported, f"cpulib: resize {in_shape} to {out_shape}: only H and W")
    x = _tensor(src, in_shape, src_dtype, "source").astype(np.float64)
    y = _tensor(dst, out_shape, dst_dtype, "destination")
    (h, w), (ho, wo) = in_shape[2:], out_shape[2:]
    ys = _source_coords(ho, h, ho / h, ctm)
    xs = _source_coords(wo, w, wo / w, ctm)
    if mode == "nearest":
        modes: dict[str, Callable[[Any], Any]] = {
            "round_prefer_floor": lambda v: np.ceil(v - 0.5),
            "round_prefer_ceil": lambda v: np.floor(v + 0.5),
            "floor": np.floor, "ceil": np.ceil}
        rounding = modes.get(nearest_mode)
        if rounding is None:
            raise DlaError(NvError.BadParameter, f"cpulib: nearest_mode '{nearest_mode}'")
        yi = np.clip(rounding(ys), 0, h - 1).astype(np.int64)
        xi = np.clip(rounding(xs), 0, w - 1).astype(np.int64)
        y[...] = x[:, :, yi][:, :, :, xi]
        return
    if mode != "linear":
        raise DlaError(NvError.NotSupported, f"cpulib: resize mode '{mode}'")
    ys, xs = np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)
    y0, x0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = x[:, :, y0][:, :, :, x0] * (1 - fx) + x[:, :, y0][:, :, :, x1] * fx
    bottom = x[:, :, y1][:, :, :, x0] * (1 - fx) + x[:, :, y1][:, :, :, x1] * fx
    y[...] = top * (1 - fy) + bottom * fy


def _ints(text: Any, what: str) -> list[int]:
    try:
        return [int(v) for v in str(text).split(",")] if str(text) else []
    except ValueError:
        raise DlaError(NvError.BadParameter, f"cpulib: {what} '{text}'") from None


def _slice(args: list[Any]) -> None:
    """slice(src, dst, shape, starts, ends, axes, steps, src_dtype, dst_dtype): ONNX Slice."""
    src, dst, shape_text, starts_t, ends_t, axes_t, steps_t, src_dtype, dst_dtype = args
    shape = _shape(shape_text)
    starts, ends = _ints(starts_t, "starts"), _ints(ends_t, "ends")
    axes, steps = _ints(axes_t, "axes"), _ints(steps_t, "steps")
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
    x = _tensor(src, shape, src_dtype, "source")
    out_shape = tuple(len(i) for i in index)
    y = _tensor(dst, out_shape, dst_dtype, "destination")
    y[...] = x[np.ix_(*index)]


FUNCTIONS: dict[str, tuple[int, Callable[[list[Any]], None]]] = {
    "slice": (9, _slice),
    "softmax": (6, _softmax_like(False)),
    "log_softmax": (6, _softmax_like(True)),
    "pad": (8, _pad),
    "resize": (9, _resize),
}


def lookup(name: str, lookup_args: Any) -> None:
    """The seed's lookup: fill in the function's argument count and callable."""
    if name not in FUNCTIONS:
        raise DlaError(NvError.NotSupported,
                       f"CPU library pydla.umd.cpulib has no function '{name}' "
                       f"(it has {', '.join(sorted(FUNCTIONS))})")
    lookup_args.num_args, lookup_args.callable = FUNCTIONS[name]


def library_init(args: Any) -> None:
    """The library's entry point: hands the runner the lookup function."""
    args.lookup_fn = lookup
