"""The NVDLA Loadable as plain, immutable data: what the reader returns and the writer takes.

Every table of the ``nvdla.loadable`` schema is a frozen dataclass with the schema's field names;
lists are tuples; enum fields hold the enums below (IntEnum, IntFlag for memory flags). A
:class:`NvdlaLoadable` compares equal to another with the same content, so ``read(write(x)) == x``.

Usage::

    lo = NvdlaLoadable(version=Version(0, 7, 0), task_list=(...), memory_list=(...), ...)
    lo.blob("m0_NetworkDesc_i0").data
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

FORMAT_MAJOR, FORMAT_MINOR, FORMAT_SUB_MINOR = 0, 7, 0
NUM_STRIDES = 8  # TensorDescListEntry.stride_0 .. stride_7


class Interface(enum.IntEnum):
    """Which engine a task or a blob is for."""

    NONE = 0
    DLA1 = 1
    EMU1 = 2


class MemoryDomain(enum.IntEnum):
    SYSTEM = 0
    SRAM = 1


class MemoryFlags(enum.IntFlag):
    NONE = 0
    ALLOC = 1
    SET = 2
    INPUT = 4
    OUTPUT = 8
    DEBUG = 16


class EventType(enum.IntEnum):
    EVENTTYPE0 = 0
    EVENTTYPE1 = 1
    EVENTTYPE2 = 2


class EventOp(enum.IntEnum):
    WAIT = 0
    SIGNAL = 1


class DataFormat(enum.IntEnum):
    UNKNOWN = 0
    NCHW = 1
    NHWC = 2
    NCxHWx = 3


class DataType(enum.IntEnum):
    UNKNOWN = 0
    FLOAT = 1
    HALF = 2
    INT16 = 3
    INT8 = 4
    UINT8 = 5
    UINT16 = 6


class DataCategory(enum.IntEnum):
    IMAGE = 0
    WEIGHT = 1
    FEATURE = 2
    PLANAR = 3
    BIAS = 4


class PixelMapping(enum.IntEnum):
    PITCH_LINEAR = 0
    INVALID_PIXEL_MAP = 1


class PixelFormat(enum.IntEnum):
    R8 = 0
    R10 = 1
    R12 = 2
    R16 = 3
    R16_I = 4
    R16_F = 5
    A16B16G16R16 = 6
    X16B16G16R16 = 7
    A16B16G16R16_F = 8
    A16Y16U16V16 = 9
    V16U16Y16A16 = 10
    A16Y16U16V16_F = 11
    A8B8G8R8 = 12
    A8R8G8B8 = 13
    B8G8R8A8 = 14
    R8G8B8A8 = 15
    X8B8G8R8 = 16
    X8R8G8B8 = 17
    B8G8R8X8 = 18
    R8G8B8X8 = 19
    A2B10G10R10 = 20
    A2R10G10B10 = 21
    B10G10R10A2 = 22
    R10G10B10A2 = 23
    A2Y10U10V10 = 24
    V10U10Y10A2 = 25
    A8Y8U8V8 = 26
    V8U8Y8A8 = 27
    Y8_U8V8_N444 = 28
    Y8_V8U8_N444 = 29
    Y10_U10V10_N444 = 30
    Y10_V10U10_N444 = 31
    Y12_U12V12_N444 = 32
    Y12_V12U12_N444 = 33
    Y16_U16V16_N444 = 34
    Y16_V16U16_N444 = 35
    FEATURE = 36
    FEATURE_X8 = 37


class SubInterfaceDLA1(enum.IntEnum):
    """What a DLA1 blob holds (its sub_interface), as the runtime API's C header numbers them."""

    NONE = 0
    ADDR0 = 1  # the network descriptor
    DEPS = 2
    OPS = 3
    SURFS = 4
    LUTS = 5


@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    sub_minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.sub_minor}"


@dataclass(frozen=True)
class Blob:
    """Named bytes; ``size`` of them are used (the runtime copies ``size`` bytes of ``data``)."""

    name: str
    size: int
    interface: Interface = Interface.NONE
    sub_interface: int = 0
    version: Version = Version(0, 0, 0)
    data: bytes = b""


@dataclass(frozen=True)
class MemoryListEntry:
    id: int
    size: int
    domain: MemoryDomain = MemoryDomain.SYSTEM
    flags: MemoryFlags = MemoryFlags.ALLOC
    alignment: int = 0
    contents: tuple[str, ...] = ()
    offsets: tuple[int, ...] = ()
    bind_id: int = 0
    tensor_desc_id: int = 0

    @property
    def bindable(self) -> bool:
        """A network input or output: the application binds its own buffer."""
        return bool(self.flags & (MemoryFlags.INPUT | MemoryFlags.OUTPUT))


@dataclass(frozen=True)
class EventListEntry:
    id: int
    type: EventType = EventType.EVENTTYPE0
    target: int = 0
    val: int = 0
    op: EventOp = EventOp.WAIT


@dataclass(frozen=True)
class TaskListEntry:
    id: int
    interface: Interface
    instance: int = -1
    address_list: tuple[int, ...] = ()
    pre_actions: tuple[int, ...] = ()
    post_actions: tuple[int, ...] = ()


@dataclass(frozen=True)
class AddressListEntry:
    id: int
    mem_id: int
    offset: int = 0
    size: int = 0


@dataclass(frozen=True)
class SubmitListEntry:
    id: int
    task_id: tuple[int, ...] = ()


@dataclass(frozen=True)
class TensorDescListEntry:
    name: str
    id: int
    mem_id: int
    size: int
    offset: int = 0
    data_format: DataFormat = DataFormat.NCHW
    data_type: DataType = DataType.INT8
    data_category: DataCategory = DataCategory.FEATURE
    pixel_format: PixelFormat = PixelFormat.FEATURE
    pixel_mapping: PixelMapping = PixelMapping.PITCH_LINEAR
    n: int = 1
    c: int = 1
    h: int = 1
    w: int = 1
    strides: tuple[int, ...] = (0,) * NUM_STRIDES  # stride_0 .. stride_7 of the schema


@dataclass(frozen=True)
class RelocListEntry:
    address_id: int
    write_id: int
    offset: int
    interface: Interface = Interface.NONE
    sub_interface: int = 0
    reloc_type: int = 0


@dataclass(frozen=True)
class NvdlaLoadable:
    """A whole NVDLA Loadable (the schema's root table ``Loadable``)."""

    version: Version = Version(FORMAT_MAJOR, FORMAT_MINOR, FORMAT_SUB_MINOR)
    task_list: tuple[TaskListEntry, ...] = ()
    memory_list: tuple[MemoryListEntry, ...] = ()
    address_list: tuple[AddressListEntry, ...] = ()
    event_list: tuple[EventListEntry, ...] = ()
    blobs: tuple[Blob, ...] = ()
    tensor_desc_list: tuple[TensorDescListEntry, ...] = ()
    reloc_list: tuple[RelocListEntry, ...] = ()
    submit_list: tuple[SubmitListEntry, ...] = ()
    _blob_index: dict[str, Blob] = field(default_factory=dict, init=False, repr=False, compare=False)

    def blob(self, name: str) -> Blob | None:
        """The blob called ``name`` (a memory entry's content), or None."""
        if not self._blob_index and self.blobs:
            self._blob_index.update((b.name, b) for b in self.blobs)
        return self._blob_index.get(name)

    def inputs(self) -> list[MemoryListEntry]:
        """The bindable input memories, by bind id."""
        return sorted((m for m in self.memory_list if m.flags & MemoryFlags.INPUT), key=lambda m: m.bind_id)

    def outputs(self) -> list[MemoryListEntry]:
        """The bindable output memories, by bind id."""
        return sorted((m for m in self.memory_list if m.flags & MemoryFlags.OUTPUT), key=lambda m: m.bind_id)
