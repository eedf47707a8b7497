"""Checks and array plumbing shared by the virtual device's numerical kernels
(:mod:`pydla.hw.compute`, :mod:`pydla.hw.conv`): argument checks that raise
``DlaError(NvError.BadParameter)`` naming the value, float32 accumulation targets, and BLAS-ready
matrix views of (C, H, W) feature maps.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided
from numpy.typing import NDArray

from pydla.errors import DlaError, NvError

FloatArray = NDArray[np.floating[Any]]
F32Array = NDArray[np.float32]

F32 = np.dtype(np.float32)
DATA_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
ITEM = F32.itemsize


def bad(message: str) -> DlaError:
    return DlaError(NvError.BadParameter, message)


def feature(x: Any, name: str) -> tuple[int, int, int]:
    """The (C, H, W) of a data array, after checking that it is one."""
    if not isinstance(x, np.ndarray):
        raise bad(f"{name}: expected a numpy array, got {type(x).__name__}")
    if x.ndim != 3:
        raise bad(f"{name}: expected a (C, H, W) array, got shape {x.shape}")
    if x.dtype not in DATA_DTYPES:
        raise bad(f"{name}: dtype {x.dtype} is not float32 or float16")
    c, h, w = x.shape
    return int(c), int(h), int(w)


def check_out(out: FloatArray | None, shape: tuple[int, ...]) -> None:
    if out is None:
        return
    if not isinstance(out, np.ndarray):
        raise bad(f"out: expected a numpy array, got {type(out).__name__}")
    if out.shape != shape:
        raise bad(f"out: shape {out.shape} is not the result shape {shape}")
    if out.dtype not in DATA_DTYPES:
        raise bad(f"out: dtype {out.dtype} is not float32 or float16")
    if not out.flags.writeable:
        raise bad("out: the array is read-only")


def ints(value: Any, n: int, name: str) -> tuple[int, ...]:
    try:
        ints = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        ints = ()
    if len(ints) != n:
        raise bad(f"{name}: expected {n} integers, got {value!r}")
    return ints


def pair(value: Any, name: str, minimum: int) -> tuple[int, int]:
    a, b = ints(value, 2, name)
    if a < minimum or b < minimum:
        raise bad(f"{name}: {tuple(value)} has a value below {minimum}")
    return a, b


def check_pads(value: Any) -> tuple[int, int, int, int]:
    top, left, bottom, right = ints(value, 4, "pads")
    if min(top, left, bottom, right) < 0:
        raise bad(f"pads: {tuple(value)} has a negative value")
    return top, left, bottom, right


def channel_param(p: Any, c: int, name: str) -> F32Array:
    """A per-channel parameter as a float32 (C, 1, 1) array, ready to broadcast over a feature map."""
    arr = np.asarray(p, dtype=np.float32)
    if arr.size != c:
        raise bad(f"{name}: {arr.size} values for {c} channels")
    return arr.reshape(c, 1, 1)


def result_dtype(x: FloatArray, out: FloatArray | None) -> np.dtype[Any]:
    return out.dtype if out is not None else x.dtype


def new_or_out(out: FloatArray | None, shape: tuple[int, ...], dtype: np.dtype[Any]) -> FloatArray:
    """Where a ufunc writes its result: ``out`` itself (ufuncs cast float32 to float16 on store)."""
    return out if out is not None else np.empty(shape, dtype=dtype)


def f32_target(out: FloatArray | None, shape: tuple[int, ...], *inputs: FloatArray) -> F32Array:
    """A float32 array to accumulate into: ``out`` when that is safe, else a new array.

    Accumulating kernels write partial results, so ``out`` is used only when it is float32 and cannot
    overlap an input (an overlapping ``out`` would be read after being written).
    """
    if out is not None and accumulates_into(out, *inputs):
        return out
    return np.empty(shape, dtype=np.float32)


def accumulates_into(out: FloatArray, *inputs: FloatArray) -> bool:
    """Whether an accumulating kernel may use ``out`` itself (see :func:`f32_target`)."""
    return out.dtype == F32 and not any(np.may_share_memory(out, a) for a in inputs)


def finish(res: F32Array, out: FloatArray | None, dtype: np.dtype[Any]) -> FloatArray:
    """Store a float32 result: into ``out`` (rounding to its dtype) or as a new array of ``dtype``."""
    if out is None:
        return np.ascontiguousarray(res, dtype=dtype)
    if res is not out:
        np.copyto(out, res, casting="same_kind")
    return out


def matrix(a: NDArray[Any], rows: int, cols: int, row_stride: int) -> NDArray[Any]:
    """A (rows, cols) view with unit column stride that numpy's matmul hands to BLAS without a copy.

    BLAS wants a leading dimension >= cols even for a single row, so a 1-row matrix gets one.
    """
    stride = row_stride if rows > 1 else cols * a.itemsize
    return as_strided(a, (rows, cols), (stride, a.itemsize))


def flat_hw(a: NDArray[Any]) -> NDArray[Any] | None:
    """(C, H, W) as a BLAS-ready (C, H*W) view, or None when lines are not packed back to back."""
    c, h, w = a.shape
    s0, s1, s2 = a.strides
    item = a.itemsize
    if (w > 1 and s2 != item) or (h > 1 and s1 != w * item):
        return None
    if c > 1 and (s0 % item or s0 < h * w * item):
        return None
    return matrix(a, c, h * w, s0)


def stack(m: NDArray[Any], groups: int) -> NDArray[Any]:
    """Split a (R, N) matrix view into (groups, R // groups, N): one matrix per convolution group."""
    r, n = m.shape
    rs = m.strides[0] if r > 1 else n * m.itemsize
    per = r // groups
    inner = rs if per > 1 else n * m.itemsize
    return as_strided(m, (groups, per, n), (per * rs, inner, m.itemsize))


_workspace = threading.local()
#: Scratch arrays larger than this are not kept between operations.
MAX_SCRATCH_BYTES = 64 << 20


def scratch(key: str, shape: tuple[int, ...]) -> F32Array:
    """A float32 array of ``shape`` from this thread's workspace slot ``key``: its contents are
    undefined, and it is valid until the next ``scratch(key, ...)`` in this thread.

    The kernels' temporaries (column matrices, padded planes) are megabytes each; fresh ones every
    operation would be fresh pages every operation, whose faults cost as much as the copying into
    them (measured: ResNet-18's 7x7 convolution 2.7 ms with fresh buffers, 1.9 ms with reused ones).
    """
    n = 1
    for d in shape:
        n *= d
    if n * ITEM > MAX_SCRATCH_BYTES:
        return np.empty(shape, dtype=np.float32)
    slots: dict[str, F32Array] | None = getattr(_workspace, "slots", None)
    if slots is None:
        slots = _workspace.slots = {}
    buf = slots.get(key)
    if buf is None or buf.size < n:
        buf = slots[key] = np.empty(max(n, 1), dtype=np.float32)
    return buf[:n].reshape(shape)


def padded(x: FloatArray, top: int, left: int, hn: int, wn: int, fill: float,
           scratch_key: str | None = None) -> F32Array:
    """x placed at (top, left) in a float32 (C, hn, wn) array whose other elements are ``fill``: a
    new one, or the workspace slot ``scratch_key`` (see :func:`scratch`).

    Only the border is filled (not the whole buffer first), so the input is read and written once.
    Rows or columns of x beyond (hn, wn) are not copied: no window reaches them.
    """
    c, h, w = x.shape
    buf = (np.empty((c, hn, wn), dtype=np.float32) if scratch_key is None
           else scratch(scratch_key, (c, hn, wn)))
    hh = max(0, min(h, hn - top))
    ww = max(0, min(w, wn - left))
    buf[:, :top] = fill
    buf[:, top + hh:] = fill
    buf[:, top:top + hh, :left] = fill
    buf[:, top:top + hh, left + ww:] = fill
    buf[:, top:top + hh, left:left + ww] = x[:, :hh, :ww]
    return buf


def view_reshape(a: NDArray[Any], shape: tuple[int, ...]) -> NDArray[Any]:
    """Reshape that must not copy (it only ever splits axes here); a copy would lose writes to out."""
    v = a.reshape(shape)
    if v.size and not np.may_share_memory(v, a):
        raise bad(f"cannot view an array of shape {a.shape} and strides {a.strides} as {shape}")
    return v
