"""The CONV block's numerical kernels: convolution and transposed convolution (ONNX Conv and
ConvTranspose without bias) on planar (C, H, W) feature maps; see :mod:`pydla.hw.compute` for the
conventions (layout, precision, ``out``). This module checks the arguments and chooses the path; the
kernels are by concern: the matrix-product paths (:mod:`pydla.hw.conv_gemm`) and the depthwise
convolution (:mod:`pydla.hw.conv_depthwise`).

Usage::

    y = conv2d(x, w, stride=(2, 2), pads=(1, 1, 1, 1))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

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
    pair,
    result_dtype,
    stack,
)
from pydla.hw.blas import SGEMM, PreparedProduct
from pydla.hw.conv_depthwise import depthwise, depthwise_applies
from pydla.hw.conv_gemm import check_addends, gemm_conv, matmul, shift_gemm
from pydla.target.config import SHIFT_MIN_CHANNELS


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
      :func:`pydla.hw.conv_depthwise.depthwise`), or on maps of at most 64 output pixels per
      channel, channels-last tap by tap (:mod:`pydla.hw.depthwise_last`);
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
    adds = check_addends(addends, shape, "conv2d")
    dtype = F32 if float32_result and out is None else result_dtype(x, out)
    if shift_gemm_applies(w, groups):
        def shifted() -> FloatArray:
            return finish(shift_gemm(x, w, (sh, sw), (pt, pl), (dh, dw), (ho, wo), addends), out, dtype)
        return shifted
    # f32_target's rule, decided here once: ``out`` is the target when it can accumulate.
    target = out if out is not None and accumulates_into(out, x) else None
    if (target is not None and groups == 1 and kh == kw == 1 and sh == sw == 1 and not (pt or pl or pb or pr)
            and x.dtype == F32 and w.dtype == F32 and w.strides[1] == ITEM):
        # 1x1: one product of the weights and x as they lie in memory, into the target's lines.
        xm, om, wm = flat_hw(x), flat_hw(target), w[:, :, 0, 0]
        if xm is not None and om is not None:
            result = target
            product = SGEMM.prepare(wm, xm, om, accumulate=bool(adds)) if SGEMM is not None else None
            if product is not None:
                return _pointwise(product, result, adds)

            def pointwise() -> FloatArray:
                matmul(wm, xm, om)
                for a in adds:
                    np.add(result, a, out=result)
                return result
            return pointwise
    is_depthwise = depthwise_applies(c, w, groups)

    def general() -> FloatArray:
        w32 = w.astype(np.float32, copy=False)  # per call: a float16 w may change between calls
        res = target if target is not None else np.empty(shape, dtype=np.float32)
        if is_depthwise:
            depthwise(x, w32, (sh, sw), (pt, pl), (dh, dw), res, adds)
        else:
            gemm_conv(x, w32, groups, (sh, sw), (pt, pl, pb, pr), (dh, dw), res, adds)
        return finish(res, out, dtype)
    return general


def _pointwise(product: PreparedProduct, result: F32Array,
               adds: Sequence[FloatArray]) -> Callable[[], FloatArray]:
    """A 1x1 convolution as one BLAS product prepared once (pointers, shapes and leading dimensions
    checked when the plan is made, passed as ready ctypes values), accumulated onto the addends:
    the result starts as their sum (one write pass) and BLAS adds the product to it, instead of a
    pass per addend after the product. Sums are float32 in another order than product-then-bias:
    within float32 rounding of the sum (tests/hw/test_plan_conv.py).

    Measured (2 cores shared, load average 7.6, one BLAS thread; ``bench/bench_kernels.py --kernel
    pointwise``, medians of 7 blocks of 10, numpy's product then the bias pass -> this): MobileNet-v2
    at 224x224 16->96 112x112 597 -> 539 us, 24->144 56x56 322 -> 258 us, 32->192 28x28 130 -> 110
    us, 144->24 56x56 270 -> 262 us; at 32x32 16->96 16x16 13.7 -> 11.3 us; the encoder's 256->256
    over 128 positions 178 -> 167 us; all 16 shapes 3.28 -> 3.06 ms (0.93x). The expanding layers
    gain most (their bias pass is over the larger output); a call costs 0.7 us of ctypes.
    """
    if len(adds) == 2:
        a0, a1 = adds

        def two() -> FloatArray:
            np.add(a0, a1, out=result, dtype=np.float32)
            product()
            return result
        return two
    if adds:
        a0 = adds[0]

        def one() -> FloatArray:
            np.copyto(result, a0, casting="same_kind")
            product()
            return result
        return one

    def none() -> FloatArray:
        product()
        return result
    return none


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
    check_addends(addends, (w.shape[0], ho, wo), "conv2d_shift_gemm")
    return shift_gemm(x, w, (sh, sw), (pt, pl), (dh, dw), (ho, wo), addends)


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
