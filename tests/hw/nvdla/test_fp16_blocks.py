"""SDP and PDP in FP16: against IEEE arithmetic (numpy float32, exact fractions rounded into FP17)
where NVDLA's float agrees with it, and NVIDIA's HLS results for the LUT."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from pydla.hw.nvdla import pdp, sdp
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.nvfloat import FP16, FP17
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import SdpLut, SdpOperandDma, SdpParams, SdpX, SdpY
from pydla.hw.nvdla.surface import Cube, gather, scatter
from pydla.hw.nvdla.target import NV_FULL
from tests.hw.nvdla.test_nvfloat import round_rne, value
from tests.hw.nvdla.test_pdp import make

F16 = Precision.FP16


def f16(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float16).view(np.uint16)


def f32bits(v: float) -> int:
    return int(np.float32(v).view(np.uint32))


def halves(
    rng: np.random.Generator, shape: tuple[int, ...], lo: float = 2.0**-8, hi: float = 600.0
) -> np.ndarray:
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), shape))
    return (mag * rng.choice([-1.0, 1.0], shape)).astype(np.float16)


def sdp_run(p: SdpParams, x: np.ndarray, mem: ByteMemory, dst_prec: Precision) -> np.ndarray:
    c, h, w = x.shape
    src = Cube(0, w, h, c, w * 32, h * w * 32, F16)
    scatter(mem, src, NV_FULL, x.view(np.uint16), "t")
    dst = Cube(0x4000, w, h, c, w * 32, h * w * 32, dst_prec)
    p = SdpParams(
        **{
            **p.__dict__,
            "width": w - 1,
            "height": h - 1,
            "channel": c - 1,
            "src_line_stride": w * 32,
            "src_surface_stride": h * w * 32,
            "dst_base_addr": 0x4000,
            "dst_line_stride": w * 32,
            "dst_surface_stride": h * w * 32,
        }
    )
    sdp.execute(p, mem, NV_FULL)
    return np.asarray(gather(mem, dst, NV_FULL, "t"))


def test_sdp_bias_per_channel_and_relu_equal_ieee() -> None:
    rng = np.random.default_rng(1)
    x = halves(rng, (20, 3, 4))
    bias = halves(rng, (20,))
    mem = ByteMemory(0x8000)
    mem.data[0x6000 : 0x6000 + 40] = f16(bias).view(np.uint8)
    p = SdpParams(
        width=0,
        height=0,
        channel=0,
        in_precision=2,
        proc_precision=2,
        out_precision=2,
        bs=SdpX(bypass=0, alu_bypass=0, alu_algo=2, alu_src=1, relu_bypass=0),
        brdma=SdpOperandDma(disable=0, data_use=1, data_size=1, data_mode=0, base_addr=0x6000),
    )
    got = sdp_run(p, x, mem, F16)
    want = np.maximum(x.astype(np.float32) + bias.astype(np.float32)[:, None, None], 0).astype(np.float16)
    assert np.array_equal(got, f16(want))


def test_sdp_scale_per_element_then_y_add_into_int16_equal_ieee() -> None:
    rng = np.random.default_rng(2)
    x = halves(rng, (16, 2, 3), hi=100.0)
    scale = halves(rng, (16, 2, 3), lo=0.25, hi=8.0)
    mem = ByteMemory(0x8000)
    # per-element operands: 16 two-byte values per (x, y), lines of 3 x 32 bytes
    ops = np.zeros((2, 3, 16), np.uint16)
    ops[:] = f16(scale).transpose(1, 2, 0)
    mem.data[0x6000 : 0x6000 + ops.nbytes] = ops.reshape(-1).view(np.uint8)
    p = SdpParams(
        width=0,
        height=0,
        channel=0,
        in_precision=2,
        proc_precision=2,
        out_precision=1,
        bn=SdpX(bypass=0, mul_bypass=0, mul_src=1),
        nrdma=SdpOperandDma(
            disable=0,
            data_use=0,
            data_size=1,
            data_mode=1,
            base_addr=0x6000,
            line_stride=96,
            surface_stride=192,
        ),
        ew=SdpY(bypass=0, alu_bypass=0, alu_algo=2, alu_operand=f32bits(0.75)),
    )
    got = sdp_run(p, x, mem, Precision.INT16)
    half = (
        (x.astype(np.float32) * scale.astype(np.float32) + np.float32(0.75))
        .astype(np.float16)
        .astype(np.float64)
    )
    want = np.sign(half) * np.floor(np.abs(half) + 0.5)  # FP16 -> INT16 rounds half away from zero
    assert np.array_equal(got, want.astype(np.int16))


def test_sdp_nan_inputs_flush_to_zero_when_asked() -> None:
    x = np.full((16, 1, 2), np.float16(1.5))
    x[3, 0, 1] = np.float16(np.nan)
    p = SdpParams(
        width=0,
        height=0,
        channel=0,
        in_precision=2,
        proc_precision=2,
        out_precision=2,
        bs=SdpX(bypass=0, alu_bypass=0, alu_algo=2, alu_operand=int(f16(np.array([1.0]))[0])),
    )
    kept = sdp_run(p, x, ByteMemory(0x8000), F16)
    assert (int(kept[3, 0, 1]) & 0x7C00) == 0x7C00 and int(kept[0, 0, 0]) == 0x4100  # NaN stays, 1.5 + 1
    flushed = sdp_run(SdpParams(**{**p.__dict__, "nan_to_zero": 1}), x, ByteMemory(0x8000), F16)
    assert int(flushed[3, 0, 1]) == 0x3C00  # 0 + 1


def test_sdp_fp16_lut_matches_nvidias_hls_results() -> None:
    le = tuple(int(v) for v in f16(np.arange(65) / 8.0))
    lo = tuple(int(v) for v in f16(-np.arange(257) / 64.0))
    h1 = int(f16(np.array([1.0]))[0])
    lut = SdpLut(
        le_function=0,
        uflow_priority=1,
        le_index_offset=0xFE,
        lo_index_select=0xFD,
        le_start=0,
        le_end=f32bits(2.0**61),
        lo_start=f32bits(-1.0),
        lo_end=f32bits(31.0),
        le_slope_uflow_scale=h1 - 0x400,
        le_slope_oflow_scale=0xB400,
        lo_slope_uflow_scale=0x4000,
        lo_slope_oflow_scale=0x3E00,
        le_table=le,
        lo_table=lo,
    )
    vals = [0.1, 0.3, 1.0, 3.7, 100.5, -0.5, -7.0, 0.0, 1e-3, 40.0, 2.5, -1.0, 30.9, 31.0, 65504.0, 0.2]
    x = np.array(vals, dtype=np.float16).reshape(16, 1, 1)
    p = SdpParams(
        width=0,
        height=0,
        channel=0,
        in_precision=2,
        proc_precision=2,
        out_precision=2,
        ew=SdpY(bypass=0, lut_bypass=0),
        lut=lut,
    )
    got = sdp_run(p, x, ByteMemory(0x8000), F16)[:, 0, 0].tolist()
    nvidia = [
        0xB066,
        0x2668,
        0x3400,
        0x37B3,
        0x3C49,
        0xAC00,
        0xCA00,
        0xB000,
        0xB001,
        0x3B40,
        0x3680,
        0x0,
        0x3AEF,
        0x3AF0,
        0x4080,
        0xB0CD,
    ]
    assert got == nvidia


def pdp_run(p, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    c, h, w = x.shape
    ow, oh = p.cube_out_width + 1, p.cube_out_height + 1
    src = Cube(0, w, h, c, w * 32, h * w * 32, F16)
    dst = Cube(0x8000, ow, oh, c, ow * 32, oh * ow * 32, F16)
    mem = ByteMemory(0x10000)
    scatter(mem, src, NV_FULL, x.view(np.uint16), "t")
    q = pdp.PdpParams(
        **{
            **p.__dict__,
            "src_line_stride": src.line_stride,
            "src_surface_stride": src.surf_stride,
            "dst_base_addr": dst.address,
            "dst_line_stride": dst.line_stride,
            "dst_surface_stride": dst.surf_stride,
        }
    )
    pdp.execute(q, mem, NV_FULL)
    return np.asarray(gather(mem, dst, NV_FULL, "t"))


@pytest.mark.parametrize("method", [1, 2])
def test_pdp_fp16_max_min_equal_numpy(method: int) -> None:
    rng = np.random.default_rng(method)
    x = halves(rng, (16, 7, 9))
    p = make(F16, 16, 7, 9, method, 3, 2, 2, 2, (1, 1, 0, 1))
    got = pdp_run(p, x).view(np.float16)
    pad = np.float16(-np.inf if method == 1 else np.inf)
    xp = np.pad(x, ((0, 0), (0, 1), (1, 1)), constant_values=pad)
    red = np.max if method == 1 else np.min
    want = np.array(
        [
            [
                [red(xp[c, oy * 2 : oy * 2 + 2, ox * 2 : ox * 2 + 3]) for ox in range(got.shape[2])]
                for oy in range(got.shape[1])
            ]
            for c in range(16)
        ],
        dtype=np.float16,
    )
    assert np.array_equal(got, want)


def fp17_add(a: int, b: int) -> int:
    r = round_rne(value(a, FP17) + value(b, FP17), FP17)
    assert r is not None
    return r


def fp17_mul(a: int, b: int) -> int:
    r = round_rne(value(a, FP17) * value(b, FP17), FP17)
    assert r is not None
    return r


def to17(h: int) -> int:
    r = (
        round_rne(value(h, FP16), FP17)
        if (h & 0x7C00)
        else round_rne(Fraction(h & 0x3FF, 1 << 24) * (-1 if h & 0x8000 else 1), FP17)
    )
    assert r is not None
    return r


def test_pdp_fp16_average_sums_in_fp17_in_the_hardwares_order() -> None:
    rng = np.random.default_rng(5)
    x = halves(rng, (16, 5, 6), hi=2000.0)
    pad = int(f16(np.array([0.0]))[0])
    p = make(
        F16,
        16,
        5,
        6,
        0,
        3,
        3,
        1,
        2,
        (1, 1, 1, 0),
        recip_kernel_width=0x7555,
        recip_kernel_height=0x7555,
        **{f"pad_value_{n}x": pad for n in range(1, 8)},
    )
    got = pdp_run(p, x)
    bits = x.view(np.uint16).astype(int)
    for c in (0, 7, 15):
        for oy in range(got.shape[1]):
            for ox in range(got.shape[2]):
                acc = None
                for r in range(oy * 2 - 1, oy * 2 + 2):
                    if not 0 <= r < 5:
                        continue
                    row = None
                    for q in range(ox - 1, ox + 2):
                        if 0 <= q < 6:
                            v = to17(int(bits[c, r, q]))
                            row = v if row is None else fp17_add(row, v)
                    acc = row if acc is None else fp17_add(row, acc)
                assert acc is not None
                avg = fp17_mul(fp17_mul(acc, 0x7555), 0x7555)
                want = round_rne(value(avg, FP17), FP16)
                assert int(got[c, oy, ox]) == want, (c, oy, ox)


def test_pdp_fp16_padding_values_are_fp17_and_scaled_by_the_kernel_width() -> None:
    x = np.array([[[1.0, 2.0], [4.0, 8.0]]] * 16, dtype=np.float16)
    half_17 = 0x7800  # 0.5 in FP17 (bias 31)
    p = make(
        F16,
        16,
        2,
        2,
        0,
        3,
        3,
        1,
        1,
        (1, 0, 1, 0),
        recip_kernel_width=0x7C00,
        recip_kernel_height=0x7C00,
        pad_value_1x=half_17,
        pad_value_2x=0x7C00,
    )
    got = pdp_run(p, x).view(np.float16)
    # rows: 1+2+0.5 = 3.5 and 4+8+0.5 = 12.5; the padded top row adds 0.5 * 3 (kernel width): 17.5
    assert got.shape == (16, 1, 1) and float(got[0, 0, 0]) == 17.5
