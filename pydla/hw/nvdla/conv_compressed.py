"""Compressed weights (nv_full): NVDLA's sparse weight format, both ways, as nvdla/hw ``cmod/cdma`` fetches
it and ``cmod/csc`` (``get_decompressed_weight``) expands it.

Three arrays describe the weights of the uncompressed layout (pydla.hw.nvdla.conv_weights):

- WMB, the weight mask bits: one bit per element of the uncompressed layout, in its order, packed
  least significant bit first (element i is bit ``i mod 8`` of byte ``i // 8``); 1 = the element is
  stored (non-zero), 0 = it is zero. CDMA reads ``WMB_BYTES`` from ``WMB_ADDR``.
- The weights: the stored elements one after the other (``bpe`` bytes each), in the same order,
  with no gap between kernel groups (CSC reads them as one stream). CDMA reads ``WEIGHT_BYTES``.
- WGS, the weight group sizes: one little-endian u32 per kernel group, the bytes of that group's
  stored elements. CDMA reads them in 32-byte atoms from ``WGS_ADDR`` and uses them only to know
  when a group has arrived; a size below the group's stored bytes would let CSC read weights that
  have not arrived, so pydla refuses it.

Usage::

    wmb, stream, wgs = compress(w, NV_FULL, Precision.INT8)      # w: (K, C, R, S)
    w2 = decompress(wmb, stream, wgs, 64, 3, 3, 64, NV_FULL, Precision.INT8)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.conv_weights import groups, pack, unpack
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NvdlaTarget


def group_bytes(bits: npt.NDArray[np.uint8], kernels: int, per_kernel: int, target: NvdlaTarget,
                prec: Precision) -> npt.NDArray[np.int64]:
    """Stored bytes of each kernel group, from the mask bits of the uncompressed layout."""
    kf, _ = groups(target, prec)
    bounds = [min(kernels, g * kf) * per_kernel for g in range(-(-kernels // kf) + 1)]
    counts = np.add.reduceat(bits.astype(np.int64), bounds[:-1]) if bits.size else np.zeros(0, np.int64)
    out: npt.NDArray[np.int64] = counts * prec.bpe
    return out


def expand(wmb: npt.NDArray[np.uint8], stream: npt.NDArray[np.uint8], wgs: npt.NDArray[np.uint8],
           kernels: int, per_kernel: int, target: NvdlaTarget, prec: Precision) -> npt.NDArray[np.uint8]:
    """The uncompressed weight bytes (``kernels`` of ``per_kernel`` elements, in the layout's order) from
    WMB, the stored elements and WGS (raw bytes as CDMA reads them)."""
    count = kernels * per_kernel
    if wmb.size * 8 < count:
        raise DlaError(NvError.InvalidSize, f"CDMA wmb_bytes: {wmb.size} bytes hold fewer than the {count} "
                                            "mask bits of the weights")
    bits = np.unpackbits(wmb, bitorder="little")[:count]
    stored = int(bits.sum())
    if stream.size < stored * prec.bpe:
        raise DlaError(NvError.InvalidSize, f"CDMA weight_bytes: {stream.size} bytes hold fewer than the "
                                            f"{stored} stored {prec.name} weights the mask bits name")
    sizes = group_bytes(bits, kernels, per_kernel, target, prec)
    declared = np.frombuffer(np.ascontiguousarray(wgs[:4 * sizes.size]).tobytes(), dtype="<u4")
    if declared.size < sizes.size:
        raise DlaError(NvError.InvalidSize, f"CDMA wgs: {wgs.size} bytes hold fewer than {sizes.size} group "
                                            "sizes")
    short = np.nonzero(declared.astype(np.int64) < sizes)[0]
    if short.size:
        g = int(short[0])
        raise DlaError(NvError.BadValue, f"CDMA wgs: kernel group {g} is declared {int(declared[g])} bytes "
                                         f"but stores {int(sizes[g])}")
    flat = np.zeros(count, dtype=prec.dtype)
    flat[bits.astype(bool)] = np.ascontiguousarray(stream[:stored * prec.bpe]).view(prec.dtype)
    out: npt.NDArray[np.uint8] = flat.view(np.uint8)
    return out


def decompress(wmb: npt.NDArray[np.uint8], stream: npt.NDArray[np.uint8], wgs: npt.NDArray[np.uint8],
               kernels: int, channels: int, height: int, width: int, target: NvdlaTarget,
               prec: Precision) -> npt.NDArray[np.generic]:
    """Weights (K, C, R, S) from WMB, the stored elements and WGS (raw bytes as CDMA reads them)."""
    raw = expand(wmb, stream, wgs, kernels, channels * height * width, target, prec)
    return unpack(raw, kernels, channels, height, width, target, prec)


def compress(weights: npt.ArrayLike, target: NvdlaTarget, prec: Precision
             ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """(WMB, stored elements, WGS) of weights (K, C, R, S), each padded to a multiple of 128 bytes
    (WMB, elements) or 32 bytes (WGS) as CDMA reads them."""
    w = np.asarray(weights)
    flat = pack(w, target, prec).view(prec.dtype)
    bits = (flat != 0).astype(np.uint8)
    if prec is Precision.FP16:
        bits = ((flat.astype(np.int64) & 0x7FFF) != 0).astype(np.uint8)  # ±0 is not stored
    wmb = np.packbits(bits, bitorder="little")
    stream = flat[bits.astype(bool)].view(np.uint8)
    sizes = group_bytes(bits, w.shape[0], w[0].size, target, prec).astype("<u4").view(np.uint8)

    def padded(a: npt.NDArray[np.uint8], unit: int) -> npt.NDArray[np.uint8]:
        out = np.zeros(-(-max(a.size, 1) // unit) * unit, dtype=np.uint8)
        out[:a.size] = a
        return out

    return padded(wmb, 128), padded(stream, 128), padded(sizes, 32)
