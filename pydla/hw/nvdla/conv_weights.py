"""NVDLA's weight format for direct convolution, both ways (the MAC array sizes behind it are
pydla.hw.nvdla.target's).

CSC hands CMAC one atom per kernel: ``cf`` channels (the MAC array's atomic C) of one kernel position,
for ``kf`` kernels at a time (atomic K; two-byte elements: half of it). The weights lie in memory in
that order (nvdla/hw ``cmod/csc`` ``SendWeightToMacSequencerDirectConvCommon``), outermost first:

1. kernel group (``kf`` kernels; the last group holds the remaining ``K mod kf``);
2. channel block (``cf`` channels; the last block the remaining ``C mod cf``, not padded);
3. kernel position ``r·S + s`` (row, then column);
4. kernel within the group; 5. channel within the block (contiguous, ``bpe`` bytes each).

Element ``(k, c, r, s)`` is at ``g·kf·R·S·C + b·cf·R·S·kg + (r·S + s)·cb·kg + (k mod kf)·cb + c mod cf``
(``g = k // kf``, ``b = c // cf``, ``kg`` the kernels of group g, ``cb`` the channels of block b), so
one kernel takes ``R·S·C·bpe`` bytes (CDMA ``BYTE_PER_KERNEL``).

Usage::

    raw = pack(w, NV_FULL, Precision.INT8)                       # w: (K, C, R, S) int8
    assert (unpack(raw, 64, 3, 3, 64, NV_FULL, Precision.INT8) == w).all()
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NvdlaTarget


def groups(target: NvdlaTarget, prec: Precision) -> tuple[int, int]:
    """(kernels per group kf, channels per block cf) of ``target`` for ``prec`` (its MAC array)."""
    return target.kernel_groups(prec)


@functools.lru_cache(maxsize=64)  # the same shapes at every run of a network
def offsets(kernels: int, channels: int, height: int, width: int, target: NvdlaTarget,
            prec: Precision) -> npt.NDArray[np.int64]:
    """Element offsets of every weight, shape (K, C, R, S), in the layout above (read only)."""
    kf, cf = groups(target, prec)
    rs = height * width
    k = np.arange(kernels, dtype=np.int64)
    g, kk = k // kf, k % kf
    kg = np.minimum(kf, kernels - g * kf)  # kernels in k's group
    c = np.arange(channels, dtype=np.int64)
    b, cc = c // cf, c % cf
    cb = np.minimum(cf, channels - b * cf)  # channels in c's block
    pos = np.arange(rs, dtype=np.int64)
    group_base = (g * kf * rs * channels)[:, None, None]
    block_base = (b * cf * rs)[None, :, None] * kg[:, None, None]
    inner = (pos[None, None, :] * (cb[None, :, None] * kg[:, None, None])
             + kk[:, None, None] * cb[None, :, None] + cc[None, :, None])
    out: npt.NDArray[np.int64] = (group_base + block_base + inner).reshape(kernels, channels, height, width)
    out.flags.writeable = False
    return out


def unpack(raw: npt.NDArray[np.uint8], kernels: int, channels: int, height: int, width: int,
           target: NvdlaTarget, prec: Precision) -> npt.NDArray[np.generic]:
    """Weights (K, C, R, S) of ``prec``'s dtype (FP16 as raw uint16 bits) from their bytes."""
    count = kernels * channels * height * width
    if raw.size < count * prec.bpe:
        raise DlaError(NvError.InvalidSize, f"convolution weights: {raw.size} bytes hold fewer than the "
                                            f"{count * prec.bpe} of {kernels}x{channels}x{height}x{width} "
                                            f"{prec.name} weights")
    flat = np.ascontiguousarray(raw[:count * prec.bpe]).view(prec.dtype)
    out: npt.NDArray[np.generic] = flat[offsets(kernels, channels, height, width, target, prec)]
    return out


def pack(weights: npt.ArrayLike, target: NvdlaTarget, prec: Precision) -> npt.NDArray[np.uint8]:
    """The bytes of weights (K, C, R, S) in NVDLA's layout (``prec``'s dtype; FP16 as uint16 bits)."""
    w = np.asarray(weights)
    if w.ndim != 4:
        raise DlaError(NvError.BadParameter, f"convolution weights: shape {w.shape} is not (K, C, R, S)")
    flat = np.zeros(w.size, dtype=prec.dtype)
    k, c, r, s = w.shape
    flat[offsets(k, c, r, s, target, prec).reshape(-1)] = w.astype(prec.dtype).reshape(-1)
    out: npt.NDArray[np.uint8] = flat.view(np.uint8)
    return out
