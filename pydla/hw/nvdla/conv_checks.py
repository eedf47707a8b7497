"""What the convolution pipeline refuses before it touches memory: every register field against its width,
and the relations between the five blocks' registers that NVIDIA's C model relies on (it fails, hangs
or computes garbage when they do not hold). Each refusal is a DlaError naming the block and field.

Usage::

    geometry, precision = check(params, NV_FULL)
"""

from __future__ import annotations

import functools
from dataclasses import fields

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.cacc import MAX_TRUNCATE
from pydla.hw.nvdla.conv_params import COMPRESSED, CONV_WINOGRAD, PIXEL, ConvParams
from pydla.hw.nvdla.conv_taps import Geometry
from pydla.hw.nvdla.precision import Precision, precision
from pydla.hw.nvdla.target import NvdlaTarget

# Field widths (bits); 1 for the rest. The wider of the nv_full and the newer register map.
_CDMA = dict(in_precision=2, proc_precision=2, pixel_format=6, pixel_x_offset=5, pixel_y_offset=3,
             datain_width=13, datain_height=13, datain_channel=13, datain_width_ext=13, datain_height_ext=13,
             datain_addr_0=64, datain_addr_1=64, line_stride=32, uv_line_stride=32, surf_stride=32, batches=5,
             batch_stride=32,
             entries=14, grains=12, byte_per_kernel=18, weight_kernel=13, weight_addr=64, weight_bytes=32,
             wgs_addr=64, wmb_addr=64, wmb_bytes=28, mean_ry=16, mean_gu=16, mean_bv=16, mean_ax=16,
             cvt_truncate=6, cvt_offset=16, cvt_scale=16, conv_x_stride=3, conv_y_stride=3, pad_left=5,
             pad_right=6, pad_top=5, pad_bottom=6, pad_value=16, data_bank=5, weight_bank=5)
_CSC = dict(in_precision=2, proc_precision=2, datain_width_ext=13, datain_height_ext=13,
            datain_channel_ext=13, batches=5, y_extension=2, entries=14, weight_width_ext=5,
            weight_height_ext=5, weight_channel_ext=13, weight_kernel=13, weight_bytes=32, wmb_bytes=28,
            dataout_width=13, dataout_height=13,
            dataout_channel=13, atomics=21, rls_slices=14, conv_x_stride_ext=3, conv_y_stride_ext=3,
            x_dilation_ext=5, y_dilation_ext=5, pad_left=5, pad_top=5, pad_value=16, data_bank=5,
            weight_bank=5, pra_truncate=2)
_CMAC = dict(proc_precision=2)
_CACC = dict(proc_precision=2, dataout_width=13, dataout_height=13, dataout_channel=13, dataout_addr=32,
             batches=5, line_stride=24, surf_stride=24, clip_truncate=5)


def _bad(where: str, message: str, code: NvError = NvError.BadValue) -> DlaError:
    return DlaError(code, f"{where}: {message}")


# Fields that hold a signed value: the value or the field's bits are accepted.
_SIGNED = {"cvt_offset", "cvt_scale", "pad_value", "mean_ry", "mean_gu", "mean_bv", "mean_ax"}


def _widths(block: object, widths: dict[str, int], name: str) -> None:
    for f in fields(block):  # type: ignore[arg-type]
        v = getattr(block, f.name)
        bits = widths.get(f.name, 1)
        low = -(1 << (bits - 1)) if f.name in _SIGNED else 0
        if not isinstance(v, int) or not low <= v < (1 << bits):
            raise _bad(f"{name} {f.name}", f"{v!r} does not fit its {bits}-bit field")


# Registers of different blocks that must agree (the blocks exchange data by these counts).
_EQUAL = (
    (("cdma", "conv_mode"), ("csc", "conv_mode"), ("cmac_a", "conv_mode"), ("cmac_b", "conv_mode"),
     ("cacc", "conv_mode")),
    (("cdma", "datain_format"), ("csc", "datain_format")),
    (("cdma", "weight_format"), ("csc", "weight_format")),
    (("cdma", "proc_precision"), ("csc", "in_precision"), ("csc", "proc_precision"),
     ("cmac_a", "proc_precision"), ("cmac_b", "proc_precision"), ("cacc", "proc_precision")),
    (("cdma", "weight_kernel"), ("csc", "weight_kernel"), ("csc", "dataout_channel"),
     ("cacc", "dataout_channel")),
    (("csc", "dataout_width"), ("cacc", "dataout_width")),
    (("csc", "dataout_height"), ("cacc", "dataout_height")),
    (("cdma", "batches"), ("csc", "batches"), ("cacc", "batches")),
    (("cdma", "weight_bytes"), ("csc", "weight_bytes")),
    (("cdma", "wmb_bytes"), ("csc", "wmb_bytes")),
)


def _same(p: ConvParams, group: tuple[tuple[str, str], ...]) -> None:
    (b0, f0), *rest = group
    first = getattr(getattr(p, b0), f0)
    for block, name in rest:
        v = getattr(getattr(p, block), name)
        if v != first:
            raise _bad(f"{block.upper()} {name}", f"{v} differs from {b0.upper()} {f0} {first}")


# The direct and image modes: CSC sees the cube CDMA fetched (Winograd: the padded, stride-extended one).
_SAME_CUBE = (
    (("cdma", "datain_width"), ("csc", "datain_width_ext")),
    (("cdma", "datain_height"), ("csc", "datain_height_ext")),
    (("cdma", "datain_channel"), ("csc", "datain_channel_ext")),
)


def _modes(p: ConvParams, target: NvdlaTarget) -> Precision:
    """The processing precision, and the checks of the input mode (feature data or pixels; Winograd's
    are pydla.hw.nvdla.conv_winograd's)."""
    d, s = p.cdma, p.csc
    if d.weight_format == COMPRESSED and not target.weight_compression:
        raise _bad("CDMA weight_format", f"{target.name} has no weight compression", NvError.NotSupported)
    prec = precision(d.proc_precision, "CDMA D_MISC_CFG.PROC_PRECISION")
    target.require(prec, "convolution")
    precision(d.in_precision, "CDMA D_MISC_CFG.IN_PRECISION")
    if d.conv_mode == CONV_WINOGRAD:
        return prec
    for group in _SAME_CUBE:
        _same(p, group)
    if d.datain_format == PIXEL:
        if d.batches:
            raise _bad("CDMA batches", f"{d.batches + 1} batches: image input has one", NvError.NotSupported)
        if s.weight_width_ext:
            raise _bad("CSC weight_width_ext", f"{s.weight_width_ext + 1}: an image kernel is 1 wide (its "
                                               "columns are channels: channel pre-extension)")
        return prec
    if s.weight_channel_ext != d.datain_channel:
        raise _bad("CSC weight_channel_ext", f"{s.weight_channel_ext} differs from CDMA datain_channel "
                                             f"{d.datain_channel}")
    if d.in_precision != d.proc_precision:
        raise _bad("CDMA in_precision", f"{d.in_precision} differs from proc_precision {d.proc_precision}: "
                                        "feature data is not converted between precisions")
    if d.cvt_en and prec is Precision.FP16:
        raise _bad("CDMA cvt_en", "the input converter does not take FP16 data")
    if d.batches and not target.multi_batch:
        raise _bad("CDMA batches", f"{d.batches + 1} batches, but {target.name} has no multi-batch mode",
                   NvError.NotSupported)
    line_packed = d.line_stride == (d.datain_width + 1) * target.atom
    if bool(d.line_packed) != line_packed:
        raise _bad("CDMA line_packed", f"{d.line_packed}, but line_stride {d.line_stride} "
                                       f"{'is' if line_packed else 'is not'} {d.datain_width + 1} atoms")
    if not d.line_packed and d.grains:
        raise _bad("CDMA grains", f"{d.grains + 1} lines per fetch need packed lines")
    return prec


@functools.lru_cache(maxsize=256)  # the same registers at every run of a network: checked once (a refusal
def check(p: ConvParams, target: NvdlaTarget) -> tuple[Geometry, Precision]:  # raises again)
    """The convolution's sizes (the channels of its kernels: for image input the pre-extended ones) and
    processing precision, or a DlaError naming the first bad field."""
    d, s, a = p.cdma, p.csc, p.cacc
    for block, widths, name in ((d, _CDMA, "CDMA"), (s, _CSC, "CSC"), (p.cmac_a, _CMAC, "CMAC_A"),
                                (p.cmac_b, _CMAC, "CMAC_B"), (a, _CACC, "CACC")):
        _widths(block, widths, name)
    for group in _EQUAL:
        _same(p, group)
    prec = _modes(p, target)
    g = Geometry(batches=d.batches + 1, channel=s.weight_channel_ext + 1, height=d.datain_height + 1,
                 width=d.datain_width + 1, kernels=s.weight_kernel + 1, kernel_height=s.weight_height_ext + 1,
                 kernel_width=s.weight_width_ext + 1, stride_x=s.conv_x_stride_ext + 1,
                 stride_y=s.conv_y_stride_ext + 1, dilation_x=s.x_dilation_ext + 1,
                 dilation_y=s.y_dilation_ext + 1, pad_left=s.pad_left, pad_top=s.pad_top,
                 out_width=s.dataout_width + 1, out_height=s.dataout_height + 1)
    bpk = g.kernel_width * g.kernel_height * g.channel * prec.bpe
    if d.byte_per_kernel + 1 != bpk:
        raise _bad("CDMA byte_per_kernel", f"{d.byte_per_kernel} (bytes - 1) is not {bpk - 1} for "
                                           f"{g.kernel_width}x{g.kernel_height}x{g.channel} {prec.name} "
                                           "kernels")
    if d.weight_format != COMPRESSED and d.weight_bytes < bpk * g.kernels:
        raise _bad("CDMA weight_bytes", f"{d.weight_bytes} is less than the {bpk * g.kernels} bytes of "
                                        f"{g.kernels} kernels", NvError.InvalidSize)
    if target.register_map == "nvdla_v1":  # WEIGHT_BYTES and WMB_BYTES count 128 bytes
        for name in ("weight_bytes", "wmb_bytes"):
            if getattr(d, name) % 128:
                raise _bad(f"CDMA {name}", f"{getattr(d, name)} is not a multiple of 128 ({target.name}'s "
                                           "register drops the low 7 bits)")
    for name in ("weight_addr", "wmb_addr", "wgs_addr"):
        if getattr(d, name) % target.atom:
            raise _bad(f"CDMA {name}", f"{getattr(d, name):#x} is not a multiple of the {target.atom}-byte "
                                       "atom")
    if a.clip_truncate > MAX_TRUNCATE:
        raise _bad("CACC clip_truncate", f"{a.clip_truncate} is above {MAX_TRUNCATE} (the 48-bit sum "
                                         "truncated must leave 32 bits)")
    return g, prec
