"""The firmware's interface: what the engine scheduler calls, and the descriptions it works from.

As NVDLA's ``nvdla_interface.h`` does for its firmware, this module declares the seam between the
engine scheduler and whatever runs it: :class:`FirmwarePortability`, the KMD portability functions the
scheduler calls (``dla_reg_write``/``dla_reg_read``, ``dla_read_dma_address``/``dla_read_cpu_address``,
``dla_data_read``/``dla_data_write``, the interrupt hookup), and the data that crosses it: the task
(:class:`TaskDesc`, its address list resolved to :class:`ResolvedEntry`), memory the scheduler reads
(:class:`CpuAddress`), and what the device is (:class:`KmdDeviceInfo`, :class:`DeviceCaps`).

Two ports implement it: the host KMD's (:class:`pydla.kmd.port.KmdPortability`, which adds what a
driver gets from its OS: address spaces, buffer objects, the device's description), headless; and
the device microcontroller's own (:class:`pydla.hw.mcu.port.FirmwarePort`), headed.

Usage::

    class MyPort(FirmwarePortability): ...        # registers, addresses, data, interrupt
    engine = Engine(MyPort(), info)               # pydla.firmware.engine
    engine.dla_engine_init()
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.errors import DlaError, NvError

MAX_ADDRESSES = 4096  # entries of one task's address list


class BufferMemory(Protocol):
    """A buffer object as the scheduler's port hands it out: its handle (named in messages), its size
    (what bounds are checked against) and ``array``, its bytes as the processor running the scheduler
    maps them. The host KMD's :class:`pydla.kmd.bo.BufferObject` is one, the device memory's
    buffer object (what the microcontroller reaches through the IOMMU) another."""

    @property
    def handle(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def array(self) -> npt.NDArray[np.uint8]: ...


@dataclass(frozen=True)
class CpuAddress:
    """Memory the scheduler may read: ``size`` bytes of ``bo`` from ``offset``."""

    bo: BufferMemory
    offset: int
    size: int


@dataclass(frozen=True)
class ResolvedEntry:
    """An address-list entry resolved to its buffer: the buffer, its device address (IOVA) in the
    task's context, the entry's offset in it and, when the entry gives one, its length."""

    bo: BufferMemory
    iova: int
    offset: int
    length: int | None = None

    @property
    def size(self) -> int:
        """Bytes the task may use from the entry's offset (to the end of its buffer by default)."""
        return self.bo.size - self.offset if self.length is None else self.length


@dataclass
class TaskDesc:
    """The NVDLA KMD's ``dla_task_desc``: the submitting context and its resolved address list."""

    task_id: int
    ctx: int
    addresses: list[ResolvedEntry] = field(default_factory=list)
    # (argidx, value) of the engine compute unit's scalar arguments, checked (pydla.kmd.cu.check_scalars)
    scalars: tuple[tuple[int, int], ...] = ()
    # An NVDLA DLA task's firmware interface version (the loadable's network-descriptor blob version):
    # which dla_interface layout its descriptors have (pydla.firmware.nvdla). None: pydla's own task.
    nvdla_interface: tuple[int, int, int] | None = None
    # (context, device address, size) of the task's command buffer when the driver made one
    # (pydla.kmd.cmdbuf): the engine then submits it to the device's command processor with one
    # doorbell write; None: operation by operation.
    command_buffer: tuple[int, int, int] | None = None

    def entry(self, index: int, what: str) -> ResolvedEntry:
        if not 0 <= index < len(self.addresses):
            raise DlaError(NvError.BadParameter,
                           f"task {self.task_id}: {what}: address-list index {index} is outside "
                           f"the {len(self.addresses)} entries")
        return self.addresses[index]


@dataclass(frozen=True)
class ShaveCaps:
    """The device's SHAVE tiles as the KMD reads them at probe time (SHAVE_TILES, SHAVE_BARRIERS,
    SHAVE_CMX_BYTES): what a SHAVE task list is validated against (pydla.firmware.shave)."""

    tiles: int
    barriers: int
    cmx_bytes: int


class ShaveCapsLike(Protocol):
    """What SHAVE validation reads of the device (:class:`ShaveCaps`, or a configuration's ``shave``)."""

    @property
    def tiles(self) -> int: ...
    @property
    def barriers(self) -> int: ...
    @property
    def cmx_bytes(self) -> int: ...


class DeviceCaps(Protocol):
    """What descriptor validation needs to know of the device: its name (for messages), its blocks,
    its precisions and what one operation may do (bytes, kernel size, strides); ``shave``, its SHAVE
    tiles (None: it has none). :class:`KmdDeviceInfo` answers it (and so does a device configuration)."""

    @property
    def name(self) -> str: ...
    @property
    def blocks(self) -> tuple[dla_block_e, ...]: ...
    @property
    def precisions(self) -> tuple[dla_precision_e, ...]: ...
    @property
    def max_bytes_per_op(self) -> int: ...
    @property
    def max_kernel(self) -> int: ...
    @property
    def max_stride(self) -> int: ...
    @property
    def shave(self) -> ShaveCapsLike | None: ...


@dataclass(frozen=True)
class CuDesc:
    """One compute unit of the device's IP_LAYOUT as the KMD sees it (XRT's fields, the KMD's names):
    ``control`` is ``HS``, ``CHAIN`` or ``NONE`` (AP_CTRL_*), ``base``/``window`` its register window,
    ``int_enable``/``interrupt_id`` its wiring to GLB cu_intr_status, ``pipeline_depth`` how many
    executions a CHAIN unit takes at once; ``engine`` marks the DLA engine's own entry (run by the
    task path, not as a CU); ``shave_tile`` the SHAVE tile a ``shave_tile`` unit runs on (its
    executions and SHAVE task lists take turns there: pydla.kmd.tile_owner)."""

    name: str  # "kernel:instance"
    control: str
    base: int
    window: int
    int_enable: bool
    interrupt_id: int
    pipeline_depth: int = 1
    engine: bool = False
    # The KMD's own knowledge (not in the uAPI's CU_QUERY: a client's copy has None): not compared.
    shave_tile: int | None = field(default=None, compare=False)
    # The names of the arguments a start takes, when the unit's model declares them (XRT's kernel
    # metadata): the host checks a start's argument count against them. Over Linux: CU_ARGS (2.9).
    arguments: tuple[str, ...] | None = field(default=None, compare=False)

    @property
    def instance(self) -> str:
        return self.name.split(":", 1)[-1]


class NvdlaHwLike(Protocol):
    """A configuration's ``nvdla`` section as :meth:`NvdlaFacts.of` reads it (its optional features
    are read when present)."""

    @property
    def register_map(self) -> str: ...
    @property
    def precisions(self) -> Sequence[str | int]: ...
    @property
    def atom_bytes(self) -> int: ...


@dataclass(frozen=True)
class NvdlaFacts:
    """What NVDLA's firmware needs to know of an NVDLA configuration (nv_full, nv_small, nv_large...):
    the register map it programs (the generated module's name, ``nvdla_v1_regs`` for nv_full,
    ``nvdla_v2_regs`` for the others), the precisions (NVDLA's codes: INT8 0, INT16 1, FP16 2), the
    memory atom in bytes, and the optional features. Which blocks exist (BDMA, RUBIK) is
    :attr:`KmdDeviceInfo.blocks`."""

    register_map: str
    precisions: tuple[int, ...]
    atom: int
    weight_compression: bool = False
    winograd: bool = False
    sdp_lut: bool = True
    sdp_y: bool = True
    # Outside NVDLA's map, the platform's: the register the firmware writes a task's context (its
    # IOMMU address space) to before the task's first operation, and the one that resets the whole
    # device when 1 is written (None: the platform has none).
    context_register: int | None = None
    reset_register: int | None = None

    @classmethod
    def of(cls, hw: NvdlaHwLike, context_register: int | None = None,
           reset_register: int | None = None) -> NvdlaFacts:
        """The facts of a configuration's ``nvdla`` section (``pydla.target.nvdla_hw.NvdlaHwConfig``:
        ``register_map`` "nvdla_v1"/"nvdla_v2", ``precisions`` by name, ``atom_bytes``...). Usage::

            KmdDeviceInfo(..., nvdla=NvdlaFacts.of(config.nvdla, S.PYDLA_SMMU_CTX, S.PYDLA_CTL_RESET))
        """
        names = {"INT8": 0, "INT16": 1, "FP16": 2}
        precisions = tuple(names[p] if isinstance(p, str) else int(p) for p in hw.precisions)
        return cls(str(hw.register_map), precisions, int(hw.atom_bytes),
                   bool(getattr(hw, "weight_compression", False)), bool(getattr(hw, "winograd", False)),
                   bool(getattr(hw, "sdp_lut", True)), bool(getattr(hw, "sdp_y", True)), context_register,
                   reset_register)


@dataclass(frozen=True)
class KmdDeviceInfo:
    """What the KMD learns of its device at probe time
    (:meth:`pydla.kmd.port.KmdPortability.dla_get_device_info`), and what the firmware knows of the
    device it runs on: which instance it is, how it runs, and what it can do.

    ``headed`` says the device has a microcontroller running the engine scheduler (GLB mcu_status).
    ``mode`` says who makes the device progress: ``deterministic``, it computes inside the register
    write that enables an operation (the driver polls right after a submit); ``step``, only when
    its owner steps it (the driver polls when asked); ``threaded``, on its own (the driver runs a
    bottom half beside it)."""

    instance: int
    mode: str
    name: str
    hw_version: int
    blocks: tuple[dla_block_e, ...]
    precisions: tuple[dla_precision_e, ...]
    memory_bytes: int
    contexts: int
    max_bytes_per_op: int = 1 << 30
    max_kernel: int = 1024
    max_stride: int = 64
    compute_units: tuple[CuDesc, ...] = ()  # the IP_LAYOUT, in its order
    # A microcontroller runs the engine scheduler (headed mode): the driver reaches it through the
    # device-API mailbox (pydla.kmd.headed) instead of programming the blocks itself.
    headed: bool = False
    # The SHAVE tiles (None: none), read from the SHAVE registers by the driver at probe time.
    shave: ShaveCaps | None = None
    # An NVDLA configuration: its registers are NVDLA's and its tasks NVDLA's descriptors
    # (pydla.firmware.nvdla); None: pydla's own register map and descriptors.
    nvdla: NvdlaFacts | None = None


class FirmwarePortability(abc.ABC):
    """What the engine scheduler calls: NVDLA's KMD portability functions, names and meaning as there.

    ``dla_data_read``/``dla_data_write`` are given for memory the scheduler's processor maps (a
    :class:`BufferMemory`'s ``array``), as it is for both of pydla's ports; a port whose memory is
    elsewhere overrides them."""

    @abc.abstractmethod
    def dla_reg_write(self, addr: int, reg: int) -> None:
        """Write register ``addr`` (offset from the register base)."""

    @abc.abstractmethod
    def dla_reg_read(self, addr: int) -> int:
        """Read register ``addr``."""

    def dla_reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        """Write ``(addr, value)`` pairs in order, as ``dla_reg_write`` would one by one; a port may
        do it in one transaction (programming an operation is some 40 writes)."""
        for addr, value in writes:
            self.dla_reg_write(addr, value)

    def dla_reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None:
        """Write ``values[i]`` to register ``addresses[i]``, in order, as ``dla_reg_write`` would one
        by one; a port may do it in one transaction (an operation's program, some 40 registers)."""
        self.dla_reg_write_many(list(zip(addresses.tolist(), values.tolist(), strict=True)))

    def dla_read_dma_address(self, task: TaskDesc, index: int, what: str = "address") -> int:
        """The device (DMA) address of address-list entry ``index``."""
        entry = task.entry(index, what)
        return entry.iova + entry.offset

    @abc.abstractmethod
    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        """Memory of address-list entry ``index`` that the scheduler's processor can read."""

    def dla_data_read(self, src: CpuAddress, size: int, offset: int) -> bytes:
        """A copy of ``size`` bytes at ``offset`` of ``src`` (a copy: the UMD cannot change it later)."""
        if size < 0 or offset < 0 or offset + size > src.size:
            raise DlaError(NvError.InvalidSize,
                           f"read of {size} bytes at offset {offset} of buffer {src.bo.handle}: "
                           f"only {src.size} bytes are there")
        start = src.offset + offset
        return bytes(src.bo.array[start:start + size])

    def dla_data_write(self, src: bytes, dst: CpuAddress, offset: int) -> None:
        """Write ``src`` at ``offset`` of ``dst``."""
        if offset < 0 or offset + len(src) > dst.size:
            raise DlaError(NvError.InvalidSize,
                           f"write of {len(src)} bytes at offset {offset} of buffer {dst.bo.handle}: "
                           f"only {dst.size} bytes are there")
        start = dst.offset + offset
        dst.bo.array[start:start + len(src)] = memoryview(src)

    @abc.abstractmethod
    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        """Have ``handler`` called when the device raises its interrupt."""

    @abc.abstractmethod
    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        """Stop calling ``handler``."""
