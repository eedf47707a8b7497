"""NVDLA's image files (``.dimg``): the NVDLA runtime application's DlaImage serialization.

A file is ``DIMG``, a u32 version (0), the surface's metadata (u32 each: pixel format, width, height,
channel, line stride, surface stride, size: 36 bytes of header in all) and then the surface's elements
packed in channel, line, pixel order (``bpe`` bytes each, ``width * height * channel * bpe`` bytes):
the strides and size describe where the elements lie in the device's memory, not in the file.
:func:`gather` reads a surface out of device memory by those rules (NVDLA's feature layouts CxHWx with
x 8, 16 or 32, CHW, and the pitch-linear R8, R8G8B8, A8B8G8R8 ones).

Format numbers: NVIDIA's current runtime numbers T_R8_I 1 and the rest after it; the images of its
KMD regression tests were written by an earlier one that numbered every format from T_R10 on one lower
(D_F16_CxHWx_x16_I 41, not 42: only that numbering makes their data length and strides agree). A file
whose data fits its format number only in the earlier numbering is read in it (``legacy_numbering``)
and written back the same way.

Usage::

    img = read_dimg(Path("o_000000.dimg").read_bytes())     # checked
    img.array()                                              # numpy (channel, height, width)
    write_dimg(DlaImage.from_surface(meta, memory))          # what nvdla_runtime writes
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import numpy as np

from pydla.errors import DlaError, NvError

MAGIC = b"DIMG"
VERSION = 0
_HEADER = struct.Struct("<4sI7I")
HEADER_SIZE = _HEADER.size  # 36


class PixelFormat(enum.IntEnum):
    """NvDlaImage::PixelFormat."""

    T_R8 = 0
    T_R8_I = 1
    T_R10 = 2
    T_R12 = 3
    T_R16 = 4
    T_R16_I = 5
    T_R16_F = 6
    T_A16B16G16R16 = 7
    T_A16B16G16R16_F = 8
    T_X16B16G16R16 = 9
    T_A16Y16U16V16 = 10
    T_A16Y16U16V16_F = 11
    T_V16U16Y16A16 = 12
    T_A8B8G8R8 = 13
    T_A8R8G8B8 = 14
    T_B8G8R8A8 = 15
    T_R8G8B8A8 = 16
    T_X8B8G8R8 = 17
    T_X8R8G8B8 = 18
    T_B8G8R8X8 = 19
    T_R8G8B8X8 = 20
    T_A2B10G10R10 = 21
    T_A2R10G10B10 = 22
    T_B10G10R10A2 = 23
    T_R10G10B10A2 = 24
    T_A2Y10U10V10 = 25
    T_V10U10Y10A2 = 26
    T_A8Y8U8V8 = 27
    T_V8U8Y8A8 = 28
    T_Y8___U8V8_N444 = 29
    T_Y8___V8U8_N444 = 30
    T_Y10___U10V10_N444 = 31
    T_Y10___V10U10_N444 = 32
    T_Y12___U12V12_N444 = 33
    T_Y12___V12U12_N444 = 34
    T_Y16___U16V16_N444 = 35
    T_Y16___V16U16_N444 = 36
    D_F8_CHW_I = 37
    D_F16_CHW_I = 38
    D_F16_CHW_F = 39
    D_F8_CxHWx_x32_I = 40
    D_F8_CxHWx_x8_I = 41
    D_F16_CxHWx_x16_I = 42
    D_F16_CxHWx_x16_F = 43
    D_F32_CHW_F = 44
    D_F32_CxHWx_x8_F = 45
    T_R8G8B8 = 46
    T_B8G8R8 = 47


P = PixelFormat
# The element type of each format DlaImage can pack (its bytes per element and kind); others cannot be.
DTYPES: dict[PixelFormat, np.dtype[np.generic]] = {
    **{f: np.dtype(np.uint8) for f in (P.T_R8, P.T_R8G8B8, P.T_B8G8R8, P.T_A8B8G8R8, P.T_A8R8G8B8,
                                       P.T_B8G8R8A8,
                                       P.T_R8G8B8A8, P.T_X8B8G8R8, P.T_X8R8G8B8, P.T_B8G8R8X8, P.T_R8G8B8X8)},
    **{f: np.dtype(np.int8) for f in (P.T_R8_I, P.D_F8_CHW_I, P.D_F8_CxHWx_x32_I, P.D_F8_CxHWx_x8_I)},
    **{f: np.dtype(np.int16) for f in (P.D_F16_CHW_I, P.D_F16_CxHWx_x16_I)},
    **{f: np.dtype("<f2") for f in (P.T_A16B16G16R16_F, P.D_F16_CHW_F, P.D_F16_CxHWx_x16_F)},
    **{f: np.dtype("<f4") for f in (P.D_F32_CHW_F, P.D_F32_CxHWx_x8_F)},
}
# Channels interleaved per surface (CxHWx), per format; CHW formats: 1 (a plane per channel).
_ATOM = {P.D_F8_CxHWx_x32_I: 32, P.D_F8_CxHWx_x8_I: 8, P.D_F16_CxHWx_x16_I: 16, P.D_F16_CxHWx_x16_F: 16,
         P.D_F32_CxHWx_x8_F: 8, P.D_F8_CHW_I: 1, P.D_F16_CHW_I: 1, P.D_F16_CHW_F: 1, P.D_F32_CHW_F: 1}


def _bad(where: str, message: str, code: NvError = NvError.BadValue) -> DlaError:
    return DlaError(code, f"{where}: {message}")


@dataclass(frozen=True)
class DlaImage:
    """A surface's metadata and its elements (packed, channel-major), as a .dimg file holds them."""

    format: PixelFormat
    width: int
    height: int
    channel: int
    line_stride: int
    surface_stride: int
    size: int
    data: bytes
    legacy_numbering: bool = False  # the file numbers formats as NVIDIA's earlier runtime did

    @property
    def dtype(self) -> np.dtype[np.generic]:
        return DTYPES[self.format]

    def array(self) -> np.ndarray:
        """The elements as (channel, height, width)."""
        return np.frombuffer(self.data, self.dtype).reshape(self.channel, self.height, self.width)

    def offsets(self) -> np.ndarray:
        """Each element's byte offset in device memory (channel, height, width), by NvDlaImage's rules."""
        return _offsets(self)

    @classmethod
    def from_surface(cls, fmt: PixelFormat, width: int, height: int, channel: int, line_stride: int,
                     surface_stride: int, memory: bytes | bytearray | memoryview,
                     size: int | None = None) -> DlaImage:
        """The image of a surface in device memory (``size`` defaults to the memory's length)."""
        meta = cls(fmt, width, height, channel, line_stride, surface_stride,
                   len(memory) if size is None else size, b"")
        _check_meta(meta, "surface")
        offs = _offsets(meta)
        if size is not None and size > len(memory):
            raise _bad("surface", f"size {size} is more than the {len(memory)} bytes of "
                                  f"memory", NvError.InvalidSize)
        raw = np.frombuffer(memory, np.uint8)
        item = meta.dtype.itemsize
        data = raw[offs[..., None] + np.arange(item)].tobytes()
        return cls(fmt, width, height, channel, line_stride, surface_stride, meta.size, data)


def _check_meta(img: DlaImage, where: str) -> None:
    if img.format not in DTYPES:
        raise _bad(where, f"pixel format {img.format.name} cannot be packed by "
                          f"DlaImage", NvError.NotSupported)
    for name in ("width", "height", "channel", "line_stride", "surface_stride", "size"):
        if not 0 <= getattr(img, name) < 1 << 32:
            raise _bad(where, f"{name} {getattr(img, name)} is not a u32")
    if img.width * img.height * img.channel * img.dtype.itemsize > 1 << 31:
        raise _bad(where, f"{img.width}x{img.height}x{img.channel} elements: more than 2 "
                          f"GiB", NvError.InvalidSize)
    if img.width and img.height and img.channel:
        if img.format in (P.T_R8, P.T_R8_I) and img.channel != 1:
            raise _bad(where, f"{img.format.name} has one channel, not {img.channel}")
        last = int(_offsets(img).max()) + img.dtype.itemsize
        if last > img.size:
            raise _bad(where, f"elements reach byte {last} of a {img.size}-byte surface (strides "
                              f"{img.line_stride}, {img.surface_stride})", NvError.InvalidSize)


def _offsets(img: DlaImage) -> np.ndarray:
    c = np.arange(img.channel, dtype=np.int64)[:, None, None]
    h = np.arange(img.height, dtype=np.int64)[None, :, None]
    w = np.arange(img.width, dtype=np.int64)[None, None, :]
    bpe = img.dtype.itemsize
    if img.format in _ATOM:
        x = _ATOM[img.format]
        offsets = (c // x) * img.surface_stride + h * img.line_stride + w * (x * bpe) + (c % x) * bpe
    elif img.format in (P.T_R8, P.T_R8_I):
        offsets = (h * img.line_stride + w) * bpe + c * 0
    elif img.format in (P.T_R8G8B8, P.T_B8G8R8):
        offsets = h * img.line_stride + w * img.channel + c
    else:  # four elements per pixel
        offsets = h * img.line_stride + w * (4 * bpe) + c * bpe
    return np.broadcast_to(offsets, (img.channel, img.height, img.width))


def read_dimg(data: bytes | bytearray | memoryview, where: str = "DlaImage") -> DlaImage:
    """A .dimg file's image, every header field checked against the data; DlaError when it is not one."""
    data = bytes(data)
    if len(data) < HEADER_SIZE:
        raise _bad(where, f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte "
                          f"header", NvError.InvalidSize)
    magic, version, fmt, *meta = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise _bad(where, f"magic {magic!r} is not {MAGIC!r}")
    if version != VERSION:
        raise _bad(where, f"version {version}: DlaImage files are version {VERSION}", NvError.VersionMismatch)
    if fmt not in PixelFormat._value2member_map_:
        raise _bad(where, f"pixel format {fmt} is not an NvDlaImage format (0..{max(PixelFormat)})")
    try:
        return _image(PixelFormat(fmt), meta, data[HEADER_SIZE:], False, where)
    except DlaError as current:
        if fmt == 0 or fmt + 1 not in PixelFormat._value2member_map_:
            raise
        try:
            return _image(PixelFormat(fmt + 1), meta, data[HEADER_SIZE:], True, where)
        except DlaError:
            raise current from None


def _image(fmt: PixelFormat, meta: list[int], data: bytes, legacy: bool, where: str) -> DlaImage:
    width, height, channel, line_stride, surface_stride, size = meta
    img = DlaImage(fmt, width, height, channel, line_stride, surface_stride, size, data, legacy)
    _check_meta(img, where)
    expected = img.width * img.height * img.channel * img.dtype.itemsize
    if len(img.data) != expected:
        raise _bad(where, f"{len(img.data)} bytes of data for {img.width}x{img.height}x{img.channel} "
                          f"{img.format.name} elements ({expected} bytes)", NvError.InvalidSize)
    return img


def write_dimg(img: DlaImage) -> bytes:
    """The .dimg bytes of ``img`` (checked as read_dimg checks them)."""
    _check_meta(img, "DlaImage")
    expected = img.width * img.height * img.channel * img.dtype.itemsize
    if len(img.data) != expected:
        raise _bad("DlaImage", f"{len(img.data)} bytes of data, {expected} expected", NvError.InvalidSize)
    number = int(img.format) - (1 if img.legacy_numbering else 0)
    return _HEADER.pack(MAGIC, VERSION, number, img.width, img.height, img.channel, img.line_stride,
                        img.surface_stride, img.size) + img.data
