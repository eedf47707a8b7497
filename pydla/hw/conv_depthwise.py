"""The CONV block's depthwise convolution (one input channel per group): a column matrix with one
row per kernel tap per block of channels and one batched product (:func:`depthwise`), or on small
maps channels-last, tap by tap (:mod:`pydla.hw.depthwise_last`). :mod:`pydla.hw.conv` chooses it.

Usage::

    if depthwise_applies(c, w, groups):
        depthwise(x, w32, stride, (top, left), dilation, res)       # res (K, Ho, Wo) float32
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pydla.hw.arrays import (
    ITEM,
    F32Array,
    FloatArray,
    flat_hw,
    scratch,
    stack,
)
from pydla.hw.conv_gemm import store
from pydla.hw.depthwise_last import depthwise_channels_last

# Depthwise convolution works on blocks of channels whose column matrix (and stride phases) take
# about this much (measured on MobileNet-v2's shapes: 2 to 8 MiB alike; 0.5 and 1 MiB slower).
BLOCK_BYTES = 4 << 20
# Depthwise convolutions with at most this many output pixels a channel run channels-last (see
# pydla.hw.depthwise_last; measured crossover between 64 and 196).
CHANNELS_LAST_PIXELS = 64


def depthwise_applies(x_channels: int, w: FloatArray, groups: int) -> bool:
    """Whether a convolution is depthwise (one input channel per group; see :func:`depthwise`)."""
    return w.ndim == 4 and w.shape[1] == 1 and groups == x_channels


def per_channel(a: FloatArray) -> FloatArray | None:
    """The (K,) values of an addend broadcast to (K, Ho, Wo) that is constant within each channel
    (a bias), or None."""
    return a[:, 0, 0] if a.strides[1] == a.strides[2] == 0 else None


@dataclass(frozen=True)
class _DepthwisePlan:
    """Where each kernel tap's row of the column matrix comes from (see :func:`depthwise`).

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


def depthwise(x: FloatArray, w32: F32Array, stride: tuple[int, int], pads: tuple[int, int],
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
    biases = [b for b in (per_channel(a) for a in adds) if b is not None]
    rest = [a for a in adds if per_channel(a) is None]
    if m == 1 and ho * wo <= CHANNELS_LAST_PIXELS:
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
    channel_bytes = rows * plan.row + len(plan.phases) * plane_size + (0 if flat is not None else m * n)
    block = max(1, min(c, BLOCK_BYTES // (channel_bytes * ITEM)))
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
            store(res[lo_k:hi_k], prod.reshape(cb * m, ho, pitch)[:, :, :wo],
                   [addend[lo_k:hi_k] for addend in rest])
