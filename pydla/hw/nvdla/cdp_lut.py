"""The CDP's lookup tables on integer sums, as nvdla/hw ``cmod/cdp/NV_NVDLA_cdp.cpp`` (``lookup_lut``,
``lookup_lut_int8``) computes them; the selection between the two tables (also for FP16).

Both tables are looked up on the square sum ``s``:

- LE (65 entries), linear: ``t = s - le_start``, index ``t >> select`` (``t << -select`` for a
  negative select), fraction the ``select`` bits shifted out, scaled to 16 bits. Exponent method:
  index ``floor(log2 t) - le_index_offset``, fraction ``t - 2^floor(log2 t)`` scaled to 16 bits.
  Underflow when ``t <= 0`` or the index is negative, overflow when it reaches 64.
- LO (257 entries): linear with ``lo_start`` and ``lo_index_select``; overflow at 256.
- A hit interpolates ``y0 + round((y1 - y0)·f / 2^16)``; an underflow extrapolates
  ``table[0] + round((s - start [- 2^le_index_offset for an exponent LE])·scale / 2^shift)``, an
  overflow ``table[last] + round((s - end)·scale / 2^shift)``, with the 5-bit shift read as signed
  (negative: a left shift), the slope term saturated to 56 bits and the result to 16 bits. The C
  model rounds these in double precision (half away from zero, after the int64 value's conversion to
  double), which :func:`convert` reproduces.
- Start and end are 38-bit registers (LOW + 6 bits of HIGH, sign-extended). The index selects are
  8-bit fields the INT16 path reads sign-extended from bit 6, the INT8 path from bit 5; shift counts
  beyond what C defines behave as on x86-64 (the count modulo the operand width), the C model's
  platform.

Which table answers: both underflow -> ``uflow_priority``; both overflow -> ``oflow_priority``;
exactly one hit -> that one; otherwise ``hybrid_priority`` (0 LE, 1 LO).

Usage::

    result, stats = lut_int(sums, params.lut, select_sign_bit=6)     # INT16
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.cdp_params import EXPONENT, PRI_LO, CdpLut
from pydla.hw.nvdla.intmath import I64, sign_extend

B = npt.NDArray[np.bool_]
SLOPE_BITS = 56  # INTERP_INTERMIDIATE_BITS


@dataclass(frozen=True)
class Table:
    """One table's answer for every element: underflow / overflow flags and the value."""

    uflow: B
    oflow: B
    value: I64

    @property
    def hit(self) -> B:
        out: B = ~(self.uflow | self.oflow)
        return out


@dataclass(frozen=True)
class LutStats:
    """The CDP's ``D_PERF_LUT_*`` counters."""

    uflow: int = 0
    oflow: int = 0
    hybrid: int = 0
    le_hit: int = 0
    lo_hit: int = 0


def convert(value: npt.ArrayLike, shift: int, bits: int) -> I64:
    """The C model's ``convert(value, shift, bits, signed)``: ``value / 2^shift`` in double precision,
    rounded half away from zero (+-0.5, truncated), saturated to ``bits`` signed bits."""
    vf = np.asarray(value, dtype=np.int64).astype(np.float64) / float(2.0 ** shift)
    pos = vf > 0
    rounded = np.where(pos, vf + 0.5, vf - 0.5)
    big = np.abs(vf) >= 2.0 ** 63
    safe = np.where(big, 0.0, np.trunc(rounded)).astype(np.int64)
    lim = np.int64(1) << (bits - 1)
    out: I64 = np.clip(np.where(big, np.where(pos, lim, -lim - 1), safe), -lim, lim - 1)
    return out


def _clamp16(x: I64) -> I64:
    out: I64 = np.clip(x, -0x8000, 0x7FFF)
    return out


def _signed(v: int, bits: int) -> int:
    return sign_extend(v, bits)


def register_38(low: int, high: int) -> int:
    """A CDP start/end register pair as the signed 38-bit value the C model uses."""
    return sign_extend(((high & 0x3F) << 32) | (low & 0xFFFFFFFF), 38)


def index_select(field: int, sign_bit: int) -> int:
    """An 8-bit index select as the C model reads it: sign-extended from ``sign_bit``."""
    v = field & 0xFF
    return (v & ((1 << sign_bit) - 1)) - (1 << sign_bit) if v >> sign_bit & 1 else v


@functools.lru_cache(maxsize=64)  # a LUT's tables, the same at every run of a network
def _table(values: tuple[int, ...]) -> I64:
    out = np.array([sign_extend(int(v), 16) for v in values], dtype=np.int64)
    out.flags.writeable = False
    return out


def _slope(s: I64, origin: int, scale: int, shift: int, entry: int) -> I64:
    term = convert((s - origin) * np.int64(_signed(scale, 16)), _signed(shift, 5), SLOPE_BITS)
    return _clamp16(entry + term)


def _interpolate(table: I64, index: I64, frac: I64, last: int) -> I64:
    i = np.clip(index, 0, last - 1)
    y0, y1 = table[i], table[i + 1]
    return _clamp16(y0 + convert((y1 - y0) * frac, 16, SLOPE_BITS))


def _combine(s: I64, uflow: B, oflow: B, under: tuple[int, int, int, int], over: tuple[int, int, int, int],
             hit: tuple[I64, I64, I64, int]) -> I64:
    """Each element's answer, computed for the elements that take that path only."""
    value = np.empty(s.shape, dtype=np.int64)
    hit_mask = ~(uflow | oflow)
    origin, scale, shift, entry = under
    if uflow.any():
        value[uflow] = _slope(s[uflow], origin, scale, shift, entry)
    end, scale, shift, entry = over
    if oflow.any():
        value[oflow] = _slope(s[oflow], end, scale, shift, entry)
    table, index, frac, last = hit
    if hit_mask.any():
        value[hit_mask] = _interpolate(table, index[hit_mask], frac[hit_mask], last)
    return value


def linear(s: I64, start: int, end: int, select: int, table: I64, last: int, scales: tuple[int, int, int, int]
           ) -> Table:
    """A linear table: ``scales`` are (underflow scale, shift, overflow scale, shift)."""
    t = s - np.int64(start)
    index = t << np.int64(-select & 63) if select < 0 else t >> np.int64(select & 63)
    uflow = (index < 0) | (t <= 0)
    oflow = ~uflow & (index >= last)
    if select < 0:
        frac = np.zeros_like(t)
    else:
        frac = t & np.int64((1 << (select & 31)) - 1)
        frac = frac >> np.int64((select - 16) & 63) if select > 16 else frac << np.int64((16 - select) & 63)
    value = _combine(s, uflow, oflow, (start, scales[0], scales[1], int(table[0])),
                     (end, scales[2], scales[3], int(table[last])), (table, index, frac, last))
    return Table(uflow, oflow, value)


def exponent(s: I64, start: int, end: int, offset: int, table: I64, scales: tuple[int, int, int, int]
             ) -> Table:
    """The LE table's exponent method (``offset`` is LE_INDEX_OFFSET as a signed byte)."""
    t = s - np.int64(start)
    log = np.where(t > 0, np.frexp(np.maximum(t, 1).astype(np.float64))[1].astype(np.int64) - 1, 0)
    index = log - offset
    uflow = (index < 0) | (t <= 0)
    oflow = ~uflow & (index >= 64)
    bias = 0 if offset < 0 else int(np.int64(1) << np.int64(offset & 63))
    frac = t - (np.int64(1) << log)
    frac = np.where(log > 16, frac >> np.maximum(log - 16, 0), frac << np.maximum(16 - log, 0))
    with np.errstate(over="ignore"):
        under_origin = np.int64(start) + np.int64(bias)  # wraps like the C model's int64 arithmetic
    value = _combine(s, uflow, oflow, (int(under_origin), scales[0], scales[1], int(table[0])),
                     (end, scales[2], scales[3], int(table[64])), (table, index, frac, 64))
    return Table(uflow, oflow, value)


UFLOW, OFLOW, HYBRID, LE_HIT, LO_HIT = range(5)  # which case an element is: the D_PERF_LUT_* counters


def categories(le: Table, lo: Table, lut: CdpLut) -> tuple[B, npt.NDArray[np.int8]]:
    """Which table answers each element (True: LO), and the element's case (UFLOW … LO_HIT)."""
    both_u = le.uflow & lo.uflow
    both_o = le.oflow & lo.oflow
    one_hit = le.hit ^ lo.hit
    use_lo = np.where(both_u, lut.uflow_priority == PRI_LO,
                      np.where(both_o, lut.oflow_priority == PRI_LO,
                               np.where(one_hit, lo.hit, lut.hybrid_priority == PRI_LO)))
    case = np.where(both_u, UFLOW, np.where(both_o, OFLOW, np.where(one_hit, np.where(le.hit, LE_HIT, LO_HIT),
                                                                       HYBRID))).astype(np.int8)
    return use_lo, case


def stats_of(case: npt.NDArray[np.int8]) -> LutStats:
    """The counters of elements in ``case``."""
    n = np.bincount(case.reshape(-1), minlength=5)
    return LutStats(uflow=int(n[UFLOW]), oflow=int(n[OFLOW]), hybrid=int(n[HYBRID]), le_hit=int(n[LE_HIT]),
                    lo_hit=int(n[LO_HIT]))


def select(le: Table, lo: Table, lut: CdpLut) -> tuple[B, LutStats]:
    """Which table answers (True: LO) and the counters."""
    use_lo, case = categories(le, lo, lut)
    return use_lo, stats_of(case)


def lut_elements(s: I64, lut: CdpLut, select_sign_bit: int) -> tuple[I64, npt.NDArray[np.int8]]:
    """The LUT's 16-bit answer for integer square sums ``s`` (INT16: ``select_sign_bit`` 6, INT8: 5) and
    each element's case (UFLOW … LO_HIT)."""
    le_t, lo_t = _table(lut.le_table), _table(lut.lo_table)
    le_scales = (lut.le_slope_uflow_scale, lut.le_slope_uflow_shift, lut.le_slope_oflow_scale,
                 lut.le_slope_oflow_shift)
    lo_scales = (lut.lo_slope_uflow_scale, lut.lo_slope_uflow_shift, lut.lo_slope_oflow_scale,
                 lut.lo_slope_oflow_shift)
    le_start = register_38(lut.le_start_low, lut.le_start_high)
    le_end = register_38(lut.le_end_low, lut.le_end_high)
    lo_start = register_38(lut.lo_start_low, lut.lo_start_high)
    lo_end = register_38(lut.lo_end_low, lut.lo_end_high)
    if lut.le_function == EXPONENT:
        le = exponent(s, le_start, le_end, _signed(lut.le_index_offset, 8), le_t, le_scales)
    else:
        le_select = index_select(lut.le_index_select, select_sign_bit)
        le = linear(s, le_start, le_end, le_select, le_t, 64, le_scales)
    lo = linear(s, lo_start, lo_end, index_select(lut.lo_index_select, select_sign_bit), lo_t, 256, lo_scales)
    use_lo, case = categories(le, lo, lut)
    out: I64 = np.where(use_lo, lo.value, le.value)
    return out, case


def lut_int(s: I64, lut: CdpLut, select_sign_bit: int) -> tuple[I64, LutStats]:
    """The LUT's 16-bit answer for integer square sums ``s`` (INT16: ``select_sign_bit`` 6, INT8: 5)."""
    out, case = lut_elements(s, lut, select_sign_bit)
    return out, stats_of(case)


class LutMemo:
    """The LUT's answers and cases for the sums ``low`` … ``high``, filled as sums are met: a sum's
    answer depends on the sum and the LUT's registers only. INT8 LRN sums lie in 0 … 9·256² (or
    -256 … 255 with the square sum bypassed), so a network's CDP computes each sum once."""

    def __init__(self, lut: CdpLut, select_sign_bit: int, low: int, high: int) -> None:
        self.lut, self.bit, self.low = lut, select_sign_bit, low
        self.values = np.zeros(high - low + 1, dtype=np.int64)
        self.cases = np.full(high - low + 1, -1, dtype=np.int8)  # -1: not met yet

    def __call__(self, s: I64) -> tuple[I64, LutStats]:
        """``lut_int(s, ...)`` for sums within the memo's range (the caller checks)."""
        idx = s - self.low
        case = self.cases[idx]
        missing = case < 0
        if missing.any():
            new = np.unique(idx[missing])
            self.values[new], self.cases[new] = lut_elements(new + self.low, self.lut, self.bit)
            case = self.cases[idx]
        out: I64 = self.values[idx]
        return out, stats_of(case)
