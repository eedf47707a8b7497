"""CACC: the convolution accumulator's arithmetic, as nvdla/hw ``cmod/cacc/NV_NVDLA_cacc.cpp`` computes.

Integer (INT8, INT16): CMAC's partial sum of one atom (22 bits for INT8, 38 for INT16) is stored as the
first value of an output, each further atom is added with saturation to 48 bits (±(2^47 - 1), -2^47).
On delivery the sum is divided by ``2^clip_truncate`` rounding half away from zero (the C model does
it in double precision, exact for 48-bit sums), then saturated to 32 bits; the saturations are counted
(``D_OUT_SATURATION``).

FP16: a partial sum arrives from CMAC as a 6-bit exponent ``e`` and a 38-bit two's complement mantissa
``m`` (value ``m · 2^(e - 50)``; ``e = 63`` is a NaN with the FP16 sign and fraction in bits 37..27).
The accumulator is NVDLA's 48-bit float: an 8-bit exponent ``E`` and a 40-bit two's complement
mantissa ``M``, value ``M · 2^(E - 101)``, ``E = 255`` a NaN. :func:`fp48_add` adds a partial sum:
the partial sum is normalised, the smaller operand shifted right (more than 40 places: it is dropped)
keeping the shifted-out bits, the sum normalised (pulling the kept bits back in), rounded half away
from zero on the kept bits, the exponent kept modulo 256. :func:`fp48_to_fp32` rounds the 40-bit
mantissa's magnitude to 24 bits (half away from zero) for the SDP.

Usage::

    out, saturated = deliver_int(sums, clip_truncate=2)     # int32 for the SDP
    e, m = fp48_add(e, m, mac_e, mac_m); bits = fp48_to_fp32(e, m)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.intmath import I64, saturate, shift_right_round

ACC_BITS = 48
ACC_MAX = (1 << (ACC_BITS - 1)) - 1
ACC_MIN = -(1 << (ACC_BITS - 1))
MAX_TRUNCATE = 16  # the C model refuses clip_truncate + 32 > 48
FP48_NAN = 255
MAC_NAN = 63
_M40 = (1 << 40) - 1


def accumulate_int(acc: I64, part: npt.ArrayLike) -> I64:
    """``acc + part`` saturated to 48 bits (CACC's assembly adder)."""
    out: I64 = np.clip(acc + np.asarray(part, dtype=np.int64), ACC_MIN, ACC_MAX)
    return out


def deliver_int(acc: npt.ArrayLike, clip_truncate: int) -> tuple[npt.NDArray[np.int32], int]:
    """The 32-bit values CACC hands the SDP, and how many of them saturated."""
    t = shift_right_round(acc, clip_truncate)
    saturated = int(np.count_nonzero((t > 0x7FFFFFFF) | (t < -0x80000000)))
    return saturate(t, 32).astype(np.int32), saturated


def _wrap(x: I64, bits: int) -> I64:
    h = np.int64(1 << (bits - 1))
    out: I64 = ((x + h) & np.int64((1 << bits) - 1)) - h
    return out


def _bit_length(x: I64) -> I64:
    """Bit length of non-negative values below 2^53."""
    out: I64 = np.frexp(x.astype(np.float64))[1].astype(np.int64)
    return out


def _significant(x: I64) -> I64:
    """Bits after the sign that are not copies of it: the bit length of x (x >= 0) or of -x-1."""
    return _bit_length(np.where(x >= 0, x, -x - 1))


def fp48_add(acc_e: npt.ArrayLike, acc_m: npt.ArrayLike, mac_e: npt.ArrayLike, mac_m: npt.ArrayLike
             ) -> tuple[I64, I64]:
    """``cacc_fp16_add``: the FP48 accumulator (E, M) plus a CMAC partial sum (e, m)."""
    ea, ma, em, mm = (np.asarray(v, dtype=np.int64) for v in (acc_e, acc_m, mac_e, mac_m))
    ea, ma, em, mm = np.broadcast_arrays(ea, ma, em, mm)
    nan_acc = ea == FP48_NAN
    # the partial sum, normalised: its first bit unlike the sign to bit 36, then two guard bits
    shift0 = 37 - _significant(mm)
    mext = _wrap(mm << np.clip(shift0, 0, 37), 38) << 2
    emr = (em - shift0 + 49) & 0xFF
    ea = np.where(ma == 0, 0, ea)
    # align the smaller operand, keeping what is shifted out (top-aligned in 40 bits)
    d = emr - ea
    dd = np.clip(np.abs(d), 0, 40)
    small = np.where(d > 0, ma, mext)
    gone = np.where(np.abs(d) <= 40, (small & ((np.int64(1) << dd) - 1)) << (40 - dd), 0)
    gone = np.where(d == 0, 0, gone)
    shifted = np.where(np.abs(d) <= 40, small >> dd, 0)
    ma2 = np.where(d > 0, shifted, ma)
    mext2 = np.where(d < 0, shifted, mext)
    big = np.maximum(emr, ea)
    true_sum = ma2 + mext2
    total = _wrap(true_sum, 40)
    ovf = ((mext2 < 0) == (ma2 < 0)) & ((total < 0) != (mext2 < 0))
    n = np.clip(39 - _significant(total), 0, 39)  # left shift to normalise (>= 1 when bit 38 == bit 39)
    norm = ~ovf & (n >= 1)
    low = total & ((np.int64(1) << (40 - n)) - 1)
    pulled = _wrap((low << n) | (gone >> (40 - n)), 40)
    summ = np.where(ovf, true_sum >> 1, np.where(norm, pulled, total))
    gone = np.where(norm, (gone << n) & _M40, gone)
    exp = np.where(ovf, big + 1, np.where(norm, big - n, big))
    guard0 = (gone >> 39) & 1
    sticky0 = (gone & ((1 << 39) - 1)) != 0
    guard1 = true_sum & 1
    sticky1 = gone != 0
    neg = summ < 0
    need = np.where(ovf, np.where(neg, guard1 & sticky1, guard1), np.where(neg, guard0 & sticky0, guard0))
    rounded = _wrap(summ + need, 40)
    carry = (rounded < 0) != neg
    final = np.where(carry, _wrap((neg.astype(np.int64) << 39) | ((rounded & _M40) >> 1), 40), rounded)
    exp = (exp + carry) & 0xFF
    exp = np.where(final == 0, 0, exp)
    # NaNs, and a zero partial sum (the accumulator stays as it is)
    nan_mac = em == MAC_NAN
    exp = np.where(nan_mac, FP48_NAN, exp)
    final = np.where(nan_mac, _wrap(((mm >> 27) & 0x7FF) << 29, 40), final)
    exp = np.where(nan_acc, FP48_NAN, exp)
    final = np.where(nan_acc, ma & ~np.int64((1 << 29) - 1), final)
    keep = mm == 0
    out_e: I64 = np.where(keep, np.asarray(acc_e, dtype=np.int64), exp).astype(np.int64)
    out_m: I64 = np.where(keep, np.asarray(acc_m, dtype=np.int64), final).astype(np.int64)
    return out_e, out_m


def fp48_to_fp32(acc_e: npt.ArrayLike, acc_m: npt.ArrayLike) -> I64:
    """``cacc_fp48_to_fp32``: the FP32 bit patterns CACC hands the SDP."""
    e = np.asarray(acc_e, dtype=np.int64)
    m = np.asarray(acc_m, dtype=np.int64)
    sign = (m < 0).astype(np.int64)
    mag = np.where(m < 0, -m, m) & ((1 << 39) - 1)
    q = (mag >> 15) + ((mag >> 14) & 1)  # 24 bits with the leading one, rounded half away from zero
    over = q >> 24
    exp = (np.where(m == 0, 0, e + 64) + over) & 0xFF
    mant = np.where(over == 1, 0, q & ((1 << 23) - 1))
    bits = (sign << 31) | (exp << 23) | mant
    minus_two = m == -(1 << 39)  # -2^39: its magnitude does not fit the 39 bits
    bits = np.where(minus_two, (1 << 31) | (((e + 65) & 0xFF) << 23), bits)
    nan = e == FP48_NAN
    out: I64 = np.where(nan, (sign << 31) | (0xFF << 23) | ((m >> 29) & 0x3FF), bits)
    return out
