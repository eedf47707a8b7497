"""The firmware's KMD portability layer: the device's local register bus and its memory.

The engine scheduler (:class:`pydla.firmware.engine.Engine`, the host KMD's own) runs on the
microcontroller behind this port exactly as it runs on the host behind the host's port
(:class:`pydla.kmd.port.KmdPortability`): registers are reached directly (the microcontroller sits
on the device's register bus), task memory through the IOMMU in the task's context (the address
list the firmware resolved itself), and the interrupt is the block interrupts, which are routed to
the microcontroller. The host keeps its own bits of GLB intr_status (the mailbox bit 28, the SHAVE
and compute-unit bits 29 and 30): this port shows and clears only the firmware's (block done and
error bits, the MMU fault bit 31).

Address spaces and buffer objects are the host KMD's business: the firmware's interface
(:class:`~pydla.firmware.interface.FirmwarePortability`) has none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CpuAddress, FirmwarePortability, TaskDesc
from pydla.hw.memory import BufferObject

if TYPE_CHECKING:
    from pydla.hw.device_view import McuHost

# GLB intr_status bits routed to the microcontroller: each block's done (0..11) and error (16..27)
# bits, the command processor's (12: the firmware rings its doorbell) and the MMU fault (31).
FIRMWARE_INTR_BITS = 0x1FFF | 0x0FFF << 16 | 1 << 31
_INTR_STATUS, _INTR_MASK = R.GLB_INTR_STATUS, R.GLB_INTR_MASK
# Stands for the memory of an address-list entry that is not mapped in the task's context.
UNMAPPED = BufferObject(0, 0)


class FirmwarePort(FirmwarePortability):
    """The KMD portability layer of the firmware (see the module docstring)."""

    def __init__(self, device: McuHost, write: Callable[[int, int], None],
                 connect: Callable[[Callable[[], object] | None], None]) -> None:
        """``write``: the register bus's write (the device's own, not the host's wrapped one);
        ``connect``: how the microcontroller's interrupt controller takes the firmware's ISR."""
        self.device = device
        self._write = write
        self._connect = connect
        self._read = device.reg_read
        # The hot paths (an operation's program, its enable) go straight to the bus.
        self.dla_reg_write_words = device.reg_write_words  # type: ignore[method-assign]
        self.dla_reg_write = self._reg_write  # type: ignore[method-assign]
        self.dla_reg_read = self._reg_read  # type: ignore[method-assign]

    def dla_reg_write(self, addr: int, reg: int) -> None:
        self._reg_write(addr, reg)

    def dla_reg_read(self, addr: int) -> int:
        return self._reg_read(addr)

    def dla_reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None:
        self.device.reg_write_words(addresses, values)

    def _reg_write(self, addr: int, reg: int) -> None:
        if addr == _INTR_STATUS:
            reg &= FIRMWARE_INTR_BITS  # write-1-to-clear: never the host's bits
        elif addr == _INTR_MASK:
            reg = (self._read(_INTR_MASK) & ~FIRMWARE_INTR_BITS) | (reg & FIRMWARE_INTR_BITS)
        self._write(addr, reg)

    def _reg_read(self, addr: int) -> int:
        value = self._read(addr)
        return value & FIRMWARE_INTR_BITS if addr == _INTR_STATUS else value

    def dla_reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        for addr, value in writes:
            self._reg_write(addr, value)

    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        return read_cpu_address(task, index, what)

    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        self._connect(handler)

    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        self._connect(None)


def read_cpu_address(task: TaskDesc, index: int, what: str) -> CpuAddress:
    """Entry ``index`` of a task's address list as the firmware resolved it; one that is not mapped
    in the task's context (:data:`UNMAPPED`) is refused (InvalidAddress)."""
    entry = task.entry(index, what)
    if entry.bo is UNMAPPED:
        raise DlaError(NvError.InvalidAddress,
                       f"task {task.task_id}: {what}: address-list entry {index} ({entry.iova:#x}, "
                       f"{entry.size} bytes) is not mapped in context {task.ctx}")
    return CpuAddress(entry.bo, entry.offset, entry.size)
