"""The CDP (LRN) against a per-element Python reference (INT8, INT16), against values of NVIDIA's C
model (FP16 and the integer corner cases), its memory behaviour and its refusals.

The reference follows docs/development/nvdla/arithmetic.md with Python integers and fractions: the
converters round half away from zero, the window takes DATIN_OFFSET (0 once converted) outside the
cube, both tables are looked up and one chosen by the priorities. It keeps every value below 2^53, where
the C model's double-precision rounding is exact; the C-model digests cover the rest."""

from __future__ import annotations

import dataclasses
import hashlib
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import cdp, cdp_fp16, cdp_lut, surface
from pydla.hw.nvdla.cdp_lut import lut_int
from pydla.hw.nvdla.cdp_params import EXPONENT, LINEAR, CdpLut, CdpParams
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.nvfloat import FP32, fp_add
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL

I64 = npt.NDArray[np.int64]


def rha(v: Fraction) -> int:
    q = int(abs(v) + Fraction(1, 2))
    return q if v >= 0 else -q


def sat(v: int, bits: int) -> int:
    return max(-(1 << (bits - 1)), min((1 << (bits - 1)) - 1, v))


def signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def scaled(v: int, scale: int, shift: int) -> int:
    """round(v·scale / 2^shift), the shift a signed 5-bit field (negative: a left shift)."""
    return sat(rha(Fraction(v * signed(scale, 16)) / Fraction(2) ** signed(shift, 5)), 56)


def ref_table(s: int, start: int, end: int, select: int, table: list[int], last: int,
              slopes: tuple[int, int, int, int], exp_offset: int | None) -> tuple[str, int]:
    t = s - start
    if exp_offset is not None:  # the LE exponent method
        e = t.bit_length() - 1 if t > 0 else 0
        idx = e - exp_offset
        if t <= 0 or idx < 0:
            return "u", sat(table[0] + scaled(t - (1 << exp_offset if exp_offset >= 0 else 0), *slopes[:2]),
                            16)
        if idx >= last:
            return "o", sat(table[last] + scaled(s - end, *slopes[2:]), 16)
        frac = (t - (1 << e)) * (1 << 16) >> e
    else:
        idx = t >> select if select >= 0 else t << -select
        if t <= 0 or idx < 0:
            return "u", sat(table[0] + scaled(t, *slopes[:2]), 16)
        if idx >= last:
            return "o", sat(table[last] + scaled(s - end, *slopes[2:]), 16)
        frac = (t % (1 << select)) * (1 << 16) >> select if select >= 0 else 0
    y0, y1 = table[idx], table[idx + 1]
    return "h", sat(y0 + rha(Fraction((y1 - y0) * frac, 1 << 16)), 16)


def ref_lut(s: int, lut: CdpLut, sign_bit: int) -> tuple[int, str]:
    def reg(low: int, high: int) -> int:
        return signed((high << 32) | low, 38)

    def sel(v: int) -> int:
        return v - (1 << (sign_bit + 1)) if v >> sign_bit & 1 else v  # selects within the sign bit's range
    le_tab = [signed(v, 16) for v in lut.le_table]
    lo_tab = [signed(v, 16) for v in lut.lo_table]
    le_sl = (lut.le_slope_uflow_scale, lut.le_slope_uflow_shift, lut.le_slope_oflow_scale,
             lut.le_slope_oflow_shift)
    lo_sl = (lut.lo_slope_uflow_scale, lut.lo_slope_uflow_shift, lut.lo_slope_oflow_scale,
             lut.lo_slope_oflow_shift)
    le = ref_table(s, reg(lut.le_start_low, lut.le_start_high), reg(lut.le_end_low, lut.le_end_high),
                   sel(lut.le_index_select), le_tab, 64, le_sl,
                   signed(lut.le_index_offset, 8) if lut.le_function == EXPONENT else None)
    lo = ref_table(s, reg(lut.lo_start_low, lut.lo_start_high), reg(lut.lo_end_low, lut.lo_end_high),
                   sel(lut.lo_index_select), lo_tab, 256, lo_sl, None)
    if le[0] == lo[0] == "u":
        return (lo if lut.uflow_priority else le)[1], "uflow"
    if le[0] == lo[0] == "o":
        return (lo if lut.oflow_priority else le)[1], "oflow"
    if (le[0] == "h") != (lo[0] == "h"):
        return (le[1], "le_hit") if le[0] == "h" else (lo[1], "lo_hit")
    return (lo if lut.hybrid_priority else le)[1], "hybrid"


def reference(x: I64, channels: int, p: CdpParams, prec: Precision) -> tuple[I64, dict[str, int], int]:
    """Per element: (lanes, H, W) outputs, LUT path counts, output saturations."""
    lanes = x.shape[0]
    int8 = prec is Precision.INT8
    off_in = signed(p.datin_offset, 8 if int8 else 16)

    def xi(raw: int) -> int:
        return sat(rha(Fraction((raw - off_in) * signed(p.datin_scale, 16), 1 << p.datin_shifter)),
                   9 if int8 else 17)
    out = np.zeros_like(x)
    counts = dict(uflow=0, oflow=0, hybrid=0, le_hit=0, lo_hit=0)
    saturated = 0
    off_out = signed(p.datout_offset, 25 if int8 else 32)
    for y in range(x.shape[1]):
        for w in range(x.shape[2]):
            v = [xi(int(x[c, y, w])) if c < channels else 0 for c in range(lanes)]
            half = p.normalz_len + 1
            for c in range(lanes):
                s = v[c] if p.sqsum_bypass else sum(v[k] ** 2 for k in range(c - half, c + half + 1)
                                                      if 0 <= k < lanes)
                r, path = ref_lut(s, p.lut, 5 if int8 else 6)
                counts[path] += 1
                yv = r if p.mul_bypass else r * v[c]
                t = Fraction((yv - off_out) * signed(p.datout_scale, 16), 1 << p.datout_shifter)
                o = sat(rha(t), 8 if int8 else 16)
                saturated += abs(o - (t.numerator // t.denominator)) > 1
                out[c, y, w] = o
    return out, counts, saturated


def random_lut(rng: np.random.Generator, s_max: int, sign_bit: int) -> CdpLut:
    def point(lo: int, hi: int) -> tuple[int, int]:
        v = int(rng.integers(lo, hi)) & ((1 << 38) - 1)
        return v & 0xFFFFFFFF, v >> 32

    exp = bool(rng.random() < 0.4)
    def select() -> int:  # mostly positive, sometimes a small negative one (a left shift)
        if rng.random() < 0.8:
            return int(rng.integers(0, 1 << sign_bit))
        return (1 << (sign_bit + 1)) - int(rng.integers(1, 4))

    le_sel, lo_sel = select(), select()
    (les, lesh), (lee, leeh) = point(-s_max // 8, s_max // 2), point(0, s_max)
    (los, losh), (loe, loeh) = point(-s_max // 8, s_max // 2), point(0, s_max)
    return CdpLut(
        le_function=EXPONENT if exp else LINEAR, uflow_priority=int(rng.integers(2)),
        oflow_priority=int(rng.integers(2)), hybrid_priority=int(rng.integers(2)),
        le_index_offset=int(rng.integers(-4, 20)) & 0xFF, le_index_select=le_sel, lo_index_select=lo_sel,
        le_start_low=les, le_start_high=lesh, le_end_low=lee, le_end_high=leeh, lo_start_low=los,
        lo_start_high=losh, lo_end_low=loe, lo_end_high=loeh,
        le_slope_uflow_scale=int(rng.integers(0, 1 << 16)), le_slope_uflow_shift=int(rng.integers(0, 32)),
        le_slope_oflow_scale=int(rng.integers(0, 1 << 16)), le_slope_oflow_shift=int(rng.integers(0, 32)),
        lo_slope_uflow_scale=int(rng.integers(0, 1 << 16)), lo_slope_uflow_shift=int(rng.integers(0, 32)),
        lo_slope_oflow_scale=int(rng.integers(0, 1 << 16)), lo_slope_oflow_shift=int(rng.integers(0, 32)),
        le_table=tuple(int(v) for v in rng.integers(0, 1 << 16, 65)),
        lo_table=tuple(int(v) for v in rng.integers(0, 1 << 16, 257)))


@pytest.mark.parametrize("prec", [Precision.INT8, Precision.INT16])
@pytest.mark.parametrize("seed", range(6))
def test_integer_lrn_against_reference(prec: Precision, seed: int) -> None:
    rng = np.random.default_rng(seed * 7 + int(prec))
    int8 = prec is Precision.INT8
    epa = 32 if int8 else 16
    channels = int(rng.integers(1, 2 * epa + 5))
    lanes = -(-channels // epa) * epa
    lim = 128 if int8 else 32768
    x = rng.integers(-lim, lim, (lanes, 3, 2)) >> int(rng.integers(0, 6 if int8 else 12))
    xi_max = 256 if int8 else 65536
    lut = random_lut(rng, 9 * xi_max ** 2 >> int(rng.integers(0, 16)), 5 if int8 else 6)
    p = CdpParams(width=1, height=2, channel=channels - 1, input_data=int(prec),
                  normalz_len=int(rng.integers(4)),
                  sqsum_bypass=int(rng.random() < 0.15), mul_bypass=int(rng.random() < 0.2),
                  datin_offset=int(rng.integers(0, 1 << 16)) if rng.random() < 0.5 else 0,
                  datin_scale=int(rng.integers(1, 8)), datin_shifter=int(rng.integers(0, 4)),
                  datout_offset=int(rng.integers(-1000, 1000)) & 0xFFFFFFFF,
                  datout_scale=int(rng.integers(0, 1 << 16)),
                  datout_shifter=int(rng.integers(0, 40)), lut=lut)
    out, stats, saturated = cdp.lrn_int(x, channels, p, prec)
    ref, counts, ref_sat = reference(x, channels, p, prec)
    assert (out == ref).all()
    assert dataclasses.asdict(stats) == counts
    assert saturated == ref_sat


def test_index_select_sign_bit_differs_between_int8_and_int16() -> None:
    """NVIDIA's C model reads the 8-bit LE/LO index select sign-extended from bit 5 on the INT8 path and
    from bit 6 on the INT16 path: 0x3E is -2 (a left shift by 2) for INT8 and 62 for INT16."""
    table = tuple(range(0, 257 * 8, 8))
    lut = CdpLut(le_function=LINEAR, le_index_select=0x3E, lo_index_select=0x3E, le_end_low=1 << 20,
                 lo_end_low=1 << 20, hybrid_priority=1, le_table=table[:65], lo_table=table)
    s = np.array([3, 40], dtype=np.int64)
    r8, stats8 = lut_int(s, lut, 5)
    assert r8.tolist() == [table[12], table[160]]  # 3 << 2: both hit (hybrid: LO); 40 << 2: only LO hits
    assert (stats8.hybrid, stats8.lo_hit) == (1, 1)
    r16, stats16 = lut_int(s, lut, 6)
    assert r16.tolist() == [0, 0] and stats16.hybrid == 2  # index s >> 62 = 0, no fraction left


def fp16_bits(rng: np.random.Generator, shape: tuple[int, ...], spread: int) -> I64:
    v = (rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))).astype(np.float16)
    out = v.view(np.uint16).astype(np.int64)
    return np.where(rng.random(shape) < 0.03, rng.integers(0, 1 << 16, shape), out)


def f32(v: float) -> int:
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0])


def fp16_case(seed: int) -> tuple[I64, int, CdpParams]:
    """A seeded FP16 LRN: tables of FP16 values, FP32 start/end points, FP16 slopes."""
    rng = np.random.default_rng(seed)
    channels = [20, 16, 37][seed % 3]
    lanes = -(-channels // 16) * 16
    x = fp16_bits(rng, (lanes, 4, 3), 3)
    base = float(2.0 ** (seed - 1))
    lut = CdpLut(
        le_function=EXPONENT if seed % 2 else LINEAR, uflow_priority=seed % 2, oflow_priority=1 - seed % 2,
        hybrid_priority=1, le_index_offset=(-3 + seed) & 0xFF, le_index_select=(seed - 1) & 0xFF,
        lo_index_select=(seed - 3) & 0xFF, le_start_low=f32(base / 4), le_end_low=f32(base * 40),
        lo_start_low=f32(0.0), lo_end_low=f32(base * 30),
        le_slope_uflow_scale=int(fp16_bits(rng, (1,), 2)[0]), le_slope_oflow_scale=int(fp16_bits(rng, (1,),
                                                                                                 2)[0]),
        lo_slope_uflow_scale=int(fp16_bits(rng, (1,), 2)[0]), lo_slope_oflow_scale=int(fp16_bits(rng, (1,),
                                                                                                 2)[0]),
        le_table=tuple(int(v) for v in fp16_bits(rng, (65,),
                                                 2)), lo_table=tuple(int(v) for v in fp16_bits(rng, (257,),
                                                                                               2)))
    p = CdpParams(width=2, height=3, channel=channels - 1, input_data=2, normalz_len=seed % 4,
                  mul_bypass=int(seed == 2), nan_to_zero=int(seed == 1), lut=lut)
    return x, channels, p


def int_corner_case(seed: int) -> tuple[I64, int, CdpParams, Precision]:
    """Integer LUT settings outside the reference's range, each aimed at one path: shift counts C leaves
    undefined (x86-64 takes them modulo the operand width), slope terms beyond 2^53 (rounded in double)
    or beyond 2^63 (saturated), a left-shifted index that wraps around int64."""
    rng = np.random.default_rng(100 + seed)
    prec = Precision.INT16 if seed % 2 else Precision.INT8
    epa = 32 if prec is Precision.INT8 else 16
    x = rng.integers(-32768 if seed % 2 else -128, 32768 if seed % 2 else 128, (epa, 4, 4))
    big = 9 * (65536 if seed % 2 else 256) ** 2
    case = [  # le_function, le_index_offset, le_index_select, lo_index_select, le_start, lo_start, priorities
        (EXPONENT, 70, 0, 0x50, 0, big, (0, 1, 1)),  # LE: bias 1 << (70 mod 64); both underflow -> LE
        (EXPONENT, 0xC0, 0, 0x7F, 0, 0, (1, 0, 1)),  # LE index log + 64: both overflow -> LE, beyond 2^63
        (LINEAR, 0, 0x47, 0x35, 0, 0, (1, 0, 0)),  # INT8: 0x47 is 71 (>> 7, no fraction); 0x35 is -11
        (LINEAR, 0, 0x9A, 0xE0, 0, 0, (1, 1, 0)),  # INT16: 0x9A is 154 (>> 26); 0xE0 is -32: wraps
    ][seed]
    fn, offset, le_sel, lo_sel, le_start, lo_start, (upri, opri, hpri) = case
    lut = CdpLut(
        le_function=fn, le_index_offset=offset, le_index_select=le_sel, lo_index_select=lo_sel,
        le_start_low=le_start & 0xFFFFFFFF, le_start_high=(le_start >> 32) & 0x3F, le_end_low=big // 5,
        lo_start_low=lo_start & 0xFFFFFFFF, lo_start_high=(lo_start >> 32) & 0x3F, lo_end_low=big // 7,
        le_slope_uflow_scale=0x0123, le_slope_uflow_shift=0x0F, le_slope_oflow_scale=0x8001,
        le_slope_oflow_shift=0x11, lo_slope_uflow_scale=0x7123, lo_slope_uflow_shift=0x1F,
        lo_slope_oflow_scale=0x9876, lo_slope_oflow_shift=0x12, uflow_priority=upri, oflow_priority=opri,
        hybrid_priority=hpri,
        le_table=tuple(int(v) for v in rng.integers(0, 1 << 16, 65)),
        lo_table=tuple(int(v) for v in rng.integers(0, 1 << 16, 257)))
    p = CdpParams(width=3, height=3, channel=epa - 3, input_data=int(prec), normalz_len=3, datin_scale=3,
                  datin_shifter=1, datout_offset=0x123, datout_scale=3, datout_shifter=[9, 15, 9,
                                                                                        15][seed], lut=lut)
    return x, epa - 2, p, prec


def digest(*arrays: npt.ArrayLike) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a, dtype="<i8")).tobytes())
    return h.hexdigest()[:32]


@pytest.mark.parametrize("seed", range(3))
def test_fp16_lrn_matches_nvidias(seed: int) -> None:
    x, channels, p = fp16_case(seed)
    out, stats = cdp.lrn_fp16(x, channels, p)
    counts = [stats.uflow, stats.oflow, stats.hybrid, stats.le_hit, stats.lo_hit]
    assert digest(out & 0xFFFF, counts) == FP16_DIGESTS[seed]


@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("normalz_len", range(4))
def test_fp16_window_sum_float32_equals_nvdla_adds(specials: bool, normalz_len: int) -> None:
    """The window sum of squares in float32 (no specials) equals NVDLA's FP32 adds in the C model's order;
    with Inf/NaN squares it takes NVDLA's adds."""
    rng = np.random.default_rng(normalz_len)
    bits = rng.integers(0, 1 << 16, (40, 6, 5))
    bits = np.where(((bits >> 10) & 31) == 31, bits & 0x83FF, bits)  # no Inf/NaN
    if specials:
        bits[3, 2, 1], bits[17, 0, 0] = 0x7C00, 0xFE01
    q = np.zeros((48, 6, 5), dtype=np.int64)
    q[4:44] = cdp_fp16._fp16_squares()[bits]
    want = fp_add(fp_add(q[3:43], q[5:45], FP32), q[4:44], FP32)
    for k in range(2, normalz_len + 2):
        want = fp_add(want, fp_add(q[4 - k:44 - k], q[4 + k:44 + k], FP32), FP32)
    assert np.array_equal(cdp_fp16._window_sum(q, normalz_len), want)


@pytest.mark.parametrize("seed", range(4))
def test_integer_corner_cases_match_nvidias(seed: int) -> None:
    x, channels, p, prec = int_corner_case(seed)
    out, stats, saturated = cdp.lrn_int(x, channels, p, prec)
    counts = [stats.uflow, stats.oflow, stats.hybrid, stats.le_hit, stats.lo_hit, saturated]
    assert digest(out, counts) == INT_CORNER_DIGESTS[seed]


def _memory_case(target: object, prec: Precision, channels: int) -> tuple[CdpParams, ByteMemory, I64]:
    assert target in (NV_FULL, NV_SMALL)
    epa = NV_FULL.epa(prec) if target is NV_FULL else NV_SMALL.epa(prec)
    atom = 32 if target is NV_FULL else 8
    w, h = 3, 2
    lanes = -(-channels // epa) * epa
    rng = np.random.default_rng(9)
    x = rng.integers(-100, 100, (channels, h, w))
    table = tuple(range(-256, 257 * 2 - 256, 2))
    lut = CdpLut(le_table=table[:65], lo_table=table[:257], lo_index_select=4, le_index_select=2,
                 le_end_low=1000,
                 lo_end_low=1000, hybrid_priority=1)
    ls, ss = w * atom + atom, (h * (w * atom + atom)) + 2 * atom  # padded strides
    p = CdpParams(width=w - 1, height=h - 1, channel=channels - 1, input_data=int(prec), src_base_addr=0x1000,
                  src_line_stride=ls, src_surface_stride=ss, dst_base_addr=0x8000, dst_line_stride=ls,
                  dst_surface_stride=ss, normalz_len=1, mul_bypass=1, lut=lut)
    mem = ByteMemory(0x10000)
    mem.write(0x8000, np.full(0x4000, 0xEE, dtype=np.uint8))
    surface.scatter(mem, surface.Cube(0x1000, w, h, channels, ls, ss, prec), target, x.astype(prec.dtype),
                    "x")
    del lanes
    return p, mem, x


@pytest.mark.parametrize(("target", "prec", "channels"),
                         [(NV_FULL, Precision.INT16, 20), (NV_FULL, Precision.INT8, 33),
                          (NV_SMALL, Precision.INT8, 13)])
def test_execute_writes_whole_atoms_through_strides(target: object, prec: Precision, channels: int) -> None:
    """The CDP writes whole atoms: lanes past the channels carry what the data path computes for them
    (with ``mul_bypass`` the LUT's answer for their window, not 0); bytes between lines keep their value."""
    p, mem, x = _memory_case(target, prec, channels)
    tgt = NV_FULL if target is NV_FULL else NV_SMALL
    result = cdp.execute(p, mem, tgt)
    dst = surface.Cube(0x8000, p.width + 1, p.height + 1, channels, p.dst_line_stride, p.dst_surface_stride,
                       prec)
    got = surface.gather(mem, dst, tgt, "dst", lanes=True)
    lanes = got.shape[0]
    full = np.zeros((lanes, *x.shape[1:]), dtype=np.int64)
    full[:channels] = x
    ref, counts, _ = reference(full, channels, p, prec)
    assert (got == ref).all()
    assert (got[channels:] != 0).any()
    assert dataclasses.asdict(result.lut) == counts
    gap = mem.read(0x8000 + (p.width + 1) * tgt.atom, tgt.atom)
    assert (gap == 0xEE).all()


def test_fp16_execute_counts_nans() -> None:
    x, channels, p = fp16_case(1)
    x[0, 0, 0], x[1, 0, 0], x[2, 0, 0] = 0x7E00, 0xFC00, 0x7C01  # NaN, -Inf, NaN
    mem = ByteMemory(0x10000)
    cube = surface.Cube(0x1000, 3, 4, channels, 96, 384, Precision.FP16)
    surface.scatter(mem, cube, NV_FULL, x[:channels].astype(np.uint16), "x")
    p = dataclasses.replace(p, src_base_addr=0x1000, src_line_stride=96, src_surface_stride=384,
                            dst_base_addr=0x8000, dst_line_stride=96, dst_surface_stride=384)
    result = cdp.execute(p, mem, NV_FULL)
    top, frac = ((x[:channels] >> 10) & 31) == 31, (x[:channels] & 0x3FF) != 0
    assert (result.nan_input, result.inf_input) == (int((top & frac).sum()), int((top & ~frac).sum()))
    assert result.nan_input >= 2 and result.inf_input >= 1
    out = surface.gather(mem, dataclasses.replace(cube, address=0x8000), NV_FULL, "dst", lanes=True)
    expected, _ = cdp.lrn_fp16(x, channels, p)
    assert (out.astype(np.int64) == expected).all()


@pytest.mark.parametrize(("change", "code", "text"), [
    (dict(normalz_len=4), NvError.BadValue, "normalz_len"),
    (dict(datin_shifter=32), NvError.BadValue, "datin_shifter"),
    (dict(input_data=3), NvError.BadValue, "INPUT_DATA_TYPE"),
    (dict(lut=CdpLut(le_table=(0,) * 64)), NvError.BadValue, "le_table"),
    (dict(lut=CdpLut(lo_index_select=256)), NvError.BadValue, "lo_index_select"),
    (dict(lut=CdpLut(le_start_high=64)), NvError.BadValue, "le_start_high"),
    (dict(src_line_stride=40), NvError.BadValue, "CDP src"),
    (dict(dst_base_addr=0x20000), NvError.InvalidAddress, "CDP dst"),
])
def test_refusals(change: dict[str, object], code: NvError, text: str) -> None:
    p = CdpParams(width=1, height=1, channel=15, input_data=1, src_base_addr=0x1000, src_line_stride=64,
                  src_surface_stride=128, dst_base_addr=0x2000, dst_line_stride=64, dst_surface_stride=128)
    for _ in range(2):  # the checks are kept for the same registers: a refusal is not, it comes again
        with pytest.raises(DlaError) as e:
            cdp.execute(dataclasses.replace(p, **change), ByteMemory(0x10000), NV_FULL)  # type: ignore[arg-type]
        assert e.value.code == code and text in e.value.message


def test_nv_small_has_int8_only() -> None:
    p = CdpParams(width=0, height=0, channel=7, input_data=2, src_line_stride=8, src_surface_stride=8,
                  dst_base_addr=0x100, dst_line_stride=8, dst_surface_stride=8)
    with pytest.raises(DlaError) as e:
        cdp.execute(p, ByteMemory(0x1000), NV_SMALL)
    assert e.value.code == NvError.NotSupported and "FP16" in e.value.message


# SHA-256 (first 32 hex digits) of NVIDIA's C model's outputs and LUT counters for the seeded cases
# (computed outside the repository: cmod/cdp lookup_lut/lookup_lut_int8 and cmod/hls_wrapper
# HLS_CDP_lookup_fp16 compiled with g++, fed the data path's windows).
FP16_DIGESTS = ["be914d09f64c8ec02ea3d14f1b1fdd83", "72f09a8066efd8cde92527b84cea25ac",
                "9fa76aa4f0c885be421edc8e3e998f37"]
INT_CORNER_DIGESTS = ["045c0b42ae42941f920a9088b8127ace", "127d55d8925226684c21d5a9ff3deb75",
                      "bb9a389deaa5928ca4436670909d5219", "f375ff36142a82014afb026d2b558df8"]


@pytest.mark.parametrize("seed", range(6))
def test_int8_lut_memo_equals_the_lut_as_it_fills(seed: int) -> None:
    """The INT8 LRN's memo of LUT answers by sum: answers and counters equal lut_int's on every call,
    the first (empty memo), a partly filled one, and one where every sum was met before."""
    rng = np.random.default_rng(300 + seed)
    lut = random_lut(rng, 9 * 256 * 256, 5)
    memo = cdp_lut.LutMemo(lut, 5, *cdp.INT8_SUMS)
    calls = [rng.integers(0, 9 * 256 * 256 + 1, 500), rng.integers(-256, 256, 300),
             np.concatenate([rng.integers(0, 9 * 256 * 256 + 1, 200), rng.integers(-256, 256, 200)])]
    calls.append(np.concatenate(calls))  # all met already
    for sums in calls:
        got, got_stats = memo(sums)
        want, want_stats = cdp_lut.lut_int(sums, lut, 5)
        assert np.array_equal(got, want) and got_stats == want_stats
    assert (memo.cases[np.unique(calls[-1]) + 256] >= 0).all() and (memo.cases < 0).sum() > 0
