"""An NVDLA Loadable's tensors as dense numpy arrays (what :class:`pydla.Session` gives and returns).

The NVDLA runtime API binds a tensor's buffer in the device's own layout; its tensor descriptor says
which (pixel format, data format, strides in bytes: stride 0 the element, 1 the line, 2 the
surface). A FEATURE tensor (whatever its data format says: NVIDIA's compiler marks the outputs of its
regression tests NCHW, and NVIDIA's runtime application reads every FEATURE tensor as a surface) is
a feature surface, and an array of dims (n, c, h, w) maps to it element by element as
``(c // x) * surface + h * line + w * atom + (c % x) * bpe``: the atom is ``line / w`` bytes when that
is 8, 16 or 32 (the configuration's atom, the compiler packs lines), else 32 bytes (as NVIDIA's
application gathers images: a line of one pixel says nothing of the atom), x = atom / bpe channels
in it. A pitch-linear image of one plane (R8, A8B8G8R8, R16_F...: :data:`IMAGE_FORMATS`) maps channel
``k`` (R, G, B, A or Y, U, V, A, the order NVDLA's CDMA gives them) of pixel (h, w) to its component
at ``h * line + w * bytes_per_pixel``. Batch ``b`` starts ``strides[3]`` bytes after batch ``b - 1``
(0: right after the previous cube). :class:`DenseStaging` keeps one
device buffer per tensor, bound to the runtime, and converts between it and the application's dense
memory around each run (unused lanes and padding of an input buffer are zero).

Usage::

    staging = DenseStaging(rt)           # rt has an NVDLA Loadable loaded
    staging.run({0: x_mem}, {0: y_mem})  # dense memories in, dense memories out
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
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


# Pitch-linear image formats of one plane whose components are whole bytes (NVDLA's CDMA reads them,
# nvdla/hw cmod/cdma): bytes per pixel, bytes per component, and for each channel (R, G, B, A or Y, U,
# V, A, CDMA's order) the component it is in memory (a name lists the components from the most
# significant: A8B8G8R8 is bytes R, G, B, A). 10-bit packed and semi-planar formats: refused.
_RGBA, _ARGB, _BGRA, _ABGR = (0, 1, 2, 3), (2, 1, 0, 3), (1, 2, 3, 0), (3, 2, 1, 0)
IMAGE_FORMATS: dict[M.PixelFormat, tuple[int, int, tuple[int, ...]]] = {
    M.PixelFormat.R8: (1, 1, (0,)), M.PixelFormat.R10: (2, 2, (0,)), M.PixelFormat.R12: (2, 2, (0,)),
    M.PixelFormat.R16: (2, 2, (0,)), M.PixelFormat.R16_I: (2, 2, (0,)), M.PixelFormat.R16_F: (2, 2, (0,)),
    M.PixelFormat.A16B16G16R16: (8, 2, _RGBA), M.PixelFormat.X16B16G16R16: (8, 2, _RGBA),
    M.PixelFormat.A16B16G16R16_F: (8, 2, _RGBA), M.PixelFormat.A16Y16U16V16: (8, 2, _ARGB),
    M.PixelFormat.V16U16Y16A16: (8, 2, _BGRA), M.PixelFormat.A16Y16U16V16_F: (8, 2, _ARGB),
    M.PixelFormat.A8B8G8R8: (4, 1, _RGBA), M.PixelFormat.A8R8G8B8: (4, 1, _ARGB),
    M.PixelFormat.B8G8R8A8: (4, 1, _BGRA), M.PixelFormat.R8G8B8A8: (4, 1, _ABGR),
    M.PixelFormat.X8B8G8R8: (4, 1, _RGBA), M.PixelFormat.X8R8G8B8: (4, 1, _ARGB),
    M.PixelFormat.B8G8R8X8: (4, 1, _BGRA), M.PixelFormat.R8G8B8X8: (4, 1, _ABGR),
    M.PixelFormat.A8Y8U8V8: (4, 1, _ARGB), M.PixelFormat.V8U8Y8A8: (4, 1, _BGRA)}
FEATURE_FORMATS = (M.PixelFormat.FEATURE, M.PixelFormat.FEATURE_X8)


def feature_atom(desc: NvdlaTensorDesc) -> int:
    """The atom of a feature tensor's surface, in bytes: ``line / w`` when that is 8, 16 or 32 (the
    configuration's atom: the compiler packs lines), else 32 (as NVIDIA's application gathers)."""
    w, line = desc.dims[3], desc.strides[1]
    return line // w if w and line % w == 0 and line // w in (8, 16, 32) else 32


def _grid(dims: tuple[int, int, int, int]) -> tuple[npt.NDArray[np.int64], ...]:
    n, c, h, w = dims
    def axis(size: int, at: int) -> npt.NDArray[np.int64]:
        shape = [1, 1, 1, 1]
        shape[at] = size
        return np.arange(size, dtype=np.int64).reshape(shape)

    return axis(n, 0), axis(c, 1), axis(h, 2), axis(w, 3)


def element_offsets(desc: NvdlaTensorDesc, atom: int | None = None) -> npt.NDArray[np.int64]:
    """Each element's byte offset in the tensor's buffer, shaped (n, c, h, w); every one checked to
    lie within its bufferSize. A feature surface with ``atom``-byte atoms (default
    :func:`feature_atom`), or a pitch-linear image of one plane (:data:`IMAGE_FORMATS`); batch ``b``
    ``b * strides[3]`` bytes on (a tensor whose strides[3] is 0: its cubes one after another)."""
    n, c, h, w = desc.dims
    bpe = dtype_of(desc).itemsize
    line, surface = desc.strides[1], desc.strides[2]
    where = f"tensor '{desc.name}'"
    if min(desc.dims) < 0:
        raise DlaError(NvError.BadValue, f"{where}: dims {list(desc.dims)} must not be negative")
    nn, cc, hh, ww = _grid(desc.dims)
    if desc.pixel_format in FEATURE_FORMATS:
        atom = feature_atom(desc) if atom is None else atom
        if atom % bpe:
            raise DlaError(NvError.NotSupported, f"{where}: {bpe}-byte elements in {atom}-byte atoms")
        x = atom // bpe
        cube = -(-c // x) * surface
        offsets = (cc // x) * surface + hh * line + ww * atom + (cc % x) * bpe
    else:
        if desc.pixel_mapping != M.PixelMapping.PITCH_LINEAR:
            raise DlaError(NvError.NotSupported, f"{where}: pixel mapping {desc.pixel_mapping.name}: only "
                                                 "PITCH_LINEAR images convert to a dense array")
        if desc.pixel_format not in IMAGE_FORMATS:
            raise DlaError(NvError.NotSupported, f"{where}: pixel format {desc.pixel_format.name} (packed "
                                                 f"10-bit or semi-planar) does not convert to a dense array; "
                                                 f"bind its bytes with the NVDLA runtime API")
        bpp, component, sources = IMAGE_FORMATS[desc.pixel_format]
        if component != bpe:
            raise DlaError(NvError.BadValue, f"{where}: data type {desc.data_type.name} ({bpe}-byte "
                                             f"elements) for pixel format {desc.pixel_format.name} "
                                             f"({component}-byte components)")
        if c > len(sources):
            raise DlaError(NvError.BadValue, f"{where}: {c} channels, pixel format {desc.pixel_format.name} "
                                             f"has {len(sources)}")
        lane = np.array(sources[:c], dtype=np.int64)[None, :, None, None] * component
        cube = h * line
        offsets = hh * line + ww * bpp + lane
    batch = desc.strides[3] if n > 1 and desc.strides[3] else cube
    offsets = np.broadcast_to(nn * batch + offsets, (n, c, h, w))
    if offsets.size and (int(offsets.min()) < 0 or int(offsets.max()) + bpe > desc.size):
        end = int(offsets.max()) + bpe
        raise DlaError(NvError.InvalidSize, f"{where}: its elements reach byte {end} of a {desc.size}-byte "
                                            f"buffer (strides {list(desc.strides[:4])})")
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


# The fields setInputTensorDesc / setOutputTensorDesc keep as the loadable has them (NVIDIA's runtime
# refuses a change of each, too); the line, surface and batch strides and the buffer size may change.
KEPT_FIELDS = ("name", "dims", "data_format", "data_type", "data_category", "pixel_format", "pixel_mapping",
               "bind_id", "direction", "mem_id")
CHANGEABLE_STRIDES = (1, 2, 3)  # line, surface, batch
STRIDES = 8


@dataclass
class _Layout:
    desc: NvdlaTensorDesc  # the application's
    network: NvdlaTensorDesc  # the loadable's
    device: NvDlaMemHandle  # bound to the runner, in the loadable's layout
    user_bytes: npt.NDArray[np.int64]
    device_bytes: npt.NDArray[np.int64]
    user: NvDlaMemHandle | None = None


def _byte_offsets(desc: NvdlaTensorDesc, atom: int | None) -> npt.NDArray[np.int64]:
    return (element_offsets(desc, atom)[..., None] + np.arange(dtype_of(desc).itemsize)).reshape(-1)


def check_layout_change(network: NvdlaTensorDesc, desc: Any, what: str) -> NvdlaTensorDesc:
    """``desc`` when it describes ``network``'s tensor in a layout the runtime can convert to and from
    (another line, surface or batch stride, another buffer size: the elements inside the buffer, none
    overlapping); else a DlaError naming the field and both values."""
    if not isinstance(desc, NvdlaTensorDesc):
        raise DlaError(NvError.BadParameter, f"{what}: an NvdlaTensorDesc (getInputTensorDesc's) is "
                                             f"expected, not {type(desc).__name__}")
    for name in KEPT_FIELDS:
        mine, theirs = getattr(desc, name), getattr(network, name)
        if mine != theirs:
            raise DlaError(NvError.NotSupported, f"{what}: {name} {_shown(mine)} differs from the loadable's "
                                                 f"{_shown(theirs)}: an NVDLA Loadable's tensor keeps its "
                                                 f"{name} (its strides and bufferSize may change)")
    strides = desc.strides
    if not isinstance(strides, tuple) or len(strides) != STRIDES or not all(
            type(s) is int and 0 <= s < 1 << 40 for s in strides):
        raise DlaError(NvError.BadParameter, f"{what}: strides {strides!r} must be {STRIDES} integers "
                                             "0..2^40")
    for i, (mine, theirs) in enumerate(zip(strides, network.strides, strict=True)):
        if i not in CHANGEABLE_STRIDES and mine != theirs:
            raise DlaError(NvError.NotSupported, f"{what}: strides[{i}] {mine} differs from the loadable's "
                                                 f"{theirs}: only the line, surface and batch strides (1, 2, "
                                                 "3) may change")
    if type(desc.size) is not int or not 0 < desc.size < 1 << 40:
        raise DlaError(NvError.BadParameter, f"{what}: bufferSize {desc.size!r} must be 1..2^40")
    atom = feature_atom(network) if network.pixel_format in FEATURE_FORMATS else None
    try:
        user = _byte_offsets(desc, atom)  # every element inside bufferSize (InvalidSize naming it)
    except DlaError as e:
        raise DlaError(e.code, f"{what}: {e.message}") from None
    if np.unique(user).size != user.size:
        raise DlaError(NvError.BadValue, f"{what}: strides {list(strides[:4])}: elements of '{desc.name}' "
                                         f"overlap (a line holds {desc.dims[3]} elements, a surface "
                                         f"{desc.dims[2]} lines)")
    return desc


def _shown(value: Any) -> str:
    return value.name if isinstance(value, enum.Enum) else repr(value)


class NvdlaLayouts:
    """The layouts an application set for an NVDLA Loadable's tensors (the NVDLA runtime API's
    setInputTensorDesc / setOutputTensorDesc): the runner's buffer in the loadable's layout, converted
    to and from the application's buffer around each run (every byte of the tensor moved, the rest of
    the runner's input buffer zero). Called under the runtime's lock, which its own memory calls
    take: the port's are used."""

    def __init__(self, rt: Any, runner: Any) -> None:
        self.rt, self.runner = rt, runner
        self._layouts: dict[tuple[str, int], _Layout] = {}

    def desc(self, direction: str, index: int, network: NvdlaTensorDesc) -> NvdlaTensorDesc:
        layout = self._layouts.get((direction, index))
        return network if layout is None else layout.desc

    def set(self, direction: str, index: int, network: NvdlaTensorDesc, desc: Any) -> None:
        what = f"set{direction.capitalize()}TensorDesc({index})"
        desc = check_layout_change(network, desc, what)
        self._drop((direction, index))
        if desc == network:
            return  # the loadable's own layout again: bound as it is
        atom = feature_atom(network) if network.pixel_format in FEATURE_FORMATS else None
        size = max(self.runner.lo.memory_list[network.mem_id].size, network.size)
        device, _ = self.rt.port.NvDlaGetMem(self.rt.handle, size)
        try:
            (self.runner.bind_input if direction == "input" else self.runner.bind_output)(index, device)
        except BaseException:
            self.rt.port.NvDlaFreeMem(self.rt.handle, device)
            raise
        self._layouts[(direction, index)] = _Layout(desc, network, device, _byte_offsets(desc, atom),
                                                    _byte_offsets(network, atom))

    def bind(self, direction: str, index: int, mem: NvDlaMemHandle) -> bool:
        """Take ``mem`` as the application's buffer of a tensor whose layout it set; False for one
        whose layout is the loadable's (the runner binds it)."""
        layout = self._layouts.get((direction, index))
        if layout is None:
            return False
        where = f"bind{direction.capitalize()}Tensor({index})"
        if not isinstance(mem, NvDlaMemHandle):
            raise DlaError(NvError.BadParameter, f"{where}: a memory from allocateSystemMemory is expected, "
                                                 f"not {type(mem).__name__}")
        if mem.size < layout.desc.size:
            raise DlaError(NvError.InvalidSize, f"{where}: '{layout.desc.name}' in the layout set needs "
                                                f"{layout.desc.size} bytes, the memory has {mem.size}")
        layout.user = mem
        return True

    def run(self, runner: Any, timeout_ms: float) -> None:
        """Convert the inputs, run, convert the outputs (a tensor whose layout was set and that was not
        bound again: InvalidState naming it)."""
        layouts = list(self._layouts.items())
        for (direction, index), layout in layouts:
            if layout.user is None:
                raise DlaError(NvError.InvalidState, f"{direction} {index} '{layout.desc.name}': its layout "
                                                     "was set: bind its memory again (bind"
                                                     f"{direction.capitalize()}Tensor) before submitting")
        for (direction, _), layout in layouts:
            if direction == "input":
                assert layout.user is not None
                device = layout.device.bytes_view()
                device[:] = 0
                device[layout.device_bytes] = layout.user.bytes_view()[layout.user_bytes]
        runner.run(timeout_ms)
        for (direction, _), layout in layouts:
            if direction == "output":
                assert layout.user is not None
                layout.user.bytes_view()[layout.user_bytes] = layout.device.bytes_view()[layout.device_bytes]

    def _drop(self, key: tuple[str, int]) -> None:
        layout = self._layouts.pop(key, None)
        if layout is not None:
            self.runner.bound.pop(layout.network.mem_id, None)  # the application binds again
            self.rt.port.NvDlaFreeMem(self.rt.handle, layout.device)

    def close(self) -> None:
        for key in list(self._layouts):
            layout = self._layouts.pop(key)
            self.rt.port.NvDlaFreeMem(self.rt.handle, layout.device)
