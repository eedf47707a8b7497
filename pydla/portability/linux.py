"""The Linux portability layer: the UMD talks to the KMD daemon (``pydla kmd``) with open(2), real
ioctl(2) calls on its device files, and mmap(2) of the buffer objects it creates.

The port is the same interface as the in-process one (:class:`~pydla.portability.interface.NvDlaPort`);
application code does not change. ``path`` is the daemon's mount directory (``DIR``; instance N is
``DIR/dlaN``) or one device file. Opening a device makes a context in the daemon, checked by a
version handshake; its buffers are memfds this process creates and maps and the daemon takes a
reference to (BO_CREATE), its fences sync objects there. A prepared task's submit goes through a
submission ring the file shares with the daemon (memory both map and an eventfd each way, uAPI 2.4),
not an ioctl, unless ``ring=False`` or PYDLA_LINUX_RING=0; the ioctls remain for everything else and
as the fallback. Every failure is a DlaError: a refused ioctl carries the daemon's reason (LAST_ERROR);
a daemon that died gives NvError Disconnected, never a hang.

The port checks each handle it is given and hands the call to the part that has its concern, as a
Linux accel driver splits its files: the handles themselves (:mod:`~pydla.portability.linux_device`),
buffers (:mod:`~pydla.portability.linux_buffers`), sync objects and fence waits
(:mod:`~pydla.portability.linux_syncs`), task submission (:mod:`~pydla.portability.linux_submit`, the
ring: :mod:`~pydla.portability.linux_ring`), compute units (:mod:`~pydla.portability.linux_cu`, uAPI 2.5)
and traces (:mod:`~pydla.portability.linux_trace`, 2.8).

Usage::

    rt = pydla.createRuntime(port="linux", path="/run/pydla")
    sess = pydla.Session("model.onnx", port="linux:/run/pydla")
    # or: PYDLA_PORT=linux:/run/pydla python app.py
"""

from __future__ import annotations

import contextlib
import os
import threading
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CuDesc
from pydla.portability.interface import (
    NvDlaDeviceInfo,
    NvDlaEngineSelect,
    NvDlaFence,
    NvDlaHeap,
    NvDlaMemHandle,
    NvDlaPort,
    NvDlaPreparedTask,
    NvDlaTask,
    NvDlaTaskStatus,
    NvDlaTrace,
)
from pydla.portability.linux_buffers import LinuxBuffers
from pydla.portability.linux_cu import LinuxComputeUnits
from pydla.portability.linux_device import (
    LinuxDevice,
    LinuxMem,
    LinuxSemaphore,
    checked_device,
    names_a_device_file,
)
from pydla.portability.linux_submit import LinuxSubmitter
from pydla.portability.linux_syncs import WAIT_SLICE_MS, LinuxSyncs, checked_fence
from pydla.portability.linux_trace import LinuxTraces

__all__ = ["WAIT_SLICE_MS", "LinuxDevice", "LinuxMem", "LinuxPort", "LinuxSemaphore"]


class LinuxPort(NvDlaPort):
    """See the module docstring. Its parts: ``buffers``, ``syncs``, ``submitter``, ``cu``, ``traces``."""

    def __init__(self, path: str | os.PathLike[str], *, ring: bool | None = None) -> None:
        self.path = Path(path)
        self.use_ring = os.environ.get("PYDLA_LINUX_RING", "1") != "0" if ring is None else bool(ring)
        self.first: str | None
        if names_a_device_file(self.path):
            self.directory, self.first = self.path.parent, self.path.name
        else:  # a directory the daemon serves (or should: a missing one is named as given)
            self.directory, self.first = self.path, None
        probe = LinuxDevice(self, 0, self._device_path(0))
        try:
            self.instances = probe.param(U.dla_param_e.NUM_DEVICES)
        finally:
            probe.close()
        self._lock = threading.Lock()
        self._devices: list[LinuxDevice] = []
        self._info: dict[int, NvDlaDeviceInfo] = {}  # by instance: a daemon's devices do not change

    # Its parts, each made on first use (a test may build a port by hand). They hold nothing but
    # their port, so two threads that race to make one make equal ones.

    @cached_property
    def buffers(self) -> LinuxBuffers:
        return LinuxBuffers(self)

    @cached_property
    def syncs(self) -> LinuxSyncs:
        return LinuxSyncs(self)

    @cached_property
    def submitter(self) -> LinuxSubmitter:
        return LinuxSubmitter(self)

    @cached_property
    def cu(self) -> LinuxComputeUnits:
        return LinuxComputeUnits(self)

    @cached_property
    def traces(self) -> LinuxTraces:
        return LinuxTraces()

    def _device_path(self, select: int) -> Path:
        if self.first is not None and select == 0:
            return self.directory / self.first
        return self.directory / f"dla{select}"

    def close(self) -> None:
        with self._lock:
            devices, self._devices = list(self._devices), []
        for d in devices:
            d.close()

    def __enter__(self) -> LinuxPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _device(self, h: Any) -> LinuxDevice:
        return checked_device(self, h)

    def _fence(self, fence: NvDlaFence) -> tuple[LinuxDevice, Any]:
        return checked_fence(self, fence)

    def _select(self, select: NvDlaEngineSelect | int, what: str) -> int:
        if not isinstance(select, int) or not 0 <= select < self.instances:
            raise DlaError(NvError.DeviceNotFound, f"{what}: device {select!r}; the daemon serves "
                                                   f"{self.instances} (0..{self.instances - 1})")
        return int(select)

    def probe(self, select: NvDlaEngineSelect | int, what: str) -> LinuxDevice:
        """A device file of instance ``select`` opened for a question (the caller closes it)."""
        select = self._select(select, what)
        return LinuxDevice(self, select, self._device_path(select))

    def compute_units(self, select: int) -> tuple[CuDesc, ...]:
        """Device instance ``select``'s IP_LAYOUT as its KMD in the daemon has it
        (:meth:`LinuxComputeUnits.compute_units`)."""
        return self.cu.compute_units(select)

    # -- the NVDLA portability layer's functions: devices --------------------------------------------

    def NvDlaGetMaxDevices(self) -> int:
        return self.instances

    def NvDlaGetDeviceInfo(self, select: NvDlaEngineSelect | int) -> NvDlaDeviceInfo:
        """As the interface's: the daemon's answers to GET_PARAM, asked once per instance (when the
        port first opens it, or through a device file opened for the question)."""
        select = self._select(select, "NvDlaGetDeviceInfo")
        with self._lock:
            info = self._info.get(select)
        if info is None:
            probe = self.probe(select, "NvDlaGetDeviceInfo")
            try:
                info = self._learn(probe)
            finally:
                probe.close()
        return info

    def _learn(self, device: LinuxDevice) -> NvDlaDeviceInfo:
        info = device.info()
        with self._lock:
            return self._info.setdefault(device.select, info)

    def NvDlaOpen(self, select: NvDlaEngineSelect | int) -> LinuxDevice:
        device = self.probe(select, "NvDlaOpen")
        if device.select not in self._info:  # asked on this file, not on one more (a context of the daemon's)
            try:
                self._learn(device)
            except BaseException:
                device.close()
                raise
        with self._lock:
            self._devices.append(device)
        return device

    def NvDlaClose(self, h: Any) -> None:
        device = self._device(h)
        for cu in sorted(device.cu_contexts, key=str):  # released before this returns (names or indices)
            with contextlib.suppress(DlaError):  # the daemon releases it with the file anyway
                self.NvDlaCloseCuContext(device, cu)
        device.close()
        with self._lock:
            if device in self._devices:
                self._devices.remove(device)

    # -- buffers (LinuxBuffers) -------------------------------------------------------------------------

    def NvDlaGetMem(self, h: Any, size: int, heap: NvDlaHeap = NvDlaHeap.DRAM,
                    flags: int = 0) -> tuple[NvDlaMemHandle, npt.NDArray[np.uint8]]:
        return self.buffers.get_mem(self._device(h), size, heap, flags)

    def NvDlaMemGetSize(self, mem: NvDlaMemHandle) -> int:
        """As the interface's: the size of a buffer of one of this port's open device files, not
        freed; else 0."""
        return self.buffers.get_size(mem)

    def NvDlaFreeMem(self, h: Any, mem: NvDlaMemHandle, pData: Any = None,  # noqa: N803 (the API's name)
                     size: int | None = None) -> None:
        """As the interface's."""
        self.buffers.free_mem(self._device(h), mem, pData, size)

    # -- sync objects and fences (LinuxSyncs) -----------------------------------------------------------

    def NvDlaCreateSemaphore(self, h: Any, value: int = 0) -> LinuxSemaphore:
        return self.syncs.create_semaphore(self._device(h), value)

    def NvDlaDestroySemaphore(self, semaphore: Any) -> None:
        self.syncs.destroy_semaphore(semaphore)

    def NvDlaWaitFence(self, fence: NvDlaFence, timeout_ms: float) -> None:
        device, f = self._fence(fence)
        self.syncs.wait_fence(device, fence, f, timeout_ms)

    def NvDlaSignalFence(self, fence: NvDlaFence) -> None:
        device, f = self._fence(fence)
        self.syncs.signal_fence(device, fence, f)

    def NvDlaFailFence(self, fence: NvDlaFence, error: DlaError) -> None:
        device, f = self._fence(fence)
        self.syncs.fail_fence(device, f, error)

    def NvDlaGetSemaphoreValue(self, semaphore: Any) -> int:
        device, f = self._fence(NvDlaFence(semaphore, 0))
        return self.syncs.semaphore_value(device, f)

    # -- tasks (LinuxSubmitter) -------------------------------------------------------------------------

    def NvDlaSubmit(self, h: Any, tasks: list[NvDlaTask]) -> list[NvDlaTaskStatus]:
        return self.submitter.submit(self._device(h), tasks)

    def NvDlaPrepareTask(self, h: Any, task: NvDlaTask) -> NvDlaPreparedTask:
        """As the interface's; the daemon validates the task once and keeps it (PREPARE), so that a
        submit carries only its handle and fences (SUBMIT_PREPARED). A daemon older than uAPI 2.3
        gets the interface's default (a SUBMIT each time)."""
        return self.submitter.prepare_task(self._device(h), task)

    def NvDlaSubmitPrepared(self, h: Any, prepared: NvDlaPreparedTask, pre_fences: list[NvDlaFence],
                            post_fences: list[NvDlaFence], *, priority: int = 0,
                            timeout_ms: int | None = None) -> NvDlaTaskStatus:
        return self.submitter.submit_prepared(self._device(h), prepared, pre_fences, post_fences,
                                              priority=priority, timeout_ms=timeout_ms)

    def NvDlaReleaseTask(self, h: Any, prepared: NvDlaPreparedTask) -> None:
        self.submitter.release_task(h, prepared)

    # -- compute units (LinuxComputeUnits) --------------------------------------------------------------

    def NvDlaOpenCuContext(self, h: Any, cu: str, exclusive: bool) -> None:
        self.cu.open_context(self._device(h), cu, exclusive)

    def NvDlaCloseCuContext(self, h: Any, cu: str) -> None:
        self.cu.close_context(self._device(h), cu)

    def NvDlaRegRead(self, h: Any, cu: str, offset: int) -> int:
        return self.cu.reg_read(self._device(h), cu, offset)

    def NvDlaRegWrite(self, h: Any, cu: str, offset: int, value: int) -> None:
        self.cu.reg_write(self._device(h), cu, offset, value)

    def NvDlaSubmitCu(self, h: Any, cu: str, args: list[Any], pre_fences: list[NvDlaFence],
                      post_fences: list[NvDlaFence], *, timeout_ms: int | None = None) -> NvDlaTaskStatus:
        """As the interface's: one CU_SUBMIT, the arguments in an array the daemon reads during the
        call, the fences (at most 4 each) in the struct."""
        return self.cu.submit(self._device(h), cu, args, pre_fences, post_fences, timeout_ms=timeout_ms)

    def NvDlaStreamWrite(self, h: Any, cu: str, data: bytes, timeout_ms: int) -> None:
        self.cu.stream_write(self._device(h), cu, data, timeout_ms)

    def NvDlaStreamRead(self, h: Any, cu: str, nbytes: int, timeout_ms: int) -> bytes:
        return self.cu.stream_read(self._device(h), cu, nbytes, timeout_ms)

    # -- traces (LinuxTraces) ---------------------------------------------------------------------------

    def NvDlaTraceStart(self, h: Any, size: int, mask: int) -> NvDlaTrace:
        return self.traces.start(self._device(h), size, mask)

    def NvDlaTraceRead(self, h: Any, trace: NvDlaTrace) -> bytes:
        return self.traces.read(self._device(h), trace)

    def NvDlaTraceStop(self, h: Any, trace: NvDlaTrace) -> bytes:
        return self.traces.stop(self._device(h), trace)
