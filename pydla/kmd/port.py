"""The KMD portability layer: everything the engine scheduler needs from the system (seed 003).

The scheduler touches the device only through :class:`KmdPortability`: register reads and writes,
the DMA and CPU addresses of the task's address-list entries, reads and writes of data, and the
interrupt hookup. :class:`VirtualDevicePort` implements it in-process over
:class:`~pydla.hw.device.VirtualDevice`; a port to real MMIO or a remote device implements the same
methods.

Usage::

    port = VirtualDevicePort(VirtualDevice("full"))
    port.dla_reg_write(R.GLB_INTR_MASK, 0)
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.hw.memory import BufferObject


@dataclass(frozen=True)
class AddressEntry:
    """One entry of a task's address list: a buffer of the submitting context, an offset, and the
    bytes from there the task may use (None: to the end of the buffer; a sub-buffer otherwise)."""

    handle: int
    offset: int = 0
    size: int | None = None


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
    """The seed's ``dla_task_desc``: the submitting context and its resolved address list."""

    task_id: int
    ctx: int
    addresses: list[ResolvedEntry] = field(default_factory=list)

    def entry(self, index: int, what: str) -> ResolvedEntry:
        if not 0 <= index < len(self.addresses):
            raise DlaError(NvError.BadParameter,
                           f"task {self.task_id}: {what}: address-list index {index} is outside "
                           f"the {len(self.addresses)} entries")
        return self.addresses[index]


class KmdPortability(abc.ABC):
    """What the engine scheduler calls; names and meaning as in the seed."""

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


class VirtualDevicePort(KmdPortability):
    """The in-process implementation: direct calls into a :class:`VirtualDevice`."""

    def __init__(self, device: VirtualDevice) -> None:
        self.device = device
        # Register accesses are the device's own methods (a call less on every access of a path
        # that makes some ten per job); the methods below say what they are.
        self.dla_reg_write = device.reg_write  # type: ignore[method-assign,assignment]
        self.dla_reg_read = device.reg_read  # type: ignore[method-assign,assignment]
        self.dla_reg_write_words = device.reg_write_words  # type: ignore[method-assign]

    def dla_reg_write(self, addr: int, reg: int) -> None:
        self.device.reg_write(addr, reg)

    def dla_reg_read(self, addr: int) -> int:
        return self.device.reg_read(addr)

    def dla_reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        self.device.reg_write_many(writes)

    def dla_reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None:
        self.device.reg_write_words(addresses, values)

    def dla_read_dma_address(self, task: TaskDesc, index: int, what: str = "address") -> int:
        entry = task.entry(index, what)
        return entry.iova + entry.offset

    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        entry = task.entry(index, what)
        return CpuAddress(entry.bo, entry.offset, entry.size)

    def dla_data_read(self, src: CpuAddress, size: int, offset: int) -> bytes:
        if size < 0 or offset < 0 or offset + size > src.size:
            raise DlaError(NvError.InvalidSize,
                           f"read of {size} bytes at offset {offset} of buffer {src.bo.handle}: "
                           f"only {src.size} bytes are there")
        start = src.offset + offset
        return bytes(src.bo.array[start:start + size])

    def dla_data_write(self, src: bytes, dst: CpuAddress, offset: int) -> None:
        if offset < 0 or offset + len(src) > dst.size:
            raise DlaError(NvError.InvalidSize,
                           f"write of {len(src)} bytes at offset {offset} of buffer {dst.bo.handle}: "
                           f"only {dst.size} bytes are there")
        start = dst.offset + offset
        dst.bo.array[start:start + len(src)] = memoryview(src)

    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        self.device.connect_irq(handler)

    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        self.device.disconnect_irq(handler)
