"""The FP16 convolution (CMAC's MAC cell, CACC's FP48 accumulator and its FP32 conversion) against values
of NVIDIA's C model.

The expected values were produced outside the repository by compiling nvdla/hw ``cmod/cmac``
(``NvdlaMacCell::calculation_fp16``) and ``cmod/cacc`` (``cacc_fp16_add``, ``cacc_fp48_to_fp32``) with
g++ and SystemC and feeding them the inputs generated here (seeded, so the same on every machine); a
convolution ran through the MAC cell and the adder in CSC's order. They are kept as a few literal
cases and as SHA-256 digests of the outputs for the seeded inputs. The same comparison ran on far
more inputs outside the repository (docs/development/nvdla/plan.md).
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt
import pytest

from pydla.hw.nvdla import cacc, conv, conv_params, conv_weights, surface
from pydla.hw.nvdla.cmac_fp16 import booth, mac_atom
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NV_FULL

I64 = npt.NDArray[np.int64]


def digest(*arrays: npt.ArrayLike) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a, dtype="<i8")).tobytes())
    return h.hexdigest()[:32]


def fp16_mix(rng: np.random.Generator, shape: tuple[int, ...], spread: int) -> I64:
    """FP16 patterns: normal values over 2^±spread, zeros of both signs, subnormals, a few raw patterns
    (infinities and NaNs among them)."""
    v = (rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))).astype(np.float16)
    out = v.view(np.uint16).astype(np.int64)
    kind = rng.random(shape)
    out = np.where(kind < 0.08, 0, out)
    out = np.where((kind >= 0.08) & (kind < 0.10), 0x8000, out)
    sub = rng.integers(0, 1024, shape) | (rng.integers(0, 2, shape) << 15)
    out = np.where((kind >= 0.10) & (kind < 0.12), sub, out)
    out = np.where(kind > 0.999, rng.integers(0, 1 << 16, shape), out)
    return out


def atoms(seed: int, n: int) -> tuple[I64, I64]:
    """``n`` atoms of 1..64 channels (the rest zero, as CSC sends them)."""
    rng = np.random.default_rng(seed)
    d = fp16_mix(rng, (n, 64), 10)
    w = fp16_mix(rng, (n, 64), 10)
    lanes = rng.integers(1, 65, n)[:, None]
    keep = np.arange(64)[None, :] < lanes
    return np.where(keep, d, 0), np.where(keep, w, 0)


# (data, weights, exponent, mantissa) from NVIDIA's MAC cell; the value is mantissa * 2^(exponent - 50)
MAC_CASES = [
    ([0x3C00], [0x3C00], 24, 1 << 26),  # 1 x 1
    ([0x3C00, 0x3C00], [0x3C00, 0xBC00], 24, 0),  # 1 - 1
    ([0x0001], [0x3C00], 12, 1 << 14),  # the smallest subnormal (2^-24) is exact
    ([0x7BFF], [0x7BFF], 56, 65504 * 65504 >> 6),  # max x max
    ([0x7C00], [0x3C00], 40, 1 << 26),  # infinity is the number 2^16
    ([0x3C00, 0x7E01], [0x7C01, 0x3C00], 63, 1 << 27),  # the first NaN weight wins over a NaN datum
    ([0x3C00, 0xFE01], [0x3C00, 0x3C00], 63, -(1 << 37) + (0x201 << 27)),  # a NaN datum: sign, fraction
    ([0x8000, 0x3555], [0x7BFF, 0x3555], 24, 7452900),  # -0 is masked: it does not set the exponent
]


def test_mac_cell_literal_cases() -> None:
    for d, w, e, m in MAC_CASES:
        got_e, got_m = mac_atom(np.array(d), np.array(w))
        assert (int(got_e), int(got_m)) == (e, m), (d, w)


def test_mac_cell_matches_nvidias_on_seeded_atoms() -> None:
    d, w = atoms(20240, 3000)
    e, m = mac_atom(d, w)
    assert int((e == 63).sum()) > 0 and int((m < 0).sum()) > 0
    assert digest(e, m) == MAC_DIGEST


def test_booth_product_within_one_of_the_exact_quotient() -> None:
    """The property NVIDIA's model checks (DEBUG_ERROR_CHECK): the Booth product, shifted, is within 1 of
    floor(±wt·dat / 2^shift); and it is below it only when bits were shifted out."""
    rng = np.random.default_rng(5)
    wt = rng.integers(0, 1 << 14, 200000).astype(np.uint32)
    dat = rng.integers(0, 1 << 14, 200000).astype(np.uint32)
    neg = rng.random(200000) < 0.5
    shift = rng.integers(0, 9, 200000).astype(np.int64) * 4
    got = booth(neg, wt, dat, shift)
    prod = np.where(neg, -1, 1) * wt.astype(np.int64) * dat.astype(np.int64)
    exact = np.where(shift >= 32, 0, prod >> np.minimum(shift, 31))
    assert int(np.abs(got - exact).max()) <= 1
    assert (got[shift == 0] == prod[shift == 0]).all()
    assert (got != exact).any()  # the truncation artefacts exist: a plain floor would not be bit-exact


FP48_CASES = [  # (E, M) + (e, m) -> (E, M); the accumulator's value is M * 2^(E - 101)
    (0, 0, 24, 1 << 26, 63, 1 << 38),  # 0 + 1 = 1, normalised
    (63, 1 << 38, 24, -(1 << 26), 0, 0),  # 1 - 1 = 0 (the exponent forced to 0)
    (63, 1 << 38, 24, 1 << 26, 64, 1 << 38),  # 1 + 1 = 2
    (255, 1 << 30, 12, 5, 255, 1 << 30),  # a NaN accumulator stays
    (80, 12345, 63, 0x201 << 27, 255, 0x201 << 29),  # a NaN partial sum replaces it
    (80, 12345, 63, -(1 << 37) + (0x201 << 27), 255, -274341036032),
    (80, 12345, 30, 0, 80, 12345),  # a zero partial sum leaves the accumulator as it is
    (101, (1 << 39) - 1, 56, (1 << 37) - 1, 106, 292057776126),
]


def fp48_inputs(seed: int, n: int) -> tuple[I64, I64, I64, I64]:
    rng = np.random.default_rng(seed)

    def signed(bits: int) -> I64:
        full = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), n, dtype=np.int64)
        return np.where(rng.random(n) < 0.5, full, full >> rng.integers(0, bits, n))

    acc_e = np.where(rng.random(n) < 0.6, rng.integers(50, 110, n), rng.integers(0, 256, n))
    acc_m = signed(40)
    mac_e = np.where(rng.random(n) < 0.02, 63, rng.integers(0, 57, n))
    mac_m = np.where(rng.random(n) < 0.03, 0, signed(38))
    return acc_e, acc_m, mac_e, mac_m


def test_fp48_literal_cases() -> None:
    for ae, am, me, mm, e, m in FP48_CASES:
        got = cacc.fp48_add(ae, am, me, mm)
        assert (int(got[0]), int(got[1])) == (e, m), (ae, am, me, mm)
    one = 1 << 38
    assert int(cacc.fp48_to_fp32(63, one)) == 0x3F800000
    assert int(cacc.fp48_to_fp32(63, -one)) == 0xBF800000
    assert int(cacc.fp48_to_fp32(0, 0)) == 0
    assert int(cacc.fp48_to_fp32(63, -(1 << 39))) == 0xC0000000  # -2: the magnitude needs 40 bits
    assert int(cacc.fp48_to_fp32(255, 0x201 << 29)) == 0x7F800201  # a NaN keeps its FP16 fraction
    # the magnitude rounds half away from zero: 1 + 2^-24 (half of the last bit kept) goes up
    assert int(cacc.fp48_to_fp32(63, one + (1 << 14))) == 0x3F800001
    assert int(cacc.fp48_to_fp32(63, -(one + (1 << 14)))) == 0xBF800001
    assert int(cacc.fp48_to_fp32(63, one + (1 << 14) - 1)) == 0x3F800000
    assert int(cacc.fp48_to_fp32(63, (1 << 39) - 1)) == 0x40000000  # rounds up into the exponent


def test_fp48_adder_and_conversion_match_nvidias_on_seeded_inputs() -> None:
    ae, am, me, mm = fp48_inputs(777, 20000)
    e, m = cacc.fp48_add(ae, am, me, mm)
    assert digest(e, m) == FP48_ADD_DIGEST
    assert digest(cacc.fp48_to_fp32(ae, am)) == FP48_TO_FP32_DIGEST


def conv_case(seed: int) -> tuple[conv_params.ConvParams, ByteMemory, tuple[int, ...]]:
    """A seeded FP16 convolution in memory: partial kernel and channel groups, strides, dilation,
    padding with a non-zero value."""
    rng = np.random.default_rng(seed)
    c = [70, 20, 1, 130][seed % 4]
    k = [20, 17, 33, 5][seed % 4]
    h, w, r, s = 5, 6, 3, 2
    stride, dil, pad = (1 + seed % 2, 1), (1, 1 + seed % 2), (1, 2, 1, 0)
    x = fp16_mix(rng, (c, h, w), 6)
    wt = fp16_mix(rng, (k, c, r, s), 6)
    pad_value = [0x3C00, 0x8000, 0xC200, 0x0001][seed % 4]
    p = conv_params.direct(target=NV_FULL, precision=Precision.FP16, width=w, height=h, channel=c, kernels=k,
                           kernel_width=s, kernel_height=r, data_addr=0x1000, weight_addr=0x100000,
                           stride=stride, dilation=dil, pad=pad, pad_value=pad_value)
    mem = ByteMemory(1 << 21)
    cube = surface.Cube(0x1000, w, h, c, p.cdma.line_stride, p.cdma.surf_stride, Precision.FP16)
    surface.scatter(mem, cube, NV_FULL, x.astype(np.uint16), "x")
    mem.write(0x100000, conv_weights.pack(wt.astype(np.uint16), NV_FULL, Precision.FP16))
    return p, mem, (c, k, h, w, r, s, *stride, *dil, *pad, pad_value)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fp16_convolution_matches_nvidias(seed: int) -> None:
    p, mem, _ = conv_case(seed)
    out = conv.execute(p, mem, NV_FULL).to_sdp
    assert out.dtype == np.uint32
    assert digest(out) == CONV_DIGESTS[seed]


def test_fp16_convolution_is_close_to_the_exact_sum() -> None:
    """Sanity beside the bit-exact digests: NVDLA's sums are within a few FP32 ulps of the exact sums
    (per-product truncation at the atom's largest exponent, 40-bit accumulation)."""
    p, mem, (c, k, h, w, r, s, sx, sy, dx, dy, pl, pr, pt, pb, pad_value) = conv_case(1)
    got = conv.execute(p, mem, NV_FULL).to_sdp.view(np.float32).astype(np.float64)[0]
    cube = surface.Cube(0x1000, w, h, c, p.cdma.line_stride, p.cdma.surf_stride, Precision.FP16)
    x = surface.gather(mem, cube, NV_FULL, "x").view(np.float16).astype(np.float64)
    raw = mem.read(0x100000, k * c * r * s * 2)
    wt = conv_weights.unpack(raw, k, c, r, s, NV_FULL, Precision.FP16).view(np.float16).astype(np.float64)
    pv = float(np.array([pad_value], np.uint16).view(np.float16)[0])
    xp = np.full((c, h + pt + pb, w + pl + pr), pv)
    xp[:, pt:pt + h, pl:pl + w] = x
    oh, ow = got.shape[1:]
    ref = np.zeros_like(got)
    for i in range(r):
        for j in range(s):
            tap = xp[:, i * dy:i * dy + (oh - 1) * sy + 1:sy, j * dx:j * dx + (ow - 1) * sx + 1:sx]
            ref += np.einsum("kc,chw->khw", wt[:, :, i, j], tap)
    scale = np.abs(wt).reshape(k, -1).sum(axis=1)[:, None, None] * max(np.abs(xp).max(), 1e-30)
    assert float(np.abs(got - ref).max() / scale.max()) < 2.0 ** -20


# SHA-256 (first 32 hex digits) of NVIDIA's results for the seeded inputs above.
MAC_DIGEST = "6ca591a293f0ba8519af5ec2e93114af"
FP48_ADD_DIGEST = "93557ea3173b77294c57ce945cc1bbba"
FP48_TO_FP32_DIGEST = "91349a771434b3891b8c88b3a8e7dd31"
CONV_DIGESTS = ["39b3ac030cc956826da8ddc69973e847", "68686f0f415c1dc360ba81f0aa7a279b",
                "cd252328f6df5b3ea888c796169e6ea3", "47cef378150237a6329845d3a93cf643"]
