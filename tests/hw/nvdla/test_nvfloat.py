"""NVDLA's float arithmetic: IEEE round-to-nearest-even for normal values (an exact rational
reference), and NVDLA's own rules where they differ (values from NVIDIA's HLS library, nvdla/hw
cmod/hls/include/nvdla_float.h, compiled and run on these inputs)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from pydla.hw.nvdla import nvfloat as F
from pydla.hw.nvdla.nvfloat import FP16, FP17, FP32, Fmt


def value(bits: int, f: Fmt) -> Fraction:
    """The IEEE value of a normal or zero pattern."""
    s, e, m = (bits >> (f.e + f.m)) & 1, (bits >> f.m) & f.emax, bits & ((1 << f.m) - 1)
    if e == 0 and m == 0:
        return Fraction(0)
    v = Fraction((1 << f.m) + m, 1 << f.m) * Fraction(2) ** (e - f.bias)
    return -v if s else v


def round_rne(v: Fraction, f: Fmt) -> int | None:
    """The pattern of ``v`` rounded to nearest even, or None outside the normal range."""
    if v == 0:
        return 0
    s = 1 if v < 0 else 0
    a = abs(v)
    e = math.floor(math.log2(a))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    scaled = a / Fraction(2) ** e * (1 << f.m)  # in [2^m, 2^(m+1))
    q, r = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * r
    if twice > scaled.denominator or (twice == scaled.denominator and q & 1):
        q += 1
    if q == 1 << (f.m + 1):
        q >>= 1
        e += 1
    be = e + f.bias
    if not 1 <= be <= f.emax - 1:
        return None
    return (s << (f.e + f.m)) | (be << f.m) | (q - (1 << f.m))


def normals(rng: np.random.Generator, n: int, f: Fmt, spread: int) -> np.ndarray:
    s = rng.integers(0, 2, n)
    e = rng.integers(f.bias - spread, f.bias + spread + 1, n)
    m = rng.integers(0, 1 << f.m, n)
    return (s << (f.e + f.m)) | (e << f.m) | m


@pytest.mark.parametrize("f", [FP16, FP17, FP32])
def test_add_and_mul_of_normal_values_round_like_ieee(f: Fmt) -> None:
    rng = np.random.default_rng(f.e)
    spread = min(f.bias - 2, 12)
    a, b = normals(rng, 3000, f, spread), normals(rng, 3000, f, spread)
    b[:500] = a[:500] ^ (1 << (f.e + f.m)) ^ rng.integers(0, 4, 500)  # cancellation
    for op, exact in (
        (F.fp_add, lambda x, y: x + y),
        (F.fp_sub, lambda x, y: x - y),
        (F.fp_mul, lambda x, y: x * y),
    ):
        got = op(a, b, f)
        checked = 0
        for x, y, g in zip(a.tolist(), b.tolist(), got.tolist(), strict=True):
            want = round_rne(exact(value(x, f), value(y, f)), f)
            if want is None:
                continue  # outside the normal range: NVDLA's own rules, tested below
            if want == 0 and g & ((1 << (f.e + f.m)) - 1) == 0:
                continue  # the sign of an exact zero is NVDLA's own (below)
            assert g == want, (op.__name__, hex(x), hex(y), hex(g), hex(want))
            checked += 1
        assert checked > 2000


def h(x: float) -> int:
    return int(np.float16(x).view(np.uint16))


def s(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


# (operation, a, b, NVIDIA's HLS result)
NVIDIA_VECTORS = [
    (F.fp_add, 0x00000001, 0x00000001, 0x00800001, FP32),  # exponent 0 is read as a normal exponent
    (F.fp_add, 0x00800000, 0x80000001, 0x00000000, FP32),  # below the normal range: zero
    (F.fp_add, 0x80000000, 0x00000000, 0x80000000, FP32),  # -0 + +0 = -0
    (F.fp_add, s(1.0), s(-1.0), 0x00000000, FP32),  # x + (-x): the first operand's sign
    (F.fp_add, s(-1.0), s(1.0), 0x80000000, FP32),
    (F.fp_add, 0x7F800000, 0xFF800000, 0x00000000, FP32),  # "Inf" + "-Inf"
    (F.fp_add, 0x7F7FFFFF, 0x7F7FFFFF, 0x7F7FFFFF, FP32),  # overflow: the largest finite value
    (F.fp_mul, 0x7F800000, 0xFF800000, 0xFF7FFFFF, FP32),
    (F.fp_mul, 0x00000001, 0x00000001, 0x00000000, FP32),
    (F.fp_mul, 0x80000000, 0x00000000, 0x80000000, FP32),
    (F.fp_mul, 0x7FC00000, s(1.0), 0x7FC00000, FP32),  # NaN propagates
    (F.fp_add, s(1.0), 0x7FC00001, 0x7FC00001, FP32),
    (F.fp_add, h(65504.0), h(65504.0), 0x7BFF, FP16),
    (F.fp_mul, 0x7C00, 0x3C00, 0x7BFF, FP16),
    (F.fp_max, 0x0000, 0x8000, 0x0000, FP16),  # +0 is greater than -0
    (F.fp_min, 0x0000, 0x8000, 0x8000, FP16),
    (F.fp_max, 0x7E00, 0x3C00, 0x7E00, FP16),
    (F.fp_max, 0x3C00, 0x7E01, 0x7E01, FP16),
]


@pytest.mark.parametrize(("op", "a", "b", "want", "f"), NVIDIA_VECTORS)
def test_nvdla_rules_where_ieee_differs(op, a: int, b: int, want: int, f: Fmt) -> None:  # type: ignore[no-untyped-def]
    assert int(op(np.array([a]), np.array([b]), f)[0]) == want


def test_fp16_to_fp32_and_back_against_numpy() -> None:
    x = np.arange(1 << 16)
    wide = F.fp16_to_fp32(x)
    finite = (x & 0x7C00) != 0x7C00
    ieee = x.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    assert np.array_equal(wide[finite], ieee[finite])
    assert int(wide[0x7C00]) == 0x7F7FFFFF and int(wide[0xFC00]) == 0xFF7FFFFF  # no infinities
    assert int(wide[0x7C01]) == 0x7F800001  # a NaN keeps its mantissa in the low bits
    back = F.fp32_to_fp16(wide)
    assert np.array_equal(back[finite], x[finite])


def test_fp32_to_fp16_rounds_to_nearest_even_and_saturates() -> None:
    rng = np.random.default_rng(1)
    f32 = (rng.standard_normal(20000) * 2.0 ** rng.integers(-20, 16, 20000)).astype(np.float32)
    bits = f32.view(np.uint32).astype(np.int64)
    with np.errstate(over="ignore"):
        want = f32.astype(np.float16)
    ok = np.isfinite(want)
    assert np.array_equal(F.fp32_to_fp16(bits)[ok], want.view(np.uint16)[ok].astype(np.int64))
    assert int(F.fp32_to_fp16(np.array([s(70000.0)]))[0]) == 0x7BFF  # IEEE: infinity
    assert int(F.fp32_to_fp16(np.array([s(-1e30)]))[0]) == 0xFBFF
    assert int(F.fp32_to_fp16(np.array([0x7FC00000]))[0]) == 0x7C00  # NaN keeps its low mantissa bits
    assert int(F.fp32_to_fp16(np.array([s(2.0**-20)]))[0]) == 0x0010  # FP16 subnormals exist
    assert int(F.fp32_to_fp17(np.array([s(2.0**-35)]))[0]) == 0  # FP17 has none


def test_fp17_conversions_keep_values() -> None:
    x = np.arange(1 << 16)
    finite = (x & 0x7C00) != 0x7C00
    x17 = F.fp16_to_fp17(x)
    vals = x.astype(np.uint16).view(np.float16).astype(np.float64)
    for b, v in zip(x17[finite][::97].tolist(), vals[finite][::97].tolist(), strict=True):
        assert value(b, FP17) == Fraction(v)
    assert np.array_equal(F.fp17_to_fp16(x17)[finite], x[finite])
    assert np.array_equal(F.fp17_to_fp32(x17)[finite], F.fp16_to_fp32(x)[finite])


def test_int_and_fraction_conversions() -> None:
    ints = np.arange(-65536, 65536)
    got = F.int_to_fp16(ints)
    fits = np.abs(ints) <= 65504
    assert np.array_equal(got[fits], ints[fits].astype(np.float16).view(np.uint16).astype(np.int64))
    assert set(got[~fits].tolist()) == {0x7BFF, 0xFBFF}
    halves = np.arange(1 << 16)
    ints16 = F.fp16_to_int16(halves)
    vals = halves.astype(np.uint16).view(np.float16).astype(np.float64)
    finite = np.isfinite(vals)
    v = vals[finite]
    want = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -32768, 32767)  # half away from zero
    assert np.array_equal(ints16[finite], want.astype(np.int64))
    assert int(F.fp16_to_int16(np.array([0x7E00]))[0]) == -32768
    rng = np.random.default_rng(2)
    fr = np.concatenate([rng.integers(1 << 25, 1 << 35, 2000), [1 << 34, (1 << 35) - 1, 1 << 10]])
    for frac, g in zip(fr.tolist(), F.fraction_to_fp17(fr).tolist(), strict=True):
        assert g == round_rne(Fraction(frac, 1 << 35), FP17)
    assert int(F.fraction_to_fp17(np.array([1]))[0]) == 0  # 2^-35 is below FP17's range
    for sel in (0, 3, -2, 30):
        x = np.array([s(v) for v in (1.5, 37.25, 1000.0, 0.001)])
        ip, fp = F.fp32_to_int_frac(x, sel)
        for v, i, fr_ in zip((1.5, 37.25, 1000.0, 0.001), ip.tolist(), fp.tolist(), strict=True):
            q = Fraction(np.float32(v).item()) / Fraction(2) ** sel
            assert i == min(math.floor(q), 511)
            if math.floor(q) < 512:
                assert fr_ == math.floor((q - math.floor(q)) * (1 << 35))


@pytest.mark.parametrize("f", [FP16, FP17, FP32])
def test_fast_paths_equal_the_exact_algorithms(f: Fmt) -> None:
    from pydla.hw.nvdla import nvfloat_exact as X

    rng = np.random.default_rng(7 + f.e)
    n = 60000
    sign = rng.integers(0, 2, (2, n)) << (f.e + f.m)
    e = rng.integers(0, f.emax + 1, (2, n))
    e[:, : n // 3] = rng.integers(0, 4, (2, n // 3))  # near the bottom: flushes and the lowest binade
    e[1, n // 3 : 2 * n // 3] = np.clip(
        f.bias - e[0, n // 3 : 2 * n // 3] + rng.integers(-2, 3, n // 3), 0, f.emax
    )
    m = rng.integers(0, 1 << f.m, (2, n))
    m[:, ::5] = (1 << f.m) - 1
    a, b = sign | (e << f.m) | m
    for fast, slow in (
        (F.fp_add, X.fp_add),
        (F.fp_sub, X.fp_sub),
        (F.fp_mul, X.fp_mul),
        (F.fp_max, X.fp_max),
        (F.fp_min, X.fp_min),
    ):
        assert np.array_equal(fast(a, b, f), slow(a, b, f)), fast.__name__
    if f == FP32:
        assert np.array_equal(F.fp32_to_fp16(a), X.fp32_to_fp16(a))
        assert np.array_equal(F.fp32_to_fp17(a), X.fp32_to_fp17(a))
    if f == FP17:
        x = np.arange(1 << 17)
        assert np.array_equal(F.fp17_to_fp16(x), X.fp17_to_fp16(x))
        assert np.array_equal(F.fp17_to_fp32(x), X.fp17_to_fp32(x))


def test_fp17_rounding_through_float16_equals_the_bitwise_rounding() -> None:
    """FP17 rounding takes numpy's float64 -> float16 conversion inside FP16's normal range: the same
    patterns as the bitwise rounding for values across FP17's range, at the bottom of FP16's normal
    range (where float16 would round a smaller value up into it), ties, and near 65520."""
    from pydla.hw.nvdla.nvfloat import _round_fp17, _round_fp17_bits

    rng = np.random.default_rng(17)
    v = rng.standard_normal(200_000) * np.exp2(rng.integers(-40, 40, 200_000))
    edges = np.array([2.0 ** -14, np.nextafter(2.0 ** -14, 0), 2.0 ** -14 * (1 - 2.0 ** -12), 65504.0,
                      65519.99, 65520.0, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 0.0, -0.0, 2.0 ** -30])
    v = np.concatenate([v, edges, -edges])
    fast, fast_ok = _round_fp17(v.copy())
    slow, slow_ok = _round_fp17_bits(v.copy())
    assert np.array_equal(fast, slow)
    assert np.array_equal(fast_ok, slow_ok)
