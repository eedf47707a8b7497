"""The convolution pipeline CDMA -> CSC -> CMAC -> CACC, bit for bit as nvdla/hw ``cmod/cdma``, ``csc``,
``cmac`` and ``cacc`` compute it: direct convolution on feature data, image (pixel) input
(pydla.hw.nvdla.conv_image) and Winograd F(2x2,3x3) (nv_full: pydla.hw.nvdla.conv_winograd).

- CDMA reads the input cube (its surfaces; a 1x1 cube with packed lines and surfaces as consecutive
  atoms), flushes FP16 NaNs to +0 when ``nan_to_zero``, and for INT8/INT16 applies the input converter
  when ``cvt_en``: ``sat((x - cvt_offset)·cvt_scale / 2^cvt_truncate)``, rounded half away from zero,
  saturated to the precision. It reads the weights (pydla.hw.nvdla.conv_weights has their layout).
- CSC feeds CMAC, per channel block of the MAC array's atomic C, then kernel row and column, the input
  under the kernel (stride, dilation; the padding value outside the input: pydla.hw.nvdla.conv_taps).
- CMAC and CACC: integer sums exact, accumulated with 48-bit saturation, truncated and saturated to
  32 bits (pydla.hw.nvdla.conv_int, pydla.hw.nvdla.cacc; direct convolution as exact float GEMMs with
  the weights prepared once per launch: pydla.hw.nvdla.conv_gemm); FP16 in NVDLA's own arithmetic
  (pydla.hw.nvdla.conv_fp16).

CACC hands its output to the SDP (in NVDLA 1.0 the SDP writes a convolution's result, CACC has no
path to memory): :attr:`ConvResult.to_sdp` is what the SDP's ``flying_input`` takes.

Compressed weights (nv_full) are expanded as pydla.hw.nvdla.conv_compressed describes. CSC's atoms
reach the MAC paths through one interface (pydla.hw.nvdla.conv_atoms); FP16's MAC cell is
pydla.hw.nvdla.cmac_fast, equal to the Booth multiplier of pydla.hw.nvdla.cmac_fp16.

Usage::

    result = execute(params, mem, NV_FULL)
    sdp.execute(sdp_params, mem, NV_FULL, flying_input=result.to_sdp)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla import (
    cacc,
    conv_compressed,
    conv_fp16,
    conv_gemm,
    conv_image,
    conv_int,
    conv_winograd,
    pixel,
    surface,
)
from pydla.hw.nvdla.conv_atoms import DirectAtoms
from pydla.hw.nvdla.conv_checks import check
from pydla.hw.nvdla.conv_gemm import PreparedWeights, WeightCache
from pydla.hw.nvdla.conv_params import COMPRESSED, CONV_WINOGRAD, PIXEL, ConvParams
from pydla.hw.nvdla.conv_taps import Geometry, Taps
from pydla.hw.nvdla.intmath import saturate, shift_right_round, sign_extend
from pydla.hw.nvdla.memory import NvdlaMemory, access, select
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NvdlaTarget


@dataclass(frozen=True)
class ConvResult:
    """What a convolution produced: the SDP's input and the blocks' statistics registers."""

    to_sdp: npt.NDArray[np.generic]  # (batch, K, H, W): int32, or FP32 bit patterns as uint32 for FP16
    saturations: int = 0  # CACC D_OUT_SATURATION
    nan_input_data: int = 0  # CDMA D_NAN_INPUT_DATA_NUM (FP16)
    inf_input_data: int = 0
    nan_input_weight: int = 0  # CDMA D_NAN_INPUT_WEIGHT_NUM (FP16)
    inf_input_weight: int = 0


def _nan_inf(bits: npt.NDArray[np.generic]) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    b = bits.astype(np.int64)
    top = ((b >> 10) & 31) == 31
    frac = (b & 0x3FF) != 0
    return top & frac, top & ~frac


def _data(p: ConvParams, g: Geometry, prec: Precision, memory: NvdlaMemory, sram: NvdlaMemory | None,
          target: NvdlaTarget) -> tuple[npt.NDArray[np.generic], int, int]:
    """The input cube as CDMA stores it in CBUF, channel-last (N, H, W, lanes >= C), and its NaN and Inf
    counts."""
    d = p.cdma
    one_by_one = d.line_packed and d.surf_packed and g.width == 1 and g.height == 1
    cube = surface.Cube(d.datain_addr_0, g.width, g.height, g.channel, d.line_stride,
                        target.atom if one_by_one else d.surf_stride, prec, batch=g.batches,
                        batch_stride=d.batch_stride)
    mem = select(memory, sram, d.datain_ram_type, "CDMA data")
    x = surface.gather_channels_last(mem, cube, target, "CDMA data")[..., :g.channel]
    nans = infs = 0
    if prec is Precision.FP16:
        nan, inf = _nan_inf(x)
        nans, infs = int(nan.sum()), int(inf.sum())
        if d.nan_to_zero:
            x = np.where(nan, np.uint16(0), x)
    elif d.cvt_en:
        scaled = (x.astype(np.int64) - sign_extend(d.cvt_offset, 16)) * sign_extend(d.cvt_scale, 16)
        t = shift_right_round(scaled, d.cvt_truncate)
        x = saturate(t, 8 * prec.bpe).astype(prec.dtype)
    return x, nans, infs


def _weight_bytes(p: ConvParams, g: Geometry, prec: Precision, memory: NvdlaMemory, sram: NvdlaMemory | None,
                  target: NvdlaTarget) -> tuple[npt.NDArray[np.uint8], int, int]:
    """The weights' uncompressed bytes, in their layout, and their FP16 NaN and Inf counts."""
    d = p.cdma
    mem = select(memory, sram, d.weight_ram_type, "CDMA weights")
    with access("CDMA weights"):
        raw = mem.read(d.weight_addr, d.weight_bytes)
    nans = infs = 0
    if prec is Precision.FP16:
        nan, inf = _nan_inf(np.ascontiguousarray(raw[:raw.size // 2 * 2]).view("<u2"))
        nans, infs = int(nan.sum()), int(inf.sum())
    if d.weight_format == COMPRESSED:
        kf, _ = target.kernel_groups(prec)
        with access("CDMA WMB"):
            wmb = mem.read(d.wmb_addr, d.wmb_bytes)
        wgs_bytes = -(-g.kernels // kf) * 4  # one u32 per kernel group, read in whole atoms
        with access("CDMA WGS"):
            wgs = mem.read(d.wgs_addr, -(-wgs_bytes // target.atom) * target.atom)
        per_kernel = g.channel * g.kernel_height * g.kernel_width
        raw = conv_compressed.expand(wmb, raw, wgs, g.kernels, per_kernel, target, prec)
    return raw, nans, infs


def _pad_value(p: ConvParams, prec: Precision) -> int:
    pad = p.csc.pad_value & (0xFF if prec is Precision.INT8 else 0xFFFF)
    return sign_extend(pad, 8 * prec.bpe) if prec.is_int else pad


def _weights_key(p: ConvParams, g: Geometry, prec: Precision, target: NvdlaTarget) -> tuple[object, ...]:
    """What, besides their bytes, the prepared weights of a launch depend on."""
    d = p.cdma
    return (target.name, prec, d.weight_ram_type, d.weight_addr, d.weight_bytes, d.weight_format, d.wmb_addr,
            d.wmb_bytes, d.wgs_addr, g.kernels, g.channel, g.kernel_height, g.kernel_width)


def _prepared(params: ConvParams, g: Geometry, prec: Precision, memory: NvdlaMemory, sram: NvdlaMemory | None,
              target: NvdlaTarget, cache: WeightCache) -> tuple[PreparedWeights, int, int]:
    """The launch's weights, prepared (kept by ``cache`` while their bytes stay the same), and their
    FP16 NaN and Inf counts."""
    raw, nan_w, inf_w = _weight_bytes(params, g, prec, memory, sram, target)
    sizes = (g.kernels, g.channel, g.kernel_height, g.kernel_width)
    prepared = cache.get(_weights_key(params, g, prec, target), raw,
                         lambda: PreparedWeights.make(raw, *sizes, target, prec))
    return prepared, nan_w, inf_w


def _direct(params: ConvParams, g: Geometry, prec: Precision, memory: NvdlaMemory, sram: NvdlaMemory | None,
            target: NvdlaTarget, cache: WeightCache) -> ConvResult:
    """Direct convolution on feature data."""
    prepared, nan_w, inf_w = _prepared(params, g, prec, memory, sram, target, cache)
    x, nan_d, inf_d = _data(params, g, prec, memory, sram, target)
    pad = _pad_value(params, prec)
    if prec.is_int:
        fast = conv_gemm.convolve(x, g, pad, prepared, params.cacc.clip_truncate)
        if fast is not None:
            return ConvResult(to_sdp=fast[0].transpose(0, 3, 1, 2), saturations=fast[1])
    _, cf = target.kernel_groups(prec)
    atoms = DirectAtoms(Taps(x.transpose(0, 3, 1, 2), g, pad), prepared.w4, cf)
    return _by_atoms(atoms, params, prec, (nan_d, inf_d, nan_w, inf_w))


def _image(params: ConvParams, g: Geometry, prec: Precision, memory: NvdlaMemory, sram: NvdlaMemory | None,
           target: NvdlaTarget) -> ConvResult:
    """Image (pixel) input."""
    raw, nan_w, inf_w = _weight_bytes(params, g, prec, memory, sram, target)
    kf, _ = target.kernel_groups(prec)
    lines, nan_d, inf_d = pixel.image_lines(params.cdma, prec, memory, sram, target)
    post = conv_image.post_extension(params)
    offsets = conv_image.weight_offsets(g.kernels, g.kernel_height, g.channel, post, kf)
    w = np.ascontiguousarray(raw[:g.kernels * g.kernel_height * g.channel * prec.bpe]).view(prec.dtype)
    atoms = conv_image.ImageAtoms(params, lines, w[offsets], prec, target)
    return _by_atoms(atoms, params, prec, (nan_d, inf_d, nan_w, inf_w))


def _by_atoms(atoms: DirectAtoms | conv_image.ImageAtoms, params: ConvParams, prec: Precision,
              special: tuple[int, int, int, int]) -> ConvResult:
    """The atom-by-atom sums of a direct or image convolution, as CACC delivers them to the SDP;
    ``special``: the counts of NaN and infinity in the input data, then in the weights (FP16 only)."""
    if prec is Precision.FP16:
        nan_d, inf_d, nan_w, inf_w = special
        bits = conv_fp16.convolve(atoms)
        return ConvResult(to_sdp=bits.transpose(0, 3, 1, 2), nan_input_data=nan_d, inf_input_data=inf_d,
                          nan_input_weight=nan_w, inf_input_weight=inf_w)
    out, saturated = cacc.deliver_int(conv_int.accumulate(atoms), params.cacc.clip_truncate)
    return ConvResult(to_sdp=out.transpose(0, 3, 1, 2), saturations=saturated)


def _winograd(params: ConvParams, g: Geometry, prec: Precision, memory: NvdlaMemory, sram: NvdlaMemory | None,
              target: NvdlaTarget) -> ConvResult:
    wg = conv_winograd.check(params, target, prec)
    ext, nan_d, inf_d = conv_winograd.extended(params, wg, prec, memory, sram, target)
    tiles = conv_winograd.transformed_tiles(ext, wg, prec, params.csc.pra_truncate)
    raw, nan_w, inf_w = _weight_bytes(params, g, prec, memory, sram, target)
    kf, _ = target.kernel_groups(prec)
    flat = np.ascontiguousarray(raw[:wg.kernels * 16 * wg.ext_channel * prec.bpe]).view(prec.dtype)
    w = flat[conv_winograd.weight_offsets(wg.kernels, wg.ext_channel, kf)]
    if prec is Precision.FP16:
        bits = conv_winograd.convolve_fp16(tiles, w, wg)
        return ConvResult(to_sdp=bits, nan_input_data=nan_d, inf_input_data=inf_d, nan_input_weight=nan_w,
                          inf_input_weight=inf_w)
    out, saturated = cacc.deliver_int(conv_winograd.sums_int(tiles, w, wg), params.cacc.clip_truncate)
    return ConvResult(to_sdp=out, saturations=saturated)


def execute(params: ConvParams, memory: NvdlaMemory, target: NvdlaTarget, *,
            sram: NvdlaMemory | None = None, weights: WeightCache | None = None) -> ConvResult:
    """Run one convolution; the result goes to the SDP (see the module's description). ``weights``
    keeps the prepared weights of direct convolutions between runs (the device passes its own)."""
    g, prec = check(params, target)
    if params.cdma.conv_mode == CONV_WINOGRAD:
        return _winograd(params, g, prec, memory, sram, target)
    if params.cdma.datain_format == PIXEL:
        return _image(params, g, prec, memory, sram, target)
    return _direct(params, g, prec, memory, sram, target, weights if weights is not None else WeightCache())
