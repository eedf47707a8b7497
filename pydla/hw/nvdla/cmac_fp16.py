"""CMAC's FP16 multiply-accumulate of one atom, bit for bit as nvdla/hw ``cmod/cmac`` (``NvdlaMacCell``
``calculation_fp16``) computes it.

One atom is up to 64 channels of data and of one kernel's weights. The cell does not compute in float:

1. NaN: the first NaN among the weights, else among the data (in channel order) is the result:
   exponent 63, the NaN's sign in bit 37 and its fraction in bits 36..27 of the 38-bit mantissa.
2. A channel takes part unless its data or its weight is ±0 (CSC's masks). Each FP16 exponent ``e`` is
   split as ``4·(e >> 2) + (e & 3)`` (exponent 0, a subnormal: ``0 + 1`` with no implied one); the
   mantissas (11 bits with the implied one) are shifted left by the low parts; the high parts of data
   and weight are summed per channel and the atom's maximum ``emax`` taken.
3. Each product is formed by a radix-4 Booth multiplier whose two carry-save outputs are shifted
   right by ``4·(emax - sum)`` separately before a sign-compensation constant is added: the result
   can be one below ``floor(product / 2^shift)`` (NVIDIA's model checks only ``|error| <= 1``).
   Shifts of 32 or more give 0.
4. The 64 products are summed exactly (38 bits); the result is ``(4·emax, sum)``, value
   ``sum · 2^(4·emax - 50)``.

Usage::

    e, m = mac_atom(data_bits, weight_bits)     # (..., n) uint16 FP16 patterns -> (...) each
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.intmath import I64

U32 = npt.NDArray[np.uint32]
MAC_NAN = 63
# the sign-compensation constant added after the right shift by 0, 4, ... 28 (32 and more: the product is 0)
_COMP_TABLE = np.array([0xAAAB0000, 0xFAAAB000, 0xFFAAAB00, 0xFFFAAAB0, 0xFFFFAAAB, 0xFFFFFAAB, 0xFFFFFFAB,
                        0xFFFFFFFB, 0], dtype=np.uint32)


def _csa(a: U32, b: U32, c: U32) -> tuple[U32, U32]:
    s = a ^ b ^ c
    carry = ((a & b) | (b & c) | (a & c)) << np.uint32(1)
    return s, carry


def _reduce(pp: list[U32]) -> tuple[U32, U32]:
    """Five partial products to two, in the cell's carry-save order."""
    s, c = _csa(pp[0], pp[1], pp[2])
    s, c = _csa(s, c, pp[3])
    return _csa(s, c, pp[4])


def booth(negative: npt.NDArray[np.bool_], wt_mts: U32, dat_mts: U32, shift: npt.NDArray[np.int64]
          ) -> npt.NDArray[np.int64]:
    """``cal_fp16_booth``: ``±wt·dat / 2^shift`` as the cell's Booth multiplier and carry-save adders
    produce it (mantissas up to 14 bits, shifts multiples of 4). The arguments broadcast: the Booth
    digits are taken from the weights' array before it meets the data."""
    w = np.asarray(wt_mts).astype(np.uint32) << np.uint32(1)
    d = np.asarray(dat_mts).astype(np.uint32)
    one = np.uint32(0x10000)
    pp, inv = [], []
    for i in range(8):
        code = (w >> np.uint32(2 * i)) & np.uint32(7)
        # the digit's magnitude (0, 1, 2) and sign, on the weights alone; a negative product flips the
        # sign (the cell complements the code), a zero digit stays positive (codes 0 and 7)
        mag = np.where((code == 3) | (code == 4), np.uint32(2), np.where((code == 0) | (code == 7), 0, 1))
        digit_neg = code >= 4
        nonzero = mag != 0
        neg = (digit_neg ^ negative) & nonzero
        prod = d * mag.astype(np.uint32)
        pp.append(np.where(neg, ~prod & np.uint32(0xFFFF), prod | one).astype(np.uint32))
        inv.append(neg.astype(np.uint32))
    csa = [pp[0],
           (pp[1] << np.uint32(2)) | inv[0],
           (pp[2] << np.uint32(4)) | (inv[1] << np.uint32(2)),
           (pp[3] << np.uint32(6)) | (inv[2] << np.uint32(4)),
           inv[3] << np.uint32(6),
           pp[4] << np.uint32(8),
           (pp[5] << np.uint32(10)) | (inv[4] << np.uint32(8)),
           (pp[6] << np.uint32(12)) | (inv[5] << np.uint32(10)),
           (pp[7] << np.uint32(14)) | (inv[6] << np.uint32(12)),
           inv[7] << np.uint32(14)]
    s0, c0 = _reduce(csa[:5])
    s1, c1 = _reduce(csa[5:])
    s, c = _csa(s0, c0, s1)
    s, c = _csa(s, c, c1)
    k = np.clip(shift, 0, 31).astype(np.uint32)
    comp = _COMP_TABLE[np.minimum(shift >> 2, 8)]
    total = (s >> k) + (c >> k) + comp
    out: I64 = np.where(shift >= 32, 0, total.astype(np.int32).astype(np.int64))
    return out


def mac_atom(data: npt.ArrayLike, weights: npt.ArrayLike) -> tuple[I64, I64]:
    """One atom's (exponent, 38-bit mantissa) from FP16 data and weights of shape (..., n), n <= 64
    (broadcast against each other; channels past the data are zero in the hardware)."""
    x = np.asarray(data, dtype=np.int64) & 0xFFFF
    w = np.asarray(weights, dtype=np.int64) & 0xFFFF

    def operand(v: I64) -> tuple[I64, I64, I64, npt.NDArray[np.bool_]]:
        """(exponent's high part, mantissa shifted by the low part, sign, non-zero) of each operand."""
        e = (v >> 10) & 31
        mts = ((v & 0x3FF) | ((e != 0).astype(np.int64) << 10)) << np.where(e == 0, 1, e & 3)
        return e >> 2, mts, v >> 15, (v & 0x7FFF) != 0

    dh, dat, ds, dz = operand(x)
    wh, wt, ws, wz = operand(w)
    live = dz & wz
    high = np.where(live, dh + wh, 0)
    emax = high.max(axis=-1, initial=0)
    shift = (emax[..., None] - high) << 2
    prod = booth((ds ^ ws) == 1, wt.astype(np.uint32), dat.astype(np.uint32), shift)
    mant = np.where(live, prod, 0).sum(axis=-1)
    exp = emax << 2
    # NaN: the first NaN weight, else the first NaN datum (lane order)
    nan_w = (((w >> 10) & 31) == 31) & ((w & 0x3FF) != 0)
    nan_d = (((x >> 10) & 31) == 31) & ((x & 0x3FF) != 0)
    if not (nan_w.any() or nan_d.any()):
        return exp.astype(np.int64), mant.astype(np.int64)
    xb, wb, nan_d, nan_w = np.broadcast_arrays(x, w, nan_d, nan_w)
    any_w, any_d = nan_w.any(axis=-1), nan_d.any(axis=-1)
    any_nan = any_w | any_d
    first_w = np.argmax(nan_w, axis=-1)[..., None]
    first_d = np.argmax(nan_d, axis=-1)[..., None]
    src = np.where(np.asarray(any_w)[..., None], np.take_along_axis(wb, first_w, -1),
                   np.take_along_axis(xb, first_d, -1))[..., 0]
    nan_mant = ((src >> 15) << 37) | ((src & 0x3FF) << 27)
    nan_mant = nan_mant - ((nan_mant >> 37) << 38)  # as a signed 38-bit value
    out_e: I64 = np.where(any_nan, MAC_NAN, exp).astype(np.int64)
    out_m: I64 = np.where(any_nan, nan_mant, mant).astype(np.int64)
    return out_e, out_m
