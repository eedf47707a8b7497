"""The microcontroller of a headed NVDLA device (``nv_full-headed``, ``nv_small-headed``, ...).

NVDLA's headed implementation puts a microcontroller beside the accelerator: it runs the engine
scheduler (NVIDIA's firmware), takes NVDLA's interrupt and talks to the host. Here it is
:class:`pydla.hw.mcu.controller.Microcontroller` (the same firmware, mailbox and runs) sitting in an
:class:`pydla.hw.nvdla_device.NvdlaDevice` instead of pydla's own device:

- its registers are the nvdla_mcu window (``PYDLA_MCU_*`` at 0x20200, past NVDLA's map and the SMMU):
  the mailbox, the doorbell, STATUS (RUNNING, ATTACHED, STOPPED, the firmware's device-API major),
  RESET, and INTR_STATUS / INTR_MASK of the host's mailbox interrupt;
- NVDLA's interrupt line (GLB and the SMMU's fault) goes to the microcontroller only: the host's
  handlers (``connect_irq`` on the device) are called when the firmware posted in the mailbox
  (INTR_STATUS.MAILBOX, unless masked);
- the firmware's portability layer (:class:`NvdlaFirmwarePort`) is NVDLA's register bus as it is:
  every register is the firmware's (the host keeps none of NVDLA's), and the task memory is reached
  through the IOMMU in the task's context, as on pydla's headed device.

Usage::

    dev = NvdlaDevice("nv_full-headed")       # dev.mcu is this microcontroller
    kmd = Kmd(VirtualDevicePort(dev))         # the KMD's engine is the headed proxy
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import nvdla_mcu as M
from pydla.firmware.interface import CpuAddress, FirmwarePortability, KmdDeviceInfo, TaskDesc
from pydla.hw.device_info import device_info
from pydla.hw.mcu.board import Board
from pydla.hw.mcu.controller import Microcontroller
from pydla.hw.mcu.port import read_cpu_address

if TYPE_CHECKING:
    from types import ModuleType

    from pydla.hw.device_view import NvdlaMcuHost
    from pydla.hw.memory import Iommu

WORD = 0xFFFFFFFF
MAILBOX = 1  # INTR_STATUS / INTR_MASK bit 0
_MBOX = {M.PYDLA_MCU_MBOX_BASE_LO: 0, M.PYDLA_MCU_MBOX_BASE_HI: 1, M.PYDLA_MCU_MBOX_CTX: 2,
         M.PYDLA_MCU_MBOX_SIZE: 3}
WINDOW = frozenset((*_MBOX, M.PYDLA_MCU_DOORBELL, M.PYDLA_MCU_STATUS, M.PYDLA_MCU_RESET,
                    M.PYDLA_MCU_INTR_STATUS, M.PYDLA_MCU_INTR_MASK))


class NvdlaFirmwarePort(FirmwarePortability):
    """The firmware's KMD portability layer on an NVDLA device: NVDLA's register bus, unfiltered."""

    def __init__(self, read: Callable[[int], int], write: Callable[[int, int], None],
                 write_many: Callable[[Sequence[tuple[int, int]]], None],
                 write_words: Callable[[npt.NDArray[np.uint32], npt.NDArray[np.uint32]], None],
                 connect: Callable[[Callable[[], object] | None], None]) -> None:
        self._connect = connect
        self._write_many = write_many
        self.dla_reg_read = read  # type: ignore[method-assign,assignment]
        self.dla_reg_write = write  # type: ignore[method-assign,assignment]
        self.dla_reg_write_words = write_words  # type: ignore[method-assign,assignment]

    def dla_reg_write(self, addr: int, reg: int) -> None:  # (replaced by the bus's own in __init__)
        raise NotImplementedError

    def dla_reg_read(self, addr: int) -> int:  # (replaced by the bus's own in __init__)
        raise NotImplementedError

    def dla_reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        self._write_many(writes)

    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        return read_cpu_address(task, index, what)

    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        self._connect(handler)

    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        self._connect(None)


class NvdlaBoard:
    """What the firmware reaches of an NVDLA device (:class:`pydla.hw.mcu.board.Board`). The bus
    methods are the device's own, taken before the host's are wrapped."""

    def __init__(self, device: NvdlaMcuHost) -> None:
        self.device = device
        self._read, self._write_many = device.reg_read, device.reg_write_many
        self._write_words = device.reg_write_words

    @property
    def iommu(self) -> Iommu:
        return self.device.iommu

    @property
    def memory(self) -> None:
        """None: NVDLA's device has no command processor (each operation is programmed)."""
        return None

    def port(self, write: Callable[[int, int], None],
             connect: Callable[[Callable[[], object] | None], None]) -> FirmwarePortability:
        return NvdlaFirmwarePort(self._read, write, self._write_many, self._write_words, connect)

    def info(self) -> KmdDeviceInfo:
        return device_info(self.device)

    def trace_mask(self) -> int:
        return 0  # an NVDLA device writes no trace ring

    def trace_log(self, level: int, text: str) -> None:
        pass  # (no trace ring: the firmware keeps its log lines itself, Firmware.log)

    def log(self, text: str) -> None:
        self.device.errors.append(text)


class NvdlaMicrocontroller(Microcontroller):
    """See the module docstring. Made by :class:`~pydla.hw.nvdla_device.NvdlaDevice` when its
    configuration says ``headed``."""

    def __init__(self, device: NvdlaMcuHost, api: ModuleType | None = None) -> None:
        self._intr_status = self._intr_mask = 0
        self.bus_errors = 0  # values written to the window that are not 32-bit words
        self._bus_read = device.reg_read
        if api is None:
            super().__init__(cast(Any, device))
        else:
            super().__init__(cast(Any, device), api)

    @property
    def nvdla(self) -> NvdlaMcuHost:
        return cast("NvdlaMcuHost", self.device)

    def _board(self) -> Board:
        return NvdlaBoard(self.nvdla)

    def _wire_registers(self) -> None:
        """NVDLA's line to the controller; the window's registers are served by the host's wrapped
        accesses (:meth:`_wrap_host_writes`)."""
        self.nvdla.connect_irq(self._irq)

    def _wrap_host_writes(self) -> None:
        device = self.nvdla
        bus_read, bus_write, bus_write_many = self._bus_read, self._bus_write, device.reg_write_many

        def reg_read(address: int) -> int:
            if address in WINDOW:
                return self._window_read(address)
            return bus_read(address)

        def reg_write(address: int, value: int) -> None:
            if address in WINDOW:
                self._window_write(address, value)
            else:
                bus_write(address, value)
            self._run_if_due()

        def reg_write_many(writes: Sequence[tuple[int, int]]) -> None:
            for address, value in writes:
                if address in WINDOW:
                    self._window_write(address, value)
                else:
                    bus_write_many(((address, value),))
            self._run_if_due()

        device.reg_read = reg_read  # type: ignore[method-assign]
        device.reg_write = reg_write  # type: ignore[method-assign]
        device.reg_write_many = reg_write_many  # type: ignore[method-assign]

    def _run_if_due(self) -> None:
        if self._due:
            self._due = False
            self._serve()

    # -- the window ------------------------------------------------------------------------------

    def _window_read(self, address: int) -> int:
        if address in _MBOX:
            return self._mbox[_MBOX[address]]
        if address == M.PYDLA_MCU_STATUS:
            return self.status()
        if address == M.PYDLA_MCU_INTR_STATUS:
            return self._intr_status
        if address == M.PYDLA_MCU_INTR_MASK:
            return self._intr_mask
        return 0  # DOORBELL and RESET: write only

    def _window_write(self, address: int, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= WORD:
            self.bus_errors += 1
            self.nvdla.errors.append(f"mcu: write of {value!r} to {address:#x}: not a 32-bit value")
            return
        if address in _MBOX:
            self._mbox_write(_MBOX[address], value)
        elif address == M.PYDLA_MCU_DOORBELL:
            self._doorbell(value)
        elif address == M.PYDLA_MCU_RESET:
            self._reset_write(value)
        elif address == M.PYDLA_MCU_INTR_STATUS:
            with self._lock:
                self._intr_status &= ~value & MAILBOX
        elif address == M.PYDLA_MCU_INTR_MASK:
            with self._lock:
                self._intr_mask = value & MAILBOX
                raise_now = bool(self._intr_status & ~self._intr_mask)
            if raise_now:
                self._call_host()
        # STATUS: read only

    # -- interrupts ------------------------------------------------------------------------------

    def _irq(self) -> None:
        """NVDLA's line rose (or an operation ended with it up): the firmware's ISR takes it."""
        self._firmware_irq()

    def _post_mailbox_interrupt(self) -> None:
        with self._lock:
            self._intr_status |= MAILBOX
            raise_now = not self._intr_mask & MAILBOX
        if raise_now:
            self._call_host()

    def _call_host(self) -> None:
        for handler in self._host_handlers:
            handler()
