"""The Linux portability layer: the UMD talks to the KMD daemon (``pydla kmd``) with open(2), real
ioctl(2) calls on its device files, and mmap(2) of the buffer objects it creates.

The port is the same interface as the in-process one (:class:`~pydla.portability.interface.NvDlaPort`);
application code does not change. ``path`` is the daemon's mount directory (``DIR``; instance N is
``DIR/dlaN``) or one device file. Opening a device makes a context in the daemon, checked by a
version handshake; its buffers are memfds this process creates and maps and the daemon takes a
reference to (BO_CREATE), its fences sync objects there. A prepared task's submit goes through a
submission ring the file shares with the daemon (memory both map and an eventfd each way, uAPI 2.4),
not an ioctl, unless ``ring=False`` or PYDLA_LINUX_RING=0; the ioctls remain for everything else and
as the fallback. Compute units (uAPI 2.5): :mod:`pydla.portability.linux_cu`.
Every failure is a DlaError: a refused ioctl carries the daemon's reason (LAST_ERROR); a daemon that
died gives NvError Disconnected, never a hang.

Usage::

    rt = pydla.createRuntime(port="linux", path="/run/pydla")
    sess = pydla.Session("model.onnx", port="linux:/run/pydla")
    # or: PYDLA_PORT=linux:/run/pydla python app.py
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla._version import __version__
from pydla.deviceapi.generated import dla_uapi as U
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.errors import DlaError, NvError, WaitTimeout
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
    check_free_args,
    check_prepared_submit,
    check_task,
    memory_handle_error,
)
from pydla.portability.linux_cu import LinuxCuMethods, query_compute_units
from pydla.portability.linux_ring import RING_WAIT_S, ClientRing, TaskGone
from pydla.portability.linux_trace import LinuxTraceMethods
from pydla.uapi.ioctl import (
    COMMANDS,
    INLINE_FENCES,
    MAX_ADDRESSES,
    MAX_FENCES,
    MAX_SCALARS,
    NVERROR,
    text,
    untext,
)
from pydla.uapi.shm import SharedBuffer

WAIT_SLICE_MS = 1000  # one WAIT ioctl waits at most this long, so a dead daemon is noticed


class LinuxSemaphore:
    """A sync object of the daemon, owned by one open device file."""

    def __init__(self, device: LinuxDevice, sync: int) -> None:
        self.device, self.sync = device, sync
        self.destroyed = False
        self.reached = -1  # a value known to be reached: waiting for it needs no WAIT

    def note_reached(self, value: int) -> None:
        """SUBMIT said so, or this port signalled it: a timeline only goes up."""
        self.reached = max(self.reached, value)


class _LinuxPrepared:
    """The Linux port's handle to a prepared task: the daemon's id for it on one device file."""

    __slots__ = ("device", "prepared")

    def __init__(self, device: LinuxDevice, prepared: int) -> None:
        self.device, self.prepared = device, prepared


class LinuxMem(NvDlaMemHandle):
    """A buffer object of the daemon, mapped into this process."""

    def __init__(self, device: LinuxDevice, handle: int, size: int, iova: int, mapping: mmap.mmap) -> None:
        self.device, self.handle = device, handle
        self._size, self._iova = size, iova
        self._map: mmap.mmap | None = mapping
        self._array: npt.NDArray[np.uint8] = np.frombuffer(mapping, dtype=np.uint8, count=size)

    @property
    def size(self) -> int:
        return self._size

    @property
    def device_address(self) -> int:
        return self._iova

    def bytes_view(self) -> npt.NDArray[np.uint8]:
        if self._map is None or self.device.fd < 0:
            raise DlaError(NvError.InvalidState,
                           f"memory handle {self.handle} was freed or its device closed")
        return self._array

    def _unmap(self) -> None:
        # numpy views keep the mapping exported; it is unmapped when the last of them goes.
        self._map = None
        self._array = np.zeros(0, dtype=np.uint8)


_STALE_ERRNOS = (errno.ENOTCONN, errno.ECONNABORTED)


def _names_a_device_file(path: Path) -> bool:
    """Whether ``path`` is a device file (an existing non-directory, or a missing dla0, dla1...)
    rather than the directory a daemon serves."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as e:
        if e.errno in _STALE_ERRNOS:
            raise _stale(path, path) from None
        return re.fullmatch(r"dla\d+", path.name) is not None


def _stale(path: Path, directory: Path) -> DlaError:
    return DlaError(NvError.Disconnected,
                    f"{path}: the KMD daemon serving {directory} is gone (a stale mount); "
                    f"`pydla kmd --mount {directory}` clears it and serves again")


def _open_error(path: Path, directory: Path, e: OSError) -> DlaError:
    """Why a device file did not open, and what to run about it."""
    if e.errno in _STALE_ERRNOS:
        return _stale(path, directory)
    code = NvError.DeviceNotFound if e.errno == errno.ENOENT else NvError.Disconnected
    return DlaError(code, f"{path}: {e.strerror} (is `pydla kmd --mount {directory}` running? "
                          f"`pydla devices` lists the daemons)")


class LinuxDevice:
    """An open device file: what NvDlaOpen returns."""

    def __init__(self, port: LinuxPort, select: int, path: Path) -> None:
        self.port, self.select, self.path = port, select, path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise _open_error(path, port.directory, e) from None
        self.mems: dict[int, LinuxMem] = {}
        # The compute-unit contexts this handle holds: closed by CU_CLOSE before the file, because
        # the daemon learns of a close(2) asynchronously (a FUSE release), after NvDlaClose returned.
        self.cu_contexts: set[str] = set()
        self._lock = threading.Lock()
        self._ring: ClientRing | None = None
        self._ring_tried = not port.use_ring
        try:
            self.daemon_version = self._handshake()
            self.daemon_pid = self.param(U.dla_param_e.DAEMON_PID)
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            raise

    def ioctl(self, nr: int, args: Any, *, again: tuple[int, ...] = (),
              codes: dict[int, NvError] = NVERROR) -> Any:
        """Issue command ``nr`` with ``args`` (its struct), which the daemon's answer overwrites.
        None when it failed with an errno in ``again`` (for the caller to repeat); another errno is
        a DlaError with the daemon's reason, its code from ``codes``."""
        if self.fd < 0:
            raise DlaError(NvError.InvalidState, f"{self.path}: the device was closed")
        buf = bytearray(bytes(args))
        name = U.dla_ioctl_e(nr).name
        try:
            fcntl.ioctl(self.fd, COMMANDS[nr], buf, True)
        except OSError as e:
            if e.errno in again:
                return None
            code = codes.get(e.errno or 0, NvError.IoctlFailed)
            if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                raise DlaError(NvError.Disconnected, f"{self.path}: {name}: the KMD daemon is gone "
                                                     f"({e.strerror})") from None
            reason = (self._last_error() if e.errno != errno.EINTR else "") or e.strerror or ""
            if not reason.startswith(name + ":"):
                reason = f"{name}: {reason}"
            raise DlaError(code, f"{self.path}: {reason}") from None
        return type(args).from_buffer_copy(buf)

    def _last_error(self) -> str:
        try:
            buf = bytearray(bytes(U.dla_get_param_t(param=U.dla_param_e.LAST_ERROR)))
            fcntl.ioctl(self.fd, COMMANDS[U.dla_ioctl_e.GET_PARAM], buf, True)
            return untext(bytes(U.dla_get_param_t.from_buffer_copy(buf).text))
        except OSError:
            return ""

    def param(self, which: int) -> int:
        return int(self.ioctl(U.dla_ioctl_e.GET_PARAM, U.dla_get_param_t(param=which)).value)

    def param_text(self, which: int) -> str:
        return untext(bytes(self.ioctl(U.dla_ioctl_e.GET_PARAM, U.dla_get_param_t(param=which)).text))

    def _handshake(self) -> tuple[int, int, int]:
        """Agree on the uAPI version; returns the daemon's."""
        mine = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                                 layout_hash64=U.LAYOUT_HASH64, package_version=text(__version__, 32))
        theirs = self.ioctl(U.dla_ioctl_e.HANDSHAKE, mine)
        version = (theirs.major, theirs.minor, theirs.patch)
        if theirs.major != U.VERSION[0] or (version == U.VERSION and theirs.layout_hash64 != U.LAYOUT_HASH64):
            ours = ".".join(map(str, U.VERSION))
            daemons = ".".join(map(str, version))
            raise DlaError(NvError.VersionMismatch,
                           f"{self.path}: uAPI {ours} (layout {U.LAYOUT_HASH64:016x}, pydla {__version__}) "
                           f"here, {daemons} (layout {theirs.layout_hash64:016x}, pydla "
                           f"{untext(bytes(theirs.package_version))}) in the daemon: run the same pydla on "
                           "both sides")
        return version

    def info(self) -> NvDlaDeviceInfo:
        """What the daemon reports of this file's device (GET_PARAM)."""
        p = U.dla_param_e
        block_mask = self.param(p.BLOCK_MASK)
        # PRECISION_MASK came with uAPI 2.2; an older daemon's device is taken to compute in every
        # precision (its KMD still refuses what its device lacks).
        precision_mask = self.param(p.PRECISION_MASK) if self.daemon_version[:2] >= (2, 2) else ~0
        units = query_compute_units(self)  # uAPI 2.5 (none from an older daemon); arguments 2.9
        return NvDlaDeviceInfo(
            self.param(p.DEVICE_INDEX), self.param(p.NUM_DEVICES), self.param_text(p.CONFIG_NAME),
            self.param(p.HW_VERSION), tuple(b for b in dla_block_e if block_mask >> int(b) & 1),
            tuple(q for q in dla_precision_e if precision_mask >> int(q) & 1), self.param(p.MEMORY_BYTES),
            tuple(cu.name for cu in units), tuple(cu.arguments for cu in units),
            next((cu.name for cu in units if cu.engine), None))

    def ring(self) -> ClientRing | None:
        """This file's submission ring, set up on first use; None without one (see the module)."""
        if not self._ring_tried:
            with self._lock:
                if not self._ring_tried and self.fd >= 0:
                    self._ring = ClientRing.open(self)
                    self._ring_tried = True
        ring = self._ring
        return None if ring is None or ring.broken else ring

    def close(self) -> None:
        with self._lock:
            if self.fd < 0:
                return
            fd, self.fd = self.fd, -1
            mems, self.mems = list(self.mems.values()), {}
            ring, self._ring, self._ring_tried = self._ring, None, True
        for m in mems:
            m._unmap()
        os.close(fd)  # the daemon aborts this context's jobs and frees its buffers
        if ring is not None:
            ring.close()


class LinuxPort(LinuxCuMethods, LinuxTraceMethods, NvDlaPort):
    """See the module docstring; the compute-unit methods (CU contexts, registers, streams, the
    IP_LAYOUT) are :class:`~pydla.portability.linux_cu.LinuxCuMethods`'."""

    def __init__(self, path: str | os.PathLike[str], *, ring: bool | None = None) -> None:
        self.path = Path(path)
        self.use_ring = os.environ.get("PYDLA_LINUX_RING", "1") != "0" if ring is None else bool(ring)
        self.first: str | None
        if _names_a_device_file(self.path):
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
        if not isinstance(h, LinuxDevice) or h.port is not self:
            raise DlaError(NvError.BadParameter, "not a handle from this port's NvDlaOpen")
        if h.fd < 0:
            raise DlaError(NvError.InvalidState, f"{h.path}: the device was closed")
        return h

    # -- the NVDLA portability layer's functions --------------------------------------------------------

    def NvDlaGetMaxDevices(self) -> int:
        return self.instances

    def _select(self, select: NvDlaEngineSelect | int, what: str) -> int:
        if not isinstance(select, int) or not 0 <= select < self.instances:
            raise DlaError(NvError.DeviceNotFound, f"{what}: device {select!r}; the daemon serves "
                                                   f"{self.instances} (0..{self.instances - 1})")
        return int(select)

    def NvDlaGetDeviceInfo(self, select: NvDlaEngineSelect | int) -> NvDlaDeviceInfo:
        """As the interface's: the daemon's answers to GET_PARAM, asked once per instance (when the
        port first opens it, or through a device file opened for the question)."""
        select = self._select(select, "NvDlaGetDeviceInfo")
        with self._lock:
            info = self._info.get(select)
        if info is None:
            probe = LinuxDevice(self, select, self._device_path(select))
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
        select = self._select(select, "NvDlaOpen")
        device = LinuxDevice(self, select, self._device_path(select))
        if select not in self._info:  # asked on this file, not on one more (a context of the daemon's)
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
        for cu in sorted(device.cu_contexts):  # released before this returns, as the interface says
            with contextlib.suppress(DlaError):  # the daemon releases it with the file anyway
                self.NvDlaCloseCuContext(device, cu)
        device.close()
        with self._lock:
            if device in self._devices:
                self._devices.remove(device)

    def NvDlaGetMem(self, h: Any, size: int, heap: NvDlaHeap = NvDlaHeap.DRAM,
                    flags: int = 0) -> tuple[NvDlaMemHandle, npt.NDArray[np.uint8]]:
        device = self._device(h)
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
        with device._lock:
            device.mems[bo.handle] = mem
        return mem, mem.bytes_view()

    def _mem(self, device: LinuxDevice, mem: NvDlaMemHandle, what: str) -> LinuxMem:
        if not isinstance(mem, LinuxMem) or mem.device is not device or mem.handle not in device.mems:
            raise memory_handle_error(what, freed=isinstance(mem, LinuxMem) and mem.device is device)
        return mem

    def NvDlaMemGetSize(self, mem: NvDlaMemHandle) -> int:
        """As the interface's: the size of a buffer of one of this port's open device files, not
        freed; else 0."""
        if not isinstance(mem, LinuxMem) or mem._map is None:
            return 0
        device = mem.device
        live = device.port is self and device.fd >= 0 and device.mems.get(mem.handle) is mem
        return mem.size if live else 0

    def NvDlaFreeMem(self, h: Any, mem: NvDlaMemHandle, pData: Any = None,  # noqa: N803 (the API's name)
                     size: int | None = None) -> None:
        """As the interface's."""
        device = self._device(h)
        m = self._mem(device, mem, "NvDlaFreeMem")
        check_free_args(m, pData, size)
        device.ioctl(U.dla_ioctl_e.BO_DESTROY, U.dla_bo_destroy_t(handle=m.handle))
        with device._lock:
            device.mems.pop(m.handle, None)
        m._unmap()

    def NvDlaCreateSemaphore(self, h: Any, value: int = 0) -> LinuxSemaphore:
        device = self._device(h)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
            raise DlaError(NvError.BadParameter, f"semaphore value {value!r} must be 0..2^64-1")
        created = device.ioctl(U.dla_ioctl_e.SYNC_CREATE, U.dla_sync_create_t(initial=value))
        return LinuxSemaphore(device, created.sync)

    def NvDlaDestroySemaphore(self, semaphore: Any) -> None:
        if not isinstance(semaphore, LinuxSemaphore) or semaphore.device.port is not self:
            raise DlaError(NvError.BadParameter, "NvDlaDestroySemaphore: not one of this port's semaphores")
        with semaphore.device._lock:
            if semaphore.destroyed or semaphore.device.fd < 0:
                return
            semaphore.destroyed = True
        semaphore.device.ioctl(U.dla_ioctl_e.SYNC_DESTROY, U.dla_sync_destroy_t(sync=semaphore.sync))

    def _inline_fences(self, args: Any, pre_fences: list[NvDlaFence], post_fences: list[NvDlaFence]) -> None:
        """Fill the fence arrays a struct carries inline (its counts are the caller's, checked)."""
        for j, f in enumerate(pre_fences):
            args.pre_fences[j] = self._fence(f)[1]
        for j, f in enumerate(post_fences):
            args.post_fences[j] = self._fence(f)[1]

    def _fence(self, fence: NvDlaFence) -> tuple[LinuxDevice, Any]:
        if not isinstance(fence, NvDlaFence):
            raise DlaError(NvError.BadParameter, f"fence: an NvDlaFence, not {fence!r:.80}")
        sem = fence.semaphore
        if not isinstance(sem, LinuxSemaphore) or sem.device.port is not self:
            raise DlaError(NvError.BadParameter, "fence: its semaphore is not one of this port's")
        if sem.destroyed:
            raise DlaError(NvError.BadParameter, f"fence: sync object {sem.sync} was destroyed")
        value = fence.value
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
            raise DlaError(NvError.BadParameter, f"fence value {fence.value!r} must be 0..2^64-1")
        return self._device(sem.device), U.dla_fence_t(sync=sem.sync, value=fence.value)

    def NvDlaSubmit(self, h: Any, tasks: list[NvDlaTask]) -> list[NvDlaTaskStatus]:
        device = self._device(h)
        statuses = []
        for i, task in enumerate(tasks):
            if task.scalars:
                statuses.append(self._submit_with_scalars(h, task, f"NvDlaSubmit task {i}"))
                continue
            entries = task.address_list
            if not 0 < len(entries) <= MAX_ADDRESSES:
                raise DlaError(NvError.BadParameter, f"NvDlaSubmit task {i}: {len(entries)} addresses "
                                                     f"(1..{MAX_ADDRESSES})")
            if len(task.pre_fences) > MAX_FENCES or len(task.post_fences) > MAX_FENCES:
                raise DlaError(NvError.BadParameter,
                               f"NvDlaSubmit task {i}: at most {MAX_FENCES} fences each")
            addresses = self._address_array(device, entries, f"NvDlaSubmit task {i}")
            pre = (U.dla_fence_t * max(1, len(task.pre_fences)))()
            for j, f in enumerate(task.pre_fences):
                pre[j] = self._fence(f)[1]
            post = (U.dla_fence_t * max(1, len(task.post_fences)))()
            for j, f in enumerate(task.post_fences):
                post[j] = self._fence(f)[1]
            timeout = 0 if task.timeout_ms is None else int(task.timeout_ms)
            args = U.dla_submit_t(addresses=ctypes.addressof(addresses), pre_fences=ctypes.addressof(pre),
                                  post_fences=ctypes.addressof(post), num_addresses=len(entries),
                                  num_pre_fences=len(task.pre_fences), num_post_fences=len(task.post_fences),
                                  priority=task.priority, timeout_ms=timeout)
            done = device.ioctl(U.dla_ioctl_e.SUBMIT, args)  # the daemon reads the arrays during the call
            if done.completed:
                for f in task.post_fences:
                    f.semaphore.note_reached(f.value)
            statuses.append(NvDlaTaskStatus(done.task_id, None))
        return statuses

    def _address_array(self, device: LinuxDevice, entries: list[Any], what: str) -> Any:
        """The uAPI's array of dla_address_t for a task's address list (each entry checked)."""
        addresses = (U.dla_address_t * len(entries))()
        for j, entry in enumerate(entries):
            where = f"{what} address {j}"
            if not isinstance(entry, tuple) or len(entry) not in (2, 3):
                raise DlaError(NvError.BadParameter, f"{where}: (mem, offset) or (mem, offset, size), "
                                                     f"not {entry!r}")
            mem = self._mem(device, entry[0], where)
            size = entry[2] if len(entry) == 3 else 0
            if len(entry) == 3 and size == 0:  # 0 would mean "to the end" in the uAPI
                raise DlaError(NvError.BadParameter, f"{where}: size 0")
            for value, field_name in ((entry[1], "offset"), (size, "size")):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
                    raise DlaError(NvError.BadParameter, f"{where}: {field_name} {value!r}")
            addresses[j] = U.dla_address_t(handle=mem.handle, offset=entry[1], size=size)
        return addresses

    def _submit_with_scalars(self, h: Any, task: NvDlaTask, what: str) -> NvDlaTaskStatus:
        """A task with scalar arguments goes as PREPARE_ARGS, SUBMIT_PREPARED, RELEASE_PREPARED (the
        job runs on after its prepared task is released): SUBMIT has no room for them."""
        if len(task.pre_fences) > INLINE_FENCES or len(task.post_fences) > INLINE_FENCES:
            raise DlaError(NvError.BadParameter, f"{what}: a task with scalar arguments takes at most "
                                                 f"{INLINE_FENCES} fences each way on the Linux port")
        prepared = self.NvDlaPrepareTask(h, task)
        try:
            return self.NvDlaSubmitPrepared(h, prepared, task.pre_fences, task.post_fences,
                                            priority=task.priority, timeout_ms=task.timeout_ms)
        finally:
            self.NvDlaReleaseTask(h, prepared)

    def _prepare(self, device: LinuxDevice, task: NvDlaTask) -> int:
        entries = task.address_list
        if not 0 < len(entries) <= MAX_ADDRESSES:
            raise DlaError(NvError.BadParameter, f"NvDlaPrepareTask: {len(entries)} addresses "
                                                 f"(1..{MAX_ADDRESSES})")
        addresses = self._address_array(device, entries, "NvDlaPrepareTask")
        if not task.scalars:
            args = U.dla_prepare_t(addresses=ctypes.addressof(addresses), num_addresses=len(entries))
            return int(device.ioctl(U.dla_ioctl_e.PREPARE, args).prepared)  # arrays: read during the call
        if device.daemon_version[:2] < (2, 7):
            have = ".".join(map(str, device.daemon_version))
            raise DlaError(NvError.NotSupported, f"NvDlaPrepareTask: the daemon speaks uAPI {have}; a task's "
                                                 "scalar arguments need 2.7 or newer: upgrade the daemon "
                                                 "(pydla kmd)")
        if len(task.scalars) > MAX_SCALARS:
            raise DlaError(NvError.BadParameter, f"NvDlaPrepareTask: {len(task.scalars)} scalar arguments "
                                                 f"(at most {MAX_SCALARS})")
        scalars = (U.dla_scalar_t * len(task.scalars))()
        for j, (argidx, value) in enumerate(task.scalars):
            if not 0 <= argidx < 1 << 32 or not -(1 << 63) <= value < 1 << 64:
                raise DlaError(NvError.BadParameter, f"NvDlaPrepareTask: scalar ({argidx}, {value}) does not "
                                                     "fit the uAPI's u32 argidx and 64-bit value")
            scalars[j] = U.dla_scalar_t(argidx=argidx, value=value & ((1 << 64) - 1))
        with_args = U.dla_prepare_args_t(addresses=ctypes.addressof(addresses),
                                         scalars=ctypes.addressof(scalars), num_addresses=len(entries),
                                         num_scalars=len(task.scalars))
        return int(device.ioctl(U.dla_ioctl_e.PREPARE_ARGS, with_args).prepared)

    def NvDlaPrepareTask(self, h: Any, task: NvDlaTask) -> NvDlaPreparedTask:
        """As the interface's; the daemon validates the task once and keeps it (PREPARE), so that a
        submit carries only its handle and fences (SUBMIT_PREPARED). A daemon older than uAPI 2.3
        gets the interface's default (a SUBMIT each time)."""
        device = self._device(h)
        if device.daemon_version[:2] < (2, 3):
            return super().NvDlaPrepareTask(h, task)
        checked = check_task(task, "NvDlaPrepareTask")
        kept = NvDlaTask(list(checked.address_list), scalars=list(checked.scalars))
        return NvDlaPreparedTask(kept, _LinuxPrepared(device, self._prepare(device, kept)))

    def NvDlaSubmitPrepared(self, h: Any, prepared: NvDlaPreparedTask, pre_fences: list[NvDlaFence],
                            post_fences: list[NvDlaFence], *, priority: int = 0,
                            timeout_ms: int | None = None) -> NvDlaTaskStatus:
        device = self._device(h)
        check_prepared_submit(prepared, pre_fences, post_fences, priority, timeout_ms, "NvDlaSubmitPrepared")
        mine = prepared.handle
        if mine is None or len(pre_fences) > INLINE_FENCES or len(post_fences) > INLINE_FENCES:
            # prepared for an older daemon, or more fences than the struct carries: a SUBMIT
            return super().NvDlaSubmitPrepared(h, prepared, pre_fences, post_fences, priority=priority,
                                               timeout_ms=timeout_ms)
        if not isinstance(mine, _LinuxPrepared) or mine.device is not device:
            raise DlaError(NvError.BadParameter, "NvDlaSubmitPrepared: not a task this device prepared")
        if not -(1 << 31) <= priority < 1 << 31 or not 0 <= (timeout_ms or 0) < 1 << 32:
            raise DlaError(NvError.BadParameter, f"NvDlaSubmitPrepared: priority {priority} or timeout_ms "
                                                 f"{timeout_ms} out of range")
        args = U.dla_submit_prepared_t(prepared=mine.prepared, num_pre_fences=len(pre_fences),
                                       num_post_fences=len(post_fences), priority=priority,
                                       timeout_ms=0 if timeout_ms is None else int(timeout_ms))
        self._inline_fences(args, pre_fences, post_fences)
        # The daemon may have dropped the task (a buffer it used was destroyed; TaskGone or ENOENT):
        # prepare it again, which checks every address anew and says what is wrong now.
        answer: tuple[int, int] | None = None
        ring = device.ring()
        if ring is not None:
            posts = [(f.semaphore, f.value) for f in post_fences]
            try:
                answer = ring.submit(args, posts)
            except TaskGone:
                mine.prepared = args.prepared = self._prepare(device, prepared.task)
                answer = ring.submit(args, posts)
        if answer is None:  # no ring, or it cannot take this one: the ioctl
            done = device.ioctl(U.dla_ioctl_e.SUBMIT_PREPARED, args, again=(errno.ENOENT,))
            if done is None:
                mine.prepared = args.prepared = self._prepare(device, prepared.task)
                done = device.ioctl(U.dla_ioctl_e.SUBMIT_PREPARED, args)
            answer = (done.task_id, done.completed)
        task_id, completed = answer
        if completed:
            for f in post_fences:
                f.semaphore.note_reached(f.value)
        return NvDlaTaskStatus(task_id, None)

    def NvDlaReleaseTask(self, h: Any, prepared: NvDlaPreparedTask) -> None:
        super().NvDlaReleaseTask(h, prepared)  # checks what it was given
        mine = prepared.handle
        if isinstance(mine, _LinuxPrepared) and mine.device is h and mine.device.fd >= 0:
            self._device(h).ioctl(U.dla_ioctl_e.RELEASE_PREPARED,
                                  U.dla_release_prepared_t(prepared=mine.prepared))

    def NvDlaWaitFence(self, fence: NvDlaFence, timeout_ms: float) -> None:
        device, f = self._fence(fence)
        if fence.semaphore.reached >= f.value:
            return  # already known to be reached
        ring = device.ring()
        if ring is not None and ring.wait_fence(fence.semaphore, f.value,
                                                min(RING_WAIT_S, timeout_ms / 1000)):
            return  # a ring job that signals it ended well
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            args = U.dla_wait_t(fence=f, timeout_ms=min(left_ms, WAIT_SLICE_MS))
            # EINTR: a signal reached this thread (its handler has run); EAGAIN: this file has as
            # many WAITs in progress as the daemon allows. Both: again, with the time that is left.
            done = device.ioctl(U.dla_ioctl_e.WAIT, args, again=(errno.EINTR, errno.EAGAIN))
            if done is None:
                if left_ms == 0:
                    raise WaitTimeout(NvError.Timeout, f"fence (sync {f.sync}, value {f.value}) not "
                                                       f"reached within {timeout_ms} ms")
                time.sleep(0.001)
                continue
            if done.status == 0:
                return
            if done.status == NvError.Timeout and not self._failed(device, f):
                if time.monotonic() < deadline:
                    continue  # the daemon bounds one WAIT (MAX_WAIT_MS); ours is longer
            elif done.status == NvError.Timeout:
                # The task that was to signal the fence failed with Timeout (the driver declared it
                # hung): its diagnosis, not a generic "not reached". This WAIT's answer may be its own
                # limit, reached as the hang was declared: the diagnosis is then in the next answer.
                failed = device.ioctl(U.dla_ioctl_e.WAIT, U.dla_wait_t(fence=f, timeout_ms=0),
                                      again=(errno.EINTR, errno.EAGAIN))
                if failed is not None and failed.status == NvError.Timeout:
                    done = failed
                raise DlaError(NvError.Timeout, untext(bytes(done.message)))
            known = done.status in NvError._value2member_map_
            code = NvError(done.status) if known else NvError.ResourceError
            if code == NvError.Timeout:
                raise WaitTimeout(code, f"fence (sync {f.sync}, value {f.value}) not reached within "
                                        f"{timeout_ms} ms")
            raise DlaError(code, untext(bytes(done.message)))

    @staticmethod
    def _failed(device: LinuxDevice, f: Any) -> bool:
        """Whether the daemon's sync object behind fence ``f`` failed (a WAIT answers NvError Timeout
        both when its own time ran out and when the task failed with Timeout)."""
        query = device.ioctl(U.dla_ioctl_e.SYNC_QUERY, U.dla_sync_query_t(sync=f.sync))
        return bool(query.status) and int(query.value) < int(f.value)

    def NvDlaSignalFence(self, fence: NvDlaFence) -> None:
        device, f = self._fence(fence)
        device.ioctl(U.dla_ioctl_e.SYNC_SIGNAL, U.dla_sync_signal_t(fence=f))
        fence.semaphore.note_reached(f.value)

    def NvDlaFailFence(self, fence: NvDlaFence, error: DlaError) -> None:
        device, f = self._fence(fence)
        device.ioctl(U.dla_ioctl_e.SYNC_SIGNAL, U.dla_sync_signal_t(fence=f, status=int(error.code),
                                                                    message=text(error.message, 192)))

    def NvDlaGetSemaphoreValue(self, semaphore: Any) -> int:
        device, f = self._fence(NvDlaFence(semaphore, 0))
        return int(device.ioctl(U.dla_ioctl_e.SYNC_QUERY, U.dla_sync_query_t(sync=f.sync)).value)
