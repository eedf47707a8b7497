"""NVDLA's feature-data format: a WxHxC cube in memory as surfaces of atoms, both ways.

A cube is cut along C into surfaces of ``epa = atom / bpe`` channels (elements per atom). One atom
holds the ``epa`` channels of one (x, y) position; atoms follow along x, lines along y at
``line_stride`` bytes, surfaces at ``surf_stride`` bytes, batches at ``batch_stride`` bytes::

    offset(n, c, y, x) = n·batch_stride + (c // epa)·surf_stride + y·line_stride + x·atom + (c % epa)·bpe

The last surface is a whole atom wide even when C is not a multiple of ``epa``. NVDLA's blocks read
and write whole atoms, so the lanes past C are read (and written) like the others: :func:`gather`
and :func:`scatter` work on whole atoms (``lanes=True``) or on the C channels only.

Every field is checked before memory is touched: sizes 1 … 8192 (the 13-bit size registers),
addresses and strides multiples of the atom (NVDLA's address registers drop the low bits), lines
and surfaces that do not overlap; then the memory itself refuses what lies outside it, and the
error names the block's field.

Usage::

    cube = Cube(address=0x1000, width=8, height=8, channel=32, line_stride=256, surf_stride=2048,
                precision=Precision.INT8)
    x = gather(mem, cube, NV_FULL, "PDP src")          # int8 array of shape (32, 8, 8)
    scatter(mem, cube, NV_FULL, x, "PDP dst")
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.memory import NvdlaMemory, access
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.strided import read_block, write_block
from pydla.hw.nvdla.target import NvdlaTarget

MAX_DIM = 8192  # width, height and channel registers are 13 bits holding size - 1
MAX_BATCH = 32


@dataclass(frozen=True)
class Cube:
    """A feature-data cube in memory: its address, sizes (in elements), strides (in bytes)."""

    address: int
    width: int
    height: int
    channel: int
    line_stride: int
    surf_stride: int
    precision: Precision
    batch: int = 1
    batch_stride: int = 0

    def surfaces(self, target: NvdlaTarget) -> int:
        """Number of surfaces: ``ceil(channel / epa)``."""
        return -(-self.channel // target.epa(self.precision))

    def lanes(self, target: NvdlaTarget) -> int:
        """Channels including the unused lanes of the last surface."""
        return self.surfaces(target) * target.epa(self.precision)

    def extent(self, target: NvdlaTarget) -> int:
        """Bytes from ``address`` to the end of the last atom of the last batch."""
        one = ((self.surfaces(target) - 1) * self.surf_stride + (self.height - 1) * self.line_stride
               + self.width * target.atom)
        return (self.batch - 1) * self.batch_stride + one


@functools.lru_cache(maxsize=1024)  # the same cubes at every run of a network (a refusal raises again)
def check(cube: Cube, target: NvdlaTarget, what: str) -> None:
    """Refuse a cube NVDLA cannot hold: a DlaError naming ``what`` and the field."""
    target.require(cube.precision, what)
    for name in ("width", "height", "channel"):
        v = getattr(cube, name)
        if not 1 <= v <= MAX_DIM:
            raise DlaError(NvError.BadValue, f"{what}: {name} {v} is outside 1..{MAX_DIM}")
    if not 1 <= cube.batch <= MAX_BATCH:
        raise DlaError(NvError.BadValue, f"{what}: batch {cube.batch} is outside 1..{MAX_BATCH}")
    atom = target.atom
    for name in ("address", "line_stride", "surf_stride", "batch_stride"):
        v = getattr(cube, name)
        if v < 0 or v % atom:
            raise DlaError(NvError.BadValue,
                           f"{what}: {name} {v:#x} is not a non-negative multiple of the {atom}-byte atom")
    line = cube.width * atom
    if cube.height > 1 and cube.line_stride < line:
        raise DlaError(NvError.BadValue, f"{what}: line_stride {cube.line_stride} is less than a line "
                                         f"({cube.width} atoms = {line} bytes)")
    plane = (cube.height - 1) * cube.line_stride + line
    if cube.surfaces(target) > 1 and cube.surf_stride < plane:
        raise DlaError(NvError.BadValue, f"{what}: surf_stride {cube.surf_stride} is less than a surface "
                                         f"({plane} bytes)")
    one = (cube.surfaces(target) - 1) * cube.surf_stride + plane
    if cube.batch > 1 and cube.batch_stride < one:
        raise DlaError(NvError.BadValue, f"{what}: batch_stride {cube.batch_stride} is less than one "
                                         f"batch ({one} bytes)")


def _read_atoms(memory: NvdlaMemory, cube: Cube, target: NvdlaTarget, base: int) -> npt.NDArray[np.uint8]:
    """The atoms of one batch as uint8 (surfaces, height, width, atom)."""
    s_count = cube.surfaces(target)
    lines = read_block(memory, base, (s_count, cube.height), (cube.surf_stride, cube.line_stride),
                       cube.width * target.atom)
    return lines.reshape(s_count, cube.height, cube.width, target.atom)


def gather_batches(memory: NvdlaMemory, cube: Cube, target: NvdlaTarget, what: str, *,
                   lanes: bool = False) -> npt.NDArray[np.generic]:
    """All batches of ``cube`` as elements of shape (batch, C, H, W) (C including the unused lanes of
    the last surface when ``lanes``), dtype ``cube.precision.dtype``."""
    check(cube, target, what)
    out = []
    with access(what):
        for n in range(cube.batch):
            atoms = _read_atoms(memory, cube, target, cube.address + n * cube.batch_stride)
            el = atoms.view(cube.precision.dtype)  # (S, H, W, epa)
            chw = el.transpose(0, 3, 1, 2).reshape(-1, cube.height, cube.width)
            out.append(chw if lanes else chw[:cube.channel])
    return np.stack(out)


def _words(a: npt.NDArray[np.generic], atom: int) -> npt.NDArray[np.generic]:
    """An array's last axis (whole atoms) as 8-byte words where atoms are whole words (every NVDLA
    configuration's are): a transposing copy then moves one word per element, not one lane."""
    return np.ascontiguousarray(a).view(np.uint64 if atom % 8 == 0 else np.uint8)


def _atoms_of(hwc: npt.NDArray[np.generic], s_count: int, target: NvdlaTarget) -> npt.NDArray[np.uint8]:
    """(H, W, lanes) channel-last elements as atoms (surfaces, H, W, atom bytes), one copy."""
    h, w = hwc.shape[:2]
    words = _words(hwc, target.atom)
    words = words.reshape(h, w, s_count, -1)
    out: npt.NDArray[np.uint8] = np.ascontiguousarray(words.transpose(2, 0, 1, 3)).view(np.uint8)
    return out


def gather_channels_last(memory: NvdlaMemory, cube: Cube, target: NvdlaTarget, what: str
                         ) -> npt.NDArray[np.generic]:
    """All batches of ``cube`` as (batch, H, W, lanes): the channels, with the unused lanes of the last
    surface, innermost (the order of the elements within an atom), dtype ``cube.precision.dtype``."""
    check(cube, target, what)
    s_count, epa = cube.surfaces(target), target.epa(cube.precision)
    out = np.empty((cube.batch, cube.height, cube.width, s_count * epa), dtype=cube.precision.dtype)
    with access(what):
        for n in range(cube.batch):
            atoms = _read_atoms(memory, cube, target, cube.address + n * cube.batch_stride)
            words = _words(atoms, target.atom)  # (S, H, W, words): the copy moves whole atoms
            out[n].view(words.dtype).reshape(cube.height, cube.width, s_count, -1)[...] = \
                words.transpose(1, 2, 0, 3)
    return out


def gather(memory: NvdlaMemory, cube: Cube, target: NvdlaTarget, what: str, *,
           lanes: bool = False) -> npt.NDArray[np.generic]:
    """The cube's elements, shape (C, H, W) (one batch; see :func:`gather_batches`)."""
    if cube.batch != 1:
        raise DlaError(NvError.BadParameter, f"{what}: gather reads one batch, the cube has {cube.batch}")
    out: npt.NDArray[np.generic] = gather_batches(memory, cube, target, what, lanes=lanes)[0]
    return out


def scatter_batches(memory: NvdlaMemory, cube: Cube, target: NvdlaTarget, data: npt.ArrayLike,
                    what: str) -> None:
    """Write (batch, C, H, W) elements as ``cube`` lays them out. With C = the cube's channels the
    unused lanes of the last surface are written as 0; with C = whole surfaces they are written as
    given. Bytes between lines and surfaces are left as they are."""
    check(cube, target, what)
    arr = np.asarray(data)
    lanes = cube.lanes(target)
    shape_ok = (arr.ndim == 4 and arr.shape[0] == cube.batch and arr.shape[2:] == (cube.height, cube.width)
                and arr.shape[1] in (cube.channel, lanes))
    if not shape_ok:
        raise DlaError(NvError.BadParameter,
                       f"{what}: data of shape {arr.shape} does not fit the cube "
                       f"({cube.batch}, {cube.channel} or {lanes}, {cube.height}, {cube.width})")
    s_count = cube.surfaces(target)
    # the atoms (surface, y, x, lane) of each batch, in one copy from channel-last data (as the SDP's
    # output is); other data, or C short of whole surfaces, through a zeroed full cube first
    full = arr.transpose(0, 2, 3, 1) if arr.shape[1] == lanes and arr.dtype == cube.precision.dtype else None
    if full is None:
        whole = np.zeros((cube.batch, cube.height, cube.width, lanes), dtype=cube.precision.dtype)
        whole[..., :arr.shape[1]] = arr.transpose(0, 2, 3, 1)
        full = whole
    with access(what):
        for n in range(cube.batch):
            atoms = _atoms_of(full[n], s_count, target).reshape(s_count, cube.height, -1)
            write_block(memory, cube.address + n * cube.batch_stride, (cube.surf_stride, cube.line_stride),
                        atoms)


def scatter(memory: NvdlaMemory, cube: Cube, target: NvdlaTarget, data: npt.ArrayLike, what: str) -> None:
    """Write (C, H, W) elements (one batch; see :func:`scatter_batches`)."""
    if cube.batch != 1:
        raise DlaError(NvError.BadParameter, f"{what}: scatter writes one batch, the cube has {cube.batch}")
    scatter_batches(memory, cube, target, np.asarray(data)[None], what)
