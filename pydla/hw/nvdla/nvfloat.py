"""NVDLA's floating point, bit for bit and fast: FP16 (1/5/10), FP17 (1/6/10), FP32 (1/8/23).

The rules are pydla.hw.nvdla.nvfloat_exact's (NVIDIA's ``nvdla_float.h``). For normal operands with
a normal result they give IEEE-754 round-to-nearest-even results, so this module computes those with
numpy's IEEE floats (float32 for FP32; exact float64 sums and products rounded once to FP17) and
hands every other element (a zero, "subnormal", infinity or NaN pattern among the operands, a result
that overflows or leaves the normal range) to the exact algorithms. Conversions from 16- and 17-bit
patterns are table lookups built from the exact algorithms on first use.

Usage::

    fp_add(np.array([0x3c00]), np.array([0x3c00]), FP17)   # FP17 1.0 + 1.0
    fp32_to_fp16(np.array([0x7f800000]))                   # [0x7bff]: saturates
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla import nvfloat_exact as exact
from pydla.hw.nvdla.intmath import I64
from pydla.hw.nvdla.nvfloat_exact import (
    FP16,
    FP17,
    FP32,
    Fmt,
    fp32_to_int_frac,
    fp_relu,
    fraction_to_fp17,
    join,
    leading_zeros,
    split,
)

__all__ = ["FP16", "FP17", "FP32", "Fmt", "fp16_to_fp17", "fp16_to_fp32", "fp16_to_int16", "fp17_to_fp16",
           "fp17_to_fp32", "fp32_to_fp16", "fp32_to_fp17", "fp32_to_int_frac", "fp_add", "fp_max", "fp_min",
           "fp_mul", "fp_relu", "fp_sub", "fraction_to_fp17", "int_to_fp16", "join", "leading_zeros", "split"]

B = npt.NDArray[np.bool_]


def _i64(x: npt.ArrayLike) -> I64:
    return np.asarray(x, dtype=np.int64)


@cache
def _table(name: str) -> I64:
    """A conversion of every 16- or 17-bit pattern, computed once with the exact algorithm."""
    if name == "int_to_fp16":
        return exact.int_to_fp16(np.arange(-65536, 65536))
    width = 17 if name.startswith("fp17") else 16
    out: I64 = getattr(exact, name)(np.arange(1 << width))
    return out


def fp16_to_fp32(bits: npt.ArrayLike) -> I64:
    """``Fp16ToFp32``."""
    out: I64 = _table("fp16_to_fp32")[_i64(bits) & 0xFFFF]
    return out


def fp16_to_fp17(bits: npt.ArrayLike) -> I64:
    """``Fp16ToFp17``."""
    out: I64 = _table("fp16_to_fp17")[_i64(bits) & 0xFFFF]
    return out


def fp17_to_fp16(bits: npt.ArrayLike) -> I64:
    """``Fp17ToFp16``."""
    out: I64 = _table("fp17_to_fp16")[_i64(bits) & 0x1FFFF]
    return out


def fp17_to_fp32(bits: npt.ArrayLike) -> I64:
    """``Fp17ToFp32``."""
    out: I64 = _table("fp17_to_fp32")[_i64(bits) & 0x1FFFF]
    return out


def fp16_to_int16(bits: npt.ArrayLike) -> I64:
    """``Fp16ToInt16``: round half away from zero, saturate; NaN gives -32768."""
    out: I64 = _table("fp16_to_int16")[_i64(bits) & 0xFFFF]
    return out


def int_to_fp16(value: npt.ArrayLike, int_width: int = 17) -> I64:
    """``FpIntToFloat<int_width, 5, 10>`` for 17-bit (or narrower) integers."""
    v = _i64(value)
    if int_width > 17 or np.any((v < -65536) | (v > 65535)):
        return exact.int_to_fp16(v, int_width)
    out: I64 = _table("int_to_fp16")[v + 65536]
    return out


def _finish(fast: I64, odd: B, fallback: object, *args: I64) -> I64:
    """``fast`` with the ``odd`` elements recomputed by the exact algorithm."""
    if np.any(odd):
        idx = np.nonzero(odd)
        fast = fast.copy()
        fast[idx] = fallback(*(a[idx] for a in args))  # type: ignore[operator]
    return fast


def _special(bits: I64, f: Fmt) -> B:
    """Patterns NVDLA reads differently from IEEE: exponent 0 with a mantissa, or the top exponent."""
    e = (bits >> f.m) & f.emax
    out: B = (e == f.emax) | ((e == 0) & ((bits & ((1 << f.m) - 1)) != 0))
    return out


def _pair(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> tuple[I64, I64]:
    mask = (1 << f.width) - 1
    x, y = np.broadcast_arrays(_i64(a) & mask, _i64(b) & mask)
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


def _f32(bits: I64) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = bits.astype(np.uint32).view(np.float32)
    return out


@cache
def _fp17_values() -> npt.NDArray[np.float64]:
    """Every FP17 pattern's IEEE value (what NVDLA computes with for normal and zero patterns)."""
    s, e, m = split(np.arange(1 << 17), FP17)
    v = np.ldexp(1.0 + m / 1024.0, (e - FP17.bias).astype(np.int32))
    v = np.where((e == 0) & (m == 0), 0.0, v)
    out: npt.NDArray[np.float64] = np.where(s == 1, -v, v)
    return out


def _round_fp17(v: npt.NDArray[np.float64]) -> tuple[I64, B]:
    """float64 values rounded to nearest even into FP17: (patterns, whether IEEE's rounding is
    NVDLA's: zero, or normal above the lowest binade). FP17 has FP16's 10 mantissa bits: where numpy's
    float64 -> float16 conversion (one rounding, to nearest even) lands on a normal FP16 or a zero, its
    pattern widened to FP17 is the answer (or an exact zero); the rest are rounded bit by bit."""
    with np.errstate(over="ignore"):
        half = v.astype(np.float16).view(np.uint16).astype(np.int64)
    e16 = (half >> 10) & 31
    # FP16's normal range before rounding (below it float16 keeps fewer bits; a zero may be an underflow)
    easy = ((np.abs(v) >= 2.0 ** -14) & (e16 != 31)) | (v == 0)
    out = fp16_to_fp17(half)
    ok = np.ones(v.shape, dtype=bool)
    if not easy.all():
        idx = np.nonzero(~easy)
        out[idx], ok[idx] = _round_fp17_bits(np.ascontiguousarray(v[idx]))
    return out, ok


def _round_fp17_bits(v: npt.NDArray[np.float64]) -> tuple[I64, B]:
    bits = v.view(np.int64)
    s = (bits >> 63) & 1
    e = (bits >> 52) & 0x7FF
    m = bits & ((1 << 52) - 1)
    kept = m >> 42
    rem = m & ((1 << 42) - 1)
    half = 1 << 41
    kept = kept + ((rem > half) | ((rem == half) & ((kept & 1) == 1)))
    e17 = e - 1023 + FP17.bias + (kept >> 10)
    zero = e == 0
    ok = zero | ((e17 >= 2) & (e17 <= FP17.emax - 1))  # not the lowest binade (see fp_add)
    out = np.where(zero, s << 16, (s << 16) | (np.clip(e17, 0, FP17.emax) << 10) | (kept & 0x3FF))
    return out, ok


def fp_add(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpAdd<E, M>``: a + b."""
    x, y = _pair(a, b, f)
    if f == FP32:
        with np.errstate(over="ignore", invalid="ignore"):
            r = (_f32(x) + _f32(y)).view(np.uint32).astype(np.int64)
        er = (r >> 23) & 0xFF
        mag = r & 0x7FFFFFFF
        zero = mag == 0
        # an exact zero takes the first operand's sign (NVDLA: the larger, ties to the first)
        fast = np.where(zero, x & 0x80000000, r)
        # the lowest binade too: NVDLA flushes what lies below it before rounding, IEEE may round up
        odd = _special(x, f) | _special(y, f) | (er == 0xFF) | ((er <= 1) & ~zero)
        return _finish(fast, odd, lambda p, q: exact.fp_add(p, q, f), x, y)
    if f == FP17:
        vals = _fp17_values()
        s = vals[x] + vals[y]
        r, ok = _round_fp17(s)
        fast = np.where(s == 0, x & 0x10000, r)
        odd = _special(x, f) | _special(y, f) | ~ok
        return _finish(fast, odd, lambda p, q: exact.fp_add(p, q, f), x, y)
    return exact.fp_add(x, y, f)


def fp_sub(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpSub<E, M>``: a + (b with its sign flipped)."""
    return fp_add(a, _i64(b) ^ (1 << (f.e + f.m)), f)


def fp_mul(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpMul<E, M>``: a · b."""
    x, y = _pair(a, b, f)
    mag = (1 << (f.e + f.m)) - 1
    zero_in = ((x & mag) == 0) | ((y & mag) == 0)
    if f == FP32:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            r = (_f32(x) * _f32(y)).view(np.uint32).astype(np.int64)
        er = (r >> 23) & 0xFF
        odd = _special(x, f) | _special(y, f) | (er == 0xFF) | ((er <= 1) & ~zero_in)
        return _finish(r, odd, lambda p, q: exact.fp_mul(p, q, f), x, y)
    if f == FP17:
        vals = _fp17_values()
        r, ok = _round_fp17(vals[x] * vals[y])
        odd = _special(x, f) | _special(y, f) | ~ok
        return _finish(r, odd, lambda p, q: exact.fp_mul(p, q, f), x, y)
    return exact.fp_mul(x, y, f)


def _order_key(bits: I64, f: Fmt) -> I64:
    """NVDLA's compare order: by magnitude, negatives reversed, +0 above -0."""
    mag = bits & ((1 << (f.e + f.m)) - 1)
    out: I64 = np.where((bits >> (f.e + f.m)) & 1, -mag - 1, mag)
    return out


def _cmp(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt, want_max: bool) -> I64:
    x, y = _pair(a, b, f)
    a_greater = _order_key(x, f) > _order_key(y, f)
    out = np.where(a_greater, x, y) if want_max else np.where(a_greater, y, x)
    inf_bits = f.emax << f.m
    mag = (1 << (f.e + f.m)) - 1
    out = np.where((y & mag) > inf_bits, y, out)  # NaN: the first operand that is one
    res: I64 = np.where((x & mag) > inf_bits, x, out)
    return res


def fp_max(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpMax<E, M>``."""
    return _cmp(a, b, f, True)


def fp_min(a: npt.ArrayLike, b: npt.ArrayLike, f: Fmt) -> I64:
    """``FpMin<E, M>``."""
    return _cmp(a, b, f, False)


def fp32_to_fp16(bits: npt.ArrayLike) -> I64:
    """``Fp32ToFp16``: numpy's conversion (round to nearest even, FP16 subnormals) where it agrees."""
    x = _i64(bits) & 0xFFFFFFFF
    with np.errstate(over="ignore", invalid="ignore"):
        r = _f32(x).astype(np.float16).view(np.uint16).astype(np.int64)
    odd = (((x >> 23) & 0xFF) == 0xFF) | ((r & 0x7C00) == 0x7C00)  # NaN, infinity, overflow
    return _finish(r, odd, exact.fp32_to_fp16, x)


def fp32_to_fp17(bits: npt.ArrayLike) -> I64:
    """``Fp32ToFp17``: FP32 rounded to nearest even into FP17 (subnormal results flush to zero)."""
    x = _i64(bits) & 0xFFFFFFFF
    s, e, m = split(x, FP32)
    kept = m >> 13
    rem = m & ((1 << 13) - 1)
    kept = kept + ((rem > 4096) | ((rem == 4096) & ((kept & 1) == 1)))
    e17 = e - (FP32.bias - FP17.bias) + (kept >> 10)
    fast = (s << 16) | (np.clip(e17, 0, 63) << 10) | (kept & 0x3FF)
    odd = (e == 0xFF) | (e17 < 2) | (e17 > FP17.emax - 1)
    return _finish(fast, odd, exact.fp32_to_fp17, x)
