"""PDP pooling of FP16 data, as nvdla/hw ``cmod/hls_wrapper/pdp_hls_wrapper.cpp`` computes it.

Pooling runs in two passes, along the width then along the height, each folding the window's
elements in increasing order:

- MAX / MIN in FP16 (``FpMax<5, 10>`` / ``FpMin``): the width pass compares (running, next), the
  height pass (next row, running), which decides ties between +0 and -0 and which NaN wins.
- AVERAGE in FP17 (1/6/10, pydla.hw.nvdla.nvfloat): the width pass sums ``running + next`` and then
  adds the padding value of the window's padded columns (``PAD_VALUE_<n>X`` read as FP17) at its last
  element; the height pass sums ``next row + running`` and adds the padded rows' value times the
  kernel width (an FP17 product); the sum is multiplied by ``RECIP_KERNEL_WIDTH`` and then
  ``RECIP_KERNEL_HEIGHT`` (FP17 patterns: 0x7c00 is 1.0) and converted to FP16.

NaN inputs read from memory become 0 when ``nan_to_zero`` is set.

Usage::

    out = pool_fp16(part, params, pad_left, pad_right, nan_to_zero=False)   # uint16 (C, OH, OW)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.intmath import I64
from pydla.hw.nvdla.nvfloat import (
    FP16,
    FP17,
    fp16_to_fp17,
    fp17_to_fp16,
    fp_add,
    fp_max,
    fp_min,
    fp_mul,
    split,
)

if TYPE_CHECKING:
    from pydla.hw.nvdla.pdp import PdpParams

AVERAGE, MAX = 0, 1
# The kernel width as FP17 (1.0 .. 7.0 from the C model's table; its table has no entry for 8,
# read past its end: pydla uses 8.0).
_KW_FP17 = (0x0000, 0x7C00, 0x8000, 0x8200, 0x8400, 0x8500, 0x8600, 0x8700, 0x8800)


def _fold(x: I64, kernel: int, stride: int, pad_a: int, pad_b: int, axis: int,
          first: object, step: object) -> tuple[I64, I64, I64]:
    """Fold windows along ``axis``: ``first(v)`` on a window's first element, ``step(acc, v)`` on
    the next. Returns (result, padded elements before, padded elements after) per window."""
    size = x.shape[axis]
    n_out = (size + pad_a + pad_b - kernel) // stride + 1
    start = np.arange(n_out) * stride - pad_a
    shape = [1] * x.ndim
    shape[axis] = n_out
    acc: I64 | None = None
    for k in range(kernel):
        col = start + k
        valid = ((col >= 0) & (col < size)).reshape(shape)
        v = np.take(x, np.clip(col, 0, size - 1), axis=axis)
        is_first = (col == np.maximum(start, 0)).reshape(shape)
        init = first(v)  # type: ignore[operator]
        if acc is None:
            acc = np.where(is_first, init, 0)
        else:
            acc = np.where(is_first, init, np.where(valid, step(acc, v), acc))  # type: ignore[operator]
    assert acc is not None
    before = np.maximum(-start, 0)
    after = np.maximum(start + kernel - size, 0)
    return acc, before, after


def pool_fp16(x: npt.NDArray[np.generic], p: PdpParams, pad_l: int, pad_r: int, *, nan_to_zero: bool
              ) -> npt.NDArray[np.uint16]:
    """Pool one strip of FP16 data (C, H, W) as raw bit patterns."""
    kw, kh = p.kernel_width + 1, p.kernel_height + 1
    sw, sh = p.kernel_stride_width + 1, p.kernel_stride_height + 1
    v = np.asarray(x).astype(np.int64) & 0xFFFF
    if nan_to_zero:
        _, e, m = split(v, FP16)
        v = np.where((e == FP16.emax) & (m != 0), 0, v)
    if p.pooling_method != AVERAGE:
        op = fp_max if p.pooling_method == MAX else fp_min

        def ident(a: I64) -> I64:
            return a

        rows, _, _ = _fold(v, kw, sw, pad_l, pad_r, 2, ident, lambda acc, a: op(acc, a, FP16))
        out, _, _ = _fold(rows, kh, sh, p.pad_top, p.pad_bottom, 1, ident, lambda acc, a: op(a, acc, FP16))
        return out.astype(np.uint16)

    pads = [0, *(pv & 0x1FFFF for pv in p.pad_values)]  # FP17 patterns of 1..7 padded elements
    rows, before, after = _fold(v, kw, sw, pad_l, pad_r, 2, fp16_to_fp17,
                                lambda acc, a: fp_add(acc, fp16_to_fp17(a), FP17))
    # The padding lands in the "left" slot when the window starts in the padding, else the "right"
    # one; the other slot adds +0.
    n = before + after
    pad = np.take(pads, n)
    left = np.where(before > 0, pad, 0)[None, None, :]
    right = np.where(before > 0, 0, pad)[None, None, :]
    rows = fp_add(fp_add(rows, left, FP17), right, FP17)

    total, top, bottom = _fold(rows, kh, sh, p.pad_top, p.pad_bottom, 1, lambda a: a,
                               lambda acc, a: fp_add(a, acc, FP17))
    n = top + bottom
    width17 = _KW_FP17[kw]
    pad = fp_mul(np.take(pads, n), width17, FP17)
    upper = np.where(top > 0, pad, fp_mul(0, width17, FP17))[None, :, None]
    lower = np.where(top > 0, fp_mul(0, width17, FP17), pad)[None, :, None]
    total = fp_add(fp_add(total, upper, FP17), lower, FP17)
    avg = fp_mul(fp_mul(total, p.recip_kernel_width & 0x1FFFF, FP17), p.recip_kernel_height & 0x1FFFF, FP17)
    return fp17_to_fp16(avg).astype(np.uint16)
