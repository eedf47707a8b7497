"""What NVIDIA's runtime application (``nvdla_runtime``) does with an NVDLA Loadable, and its output
images: load it, give each input a buffer of its ``bufferSize`` (zero, or the bytes the user gives),
give each output a zeroed buffer, submit, and write output ``i`` as ``o_%06d.dimg``.

The image of an output (the application's Tensor2DIMG): a FEATURE tensor of HALF, INT16 or INT8 is the
surface format D_F16_CxHWx_x16_F, D_F16_CxHWx_x16_I or D_F8_CxHWx_x32_I, numbered as the 2018 runtime
numbered them (42, 41, 40: the numbering of NVIDIA's regression goldens); another pixel format is
written as D_F16_CxHWx_x16_F, as the application does after reporting it. Width, height and channel are
the tensor's dims, line and surface stride its stride 1 and 2, size its bufferSize; the elements are
gathered with the format's fixed atom (16 or 32 channels), whatever the device's atom is. FP16 images
follow the application's "stable hash": an element equal to 32768.0 is written as 0x0000 and a NaN as
0x77C0 (the half of 31744.0), as its comparisons of a half with integer literals do.

Usage::

    with pydla.createRuntime(config="nv_full") as rt:
        rt.load(Path("CDP_L0_0_fbuf").read_bytes())
        for i, (desc, image) in enumerate(run_app(rt)):
            Path(f"o_{i:06d}.dimg").write_bytes(image)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.dimg import DlaImage, PixelFormat, write_dimg
from pydla.umd.nvdla_runner import NvdlaTensorDesc

_FORMATS = {M.DataType.HALF: (PixelFormat.D_F16_CxHWx_x16_F, True),
            M.DataType.INT16: (PixelFormat.D_F16_CxHWx_x16_I, True),
            M.DataType.INT8: (PixelFormat.D_F8_CxHWx_x32_I, False)}
STABLE_32768, STABLE_NAN = 0x0000, 0x77C0


def image_format(desc: NvdlaTensorDesc) -> tuple[PixelFormat, bool]:
    """The surface format of a tensor's image and whether it is numbered the 2018 way (one lower)."""
    if desc.pixel_format != M.PixelFormat.FEATURE:
        return _FORMATS[M.DataType.HALF]
    if desc.data_type not in _FORMATS:
        raise DlaError(NvError.NotSupported, f"output '{desc.name}': a FEATURE tensor of "
                                             f"{desc.data_type.name} has no image format (HALF, "
                                             f"INT16 or INT8)")
    return _FORMATS[desc.data_type]


def output_image(desc: NvdlaTensorDesc, memory: bytes | bytearray | memoryview) -> DlaImage:
    """The image of output ``desc`` whose buffer holds ``memory`` (its first bufferSize bytes are used)."""
    fmt, legacy = image_format(desc)
    _, c, h, w = desc.dims
    if len(memory) < desc.size:
        raise DlaError(NvError.InvalidSize, f"output '{desc.name}': {len(memory)} bytes, its bufferSize is "
                                            f"{desc.size}")
    img = DlaImage.from_surface(fmt, w, h, c, desc.strides[1], desc.strides[2],
                                memoryview(memory)[:desc.size],
                                size=desc.size)
    data = img.data
    if fmt == PixelFormat.D_F16_CxHWx_x16_F:
        half = np.frombuffer(data, "<u2").copy()
        value = half.view(np.float16)
        half[value == np.float16(32768.0)] = STABLE_32768
        half[np.isnan(value)] = STABLE_NAN
        data = half.tobytes()
    return DlaImage(img.format, img.width, img.height, img.channel, img.line_stride, img.surface_stride,
                    img.size, data, legacy)


def image_bytes(desc: NvdlaTensorDesc, memory: bytes | bytearray | memoryview) -> bytes:
    """The ``.dimg`` file of an output, as the runtime application writes it."""
    return write_dimg(output_image(desc, memory))


def run_app(rt: Any, inputs: dict[int, bytes] | None = None) -> list[tuple[NvdlaTensorDesc, bytes]]:
    """Run the NVDLA Loadable loaded in ``rt`` once as the runtime application does; each output's
    descriptor and ``.dimg`` bytes. ``inputs``: bytes for input ``i``'s buffer (from offset 0, at most
    its bufferSize); inputs not given stay zero, as in NVIDIA's regression runs (no image)."""
    given = dict(inputs or {})
    mems = []
    try:
        for i in range(rt.getNumInputTensors()):
            desc = rt.getInputTensorDesc(i)
            mem = rt.allocateSystemMemory(desc.size)
            mems.append(mem)
            mem.bytes_view()[:] = 0
            raw = given.pop(i, b"")
            if len(raw) > desc.size:
                raise DlaError(NvError.InvalidSize, f"input {i} '{desc.name}': {len(raw)} bytes given, its "
                                                    f"bufferSize is {desc.size}")
            mem.bytes_view()[:len(raw)] = np.frombuffer(raw, np.uint8)
            rt.bindInputTensor(i, mem)
        if given:
            raise DlaError(NvError.BadParameter, f"inputs {sorted(given)}: the loadable has "
                                                 f"{rt.getNumInputTensors()} input(s)")
        outputs = []
        for i in range(rt.getNumOutputTensors()):
            desc = rt.getOutputTensorDesc(i)
            mem = rt.allocateSystemMemory(desc.size)
            mems.append(mem)
            mem.bytes_view()[:] = 0
            rt.bindOutputTensor(i, mem)
            outputs.append((desc, mem))
        rt.submit()
        return [(desc, image_bytes(desc, mem.bytes_view().tobytes())) for desc, mem in outputs]
    finally:
        for mem in mems:
            rt.freeSystemMemory(mem)
