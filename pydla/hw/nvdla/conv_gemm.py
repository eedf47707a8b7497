"""The integer direct convolution (INT8, INT16) as exact float GEMMs: an im2col of the channel-last input
against the weights, prepared once per launch and kept while their bytes stay the same.

Why it is exact (the bound of pydla.hw.nvdla.conv_int): every partial sum of an output is at most
``X · Σ|w_k|`` in magnitude, X = max|x| over what the convolution reads (the padding value included).

- The reduction (kernel row, kernel column, channel) is cut into slices whose own bound
  ``X · max_k Σ_slice |w_k|`` is below 2^24: one float32 GEMM per slice is exact whatever order BLAS
  adds in, and the slices' results add exactly in float64 (the whole bound is below 2^47 < 2^53). An
  INT8 slice holds at least 1024 rows (128 · 128 · 1024 = 2^24), so INT8 always runs in float32.
- Where float32 would need slices shorter than :data:`MIN_SLICE` rows (INT16 data and weights),
  one float64 GEMM (exact below 2^47).
- From 2^47 on CACC may saturate: the caller adds the atoms in the hardware's order (conv_int).

An exact sum does not depend on its order, so the rows are in the order an im2col of channel-last data
reads with one strided copy: (kernel row, kernel column, channel).

The weights' matrix, their bounds and slices depend only on the weight bytes and the registers that
shape them: :class:`WeightCache` keeps them per launch and compares the bytes read at every run with
the bytes they were made from (a whole-bytes comparison, about 0.1 ms for 2.4 MB: cheaper than any hash,
and a stale entry is impossible).

Usage::

    prepared = cache.get(key, raw, lambda: PreparedWeights.make(raw, k, c, r, s, target, prec))
    out, saturated = convolve(x_cl, geometry, pad_value, prepared, clip_truncate)  # None past 2^47
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import conv_weights
from pydla.hw.nvdla.blas import WAIT_TIMEOUT, host_pool, host_workers, single_threaded
from pydla.hw.nvdla.cacc import deliver_int
from pydla.hw.nvdla.conv_int import DGEMM_EXACT, SGEMM_EXACT
from pydla.hw.nvdla.conv_taps import Geometry
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NvdlaTarget

MIN_SLICE = 256  # float32 slices shorter than this lose to one float64 GEMM
CACHE_BYTES = 512 << 20  # prepared weights kept per device; past it the cache starts again
_CHUNK = 1 << 22  # elements of one im2col block (rows x taps)
PARALLEL_MACS = 1 << 22  # products from this size are shared between the cores (about 1 ms on one)
_INT32_MAX = (1 << 31) - 1
Floats = npt.NDArray[np.floating]


def _x_class(x_max: int) -> int:
    """``x_max`` rounded up to 4 significant bits: the slices of a class serve every X up to it."""
    q = 1 << max(0, x_max.bit_length() - 4)
    return -(-x_max // q) * q


@dataclass
class PreparedWeights:
    """A direct convolution's weights as the GEMM uses them, and the bytes they were made from."""

    raw: bytes
    w4: npt.NDArray[np.generic]  # (K, C, R, S) of the precision's dtype (the atoms' order needs it)
    kernel_sum: int  # max_k Σ|w_k|
    _matrices: dict[str, Floats] = field(default_factory=dict)
    _slices: dict[int, tuple[tuple[int, int], ...] | None] = field(default_factory=dict)

    @classmethod
    def make(cls, raw: npt.NDArray[np.uint8], kernels: int, channels: int, height: int, width: int,
             target: NvdlaTarget, prec: Precision) -> PreparedWeights:
        w4 = conv_weights.unpack(raw, kernels, channels, height, width, target, prec)
        w4.flags.writeable = False
        total = np.abs(w4.astype(np.int64)).reshape(kernels, -1).sum(axis=1)
        return cls(raw.tobytes(), w4, int(total.max(initial=0)))

    @property
    def nbytes(self) -> int:
        return len(self.raw) + self.w4.nbytes + sum(m.nbytes for m in self._matrices.values())

    def matrix(self, dtype: type) -> Floats:
        """(R·S·C, K): rows in (kernel row, kernel column, channel) order."""
        name = np.dtype(dtype).name
        m = self._matrices.get(name)
        if m is None:
            k = self.w4.shape[0]
            m = np.ascontiguousarray(self.w4.transpose(2, 3, 1, 0).reshape(-1, k), dtype=dtype)
            m.flags.writeable = False
            self._matrices[name] = m
        return m

    def slices(self, x_max: int) -> tuple[tuple[int, int], ...] | None:
        """Row ranges whose float32 GEMMs are exact for data up to ``x_max`` (None: float32 does not pay)."""
        x = _x_class(x_max)
        if x in self._slices:
            return self._slices[x]
        if len(self._slices) >= 16:
            self._slices.clear()
        self._slices[x] = out = self._cut(x)
        return out

    def _cut(self, x: int) -> tuple[tuple[int, int], ...] | None:
        rows = self.w4[0].size
        if x * self.kernel_sum < SGEMM_EXACT:
            return ((0, rows),)
        limit = (SGEMM_EXACT - 1) // x  # a slice's Σ|w_k| may reach this
        k = self.w4.shape[0]
        cum = np.cumsum(np.abs(self.w4.astype(np.int64)).transpose(2, 3, 1, 0).reshape(-1, k), axis=0)
        out: list[tuple[int, int]] = []
        start, base = 0, np.zeros(k, dtype=np.int64)
        while start < rows:
            reach = (cum[start:] - base).max(axis=1)  # non-decreasing
            n = int(np.searchsorted(reach, limit, side="right"))
            if n == 0 or len(out) * MIN_SLICE > rows:
                return None
            out.append((start, start + n))
            start += n
            base = cum[start - 1]
        return tuple(out)


class WeightCache:
    """Prepared weights by launch key, each checked against the bytes read at every run."""

    def __init__(self, capacity: int = CACHE_BYTES) -> None:
        self.capacity = capacity
        self._entries: dict[object, PreparedWeights] = {}
        self.hits = self.misses = 0

    def get(self, key: object, raw: npt.NDArray[np.uint8], make: Callable[[], PreparedWeights]
            ) -> PreparedWeights:
        """The entry of ``key`` if it was made from ``raw``'s bytes, else a new one from ``make``."""
        entry = self._entries.get(key)
        if entry is not None and len(entry.raw) == raw.size and entry.raw == raw.tobytes():
            self.hits += 1
            return entry
        self.misses += 1
        entry = make()
        self._entries.pop(key, None)
        # the entries' matrices are made after they are stored: counted here, at the next miss
        if sum(e.nbytes for e in self._entries.values()) + entry.nbytes > self.capacity:
            self.clear()
        self._entries[key] = entry
        return entry

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _matmul(a: Floats, b: Floats, out: Floats) -> None:
    """``out = a @ b`` with OpenBLAS on one thread (pydla.hw.nvdla.blas); a product of PARALLEL_MACS or
    more is cut into blocks, one per core, the caller computing the first: blocks of rows, or of
    columns when there are few rows (the deep layers: 49 positions, 512 kernels). Our threads wait for
    each other once per product and sleep while they wait, where OpenBLAS's own workers busy-wait for
    their share at every step of it (see pydla.hw.nvdla.blas for what that costs on a loaded machine)."""
    m, k = a.shape
    n = b.shape[1]
    workers = host_workers() if m * n * k >= PARALLEL_MACS else 0
    by_rows = m >= n or m >= 256
    parts = min(workers + 1, max(1, (m if by_rows else n) // 64))
    with single_threaded():
        if parts == 1:
            np.matmul(a, b, out=out)
            return
        size = m if by_rows else n
        cuts = [size * i // parts for i in range(parts + 1)]
        blocks = [(a[lo:hi], b, out[lo:hi]) if by_rows else (a, b[:, lo:hi], out[:, lo:hi])
                  for lo, hi in itertools.pairwise(cuts)]
        pool = host_pool(workers)
        futures = [pool.submit(_product, *blk) for blk in blocks[1:]]
        _product(*blocks[0])
        for f in futures:
            try:
                f.result(timeout=WAIT_TIMEOUT)
            except TimeoutError:
                raise DlaError(NvError.Timeout, f"convolution: a block of a {m}x{k} by {k}x{n} GEMM did "
                                                f"not finish in {WAIT_TIMEOUT} s") from None


def _product(a: Floats, b: Floats, out: Floats) -> None:
    np.matmul(a, b, out=out)


def _padded(x_cl: npt.NDArray[np.generic], g: Geometry, pad_value: int, dtype: type) -> Floats:
    """(N, rows, cols, C) in ``dtype``: the input where the convolution reads it, the padding value around."""
    rows = (g.out_height - 1) * g.stride_y + (g.kernel_height - 1) * g.dilation_y + 1
    cols = (g.out_width - 1) * g.stride_x + (g.kernel_width - 1) * g.dilation_x + 1
    xp: Floats = np.empty((g.batches, rows, cols, g.channel), dtype=dtype)
    h = max(0, min(g.height, rows - g.pad_top))
    w = max(0, min(g.width, cols - g.pad_left))
    if h < rows or w < cols:
        xp.fill(pad_value)
    xp[:, g.pad_top:g.pad_top + h, g.pad_left:g.pad_left + w] = x_cl[:, :h, :w, :g.channel]
    return xp


def _columns(xp: Floats, g: Geometry, oy0: int, oy1: int) -> Floats:
    """The im2col of output rows oy0 … oy1 - 1: (N·rows·OW, R·S·C), one strided copy."""
    sn, sy, sx, sc = xp.strides
    n, c = xp.shape[0], xp.shape[3]
    shape: tuple[int, ...]
    if g.dilation_x == 1:  # a kernel row's S·C values are contiguous in channel-last data
        shape = (n, oy1 - oy0, g.out_width, g.kernel_height, g.kernel_width * c)
        strides: tuple[int, ...] = (sn, sy * g.stride_y, sx * g.stride_x, sy * g.dilation_y, sc)
    else:
        shape = (n, oy1 - oy0, g.out_width, g.kernel_height, g.kernel_width, c)
        strides = (sn, sy * g.stride_y, sx * g.stride_x, sy * g.dilation_y, sx * g.dilation_x, sc)
    view = np.lib.stride_tricks.as_strided(xp[:, oy0 * g.stride_y:], shape=shape, strides=strides,
                                           writeable=False)
    cols: Floats = view.reshape(-1, g.kernel_height * g.kernel_width * c)  # copies unless it need not
    return cols


def extreme(x_cl: npt.NDArray[np.generic], g: Geometry, pad_value: int) -> int:
    """``max|x|`` over what the convolution reads: the data, and the padding value where it is read."""
    data = x_cl[:, :, :, :g.channel]
    x_max = max(abs(int(data.min())), abs(int(data.max()))) if data.size else 0
    rows = (g.out_height - 1) * g.stride_y + (g.kernel_height - 1) * g.dilation_y + 1
    cols = (g.out_width - 1) * g.stride_x + (g.kernel_width - 1) * g.dilation_x + 1
    padded = g.pad_top > 0 or g.pad_left > 0 or rows - g.pad_top > g.height or cols - g.pad_left > g.width
    return max(x_max, abs(pad_value)) if padded else x_max


def convolve(x_cl: npt.NDArray[np.generic], g: Geometry, pad_value: int, prepared: PreparedWeights,
             clip_truncate: int) -> tuple[npt.NDArray[np.int32], int] | None:
    """CACC's delivered int32 values (N, OH, OW, K) and their saturation count, for input ``x_cl``
    (N, H, W, >= C) channel-last; None when the bound reaches 2^47 (the caller's atom-by-atom path)."""
    x_max = extreme(x_cl, g, pad_value)
    bound = x_max * prepared.kernel_sum
    if bound >= DGEMM_EXACT:
        return None
    slices = prepared.slices(x_max)
    dtype: type = np.float32 if slices is not None else np.float64
    w = prepared.matrix(dtype)
    n, oh, ow, k = g.batches, g.out_height, g.out_width, g.kernels
    taps = w.shape[0]
    xp = _padded(x_cl, g, pad_value, dtype)
    one = slices is None or len(slices) == 1
    acc: Floats = np.empty((n * oh * ow, k), dtype=dtype if one else np.float64)
    step = max(1, _CHUNK // max(1, n * ow * taps))
    for oy0 in range(0, oh, step):
        oy1 = min(oh, oy0 + step)
        cols = _columns(xp, g, oy0, oy1)
        if n == 1:
            _accumulate(cols, w, slices, acc[oy0 * ow:oy1 * ow])
        else:  # several batches: the block's rows are not contiguous in (N, OH, OW) order
            block = np.empty((cols.shape[0], k), dtype=acc.dtype)
            _accumulate(cols, w, slices, block)
            acc.reshape(n, oh, ow, k)[:, oy0:oy1] = block.reshape(n, oy1 - oy0, ow, k)
    out = acc.reshape(n, oh, ow, k)
    if clip_truncate == 0 and bound <= _INT32_MAX:
        return out.astype(np.int32), 0  # exact integers within int32: nothing rounds or saturates
    return deliver_int(out.astype(np.int64), clip_truncate)


def _accumulate(cols: Floats, w: Floats, slices: tuple[tuple[int, int], ...] | None, out: Floats) -> None:
    """``out = cols @ w``, slice by slice in float32 added in float64 when there are several slices."""
    if slices is None or len(slices) == 1:
        _matmul(cols, w, out)
        return
    part = np.empty(out.shape, dtype=np.float32)
    for i, (a, b) in enumerate(slices):
        _matmul(cols[:, a:b], w[a:b], part)
        if i == 0:
            out[...] = part
        else:
            out += part
