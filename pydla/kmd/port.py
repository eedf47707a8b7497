"""The KMD portability layer: everything the KMD needs from the system (the NVDLA KMD's portability layer).

The engine scheduler touches the device only through :class:`KmdPortability`: register reads and
writes, the DMA and CPU addresses of the task's address-list entries, reads and writes of data, and
the interrupt hookup. The driver around it gets the rest through the same interface, as a kernel
driver gets it from its OS: what the device is (:meth:`KmdPortability.dla_get_device_info`, asked
once at probe time), device address spaces (one per context), and buffer objects mapped into them.
:class:`~pydla.kmd.port_virtual.VirtualDevicePort` implements it in-process over the virtual device;
a port to real MMIO or a remote device implements the same methods.

Usage::

    port: KmdPortability = VirtualDevicePort(VirtualDevice("full"))
    port.dla_reg_write(R.GLB_INTR_MASK, 0)
    ctx = port.dla_create_context()
    iova = port.dla_map(ctx, port.dla_alloc(4096))
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
from pydla.deviceapi.task_layout import AddressEntry as AddressEntry  # the KMD takes the contract's entry
from pydla.errors import DlaError, NvError
from pydla.hw.memory import BufferObject


@dataclass(frozen=True)
class CpuAddress:
    """Memory the scheduler may read: ``size`` bytes of ``bo`` from ``offset``."""

    bo: BufferObject
    offset: int
    size: int


@dataclass(frozen=True)
class ResolvedEntry:
    bo: BufferObject
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

    def entry(self, index: int, what: str) -> ResolvedEntry:
        if not 0 <= index < len(self.addresses):
            raise DlaError(NvError.BadParameter,
                           f"task {self.task_id}: {what}: address-list index {index} is outside "
                           f"the {len(self.addresses)} entries")
        return self.addresses[index]


@dataclass(frozen=True)
class ShaveCaps:
    """The device's SHAVE tiles as the KMD reads them at probe time (SHAVE_TILES, SHAVE_BARRIERS,
    SHAVE_CMX_BYTES): what a SHAVE task list is validated against (pydla.kmd.shave)."""

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

    @property
    def instance(self) -> str:
        return self.name.split(":", 1)[-1]


@dataclass(frozen=True)
class KmdDeviceInfo:
    """What the KMD learns of its device at probe time (:meth:`KmdPortability.dla_get_device_info`):
    which instance it is, how it runs, and what it can do.

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


class KmdPortability(abc.ABC):
    """What the KMD calls; names and meaning as in the NVDLA KMD where it has them."""

    @abc.abstractmethod
    def dla_get_device_info(self) -> KmdDeviceInfo:
        """What the device is (asked once, when the driver probes it)."""

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

    @abc.abstractmethod
    def dla_read_dma_address(self, task: TaskDesc, index: int, what: str = "address") -> int:
        """The device (DMA) address of address-list entry ``index``."""

    @abc.abstractmethod
    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        """Memory of address-list entry ``index`` that the scheduler's processor can read."""

    @abc.abstractmethod
    def dla_data_read(self, src: CpuAddress, size: int, offset: int) -> bytes:
        """A copy of ``size`` bytes at ``offset`` of ``src`` (a copy: the UMD cannot change it later)."""

    @abc.abstractmethod
    def dla_data_write(self, src: bytes, dst: CpuAddress, offset: int) -> None:
        """Write ``src`` at ``offset`` of ``dst``."""

    @abc.abstractmethod
    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        """Have ``handler`` called when the device raises its interrupt."""

    @abc.abstractmethod
    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        """Stop calling ``handler``."""

    def dla_cu_stream_write(self, cu: CuDesc, data: bytes, timeout_s: float) -> None:
        """Write ``data`` into AP_CTRL_NONE unit ``cu``'s input stream (all of it, within
        ``timeout_s``: DlaError Timeout otherwise). A port without streams refuses."""
        raise DlaError(NvError.NotSupported, f"this port has no streams (compute unit '{cu.name}')")

    def dla_cu_stream_read(self, cu: CuDesc, nbytes: int, timeout_s: float) -> bytes:
        """Read exactly ``nbytes`` of ``cu``'s output stream within ``timeout_s``."""
        raise DlaError(NvError.NotSupported, f"this port has no streams (compute unit '{cu.name}')")

    # -- address spaces and buffer objects (what a kernel driver gets from its OS: the IOMMU's
    # domains, GEM objects) -------------------------------------------------------------------------

    @abc.abstractmethod
    def dla_create_context(self) -> int:
        """A new device address space; returns its id (the context the device's accesses carry)."""

    @abc.abstractmethod
    def dla_destroy_context(self, ctx: int) -> None:
        """Release address space ``ctx`` (its mappings go with it)."""

    @abc.abstractmethod
    def dla_alloc(self, size: int, fd: int | None = None) -> BufferObject:
        """A buffer object of ``size`` bytes of device memory; with ``fd``, that shared memory,
        whose descriptor the buffer object then owns (also when this fails)."""

    @abc.abstractmethod
    def dla_free(self, bo: BufferObject) -> None:
        """Free a buffer object from :meth:`dla_alloc` (the device faults on it from then on)."""

    @abc.abstractmethod
    def dla_map(self, ctx: int, bo: BufferObject) -> int:
        """Map ``bo`` into address space ``ctx``; returns its device address there (IOVA)."""

    @abc.abstractmethod
    def dla_unmap(self, ctx: int, iova: int) -> None:
        """Remove the mapping at ``iova`` from address space ``ctx``."""
