"""DlaImage (.dimg): header, element types, NvDlaImage's address rules, checks."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.loadable.nvdla.dimg import HEADER_SIZE, DlaImage, PixelFormat, read_dimg, write_dimg


def test_surface_round_trip_in_nvdla_feature_layout() -> None:
    """8x8x32 INT16 in CxHWx x16 (32-byte atoms): element (c, h, w) at (c//16)*surf + h*line + w*32 + "
      "(c%16)*2."""
    memory = np.arange(4096 // 2, dtype=np.int16).tobytes()
    img = DlaImage.from_surface(PixelFormat.D_F16_CxHWx_x16_I, 8, 8, 32, 256, 2048, memory)
    a = img.array()
    assert a.shape == (32, 8, 8) and a.dtype == np.int16
    assert a[17, 2, 3] == (2048 + 2 * 256 + 3 * 32 + 1 * 2) // 2
    blob = write_dimg(img)
    assert blob[:4] == b"DIMG" and len(blob) == HEADER_SIZE + 4096
    assert struct.unpack_from("<I7I", blob, 4) == (0, 42, 8, 8, 32, 256, 2048, 4096)
    assert read_dimg(blob) == img


@pytest.mark.parametrize(("edit", "code", "fragment"), [
    (lambda b: b[:20], NvError.InvalidSize, "shorter than the 36-byte header"),
    (lambda b: b"DIMX" + b[4:], NvError.BadValue, "magic"),
    (lambda b: b[:4] + struct.pack("<I", 1) + b[8:], NvError.VersionMismatch, "version 1"),
    (lambda b: b[:8] + struct.pack("<I", 99) + b[12:], NvError.BadValue, "pixel format 99"),
    (lambda b: b[:8] + struct.pack("<I", 2) + b[12:], NvError.NotSupported, "T_R10 cannot be packed"),
    (lambda b: b[:-1], NvError.InvalidSize, "bytes of data"),
    (lambda b: b[:32] + struct.pack("<I", 100) + b[36:], NvError.InvalidSize, "elements reach byte"),
    (lambda b: b[:12] + struct.pack("<I", 1 << 20) + b[16:], NvError.InvalidSize, ""),
])
def test_bad_images_are_refused(edit, code, fragment) -> None:
    img = DlaImage.from_surface(PixelFormat.D_F8_CxHWx_x32_I, 4, 2, 3, 128, 256, bytes(range(256)))
    with pytest.raises(DlaError) as e:
        read_dimg(edit(write_dimg(img)))
    assert e.value.code == code and fragment in str(e.value)


def test_earlier_format_numbering_is_read_and_kept() -> None:
    """The number 41 with 8x8x32 elements of 2 bytes: D_F16_CxHWx_x16_I in the earlier numbering."""
    img = DlaImage.from_surface(PixelFormat.D_F16_CxHWx_x16_I, 8, 8, 32, 256, 2048, bytes(4096))
    blob = bytearray(write_dimg(img))
    struct.pack_into("<I", blob, 8, 41)
    back = read_dimg(bytes(blob))
    assert back.format == PixelFormat.D_F16_CxHWx_x16_I and back.legacy_numbering
    assert write_dimg(back) == bytes(blob)
