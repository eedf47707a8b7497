"""What the device's own parts see of a device: what a probe reads of it (:func:`pydla.hw.device_info.
device_info`), and what a microcontroller sits on (:mod:`pydla.hw.mcu`). Protocols, so that those
modules depend on this description rather than on the device modules that make them
(:class:`pydla.hw.device.VirtualDevice`, :class:`pydla.hw.nvdla_device.NvdlaDevice` answer them).

Usage: ``def device_info(device: ProbedDevice) -> KmdDeviceInfo``
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from pydla.hw.memory import DeviceMemory, Iommu
from pydla.target.config import DeviceConfig

# A GLB register a part adds to pydla's device: (read, write); a write returns its effect.
GlbRegister = tuple[Callable[[], int], Callable[[int], int]]


class ProbedDevice(Protocol):
    """What a driver's probe reads of a device: its configuration, instance and mode, whether a
    microcontroller runs its engine scheduler, and its registers."""

    @property
    def config(self) -> DeviceConfig: ...
    @property
    def instance(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def mcu(self) -> object | None: ...
    def reg_read(self, address: int, /) -> int: ...


class McuHost(ProbedDevice, Protocol):
    """pydla's own device as its microcontroller (:class:`pydla.hw.mcu.controller.Microcontroller`)
    sits on it: the register bus and interrupt hooks it wraps (settable), GLB's extra registers, the
    interrupt status it routes, the memory, the trace ring and the log its firmware writes."""

    reg_write: Callable[[int, int], None]
    reg_write_many: Callable[[Sequence[tuple[int, int]]], None]
    connect_irq: Callable[[Callable[[], object]], None]
    disconnect_irq: Callable[[Callable[[], object]], None]
    trace_log: Callable[[int, str], None]

    def reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None: ...
    @property
    def glb_extra(self) -> dict[int, GlbRegister]: ...
    @property
    def intr_status(self) -> int: ...
    @property
    def intr_mask(self) -> int: ...
    @property
    def trace_mask(self) -> int: ...
    @property
    def iommu(self) -> Iommu: ...
    @property
    def memory(self) -> DeviceMemory: ...
    @property
    def log(self) -> collections.deque[str]: ...


class NvdlaMcuHost(ProbedDevice, Protocol):
    """An NVDLA device as its microcontroller (:class:`pydla.hw.mcu.nvdla.NvdlaMicrocontroller`) sits
    on it: its register bus, its interrupt, its memory and its error log."""

    def reg_write(self, address: int, value: int, /) -> None: ...
    def reg_write_many(self, writes: Sequence[tuple[int, int]], /) -> None: ...
    def reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None: ...
    def connect_irq(self, handler: Callable[[], object], /) -> None: ...
    @property
    def iommu(self) -> Iommu: ...
    @property
    def errors(self) -> collections.deque[str]: ...
