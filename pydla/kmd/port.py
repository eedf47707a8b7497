"""The KMD portability layer: everything the KMD needs from the system (the NVDLA KMD's portability layer).

The engine scheduler (:mod:`pydla.firmware`) touches the device only through the functions of
:class:`~pydla.firmware.interface.FirmwarePortability`: register reads and writes, the DMA and CPU
addresses of the task's address-list entries, reads and writes of data, and the interrupt hookup.
:class:`KmdPortability` is that interface plus what the driver around the scheduler gets from its
system, as a kernel driver gets it from its OS: what the device is
(:meth:`KmdPortability.dla_get_device_info`, asked once at probe time), device address spaces (one
per context), buffer objects mapped into them, and compute-unit streams. The driver sees its device
only through it. :class:`~pydla.composition.virtual_port.VirtualDevicePort` implements it in-process
over the virtual device; a port to real MMIO or a remote device implements the same methods.

Usage::

    port: KmdPortability = VirtualDevicePort(VirtualDevice("full"))
    port.dla_reg_write(R.GLB_INTR_MASK, 0)
    ctx = port.dla_create_context()
    iova = port.dla_map(ctx, port.dla_alloc(4096))
"""

from __future__ import annotations

import abc

from pydla.deviceapi.task_layout import AddressEntry as AddressEntry  # the KMD takes the contract's entry
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CuDesc, FirmwarePortability, KmdDeviceInfo
from pydla.kmd.bo import BufferObject


class KmdPortability(FirmwarePortability):
    """What the KMD calls: the engine scheduler's functions and the system's; names and meaning as in
    the NVDLA KMD where it has them."""

    @abc.abstractmethod
    def dla_get_device_info(self) -> KmdDeviceInfo:
        """What the device is (asked once, when the driver probes it)."""

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
        whose descriptor the buffer object then owns (also when this fails). Its ``memory`` is the
        port's own, for this port's :meth:`dla_free` and :meth:`dla_map`."""

    @abc.abstractmethod
    def dla_free(self, bo: BufferObject) -> None:
        """Free a buffer object from :meth:`dla_alloc` (the device faults on it from then on; its
        ``array`` is empty)."""

    @abc.abstractmethod
    def dla_map(self, ctx: int, bo: BufferObject) -> int:
        """Map ``bo`` into address space ``ctx``; returns its device address there (IOVA)."""

    @abc.abstractmethod
    def dla_unmap(self, ctx: int, iova: int) -> None:
        """Remove the mapping at ``iova`` from address space ``ctx``."""
