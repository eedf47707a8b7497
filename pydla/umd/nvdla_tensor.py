"""An NVDLA Loadable's tensors as dense numpy arrays (what :class:`pydla.Session` gives and returns).

The NVDLA runtime API binds a tensor's buffer in the device's own layout; its tensor descriptor says
which (pixel format, data format, strides in bytes: stride 0 the element, 1 the line, 2 the
surface). A FEATURE tensor (whatever its data format says: NVIDIA's compiler marks the outputs of its
regression tests NCHW, and NVIDIA's runtime application reads every FEATURE tensor as a surface) is
a feature surface, and an array of dims (n, c, h, w) maps to it element by element as
``(c // x) * surface + h * line + w * atom + (c % x) * bpe``: the atom is ``line / w`` bytes when that
is 8, 16 or 32 (the configuration's atom, the compiler packs lines), else 32 bytes (as NVIDIA's
application gathers images: a line of one pixel says nothing of the atom), x = atom / bpe channels
in it. Pitch-linear image formats and batches (n > 1) are refused. :class:`DenseStaging` keeps one
device buffer per tensor, bound to the runtime, and converts between it and the application's dense
memory around each run (unused lanes and padding of an input buffer are zero).

Usage::

    staging = DenseStaging(rt)           # rt has an NVDLA Loadable loaded
    staging.run({0: x_mem}, {0: y_mem})  # dense memories in, dense memories out
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.portability.interface import NvDlaMemHandle
from pydla.umd.nvdla_runner import NvdlaTensorDesc

NUMPY_TYPES: dict[M.DataType, np.dtype[Any]] = {
    M.DataType.FLOAT: np.dtype("<f4"), M.DataType.HALF: np.dtype("<f2"), M.DataType.INT16: np.dtype("<i2"),
    M.DataType.INT8: np.dtype("i1"), M.DataType.UINT8: np.dtype("u1"), M.DataType.UINT16: np.dtype("<u2")}


def dtype_of(desc: NvdlaTensorDesc) -> np.dtype[Any]:
    if desc.data_type not in NUMPY_TYPES:
        raise DlaError(NvError.NotSupported, f"tensor '{desc.name}': data type {desc.data_type.name} has no "
                                             f"numpy type")
    return NUMPY_TYPES[desc.data_type]


def element_offsets(desc: NvdlaTensorDesc) -> npt.NDArray[np.int64]:
    """Each element's byte offset in the tensor's buffer, shaped (n, c, h, w); every one checked to
    lie within its bufferSize."""
    n, c, h, w = desc.dims
    bpe = dtype_of(desc).itemsize
    line, surface = desc.strides[1], desc.strides[2]
    where = f"tensor '{desc.name}'"
    if n != 1:
        raise DlaError(NvError.NotSupported, f"{where}: batch {n}: only batch 1 converts to a dense array")
    cc = np.arange(c, dtype=np.int64)[:, None, None]
    hh = np.arange(h, dtype=np.int64)[None, :, None]
    ww = np.arange(w, dtype=np.int64)[None, None, :]
    if desc.pixel_format not in (M.PixelFormat.FEATURE, M.PixelFormat.FEATURE_X8):
        raise DlaError(NvError.NotSupported, f"{where}: pixel format {desc.pixel_format.name} (a "
                                             f"pitch-linear image) does not convert to a dense array; bind "
                                             f"its bytes with the NVDLA runtime API")
    atom = line // w if w and line % w == 0 and line // w in (8, 16, 32) else 32
    if atom % bpe:
        raise DlaError(NvError.NotSupported, f"{where}: {bpe}-byte elements in {atom}-byte atoms")
    x = atom // bpe
    offsets = (cc // x) * surface + hh * line + ww * atom + (cc % x) * bpe
    offsets = np.broadcast_to(offsets, (c, h, w)).reshape(1, c, h, w)
    if offsets.size and (int(offsets.min()) < 0 or int(offsets.max()) + bpe > desc.size):
        end = int(offsets.max()) + bpe
        raise DlaError(NvError.InvalidSize, f"{where}: its elements reach byte {end} of a {desc.size}-byte "
                                            f"buffer (strides {list(desc.strides[:3])})")
    return offsets


class DenseStaging:
    """Device buffers of an NVDLA Loadable's tensors, bound once, and the conversions to and from
    dense memory (see the module docstring)."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.inputs = [rt.getInputTensorDesc(i) for i in range(rt.getNumInputTensors())]
        self.outputs = [rt.getOutputTensorDesc(i) for i in range(rt.getNumOutputTensors())]
        self._offsets = {(d.direction, d.bind_id): element_offsets(d) for d in (*self.inputs, *self.outputs)}
        self.device: dict[tuple[str, int], NvDlaMemHandle] = {}
        for d in (*self.inputs, *self.outputs):
            mem = rt.allocateSystemMemory(max(d.size, 1))
            self.device[(d.direction, d.bind_id)] = mem
            (rt.bindInputTensor if d.direction == "input" else rt.bindOutputTensor)(d.bind_id, mem)

    @staticmethod
    def shape(desc: NvdlaTensorDesc) -> tuple[int, ...]:
        return tuple(desc.dims)

    def _bytes(self, desc: NvdlaTensorDesc) -> npt.NDArray[np.int64]:
        offsets = self._offsets[(desc.direction, desc.bind_id)]
        return offsets[..., None] + np.arange(dtype_of(desc).itemsize)

    def run(self, ins: dict[int, NvDlaMemHandle], outs: dict[int, NvDlaMemHandle]) -> None:
        """Scatter each dense input into its device buffer, submit, gather each output."""
        for d in self.inputs:
            device = self.device[("input", d.bind_id)].bytes_view()
            device[:] = 0
            dense = ins[d.bind_id].bytes_view()
            size = int(np.prod(d.dims)) * dtype_of(d).itemsize
            device[self._bytes(d)] = dense[:size].reshape(self._bytes(d).shape)
        for d in self.outputs:
            self.device[("output", d.bind_id)].bytes_view()[:] = 0
        self.rt.submit()
        for d in self.outputs:
            device = self.device[("output", d.bind_id)].bytes_view()
            idx = self._bytes(d)
            outs[d.bind_id].bytes_view()[:idx.size] = device[idx].reshape(-1)

    def close(self) -> None:
        for mem in self.device.values():
            self.rt.freeSystemMemory(mem)
        self.device.clear()
