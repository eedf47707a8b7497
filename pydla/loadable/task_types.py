"""What the task encoder (:mod:`pydla.loadable.taskbuilder`) builds with and builds: the memory
references and cubes an operation reads and writes, the operation being built, and the built task
with its control-code ELF and its loading into any driver's buffers (:class:`BufferAllocator`).

Usage::

    built = TaskBuilder().build()          # a BuiltTask
    handles = built.load(kmd, ctx)         # a LoadedTask: the address list to submit
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.task_layout import SURFACE_DESC_SIZE, AddressEntry
from pydla.errors import DlaError, NvError

DESCRIPTORS = "descriptors"
FIXED_ENTRIES = 5  # network, dependency graph, operation and surface descriptors, LUTs
DTYPES = {"fp32": np.float32, "fp16": np.float16}

# The descriptor layout (which descriptor each block uses, the slot sizes) is the contract's:
# pydla.deviceapi.task_layout, which the KMD reads by.


@dataclass(frozen=True)
class Ref:
    """Bytes ``[offset, offset + size)`` of a named buffer."""

    buffer: str
    offset: int
    size: int


@dataclass(frozen=True)
class Cube:
    """A planar CHW cube in a named buffer."""

    buffer: str
    offset: int
    shape: tuple[int, int, int]
    precision: str
    line_stride: int
    surf_stride: int

    @property
    def element(self) -> int:
        return int(np.dtype(DTYPES[self.precision]).itemsize)

    @property
    def extent(self) -> int:
        c, h, w = self.shape
        return (c - 1) * self.surf_stride + (h - 1) * self.line_stride + w * self.element

    @property
    def ref(self) -> Ref:
        return Ref(self.buffer, self.offset, self.extent)


@dataclass
class Op:
    """An operation being built."""

    index: int
    block: dla_block_e
    op: Any
    surface: Any
    reads: list[Ref] = field(default_factory=list)
    writes: list[Ref] = field(default_factory=list)
    fused_parent: int = -1
    out_shape: tuple[int, int, int] | None = None
    buffers: dict[str, str] = field(default_factory=dict)  # surface field -> buffer name


TaskAddress = AddressEntry  # the name this module's users know

class BufferAllocator(Protocol):
    """What :meth:`BuiltTask.load` needs of a driver: buffers of a context and their bytes."""

    def bo_create(self, ctx: int, size: int) -> int: ...

    def bo_array(self, ctx: int, handle: int) -> npt.NDArray[np.uint8]: ...


@dataclass
class LoadedTask:
    """A built task in a context's buffers: the address list to submit and the handles by name."""

    addresses: list[TaskAddress]
    handles: dict[str, int]


@dataclass
class BuiltTask:
    """Descriptor bytes, the buffers a task needs (name -> size) and its address list."""

    descriptors: bytes
    buffers: dict[str, int]
    addresses: list[tuple[str, int]]
    operations: list[Op]

    def control_code(self, arguments: dict[str, int]) -> bytes:
        """This task as a control-code ELF (:mod:`pydla.elf.controlcode`) whose buffer ``name`` is
        run argument ``arguments[name]``: descriptor sections plus a relocation per address field."""
        from pydla.elf import controlcode as cc
        from pydla.elf.writer import ElfWriter

        offsets = [off for _, off in self.addresses[:FIXED_ENTRIES]]
        ends = [*offsets[1:], len(self.descriptors)]
        w = ElfWriter()
        for name, start, end in zip(cc.SECTIONS, offsets, ends, strict=True):
            w.add_section(name, self.descriptors[start:end], align=64)
        names = [name for name, _ in self.addresses[FIXED_ENTRIES:]]
        for name in names:
            if name not in arguments:
                raise DlaError(NvError.BadParameter, f"control code: buffer '{name}' is not a run argument")
            w.add_symbol(name, None, value=arguments[name], absolute=True)
        for op in self.operations:
            base = op.index * SURFACE_DESC_SIZE
            for field_name, _ in op.surface._fields_:
                sub = getattr(op.surface, field_name)
                if hasattr(sub, "address") and sub.address >= FIXED_ENTRIES:
                    offset = base + getattr(type(op.surface), field_name).offset + type(sub).address.offset
                    w.add_relocation(".dla.surfaces", offset=offset, rel_type=cc.R_DLA_ARG_INDEX16,
                                     symbol=names[sub.address - FIXED_ENTRIES])
        return w.build()

    def load(self, kmd: BufferAllocator, ctx: int, existing: dict[str, int] | None = None) -> LoadedTask:
        """Create the buffers in ``ctx`` (except those in ``existing``) and write the descriptors."""
        handles = dict(existing or {})
        for name, size in self.buffers.items():
            if name not in handles:
                handles[name] = kmd.bo_create(ctx, size)
        desc = kmd.bo_array(ctx, handles[DESCRIPTORS])
        desc[:len(self.descriptors)] = np.frombuffer(self.descriptors, dtype=np.uint8)
        return LoadedTask([TaskAddress(handles[name], off) for name, off in self.addresses], handles)
