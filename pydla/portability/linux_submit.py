"""The Linux port's task submission (a part of :class:`~pydla.portability.linux.LinuxPort`): SUBMIT with
its arrays in this process's memory (the daemon reads them during the call); prepared tasks, which the
daemon validates once and keeps (PREPARE, PREPARE_ARGS for a task's scalar arguments, uAPI 2.7,
PREPARE_NVDLA for an NVDLA Loadable's task with its firmware interface version, uAPI 2.10) and a
submit then names (SUBMIT_PREPARED, through the file's submission ring when it has one); and
RELEASE_PREPARED. A daemon older than uAPI 2.3 gets the portability interface's defaults (a SUBMIT
each time).

Usage (inside the Linux port)::

    prepared = port.submitter.prepare_task(device, NvDlaTask(addresses))
    port.submitter.submit_prepared(device, prepared, [], [fence])
"""

from __future__ import annotations

import ctypes
import errno
from typing import TYPE_CHECKING, Any, Protocol, cast

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.portability.interface import (
    NvDlaFence,
    NvDlaPort,
    NvDlaPreparedTask,
    NvDlaTask,
    NvDlaTaskStatus,
    check_prepared_submit,
    check_task,
)
from pydla.portability.linux_device import LinuxDevice, checked_device
from pydla.portability.linux_ring import TaskGone
from pydla.uapi.ioctl import INLINE_FENCES, MAX_ADDRESSES, MAX_FENCES, MAX_SCALARS

if TYPE_CHECKING:
    from pydla.portability.linux_buffers import LinuxBuffers
    from pydla.portability.linux_syncs import LinuxSyncs


class SubmitPort(Protocol):
    """What the submitter uses of its port (:class:`~pydla.portability.linux.LinuxPort`): its buffers
    and syncs parts, and its prepare, submit and release calls (a submit without preparing is the
    three in turn). The port is an NvDlaPort: for a daemon older than uAPI 2.3 the submitter calls
    the interface's own prepare, submit and release on it."""

    @property
    def buffers(self) -> LinuxBuffers: ...
    @property
    def syncs(self) -> LinuxSyncs: ...
    def NvDlaPrepareTask(self, h: Any, task: NvDlaTask) -> NvDlaPreparedTask: ...
    def NvDlaSubmitPrepared(self, h: Any, prepared: NvDlaPreparedTask, pre_fences: list[NvDlaFence],
                            post_fences: list[NvDlaFence], *, priority: int = 0,
                            timeout_ms: int | None = None) -> NvDlaTaskStatus: ...
    def NvDlaReleaseTask(self, h: Any, prepared: NvDlaPreparedTask) -> None: ...


class _LinuxPrepared:
    """The Linux port's handle to a prepared task: the daemon's id for it on one device file."""

    __slots__ = ("device", "prepared")

    def __init__(self, device: LinuxDevice, prepared: int) -> None:
        self.device, self.prepared = device, prepared


class LinuxSubmitter:
    """Submits one port's tasks; its buffers and syncs parts check what the tasks name."""

    def __init__(self, port: SubmitPort) -> None:
        self.port = port
        self.buffers, self.syncs = port.buffers, port.syncs

    def submit(self, device: LinuxDevice, tasks: list[NvDlaTask]) -> list[NvDlaTaskStatus]:
        """NvDlaSubmit on an open ``device``: one SUBMIT per task (a task with scalar arguments goes
        as a prepared task, which SUBMIT has no room for)."""
        statuses = []
        for i, task in enumerate(tasks):
            if task.scalars or task.nvdla_interface is not None:
                statuses.append(self._submit_with_scalars(device, task, f"NvDlaSubmit task {i}"))
                continue
            entries = task.address_list
            if not 0 < len(entries) <= MAX_ADDRESSES:
                raise DlaError(NvError.BadParameter, f"NvDlaSubmit task {i}: {len(entries)} addresses "
                                                     f"(1..{MAX_ADDRESSES})")
            if len(task.pre_fences) > MAX_FENCES or len(task.post_fences) > MAX_FENCES:
                raise DlaError(NvError.BadParameter,
                               f"NvDlaSubmit task {i}: at most {MAX_FENCES} fences each")
            addresses = self.buffers.address_array(device, entries, f"NvDlaSubmit task {i}")
            pre = self.syncs.fence_array(task.pre_fences)
            post = self.syncs.fence_array(task.post_fences)
            timeout = 0 if task.timeout_ms is None else int(task.timeout_ms)
            args = U.dla_submit_t(addresses=ctypes.addressof(addresses), pre_fences=ctypes.addressof(pre),
                                  post_fences=ctypes.addressof(post), num_addresses=len(entries),
                                  num_pre_fences=len(task.pre_fences), num_post_fences=len(task.post_fences),
                                  priority=task.priority, timeout_ms=timeout)
            done = device.ioctl(U.dla_ioctl_e.SUBMIT, args)  # the daemon reads the arrays during the call
            if done.completed:
                self.syncs.note_completed(task.post_fences)
            statuses.append(NvDlaTaskStatus(done.task_id, None))
        return statuses

    def _submit_with_scalars(self, device: LinuxDevice, task: NvDlaTask, what: str) -> NvDlaTaskStatus:
        """A task with scalar arguments, or an NVDLA task, goes as PREPARE_ARGS or PREPARE_NVDLA,
        SUBMIT_PREPARED, RELEASE_PREPARED (the job runs on after its prepared task is released): SUBMIT
        has no room for them."""
        kind = "an NVDLA task" if task.nvdla_interface is not None else "a task with scalar arguments"
        if len(task.pre_fences) > INLINE_FENCES or len(task.post_fences) > INLINE_FENCES:
            raise DlaError(NvError.BadParameter, f"{what}: {kind} takes at most {INLINE_FENCES} fences each "
                                                 "way on the Linux port")
        port = self.port  # its methods: a port made from this one (a test's) sees its own calls
        prepared = port.NvDlaPrepareTask(device, task)
        try:
            return port.NvDlaSubmitPrepared(device, prepared, task.pre_fences, task.post_fences,
                                            priority=task.priority, timeout_ms=task.timeout_ms)
        finally:
            port.NvDlaReleaseTask(device, prepared)

    def _prepare(self, device: LinuxDevice, task: NvDlaTask) -> int:
        """The daemon's id for ``task`` prepared on ``device`` (PREPARE, or PREPARE_ARGS)."""
        entries = task.address_list
        if not 0 < len(entries) <= MAX_ADDRESSES:
            raise DlaError(NvError.BadParameter, f"NvDlaPrepareTask: {len(entries)} addresses "
                                                 f"(1..{MAX_ADDRESSES})")
        if task.nvdla_interface is not None:
            device.needs((2, 10), "NvDlaPrepareTask",
                         "an NVDLA task (its firmware interface version) needs uAPI")
        addresses = self.buffers.address_array(device, entries, "NvDlaPrepareTask")
        if task.nvdla_interface is not None:
            return self._prepare_nvdla(device, task, addresses)
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

    def _prepare_nvdla(self, device: LinuxDevice, task: NvDlaTask, addresses: Any) -> int:
        """PREPARE_NVDLA: an NVDLA task and its firmware interface version (uAPI 2.10)."""
        version = task.nvdla_interface
        assert version is not None
        if task.scalars:
            raise DlaError(NvError.BadParameter, "NvDlaPrepareTask: an NVDLA task takes no scalar arguments")
        if len(version) != 3 or not all(isinstance(v, int) and 0 <= v <= 0xFF for v in version):
            raise DlaError(NvError.BadParameter, f"NvDlaPrepareTask: nvdla_interface {version!r}: must be "
                                                 "three integers 0..255 (major, minor, sub_minor)")
        args = U.dla_prepare_nvdla_t(addresses=ctypes.addressof(addresses),
                                     num_addresses=len(task.address_list),
                                     interface_major=version[0], interface_minor=version[1],
                                     interface_sub_minor=version[2])
        return int(device.ioctl(U.dla_ioctl_e.PREPARE_NVDLA, args).prepared)  # arrays: read during the call

    def prepare_task(self, device: LinuxDevice, task: NvDlaTask) -> NvDlaPreparedTask:
        """NvDlaPrepareTask on an open ``device`` (see the module)."""
        if device.daemon_version[:2] < (2, 3) and task.nvdla_interface is None:
            return NvDlaPort.NvDlaPrepareTask(cast(NvDlaPort, self.port), device, task)
        checked = check_task(task, "NvDlaPrepareTask")
        kept = NvDlaTask(list(checked.address_list), scalars=list(checked.scalars),
                         nvdla_interface=checked.nvdla_interface)
        return NvDlaPreparedTask(kept, _LinuxPrepared(device, self._prepare(device, kept)))

    def submit_prepared(self, device: LinuxDevice, prepared: NvDlaPreparedTask, pre_fences: list[NvDlaFence],
                        post_fences: list[NvDlaFence], *, priority: int = 0,
                        timeout_ms: int | None = None) -> NvDlaTaskStatus:
        """NvDlaSubmitPrepared on an open ``device``: through the ring when the file has one, else
        SUBMIT_PREPARED (see the module)."""
        check_prepared_submit(prepared, pre_fences, post_fences, priority, timeout_ms, "NvDlaSubmitPrepared")
        mine = prepared.handle
        if mine is None or len(pre_fences) > INLINE_FENCES or len(post_fences) > INLINE_FENCES:
            # prepared for an older daemon, or more fences than the struct carries: a SUBMIT
            return NvDlaPort.NvDlaSubmitPrepared(cast(NvDlaPort, self.port), device, prepared, pre_fences,
                                                 post_fences, priority=priority, timeout_ms=timeout_ms)
        if not isinstance(mine, _LinuxPrepared) or mine.device is not device:
            raise DlaError(NvError.BadParameter, "NvDlaSubmitPrepared: not a task this device prepared")
        if not -(1 << 31) <= priority < 1 << 31 or not 0 <= (timeout_ms or 0) < 1 << 32:
            raise DlaError(NvError.BadParameter, f"NvDlaSubmitPrepared: priority {priority} or timeout_ms "
                                                 f"{timeout_ms} out of range")
        args = U.dla_submit_prepared_t(prepared=mine.prepared, num_pre_fences=len(pre_fences),
                                       num_post_fences=len(post_fences), priority=priority,
                                       timeout_ms=0 if timeout_ms is None else int(timeout_ms))
        self.syncs.inline_fences(args, pre_fences, post_fences)
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
            self.syncs.note_completed(post_fences)
        return NvDlaTaskStatus(task_id, None)

    def release_task(self, h: Any, prepared: NvDlaPreparedTask) -> None:
        """NvDlaReleaseTask: idempotent; a task of a closed file is gone with it."""
        NvDlaPort.NvDlaReleaseTask(cast(NvDlaPort, self.port), h, prepared)  # checks what it was given
        mine = prepared.handle
        if isinstance(mine, _LinuxPrepared) and mine.device is h and mine.device.fd >= 0:
            checked_device(self.port, h).ioctl(U.dla_ioctl_e.RELEASE_PREPARED,
                                               U.dla_release_prepared_t(prepared=mine.prepared))
