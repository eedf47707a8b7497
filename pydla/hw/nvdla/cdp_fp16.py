"""The CDP's FP16 path, as nvdla/hw ``cmod/hls_wrapper/cdp_hls_wrapper.cpp`` (``HLS_CDP_lookup_fp16``,
``HLS_CDP_lookup_lut``) computes it, in NVDLA's float (pydla.hw.nvdla.nvfloat).

Per element: the FP16 input (NaN flushed to +0 with ``nan_to_zero``; channels outside the cube are +0)
becomes FP17 and FP32; its FP32 square ``q`` (the value itself with ``sqsum_bypass``) is summed over
the window in this order: ``(q[c-1] + q[c+1]) + q[c]``, then ``+ (q[c-2] + q[c+2])``, ``+ (q[c-3] +
q[c+3])``, ``+ (q[c-4] + q[c+4])`` as far as the window reaches. Each table is looked up on the sum:
``d = s - start`` (FP32; ``d <= 0`` or NaN is an underflow); the LE exponent method takes the index
from d's FP32 exponent minus ``le_index_offset`` and the fraction from its top 16 mantissa bits; the
linear method divides d by ``2^select`` in C's float (the index its integer part, the fraction the
next 16 bits). A hit interpolates ``y0 + (y1 - y0)·f`` (the difference in FP32, the product and sum in
FP17); a miss extrapolates ``y + (s - origin)·slope`` in FP17 from the table's end (the origin of an
exponent LE underflow is ``le_start + 2^le_index_offset``), slopes being FP16 patterns. The chosen
answer multiplies the FP17 input (``mul_bypass``: the answer itself, or the input when it is NaN) and
is rounded to FP16.

Speed (bench_nvdla_blocks, LRN 5 at 56x56x64, 2 shared cores): 35-50 ms, 12-25x a float32 LRN in numpy
(was 140-460 ms, 30-120x). The squares come from a table of all FP16 patterns; the window sum is
float32's own addition when every square is +0 or a normal value (then NVDLA's FP32 add is IEEE's);
each table's range classification is computed once and its interpolation only for the elements that
take its answer.

Usage::

    out_bits, stats = lrn_fp16(x_bits, channels, params)   # (lanes, H, W) FP16 patterns
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.cdp_lut import B, LutStats, Table, select
from pydla.hw.nvdla.cdp_params import EXPONENT, CdpParams
from pydla.hw.nvdla.intmath import I64, sign_extend
from pydla.hw.nvdla.nvfloat import (
    FP17,
    FP32,
    fp16_to_fp17,
    fp16_to_fp32,
    fp17_to_fp16,
    fp17_to_fp32,
    fp32_to_fp17,
    fp_add,
    fp_mul,
    fp_sub,
    fraction_to_fp17,
)


def _as_float(bits: I64) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return out


def _float_bits(value: float) -> int:
    return int(np.array([value], dtype=np.float32).view(np.uint32)[0])


@functools.cache
def _fraction16_to_fp17() -> I64:
    """``FpFractionToFloat`` of every 16-bit fraction (shifted to the 35-bit input), once."""
    out: I64 = fraction_to_fp17(np.arange(1 << 16, dtype=np.int64) << 19)
    return out


@functools.cache
def _fp16_squares() -> I64:
    """The FP32 square (NVDLA's FpMul) of every FP16 pattern, once: the CDP squares FP16 inputs."""
    v32 = fp17_to_fp32(fp16_to_fp17(np.arange(1 << 16, dtype=np.int64)))
    out: I64 = fp_mul(v32, v32, FP32)
    return out


def _interpolation(table: tuple[int, ...]) -> tuple[I64, I64]:
    """Per table entry i: FP17(FP32(y[i+1]) - FP32(y[i])) and FP17(y[i])."""
    tab = np.array([int(v) & 0xFFFF for v in table], dtype=np.int64)
    diff17 = fp32_to_fp17(fp_sub(fp16_to_fp32(tab[1:]), fp16_to_fp32(tab[:-1]), FP32))
    return diff17, fp16_to_fp17(tab)


@dataclass(frozen=True)
class _Ranges:
    """One table's view of the sums: ``s - start`` (FP32), index, 16-bit fraction, under/overflow."""

    sub: I64
    index: I64
    frac16: I64
    uflow: B
    oflow: B


def _ranges(s: I64, upper: int, exp_mode: bool, start: int, index_offset: int, index_select: int) -> _Ranges:
    sub = fp_sub(s, start & 0xFFFFFFFF, FP32)
    subf = _as_float(sub)
    with np.errstate(invalid="ignore"):
        uflow = ~(subf > 0)  # <= 0 or NaN
    if exp_mode:
        index = ((sub >> 23) & 0xFF) - 127 - index_offset
        frac16 = (sub >> 7) & 0xFFFF
        uflow = uflow | (index < 0)
        oflow = ~uflow & (index >= upper)
    else:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            scaled = (subf.astype(np.float64) / 2.0 ** index_select).astype(np.float32)
            oflow = ~uflow & (scaled >= upper)
            whole = np.where(uflow | oflow, 0, np.trunc(np.nan_to_num(scaled))).astype(np.int64)
            kept = np.where(uflow | oflow, np.float32(0), scaled)
            frac = (kept - whole.astype(np.float32)) * np.float32(65536)  # C's float arithmetic
        index = whole
        frac16 = frac.astype(np.int64) & 0xFFFF
    return _Ranges(sub, index, frac16, uflow, oflow)


def lookup(s: I64, table: tuple[int, ...], upper: int, exp_mode: bool, start: int, end: int,
           slopes: tuple[int, int], index_offset: int, index_select: int, wanted: B | None = None,
           ranges: _Ranges | None = None) -> Table:
    """``HLS_CDP_lookup_lut``: one table's FP17 answer for FP32 sums ``s`` (its range classification for
    every element; its value only where ``wanted``, all when None). ``ranges``: the classification
    when already computed."""
    r = _ranges(s, upper, exp_mode, start, index_offset, index_select) if ranges is None else ranges
    uflow, oflow = r.uflow, r.oflow
    tab = np.array([int(v) & 0xFFFF for v in table], dtype=np.int64)
    value = np.zeros(s.shape, dtype=np.int64)
    keep = np.ones(s.shape, dtype=bool) if wanted is None else wanted
    hit = ~(uflow | oflow) & keep
    uflow_v, oflow_v = uflow & keep, oflow & keep
    if hit.any():  # each path is computed for its own elements only
        diff17, y17 = _interpolation(table)
        i = np.clip(r.index[hit], 0, upper - 1)
        product = fp_mul(diff17[i], _fraction16_to_fp17()[r.frac16[hit]], FP17)
        value[hit] = fp_add(product, y17[i], FP17)
    if uflow_v.any():
        if exp_mode:
            # C's float(pow(2, k)), 0 from k <= -127
            offset = 0.0 if index_offset <= -127 else float(np.float32(2.0 ** index_offset))
            origin_bits = fp_add(start & 0xFFFFFFFF, _float_bits(offset), FP32)
            under_diff = fp_sub(s[uflow_v], origin_bits, FP32)
        else:
            under_diff = r.sub[uflow_v]
        value[uflow_v] = fp_add(fp_mul(fp32_to_fp17(under_diff), fp16_to_fp17(slopes[0]), FP17),
                                fp16_to_fp17(int(tab[0])), FP17)
    if oflow_v.any():
        over_diff = fp_sub(s[oflow_v], end & 0xFFFFFFFF, FP32)
        value[oflow_v] = fp_add(fp_mul(fp32_to_fp17(over_diff), fp16_to_fp17(slopes[1]), FP17),
                                fp16_to_fp17(int(tab[upper])), FP17)
    return Table(uflow, oflow, value)


def _window_sum(q: I64, normalz_len: int) -> I64:
    """Σ over the window in the C model's order; ``q`` is (lanes + 8, H, W) with 4 zero lanes each side."""
    c = q.shape[0] - 8

    def at(k: int) -> I64:  # channel c + k for every c
        out: I64 = q[4 + k:4 + k + c]
        return out

    top = q >> 23  # the sign and exponent
    if ((q == 0) | ((top >= 2) & (top <= 250))).all():
        # +0 and positive values in [2^-125, 2^124) (the squares of FP16 values are): every partial sum
        # is +0 or at least its largest term, and below 9·2^124 (no overflow), so NVDLA's FP32 add,
        # which differs from IEEE's for specials and the lowest binade only, is IEEE's float32 add
        f = q.astype(np.uint32).view(np.float32)

        def atf(k: int) -> npt.NDArray[np.float32]:
            return f[4 + k:4 + k + c]

        sf = (atf(-1) + atf(1)) + atf(0)
        for k in range(2, normalz_len + 2):
            sf = sf + (atf(-k) + atf(k))
        out: I64 = sf.view(np.uint32).astype(np.int64)
        return out
    s = fp_add(fp_add(at(-1), at(1), FP32), at(0), FP32)
    for k in range(2, normalz_len + 2):
        s = fp_add(s, fp_add(at(-k), at(k), FP32), FP32)
    return s


def lrn_fp16(x: npt.NDArray[np.generic], channels: int, p: CdpParams) -> tuple[I64, LutStats]:
    """Output FP16 patterns (lanes, H, W) for input patterns (lanes, H, W) of which ``channels`` are real."""
    bits = np.asarray(x, dtype=np.int64) & 0xFFFF
    lanes = bits.shape[0]
    bits = np.where(np.arange(lanes)[:, None, None] < channels, bits, 0)
    if p.nan_to_zero:
        bits = np.where((((bits >> 10) & 31) == 31) & ((bits & 0x3FF) != 0), 0, bits)
    xi17 = fp16_to_fp17(bits)
    v32 = fp17_to_fp32(xi17)
    if p.sqsum_bypass:
        s = v32
    else:
        q = np.zeros((lanes + 8, *bits.shape[1:]), dtype=np.int64)
        q[4:4 + lanes] = _fp16_squares()[bits]
        s = _window_sum(q, p.normalz_len)
    lut = p.lut
    le_args = (lut.le_table, 64, lut.le_function == EXPONENT, lut.le_start_low, lut.le_end_low,
               (lut.le_slope_uflow_scale, lut.le_slope_oflow_scale), sign_extend(lut.le_index_offset, 8),
               sign_extend(lut.le_index_select, 8))
    lo_args = (lut.lo_table, 256, False, lut.lo_start_low, lut.lo_end_low,
               (lut.lo_slope_uflow_scale, lut.lo_slope_oflow_scale), 0, sign_extend(lut.lo_index_select, 8))
    empty = np.zeros(s.shape, dtype=bool)
    # the ranges of both tables decide which answers, then each table computes only its chosen elements
    le_r = _ranges(s, 64, le_args[2], le_args[3], le_args[6], le_args[7])
    lo_r = _ranges(s, 256, False, lo_args[3], 0, lo_args[7])
    use_lo, stats = select(lookup(s, *le_args, wanted=empty, ranges=le_r),
                           lookup(s, *lo_args, wanted=empty, ranges=lo_r), lut)
    le = lookup(s, *le_args, wanted=~use_lo, ranges=le_r)
    lo = lookup(s, *lo_args, wanted=use_lo, ranges=lo_r)
    answer = np.where(use_lo, lo.value, le.value)
    if p.mul_bypass:
        nan = np.isnan(_as_float(v32))
        out17 = np.where(nan, xi17, answer)
    else:
        out17 = fp_mul(xi17, answer, FP17)
    return fp17_to_fp16(out17), stats
