"""Reading the arguments of a CPU library function: buffers as typed tensors of a given shape
(every size checked against the buffer), shapes and integer or float lists given as text or as a
buffer of a tensor given at run time.

Usage::

    x = tensor_arg(src, shape_arg("2,3"), "float32", "source")
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError

# Floats: the device's precisions, and float64 (a model's own, computed by CPU runs only).
DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64}
INT_DTYPES = {name: getattr(np, name) for name in ("int64", "int32", "int16", "int8", "uint64", "uint32",
                                                  "uint16", "uint8")}
ANY_DTYPES = {**DTYPES, **INT_DTYPES}


def tensor_arg(buf: Any, shape: tuple[int, ...], dtype: str, what: str, *, any_type: bool = False,
               exact: bool = False) -> Any:
    """The buffer argument ``buf`` (uint8) as a tensor of ``shape`` and ``dtype`` (float32 / float16 /
    float64, or with ``any_type`` also the integer types); with ``exact`` it must hold exactly that many
    bytes."""
    types = ANY_DTYPES if any_type else DTYPES
    if dtype not in types:
        raise DlaError(NvError.BadParameter, f"cpulib: {what} dtype '{dtype}' ({' or '.join(types)})")
    if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8:
        raise DlaError(NvError.BadParameter, f"cpulib: {what} must be a buffer")
    need = math.prod(shape) * np.dtype(types[dtype]).itemsize  # math.prod: no array made
    if buf.size < need or (exact and buf.size != need):
        raise DlaError(NvError.InvalidSize, f"cpulib: {what} holds {buf.size} bytes, the tensor {shape} "
                                            f"of {dtype} needs {need}")
    return buf[:need].view(types[dtype]).reshape(shape)


def shape_arg(text: Any) -> tuple[int, ...]:
    """A shape given as text "d0,d1,...": 1 to 8 dimensions, each at least 1."""
    try:
        dims = tuple(int(d) for d in str(text).split(","))
    except ValueError:
        raise DlaError(NvError.BadParameter, f"cpulib: shape '{text}' is not d0,d1,...") from None
    if not dims or min(dims) < 1 or len(dims) > 8:
        raise DlaError(NvError.BadParameter, f"cpulib: shape '{text}'")
    return dims


def _numbers(text: Any, what: str, dtype: Any, convert: Any) -> list[Any]:
    if isinstance(text, np.ndarray):
        size = np.dtype(dtype).itemsize
        if text.dtype != np.uint8 or text.size % size:
            raise DlaError(NvError.BadParameter, f"cpulib: {what}: a buffer of {np.dtype(dtype)} expected, "
                                                 f"got {text.size} bytes")
        return [convert(v) for v in text.view(dtype)]
    try:
        return [convert(v) for v in str(text).split(",")] if str(text) else []
    except ValueError:
        raise DlaError(NvError.BadParameter, f"cpulib: {what} '{text}'") from None


def ints_arg(text: Any, what: str) -> list[int]:
    """Integers given as text or as a buffer of int64 (a tensor given at run time)."""
    values: list[int] = _numbers(text, what, np.int64, int)
    return values


def floats_arg(text: Any, what: str) -> list[float]:
    """Numbers given as text or as a buffer of float32 (a tensor given at run time)."""
    values: list[float] = _numbers(text, what, np.float32, float)
    return values


def typed_arg(buf: Any, shape: tuple[int, ...], dtype: str, what: str, *, exact: bool = False) -> Any:
    """A tensor of any loadable element type; bools are read as their bytes being nonzero (a byte
    other than 0 or 1 is not a valid numpy bool)."""
    if dtype == "bool":
        raw = tensor_arg(buf, shape, "uint8", what, any_type=True, exact=exact)
        return raw if exact else raw != 0
    return tensor_arg(buf, shape, dtype, what, any_type=True, exact=exact)


def store_typed(y: Any, value: Any, dtype: str) -> None:
    """``value`` into ``y`` (from :func:`_typed` with ``exact``): bools as bytes 0 and 1."""
    y[...] = (np.asarray(value) != 0).astype(np.uint8) if dtype == "bool" else value


def broadcast_args(what: str, out_text: Any, *texts: Any) -> tuple[tuple[int, ...], ...]:
    shapes = tuple(shape_arg(t) for t in texts)
    out = shape_arg(out_text)
    try:
        ok = np.broadcast_shapes(*shapes) == out
    except ValueError:
        ok = False
    if not ok:
        raise DlaError(NvError.BadParameter, f"cpulib: {what} of {' and '.join(map(str, shapes))} into {out}")
    return (*shapes, out)
