"""The KMD portability layer over the virtual device, in the same process.

:class:`VirtualDevicePort` is the one place that holds both the device and the driver's view of it:
it is the port (what a kernel's bus glue and IOMMU/GEM services are to a real driver), so it calls
the device's register, interrupt, memory and IOMMU methods directly, and the driver
(:class:`pydla.kmd.driver.Kmd`) sees the device only through it (:class:`~pydla.kmd.port.KmdPortability`).
It belongs to the composition root (:mod:`pydla.platform`), the one place that builds device, port
and driver.

Usage::

    port = VirtualDevicePort(VirtualDevice("full"))
    kmd = Kmd(port)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CpuAddress, CuDesc, KmdDeviceInfo, TaskDesc
from pydla.hw.device import VirtualDevice
from pydla.hw.device_info import device_info
from pydla.hw.memory import BufferObject as DeviceBuffer
from pydla.hw.nvdla_device import NvdlaDevice
from pydla.kmd.bo import EMPTY, BufferObject
from pydla.kmd.port import KmdPortability


class VirtualDevicePort(KmdPortability):
    """The in-process implementation: direct calls into a :class:`VirtualDevice`, or an
    :class:`NvdlaDevice` (an NVDLA configuration: NVDLA's register map at the same calls)."""

    def __init__(self, device: VirtualDevice | NvdlaDevice) -> None:
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

    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        entry = task.entry(index, what)
        return CpuAddress(entry.bo, entry.offset, entry.size)

    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        self.device.connect_irq(handler)

    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        self.device.disconnect_irq(handler)

    def dla_get_device_info(self) -> KmdDeviceInfo:
        return device_info(self.device)

    def dla_cu_stream_write(self, cu: CuDesc, data: bytes, timeout_s: float) -> None:
        self.device.cu_stream_write(cu.name, data, timeout_s)

    def dla_cu_stream_read(self, cu: CuDesc, nbytes: int, timeout_s: float) -> bytes:
        return self.device.cu_stream_read(cu.name, nbytes, timeout_s)

    def dla_create_context(self) -> int:
        return self.device.iommu.create_context()

    def dla_destroy_context(self, ctx: int) -> None:
        self.device.iommu.destroy_context(ctx)

    def dla_alloc(self, size: int, fd: int | None = None) -> BufferObject:
        memory = self.device.memory.allocate(size, fd=fd)
        return BufferObject(memory.handle, memory.size, memory.array, memory)

    def dla_free(self, bo: BufferObject) -> None:
        self.device.memory.free(self._memory(bo))
        bo.array = EMPTY  # as the device's own buffer: its memory is no longer reached

    def dla_map(self, ctx: int, bo: BufferObject) -> int:
        return self.device.iommu.map(ctx, self._memory(bo))

    def dla_unmap(self, ctx: int, iova: int) -> None:
        self.device.iommu.unmap(ctx, iova)

    def _memory(self, bo: BufferObject) -> DeviceBuffer:
        """The device memory behind ``bo``, which this port's :meth:`dla_alloc` made."""
        memory = bo.memory
        if not isinstance(memory, DeviceBuffer):
            raise DlaError(NvError.BadParameter, f"buffer object {bo.handle} is not one of this port's")
        return memory
