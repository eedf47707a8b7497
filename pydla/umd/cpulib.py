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


FUNCTIONS: dict[str, tuple[int, Callable[[list[Any]], None]]] = {
    "softmax": (6, _softmax_like(False)),
    "log_softmax": (6, _softmax_like(True)),
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
