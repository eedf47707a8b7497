"""The KMD portability layer over the virtual device, in the same process.

:class:`VirtualDevicePort` is the one place of the KMD that holds the device itself: it is the
port (what a kernel's bus glue and IOMMU/GEM services are to a real driver), so it calls the
device's register, interrupt, memory and IOMMU methods directly. Everything else in the KMD goes
through :class:`~pydla.kmd.port.KmdPortability`.

Usage::

    port = VirtualDevicePort(VirtualDevice("full"))
    kmd = Kmd(port)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CpuAddress, CuDesc, KmdDeviceInfo, TaskDesc
from pydla.hw.device import VirtualDevice
from pydla.hw.memory import BufferObject
from pydla.kmd.port import KmdPortability


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

    def dla_get_device_info(self) -> KmdDeviceInfo:
        dev, config = self.device, self.device.config
        return KmdDeviceInfo(dev.instance, dev.mode, config.name, config.hw_version, config.blocks,
                             config.precisions, config.memory_bytes, config.contexts,
                             config.max_bytes_per_op, config.max_kernel, config.max_stride,
                             tuple(CuDesc(cu.name, cu.m_ip_control[len("AP_CTRL_"):], cu.m_base_address,
                                          cu.window, bool(cu.m_int_enable), cu.m_interrupt_id,
                                          cu.pipeline_depth, cu.is_engine,
                                          cu.param("tile") if cu.model == "shave_tile" else None)
                                   for cu in config.ip_layout),
                             headed=bool(dev.reg_read(R.GLB_MCU_STATUS) & R.mcu_status_e.RUNNING))

    def dla_cu_stream_write(self, cu: CuDesc, data: bytes, timeout_s: float) -> None:
        self.device.cu_stream_write(cu.name, data, timeout_s)

    def dla_cu_stream_read(self, cu: CuDesc, nbytes: int, timeout_s: float) -> bytes:
        return self.device.cu_stream_read(cu.name, nbytes, timeout_s)

    def dla_create_context(self) -> int:
        return self.device.iommu.create_context()

    def dla_destroy_context(self, ctx: int) -> None:
        self.device.iommu.destroy_context(ctx)

    def dla_alloc(self, size: int, fd: int | None = None) -> BufferObject:
        return self.device.memory.allocate(size, fd=fd)

    def dla_free(self, bo: BufferObject) -> None:
        self.device.memory.free(bo)

    def dla_map(self, ctx: int, bo: BufferObject) -> int:
        return self.device.iommu.map(ctx, bo)

    def dla_unmap(self, ctx: int, iova: int) -> None:
        self.device.iommu.unmap(ctx, iova)
