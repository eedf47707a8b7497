"""NVDLA's floating point, bit for bit: FP16 (1/5/10), FP17 (1/6/10) and FP32 (1/8/23): the
bit-level algorithms, the specification that pydla.hw.nvdla.nvfloat's fast paths fall back to.

NVIDIA's C model computes every float with its own bit-level library (nvdla/hw
``cmod/hls/include/nvdla_float.h``), which is close to IEEE-754 round-to-nearest-even but not
equal to it. The rules reproduced here, all vectorised on int64 arrays of bit patterns:

- An operand with exponent 0 and a non-zero mantissa is *not* subnormal: it is read as
  ``1.mantissa · 2^(0 - bias)`` (the implied one is kept); only exponent 0 with mantissa 0 is zero.
  The all-ones exponent with mantissa 0 (IEEE's infinity) is an ordinary number ``2^(max - bias)``
  to add and multiply; a NaN (all-ones exponent, mantissa non-zero) propagates (the first operand's).
- Add: the smaller operand is aligned into a ``2·M + 3``-bit field, so bits shifted further out are
  lost (no sticky bit); the sum is normalised, rounded to nearest even; a result below the smallest
  normal becomes zero with the sign of the larger operand (``x + (-x)`` has the first operand's sign
  when the magnitudes tie). Multiply: exact product, rounded to nearest even; results below the
  normal range are zero (signed).
- Overflow gives the largest finite value (all-ones mantissa, exponent max - 1), never infinity.
- FP32 -> FP16 rounds to nearest even and produces FP16 subnormals; FP32 -> FP17 flushes them to
  zero; NaNs keep the low mantissa bits (FP32 NaN 0x7fc00000 becomes 0x7c00); FP16 -> FP32 converts
  subnormals exactly and copies a NaN's mantissa into the low bits; FP16/FP17 infinities become the
  largest finite value of the wider format.
- Max/min compare sign, exponent and mantissa (+0 is greater than -0), NaN first.

Usage::

    fp_add(np.array([0x3c00]), np.array([0x3c00]), FP16)   # [0x4000]: 1 + 1 = 2
    fp32_to_fp16(np.array([0x7f800000]))                   # [0x7bff]: saturates

(Use pydla.hw.nvdla.nvfloat: the same functions, computed with numpy's IEEE floats where NVDLA's
rules give the same bits, and with these algorithms elsewhere.)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.intmath import I64


class Fmt(NamedTuple):
    """A float format: exponent and mantissa widths."""

    e: int
    m: int

    @property
    def bias(self) -> int:
        return (1 << (self.e - 1)) - 1

    @property
    def emax(self) -> int:
        return (1 << self.e) - 1

    @property
    def width(self) -> int:
        return 1 + self.e + self.m


FP16 = Fmt(5, 10)
FP17 = Fmt(6, 10)
FP32 = Fmt(8, 23)


def _i64(x: npt.ArrayLike) -> I64:
    return np.asarray(x, dtype=np.int64)


def split(bits: npt.ArrayLike, f: Fmt) -> tuple[I64, I64, I64]:
    """(sign, exponent, mantissa) of bit patterns (any integer view: only the low bits count)."""
    b = _i64(bits) & ((1 << f.width) - 1)
    return b >> (f.e + f.m), (b >> f.m) & f.emax, b & ((1 << f.m) - 1)


def join(s: I64, e: I64, m: I64, f: Fmt) -> I64:
    out: I64 = ((s & 1) << (f.e + f.m)) | ((e & f.emax) << f.m) | (m & ((1 << f.m) - 1))
    return out


def leading_zeros(x: I64, width: int) -> I64:
    """Leading zeros of non-negative values below 2^53 in a ``width``-bit field (``width`` for 0)."""
    bl = np.frexp(x.astype(np.float64))[1].astype(np.int64)  # bit length (0 for 0)
    return width - bl


def _is_nan(e: I64, m: I64, f: Fmt) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = (e == f.emax) & (m != 0)
    return out


def _rne(value: I64, drop: int) -> tuple[I64, I64]:
    """Round ``value`` to nearest even, dropping ``drop`` low bits: (kept bits + carry, carry)."""
    kept = value >> drop
    guard = (value >> (drop - 1)) & 1
    sticky = (value & ((1 << (drop - 1)) - 1)) != 0
    carry = guard & (sticky | (kept & 1))
    return kept + carry, carry


def _nan_first(out: I64, a: I64, b: I64, f: Fmt) -> I64:
    _, ea, ma = split(a, f)
    _, eb, mb = split(b, f)
    mask = (1 << f.width) - 1
    out = np.where(_is_nan(eb, mb, f), b & mask, out)
    res: I64 = np.where(_is_nan(ea, ma, f), a & mask, out)
    return res


def _max_finite(s: I64, f: Fmt) -> I64:
    return join(s, np.full_like(s, f.emax - 1), np.full_like(s, (1 << f.m) - 1), f)


def fp_add(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpAdd<E, M>``: a + b."""
    a_, b_ = np.broadcast_arrays(_i64(a), _i64(b))
    sa, ea, ma = split(a_, f)
    sb, eb, mb = split(b_, f)
    one = 1 << f.m
    pa = np.where((ea == 0) & (ma == 0), 0, ma | one)
    pb = np.where((eb == 0) & (mb == 0), 0, mb | one)
    a_big = (ea > eb) | ((ea == eb) & (ma >= mb))
    oe = np.where(a_big, ea, eb)
    d = np.abs(ea - eb)
    more = f.m + 2
    iw = 2 * f.m + 3  # the internal mantissa width
    big = np.where(a_big, pa, pb) << more
    small_m = np.where(a_big, pb, pa)
    small = np.where(d <= more, small_m << np.clip(more - d, 0, more), small_m >> np.clip(d - more, 0, 63))
    os_ = np.where(a_big, sa, sb)
    total = np.where(sa == sb, big + small, big - small)
    carry_out = (total >> iw) & 1
    inf = (carry_out == 1) & (oe >= f.emax - 1)
    grow = (carry_out == 1) & ~inf
    im = np.where(grow, total >> 1, total & ((1 << iw) - 1))
    oe = np.where(grow, oe + 1, oe)
    # normalise what did not carry out: the leading one to bit iw - 1, or zero below the normal range
    norm = carry_out == 0
    zc = leading_zeros(im, iw)
    zero = norm & ((oe <= zc) | (im == 0))
    shift = np.where(norm & ~zero, zc, 0)
    im = np.where(zero, 0, im << shift)
    oe = np.where(zero, 0, oe - shift)
    mant, _ = _rne(im, iw - (f.m + 1))
    over = (mant >> (f.m + 1)) & 1  # rounding carried past the implied one
    inf = inf | ((over == 1) & (oe >= f.emax - 1))
    oe = np.where(over == 1, oe + 1, oe)
    out = join(os_, oe, mant, f)
    out = np.where(inf, _max_finite(os_, f), out)
    return _nan_first(out, a_, b_, f)


def fp_sub(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpSub<E, M>``: a + (b with its sign flipped)."""
    return fp_add(a, _i64(b) ^ (1 << (f.e + f.m)), f)


def fp_mul(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpMul<E, M>``: a · b."""
    a_, b_ = np.broadcast_arrays(_i64(a), _i64(b))
    sa, ea, ma = split(a_, f)
    sb, eb, mb = split(b_, f)
    one = 1 << f.m
    za = (ea == 0) & (ma == 0)
    zb = (eb == 0) & (mb == 0)
    prod = np.where(za, 0, ma | one) * np.where(zb, 0, mb | one)  # 2M + 2 bits
    ps = sa ^ sb
    esum = ea + eb
    zero = za | zb | (esum < f.bias)
    inf = ~zero & (esum >= f.emax + f.bias)
    pe = esum - f.bias
    pm_w = 2 * f.m + 1
    top = (prod >> pm_w) & 1
    inf = inf | (~zero & (top == 1) & (pe >= f.emax - 1))
    pe = np.where(top == 1, pe + 1, pe)
    pm = np.where(top == 1, prod, prod << 1) & ((1 << pm_w) - 1)
    mant, _ = _rne(pm | (1 << pm_w), pm_w - f.m)  # M + 1 bits with the implied one, or carried past it
    over = (mant >> (f.m + 1)) & 1
    oe = np.where(over == 1, pe + 1, pe)
    inf = inf | (~zero & (over == 1) & (oe == f.emax))
    out = join(ps, oe, mant, f)
    out = np.where(inf, _max_finite(ps, f), out)
    out = np.where(zero | (~inf & ((oe & f.emax) == 0)), join(ps, 0 * ps, 0 * ps, f), out)
    return _nan_first(out, a_, b_, f)


def _greater(a: I64, b: I64, f: Fmt) -> npt.NDArray[np.bool_]:
    sa, ea, ma = split(a, f)
    sb, eb, mb = split(b, f)
    abs_a = (ea > eb) | ((ea == eb) & (ma > mb))
    out: npt.NDArray[np.bool_] = np.where(sa == 0, np.where(sb == 0, abs_a, True),
                                          np.where(sb == 0, False, ~abs_a))
    return out


def fp_max(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpMax<E, M>``."""
    a_, b_ = np.broadcast_arrays(_i64(a) & ((1 << f.width) - 1), _i64(b) & ((1 << f.width) - 1))
    return _nan_first(np.where(_greater(a_, b_, f), a_, b_), a_, b_, f)


def fp_min(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpMin<E, M>``."""
    a_, b_ = np.broadcast_arrays(_i64(a) & ((1 << f.width) - 1), _i64(b) & ((1 << f.width) - 1))
    return _nan_first(np.where(_greater(a_, b_, f), b_, a_), a_, b_, f)


def fp_relu(x: npt.ArrayLike, f: Fmt) -> I64:
    """``FpRelu<E, M>``: negative values (not NaN) become +0."""
    b = _i64(x) & ((1 << f.width) - 1)
    s, e, m = split(b, f)
    out: I64 = np.where((s == 0) | _is_nan(e, m, f), b, 0)
    return out


def _widen(bits: npt.ArrayLike, fi: Fmt, fo: Fmt, denorm: bool) -> I64:
    """``FpWidthInc`` / ``FpExpoWidthInc``: to a format with at least as many exponent and mantissa
    bits (FP16 -> FP32, FP17 -> FP32, FP16 -> FP17)."""
    s, e, m = split(bits, fi)
    mo = m << (fo.m - fi.m)
    delta = fo.bias - fi.bias
    zero = (e == 0) & (m == 0)
    oe = np.where(zero, 0, e + delta)
    om = np.where(zero, 0, mo)
    if denorm:
        sub = (e == 0) & (m != 0)
        zc = leading_zeros(mo, fo.m)
        oe = np.where(sub, delta - zc, oe)
        om = np.where(sub, (mo << (zc + 1)) & ((1 << fo.m) - 1), om)
    out = join(s, oe, om, fo)
    out = np.where((e == fi.emax) & (m == 0), _max_finite(s, fo), out)
    res: I64 = np.where(_is_nan(e, m, fi), join(s, np.full_like(s, fo.emax), m, fo), out)
    return res


def fp16_to_fp32(bits: npt.ArrayLike) -> I64:
    """``Fp16ToFp32``."""
    return _widen(bits, FP16, FP32, denorm=True)


def fp17_to_fp32(bits: npt.ArrayLike) -> I64:
    """``Fp17ToFp32`` (FP17 subnormals are read as normals, like the arithmetic does)."""
    return _widen(bits, FP17, FP32, denorm=False)


def fp16_to_fp17(bits: npt.ArrayLike) -> I64:
    """``Fp16ToFp17``."""
    return _widen(bits, FP16, FP17, denorm=True)


def _shift_right_rne(mant_p1: I64, shift: I64, delta: int, mw: int, out_m: int) -> tuple[I64, I64]:
    """``FpMantDecShiftRight``: (``mw``+1)-bit ``mant_p1`` shifted right by ``shift`` into ``out_m``
    bits, rounded to nearest even: (mantissa, overflow into the implied one)."""
    width = mw + 1
    k = delta + shift - 1
    guard = np.where(k < width, (mant_p1 >> np.minimum(k, 62)) & 1, 0)
    sticky = (mant_p1 & ((np.int64(1) << np.minimum(k, 62)) - 1)) != 0
    least = np.where(k + 1 < width, (mant_p1 >> np.minimum(k + 1, 62)) & 1, 0)
    carry = guard & (sticky | (least == 1))
    kept = ((mant_p1 >> shift) >> delta) & ((1 << (out_m + 1)) - 1)
    total = (kept + carry) & ((1 << (out_m + 1)) - 1)
    return total & ((1 << out_m) - 1), (total >> out_m) & 1


def _narrow(bits: npt.ArrayLike, fi: Fmt, fo: Fmt, denorm: bool) -> I64:
    """``FpWidthDec`` / ``FpExpoWidthDec``: FP32 -> FP16, FP32 -> FP17, FP17 -> FP16."""
    s, e, m = split(bits, fi)
    delta = fi.bias - fo.bias
    inf = e >= fo.emax + delta
    zero = ~inf & (e < delta - fo.m)
    sub = ~inf & ~zero & (e <= delta)
    mant_p1 = m | (1 << fi.m)
    shift = np.where(sub, delta - e + 1, 1)
    sm, sover = _shift_right_rne(mant_p1, shift, fi.m - fo.m, fi.m, fo.m)
    if denorm:
        s_e = sover
    else:
        s_e = np.where(sover == 1, 1, 0)
        zero = zero | (sub & (sover == 0))
    ne = e - delta
    if fi.m > fo.m:
        nm, _ = _rne(mant_p1, fi.m - fo.m)
        nover = (nm >> (fo.m + 1)) & 1
        ne = np.where(nover == 1, ne + 1, ne)
        inf = inf | (~sub & ~zero & (nover == 1) & (ne == fo.emax))
    else:
        nm = m
    oe = np.where(sub, s_e, ne)
    om = np.where(sub, sm, nm)
    out = join(s, oe, om, fo)
    out = np.where(inf, _max_finite(s, fo), out)
    out = np.where(zero & ~inf, join(s, 0 * s, 0 * s, fo), out)
    res: I64 = np.where(_is_nan(e, m, fi), join(s, np.full_like(s, fo.emax), m, fo), out)
    return res


def fp32_to_fp16(bits: npt.ArrayLike) -> I64:
    """``Fp32ToFp16``."""
    return _narrow(bits, FP32, FP16, denorm=True)


def fp32_to_fp17(bits: npt.ArrayLike) -> I64:
    """``Fp32ToFp17`` (subnormal results flush to zero)."""
    return _narrow(bits, FP32, FP17, denorm=False)


def fp17_to_fp16(bits: npt.ArrayLike) -> I64:
    """``Fp17ToFp16``."""
    return _narrow(bits, FP17, FP16, denorm=True)


def int_to_fp16(value: npt.ArrayLike, int_width: int = 17) -> I64:
    """``FpIntToFloat<int_width, 5, 10>`` (``Int17ToFp16``): round to nearest even, saturating."""
    v = _i64(value)
    s = (v < 0).astype(np.int64)
    mag: I64 = np.abs(v)
    zc = leading_zeros(mag, int_width)
    norm: I64 = mag << np.where(v == 0, 0, zc).astype(np.int64)
    e = int_width - 1 - zc + FP16.bias
    mant, _ = _rne(norm, int_width - (FP16.m + 1))
    over = (mant >> (FP16.m + 1)) & 1
    inf = (e == FP16.emax) | ((over == 1) & (e >= FP16.emax - 1))
    e = np.where(over == 1, e + 1, e)
    out = join(s, e, mant, FP16)
    out = np.where(inf, _max_finite(s, FP16), out)
    res: I64 = np.where(v == 0, 0, out)
    return res


def fp16_to_int16(bits: npt.ArrayLike) -> I64:
    """``Fp16ToInt16``: round half away from zero, saturate; NaN gives -32768."""
    s, e, m = split(bits, FP16)
    mant = m | (1 << FP16.m)  # the implied one, even for zero (which then rounds to 0)
    shift = FP16.m - (e - FP16.bias)
    right = np.where(shift > 0, (mant + (np.int64(1) << np.maximum(shift - 1, 0))) >> np.maximum(shift, 0), 0)
    mag = np.where(shift > 0, right, mant << np.maximum(-shift, 0))
    out = np.where(mag > 32767, np.where(s == 1, -32768, 32767), np.where(s == 1, -mag, mag))
    res: I64 = np.where(_is_nan(e, m, FP16), -32768, out)
    return res


def fp32_to_int_frac(bits: npt.ArrayLike, rshift: int) -> tuple[I64, I64]:
    """``FpFloatToIntFrac<8, 23, 8, 9, 35>``: ``x / 2^rshift`` as a 9-bit unsigned integer part
    (saturated) and 35-bit fraction; the sign is ignored (callers handle negative values), NaN gives
    (0, 0). ``rshift`` is the 8-bit signed index select."""
    _, e, m = split(bits, FP32)
    mant = m | (1 << FP32.m)
    abs_e = ((e - FP32.bias + 128) & 0xFF) - 128  # an 8-bit signed exponent: 128 wraps to -128
    lshift = abs_e - rshift - FP32.m
    ipart = np.where(lshift >= 0, np.where(lshift > 9, 512, mant << np.clip(lshift, 0, 9)),
                     mant >> np.clip(-lshift, 0, 63))
    ipart = np.minimum(ipart, 511)
    k = 35 + lshift
    low = np.where(k >= 0, (mant << np.clip(k, 0, 35)) & ((1 << 35) - 1), mant >> np.clip(-k, 0, 63))
    frac = np.where(lshift >= 0, 0, low)
    nan = _is_nan(e, m, FP32)
    return np.where(nan, 0, ipart), np.where(nan, 0, frac)


def fraction_to_fp17(frac: npt.ArrayLike) -> I64:
    """``FpFractionToFloat<35, 6, 10>``: a 35-bit fraction (value / 2^35) as FP17, rounded to nearest
    even; values below the FP17 normal range are zero."""
    fr = _i64(frac)
    zc = leading_zeros(fr, 35)
    shifted = (fr << np.clip(zc + 1, 0, 36)) & ((1 << 36) - 1)
    mant, _ = _rne(shifted, 36 - (FP17.m + 1))
    over = (mant >> (FP17.m + 1)) & 1
    e_norm = FP17.bias - (zc + 1)
    zero = (fr == 0) | ((over == 0) & (FP17.bias <= zc + 1))
    e = np.where(over == 1, FP17.bias - zc, e_norm)
    m = np.where(over == 1, 0, mant)
    out = join(np.zeros_like(fr), e, m, FP17)
    res: I64 = np.where(zero, 0, out)
    return res
