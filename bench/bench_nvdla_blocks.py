"""NVDLA's block kernels (pydla.hw.nvdla) against plain numpy doing the same work.

Each case runs one block's ``execute`` on an nv_full-sized feature map held in a ByteMemory (so
its time includes reading the surfaces from memory and writing them back, as the device will) and,
in alternating order in the same run, a numpy anchor computing the same result from an array
(without NVDLA's layout or bit-exact rounding rules): a copy for BDMA, a transpose for RUBIK,
sliding-window max / mean for PDP, bias + ReLU + rescale for the SDP, float16 arithmetic for the
FP16 paths. It prints the median time of each and the ratio pydla / numpy (1.0 = as fast as numpy;
the kernels are vectorised, so the ratio measures the price of NVDLA's exact rules and layout).

For the convolution the anchor is float32 im2col + one sgemm; the INT8/INT16 convolution is exact with
float32/float64 GEMMs itself, so its ratio is the price of reading the surfaces and weights from memory
and of CACC's rounding. The FP16 convolution reproduces CMAC's Booth multipliers and CACC's 48-bit
float bit for bit (per atom, vectorised), far slower than a GEMM: it runs on a smaller map. The Winograd
cases (3x3, the compiler's 4x4 weights) and the picture's first layer (RGBA, 7x7 stride 2, through the
image input) take the same anchor for the same layer.

Figures (2 cores shared with other work, so ranges over runs; before = the first FP16 MAC cell with a
Booth multiplier per product): FP16 convolution 14x14x64->64 0.09-0.2 s (before 1-3.5 s), CDP FP16
35-50 ms (before 140-460 ms), INT8 3x3 convolution 0.3-1.7x its anchor, Winograd INT8 5-7x, the INT8
picture 2-4x.

Run: python bench/bench_nvdla_blocks.py [--repeats 7] [--size 56] [--channels 64] [--fp16-conv 14]
     [--image 224]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from pydla.hw.nvdla import (
    bdma,
    cdp,
    conv,
    conv_image,
    conv_params,
    conv_weights,
    conv_winograd,
    pdp,
    rubik,
    sdp,
)
from pydla.hw.nvdla.bdma import BdmaParams, BdmaTransfer
from pydla.hw.nvdla.cdp_params import CdpLut, CdpParams
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.rubik import RubikParams
from pydla.hw.nvdla.sdp_params import SdpLut, SdpOperandDma, SdpParams, SdpX, SdpY
from pydla.hw.nvdla.surface import Cube, scatter
from pydla.hw.nvdla.target import NV_FULL

ATOM = NV_FULL.atom
RECIP = [0x10000, 0x8000, 0x5555, 0x4000, 0x3333, 0x2AAA, 0x2492, 0x2000]


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cube(address: int, w: int, h: int, c: int, prec: Precision) -> Cube:
    return Cube(address, w, h, c, w * ATOM, w * h * ATOM, prec)


def feature(mem: ByteMemory, cb: Cube, data: np.ndarray) -> None:
    scatter(mem, cb, NV_FULL, data, "bench")


def case_bdma(n: int, c: int) -> tuple[Callable[[], object], Callable[[], object], str]:
    size = n * n * c  # bytes of an INT8 feature map
    lines = size // 4096
    mem = ByteMemory(2 * size)
    mem.data[:size] = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
    t = BdmaTransfer(0, size, 4096 // 32 - 1, lines - 1, 4096, 4096, 0, size, size)
    src, dst = mem.data[:size].copy(), np.empty(size, np.uint8)
    return (
        lambda: bdma.execute(BdmaParams((t,)), mem, NV_FULL),
        lambda: np.copyto(dst, src),
        f"BDMA copy {size >> 10} KiB",
    )


def case_rubik(n: int, c: int) -> tuple[Callable[[], object], Callable[[], object], str]:
    w = h = n // 2
    cin = 4 * c
    src = cube(0, w, h, cin, Precision.INT16)
    mem = ByteMemory(4 * w * h * cin * 2 + 4096)
    data = np.random.default_rng(1).integers(-30000, 30000, (cin, h, w)).astype(np.int16)
    feature(mem, src, data)
    surfs = cin // 16
    out_addr = surfs * src.surf_stride
    p = RubikParams(
        rubik_mode=0,
        in_precision=1,
        datain_width=w - 1,
        datain_height=h - 1,
        datain_channel=cin - 1,
        dain_addr=0,
        dain_line_stride=src.line_stride,
        dain_surf_stride=src.surf_stride,
        dain_planar_stride=0,
        dataout_channel=c - 1,
        daout_addr=out_addr,
        daout_line_stride=2 * w * ATOM,
        daout_surf_stride=4 * w * h * ATOM,
        daout_planar_stride=0,
        contract_stride_0=0,
        contract_stride_1=2 * 2 * w * ATOM,
        deconv_x_stride=1,
        deconv_y_stride=1,
    )
    arr = data.reshape(2, 2, c, h, w)

    def anchor() -> object:
        return np.ascontiguousarray(arr.transpose(2, 3, 0, 4, 1)).reshape(c, 2 * h, 2 * w)

    return lambda: rubik.execute(p, mem, NV_FULL), anchor, f"RUBIK contract 2x2 {w}x{h}x{cin} INT16"


def pdp_case(
    n: int, c: int, prec: Precision, method: int
) -> tuple[Callable[[], object], Callable[[], object], str]:
    k, s, pad = 3, 2, 1
    out = (n + 2 * pad - k) // s + 1
    src = cube(0, n, n, c, prec)
    dst = cube(src.surf_stride * (c * prec.bpe // ATOM), out, out, c, prec)
    mem = ByteMemory(dst.address + dst.surf_stride * (c * prec.bpe // ATOM) + 4096)
    rng = np.random.default_rng(2)
    if prec is Precision.FP16:
        data = rng.standard_normal((c, n, n)).astype(np.float16)
        feature(mem, src, data.view(np.uint16))
    else:
        data = rng.integers(-128, 128, (c, n, n)).astype(np.int8)
        feature(mem, src, data)
    p = PdpParams(
        cube_in_width=n - 1,
        cube_in_height=n - 1,
        cube_in_channel=c - 1,
        cube_out_width=out - 1,
        cube_out_height=out - 1,
        cube_out_channel=c - 1,
        pooling_method=method,
        kernel_width=k - 1,
        kernel_height=k - 1,
        kernel_stride_width=s - 1,
        kernel_stride_height=s - 1,
        pad_left=pad,
        pad_top=pad,
        pad_right=pad,
        pad_bottom=pad,
        input_data=int(prec),
        src_base_addr=0,
        src_line_stride=src.line_stride,
        src_surface_stride=src.surf_stride,
        dst_base_addr=dst.address,
        dst_line_stride=dst.line_stride,
        dst_surface_stride=dst.surf_stride,
        recip_kernel_width=RECIP[k - 1] if prec.is_int else 0x7555,
        recip_kernel_height=RECIP[k - 1] if prec.is_int else 0x7555,
    )
    work = data.astype(np.float32)
    fill = -np.inf if method == 1 else 0.0
    padded = np.pad(work, ((0, 0), (pad, pad), (pad, pad)), constant_values=fill)

    def anchor() -> object:
        win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))[:, ::s, ::s]
        res = win.max(axis=(-1, -2)) if method == 1 else win.mean(axis=(-1, -2))
        return res.astype(np.float16 if prec is Precision.FP16 else np.int8)

    name = {0: "average", 1: "max"}[method]
    return (lambda: pdp.execute(p, mem, NV_FULL), anchor, f"PDP {name} 3x3/2 {n}x{n}x{c} {prec.name}")


def sdp_case(
    n: int, c: int, prec: Precision, lut: bool = False
) -> tuple[Callable[[], object], Callable[[], object], str]:
    src = cube(0, n, n, c, prec)
    surfs = -(-c // NV_FULL.epa(prec))
    dst = cube(src.surf_stride * surfs, n, n, c, prec)
    bias_addr = dst.address + dst.surf_stride * surfs
    mem = ByteMemory(bias_addr + 4 * c + 4096)
    rng = np.random.default_rng(3)
    bias = rng.integers(-100, 100, c)
    if prec is Precision.FP16:
        data = rng.standard_normal((c, n, n)).astype(np.float16)
        feature(mem, src, data.view(np.uint16))
        mem.data[bias_addr : bias_addr + 2 * c] = (bias / 64).astype(np.float16).view(np.uint8)
    else:
        info = np.iinfo(prec.dtype)
        data = rng.integers(info.min, info.max, (c, n, n)).astype(prec.dtype)
        feature(mem, src, data)
        mem.data[bias_addr : bias_addr + 2 * c] = bias.astype("<i2").view(np.uint8)
    x1 = SdpX(bypass=0, alu_bypass=0, alu_algo=2, alu_src=1, mul_bypass=1, relu_bypass=0)
    dma = SdpOperandDma(disable=0, data_use=1, data_size=1, data_mode=0, base_addr=bias_addr)
    ew = SdpY()
    table = SdpLut()
    if lut:
        ew = SdpY(bypass=0, lut_bypass=0)
        table = SdpLut(
            le_function=1,
            le_index_select=9,
            lo_index_select=7,
            le_start=(-32768) & 0xFFFFFFFF,
            le_end=32767,
            lo_start=(-16384) & 0xFFFFFFFF,
            lo_end=16383,
            le_table=tuple(int(v) & 0xFFFF for v in np.linspace(-3000, 3000, 65)),
            lo_table=tuple(int(v) & 0xFFFF for v in np.linspace(-1000, 1000, 257)),
        )
    p = SdpParams(
        width=n - 1,
        height=n - 1,
        channel=c - 1,
        in_precision=int(prec),
        proc_precision=int(prec),
        out_precision=int(prec),
        src_base_addr=0,
        src_line_stride=src.line_stride,
        src_surface_stride=src.surf_stride,
        dst_base_addr=dst.address,
        dst_line_stride=dst.line_stride,
        dst_surface_stride=dst.surf_stride,
        bs=x1,
        brdma=dma,
        ew=ew,
        lut=table,
        cvt_scale=3 if prec.is_int else 1,
        cvt_shift=1 if prec.is_int else 0,
    )
    if prec is Precision.FP16:
        fb = (bias / 64).astype(np.float16).astype(np.float32)[:, None, None]

        def anchor() -> object:
            return np.maximum(data.astype(np.float32) + fb, 0).astype(np.float16)
    else:
        ib = bias[:, None, None]
        lo = np.linspace(-3000, 3000, 65)
        grid = np.linspace(-32768, 32768, 65)
        bits = 8 * prec.bpe

        def anchor() -> object:
            v = np.maximum(data.astype(np.int64) + ib, 0)
            if lut:
                v = np.interp(v, grid, lo).astype(np.int64)
            return np.clip((v * 3 + 1) >> 1, -(1 << (bits - 1)), (1 << (bits - 1)) - 1).astype(prec.dtype)

    what = "bias+ReLU" + ("+LUT" if lut else "") + "+convert"
    return lambda: sdp.execute(p, mem, NV_FULL), anchor, f"SDP {what} {n}x{n}x{c} {prec.name}"


def im2col_sgemm(x: np.ndarray, w: np.ndarray, pad: int, stride: int = 1) -> np.ndarray:
    """The anchor for a convolution: float32 im2col and one sgemm."""
    c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    cols = np.concatenate([xp[:, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
                           .reshape(c, -1) for i in range(r) for j in range(s)])
    return (w.transpose(0, 2, 3, 1).reshape(k, -1) @ cols).reshape(k, oh, ow)


def conv_case(n: int, c: int, prec: Precision) -> tuple[Callable[[], object], Callable[[], object], str]:
    """A 3x3 convolution, pad 1, c -> c kernels, as far as CACC (its int32 / FP32 result for the SDP)."""
    k = c
    rng = np.random.default_rng(4)
    src = cube(0, n, n, c, prec)
    w_addr = src.surf_stride * -(-c // NV_FULL.epa(prec))
    mem = ByteMemory(w_addr + k * c * 9 * prec.bpe + 4096)
    if prec is Precision.FP16:
        x = rng.standard_normal((c, n, n)).astype(np.float16)
        w = (rng.standard_normal((k, c, 3, 3)) / 16).astype(np.float16)
        feature(mem, src, x.view(np.uint16))
        mem.write(w_addr, conv_weights.pack(w.view(np.uint16), NV_FULL, prec))
    else:
        info = np.iinfo(prec.dtype)
        x = rng.integers(info.min, info.max, (c, n, n)).astype(prec.dtype)
        w = rng.integers(info.min, info.max, (k, c, 3, 3)).astype(prec.dtype)
        feature(mem, src, x)
        mem.write(w_addr, conv_weights.pack(w, NV_FULL, prec))
    p = conv_params.direct(target=NV_FULL, precision=prec, width=n, height=n, channel=c, kernels=k,
                           kernel_width=3, kernel_height=3, data_addr=0, weight_addr=w_addr, pad=(1, 1, 1, 1),
                           clip_truncate=8 if prec.is_int else 0)
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    return (lambda: conv.execute(p, mem, NV_FULL), lambda: im2col_sgemm(xf, wf, 1),
            f"CONV 3x3 {n}x{n}x{c}->{k} {prec.name}")


def image_case(n: int, prec: Precision) -> tuple[Callable[[], object], Callable[[], object], str]:
    """A picture's first layer: A8B8G8R8 n x n, 7x7 stride 2 pad 3, 64 kernels (INT8 as the pixels are;
    FP16 through the converter), two kernel rows per atom."""
    rng = np.random.default_rng(6)
    k, r, s, stride, pad = 64, 7, 7, 2, 3
    ls = n * 4
    w_addr = -(-n * ls // 128) * 128
    mem = ByteMemory(w_addr + k * r * s * 4 * 2 + 4096)
    mem.data[:n * ls] = rng.integers(0, 256, n * ls, dtype=np.uint8)
    cvt = (128, 1, 7) if prec is Precision.FP16 else None
    p = conv_params.image(target=NV_FULL, in_precision=Precision.INT8, precision=prec, pixel_format=12,
                          elements=4, width=n, height=n, kernels=k, kernel_width=s, kernel_height=r,
                          data_addr=0, weight_addr=w_addr, line_stride=ls, stride=(stride, stride),
                          pad=(pad,) * 4, cvt=cvt, post_extension=2)
    if prec is Precision.FP16:
        w = (rng.standard_normal((k, r, s * 4)) / 16).astype(np.float16).view(np.uint16)
    else:
        w = rng.integers(-128, 128, (k, r, s * 4)).astype(np.int8)
    mem.write(w_addr, conv_image.pack(w, NV_FULL, prec, 2))
    x = mem.data[:n * ls].reshape(n, n, 4).transpose(2, 0, 1).astype(np.float32)
    wf = w.view(np.float16).astype(np.float32) if prec is Precision.FP16 else w.astype(np.float32)
    w4 = wf.reshape(k, r, s, 4).transpose(0, 3, 1, 2)
    return (lambda: conv.execute(p, mem, NV_FULL), lambda: im2col_sgemm(x, w4, pad, stride),
            f"CONV image RGBA {n}x{n} 7x7/2->{k} {prec.name}")


def wino_case(n: int, c: int, prec: Precision) -> tuple[Callable[[], object], Callable[[], object], str]:
    """A 3x3 convolution, pad 1, c -> c kernels, in Winograd mode (transformed 4x4 weights; n rounded down
    to a multiple of 4)."""
    k, n = c, n - n % 4
    rng = np.random.default_rng(7)
    src = cube(0, n, n, c, prec)
    w_addr = src.surf_stride * -(-c // NV_FULL.epa(prec))
    p = conv_params.winograd(target=NV_FULL, precision=prec, width=n, height=n, channel=c, kernels=k,
                             out_width=n, out_height=n, data_addr=0, weight_addr=w_addr)
    ext_c = p.csc.datain_channel_ext + 1
    mem = ByteMemory(w_addr + k * ext_c * 16 * prec.bpe + 4096)
    if prec is Precision.FP16:
        x = rng.standard_normal((c, n, n)).astype(np.float16)
        w = (rng.standard_normal((k, ext_c, 16)) / 16).astype(np.float16).view(np.uint16)
        feature(mem, src, x.view(np.uint16))
    else:
        x = rng.integers(-128, 128, (c, n, n)).astype(np.int8)
        w = rng.integers(-128, 128, (k, ext_c, 16)).astype(np.int8)
        feature(mem, src, x)
    kf, _ = NV_FULL.kernel_groups(prec)
    flat = np.zeros(w.size, dtype=prec.dtype)
    flat[conv_winograd.weight_offsets(k, ext_c, kf).reshape(-1)] = w.reshape(-1)
    mem.write(w_addr, flat.view(np.uint8))
    xf = x.astype(np.float32)
    wf = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    return (lambda: conv.execute(p, mem, NV_FULL), lambda: im2col_sgemm(xf, wf, 1),
            f"CONV Winograd 3x3 {n}x{n}x{c}->{k} {prec.name}")


def cdp_case(n: int, c: int, prec: Precision) -> tuple[Callable[[], object], Callable[[], object], str]:
    """LRN over 5 channels: the anchor is x / (1 + Σx²)^0.75 in float32 with a channel cumsum."""
    src = cube(0, n, n, c, prec)
    surfs = -(-c // NV_FULL.epa(prec))
    dst = cube(src.surf_stride * surfs, n, n, c, prec)
    mem = ByteMemory(dst.address + dst.surf_stride * surfs + 4096)
    rng = np.random.default_rng(5)
    le_curve = 1 / (1 + np.linspace(0, 64, 65)) ** 0.75  # the LRN's (1 + s)^-0.75 over the tables' ranges
    lo_curve = 1 / (1 + np.linspace(0, 16, 257)) ** 0.75
    if prec is Precision.FP16:
        x = rng.standard_normal((c, n, n)).astype(np.float16)
        feature(mem, src, x.view(np.uint16))
        le = tuple(int(v) for v in le_curve.astype(np.float16).view(np.uint16))
        lo = tuple(int(v) for v in lo_curve.astype(np.float16).view(np.uint16))

        def bits(v: float) -> int:
            return int(np.array([v], np.float32).view(np.uint32)[0])

        lut = CdpLut(le_function=1, le_index_select=0, lo_index_select=(-4) & 0xFF, le_end_low=bits(64.0),
                     lo_end_low=bits(16.0), hybrid_priority=1, le_table=le, lo_table=lo)
    else:
        info = np.iinfo(prec.dtype)
        x = rng.integers(info.min, info.max, (c, n, n)).astype(prec.dtype)
        feature(mem, src, x)
        le = tuple(int(v) & 0xFFFF for v in (32767 * le_curve).astype(np.int64))
        lo = tuple(int(v) & 0xFFFF for v in (32767 * lo_curve).astype(np.int64))
        sel = 12 if prec is Precision.INT8 else 28
        le_end, lo_end = 64 << sel, 256 << (sel - 4)
        lut = CdpLut(le_function=1, le_index_select=sel, lo_index_select=sel - 4,
                     le_end_low=le_end & 0xFFFFFFFF, le_end_high=le_end >> 32, lo_end_low=lo_end & 0xFFFFFFFF,
                     lo_end_high=lo_end >> 32, hybrid_priority=1, le_table=le, lo_table=lo)
    p = CdpParams(width=n - 1, height=n - 1, channel=c - 1, input_data=int(prec),
                  src_line_stride=src.line_stride, src_surface_stride=src.surf_stride,
                  dst_base_addr=dst.address, dst_line_stride=dst.line_stride,
                  dst_surface_stride=dst.surf_stride, normalz_len=1, datout_shifter=15 if prec.is_int else 0,
                  lut=lut)
    xf = x.astype(np.float32)

    def anchor() -> object:
        zero = np.zeros((2, n, n), np.float32)
        sq = np.concatenate([zero, xf * xf, zero])
        cs = np.concatenate([np.zeros((1, n, n), np.float32), np.cumsum(sq, axis=0)])
        win = cs[5:5 + c] - cs[:c]  # the sum over channels k-2 .. k+2
        return (xf / (1 + win) ** 0.75).astype(x.dtype)

    return lambda: cdp.execute(p, mem, NV_FULL), anchor, f"CDP LRN 5 {n}x{n}x{c} {prec.name}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--size", type=int, default=56, help="feature map width and height")
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--fp16-conv", type=int, default=14, metavar="SIZE",
                    help="FP16 convolutions of SIZE x SIZE (direct, Winograd; an image of 4 SIZE) (0: skip)")
    ap.add_argument("--image", type=int, default=224, help="the picture's width and height (INT8)")
    args = ap.parse_args()
    n, c = args.size, args.channels
    cases = [
        case_bdma(n, c),
        case_rubik(n, c),
        pdp_case(n, c, Precision.INT8, 1),
        pdp_case(n, c, Precision.INT8, 0),
        pdp_case(n, c, Precision.FP16, 1),
        pdp_case(n, c, Precision.FP16, 0),
        sdp_case(n, c, Precision.INT8),
        sdp_case(n, c, Precision.INT16, lut=True),
        sdp_case(n, c, Precision.FP16),
        conv_case(n, c, Precision.INT8),
        conv_case(n, c, Precision.INT16),
        cdp_case(n, c, Precision.INT8),
        cdp_case(n, c, Precision.INT16),
        cdp_case(n, c, Precision.FP16),
        wino_case(n, c, Precision.INT8),
        image_case(args.image, Precision.INT8),
    ]
    if args.fp16_conv:
        cases += [conv_case(args.fp16_conv, c, Precision.FP16), wino_case(args.fp16_conv, c, Precision.FP16),
                  image_case(args.fp16_conv * 4, Precision.FP16)]
    print(f"{'case':48} {'pydla ms':>9} {'numpy ms':>9} {'ratio':>7}")
    for fn, anchor, name in cases:
        ours = median_time(fn, args.repeats)
        theirs = median_time(anchor, args.repeats)
        print(f"{name:48} {ours * 1e3:9.2f} {theirs * 1e3:9.2f} {ours / theirs:7.2f}")


if __name__ == "__main__":
    main()
