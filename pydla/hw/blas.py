"""Single-precision GEMM straight from the BLAS library numpy itself uses, through ctypes.

numpy's ``matmul`` cannot accumulate into its output (``C += A @ B``): a convolution computed as a
sum of kernel-tap products would need a temporary and an extra pass per tap. BLAS ``sgemm`` with
beta = 1 accumulates in place, and takes operands with a leading dimension, so a tap's input is a
plain offset into the padded input (no im2col copy). The library is the OpenBLAS numpy wheels bundle
(``numpy.libs``); where it cannot be found, or its ``sgemm`` fails a self-check at load, ``SGEMM`` is
None and callers use numpy.

Usage::

    if SGEMM is not None:
        SGEMM.gemm(a, b_base, b_offset, b_ld, n, c, accumulate=True)
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

import numpy as np
import numpy.typing as npt

_ROW_MAJOR, _NO_TRANS = 101, 111
# (symbol, 64-bit integers): the names scipy-openblas and plain OpenBLAS builds export.
_SYMBOLS = (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True), ("scipy_cblas_sgemm", False),
            ("cblas_sgemm", False))


class Sgemm:
    """Row-major ``C[m, n] (+)= A[m, k] @ B[k, n]`` on float32 buffers given by address."""

    def __init__(self, function: Any, int_type: Any) -> None:
        self._fn = function
        self._fn.restype = None
        self._fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, int_type, int_type, int_type,
                             ctypes.c_float, ctypes.c_void_p, int_type, ctypes.c_void_p, int_type,
                             ctypes.c_float, ctypes.c_void_p, int_type]

    def gemm(self, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32], b_offset: int, ldb: int, n: int,
             c: npt.NDArray[np.float32], *, accumulate: bool) -> None:
        """``c (+)= a @ B`` where B is the (a.shape[1], n) matrix at element ``b_offset`` of the
        C-contiguous ``b`` with rows ``ldb`` elements apart. ``a`` and ``c`` are C-contiguous; every
        element either touches is checked to lie inside its array (a bad call would corrupt memory)."""
        m, k = a.shape
        if not (a.dtype == b.dtype == c.dtype == np.float32 and a.flags.c_contiguous
                and b.flags.c_contiguous and c.flags.c_contiguous and c.shape == (m, n)):
            raise ValueError("sgemm: float32 C-contiguous operands of matching shapes are required")
        if m < 1 or n < 1 or k < 1 or b_offset < 0 or ldb < n or b_offset + (k - 1) * ldb + n > b.size:
            raise ValueError(f"sgemm: B ({k}x{n} at {b_offset}, ld {ldb}) is outside its {b.size} elements")
        self._fn(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a.ctypes.data, k,
                 b.ctypes.data + 4 * b_offset, ldb, 1.0 if accumulate else 0.0, c.ctypes.data, n)


def _candidates() -> list[str]:
    root = os.path.dirname(os.path.dirname(np.__file__))
    found: list[str] = []
    for pattern in ("numpy.libs/libscipy_openblas*.so*", "numpy.libs/libopenblas*.so*",
                    "numpy/.dylibs/libscipy_openblas*.dylib", "numpy/.dylibs/libopenblas*.dylib"):
        found += sorted(glob.glob(os.path.join(root, pattern)))
    return found


def _self_check(s: Sgemm) -> bool:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((5 * 9 + 4,)).astype(np.float32)
    c = np.ones((3, 4), np.float32)
    s.gemm(a, b, 2, 9, 4, c, accumulate=True)
    expect = 1 + a @ b[2:2 + 5 * 9].reshape(5, 9)[:, :4]
    return bool(np.allclose(c, expect, rtol=1e-5, atol=1e-5))


def _load() -> Sgemm | None:
    if os.environ.get("PYDLA_NO_BLAS_SGEMM"):
        return None
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol, ilp64 in _SYMBOLS:
            fn = getattr(lib, symbol, None)
            if fn is None:
                continue
            s = Sgemm(fn, ctypes.c_int64 if ilp64 else ctypes.c_int32)
            try:
                if _self_check(s):
                    return s
            except (ValueError, OSError):
                pass
    return None


SGEMM: Sgemm | None = _load()
