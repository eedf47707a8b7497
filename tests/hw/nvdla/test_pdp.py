"""PDP pooling against a per-window reference of the C model's arithmetic, and NVIDIA's PDP_L0_0."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import pdp
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.surface import Cube, gather, scatter
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget
from tests.hw.nvdla.nvdla_run import Run, pdp_params

RECIP = [0x10000, 0x8000, 0x5555, 0x4000, 0x3333, 0x2AAA, 0x2492, 0x2000]


def c_sign_extend(value: int, sign_bit: int, bits: int) -> int:
    """NV_NVDLA_pdp::int_sign_extend into an int<bits>, bit by bit as the C model does it."""
    sign = (value >> sign_bit) & 1
    r = 0
    for _ in range(32 - sign_bit - 1):
        r = (r << 1) | sign
    r = (r << (sign_bit + 1)) | value
    r &= (1 << bits) - 1
    return r - (1 << bits) if r >> (bits - 1) else r


def to_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def c_round(q: Fraction) -> int:
    """(tmp_out > 0) ? (int32)(tmp_out + 0.5) : (int32)(tmp_out - 0.5), on x86."""
    v = math.floor(q + Fraction(1, 2)) if q > 0 else math.ceil(q - Fraction(1, 2))
    return v if -(1 << 31) <= v < (1 << 31) else -(1 << 31)


def reference(x: np.ndarray, p: PdpParams, prec: Precision, pad_l: int, pad_r: int) -> np.ndarray:
    kw, kh = p.kernel_width + 1, p.kernel_height + 1
    sw, sh = p.kernel_stride_width + 1, p.kernel_stride_height + 1
    c, h, w = x.shape
    ow = (w + pad_l + pad_r - kw) // sw + 1
    oh = (h + p.pad_top + p.pad_bottom - kh) // sh + 1
    bits = 16 if prec is Precision.INT8 else 32
    signs = (7, 8, 9, 9, 10, 10, 10) if prec is Precision.INT8 else (15, 16, 17, 17, 18, 18, 18)
    pads = [0] + [c_sign_extend(v, b, bits) for v, b in zip(p.pad_values, signs, strict=True)]
    out = np.zeros((c, oh, ow), dtype=np.int64)
    for ch in range(c):
        for oy in range(oh):
            rows = [r for r in range(oy * sh - p.pad_top, oy * sh - p.pad_top + kh) if 0 <= r < h]
            for ox in range(ow):
                cols = [q for q in range(ox * sw - pad_l, ox * sw - pad_l + kw) if 0 <= q < w]
                vals = [int(x[ch, r, q]) for r in rows for q in cols]
                if p.pooling_method == 1:
                    out[ch, oy, ox] = max(vals)
                elif p.pooling_method == 2:
                    out[ch, oy, ox] = min(vals)
                else:
                    s = sum(vals) + len(rows) * pads[kw - len(cols)] + pads[kh - len(rows)] * kw
                    s = to_signed(s, bits)
                    r1 = c_round(Fraction(s * p.recip_kernel_width, 65536))
                    r2 = c_round(Fraction(r1 * p.recip_kernel_height, 65536))
                    out[ch, oy, ox] = to_signed(r2, 8 * prec.bpe)
    return out


def run(p: PdpParams, x: np.ndarray, prec: Precision, target: NvdlaTarget = NV_FULL) -> np.ndarray:
    c, h, w = x.shape
    atom = target.atom
    surfs = -(-c // (atom // prec.bpe))
    src = Cube(0x100, w, h, c, w * atom + atom, (h * (w + 1) + 2) * atom, prec)
    ow, oh = p.cube_out_width + 1, p.cube_out_height + 1
    dst_addr = 0x100 + surfs * src.surf_stride + 256
    dst = Cube(dst_addr, ow, oh, c, ow * atom, oh * ow * atom + atom, prec)
    mem = ByteMemory(dst_addr + surfs * dst.surf_stride + 256)
    scatter(mem, src, target, x, "t")
    p = dataclasses.replace(p, src_base_addr=src.address, src_line_stride=src.line_stride,
                            src_surface_stride=src.surf_stride, dst_base_addr=dst.address,
                            dst_line_stride=dst.line_stride, dst_surface_stride=dst.surf_stride)
    pdp.execute(p, mem, target)
    return np.asarray(gather(mem, dst, target, "t"), dtype=np.int64)


def make(prec: Precision, c: int, h: int, w: int, method: int, kw: int, kh: int, sw: int, sh: int,
         pads: tuple[int, int, int, int], **kw_: int) -> PdpParams:
    pl, pr, pt, pb = pads
    ow = (w + pl + pr - kw) // sw + 1
    oh = (h + pt + pb - kh) // sh + 1
    base = dict(cube_in_width=w - 1, cube_in_height=h - 1, cube_in_channel=c - 1, cube_out_width=ow - 1,
                cube_out_height=oh - 1, cube_out_channel=c - 1, pooling_method=method, kernel_width=kw - 1,
                kernel_height=kh - 1, kernel_stride_width=sw - 1, kernel_stride_height=sh - 1, pad_left=pl,
                pad_top=pt, pad_right=pr, pad_bottom=pb, input_data=int(prec), src_base_addr=0,
                src_line_stride=0, src_surface_stride=0, dst_base_addr=0, dst_line_stride=0,
                dst_surface_stride=0, recip_kernel_width=RECIP[kw - 1], recip_kernel_height=RECIP[kh - 1])
    base.update(kw_)
    return PdpParams(**base)


CASES = [
    # prec, c, h, w, method, kw, kh, sw, sh, pads (l, r, t, b)
    (Precision.INT8, 35, 7, 9, 0, 3, 3, 2, 2, (1, 1, 1, 1)),
    (Precision.INT8, 8, 5, 6, 1, 2, 3, 1, 2, (1, 0, 2, 1)),
    (Precision.INT8, 3, 6, 5, 2, 8, 2, 3, 1, (7, 3, 0, 1)),
    (Precision.INT16, 20, 6, 7, 0, 4, 2, 3, 1, (3, 2, 1, 0)),
    (Precision.INT16, 16, 4, 4, 1, 3, 3, 1, 1, (2, 2, 2, 2)),
    (Precision.INT16, 5, 9, 3, 0, 5, 7, 4, 5, (4, 4, 6, 2)),   # windows wider than the input
    (Precision.INT8, 9, 6, 8, 1, 1, 1, 1, 1, (0, 0, 0, 0)),    # one-element windows, no padding
    (Precision.INT8, 9, 6, 8, 0, 1, 1, 1, 1, (0, 0, 0, 0)),
    (Precision.INT16, 7, 6, 8, 2, 2, 2, 2, 2, (0, 0, 0, 0)),   # no padding
]


@pytest.mark.parametrize(("prec", "c", "h", "w", "method", "kw", "kh", "sw", "sh", "pads"), CASES)
def test_pooling_matches_the_per_window_reference(prec, c, h, w, method, kw, kh, sw, sh, pads) -> None:
    rng = np.random.default_rng(c * w + kw)
    info = np.iinfo(prec.dtype)
    x = rng.integers(info.min, info.max, (c, h, w), endpoint=True).astype(prec.dtype)
    x[0, 0, 0], x[-1, -1, -1] = info.min, info.max  # the extremes
    pad1 = int(rng.integers(info.min, info.max))
    pv = {f"pad_value_{n}x": (n * pad1) & 0x7FFFF for n in range(1, 8)}
    p = make(prec, c, h, w, method, kw, kh, sw, sh, pads, **pv)
    got = run(p, x, prec)
    want = reference(x.astype(np.int64), p, prec, pads[0], pads[1])
    assert np.array_equal(got, want)


def test_average_rounds_half_away_from_zero_and_wraps_like_the_c_model() -> None:
    x = np.array([[[1, 2], [3, 5]], [[-1, -2], [-3, -5]], [[127, 127], [127, 127]]], dtype=np.int8)
    # 2x2 average: 11/4 = 2.75 -> 3; -11/4 -> -3 ; width first: 3*0x8000/65536 = 1.5 -> 2
    p = make(Precision.INT8, 3, 2, 2, 0, 2, 2, 1, 1, (0, 0, 0, 0))
    got = run(p, x, Precision.INT8)
    want = reference(x.astype(np.int64), p, Precision.INT8, 0, 0)
    assert np.array_equal(got, want)
    assert got[:, 0, 0].tolist() == [3, -3, 127]
    # a reciprocal of 2.0 doubles the sum: 4 * 127 * 2 = 1016, kept as int8 by the C model's cast
    p2 = dataclasses.replace(p, recip_kernel_width=0x10000, recip_kernel_height=0x10000 * 2 - 1)
    got2 = run(p2, x, Precision.INT8)
    assert np.array_equal(got2, reference(x.astype(np.int64), p2, Precision.INT8, 0, 0))
    assert got2[2, 0, 0] == to_signed(c_round(Fraction(508 * (0x1FFFF), 65536)), 8)


def test_padding_values_take_part_in_the_average_only() -> None:
    x = np.full((8, 2, 2), 10, dtype=np.int8)
    pv = {f"pad_value_{n}x": n * 100 for n in range(1, 8)}
    avg = run(make(Precision.INT8, 8, 2, 2, 0, 3, 3, 1, 1, (1, 1, 1, 1), **pv), x, Precision.INT8)
    mx = run(make(Precision.INT8, 8, 2, 2, 1, 3, 3, 1, 1, (1, 1, 1, 1), **pv), x, Precision.INT8)
    assert np.all(mx == 10)
    # corner window: 4 inputs (40) + 2 rows x 1 padded column (2 x 100) + 1 padded row x 3 (300)
    first = c_round(Fraction(540 * 0x5555, 65536))
    assert avg[0, 0, 0] == to_signed(c_round(Fraction(first * 0x5555, 65536)), 8)


@pytest.mark.parametrize("method", [0, 1])
def test_split_width_pools_strips_like_the_whole(method: int) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (32, 4, 23)).astype(np.int8)
    # kernel 3 stride 2, pad 1: 12 outputs; strips of 5 + 4 + 3 outputs read 10 + 8 + 5 columns, the
    # later ones from one column (kernel - stride) earlier
    whole = make(Precision.INT8, 32, 4, 23, method, 3, 3, 2, 2, (1, 1, 1, 1))
    assert whole.cube_out_width == 11
    split = dataclasses.replace(whole, split_num=2, partial_width_in_first=9, partial_width_in_mid=7,
                                partial_width_in_last=4, partial_width_out_first=4,
                                partial_width_out_mid=3, partial_width_out_last=2)
    assert np.array_equal(run(split, x, Precision.INT8), run(whole, x, Precision.INT8))
    bad = dataclasses.replace(split, partial_width_in_last=5)
    with pytest.raises(DlaError) as e:
        run(bad, x, Precision.INT8)
    assert "do not add up" in str(e.value)


def test_nv_small_int8_on_8_byte_atoms() -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (12, 5, 5)).astype(np.int8)
    p = make(Precision.INT8, 12, 5, 5, 0, 2, 2, 2, 2, (0, 1, 0, 1))
    assert np.array_equal(run(p, x, Precision.INT8, NV_SMALL), reference(x.astype(np.int64), p,
                                                                          Precision.INT8, 0, 1))


@pytest.mark.parametrize(("change", "words"), [
    (dict(pooling_method=3), "pooling_method 3"),
    (dict(pad_left=3), "pad_left 3 is not smaller than the kernel (3)"),
    (dict(cube_out_height=5), "cube_out_height 5 is not the pooled height - 1 (3)"),
    (dict(cube_out_width=5), "strip 0 pools 9 columns into 5"),
    (dict(cube_out_channel=3), "cube_out_channel 3 differs"),
    (dict(kernel_width=8), "kernel_width 8 is outside its field"),
    (dict(input_data=3), "INPUT_DATA: precision code 3"),
    (dict(flying_mode=0), "no input was given"),
])
def test_bad_parameters_are_refused(change: dict[str, int], words: str) -> None:
    p = dataclasses.replace(make(Precision.INT8, 8, 7, 9, 0, 3, 3, 2, 2, (1, 1, 1, 1)), **change)
    with pytest.raises(DlaError) as e:
        run(p, np.zeros((8, 7, 9), np.int8), Precision.INT8)
    assert words in str(e.value)
    assert e.value.code in (NvError.BadValue, NvError.BadParameter)


def test_on_the_fly_input() -> None:
    x = np.arange(32 * 2 * 2, dtype=np.int64).reshape(32, 2, 2).astype(np.int8)
    p = make(Precision.INT8, 32, 2, 2, 1, 2, 2, 1, 1, (0, 0, 0, 0), flying_mode=0, dst_base_addr=0,
             dst_line_stride=32, dst_surface_stride=32)
    mem = ByteMemory(64)
    pdp.execute(p, mem, NV_FULL, flying_input=x)
    assert np.array_equal(gather(mem, Cube(0, 1, 1, 32, 32, 32, Precision.INT8), NV_FULL, "t")[:, 0, 0],
                          x.reshape(32, 4).max(axis=1))


@pytest.mark.parametrize(("name", "target"), [("PDP_L0_0", NV_FULL), ("PDP_L0_0_small", NV_SMALL)])
def test_nvidia_pdp_golden_images(name: str, target: NvdlaTarget) -> None:
    run = Run(name)
    p = pdp_params(run, run.op(0))
    assert (p.pooling_method, p.kernel_width, p.input_data) == (1, 0, 0)
    pdp.execute(p, run.memory, target)
    assert run.image() == run.golden()
