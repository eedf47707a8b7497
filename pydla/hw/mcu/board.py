"""What the microcontroller's firmware reaches of the device it sits in: the board.

The firmware (:mod:`pydla.hw.mcu.firmware`) is the same on every headed device; what it reaches of
the device differs by the device's register map: its KMD portability layer (the register bus, with
the interrupt bits routed to it), the IOMMU its tasks' addresses go through, the device's trace ring
and its log. :class:`DlaBoard` is pydla's own device (:class:`pydla.hw.device.VirtualDevice`, GLB
mcu_*); :class:`pydla.hw.mcu.nvdla.NvdlaBoard` is an NVDLA configuration's
(:class:`pydla.hw.nvdla_device.NvdlaDevice`, the nvdla_mcu window).

Usage::

    board = DlaBoard(VirtualDevice("full-headed"))
    firmware = Firmware(board, write)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pydla.hw.device_info import device_info
from pydla.hw.mcu.port import FirmwarePort

if TYPE_CHECKING:
    from pydla.firmware.interface import FirmwarePortability, KmdDeviceInfo
    from pydla.hw.device_view import McuHost
    from pydla.hw.memory import DeviceMemory, Iommu


class Board(Protocol):
    """What the firmware needs of its device (see the module docstring)."""

    @property
    def iommu(self) -> Iommu: ...

    @property
    def memory(self) -> DeviceMemory | None:
        """The device memory the firmware allocates its command buffers in (None: the device has no
        command processor the firmware submits to)."""

    def port(self, write: Callable[[int, int], None],
             connect: Callable[[Callable[[], object] | None], None]) -> FirmwarePortability:
        """The firmware's portability layer: ``write`` is the register bus's own write, ``connect``
        how the microcontroller's interrupt controller takes the firmware's ISR."""

    def info(self) -> KmdDeviceInfo:
        """The device as its firmware knows it."""

    def trace_mask(self) -> int:
        """The device's trace_class_e mask now (0: no trace ring)."""

    def trace_log(self, level: int, text: str) -> None:
        """A ``log`` event of the device's trace ring (when it writes one)."""

    def log(self, text: str) -> None:
        """A line of the device's own diagnostics (the firmware stopped, and why)."""


class DlaBoard:
    """pydla's own device (GLB mcu_*, intr_status bits shared with the host)."""

    def __init__(self, device: McuHost) -> None:
        self.device = device

    @property
    def iommu(self) -> Iommu:
        return self.device.iommu

    @property
    def memory(self) -> DeviceMemory | None:
        return self.device.memory

    def port(self, write: Callable[[int, int], None],
             connect: Callable[[Callable[[], object] | None], None]) -> FirmwarePortability:
        return FirmwarePort(self.device, write, connect)

    def info(self) -> KmdDeviceInfo:
        return device_info(self.device)

    def trace_mask(self) -> int:
        return int(self.device.trace_mask)

    def trace_log(self, level: int, text: str) -> None:
        self.device.trace_log(level, text)

    def log(self, text: str) -> None:
        self.device.log.append(text)
