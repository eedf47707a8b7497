"""The in-process port: the portability layer as direct calls into KMDs in the same process.

Each port has its own devices and drivers (no global state): it is given them, as a
:class:`Drivers` (a :class:`pydla.platform.Platform`, from the composition root, which builds device
instance ``n`` with its KMD the first time the port opens it); :func:`pydla.platform.open_port`
builds one with its own. A handle from NvDlaOpen is a session: one KMD context, its memory, and the
tasks it submitted. Memory handles are numpy views of device memory (the host's mapping of the
buffer object). What a device can do is the KMD's answer (NvDlaGetDeviceInfo). The session and
its handles are :mod:`pydla.portability.inprocess_session`'s.

Usage::

    with InProcessPort(Platform("full"), owns_platform=True) as port:   # or open_port("inprocess")
        h = port.NvDlaOpen(0)
        mem, data = port.NvDlaGetMem(h, 4096)
        data[:4] = [1, 2, 3, 4]
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError, WaitTimeout
from pydla.kmd.cu import CuArg, CuBuffer
from pydla.kmd.driver import Job, Kmd
from pydla.kmd.port import AddressEntry
from pydla.kmd.sync import TimelineSemaphore
from pydla.kmd.trace import KmdTrace
from pydla.portability.inprocess_session import (
    InProcessMem,
    PreparedHandle,
    Session,
    SessionSemaphore,
    unit_name,
)
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
    check_cu_args,
    check_free_args,
    check_prepared_submit,
    check_task,
    memory_handle_error,
)

_U8 = np.dtype(np.uint8)


class ProbedDriver(Protocol):
    """A device instance as the port sees it: the driver bound to it."""

    @property
    def kmd(self) -> Kmd: ...


class Drivers(Protocol):
    """What the in-process port is given (:class:`pydla.platform.Platform` is one): the name of the
    machine's configuration, how many device instances it has, each instance's driver (built on
    first use), and how to close them."""

    @property
    def name(self) -> str: ...
    @property
    def instances(self) -> int: ...
    def probe(self, instance: int) -> ProbedDriver: ...
    def close(self) -> None: ...


__all__ = ["Drivers", "InProcessMem", "InProcessPort", "ProbedDriver", "Session"]


class InProcessPort(NvDlaPort):
    """See the module docstring."""

    def __init__(self, platform: Drivers, *, owns_platform: bool = False) -> None:
        """The devices of ``platform`` and their drivers; ``owns_platform``: the port closes it when it
        closes (it was built for this port alone)."""
        self._owns_platform = owns_platform
        self.platform = platform
        self._lock = threading.Lock()
        self._kmds: dict[int, Kmd] = {}  # the drivers of the instances this port opened
        self._polled: list[Kmd] = []  # ... of those whose devices progress only when polled
        self._sessions: list[Session] = []
        self._destroyed: weakref.WeakSet[TimelineSemaphore] = weakref.WeakSet()
        self._closed = False

    def __enter__(self) -> InProcessPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions)
        for s in sessions:
            self.NvDlaClose(s)
        if self._owns_platform:
            self.platform.close()

    def kmd_of(self, select: int) -> Kmd:
        with self._lock:
            if self._closed:
                raise DlaError(NvError.InvalidState, "the port was closed")
            kmd = self._kmds.get(select)
            if kmd is None:
                kmd = self._kmds[select] = self.platform.probe(select).kmd
                if kmd.info.mode != "threaded":
                    self._polled.append(kmd)
            return kmd

    def _select(self, select: NvDlaEngineSelect | int, what: str) -> int:
        n = self.platform.instances
        if not isinstance(select, int) or not 0 <= select < n:
            raise DlaError(NvError.DeviceNotFound,
                           f"{what}: device {select!r}; config '{self.platform.name}' has {n} (0..{n - 1})")
        return int(select)

    # -- the NVDLA portability layer's functions --------------------------------------------------------

    def NvDlaGetMaxDevices(self) -> int:
        return self.platform.instances

    def NvDlaGetDeviceInfo(self, select: NvDlaEngineSelect | int) -> NvDlaDeviceInfo:
        """As the interface's: what the device's KMD learnt of it when it probed it."""
        select = self._select(select, "NvDlaGetDeviceInfo")
        info = self.kmd_of(select).info
        return NvDlaDeviceInfo(select, self.platform.instances, info.name, info.hw_version, info.blocks,
                               info.precisions, info.memory_bytes,
                               tuple(cu.name for cu in info.compute_units),
                               compute_unit_arguments=tuple(cu.arguments for cu in info.compute_units),
                               engine_unit=next((cu.name for cu in info.compute_units if cu.engine), None))

    def NvDlaOpen(self, select: NvDlaEngineSelect | int) -> Session:
        select = self._select(select, "NvDlaOpen")
        session = Session(self, select, self.kmd_of(select))
        with self._lock:
            self._sessions.append(session)
        return session

    def _session(self, h: Any) -> Session:
        if not isinstance(h, Session) or h.port is not self:
            raise DlaError(NvError.BadParameter, "not a handle from this port's NvDlaOpen")
        if h.closed:
            raise DlaError(NvError.InvalidState, "the handle was closed (NvDlaClose)")
        return h

    def NvDlaClose(self, h: Any) -> None:
        session = self._session(h)
        for trace in list(session.traces):
            trace.stop()
        session.traces.clear()
        session.closed = True
        for m in session.mems.values():
            m.usable = False
        session.kmd.close_context(session.ctx)
        session.mems.clear()
        with self._lock:
            if session in self._sessions:
                self._sessions.remove(session)

    # -- the device's trace ring ------------------------------------------------------------------

    def NvDlaTraceStart(self, h: Any, size: int, mask: int) -> NvDlaTrace:
        session = self._session(h)
        trace = KmdTrace(session.kmd, size=size, mask=mask)
        session.traces.append(trace)
        return NvDlaTrace(trace, session.ctx)

    def _trace(self, h: Any, trace: Any, what: str) -> tuple[Session, KmdTrace]:
        session = self._session(h)
        mine = trace.handle if isinstance(trace, NvDlaTrace) else None
        if not isinstance(mine, KmdTrace) or mine not in session.traces:
            raise DlaError(NvError.BadParameter, f"{what}: not a trace this handle started: {trace!r:.60}")
        return session, mine

    def NvDlaTraceRead(self, h: Any, trace: NvDlaTrace) -> bytes:
        return self._trace(h, trace, "NvDlaTraceRead")[1].snapshot()

    def NvDlaTraceStop(self, h: Any, trace: NvDlaTrace) -> bytes:
        if isinstance(trace, NvDlaTrace) and isinstance(trace.handle, KmdTrace) and trace.handle.stopped:
            return trace.handle.stop()  # idempotent
        session, mine = self._trace(h, trace, "NvDlaTraceStop")
        session.traces.remove(mine)
        return mine.stop()

    # -- compute units: the KMD's CU contexts, registers and streams, for this handle's context ---

    def NvDlaOpenCuContext(self, h: Any, cu: str | int, exclusive: bool) -> None:
        session = self._session(h)
        unit = unit_name(session, cu, "NvDlaOpenCuContext")
        session.kmd.cu_open_context(session.ctx, unit, exclusive=exclusive)

    def NvDlaCloseCuContext(self, h: Any, cu: str | int) -> None:
        session = self._session(h)
        session.kmd.cu_close_context(session.ctx, unit_name(session, cu, "NvDlaCloseCuContext"))

    def NvDlaRegRead(self, h: Any, cu: str | int, offset: int) -> int:
        session = self._session(h)
        return session.kmd.cu_reg_read(session.ctx, unit_name(session, cu, "NvDlaRegRead"), offset)

    def NvDlaRegWrite(self, h: Any, cu: str | int, offset: int, value: int) -> None:
        session = self._session(h)
        session.kmd.cu_reg_write(session.ctx, unit_name(session, cu, "NvDlaRegWrite"), offset, value)

    def NvDlaSubmitCu(self, h: Any, cu: str | int, args: list[Any], pre_fences: list[NvDlaFence],
                      post_fences: list[NvDlaFence], *, timeout_ms: int | None = None) -> NvDlaTaskStatus:
        """As the interface's: the KMD's cu_submit, each buffer resolved to this session's handle."""
        session = self._session(h)
        what = f"NvDlaSubmitCu {cu!r:.70}"
        unit = unit_name(session, cu, what)
        words: list[CuArg] = []
        for i, arg in enumerate(check_cu_args(args, what)):
            if isinstance(arg, tuple):
                mem = self._mem(session, arg[0], f"{what} argument {i}")
                words.append(CuBuffer(mem.handle, arg[1], arg[2] if len(arg) == 3 else None))
            else:
                words.append(arg)
        for fences, name in ((pre_fences, "pre_fences"), (post_fences, "post_fences")):
            if not isinstance(fences, (list, tuple)):
                raise DlaError(NvError.BadParameter, f"{what}: {name} must be a list of NvDlaFence")
        ex = session.kmd.cu_submit(session.ctx, unit, words, timeout_ms=timeout_ms,
                                   pre_fences=[self._fence(f, session) for f in pre_fences],
                                   post_fences=[self._fence(f, session) for f in post_fences])
        return NvDlaTaskStatus(ex.exec_id, ex)

    def NvDlaStreamWrite(self, h: Any, cu: str | int, data: bytes, timeout_ms: int) -> None:
        session = self._session(h)
        unit = unit_name(session, cu, "NvDlaStreamWrite")
        session.kmd.cu_stream_write(session.ctx, unit, data, timeout_ms=timeout_ms)

    def NvDlaStreamRead(self, h: Any, cu: str | int, nbytes: int, timeout_ms: int) -> bytes:
        session = self._session(h)
        unit = unit_name(session, cu, "NvDlaStreamRead")
        return session.kmd.cu_stream_read(session.ctx, unit, nbytes, timeout_ms=timeout_ms)

    def NvDlaGetMem(self, h: Any, size: int, heap: NvDlaHeap = NvDlaHeap.DRAM,
                    flags: int = 0) -> tuple[NvDlaMemHandle, npt.NDArray[np.uint8]]:
        session = self._session(h)
        if heap != NvDlaHeap.DRAM:
            raise DlaError(NvError.NotSupported, f"NvDlaGetMem: heap {NvDlaHeap(heap).name}: only DRAM")
        handle = session.kmd.bo_create(session.ctx, size)
        mem = InProcessMem(session, handle)
        session.mems[handle] = mem
        return mem, mem.bytes_view()

    def _mem(self, session: Session, mem: NvDlaMemHandle, what: str) -> InProcessMem:
        if not isinstance(mem, InProcessMem) or mem.session is not session or mem.handle not in session.mems:
            raise memory_handle_error(what, freed=isinstance(mem, InProcessMem) and mem.session is session)
        return mem

    def NvDlaMemGetSize(self, mem: NvDlaMemHandle) -> int:
        """As the interface's: the size of a handle of one of this port's open sessions, not freed;
        else 0."""
        if not isinstance(mem, InProcessMem) or not mem.usable:
            return 0
        session = mem.session
        live = session.port is self and not session.closed and session.mems.get(mem.handle) is mem
        return mem.size if live else 0

    def NvDlaFreeMem(self, h: Any, mem: NvDlaMemHandle, pData: Any = None,  # noqa: N803 (the API's name)
                     size: int | None = None) -> None:
        """As the interface's."""
        session = self._session(h)
        m = self._mem(session, mem, "NvDlaFreeMem")
        check_free_args(m, pData, size)
        session.kmd.bo_destroy(session.ctx, m.handle)  # Busy while a job uses it: then still usable
        m.usable = False
        del session.mems[m.handle]

    # Reads and writes are the hot path of small transfers: the checks are done on plain types
    # first and anything unusual goes to the interface's general versions, which report problems.

    def NvDlaMemRead(self, mem: NvDlaMemHandle, offset: int, size: int) -> bytes:
        """As the interface's; the bytes are copied once, straight from the mapping."""
        if (type(mem) is InProcessMem and mem.usable
                and type(offset) is int and type(size) is int and 0 <= offset
                and 0 <= size <= mem.nbytes - offset):
            return mem.host_bytes[offset:offset + size].tobytes()
        return super().NvDlaMemRead(mem, offset, size)

    def NvDlaMemWrite(self, mem: NvDlaMemHandle, offset: int, src: Any, size: int | None = None) -> None:
        """As the interface's; byte sources are copied once, by memoryview assignment."""
        if (size is None and type(mem) is InProcessMem and mem.usable and type(offset) is int
                and 0 <= offset <= mem.nbytes):
            kind = type(src)
            try:
                if kind is np.ndarray:
                    if src.dtype is _U8:  # the assignment itself refuses other shapes
                        mem.host_bytes[offset:offset + src.size] = src
                        return
                    if src.flags.c_contiguous and not src.dtype.hasobject:
                        data = memoryview(src).cast("B")
                        mem.host_bytes[offset:offset + len(data)] = data
                        return
                elif kind is bytes or kind is bytearray:
                    mem.host_bytes[offset:offset + len(src)] = src
                    return
            except (ValueError, TypeError):
                pass  # the general version says what is wrong (a size, a shape)
        super().NvDlaMemWrite(mem, offset, src, size)

    def NvDlaCreateSemaphore(self, h: Any, value: int = 0) -> TimelineSemaphore:
        session = self._session(h)
        sem = SessionSemaphore(value, session)
        session.semaphores.add(sem)  # a session's tasks may use only its own fences
        return sem

    def _addresses(self, session: Session, task: NvDlaTask, task_name: str) -> list[AddressEntry]:
        addresses = []
        for j, entry in enumerate(task.address_list):
            what = f"{task_name} address {j}"
            if not isinstance(entry, tuple) or len(entry) not in (2, 3):
                raise DlaError(NvError.BadParameter, f"{what}: (mem, offset) or (mem, offset, size), "
                                                     f"not {entry!r}")
            size = entry[2] if len(entry) == 3 else None
            addresses.append(AddressEntry(self._mem(session, entry[0], what).handle, entry[1], size))
        return addresses

    def NvDlaSubmit(self, h: Any, tasks: list[NvDlaTask]) -> list[NvDlaTaskStatus]:
        session = self._session(h)
        statuses = []
        for i, task in enumerate(tasks):
            addresses = self._addresses(session, task, f"NvDlaSubmit task {i}")
            job = session.kmd.submit(session.ctx, addresses, priority=task.priority,
                                     timeout_ms=task.timeout_ms,
                                     pre_fences=[self._fence(f, session) for f in task.pre_fences],
                                     post_fences=[self._fence(f, session) for f in task.post_fences],
                                     scalars=task.scalars, nvdla_interface=task.nvdla_interface)
            statuses.append(NvDlaTaskStatus(job.job_id, job))
        return statuses

    def NvDlaPrepareTask(self, h: Any, task: NvDlaTask) -> NvDlaPreparedTask:
        """As the interface's; the KMD validates the task once and keeps its copy (a prepared job)."""
        session = self._session(h)
        checked = check_task(task, "NvDlaPrepareTask")
        kept = NvDlaTask(list(checked.address_list), scalars=list(checked.scalars),
                         nvdla_interface=checked.nvdla_interface)
        prep_id = session.kmd.prepare(session.ctx, self._addresses(session, kept, "NvDlaPrepareTask"),
                                      kept.scalars, nvdla_interface=kept.nvdla_interface)
        return NvDlaPreparedTask(kept, PreparedHandle(session, prep_id))

    def NvDlaSubmitPrepared(self, h: Any, prepared: NvDlaPreparedTask, pre_fences: list[NvDlaFence],
                            post_fences: list[NvDlaFence], *, priority: int = 0,
                            timeout_ms: int | None = None) -> NvDlaTaskStatus:
        session = self._session(h)
        check_prepared_submit(prepared, pre_fences, post_fences, priority, timeout_ms, "NvDlaSubmitPrepared")
        mine = prepared.handle
        if not isinstance(mine, PreparedHandle) or mine.session is not session:
            raise DlaError(NvError.BadParameter, "NvDlaSubmitPrepared: not a task this session prepared")
        fence = self._fence
        pre = [fence(f, session) for f in pre_fences] if pre_fences else []
        post = [fence(f, session) for f in post_fences] if post_fences else []
        kmd = session.kmd
        try:
            job = kmd.submit_prepared(session.ctx, mine.prep_id, priority=priority, timeout_ms=timeout_ms,
                                      pre_fences=pre, post_fences=post)
        except DlaError as e:
            if e.code != NvError.BadParameter or mine.prep_id in kmd.prepared_ids(session.ctx):
                raise
            # The KMD dropped it (a buffer it used was destroyed): prepare it again, which checks
            # every address anew and says what is wrong now.
            addresses = self._addresses(session, prepared.task, "NvDlaPrepareTask")
            mine.prep_id = kmd.prepare(session.ctx, addresses, prepared.task.scalars,
                                       nvdla_interface=prepared.task.nvdla_interface)
            job = kmd.submit_prepared(session.ctx, mine.prep_id, priority=priority, timeout_ms=timeout_ms,
                                      pre_fences=pre, post_fences=post)
        return NvDlaTaskStatus(job.job_id, job)

    def NvDlaReleaseTask(self, h: Any, prepared: NvDlaPreparedTask) -> None:
        session = self._session(h)
        super().NvDlaReleaseTask(h, prepared)  # checks what it was given
        mine = prepared.handle
        if isinstance(mine, PreparedHandle) and mine.session is session:
            session.kmd.release_prepared(session.ctx, mine.prep_id)

    def NvDlaDestroySemaphore(self, semaphore: Any) -> None:
        if not isinstance(semaphore, TimelineSemaphore):
            raise DlaError(NvError.BadParameter, "NvDlaDestroySemaphore: not from NvDlaCreateSemaphore")
        if isinstance(semaphore, SessionSemaphore):
            semaphore.destroyed = True
        with self._lock:
            sessions = list(self._sessions)
            self._destroyed.add(semaphore)
        for session in sessions:
            session.semaphores.discard(semaphore)

    def _fence(self, fence: NvDlaFence, session: Session | None = None) -> tuple[TimelineSemaphore, int]:
        if not isinstance(fence, NvDlaFence):
            raise DlaError(NvError.BadParameter, f"fence: an NvDlaFence, not {fence!r:.80}")
        sem = fence.semaphore
        if (type(sem) is SessionSemaphore and not sem.destroyed
                and (session is None or sem.session is session) and sem.session.port is self):
            return sem, fence.value  # the common case, checked on attributes
        if not isinstance(fence.semaphore, TimelineSemaphore):
            raise DlaError(NvError.BadParameter, "fence semaphore is not from NvDlaCreateSemaphore")
        if fence.semaphore in self._destroyed:
            raise DlaError(NvError.BadParameter,
                           f"fence: semaphore {fence.semaphore.sem_id} was destroyed")
        if session is not None and fence.semaphore not in session.semaphores:
            raise DlaError(NvError.BadParameter,
                           f"fence: semaphore {fence.semaphore.sem_id} is not one of this session's")
        return fence.semaphore, fence.value

    def NvDlaWaitFence(self, fence: NvDlaFence, timeout_ms: float) -> None:
        sem, value = self._fence(fence)
        deadline = time.monotonic() + timeout_ms / 1000
        while not sem.reached(value):
            if sem.error is not None:
                raise sem.error
            kmds = self._drive_polled()
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(NvError.Timeout, f"fence (semaphore {sem.sem_id}, value {value}) not "
                                                   f"reached within {timeout_ms} ms")
            # (not contextlib.suppress: three Python calls more per slice, on every threaded submit)
            try:  # noqa: SIM105
                sem.wait(value, min(left * 1000, 1.0) if kmds else left * 1000)
            except WaitTimeout:
                pass  # this slice's: the loop checks the whole wait's

    def NvDlaSignalFence(self, fence: NvDlaFence) -> None:
        sem, value = self._fence(fence)
        sem.signal(value)

    def NvDlaFailFence(self, fence: NvDlaFence, error: DlaError) -> None:
        sem, _ = self._fence(fence)
        sem.fail(error)

    def NvDlaGetSemaphoreValue(self, semaphore: Any) -> int:
        sem, _ = self._fence(NvDlaFence(semaphore, 0))
        self._drive_polled()  # a caller polling the value moves a deterministic device, as a wait does
        return sem.value

    def _drive_polled(self) -> list[Kmd]:
        """Deterministic and step devices progress only when their driver is polled: whoever waits or
        asks drives them. Threaded devices run on their own; polling them would only compete."""
        with self._lock:
            kmds = list(self._polled)
        for kmd in kmds:
            kmd.poll()  # its compute units' executions too
        return kmds

    def wait_task(self, status: NvDlaTaskStatus, timeout_ms: float) -> None:
        """Wait for one submitted task (raises its error)."""
        job = status.handle
        if not isinstance(job, Job):
            raise DlaError(NvError.BadParameter, "not a status from this port's NvDlaSubmit")
        job.wait(timeout_ms)
