"""The CONV block's shift-GEMM planned once: a convolution with tap-major (RSKC) weights decoded by
the device, its checks, buffers and BLAS calls made when its registers are decoded, and run on
every run (:func:`pydla.hw.conv.conv2d_shift_gemm` is the same arithmetic made on each call).

Usage::

    run = plan_shift_gemm(x, w, (1, 1), (1, 1, 1, 1), (1, 1), addends)
    y = run()                    # (K, Ho, Wo) float32 view, valid until the next run()
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pydla.errors import DlaError
from pydla.hw.arrays import F32, ITEM, F32Array, FloatArray, bad
from pydla.hw.blas import SGEMM, PreparedProduct
from pydla.hw.conv_gemm import check_addends

# Planned convolutions own their padded input and accumulator; the device keeps up to thousands of
# decoded operations, so the buffers of all live plans together are bounded: past this, a new plan
# is not made and its operation runs the per-call kernel (which uses the thread's reused workspace).
HELD_LIMIT_BYTES = 512 << 20
_held = [0]
_held_lock = threading.Lock()


def _release(nbytes: int) -> None:
    with _held_lock:
        _held[0] -= nbytes


def held_bytes() -> int:
    """The bytes the live plans' buffers hold now."""
    return _held[0]


def plan_shift_gemm(x: FloatArray, w: FloatArray, stride: tuple[int, int], pads: tuple[int, int, int, int],
                    dilation: tuple[int, int], out_hw: tuple[int, int],
                    addends: Sequence[FloatArray] = ()) -> Callable[[], F32Array] | None:
    """The shift-GEMM of float32 tap-major weights ``w`` (K, C, kh, kw) over x (C, H, W), planned:
    None where it cannot be (no BLAS, float16 weights), and the caller runs
    :func:`pydla.hw.conv.conv2d_shift_gemm` instead. The arguments are those the device checked
    (:func:`pydla.hw.blocks.decode_conv`); ``addends`` (broadcastable to (K, Ho, Wo), at most two)
    start the accumulation.

    What each run no longer does: the argument checks, a fresh accumulator (fresh pages: a fault per 4 KiB),
    the zero border of the padded input (the plan's own buffer keeps it: only the interior is
    copied), and per tap BLAS's argument conversion and bounds checks (each tap's product is
    prepared: its pointers and leading dimensions made once, 0.7 us a call). The products and their
    order are those of conv2d_shift_gemm: the same bits.

    Measured (``bench/bench_conv.py --shift``, one BLAS thread, 2 cores shared at load average 10;
    medians of 7 blocks of 5, per call -> planned, with a bias): ResNet-18's stride-2 64x56x56 ->
    128 1.70 -> 1.43 ms, 128x28x28 -> 256 1.74 -> 1.53 ms, its stride-1 layers 2-3% (6.8 -> 6.6 ms:
    their products dominate); SqueezeNet 1.1's 16x31x31 -> 64 497 -> 392 us, 32x15x15 -> 128 312 ->
    232 us; all 8 shapes 31.6 -> 30.0 ms.

    The result is a view of the plan's accumulator with padded lines: SDP reads it before the
    operation ends, and the next run overwrites it.
    """
    k, _, kh, kw = w.shape
    ho, wo = out_hw
    try:
        adds = check_addends(addends, (k, ho, wo), "shift-GEMM")
    except DlaError:
        return None  # conv2d_shift_gemm reports it on each run
    if SGEMM is None or w.dtype != F32:
        return None
    c = x.shape[0]
    sh, sw = stride
    dh, dw = dilation
    pt, pl = pads[0], pads[1]
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    lines = hq + 1  # one spare line: the run of the last tap reaches past line hq - 1
    plane = lines * wq
    phases = sh * sw
    n = ho * wq
    nbytes = (phases * c * plane + k * n) * ITEM
    with _held_lock:
        if _held[0] + nbytes > HELD_LIMIT_BYTES:
            return None
        _held[0] += nbytes
    try:
        run = _plan(x, w, stride, dilation, (pt, pl), (ho, wo), (hq, wq), adds)
    except BaseException:
        _release(nbytes)
        raise
    if run is None:
        _release(nbytes)
        return None
    weakref.finalize(run, _release, nbytes)
    return run


def _plan(x: FloatArray, w: FloatArray, stride: tuple[int, int], dilation: tuple[int, int],
          pads: tuple[int, int], out_hw: tuple[int, int], plane_hw: tuple[int, int],
          adds: Sequence[FloatArray]) -> Callable[[], F32Array] | None:
    assert SGEMM is not None
    c = x.shape[0]
    k, _, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pl = pads
    ho, wo = out_hw
    hq, wq = plane_hw
    lines = hq + 1
    plane = lines * wq
    phases = sh * sw
    planes = np.zeros((sh, sw, c, lines, wq), np.float32)  # the borders stay zero: only copies inside
    flat = planes.reshape(-1)
    copies = _phase_copies(x, planes, (pt, pl), stride, (kh, kw), dilation)
    n = ho * wq
    acc = np.zeros((k, n), np.float32)
    result: F32Array = acc.reshape(k, ho, wq)[:, :, :wo]
    extra = acc.reshape(k, ho, wq)[:, :, wo:]
    taps = w.transpose(2, 3, 0, 1)  # (kh, kw, K, C): each tap's matrix contiguous (RSKC)
    products: list[PreparedProduct] = []
    for i in range(kh):
        qi, a = divmod(i * dh, sh)
        for j in range(kw):
            qj, b = divmod(j * dw, sw)
            start = (a * sw + b) * c * plane + qi * wq + qj
            if start + (c - 1) * plane + n > flat.size:
                raise bad(f"shift-GEMM: tap ({i}, {j}) reads past its {phases} planes")
            operand = as_strided(flat[start:], (c, n), (plane * ITEM, ITEM), writeable=False)
            product = SGEMM.prepare(taps[i, j], operand, acc, accumulate=bool(adds) or i > 0 or j > 0)
            if product is None:
                return None
            products.append(product)

    def run() -> F32Array:
        for dst, src in copies:
            np.copyto(dst, src, casting="same_kind")
        if adds:
            extra[...] = 0.0  # the cropped columns: accumulated into, never read
            if len(adds) == 2:
                np.add(adds[0], adds[1], out=result, dtype=np.float32)
            else:
                np.copyto(result, adds[0], casting="same_kind")
        for product in products:
            product()
        return result
    return run


def _phase_copies(x: FloatArray, planes: F32Array, pads: tuple[int, int], stride: tuple[int, int],
                  kernel: tuple[int, int], dilation: tuple[int, int]) -> list[tuple[F32Array, FloatArray]]:
    """(destination, source) views: x's pixels into the stride phases of its zero-padded copy, as
    :func:`pydla.hw.conv_gemm.phase_planes` places them (plane (a, b) holds padded pixel (y*sh + a,
    x*sw + b) at (y, x)), for the phases some tap reads."""
    _, h, wd = x.shape
    sh, sw = stride
    top, left = pads
    hq, wq = planes.shape[3:]
    copies = []
    for a in sorted({i * dilation[0] % sh for i in range(kernel[0])}):
        y0 = min(hq, max(0, -((a - top) // sh)))
        y1 = max(y0, min(hq, -((a - top - h) // sh)))
        for b in sorted({j * dilation[1] % sw for j in range(kernel[1])}):
            x0 = min(wq, max(0, -((b - left) // sw)))
            x1 = max(x0, min(wq, -((b - left - wd) // sw)))
            if y1 > y0 and x1 > x0:
                copies.append((planes[a, b, :, y0:y1, x0:x1],
                               x[:, y0 * sh + a - top:(y1 - 1) * sh + a - top + 1:sh,
                                 x0 * sw + b - left:(x1 - 1) * sw + b - left + 1:sw]))
    return copies
