"""Winograd convolution F(2x2, 3x3) (nv_full): CDMA's padding and stride extension, CSC's pre-addition,
CMAC's Winograd mode and CACC, against the direct convolution it stands for (integers, the compiler's
transformed weights), literal pre-additions, and NVIDIA's C model.

The C model's values were produced outside the repository by compiling nvdla/hw ``cmod`` (nv_full) whole
with g++ and SystemC and running each seeded case through its registers (the convolution and a
Winograd on-the-fly SDP); kept as SHA-256 digests of what CACC sent the SDP, in pydla's (N, K, H, W)."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import numpy.typing as npt
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import conv, conv_params, conv_winograd, sdp, surface
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import SdpParams
from pydla.hw.nvdla.target import NV_FULL, NV_LARGE

DATA, WEIGHTS, OUT = 0x1000, 0x100000, 0x180000
I64 = npt.NDArray[np.int64]


def digest(a: npt.ArrayLike) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(a, dtype="<i8")).tobytes()).hexdigest()[:32]


def pack(w: npt.NDArray[np.generic], prec: Precision) -> npt.NDArray[np.uint8]:
    """Transformed weights (K, C_ext, 16) in NVDLA's Winograd layout."""
    k, c, _ = w.shape
    kf, _ = NV_FULL.kernel_groups(prec)
    flat = np.zeros(w.size, dtype=prec.dtype)
    flat[conv_winograd.weight_offsets(k, c, kf).reshape(-1)] = w.astype(prec.dtype).reshape(-1)
    out: npt.NDArray[np.uint8] = flat.view(np.uint8)
    return out


def wino_case(seed: int) -> tuple[conv_params.ConvParams, ByteMemory]:
    """A seeded Winograd convolution: any precision, strides 1-2, pads, padding value, PRA truncation,
    FP16 NaNs and infinities among data and weights."""
    rng = np.random.default_rng(seed)
    prec = Precision(int(rng.integers(0, 3)))
    c, k = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    ow, oh = 4 * int(rng.integers(1, 4)), 4 * int(rng.integers(1, 4))
    sx, sy = (1, 1) if rng.random() < 0.6 else (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    pl, pt = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    w_n = max(1, (ow + 4) * sx - pl - int(rng.integers(0, 4)))
    h_n = max(1, (oh + 4) * sy - pt - int(rng.integers(0, 4)))
    if prec is Precision.FP16:
        pad_value = int(np.array([rng.standard_normal()], np.float16).view(np.uint16)[0])
    else:
        pad_value = int(rng.integers(0, 1 << 16))
    p = conv_params.winograd(target=NV_FULL, precision=prec, width=w_n, height=h_n, channel=c, kernels=k,
                             out_width=ow, out_height=oh, data_addr=DATA, weight_addr=WEIGHTS, pad_left=pl,
                             pad_top=pt, stride=(sx, sy), pad_value=pad_value,
                             pra_truncate=int(rng.integers(0, 4)),
                             clip_truncate=int(rng.integers(0, 5)) if prec.is_int else 0,
                             nan_to_zero=int(rng.integers(0, 2)))
    mem = ByteMemory(1 << 21)
    ext_c = p.csc.datain_channel_ext + 1
    cube = surface.Cube(DATA, w_n, h_n, c, p.cdma.line_stride, p.cdma.surf_stride, prec)
    lanes = cube.lanes(NV_FULL)
    if prec is Precision.FP16:
        x = (rng.standard_normal((lanes, h_n, w_n)) * 2).astype(np.float16).view(np.uint16)
        w = (rng.standard_normal((k, ext_c, 16)) / 8).astype(np.float16).view(np.uint16)
        if seed % 3 == 0:  # NaNs and infinities
            x.reshape(-1)[rng.integers(0, x.size, 3)] = [0x7E01, 0xFC00, 0x7C00]
            w.reshape(-1)[rng.integers(0, w.size, 2)] = [0xFE77, 0x7C00]
    else:
        info = np.iinfo(prec.dtype)
        x = rng.integers(info.min, info.max + 1, (lanes, h_n, w_n)).astype(prec.dtype)
        w = rng.integers(info.min, info.max + 1, (k, ext_c, 16)).astype(prec.dtype)
    surface.scatter(mem, cube, NV_FULL, x, "x")
    mem.write(WEIGHTS, pack(w, prec))
    return p, mem


# digests of NVIDIA's C model's CACC output (N, K, H, W as int64) for wino_case(seed)
WINO_DIGESTS = {
    0: "ad93e05ba0ea6b3a0d31bf999fce4a1a",  # FP16, a NaN and infinities among data and weights
    1: "5f0c64369110a5cff480a8413c055d7e",  # INT16, 32-bit saturation
    3: "722dbe9a5fb1d6704200189391f0ebce",  # FP16, 4 channels, NaNs
    6: "fb9f6c86afd5fdea0230748dc093baee",  # INT16
    8: "f0fbbb3ec4aa8d918798374249ad8344",  # FP16, stride 1x2 (channels extended)
    9: "b76c24f49785c318d2720f8335d05bfc",  # INT16, stride 2x2
    11: "bce608c3aeb6ad5db2e632c5a5689f3d",  # INT8
    14: "d5d56a333a2ad47f507003a421f55021",  # INT8, stride 2x1
    15: "3afecddd50185426902c73af041683cd",  # FP16, NaNs
    20: "af993448d27c45ea82053dee3c2c750b",  # FP16
}


@pytest.mark.parametrize("seed", sorted(WINO_DIGESTS))
def test_winograd_convolution_matches_nvidias(seed: int) -> None:
    p, mem = wino_case(seed)
    result = conv.execute(p, mem, NV_FULL)
    out = result.to_sdp if p.cacc.proc_precision != 2 else result.to_sdp.view(np.int32)
    assert digest(out) == WINO_DIGESTS[seed]


def test_nan_and_infinity_counts() -> None:
    """CDMA counts the extended cube's NaNs and infinities (padding included), the weights' over all
    WEIGHT_BYTES: the C model's counts for case 0 (1 NaN, 2 infinities in the data, 1 NaN weight)."""
    p, mem = wino_case(0)
    r = conv.execute(p, mem, NV_FULL)
    assert (r.nan_input_data, r.inf_input_data, r.nan_input_weight) == (1, 2, 1)


G = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], dtype=np.int64)  # 2·G of F(2x2, 3x3)


@pytest.mark.parametrize(("prec", "seed"), [(Precision.INT16, 1), (Precision.INT8, 2), (Precision.INT16, 3)])
def test_winograd_is_the_3x3_convolution(prec: Precision, seed: int) -> None:
    """With the compiler's transformed kernels U = G·g·Gᵀ (g multiples of 4 so that U is exact), no
    pre-addition truncation and no saturation, the Winograd convolution equals the direct 3x3 one with
    the same padding (value included): tile positions, padding and the pre-/post-additions."""
    rng = np.random.default_rng(seed)
    c, k, ow, oh = int(rng.integers(1, 20)), int(rng.integers(1, 20)), 8, 12
    w_n, h_n = ow + 4 - 1 - int(rng.integers(0, 2)), oh + 4 - 1
    small = 6 if prec is Precision.INT8 else 100
    x = rng.integers(-small, small, (c, h_n, w_n))
    g = 4 * rng.integers(-small // 4 - 1, small // 4 + 1, (k, c, 3, 3))
    pad_value = int(rng.integers(-small, small))
    p = conv_params.winograd(target=NV_FULL, precision=prec, width=w_n, height=h_n, channel=c, kernels=k,
                             out_width=ow, out_height=oh, data_addr=DATA, weight_addr=WEIGHTS,
                             pad_value=pad_value & 0xFFFF)
    ext_c = p.csc.datain_channel_ext + 1
    u = np.zeros((k, ext_c, 4, 4), dtype=np.int64)
    u[:, :c] = np.einsum("ai,kcij,bj->kcab", G, g, G) // 4
    mem = ByteMemory(1 << 21)
    cube = surface.Cube(DATA, w_n, h_n, c, p.cdma.line_stride, p.cdma.surf_stride, prec)
    surface.scatter(mem, cube, NV_FULL, x.astype(prec.dtype), "x")
    mem.write(WEIGHTS, pack(u.reshape(k, ext_c, 16), prec))
    got = conv.execute(p, mem, NV_FULL).to_sdp[0]
    if prec is Precision.INT8:
        pad_value = (pad_value & 0xFF) - 256 * ((pad_value & 0xFF) >= 128)
    padded = np.full((c, oh + 2, ow + 2), pad_value, dtype=np.int64)
    padded[:, 1:1 + h_n, 1:1 + w_n] = x[:, :oh + 1, :ow + 1]
    direct = np.zeros((k, oh, ow), dtype=np.int64)
    for r in range(3):
        for s in range(3):
            direct += np.einsum("kc,chw->khw", g[:, :, r, s], padded[:, r:r + oh, s:s + ow])
    assert got.tolist() == direct.tolist()


def test_pre_addition_by_hand() -> None:
    """``Bᵀ·d·B`` of one 4x4 tile, INT16 with PRA_TRUNCATE 1 (half away from zero) and the 16-bit
    saturation; FP16 in FP17 (1 + 2^-11 rounds to 1, then back to FP16)."""
    d = np.arange(16, dtype=np.int64).reshape(4, 4) * 1000 - 3000
    d[1:3, 1:3] = 32767
    b = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
    exact = b @ d @ b.T
    g = conv_winograd.WinoGeometry(width=4, height=4, channel=1, surfaces=1, epa=16, pad=(0, 0, 0, 0),
                                   stride=(1, 1), ext_width=4, ext_height=4, ext_channel=1, out_width=2,
                                   out_height=2, kernels=1)
    got = conv_winograd.transformed_tiles(d.astype(np.int16)[None], g, Precision.INT16, 1)
    rounded = np.sign(exact) * ((np.abs(exact) + 1) >> 1)
    assert got.reshape(4, 4).tolist() == np.clip(rounded, -32768, 32767).tolist()
    assert int(exact.max()) > 32767  # the saturation took part
    one, eps = 0x3C00, 0x3C01  # 1 and 1 + 2^-10
    tile = np.array([[one, 0, 0, 0], [0, eps, 0, 0], [0, 0, one, 0], [0, 0, 0, 0]], dtype=np.uint16)
    fp = conv_winograd.transformed_tiles(tile[None], g, Precision.FP16, 0).reshape(4, 4)
    t = tile.view(np.float16)
    # each sum rounded (FP17 rounds like FP16 in FP16's range)
    rows = np.stack([t[0] - t[2], t[1] + t[2], t[2] - t[1], t[1] - t[3]])
    cols = np.stack([rows[:, 0] - rows[:, 2], rows[:, 1] + rows[:, 2], rows[:, 2] - rows[:, 1],
                     rows[:, 1] - rows[:, 3]], axis=1)
    assert fp.view(np.float16).tolist() == cols.tolist()
    assert float(fp.view(np.float16)[1, 1]) == 2.0  # 1 + (1 + 2^-10) rounds to 2 (half an ulp, to even)


def _change(p: conv_params.ConvParams, block: str, **kw: int) -> conv_params.ConvParams:
    return dataclasses.replace(p, **{block: dataclasses.replace(getattr(p, block), **kw)})


def _base() -> conv_params.ConvParams:
    return conv_params.winograd(target=NV_FULL, precision=Precision.INT16, width=10, height=10, channel=16,
                                kernels=4, out_width=8, out_height=8, data_addr=DATA, weight_addr=WEIGHTS)


@pytest.mark.parametrize(("params", "code", "text"), [
    (_change(_base(), "cdma", pad_right=2), NvError.BadValue, "CDMA pad_right"),
    (_change(_base(), "csc", entries=0), NvError.BadValue, "CSC entries"),
    (_change(_base(), "cdma", entries=0), NvError.BadValue, "CDMA entries"),
    (_change(_base(), "csc", datain_channel_ext=31), NvError.BadValue, "CSC datain_channel_ext"),
    (_change(_change(_change(_base(), "csc", dataout_width=5, atomics=47), "cacc", dataout_width=5), "csc"),
     NvError.BadValue, "CSC dataout_width"),
    (_change(_change(conv_params.winograd(target=NV_FULL, precision=Precision.INT16, width=60, height=60,
                                          channel=64, kernels=4, out_width=60, out_height=60, data_addr=DATA,
                                          weight_addr=WEIGHTS), "csc", data_bank=0), "cdma", data_bank=0),
     NvError.BadValue, "CSC data_bank"),
    (_change(_change(_change(_base(), "cdma", batches=1), "csc", batches=1), "cacc", batches=1),
     NvError.NotSupported, "CDMA batches"),
])
def test_winograd_refusals(params: conv_params.ConvParams, code: NvError, text: str) -> None:
    with pytest.raises(DlaError) as e:
        conv.execute(params, ByteMemory(1 << 21), NV_FULL)
    assert e.value.code == code and text in e.value.message


def test_winograd_needs_nv_full() -> None:
    p = conv_params.winograd(target=NV_LARGE, precision=Precision.INT8, width=10, height=10, channel=16,
                             kernels=4, out_width=8, out_height=8, data_addr=DATA, weight_addr=WEIGHTS)
    with pytest.raises(DlaError) as e:
        conv.execute(p, ByteMemory(1 << 21), NV_LARGE)
    assert e.value.code == NvError.NotSupported and "Winograd" in e.value.message


def test_sdp_writes_a_winograd_convolution() -> None:
    """The SDP in Winograd mode: the same arithmetic per element, written in the usual layout; its
    refusals (input from memory, output to the PDP, a height not a multiple of 4)."""
    p, mem = wino_case(11)
    result = conv.execute(p, mem, NV_FULL)
    k, oh, ow = result.to_sdp.shape[1:]
    sp = SdpParams(width=ow - 1, height=oh - 1, channel=k - 1, in_precision=0, proc_precision=0,
                   out_precision=0, dst_base_addr=OUT, dst_line_stride=ow * 32,
                   dst_surface_stride=oh * ow * 32,
                   flying_mode=1, winograd=1)
    sdp.execute(sp, mem, NV_FULL, flying_input=result.to_sdp)
    plain = dataclasses.replace(sp, winograd=0, dst_base_addr=OUT + 0x10000)
    sdp.execute(plain, mem, NV_FULL, flying_input=result.to_sdp)
    size = -(-k // 32) * oh * ow * 32
    assert (mem.data[OUT:OUT + size] == mem.data[OUT + 0x10000:OUT + 0x10000 + size]).all()
    for change, text in ((dict(flying_mode=0), "input from memory"), (dict(output_dst=1), "output_dst"),
                         (dict(height=6), "multiple of 4")):
        with pytest.raises(DlaError) as e:
            sdp.execute(dataclasses.replace(sp, **change), mem, NV_FULL, flying_input=result.to_sdp)
        assert text in e.value.message
