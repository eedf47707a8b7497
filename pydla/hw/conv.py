"""The CONV block's numerical kernels: convolution and transposed convolution (ONNX Conv and
ConvTranspose without bias) on planar (C, H, W) feature maps; see :mod:`pydla.hw.compute` for the
conventions (layout, precision, ``out``).

Usage::

    y = conv2d(x, w, stride=(2, 2), pads=(1, 1, 1, 1))
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pydla.hw.arrays import (
    F32,
    ITEM,
    F32Array,
    FloatArray,
    accumulates_into,
    bad,
    check_out,
    check_pads,
    feature,
    finish,
    flat_hw,
    matrix,
    padded,
    pair,
    result_dtype,
    scratch,
    stack,
)
from pydla.hw.blas import SGEMM
from pydla.hw.depthwise_last import depthwise_channels_last
from pydla.target.config import SHIFT_MIN_CHANNELS

# Upper bound on one im2col chunk (the column matrix is built and multiplied a chunk of output lines
# at a time): it bounds memory for big inputs, and is big enough that each matmul keeps both cores
# busy (smaller chunks measured slower; past ~4 MiB it makes no difference).
_IM2COL_BYTES = 8 << 20
# Wide im2col (see _wide_im2col_conv) pays off once output lines are long: copying fewer, longer runs
# saves more than the cropped extra matmul columns and the crop copy cost.
_WIDE_MIN_WIDTH = 32
_WIDE_MAX_EXTRA = 0.125  # at most this fraction of extra (cropped) matmul columns
# Depthwise convolution works on blocks of channels whose column matrix (and stride phases) take
# about this much (measured on MobileNet-v2's shapes: 2 to 8 MiB alike; 0.5 and 1 MiB slower).
_DEPTHWISE_BLOCK_BYTES = 4 << 20
# Depthwise convolutions with at most this many output pixels a channel run channels-last (see
# pydla.hw.depthwise_last; measured crossover between 64 and 196).
_DEPTHWISE_CHANNELS_LAST_PIXELS = 64
# Grouped products go to BLAS one group at a time up to this many groups; past it, numpy's batched
# matmul (one call) costs less than the calls.
_SGEMM_MAX_STACK = 64
# Products of fewer multiply-adds (a few microseconds of arithmetic) go to numpy's matmul.
_SGEMM_MIN_MACS = 1 << 18


# -- CONV -----------------------------------------------------------------------------------------------


def conv_output_size(in_size: int, kernel: int, stride: int, pad_before: int, pad_after: int,
                     dilation: int) -> int:
    """Output length along one axis of a convolution or pooling window, floor semantics (ONNX Conv)."""
    if in_size < 1 or kernel < 1 or stride < 1 or dilation < 1:
        raise bad(f"conv_output_size: in_size {in_size}, kernel {kernel}, stride {stride} and "
                   f"dilation {dilation} must all be >= 1")
    if pad_before < 0 or pad_after < 0:
        raise bad(f"conv_output_size: pads ({pad_before}, {pad_after}) must be >= 0")
    span = dilation * (kernel - 1) + 1
    padded = in_size + pad_before + pad_after
    if span > padded:
        raise bad(f"conv_output_size: kernel span {span} exceeds the padded input size {padded}")
    return (padded - span) // stride + 1


def conv2d(x: FloatArray, w: FloatArray, *, stride: tuple[int, int] = (1, 1),
           pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
           groups: int = 1, out: FloatArray | None = None,
           addends: Sequence[FloatArray] = ()) -> FloatArray:
    """ONNX Conv without bias: x (C, H, W), w (K, C // groups, kh, kw) -> (K, Ho, Wo), plus the
    ``addends`` (at most two arrays broadcastable to (K, Ho, Wo): a bias, a residual; they must not
    overlap ``out``), added where the result is written anyway (no pass of their own when the path
    copies its result into place).

    ``pads`` is (top, left, bottom, right). Paths:

    - 1x1, stride 1, unpadded: one matmul on x as it lies in memory;
    - depthwise (one input channel per group): a batched matmul over blocks of channels (see
      :func:`_depthwise`), or on maps of at most 64 output pixels per channel, channels-last tap by
      tap (:mod:`pydla.hw.depthwise_last`);
    - wide maps: "wide" im2col, each row of the column matrix one contiguous run of a stride phase
      of the zero-padded input (Ho whole lines), the extra columns cropped after the matmul;
    - otherwise: im2col as a strided view of the (padded) input copied once;
    - but tap-major weights (see :func:`conv2d_shift_gemm`) go the shift-GEMM way.

    The column matrix is built in chunks of output lines (bounded memory) and each chunk is one
    matmul, batched over groups, written straight into ``out`` when ``out`` is float32 with packed
    lines.
    """
    return plan_conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups, out=out,
                       addends=addends)()


def plan_conv2d(x: FloatArray, w: FloatArray, *, stride: tuple[int, int] = (1, 1),
                pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
                groups: int = 1, out: FloatArray | None = None, addends: Sequence[FloatArray] = (),
                float32_result: bool = False) -> Callable[[], FloatArray]:
    """:func:`conv2d` decided once: the arguments checked, the path chosen, the views made; the
    function returned computes it, on whatever data x, w and the addends hold when it is called
    (they, and ``out``, must stay where they are: the device plans a convolution when it decodes
    its registers and runs the plan on every run). Without ``out``, each call returns a new array:
    float32 with ``float32_result``, else of x's dtype as conv2d's.

    Usage::

        run = plan_conv2d(x, w, pads=(1, 1, 1, 1), out=y)
        run()                                     # y = conv(x, w); again after x changed
    """
    c, h, wd = feature(x, "x")
    if not isinstance(w, np.ndarray) or w.ndim != 4:
        raise bad(f"w: expected a (K, C/groups, kh, kw) array, got {getattr(w, 'shape', type(w))}")
    k, cg, kh, kw = (int(v) for v in w.shape)
    if groups < 1 or c % groups or k % groups:
        raise bad(f"groups: {groups} does not divide input channels {c} and output channels {k}")
    if cg != c // groups:
        raise bad(f"w: {cg} input channels per group, expected {c // groups} ({c} / {groups} groups)")
    sh, sw = pair(stride, "stride", 1)
    dh, dw = pair(dilation, "dilation", 1)
    pt, pl, pb, pr = check_pads(pads)
    ho = conv_output_size(h, kh, sh, pt, pb, dh)
    wo = conv_output_size(wd, kw, sw, pl, pr, dw)
    shape = (k, ho, wo)
    check_out(out, shape)
    adds = _check_addends(addends, shape, "conv2d")
    dtype = F32 if float32_result and out is None else result_dtype(x, out)
    if shift_gemm_applies(w, groups):
        def shift_gemm() -> FloatArray:
            return finish(_shift_gemm(x, w, (sh, sw), (pt, pl), (dh, dw), (ho, wo), addends), out, dtype)
        return shift_gemm
    # f32_target's rule, decided here once: ``out`` is the target when it can accumulate.
    target = out if out is not None and accumulates_into(out, x) else None
    if (target is not None and groups == 1 and kh == kw == 1 and sh == sw == 1 and not (pt or pl or pb or pr)
            and x.dtype == F32 and w.dtype == F32 and w.strides[1] == ITEM):
        # 1x1: one product of the weights and x as they lie in memory, into the target's lines.
        xm, om, wm = flat_hw(x), flat_hw(target), w[:, :, 0, 0]
        if xm is not None and om is not None:
            result = target

            def pointwise() -> FloatArray:
                _matmul(wm, xm, om)
                for a in adds:
                    np.add(result, a, out=result)
                return result
            return pointwise
    depthwise = depthwise_applies(c, w, groups)

    def general() -> FloatArray:
        w32 = w.astype(np.float32, copy=False)  # per call: a float16 w may change between calls
        res = target if target is not None else np.empty(shape, dtype=np.float32)
        if depthwise:
            _depthwise(x, w32, (sh, sw), (pt, pl), (dh, dw), res, adds)
        else:
            _gemm_conv(x, w32, groups, (sh, sw), (pt, pl, pb, pr), (dh, dw), res, adds)
        return finish(res, out, dtype)
    return general


def _matmul(a: F32Array, b: FloatArray, out: F32Array) -> None:
    """out = a @ b (2-D, or 3-D stacks of equal depth): through :data:`SGEMM` when it is pydla's
    private instance (kernels faster than numpy's; see :mod:`pydla.hw.blas`), the product is big
    enough for that to matter, and it takes the operands as they lie; else numpy (whose call costs
    less: 14 against 19 us for a whole 8-channel 1x1 convolution of a 4x4 map)."""
    if SGEMM is not None and SGEMM.private and a.shape[-2] * a.shape[-1] * out.shape[-1] >= _SGEMM_MIN_MACS:
        if out.ndim == 2:
            if SGEMM.product(a, b, out):
                return
        elif out.shape[0] <= _SGEMM_MAX_STACK and all(
                SGEMM.product(a[g], b[g], out[g]) for g in range(out.shape[0])):
            return  # a refusal after some products is harmless: numpy then writes every one
    np.matmul(a, b, out=out)


def _check_addends(addends: Sequence[FloatArray], shape: tuple[int, int, int],
                   what: str) -> list[FloatArray]:
    """The addends, each broadcast to ``shape`` (a view), after checking them."""
    try:
        if len(addends) > 2:
            raise ValueError
        return [np.broadcast_to(a, shape) for a in addends]
    except ValueError:
        raise bad(f"{what}: addends {[np.shape(a) for a in addends]} for a {shape} result") from None


def _store(dst: F32Array, src: FloatArray, adds: Sequence[FloatArray]) -> None:
    """dst = src + the addends (each already sliced to dst's shape)."""
    if not adds:
        np.copyto(dst, src, casting="same_kind")
        return
    np.add(src, adds[0], out=dst, dtype=np.float32)
    for a in adds[1:]:
        np.add(dst, a, out=dst, dtype=np.float32)


def shift_gemm_applies(w: FloatArray, groups: int) -> bool:
    """Whether a convolution with these weights takes the shift-GEMM path: BLAS sgemm is available,
    one group, a kernel larger than 1x1, enough channels, and tap-major weights (each tap's K x C
    matrix contiguous: the (kh, kw, K, C) order in memory, register format RSKC)."""
    if SGEMM is None or groups != 1 or w.ndim != 4:
        return False
    _, cg, kh, kw = w.shape
    return kh * kw > 1 and cg >= SHIFT_MIN_CHANNELS and bool(w.transpose(2, 3, 0, 1).flags.c_contiguous)


def conv2d_shift_gemm(x: FloatArray, w: FloatArray, *, stride: tuple[int, int] = (1, 1),
                      pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
                      addends: Sequence[FloatArray] = ()) -> F32Array:
    """Convolution of x (C, H, W) with tap-major weights w (K, C, kh, kw) as a sum of kh*kw
    matrix products, each accumulated in place by BLAS: out += W_tap @ shifted input.

    In a stride phase of the zero-padded input, flattened per channel, the input of tap (i, j) for
    all output lines is one run of Ho * Wq elements at a fixed offset (as in the wide im2col), so the
    product's right operand is the padded input itself at that offset, with the plane's length as
    leading dimension: no column matrix is built. The result is a float32 (K, Ho, Wo) view of a
    (K, Ho, Wq) array (the Wq - Wo extra columns of each line are not part of it). ``addends``
    (arrays broadcastable to (K, Ho, Wo), at most two) start the accumulation: the result is their
    sum plus the convolution.
    """
    c, h, wd = feature(x, "x")
    if not shift_gemm_applies(w, 1) or w.shape[1] != c:
        raise bad(f"conv2d_shift_gemm: w {w.shape} with strides {w.strides} is not tap-major for {c} "
                  "channels (or BLAS sgemm is not available)")
    kh, kw = (int(v) for v in w.shape[2:])
    sh, sw = pair(stride, "stride", 1)
    dh, dw = pair(dilation, "dilation", 1)
    pt, pl, pb, pr = check_pads(pads)
    ho = conv_output_size(h, kh, sh, pt, pb, dh)
    wo = conv_output_size(wd, kw, sw, pl, pr, dw)
    _check_addends(addends, (w.shape[0], ho, wo), "conv2d_shift_gemm")
    return _shift_gemm(x, w, (sh, sw), (pt, pl), (dh, dw), (ho, wo), addends)


def _shift_gemm(x: FloatArray, w: FloatArray, stride: tuple[int, int], pads: tuple[int, int],
                dilation: tuple[int, int], out_hw: tuple[int, int],
                addends: Sequence[FloatArray] = ()) -> F32Array:
    assert SGEMM is not None
    c = x.shape[0]
    k, _, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    ho, wo = out_hw
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    # One spare line: the run of the last tap reaches past line hq - 1 by up to Wq - 1 elements.
    planes = _phase_planes(x, pads[0], pads[1], stride, (kh, kw), dilation, hq + 1, wq)
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


def _gemm_conv(x: FloatArray, w32: F32Array, groups: int, stride: tuple[int, int],
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
    if kh * kw > 1 and wo >= _WIDE_MIN_WIDTH and (kw - 1) * dw // sw <= wo * _WIDE_MAX_EXTRA:
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
        _matmul(wg, stack(xm, groups), target)
    else:
        _im2col_conv(x, wg, stride, (pt, pl), dilation, (kh, kw), target, (ho, wo))
    if tmp is not None:
        _store(res, tmp, adds)
    else:
        for a in adds:  # BLAS wrote res itself: one pass per addend
            np.add(res, a, out=res)


def _chunk_lines(depth: int, line: int, lines: int) -> int:
    """Output lines per im2col chunk: as many as fit the budget (bigger matmuls thread better)."""
    return max(1, min(lines, _IM2COL_BYTES // (depth * line * ITEM)))


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
        _matmul(wg, cols.reshape(groups, depth, r * wo), target[:, :, r0 * wo:(r0 + r) * wo])


def _phase_planes(x: FloatArray, top: int, left: int, stride: tuple[int, int],
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
    planes = _phase_planes(x, pads[0], pads[1], stride, kernel, dilation, hq + 1, wq)
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
        _matmul(wg, cols.reshape(groups, depth, n), prod)
        _store(res[:, r0:r0 + r], prod.reshape(k, r, wq)[:, :, :wo], [a[:, r0:r0 + r] for a in adds])


def depthwise_applies(x_channels: int, w: FloatArray, groups: int) -> bool:
    """Whether a convolution is depthwise (one input channel per group; see :func:`_depthwise`)."""
    return w.ndim == 4 and w.shape[1] == 1 and groups == x_channels


def _per_channel(a: FloatArray) -> FloatArray | None:
    """The (K,) values of an addend broadcast to (K, Ho, Wo) that is constant within each channel
    (a bias), or None."""
    return a[:, 0, 0] if a.strides[1] == a.strides[2] == 0 else None


@dataclass(frozen=True)
class _DepthwisePlan:
    """Where each kernel tap's row of the column matrix comes from (see :func:`_depthwise`).

    ``pitch`` is the line length of the flattened planes and of the product, whose rows are ``n`` =
    Ho * pitch elements, ``row`` apart (a line more when n elements are a multiple of 1 KiB: 112x112
    maps were 10% slower so, the rows that the product reads together sharing cache sets). The
    planes are x itself (``native``), or the stride phases of x copied into a scratch buffer
    (``phases``: (row phase, column phase, lines, columns), ``plane_lines`` lines each). ``copies``:
    (tap, phase, lo, hi, offset), row[lo:hi] = plane[lo + offset:hi + offset]. ``zeros``: (tap, lo,
    hi), the row is zero outside [lo, hi) (no block writes there: set once per call). ``fixes``:
    (line0, line1, x0, x1), columns x0 <= x < x1 of lines line0 <= l < line1 of the rows seen as
    ``pitch``-long lines: output columns whose input column lies left or right of the plane for the
    taps' kernel column (there a flattened copy wraps into the neighbouring line), zeroed after each
    block's copies.
    """

    pitch: int
    n: int
    row: int
    native: bool
    phases: tuple[tuple[int, int, int, int], ...]
    plane_lines: int
    copies: tuple[tuple[int, int, int, int, int], ...]
    zeros: tuple[tuple[int, int, int], ...]
    fixes: tuple[tuple[int, int, int, int], ...]


@functools.lru_cache(maxsize=128)
def _depthwise_plan(h: int, wd: int, kernel: tuple[int, int], stride: tuple[int, int],
                    pads: tuple[int, int], dilation: tuple[int, int], out_hw: tuple[int, int],
                    lines_packed: bool) -> _DepthwisePlan:
    kh, kw = kernel
    sh, sw = stride
    ho, wo = out_hw
    # Tap (i, j) of output (y, x) reads padded pixel (y*sh + i*dh, x*sw + j*dw), which is pixel
    # (y + qi, x + qj) of the stride phase plane (a, b) of x: i*dh - top = qi*sh + a, likewise j.
    rows = [divmod(i * dilation[0] - pads[0], sh) for i in range(kh)]
    cols = [divmod(j * dilation[1] - pads[1], sw) for j in range(kw)]
    lines = {a: len(range(a, h, sh)) for _, a in rows}
    width = {b: len(range(b, wd, sw)) for _, b in cols}
    pitch = max(wo, *width.values())
    native = sh == sw == 1 and pitch == wd and lines_packed
    n = ho * pitch
    row = n + pitch * ((n * ITEM) % 1024 == 0)
    plane_lines = max(lines.values())
    phase_ab = sorted({(a, b) for _, a in rows for _, b in cols})
    index = {ab: p for p, ab in enumerate(phase_ab)}
    copies = []
    zeros = []
    for i, (qi, a) in enumerate(rows):
        for j, (qj, b) in enumerate(cols):
            t = j * kh + i  # column-major tap order: a kernel column's rows are adjacent
            off = qi * pitch + qj
            lo = max(0, min(n, -off))
            hi = max(lo, min(n, lines[a] * pitch - off))
            if lo or hi < n:
                zeros.append((t, lo, hi))
            if hi > lo:
                copies.append((t, index[(a, b)], lo, hi, off))
    # Output columns to zero in the rows of kernel column j: those where x + qj is left or right of
    # the plane, two ranges.
    spans = []
    for qj, b in cols:
        left = min(wo, max(0, -qj))
        spans.append((range(left), range(max(left, width[b] - qj), wo)))
    # Seen as pitch-long lines, the rows of consecutive kernel columns are consecutive lines (the taps
    # are column-major): one view zeroes a column for a run of kernel columns. Columns one at a time
    # (a (channels, lines) view iterates along the lines, a (channels, lines, 2) one over 2 elements
    # per line), unless there are many (then each kernel column's ranges whole).
    per_column = kh * (row // pitch)
    fixes = []
    if all(len(span) <= 4 for both in spans for span in both):
        needs = [set(left) | set(right) for left, right in spans]
        for x in sorted(set().union(*needs)):
            j = 0
            while j < kw:
                j1 = j
                while j1 < kw and x in needs[j1]:
                    j1 += 1
                if j1 > j:
                    fixes.append((j * per_column, j1 * per_column, x, x + 1))
                j = j1 + 1
    else:
        fixes = [(j * per_column, (j + 1) * per_column, span.start, span.stop)
                 for j, both in enumerate(spans) for span in both if span]
    phases = () if native else tuple((a, b, lines[a], width[b]) for a, b in phase_ab)
    return _DepthwisePlan(pitch, n, row, native, phases, plane_lines, tuple(copies), tuple(zeros),
                          tuple(fixes))


def _depthwise(x: FloatArray, w32: F32Array, stride: tuple[int, int], pads: tuple[int, int],
               dilation: tuple[int, int], res: F32Array, adds: Sequence[FloatArray] = ()) -> None:
    """One input channel per group: res[k] = sum over taps (i, j) of w[k, 0, i, j] * shifted x[k // m],
    plus ``adds`` (broadcast to res's shape).

    Per block of channels, a column matrix with one row per kernel tap, then one batched matmul
    (BLAS gemv: each channel's taps times its column matrix) straight into ``res``. The rows are
    flattened copies: a plane (x itself at stride 1, else one of its stride phases) is flattened with
    the output's line length, so the window of tap (i, j) over all output lines is one contiguous run
    at a fixed offset; the out-of-bounds part of the run is zero (set once per call) and so are the
    columns where the run wraps into the neighbouring line (a few elements per line, zeroed after
    each block's copies). No padded copy of x, and no crop: the product has the output's lines.
    An addend that is one value per channel (a bias) is one more tap, over a row of ones.

    The work is memory traffic: the column matrix is written once and read once by BLAS. Measured
    over MobileNet-v2's 17 depthwise layers at 224x224 (bench/bench_conv.py --depthwise), 6-12% less
    time than the previous kernel (the zero-padded input's stride phases, an im2col of Wo + kw - 1
    columns per line, a crop); not clearly more. What did not pay, same shapes: numpy's per-tap
    multiply and add passes (1.3x the previous kernel's time: each tap a read and a write of the
    accumulator), einsum over the taps' windows (slower still on small maps: a loop per channel and
    tap), 3 column-shifted copies with matmuls over the kernel's rows and a sum (BLAS is slow at
    k = 3), a second thread over the blocks (no gain on 2 cores: the copies share the memory
    bandwidth, and the GIL the calls), column matrices of L2 size (more, shorter calls).
    """
    c, h, wd = x.shape
    k, _, kh, kw = w32.shape
    m = k // c  # channel multiplier: outputs c*m .. c*m + m - 1 read input channel c
    ho, wo = res.shape[1:]
    biases = [b for b in (_per_channel(a) for a in adds) if b is not None]
    rest = [a for a in adds if _per_channel(a) is None]
    if m == 1 and ho * wo <= _DEPTHWISE_CHANNELS_LAST_PIXELS:
        depthwise_channels_last(x, w32, stride, pads, dilation, res, biases)
        for addend in rest:
            np.add(res, addend, out=res, dtype=np.float32)
        return
    packed = (wd == 1 or x.strides[2] == x.itemsize) and (h == 1 or x.strides[1] == wd * x.itemsize)
    plan = _depthwise_plan(h, wd, (kh, kw), stride, pads, dilation, (ho, wo), packed)
    pitch, n = plan.pitch, plan.n
    count = kh * kw
    rows = count + 1 if biases else count
    taps = scratch("dw-taps", (c, m, rows))
    taps[:, :, :count].reshape(c, m, kw, kh)[...] = w32.reshape(c, m, kh, kw).transpose(0, 1, 3, 2)
    if biases:
        np.sum(biases, axis=0, out=taps[:, :, count].reshape(k), dtype=np.float32)
    flat = flat_hw(res) if pitch == wo else None
    plane_size = plan.plane_lines * pitch
    per_channel = rows * plan.row + len(plan.phases) * plane_size + (0 if flat is not None else m * n)
    block = max(1, min(c, _DEPTHWISE_BLOCK_BYTES // (per_channel * ITEM)))
    cols_buf = scratch("dw-cols", (block, rows, plan.row))[:, :, :n]
    for t, lo, hi in plan.zeros:
        if lo:
            cols_buf[:, t, :lo] = 0.0
        if hi < n:
            cols_buf[:, t, hi:] = 0.0
    if biases:
        cols_buf[:, count] = 1.0
    # The planes have a buffer of their own: copies within one array would go through a temporary
    # (numpy cannot tell that the rows of two interleaved views do not overlap). Their margins are
    # never read: copies stop at a plane's last line, and what they take from past its last column
    # is fixed, or cropped.
    planes_buf = scratch("dw-planes", (block, len(plan.phases), plan.plane_lines, pitch))
    prod_buf = None if flat is not None else scratch("dw-prod", (block, m, n))
    # Views made once (as_strided costs microseconds; a block's slice of a view, a fraction of one).
    sh, sw = stride
    if plan.native:
        x_flat = as_strided(x, (c, h * wd), (x.strides[0], x.itemsize), writeable=False)
    planes = planes_buf.reshape(block, len(plan.phases), plane_size)
    lines_view = as_strided(cols_buf, (block, count * plan.row // pitch, pitch),
                            (cols_buf.strides[0], pitch * ITEM, ITEM))
    target = stack(flat, c) if flat is not None else None  # (c, m, n): each channel's outputs
    for c0 in range(0, c, block):
        cb = min(block, c - c0)
        cols = cols_buf[:cb]
        if plan.native:
            srcs = [x_flat[c0:c0 + cb]]
        else:
            xb = x[c0:c0 + cb]
            for p, (a, b, lines, width) in enumerate(plan.phases):
                np.copyto(planes_buf[:cb, p, :lines, :width], xb[:, a::sh, b::sw], casting="same_kind")
            srcs = [planes[:cb, p] for p in range(len(plan.phases))]
        for t, p, lo, hi, off in plan.copies:
            np.copyto(cols[:, t, lo:hi], srcs[p][:, lo + off:hi + off], casting="same_kind")
        for line0, line1, x0, x1 in plan.fixes:
            lines_view[:cb, line0:line1, x0:x1] = 0.0
        lo_k, hi_k = c0 * m, (c0 + cb) * m
        if target is not None:
            np.matmul(taps[c0:c0 + cb], cols, out=target[c0:c0 + cb])
            for addend in rest:
                np.add(res[lo_k:hi_k], addend[lo_k:hi_k], out=res[lo_k:hi_k], dtype=np.float32)
        else:
            assert prod_buf is not None
            prod = prod_buf[:cb]
            np.matmul(taps[c0:c0 + cb], cols, out=prod)
            _store(res[lo_k:hi_k], prod.reshape(cb * m, ho, pitch)[:, :, :wo],
                   [addend[lo_k:hi_k] for addend in rest])


def deconv2d(x: FloatArray, w: FloatArray, *, stride: tuple[int, int] = (1, 1),
             pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
             groups: int = 1, output_padding: tuple[int, int] = (0, 0),
             out: FloatArray | None = None) -> FloatArray:
    """ONNX ConvTranspose without bias: x (C, H, W), w (C, K // groups, kh, kw) -> (K, Ho, Wo).

    Ho = stride * (H - 1) + output_padding + dilation * (kh - 1) + 1 - top - bottom. One matmul (batched
    over groups) gives every input pixel's kh*kw contributions; col2im adds them, one strided slice
    per kernel tap, into the full output, which is then cropped by the pads.
    """
    c, h, wd = feature(x, "x")
    if not isinstance(w, np.ndarray) or w.ndim != 4:
        raise bad(f"w: expected a (C, K/groups, kh, kw) array, got {getattr(w, 'shape', type(w))}")
    wc, kg, kh, kw = (int(v) for v in w.shape)
    if groups < 1 or c % groups:
        raise bad(f"groups: {groups} does not divide input channels {c}")
    if wc != c:
        raise bad(f"w: {wc} input channels, x has {c}")
    sh, sw = pair(stride, "stride", 1)
    dh, dw = pair(dilation, "dilation", 1)
    oph, opw = pair(output_padding, "output_padding", 0)
    pt, pl, pb, pr = check_pads(pads)
    k = kg * groups
    hf = sh * (h - 1) + dh * (kh - 1) + 1 + oph
    wf = sw * (wd - 1) + dw * (kw - 1) + 1 + opw
    ho, wo = hf - pt - pb, wf - pl - pr
    if ho < 1 or wo < 1:
        raise bad(f"deconv2d: pads {tuple(pads)} crop the {hf}x{wf} output to nothing")
    check_out(out, (k, ho, wo))
    dtype = result_dtype(x, out)

    cg = c // groups
    xm = flat_hw(x) if x.dtype == F32 else None
    if xm is None:
        xm = np.ascontiguousarray(x, dtype=np.float32).reshape(c, h * wd)
    # (G, Kg*kh*kw, Cg): each group's weights transposed; matmul passes the transpose to BLAS as a flag.
    wt = w.astype(np.float32, copy=False).reshape(groups, cg, kg * kh * kw).transpose(0, 2, 1)
    cols = np.matmul(wt, stack(xm, groups)).reshape(k, kh, kw, h, wd)
    full = np.zeros((k, hf, wf), dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            y, x0 = i * dh, j * dw
            full[:, y:y + sh * (h - 1) + 1:sh, x0:x0 + sw * (wd - 1) + 1:sw] += cols[:, i, j]
    return finish(full[:, pt:pt + ho, pl:pl + wo], out, dtype)
