"""The CONV block's matrix-product kernels: a convolution as BLAS products, over an im2col column
matrix (a strided view of the padded input copied chunk by chunk), a "wide" im2col (whole lines of
the padded input's stride phases, the extra columns cropped), or tap-major weights accumulated
tap by tap without a column matrix (shift-GEMM). :mod:`pydla.hw.conv` chooses the path.

Usage::

    gemm_conv(x, w32, groups, stride, pads, dilation, res)      # res (K, Ho, Wo) float32 = conv(x, w)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pydla.hw.arrays import (
    F32,
    ITEM,
    F32Array,
    FloatArray,
    bad,
    flat_hw,
    matrix,
    padded,
    scratch,
    stack,
)
from pydla.hw.blas import SGEMM, before_numpy_product

# Upper bound on one im2col chunk (the column matrix is built and multiplied a chunk of output lines
# at a time): it bounds memory for big inputs, and is big enough that each matmul keeps both cores
# busy (smaller chunks measured slower; past ~4 MiB it makes no difference).
IM2COL_BYTES = 8 << 20
# Wide im2col (see _wide_im2col_conv) pays off once output lines are long: copying fewer, longer runs
# saves more than the cropped extra matmul columns and the crop copy cost.
WIDE_MIN_WIDTH = 32
WIDE_MAX_EXTRA = 0.125  # at most this fraction of extra (cropped) matmul columns
# Grouped products go to BLAS one group at a time up to this many groups; past it, numpy's batched
# matmul (one call) costs less than the calls.
SGEMM_MAX_STACK = 64
# Products of fewer multiply-adds (a few microseconds of arithmetic) go to numpy's matmul.
_SGEMM_MIN_MACS = 1 << 18


def matmul(a: F32Array, b: FloatArray, out: F32Array) -> None:
    """out = a @ b (2-D, or 3-D stacks of equal depth): through :data:`SGEMM` when it is pydla's
    private instance (kernels faster than numpy's; see :mod:`pydla.hw.blas`), the product is big
    enough for that to matter, and it takes the operands as they lie; else numpy (whose call costs
    less: 14 against 19 us for a whole 8-channel 1x1 convolution of a 4x4 map)."""
    if SGEMM is not None and SGEMM.private and a.shape[-2] * a.shape[-1] * out.shape[-1] >= _SGEMM_MIN_MACS:
        if out.ndim == 2:
            if SGEMM.product(a, b, out):
                return
        elif out.shape[0] <= SGEMM_MAX_STACK and all(
                SGEMM.product(a[g], b[g], out[g]) for g in range(out.shape[0])):
            return  # a refusal after some products is harmless: numpy then writes every one
    before_numpy_product()
    np.matmul(a, b, out=out)


def check_addends(addends: Sequence[FloatArray], shape: tuple[int, int, int],
                   what: str) -> list[FloatArray]:
    """The addends, each broadcast to ``shape`` (a view), after checking them."""
    try:
        if len(addends) > 2:
            raise ValueError
        return [np.broadcast_to(a, shape) for a in addends]
    except ValueError:
        raise bad(f"{what}: addends {[np.shape(a) for a in addends]} for a {shape} result") from None


def store(dst: F32Array, src: FloatArray, adds: Sequence[FloatArray]) -> None:
    """dst = src + the addends (each already sliced to dst's shape)."""
    if not adds:
        np.copyto(dst, src, casting="same_kind")
        return
    np.add(src, adds[0], out=dst, dtype=np.float32)
    for a in adds[1:]:
        np.add(dst, a, out=dst, dtype=np.float32)


def shift_gemm(x: FloatArray, w: FloatArray, stride: tuple[int, int], pads: tuple[int, int],
                dilation: tuple[int, int], out_hw: tuple[int, int],
                addends: Sequence[FloatArray] = ()) -> F32Array:
    """:func:`pydla.hw.conv.conv2d_shift_gemm` once its arguments are checked (BLAS sgemm present,
    tap-major weights)."""
    assert SGEMM is not None
    c = x.shape[0]
    k, _, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    ho, wo = out_hw
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    # One spare line: the run of the last tap reaches past line hq - 1 by up to Wq - 1 elements.
    planes = phase_planes(x, pads[0], pads[1], stride, (kh, kw), dilation, hq + 1, wq)
    plane = planes.shape[2]
    flat = planes.reshape(-1)
    taps = np.ascontiguousarray(w.transpose(2, 3, 0, 1), dtype=np.float32)  # no copy when float32
    n = ho * wq
    acc = np.empty((k, n), dtype=np.float32)
    result: F32Array = acc.reshape(k, ho, wq)[:, :, :wo]
    if addends:
        acc.reshape(k, ho, wq)[:, :, wo:] = 0.0
        if len(addends) == 2:
            np.add(addends[0], addends[1], out=result, dtype=np.float32)
        else:
            np.copyto(result, addends[0], casting="same_kind")
    for i in range(kh):
        qi, a = divmod(i * dh, sh)
        for j in range(kw):
            qj, b = divmod(j * dw, sw)
            start = (a * sw + b) * c * plane + qi * wq + qj
            SGEMM.gemm(taps[i, j], flat, start, plane, n, acc, accumulate=bool(addends) or i > 0 or j > 0)
    return result


def gemm_conv(x: FloatArray, w32: F32Array, groups: int, stride: tuple[int, int],
               pads: tuple[int, int, int, int], dilation: tuple[int, int], res: F32Array,
               adds: Sequence[FloatArray] = ()) -> None:
    """Convolution as matmul into ``res``, the float32 (K, Ho, Wo) result (any strides), plus
    ``adds`` (broadcast to its shape)."""
    c, h, wd = x.shape
    k, cg, kh, kw = w32.shape
    ho, wo = res.shape[1:]
    sh, sw = stride
    pt, pl = pads[0], pads[1]
    dw = dilation[1]
    depth = cg * kh * kw
    wg = w32.reshape(groups, k // groups, depth)
    if kh * kw > 1 and wo >= WIDE_MIN_WIDTH and (kw - 1) * dw // sw <= wo * WIDE_MAX_EXTRA:
        _wide_im2col_conv(x, wg, stride, (pt, pl), dilation, (kh, kw), res, adds)
        return

    # BLAS writes the (K, Ho*Wo) product straight into res when res has packed lines; else into a
    # temporary that is copied into res once at the end.
    flat = flat_hw(res)
    tmp = None
    if flat is None:
        tmp = np.empty((k, ho, wo), dtype=np.float32)
        flat = matrix(tmp, k, ho * wo, tmp.strides[0])
    target = stack(flat, groups)
    if kh == kw == 1 and sh == sw == 1 and not any(pads):
        # 1x1: x itself is the (C, H*W) matrix, unless its lines are padded or it is float16.
        xm = flat_hw(x) if x.dtype == F32 else None
        if xm is None:
            xm = np.ascontiguousarray(x, dtype=np.float32).reshape(c, h * wd)
        matmul(wg, stack(xm, groups), target)
    else:
        _im2col_conv(x, wg, stride, (pt, pl), dilation, (kh, kw), target, (ho, wo))
    if tmp is not None:
        store(res, tmp, adds)
    else:
        for a in adds:  # BLAS wrote res itself: one pass per addend
            np.add(res, a, out=res)


def _chunk_lines(depth: int, line: int, lines: int) -> int:
    """Output lines per im2col chunk: as many as fit the budget (bigger matmuls thread better)."""
    return max(1, min(lines, IM2COL_BYTES // (depth * line * ITEM)))


def _im2col_conv(x: FloatArray, wg: F32Array, stride: tuple[int, int], pads: tuple[int, int],
                 dilation: tuple[int, int], kernel: tuple[int, int], target: F32Array,
                 out_hw: tuple[int, int]) -> None:
    """im2col as a strided view of the (padded) input, copied chunk by chunk; matmul into target."""
    c = x.shape[0]
    groups, _, depth = wg.shape
    kh, kw = kernel
    sh, sw = stride
    pt, pl = pads
    dh, dw = dilation
    ho, wo = out_hw
    hn = (ho - 1) * sh + (kh - 1) * dh + 1
    wn = (wo - 1) * sw + (kw - 1) * dw + 1
    # Pad only when a window reaches outside x; the padded copy holds just the extent windows reach.
    src: FloatArray = (padded(x, pt, pl, hn, wn, 0.0, "im2col-pad")
                       if pt or pl or hn > x.shape[1] or wn > x.shape[2] else x)
    s0, s1, s2 = src.strides
    windows = as_strided(src, (c, kh, kw, ho, wo), (s0, dh * s1, dw * s2, sh * s1, sw * s2),
                         writeable=False)
    rows = _chunk_lines(depth * groups, wo, ho)
    buf = scratch("cols", (c * kh * kw * rows * wo,))
    for r0 in range(0, ho, rows):
        r = min(rows, ho - r0)
        cols = buf[:c * kh * kw * r * wo].reshape(c, kh, kw, r, wo)
        np.copyto(cols, windows[:, :, :, r0:r0 + r], casting="same_kind")  # float16 converts here
        matmul(wg, cols.reshape(groups, depth, r * wo), target[:, :, r0 * wo:(r0 + r) * wo])


def phase_planes(x: FloatArray, top: int, left: int, stride: tuple[int, int],
                  kernel: tuple[int, int], dilation: tuple[int, int], hq: int, wq: int) -> F32Array:
    """The zero-padded input split into stride phases, each plane flattened: (sh*sw, C, hq*wq).

    Plane a*sw + b holds padded pixel (y*sh + a, x*sw + b) at (y, x), so a strided window becomes a
    stride-1 window of one plane. With stride 1 this is just the padded input. Only the planes some
    kernel tap reads are filled. The result is this thread's workspace slot "planes" (see
    :func:`pydla.hw.arrays.scratch`): valid until the next call.
    """
    sh, sw = stride
    if sh == sw == 1:
        return padded(x, top, left, hq, wq, 0.0, "planes").reshape(1, x.shape[0], hq * wq)
    c, h, wd = x.shape
    planes = scratch("planes", (sh, sw, c, hq, wq))
    row_phases = sorted({i * dilation[0] % sh for i in range(kernel[0])})
    col_phases = sorted({j * dilation[1] % sw for j in range(kernel[1])})
    for a in row_phases:
        # Plane lines y whose padded line y*sh + a is a line of x: y0 <= y < y1.
        y0 = min(hq, max(0, -((a - top) // sh)))
        y1 = max(y0, min(hq, -((a - top - h) // sh)))
        for b in col_phases:
            x0 = min(wq, max(0, -((b - left) // sw)))
            x1 = max(x0, min(wq, -((b - left - wd) // sw)))
            p = planes[a, b]
            p[:, :y0] = 0.0
            p[:, y1:] = 0.0
            p[:, y0:y1, :x0] = 0.0
            p[:, y0:y1, x1:] = 0.0
            p[:, y0:y1, x0:x1] = x[:, y0 * sh + a - top:(y1 - 1) * sh + a - top + 1:sh,
                                   x0 * sw + b - left:(x1 - 1) * sw + b - left + 1:sw]
    return planes.reshape(sh * sw, c, hq * wq)


def _wide_im2col_conv(x: FloatArray, wg: F32Array, stride: tuple[int, int], pads: tuple[int, int],
                      dilation: tuple[int, int], kernel: tuple[int, int], res: F32Array,
                      adds: Sequence[FloatArray] = ()) -> None:
    """im2col over whole lines of the padded input's stride phases.

    In a phase plane flattened per channel, the window of kernel tap (i, j) for output lines
    r0..r0+r is one contiguous run of r * Wq elements (Wq = Wo + (kw-1)*dw // sw, the plane's width),
    so each row of the column matrix is a single memcpy rather than r strided runs of Wo. The matmul
    then yields Wq columns per line, of which the first Wo are the output and the rest are cropped.
    """
    c = x.shape[0]
    groups, kg, depth = wg.shape
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    k, ho, wo = res.shape
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    # One spare line: the run for the last tap of the last line reaches past line hq - 1.
    planes = phase_planes(x, pads[0], pads[1], stride, kernel, dilation, hq + 1, wq)
    rows = _chunk_lines(depth * groups + k, wq, ho)
    cols_buf = scratch("cols", (c * kh * kw * rows * wq,))
    prod_buf = scratch("prod", (k * rows * wq,))
    for r0 in range(0, ho, rows):
        r = min(rows, ho - r0)
        n = r * wq
        cols = cols_buf[:c * kh * kw * n].reshape(c, kh, kw, n)
        for i in range(kh):
            qi, a = divmod(i * dh, sh)
            for j in range(kw):
                qj, b = divmod(j * dw, sw)
                start = (r0 + qi) * wq + qj
                np.copyto(cols[:, i, j], planes[a * sw + b, :, start:start + n])
        prod = prod_buf[:k * n].reshape(groups, kg, n)
        matmul(wg, cols.reshape(groups, depth, n), prod)
        store(res[:, r0:r0 + r], prod.reshape(k, r, wq)[:, :, :wo], [a[:, r0:r0 + r] for a in adds])
