"""The SDP's lookup table (Y stage), integer path, as nvdla/hw ``cmod/hls/sdp/sdp_y_idx.cpp``,
``sdp_y_inp.cpp`` and the LUT handling of ``cmod/hls_wrapper/sdp_hls_wrapper.cpp`` compute it.

Two tables are looked up for every 32-bit input x:

- LE (65 entries): exponent method: ``e = floor(log2(x - le_start))``, index ``e - le_index_offset``,
  fraction ``(x - le_start - 2^e) / 2^e``; linear method: index ``(x - le_start) >> le_index_select``,
  fraction the bits shifted out. Underflow when ``x <= le_start`` (or e < the offset), overflow
  when the index reaches 64.
- LO (257 entries): the linear method with ``lo_start`` and ``lo_index_select``; overflow at 256.

Fractions have 35 bits. Which table answers: both underflow -> ``uflow_priority``, both overflow ->
``oflow_priority``, both hit or one under- and one overflow -> ``hybrid_priority``, otherwise the one
that hits. A hit interpolates ``y0·(1 - f) + y1·f`` (rounded half away from zero); a miss
extrapolates ``y0 + ((x - (offset + bias))·scale >> shift)`` from the table's end (``y0`` the first
entry and ``offset`` the start on underflow, the last entry and the end on overflow, ``bias`` =
``2^le_index_offset`` for an exponent LE underflow), with the 5-bit shift read as signed (negative:
a left shift) and the results saturated to 32 bits.

Usage::

    out = lut_int(values, params.lut)     # int64 in, int64 out (32-bit range)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.intmath import I64, saturate, shift_right_round, sign_extend, wrap
from pydla.hw.nvdla.nvfloat import (
    FP17,
    FP32,
    fp16_to_fp17,
    fp17_to_fp32,
    fp32_to_fp17,
    fp32_to_int_frac,
    fp_add,
    fp_mul,
    fp_sub,
    fraction_to_fp17,
    split,
)
from pydla.hw.nvdla.sdp_params import LE_ENTRIES, LO_ENTRIES, SdpLut

FRAC = 35
LE_LAST, LO_LAST = 64, 256
B = npt.NDArray[np.bool_]


class Lookup:
    """One table's answer for every element: flags, entry index and 35-bit fraction."""

    def __init__(self, uflow: B, oflow: B, index: I64, fraction: I64) -> None:
        self.uflow, self.oflow, self.index, self.fraction = uflow, oflow, index, fraction

    @property
    def hit(self) -> B:
        out: B = ~(self.uflow | self.oflow)
        return out


def _linear(x: I64, start: int, select: int, last: int, signed_fraction: bool) -> Lookup:
    """The linear method: ``IntSignedShiftRightTZ`` of ``x - start`` into a 9-bit index."""
    uflow = x <= start
    u = np.where(uflow, 1, x - start)  # 1 .. 2^32 - 1 where it matters
    # a negative select shifts left (saturated at 511 below)
    idx = u >> min(select, 63) if select >= 0 else np.minimum(u, 512) << min(-select, 10)
    idx = np.minimum(idx, 511)
    oflow = ~uflow & (idx >= last)
    index = np.where(uflow, 0, np.where(oflow, last, idx))
    fraction = _linear_fraction(u, select, signed_fraction)
    return Lookup(uflow, oflow, index, np.where(uflow | oflow, 0, fraction))


def _linear_fraction(u: I64, select: int, signed: bool) -> I64:
    """``((35-bit)(u & ((1 << sel) - 1))) >> (sel - 35)`` with ac_int's rules (a negative shift goes
    the other way, a shift past the width gives 0, the mask of a select >= 64 keeps every bit); the LE
    table holds the masked value in a signed 32-bit integer, LO in an unsigned one."""
    if select <= 0:
        return np.zeros_like(u)
    masked = u if select >= 32 else u & ((1 << select) - 1)
    if signed:
        masked = wrap(masked, 32)
    v35 = masked & ((1 << FRAC) - 1)
    if select <= FRAC:
        return (v35 << (FRAC - select)) & ((1 << FRAC) - 1)
    return v35 >> min(select - FRAC, 63)


def _exponent(x: I64, start: int, offset: int) -> Lookup:
    """The LE exponent method: the index is the position of the leading one of ``x - start``."""
    uflow0 = x <= start
    sub = np.where(uflow0, 1, x - start)
    e = (np.frexp(sub.astype(np.float64))[1] - 1).astype(np.int64)  # exact for integers < 2^53
    fra = sub - (np.int64(1) << e)
    below = e < offset
    uflow = uflow0 | below
    idx = e - offset
    oflow = ~uflow & (idx >= LE_LAST)
    index = np.where(uflow, 0, np.where(oflow, LE_LAST, idx))
    fraction = (fra << (FRAC - e)) & ((1 << FRAC) - 1)
    return Lookup(uflow, oflow, index, np.where(uflow | oflow, 0, fraction))


def _choose(le: Lookup, lo: Lookup, lut: SdpLut) -> tuple[B, Lookup]:
    """``sdp_y_idx.cpp``'s index muxing: (use LO?, the chosen answer)."""
    both_u = le.uflow & lo.uflow
    both_o = le.oflow & lo.oflow
    both_hit = le.hit & lo.hit
    both_miss = ~le.hit & ~lo.hit
    use_lo = np.where(both_u, bool(lut.uflow_priority),
                      np.where(both_o, bool(lut.oflow_priority),
                               np.where(both_hit | both_miss, bool(lut.hybrid_priority), ~le.hit)))
    pick = Lookup(np.where(use_lo, lo.uflow, le.uflow), np.where(use_lo, lo.oflow, le.oflow),
                  np.where(use_lo, lo.index, le.index), np.where(use_lo, lo.fraction, le.fraction))
    return use_lo, pick


def lut_int(x: I64, lut: SdpLut) -> I64:
    """The LUT's output for 32-bit inputs ``x`` (INT8/INT16 processing)."""
    le_start, le_end = int(wrap(lut.le_start, 32)), int(wrap(lut.le_end, 32))
    lo_start, lo_end = int(wrap(lut.lo_start, 32)), int(wrap(lut.lo_end, 32))
    offset = sign_extend(lut.le_index_offset, 8)
    exponent = lut.le_function == 0
    if exponent:
        le = _exponent(x, le_start, offset)
    else:
        le = _linear(x, le_start, sign_extend(lut.le_index_select, 8), LE_LAST, signed_fraction=True)
    lo = _linear(x, lo_start, sign_extend(lut.lo_index_select, 8), LO_LAST, signed_fraction=False)
    use_lo, pick = _choose(le, lo, lut)

    le_tab = wrap(np.asarray(lut.le_table, dtype=np.int64), 16)
    lo_tab = wrap(np.asarray(lut.lo_table, dtype=np.int64), 16)
    out = np.empty_like(x)
    # Hits interpolate between the entry and the next one.
    hit = np.nonzero(~(pick.uflow | pick.oflow))
    if hit[0].size:
        idx, frac, lo_h = pick.index[hit], pick.fraction[hit], use_lo[hit]
        y0 = np.where(lo_h, lo_tab[np.minimum(idx, LO_LAST)], le_tab[np.minimum(idx, LE_LAST)])
        y1 = np.where(lo_h, lo_tab[np.minimum(idx + 1, LO_LAST)], le_tab[np.minimum(idx + 1, LE_LAST)])
        out[hit] = saturate(shift_right_round(y0 * ((1 << FRAC) - frac) + y1 * frac, FRAC), 32)
    # Misses extrapolate from the table's end with the slope registers of that table and side.
    for lo_side, over, name, start_end in ((False, False, "le_slope_uflow", le_start),
                                           (False, True, "le_slope_oflow", le_end),
                                           (True, False, "lo_slope_uflow", lo_start),
                                           (True, True, "lo_slope_oflow", lo_end)):
        sel = np.nonzero((use_lo == lo_side) & (pick.oflow if over else pick.uflow))
        if not sel[0].size:
            continue
        scale = sign_extend(getattr(lut, f"{name}_scale"), 16)
        shift = sign_extend(getattr(lut, f"{name}_shift"), 5)
        base = start_end
        if exponent and offset > 0 and not lo_side and not over:
            # (uint32_t)1 << offset in the C model's wrapper: a 32-bit x86 shift, the count mod 32
            base += 1 << (offset & 31)
        b = (x[sel] - base) * scale
        # IntSignedShiftRight<50, 5, 32>: a negative shift shifts left; saturated to 32 bits either way
        c = shift_right_round(b, shift) if shift >= 0 else np.clip(b, -(1 << 40), 1 << 40) << -shift
        y0 = (lo_tab if lo_side else le_tab)[LO_LAST if lo_side and over else LE_LAST if over else 0]
        out[sel] = saturate(y0 + saturate(c, 32), 32)
    return out


def _fp_table_lookup(x: I64, start: int, select: int, last: int) -> Lookup:
    """The linear method in FP32: ``FpFloatToIntFrac`` of ``x - start`` (non-positive and NaN
    differences underflow)."""
    d = fp_sub(x, start, FP32)
    s, e, m = split(d, FP32)
    uflow = (s == 1) | ((e == 0) & (m == 0)) | ((e == FP32.emax) & (m != 0))
    ipart, frac = fp32_to_int_frac(d, select)
    oflow = ~uflow & (ipart >= last)
    index = np.where(uflow, 0, np.where(oflow, last, ipart))
    return Lookup(uflow, oflow, index, np.where(uflow | oflow, 0, frac))


def _fp_exponent(x: I64, start: int, offset: int) -> Lookup:
    """The exponent method in FP32: the index is the exponent of ``x - start`` minus the offset."""
    d = fp_sub(x, start, FP32)
    s, e, m = split(d, FP32)
    uflow = (s == 1) | ((e == 0) & (m == 0)) | ((e == FP32.emax) & (m != 0))
    signed_e = e - FP32.bias
    uflow = uflow | (signed_e < offset)
    idx = signed_e - offset
    oflow = ~uflow & (idx >= LE_LAST)
    index = np.where(uflow, 0, np.where(oflow, LE_LAST, idx))
    return Lookup(uflow, oflow, index, np.where(uflow | oflow, 0, m << (FRAC - FP32.m)))


def lut_fp16(x: I64, lut: SdpLut) -> I64:
    """The LUT's output for FP32 inputs (bit patterns) in FP16 processing: table entries and slope
    scales are FP16, start/end registers FP32; hits interpolate in FP17, misses extrapolate
    ``y0 + (x - (offset + bias))·scale`` (FP32 difference, FP17 product and sum)."""
    offset = sign_extend(lut.le_index_offset, 8)
    exponent = lut.le_function == 0
    le_start, le_end = lut.le_start & 0xFFFFFFFF, lut.le_end & 0xFFFFFFFF
    lo_start, lo_end = lut.lo_start & 0xFFFFFFFF, lut.lo_end & 0xFFFFFFFF
    if exponent:
        le = _fp_exponent(x, le_start, offset)
    else:
        le = _fp_table_lookup(x, le_start, sign_extend(lut.le_index_select, 8), LE_LAST)
    lo = _fp_table_lookup(x, lo_start, sign_extend(lut.lo_index_select, 8), LO_LAST)
    use_lo, pick = _choose(le, lo, lut)
    le_tab = np.asarray(lut.le_table, dtype=np.int64) & 0xFFFF
    lo_tab = np.asarray(lut.lo_table, dtype=np.int64) & 0xFFFF
    out = np.empty_like(x)
    hit = np.nonzero(~(pick.uflow | pick.oflow))
    if hit[0].size:
        idx, frac, lo_h = pick.index[hit], pick.fraction[hit], use_lo[hit]
        y0 = np.where(lo_h, lo_tab[np.minimum(idx, LO_LAST)], le_tab[np.minimum(idx, LE_LAST)])
        y1 = np.where(lo_h, lo_tab[np.minimum(idx + 1, LO_LAST)], le_tab[np.minimum(idx + 1, LE_LAST)])
        a0 = np.where(frac == 0, ONE_FP17, fraction_to_fp17((1 << FRAC) - frac))
        a1 = fraction_to_fp17(frac)
        out[hit] = fp_add(fp_mul(a0, fp16_to_fp17(y0), FP17), fp_mul(a1, fp16_to_fp17(y1), FP17), FP17)
    for lo_side, over, name, start_end in ((False, False, "le_slope_uflow_scale", le_start),
                                           (False, True, "le_slope_oflow_scale", le_end),
                                           (True, False, "lo_slope_uflow_scale", lo_start),
                                           (True, True, "lo_slope_oflow_scale", lo_end)):
        sel = np.nonzero((use_lo == lo_side) & (pick.oflow if over else pick.uflow))
        if not sel[0].size:
            continue
        # An exponent LE underflow measures from start + 2^offset: the C model's float pow(2, offset).
        bias = _pow2_fp32(offset) if exponent and not lo_side and not over else 0
        ob = fp_add(start_end, bias, FP32)
        a = fp32_to_fp17(fp_sub(x[sel], ob, FP32))
        y0 = (lo_tab if lo_side else le_tab)[LO_LAST if lo_side and over else LE_LAST if over else 0]
        out[sel] = fp_add(fp16_to_fp17(y0), fp_mul(a, fp16_to_fp17(getattr(lut, name) & 0xFFFF), FP17), FP17)
    return fp17_to_fp32(out)


ONE_FP17 = 0x7C00


def _pow2_fp32(n: int) -> int:
    """The FP32 bit pattern of 2^n (n = -128 .. 127), subnormal below 2^-126."""
    if n >= -126:
        return (n + 127) << 23
    return 1 << (23 + n + 126)


_LUT_FIELDS = (("le_function", 1), ("uflow_priority", 1), ("oflow_priority", 1), ("hybrid_priority", 1),
               ("le_index_offset", 0xFF), ("le_index_select", 0xFF), ("lo_index_select", 0xFF),
               ("le_start", 0xFFFFFFFF), ("le_end", 0xFFFFFFFF), ("lo_start", 0xFFFFFFFF),
               ("lo_end", 0xFFFFFFFF), ("le_slope_uflow_scale", 0xFFFF), ("le_slope_oflow_scale", 0xFFFF),
               ("lo_slope_uflow_scale", 0xFFFF), ("lo_slope_oflow_scale", 0xFFFF),
               ("le_slope_uflow_shift", 0x1F), ("le_slope_oflow_shift", 0x1F), ("lo_slope_uflow_shift", 0x1F),
               ("lo_slope_oflow_shift", 0x1F))


def check_lut(lut: SdpLut) -> None:
    """Refuse LUT parameters the registers cannot hold (fields as unsigned register values or as
    the signed values they encode)."""
    for name, top in _LUT_FIELDS:
        v = getattr(lut, name)
        if not -((top + 1) >> 1) <= v <= top:
            raise DlaError(NvError.BadValue,
                           f"SDP LUT: {name} {v} does not fit its {top.bit_length()}-bit field")
    for name, n in (("le_table", LE_ENTRIES), ("lo_table", LO_ENTRIES)):
        tab = getattr(lut, name)
        if len(tab) != n:
            raise DlaError(NvError.BadValue, f"SDP LUT: {name} has {len(tab)} entries, the table {n}")
        if any(not -0x8000 <= int(v) <= 0xFFFF for v in tab):
            raise DlaError(NvError.BadValue, f"SDP LUT: {name} has an entry outside 16 bits")
