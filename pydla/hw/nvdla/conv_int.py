"""The integer convolution (INT8, INT16) as CMAC and CACC compute it, exactly, with BLAS.

CMAC's partial sum of an atom is exact (22 bits for INT8, 38 for INT16), CACC adds the atoms with
saturation to 48 bits. A saturation can only happen when some partial sum reaches 2^47; every partial
sum of an output is bounded by ``Σ |w|·|x|`` over its kernel, so with ``B = max|x| · max_k Σ|w_k|``
(taken from the data, the padding value included):

- ``B < 2^24``: one float32 GEMM (im2col) is exact — every partial sum, in whatever order BLAS adds,
  is an integer below 2^24;
- ``B < 2^47``: one float64 GEMM is exact for the same reason (2^47 < 2^53), and no saturation occurs;
- otherwise the atoms are added in the hardware's order (channel block, then kernel row and column)
  with the 48-bit saturation after each: one float64 GEMM per atom (an atom's sum is below
  ``cf · 2^30 <= 2^36``, exact), a loop over atoms, never over elements.

Usage::

    sums = accumulate(DirectAtoms(taps, weights, cf))   # int64 (N, OH, OW, K): CACC's 48-bit sums
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.blas import single_threaded
from pydla.hw.nvdla.cacc import accumulate_int
from pydla.hw.nvdla.conv_atoms import Atoms, DirectAtoms
from pydla.hw.nvdla.intmath import I64

SGEMM_EXACT = 1 << 24
DGEMM_EXACT = 1 << 47  # below the 48-bit saturation and below 2^53
_CHUNK = 1 << 22  # elements of one im2col block (rows x taps)
# OpenBLAS (interface/gemm.c) runs a GEMM of at most 65536 * GEMM_MULTITHREAD_THRESHOLD (4) multiply-adds
# on the calling thread; products up to SPLIT_MACS (about 1 ms on one core) are cut into such blocks.
SINGLE_THREAD_MACS = 1 << 18
SPLIT_MACS = 1 << 24


def bound(x_max: int, atoms: Atoms) -> int:
    """``max|x| · max_k Σ|w_k|`` over the atoms' weights: no partial sum of an output can exceed it."""
    per_kernel = np.zeros(atoms.kernels, dtype=np.int64)
    for a in range(atoms.count):
        per_kernel += np.abs(atoms.weights(a).astype(np.int64)).sum(axis=1)
    return x_max * int(per_kernel.max(initial=0))


def _gemm(cols: npt.NDArray[np.generic], w: npt.NDArray[np.generic], dtype: type) -> I64:
    """``cols @ w`` (integers, exact in ``dtype`` by the caller's bound) as int64. A product of up to
    ``SPLIT_MACS`` multiply-adds goes as blocks of rows small enough for BLAS to run each on the calling
    thread: OpenBLAS hands a larger one to its worker threads, and on a loaded machine waiting for a
    descheduled worker costs milliseconds (measured on 2 shared cores: 64x1152 by 1152x32 in float64,
    median 72 us alone, 16 ms under load; as 10 blocks of 7 rows 110-150 us either way)."""
    a: npt.NDArray[np.floating] = cols.astype(dtype)
    b: npt.NDArray[np.floating] = w.astype(dtype)
    m, k = a.shape
    n = b.shape[1]
    with single_threaded():  # also when a kernel is called outside the device (pydla.hw.nvdla.blas)
        if m * n * k <= SINGLE_THREAD_MACS or m * n * k > SPLIT_MACS or n * k > SINGLE_THREAD_MACS:
            out: I64 = (a @ b).astype(np.int64)
            return out
        rows = SINGLE_THREAD_MACS // (n * k)
        prod: npt.NDArray[np.floating] = np.empty((m, n), dtype=dtype)
        for r in range(0, m, rows):
            np.matmul(a[r:r + rows], b, out=prod[r:r + rows])
    blocks: I64 = prod.astype(np.int64)
    return blocks


def _weight_matrix(atoms: Atoms) -> npt.NDArray[np.generic]:
    """Every atom's weight lanes stacked, rows in atom order: (rows, K). A direct convolution whose
    channels fill whole blocks (or one) is one reshape of its weights, else the atoms are joined."""
    if isinstance(atoms, DirectAtoms):
        w = atoms.w
        k, c, r, s = w.shape
        cf = min(atoms.cf, c)
        if c % cf == 0:  # (K, block, cf, R, S) -> (K, block, R, S, cf): the atoms' order
            out: npt.NDArray[np.generic] = w.reshape(k, c // cf, cf, r, s).transpose(0, 1, 3, 4, 2) \
                .reshape(k, -1).T
            return out
    joined: npt.NDArray[np.generic] = np.concatenate([atoms.weights(a) for a in range(atoms.count)], axis=1).T
    return joined


def accumulate(atoms: Atoms) -> I64:
    """CACC's 48-bit sums (N, OH, OW, K) of the convolution ``atoms`` describes."""
    n, oh, ow, k = atoms.batches, atoms.out_height, atoms.out_width, atoms.kernels
    w2 = _weight_matrix(atoms)
    b = atoms.extreme() * int(np.abs(w2.astype(np.int64)).sum(axis=0).max(initial=0))  # = bound(...)
    if b < DGEMM_EXACT:
        dtype: type = np.float32 if b < SGEMM_EXACT else np.float64
        out = np.empty((n, oh, ow, k), dtype=np.int64)
        step = max(1, _CHUNK // max(1, n * ow * w2.shape[0]))
        for oy0 in range(0, oh, step):
            oy1 = min(oh, oy0 + step)
            cols = np.concatenate([atoms.data(a, oy0, oy1) for a in range(atoms.count)], axis=-1)
            out[:, oy0:oy1] = _gemm(cols.reshape(-1, w2.shape[0]), w2, dtype).reshape(n, oy1 - oy0, ow, k)
        return out
    acc = np.zeros((n * oh * ow, k), dtype=np.int64)
    for a in range(atoms.count):
        part = _gemm(atoms.data(a, 0, oh).reshape(n * oh * ow, -1), atoms.weights(a).T, np.float64)
        # the first atom is stored as it is; adding it to zero is the same
        acc = accumulate_int(acc, part)
    out_sat: I64 = acc.reshape(n, oh, ow, k)
    return out_sat
