"""Winograd convolution F(2x2, 3x3) (nv_full), bit for bit as nvdla/hw ``cmod`` computes it: CDMA
(``WinoConvDataResponseSequencerCommon``), CSC (``SendDataToMacSequencerWinoConvCommon`` and its
pre-addition ``NV_NVDLA_CSC_pra_cell``, ``SendWeightToMacSequencerWinoConvCommon``), CMAC's Winograd
mode and CACC.

- CDMA pads the input (``D_ZERO_PADDING``, its value) and folds the convolution stride into channels:
  padded pixel ``(X·sx + px, Y·sy + py)`` becomes pixel (X, Y) of an extended cube, channel
  ``((py·sx + px)·S + s)·epa + lane`` for surface s's lane (whole surfaces: the unused lanes of the last
  one come from memory). FP16 NaNs become +0 with ``nan_to_zero`` (padding included).
- CSC takes, for each 2x2 output tile (tx, ty), the extended cube's 4x4 tile at (2tx, 2ty), per block
  of 4 channels ("super channel"), and transforms each channel with ``Bᵀ·d·B`` (rows then columns:
  ``r0 - r2, r1 + r2, r2 - r1, r1 - r3``): integers exactly (17, then 18 bits) then rounded right by
  ``PRA_TRUNCATE`` half away from zero and saturated to the precision; FP16 in FP17 (each sum rounded)
  and back to FP16. Lane ``4·p + c`` of the MAC atom holds position p (row-major) of channel c.
- The weights are the compiler's pre-transformed 4x4 kernels (``G·g·Gᵀ``), per kernel group, per block
  of 4 channels, per kernel: 16 positions x 4 channels (lane order).
- CMAC multiplies lane by lane (FP16: NVIDIA's MAC cell, one exponent for all 64 lanes, each product
  truncated: pydla.hw.nvdla.cmac_fast), sums the 4 channels of each position and applies ``Aᵀ·M·A``
  (``m0 + m1 + m2``, ``m1 - m2 - m3``) exactly: 4 results sharing the atom's exponent. CACC adds the
  blocks in order (48-bit saturating integers, or its FP48 float) per output.

Output tile (tx, ty) gives outputs (2tx + c, 2ty + r). The output size is a multiple of 4 each way.

The integer paths are GEMMs: the pre-addition one float32 GEMM with ``Bᵀ ⊗ Bᵀ`` (exact: |sums| < 2^19),
each position's sum over the channels one GEMM (float32 below 2^24, float64 below 2^53; per block of
4 channels with CACC's 48-bit saturation beyond), the post-addition one float64 GEMM. Speed
(bench_nvdla_blocks, INT8 56x56x64->64, 2 shared cores): 0.07-0.3 s, 5-7x a float32 im2col + sgemm of
the direct 3x3 convolution (before the GEMMs: 0.22 s at best). FP16 goes through the MAC cell
(pydla.hw.nvdla.cmac_fast); the pre-addition in FP17 with numpy's float16 rounding where it is exact.

Usage::

    geometry = check(p, NV_FULL, Precision.FP16)
    ext, nan, inf = extended(p, geometry, prec, memory, sram, NV_FULL)
    tiles = transformed_tiles(ext, geometry, prec, p.csc.pra_truncate)
    bits = convolve_fp16(tiles, weights, geometry)        # weights (K, C_ext, 16): weight_offsets(...)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import surface
from pydla.hw.nvdla.cacc import accumulate_int, fp48_add, fp48_to_fp32
from pydla.hw.nvdla.cmac_fast import data_operands, products, weight_operands
from pydla.hw.nvdla.cmac_fp16 import MAC_NAN, mac_atom
from pydla.hw.nvdla.conv_params import PIXEL, ConvParams
from pydla.hw.nvdla.intmath import I64, saturate, shift_right_round, sign_extend
from pydla.hw.nvdla.memory import NvdlaMemory, select
from pydla.hw.nvdla.nvfloat import FP17, fp16_to_fp17, fp17_to_fp16, fp_add, fp_sub
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NvdlaTarget

_A = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.int64)  # Aᵀ of F(2x2, 3x3)
# position p = 4y + x -> output 2r + c': the coefficient a[r][y] · a[c'][x]; per lane 4p + c the same
POSITIONS = np.einsum("ry,cx->yxrc", _A, _A).reshape(16, 4)
COMBINE = POSITIONS.repeat(4, axis=0)
_DGEMM_EXACT = 1 << 47
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float32)  # Bᵀ
_KRON_B = np.kron(_BT, _BT).T.copy()  # d (16, row-major) @ _KRON_B = Bᵀ·d·B (row-major)


def _bad(where: str, message: str, code: NvError = NvError.BadValue) -> DlaError:
    return DlaError(code, f"{where}: {message}")


@dataclass(frozen=True)
class WinoGeometry:
    """Sizes of a Winograd convolution."""

    width: int  # the input cube (CDMA)
    height: int
    channel: int
    surfaces: int
    epa: int
    pad: tuple[int, int, int, int]  # left, right, top, bottom
    stride: tuple[int, int]  # x, y
    ext_width: int  # the stride-extended, padded cube CSC reads
    ext_height: int
    ext_channel: int
    out_width: int
    out_height: int
    kernels: int


def check(p: ConvParams, target: NvdlaTarget, prec: Precision) -> WinoGeometry:
    """Refuse what the C model does not compute (its FAILs and hangs), naming the field."""
    d, s = p.cdma, p.csc
    if not target.winograd:
        raise _bad("CDMA conv_mode", f"{target.name} has no Winograd mode", NvError.NotSupported)
    if d.datain_format == PIXEL:
        raise _bad("CDMA datain_format", "Winograd convolution takes feature data, not pixels")
    if d.in_precision != d.proc_precision:
        raise _bad("CDMA in_precision", f"{d.in_precision} differs from proc_precision {d.proc_precision}")
    if d.batches:
        raise _bad("CDMA batches", f"{d.batches + 1} batches: Winograd convolution has one",
                   NvError.NotSupported)
    sx, sy = d.conv_x_stride + 1, d.conv_y_stride + 1
    w, h, c = d.datain_width + 1, d.datain_height + 1, d.datain_channel + 1
    total_w, total_h = d.pad_left + w + d.pad_right, d.pad_top + h + d.pad_bottom
    if total_w % (4 * sx) or total_h % (4 * sy):
        raise _bad("CDMA pad_right", f"the padded input {total_w}x{total_h} is not a multiple of 4 x stride "
                                     f"({4 * sx}x{4 * sy})")
    epa = target.epa(prec)
    surfaces = -(-c // epa)
    g = WinoGeometry(width=w, height=h, channel=c, surfaces=surfaces, epa=epa,
                     pad=(d.pad_left, d.pad_right, d.pad_top, d.pad_bottom), stride=(sx, sy),
                     ext_width=total_w // sx, ext_height=total_h // sy, ext_channel=sx * sy * surfaces * epa,
                     out_width=s.dataout_width + 1, out_height=s.dataout_height + 1,
                     kernels=s.weight_kernel + 1)
    entries = g.ext_width * sx * sy * surfaces // 4  # CBUF entries of a row of the extended cube
    for block, field, value, want in (
            ("CSC", "datain_width_ext", s.datain_width_ext + 1, g.ext_width),
            ("CSC", "datain_height_ext", s.datain_height_ext + 1, g.ext_height),
            ("CSC", "datain_channel_ext", s.datain_channel_ext + 1, g.ext_channel),
            ("CSC", "weight_channel_ext", s.weight_channel_ext + 1, g.ext_channel),
            ("CSC", "weight_width_ext", s.weight_width_ext + 1, 4),
            ("CSC", "weight_height_ext", s.weight_height_ext + 1, 4),
            ("CDMA", "entries", d.entries + 1, entries), ("CSC", "entries", s.entries + 1, entries),
            ("CDMA", "byte_per_kernel", d.byte_per_kernel + 1, 16 * g.ext_channel * prec.bpe)):
        if value != want:
            raise _bad(f"{block} {field}", f"{value} (the register + 1) is not {want} for this Winograd "
                                           "convolution")
    for name, out, ext in (("dataout_width", g.out_width, g.ext_width),
                           ("dataout_height", g.out_height, g.ext_height)):
        if out % 4 or out + 2 > ext:
            raise _bad(f"CSC {name}", f"{out}: a Winograd output is a multiple of 4 and at least 2 smaller "
                                      f"than the extended input ({ext})")
    ring = (s.data_bank + 1) * target.cbuf_bank_entries
    if entries * g.ext_height > ring:  # CSC waits for the whole input in CBUF
        raise _bad("CSC data_bank", f"{s.data_bank + 1} banks ({ring} entries) do not hold the extended "
                                    f"input's {entries * g.ext_height} entries")
    return g


def _pad_value(raw: int, prec: Precision) -> int:
    v = raw & (0xFF if prec is Precision.INT8 else 0xFFFF)
    return sign_extend(v, 8 * prec.bpe) if prec.is_int else v


def extended(p: ConvParams, g: WinoGeometry, prec: Precision, memory: NvdlaMemory,
             sram: NvdlaMemory | None, target: NvdlaTarget) -> tuple[npt.NDArray[np.generic], int, int]:
    """The padded, stride-extended cube (C_ext, H_ext, W_ext) as CDMA writes it to CBUF, and the FP16 NaN
    and Inf counts of its elements."""
    d = p.cdma
    cube = surface.Cube(d.datain_addr_0, g.width, g.height, g.channel, d.line_stride, d.surf_stride, prec)
    mem = select(memory, sram, d.datain_ram_type, "CDMA data")
    x = surface.gather(mem, cube, target, "CDMA data", lanes=True)
    (left, right, top, bottom), (sx, sy) = g.pad, g.stride
    padded = np.full((x.shape[0], top + g.height + bottom, left + g.width + right),
                     np.array(_pad_value(d.pad_value, prec)).astype(prec.dtype), dtype=prec.dtype)
    padded[:, top:top + g.height, left:left + g.width] = x
    ext = padded.reshape(g.surfaces, g.epa, g.ext_height, sy, g.ext_width, sx).transpose(3, 5, 0, 1, 2, 4)
    out = np.ascontiguousarray(ext).reshape(g.ext_channel, g.ext_height, g.ext_width)
    nans = infs = 0
    if prec is Precision.FP16:
        b = out.astype(np.int64)
        nan = (((b >> 10) & 31) == 31) & ((b & 0x3FF) != 0)
        nans, infs = int(nan.sum()), int(((((b >> 10) & 31) == 31) & ((b & 0x3FF) == 0)).sum())
        if d.nan_to_zero:
            out = np.where(nan, np.uint16(0), out)
    return out, nans, infs


def _rows_then_columns(t: npt.NDArray[np.generic], add: object, sub: object) -> npt.NDArray[np.generic]:
    """``Bᵀ·t·B`` on (..., 4, 4) with the given add/sub, in the C model's order (rows first)."""
    def apply(v: npt.NDArray[np.generic], axis: int) -> npt.NDArray[np.generic]:
        r = [np.take(v, i, axis=axis) for i in range(4)]
        rows = [sub(r[0], r[2]), add(r[1], r[2]), sub(r[2], r[1]), sub(r[1], r[3])]  # type: ignore[operator]
        return np.stack(rows, axis=axis)
    return apply(apply(t, -2), -1)


def transformed_tiles(ext: npt.NDArray[np.generic], g: WinoGeometry, prec: Precision, pra_truncate: int
                      ) -> npt.NDArray[np.generic]:
    """CSC's transformed input tiles (T, C_ext, 16) in the processing precision's elements (FP16 as
    uint16 patterns), tiles t = ty · (W_out / 2) + tx."""
    ty, tx = g.out_height // 2, g.out_width // 2
    win = np.lib.stride_tricks.sliding_window_view(ext, (4, 4), axis=(1, 2))[:, ::2, ::2][:, :ty, :tx]
    tiles = np.ascontiguousarray(win.transpose(1, 2, 0, 3, 4)).reshape(ty * tx, g.ext_channel, 4, 4)
    if prec is Precision.FP16:
        def add(a: I64, b: I64) -> I64:
            return fp_add(a, b, FP17)

        def sub(a: I64, b: I64) -> I64:
            return fp_sub(a, b, FP17)

        out = fp17_to_fp16(_rows_then_columns(fp16_to_fp17(tiles.astype(np.int64)), add, sub))
        result: npt.NDArray[np.generic] = out.astype(np.uint16).reshape(ty * tx, g.ext_channel, 16)
        return result
    # integers: exact in any order, one float32 GEMM (|sums| < 2^19) with Bᵀ ⊗ Bᵀ
    flat = tiles.reshape(-1, 16).astype(np.float32) @ _KRON_B
    t = flat.astype(np.int64).reshape(tiles.shape)
    v = saturate(shift_right_round(t, pra_truncate), 8 * prec.bpe).astype(prec.dtype)
    out16: npt.NDArray[np.generic] = v.reshape(ty * tx, g.ext_channel, 16)
    return out16


def weight_offsets(kernels: int, channels: int, kf: int) -> npt.NDArray[np.int64]:
    """Element offsets (K, C_ext, 16) of Winograd weights: per kernel group, per block of 4 channels, per
    kernel, 16 positions x 4 channels."""
    k = np.arange(kernels, dtype=np.int64)[:, None, None]
    g, kk = k // kf, k % kf
    kg = np.minimum(kf, kernels - g * kf)
    c = np.arange(channels, dtype=np.int64)[None, :, None]
    pos = np.arange(16, dtype=np.int64)[None, None, :]
    out: npt.NDArray[np.int64] = g * kf * 16 * channels + (c // 4) * 64 * kg + kk * 64 + pos * 4 + c % 4
    return out


def _to_outputs(y: npt.NDArray[np.generic], g: WinoGeometry) -> npt.NDArray[np.generic]:
    """(T, K, 4) tile results -> (1, K, H_out, W_out)."""
    ty, tx = g.out_height // 2, g.out_width // 2
    out: npt.NDArray[np.generic] = (y.reshape(ty, tx, g.kernels, 2, 2).transpose(2, 0, 3, 1, 4)
                                    .reshape(1, g.kernels, g.out_height, g.out_width))
    return out


def sums_int(tiles: npt.NDArray[np.generic], weights: npt.NDArray[np.generic], g: WinoGeometry) -> I64:
    """CACC's 48-bit sums (1, K, H_out, W_out) of an INT8/INT16 Winograd convolution; ``weights`` (K,
    C_ext, 16). Each position's sum over the channels is one GEMM, exact in float32 below 2^24 and in
    float64 below 2^53; the post-addition adds at most 9 of them, so below 2^47 nothing saturates."""
    x_max = int(np.abs(tiles.astype(np.int64)).max(initial=0))
    bound = x_max * int(np.abs(weights.astype(np.int64)).sum(axis=1).max(initial=0))
    dtype: type = np.float32 if bound < 1 << 24 else np.float64
    v: npt.NDArray[np.floating] = np.ascontiguousarray(tiles.transpose(2, 0, 1), dtype=dtype)  # (16, T, C)
    w: npt.NDArray[np.floating] = np.ascontiguousarray(weights.transpose(2, 1, 0), dtype=dtype)  # (16, C, K)
    n_t = tiles.shape[0]
    post = POSITIONS.T.astype(np.float64)  # (4, 16): the post-addition, exact in float64 below 2^53

    def outputs(m: npt.NDArray[np.floating]) -> I64:  # (16, T, K) -> (T, K, 4)
        y = (post @ m.reshape(16, -1).astype(np.float64)).astype(np.int64)
        out: I64 = y.reshape(4, n_t, g.kernels).transpose(1, 2, 0)
        return out

    if 9 * bound < _DGEMM_EXACT:
        return _to_outputs(outputs(np.matmul(v, w)), g).astype(np.int64)
    acc = np.zeros((n_t, g.kernels, 4), dtype=np.int64)
    for b in range(0, g.ext_channel, 4):  # CACC adds the blocks of 4 channels with 48-bit saturation
        acc = accumulate_int(acc, outputs(np.matmul(v[:, :, b:b + 4], w[:, b:b + 4])))
    return _to_outputs(acc, g).astype(np.int64)


def convolve_fp16(tiles: npt.NDArray[np.generic], weights: npt.NDArray[np.generic], g: WinoGeometry
                  ) -> npt.NDArray[np.uint32]:
    """FP32 bit patterns (1, K, H_out, W_out) of an FP16 Winograd convolution; ``weights`` (K, C_ext,
    16)."""
    n_t = tiles.shape[0]
    acc_e = np.zeros((n_t, g.kernels, 4), dtype=np.int64)
    acc_m = np.zeros((n_t, g.kernels, 4), dtype=np.int64)
    for b in range(0, g.ext_channel, 4):
        x = tiles[:, b:b + 4].transpose(0, 2, 1).reshape(n_t, 64)  # lane 4p + c
        w = weights[:, b:b + 4].transpose(0, 2, 1).reshape(g.kernels, 64)
        dx, dw = data_operands(x), weight_operands(w)
        e, m = products(dx.high, dx.mant, dx.key, dw.high, dw.mant, dw.key, COMBINE)
        if dx.has_nan or dw.has_nan:
            ne, nm = mac_atom(dx.bits[:, None, :], dw.bits[None])
            nan = ne == MAC_NAN
            e = np.where(nan, ne, e)
            m = np.where(nan[..., None], nm[..., None], m)
        acc_e, acc_m = fp48_add(acc_e, acc_m, e[..., None], m)
    return _to_outputs(fp48_to_fp32(acc_e, acc_m).astype(np.uint32), g).astype(np.uint32)
