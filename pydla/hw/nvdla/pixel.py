"""CDMA's image input: the 36 pixel formats, and a picture turned into CBUF lines, as nvdla/hw
``cmod/cdma`` (``ImageConvDataResponseSequencerCommon``, ``process_one_element_8/16``) and its converter
(``cmod/hls/cdma_libs/cdma_cvt.cpp``) do it.

A line of the picture is read from memory (pitch-linear: ``line_stride`` bytes per line; semi-planar
YUV: the Y plane at ``datain_addr_0``, the interleaved UV plane at ``datain_addr_1`` with its own
``uv_line_stride``), starting ``pixel_x_offset`` pixels in. Each pixel becomes ``elements`` channels
(1, 3 or 4) in the order of :data:`FORMATS` (CDMA reorders components to R, G, B, A / Y, U, V, A), each:

- FP16 formats: the FP16 pattern (with ``nan_to_zero``, a NaN is +0 first);
- otherwise, without the converter: the pixel's bits as they are (the element's low 8 or 16 bits);
- with the converter (``cvt_en``): ``x`` (8 or 16 bits, signed when ``pixel_sign_override``, else
  unsigned; a 10-bit component is its value shifted left by 6) becomes
  ``t = sat17(round_half_away((x - mean) · cvt_scale / 2^cvt_truncate))`` with ``mean`` the channel's
  ``MEAN_RY/GU/BV/AX`` register when ``mean_format`` is enabled, else ``cvt_offset``; then INT8:
  ``sat8(t)``, INT16: ``sat16(t)``, FP16: ``t`` rounded to FP16 (nearest even, ±65504 at most). With
  FP16 input the converter passes the pattern through.

The line in CBUF is ``pad_left`` pixels of the padding value (``D_ZERO_PADDING_VALUE``: its low byte
for INT8), the converted pixels, ``pad_right`` pixels of padding: ``(pad_left + W + pad_right) ·
elements`` elements of the processing precision, channels innermost.

Usage::

    fmt = FORMATS[12]                            # A8B8G8R8: bytes R, G, B, A
    lines, nans, infs = image_lines(p.cdma, prec, memory, sram, target)   # (H, E) elements
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.conv_params import CdmaParams
from pydla.hw.nvdla.intmath import I64, saturate, shift_right_round, sign_extend
from pydla.hw.nvdla.memory import NvdlaMemory, access, select
from pydla.hw.nvdla.nvfloat import int_to_fp16
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.strided import read_block
from pydla.hw.nvdla.target import NvdlaTarget

U8, U16, PACKED, F16 = "u8", "u16", "packed10", "f16"  # how a pixel's components are stored


@dataclass(frozen=True)
class PixelFormat:
    """One CDMA ``PIXEL_FORMAT``: bytes per pixel in each plane, and where each channel comes from."""

    name: str
    unit: str  # U8, U16, F16 (components of 1 or 2 bytes) or PACKED (10-bit components in a 32-bit word)
    plane0: int  # bytes per pixel in the first (or only) plane
    plane1: int  # bytes per pixel in the UV plane (0: one plane)
    # per channel: (component index, 0) (U8/U16/F16) or (shift, bits) in the 32-bit word (PACKED)
    sources: tuple[tuple[int, int], ...]

    @property
    def elements(self) -> int:
        return len(self.sources)

    @property
    def bytes_per_pixel(self) -> int:
        return self.plane0 + self.plane1

    @property
    def in_precision(self) -> Precision:
        """The input precision the format's data have (CDMA ``IN_PRECISION``)."""
        units = {U8: Precision.INT8, U16: Precision.INT16, PACKED: Precision.INT16, F16: Precision.FP16}
        return units[self.unit]


def _at(*index: int) -> tuple[tuple[int, int], ...]:
    return tuple((i, 0) for i in index)


_RGBA, _ARGB, _BGRA, _ABGR = _at(0, 1, 2, 3), _at(2, 1, 0, 3), _at(1, 2, 3, 0), _at(3, 2, 1, 0)
_ONE = _at(0)
_P_ABGR = ((0, 10), (10, 10), (20, 10), (30, 2))
_P_ARGB = ((20, 10), (10, 10), (0, 10), (30, 2))
_P_BGRA = ((2, 10), (12, 10), (22, 10), (0, 2))
_P_RGBA = ((22, 10), (12, 10), (2, 10), (0, 2))

_SPECS: list[tuple[str, str, int, int, tuple[tuple[int, int], ...]]] = [
    ("R8", U8, 1, 0, _ONE), ("R10", U16, 2, 0, _ONE), ("R12", U16, 2, 0, _ONE), ("R16", U16, 2, 0, _ONE),
    ("R16_I", U16, 2, 0, _ONE), ("R16_F", F16, 2, 0, _ONE),
    ("A16B16G16R16", U16, 8, 0, _RGBA), ("X16B16G16R16", U16, 8, 0, _RGBA),
    ("A16B16G16R16_F", F16, 8, 0, _RGBA), ("A16Y16U16V16", U16, 8, 0, _ARGB),
    ("V16U16Y16A16", U16, 8, 0, _BGRA), ("A16Y16U16V16_F", F16, 8, 0, _ARGB),
    ("A8B8G8R8", U8, 4, 0, _RGBA), ("A8R8G8B8", U8, 4, 0, _ARGB), ("B8G8R8A8", U8, 4, 0, _BGRA),
    ("R8G8B8A8", U8, 4, 0, _ABGR), ("X8B8G8R8", U8, 4, 0, _RGBA), ("X8R8G8B8", U8, 4, 0, _ARGB),
    ("B8G8R8X8", U8, 4, 0, _BGRA), ("R8G8B8X8", U8, 4, 0, _ABGR),
    ("A2B10G10R10", PACKED, 4, 0, _P_ABGR), ("A2R10G10B10", PACKED, 4, 0, _P_ARGB),
    ("B10G10R10A2", PACKED, 4, 0, _P_BGRA), ("R10G10B10A2", PACKED, 4, 0, _P_RGBA),
    ("A2Y10U10V10", PACKED, 4, 0, _P_ARGB), ("V10U10Y10A2", PACKED, 4, 0, _P_BGRA),
    ("A8Y8U8V8", U8, 4, 0, _ARGB), ("V8U8Y8A8", U8, 4, 0, _BGRA),
    ("Y8___U8V8_N444", U8, 1, 2, _at(0, 2, 1)), ("Y8___V8U8_N444", U8, 1, 2, _at(0, 1, 2)),
    ("Y10___U10V10_N444", U16, 2, 4, _at(0, 2, 1)), ("Y10___V10U10_N444", U16, 2, 4, _at(0, 1, 2)),
    ("Y12___U12V12_N444", U16, 2, 4, _at(0, 2, 1)), ("Y12___V12U12_N444", U16, 2, 4, _at(0, 1, 2)),
    ("Y16___U16V16_N444", U16, 2, 4, _at(0, 2, 1)), ("Y16___V16U16_N444", U16, 2, 4, _at(0, 1, 2)),
]
FORMATS: dict[int, PixelFormat] = {code: PixelFormat(*spec) for code, spec in enumerate(_SPECS)}
PITCH_LINEAR = 0  # D_DATAIN_FORMAT.PIXEL_MAPPING


def pixel_format(code: int) -> PixelFormat:
    try:
        return FORMATS[code]
    except KeyError:
        raise DlaError(NvError.BadValue, f"CDMA pixel_format: {code} is not a pixel format (0..35)") from None


def check(d: CdmaParams, prec: Precision, target: NvdlaTarget) -> PixelFormat:
    """Refuse an image input the C model cannot read (a DlaError naming the field)."""
    fmt = pixel_format(d.pixel_format)
    in_prec = Precision(d.in_precision)
    if d.pixel_mapping != PITCH_LINEAR:
        raise DlaError(NvError.NotSupported, f"CDMA pixel_mapping: {d.pixel_mapping} (reserved linear) is "
                                             "not a mapping NVDLA 1.0 reads; only 0 (pitch linear)")
    if in_prec is not fmt.in_precision:
        raise DlaError(NvError.BadValue, f"CDMA in_precision: {in_prec.name}, but {fmt.name} pixels are "
                                         f"{fmt.in_precision.name}")
    if in_prec is not prec and not d.cvt_en:
        raise DlaError(NvError.BadValue, f"CDMA cvt_en: {in_prec.name} pixels become {prec.name} only "
                                         "through the input converter")
    if fmt.unit == F16 and prec is not Precision.FP16:
        raise DlaError(NvError.BadValue, f"CDMA proc_precision: {prec.name}, but the converter passes "
                                         f"{fmt.name} pixels through as FP16")
    if fmt.plane1 and (d.pixel_x_offset * fmt.plane1) >= 2 * target.atom:
        raise DlaError(NvError.NotSupported, f"CDMA pixel_x_offset: {d.pixel_x_offset} starts the UV plane "
                                             "past its first two atoms, which the C model does not fetch")
    return fmt


def _plane(mem: NvdlaMemory, address: int, stride: int, lines: int, fetch: int, atom: int,
           what: str) -> npt.NDArray[np.uint8]:
    """The atoms CDMA fetches from the start of each line: (lines, fetch rounded up to the atom)."""
    size = -(-fetch // atom) * atom
    with access(what):
        out: npt.NDArray[np.uint8] = read_block(mem, address, (lines,), (stride,), size).reshape(lines, size)
    return out


def _components(pitch: npt.NDArray[np.uint8], fmt: PixelFormat, first: int, width: int) -> I64:
    """The raw components of pixels first … first + width - 1, (H, W, elements), in channel order."""
    h = pitch.shape[0]
    px = pitch[:, first * fmt.bytes_per_pixel:(first + width) * fmt.bytes_per_pixel]
    px = px.reshape(h, width, fmt.bytes_per_pixel)
    if fmt.unit == U8:
        return px[:, :, [i for i, _ in fmt.sources]].astype(np.int64)
    if fmt.unit == PACKED:
        word = np.ascontiguousarray(px).view("<u4")[..., 0].astype(np.int64)
        parts = []
        for shift, bits in fmt.sources:
            parts.append(((word >> shift) & ((1 << bits) - 1)) << (16 - bits))
        return np.stack(parts, axis=-1)
    units = np.ascontiguousarray(px).view("<u2").astype(np.int64)
    out: I64 = units[:, :, [i for i, _ in fmt.sources]]
    return out


def _convert(x: I64, fmt: PixelFormat, d: CdmaParams, prec: Precision) -> I64:
    """The converter on raw components (H, W, elements): the element bits of ``prec``."""
    wide = fmt.unit != U8
    if fmt.unit == F16 or not d.cvt_en:
        return x
    bits = 16 if wide else 8
    value = np.where(x >> (bits - 1) == 1, x - (1 << bits), x) if d.pixel_sign_override else x
    if d.mean_format:
        means = [d.mean_ry, d.mean_gu, d.mean_bv, d.mean_ax][:fmt.elements]
        mean = np.array([sign_extend(m, 16) for m in means], dtype=np.int64)
    else:
        mean = np.full(fmt.elements, sign_extend(d.cvt_offset, 16), dtype=np.int64)
    t = saturate(shift_right_round((value - mean) * sign_extend(d.cvt_scale, 16), d.cvt_truncate), 17)
    if prec is Precision.FP16:
        return int_to_fp16(t, 17)
    return saturate(t, 8 * prec.bpe)


def image_lines(d: CdmaParams, prec: Precision, memory: NvdlaMemory, sram: NvdlaMemory | None,
                target: NvdlaTarget) -> tuple[npt.NDArray[np.generic], int, int]:
    """The picture as CDMA writes it to CBUF: (H, (pad_left + W + pad_right) · elements) elements of
    ``prec`` (FP16 as uint16 patterns), and the FP16 NaN and Inf counts of the pixels read."""
    fmt = check(d, prec, target)
    width, height, x0 = d.datain_width + 1, d.datain_height + 1, d.pixel_x_offset
    mem = select(memory, sram, d.datain_ram_type, "CDMA data")
    atom = target.atom
    fetch0 = (x0 + width) * fmt.plane0
    if fetch0 > d.line_stride:
        raise DlaError(NvError.BadValue, f"CDMA line_stride: {d.line_stride} is less than the {fetch0} bytes "
                                         "of a line's pixels")
    pitch = np.zeros((height, (x0 + width) * fmt.bytes_per_pixel), dtype=np.uint8)
    plane0 = _plane(mem, d.datain_addr_0, d.line_stride, height, fetch0, atom, "CDMA data")
    p0 = plane0[:, :fetch0].reshape(height, x0 + width, fmt.plane0)
    pitch.reshape(height, x0 + width, -1)[:, :, :fmt.plane0] = p0
    if fmt.plane1:
        # the UV line is fetched from its start; past an offset of one atom the model files its pixels
        # one atom further on
        skip = atom // fmt.plane1 if x0 * fmt.plane1 >= atom else 0
        fetch1 = (x0 * fmt.plane1) % atom + width * fmt.plane1
        if fetch1 > d.uv_line_stride:
            raise DlaError(NvError.BadValue, f"CDMA uv_line_stride: {d.uv_line_stride} is less than the "
                                             f"{fetch1} bytes of a UV line")
        plane1 = _plane(mem, d.datain_addr_1, d.uv_line_stride, height, fetch1, atom, "CDMA UV data")
        count = x0 + width - skip
        uv = plane1[:, :count * fmt.plane1].reshape(height, count, fmt.plane1)
        pitch.reshape(height, x0 + width, -1)[:, skip:, fmt.plane0:] = uv
    x = _components(pitch, fmt, x0, width)
    nans = infs = 0
    if fmt.unit == F16:
        nan = (((x >> 10) & 31) == 31) & ((x & 0x3FF) != 0)
        inf = (((x >> 10) & 31) == 31) & ((x & 0x3FF) == 0)
        nans, infs = int(nan.sum()), int(inf.sum())
        if d.nan_to_zero:
            x = np.where(nan, 0, x)
    elements = _convert(x, fmt, d, prec)
    pad = d.pad_value & (0xFF if prec is Precision.INT8 else 0xFFFF)
    line = np.full((height, d.pad_left + width + d.pad_right, fmt.elements), pad, dtype=np.int64)
    line[:, d.pad_left:d.pad_left + width] = elements
    mask = 0xFF if prec is Precision.INT8 else 0xFFFF
    raw = (line & mask).reshape(height, -1)
    unsigned = np.uint8 if prec is Precision.INT8 else np.uint16
    out: npt.NDArray[np.generic] = raw.astype(unsigned).view(prec.dtype)
    return out, nans, infs
