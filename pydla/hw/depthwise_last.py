"""Depthwise convolution on small maps, channels-last: the CONV block's kernel for the late layers
of MobileNets (squeeze-excite networks run 4x4 to 8x8 maps of hundreds of channels); see
:func:`pydla.hw.conv.conv2d` for when it is taken.

Usage::

    depthwise_channels_last(x, w, (1, 1), (2, 2), (1, 1), out, [bias])   # 5x5, pads 2
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.hw.arrays import F32Array, FloatArray, scratch


def depthwise_channels_last(x: FloatArray, w32: F32Array, stride: tuple[int, int],
                            pads: tuple[int, int], dilation: tuple[int, int], res: F32Array,
                            biases: Sequence[FloatArray] = ()) -> None:
    """res = the depthwise convolution of x (C, H, W) by w32 (C, 1, kh, kw) plus the per-channel
    ``biases`` ((C,) each), on small maps (one output channel per input channel): the zero-padded
    input copied once channels-last, (H, W, C), then per kernel tap one multiply by the taps' C weights
    and one add into a (Ho, Wo, C) accumulator that starts from the biases, and the accumulator
    copied back planar (any strides).

    On small maps the column-matrix kernel's copies are one short run (a line's worth) per channel
    and tap, and its product one BLAS call per channel; here every pass runs over C contiguous
    values per pixel. Sums are float32, tap after tap (the column-matrix kernel leaves the order to
    BLAS): the two agree within float32 rounding of the sum (tests/hw/test_depthwise.py's bound).

    Measured (this machine, 2 cores shared with other engineers' test runs, load average 8-9;
    minimum of 30 calls, bias added, OPENBLAS_NUM_THREADS=1; the column-matrix kernel -> this):
    MobileNet-v3-small at 128x128 240x8x8 5x5 255 -> 201 us, 576x4x4 5x5 336 -> 151 us, 288x8x8 5x5
    stride 2 202 -> 111 us; MobileNet-v2 at 224x224 960x7x7 3x3 261 -> 183 us. Past 64 output pixels
    the column-matrix kernel is faster (14x14: 0.74x here, 16x16 0.84x, 56x56 0.45x).
    """
    c, h, wd = x.shape
    kh, kw = w32.shape[2:]
    _, ho, wo = res.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pl = pads
    hn, wn = (ho - 1) * sh + (kh - 1) * dh + 1, (wo - 1) * sw + (kw - 1) * dw + 1
    src = scratch("dw-last-in", (hn, wn, c))
    hh, ww = max(0, min(h, hn - pt)), max(0, min(wd, wn - pl))
    if hh < hn or ww < wn:
        src.fill(0.0)  # small: one pass, rather than four border slices
    np.copyto(src[pt:pt + hh, pl:pl + ww], x[:, :hh, :ww].transpose(1, 2, 0), casting="same_kind")
    taps = scratch("dw-last-taps", (kh, kw, c))
    np.copyto(taps, w32[:, 0].transpose(1, 2, 0))
    acc = scratch("dw-last-acc", (ho, wo, c))
    term = scratch("dw-last-term", (ho, wo, c))
    started = bool(biases)
    if biases:
        acc[...] = np.sum(biases, axis=0, dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            window = src[i * dh:i * dh + (ho - 1) * sh + 1:sh, j * dw:j * dw + (wo - 1) * sw + 1:sw]
            if started:
                np.multiply(window, taps[i, j], out=term)
                np.add(acc, term, out=acc)
            else:
                np.multiply(window, taps[i, j], out=acc)
                started = True
    np.copyto(res, acc.transpose(2, 0, 1))
