"""The Linux port's buffer objects (a part of :class:`~pydla.portability.linux.LinuxPort`): memory this
process creates (a memfd), maps, and hands to the daemon, which takes its own reference (BO_CREATE);
freed with BO_DESTROY. Also the check every other part makes of a buffer it is given, and the uAPI
address array a task's address list becomes.

Usage (inside the Linux port)::

    mem, view = port.buffers.get_mem(device, 4096)
    addresses = port.buffers.address_array(device, [(mem, 0)], "NvDlaSubmit task 0")
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.portability.interface import NvDlaHeap, NvDlaMemHandle, check_free_args, memory_handle_error
from pydla.portability.linux_device import LinuxDevice, LinuxMem
from pydla.uapi.shm import SharedBuffer


class LinuxBuffers:
    """The buffers of one port's open device files (each file keeps its own in ``device.mems``)."""

    def __init__(self, port: object) -> None:
        self.port = port  # whose buffers these are (NvDlaMemGetSize answers only for them)

    def get_mem(self, device: LinuxDevice, size: int, heap: NvDlaHeap = NvDlaHeap.DRAM,
                flags: int = 0) -> tuple[NvDlaMemHandle, npt.NDArray[np.uint8]]:
        """NvDlaGetMem on an open ``device``."""
        if heap != NvDlaHeap.DRAM:
            raise DlaError(NvError.NotSupported, f"NvDlaGetMem: heap {NvDlaHeap(heap).name}: only DRAM")
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise DlaError(NvError.BadParameter, f"NvDlaGetMem: size {size!r} must be a positive integer")
        try:
            shared = SharedBuffer(size, name="pydla-bo")
        except (OSError, ValueError) as e:
            raise DlaError(NvError.InsufficientMemory, f"NvDlaGetMem: {size} bytes of shared memory: {e}") \
                from None
        try:
            bo = device.ioctl(U.dla_ioctl_e.BO_CREATE, U.dla_bo_create_t(size=size, fd=shared.fd))
        except BaseException:
            shared.close()
            raise
        shared.close_fd()  # the daemon holds its own reference; we keep the mapping
        assert shared.mapping is not None
        mem = LinuxMem(device, bo.handle, size, bo.iova, shared.mapping)
        with device.lock:
            device.mems[bo.handle] = mem
        return mem, mem.bytes_view()

    @staticmethod
    def mem(device: LinuxDevice, mem: NvDlaMemHandle, what: str) -> LinuxMem:
        """``mem`` as a live buffer of ``device``, else the interface's memory-handle error."""
        if not isinstance(mem, LinuxMem) or mem.device is not device or mem.handle not in device.mems:
            raise memory_handle_error(what, freed=isinstance(mem, LinuxMem) and mem.device is device)
        return mem

    def get_size(self, mem: NvDlaMemHandle) -> int:
        """NvDlaMemGetSize: the size of a buffer of one of this port's open device files, not freed;
        else 0."""
        if not isinstance(mem, LinuxMem) or not mem.mapped:
            return 0
        device = mem.device
        live = device.port is self.port and device.fd >= 0 and device.mems.get(mem.handle) is mem
        return mem.size if live else 0

    def free_mem(self, device: LinuxDevice, mem: NvDlaMemHandle, pData: Any = None,  # noqa: N803 (the API's name)
                 size: int | None = None) -> None:
        """NvDlaFreeMem on an open ``device``."""
        m = self.mem(device, mem, "NvDlaFreeMem")
        check_free_args(m, pData, size)
        device.ioctl(U.dla_ioctl_e.BO_DESTROY, U.dla_bo_destroy_t(handle=m.handle))
        with device.lock:
            device.mems.pop(m.handle, None)
        m.unmap()

    def address_array(self, device: LinuxDevice, entries: list[Any], what: str) -> Any:
        """The uAPI's array of dla_address_t for a task's address list (each entry checked)."""
        addresses = (U.dla_address_t * len(entries))()
        for j, entry in enumerate(entries):
            where = f"{what} address {j}"
            if not isinstance(entry, tuple) or len(entry) not in (2, 3):
                raise DlaError(NvError.BadParameter, f"{where}: (mem, offset) or (mem, offset, size), "
                                                     f"not {entry!r}")
            mem = self.mem(device, entry[0], where)
            size = entry[2] if len(entry) == 3 else 0
            if len(entry) == 3 and size == 0:  # 0 would mean "to the end" in the uAPI
                raise DlaError(NvError.BadParameter, f"{where}: size 0")
            for value, field_name in ((entry[1], "offset"), (size, "size")):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
                    raise DlaError(NvError.BadParameter, f"{where}: {field_name} {value!r}")
            addresses[j] = U.dla_address_t(handle=mem.handle, offset=entry[1], size=size)
        return addresses
