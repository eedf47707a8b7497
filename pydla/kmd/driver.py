"""The kernel-mode driver: contexts, buffer objects, the job queue, timeouts and recovery.

One :class:`Kmd` drives one device through an :class:`~pydla.kmd.engine.Engine`. Clients open
contexts (each its own device address space), create buffer objects in them, and submit tasks
(address lists of their own buffers). Jobs from all contexts wait in one queue; the policy that
picks the next one is: highest priority first, then round-robin across contexts (the context after
the one served last), then submission order within a context.

Every job has a timeout. When it expires the driver checks for progress (the device's completed-
operation counter): while the device keeps completing operations the deadline is extended, up to
``MAX_EXTENSIONS`` times; otherwise the job is aborted, the blocks it used are reset through the
GLB reset register, and the job fails with NvError Timeout naming the operation that hung. The next
job then runs normally. A device error fails the job; an MMU fault also fails the other queued jobs
of the same context (the context is aborted), never another context's.

Usage::

    kmd = Kmd(VirtualDevice("full"))
    ctx = kmd.open_context()
    h = kmd.bo_create(ctx, 4096)
    job = kmd.submit(ctx, [AddressEntry(h)], timeout_ms=1000)
    job.wait(1000)
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.hw.memory import BufferObject
from pydla.kmd.engine import Engine, TaskRun
from pydla.kmd.graph import TaskGraph, load_task
from pydla.kmd.port import AddressEntry, ResolvedEntry, TaskDesc, VirtualDevicePort
from pydla.kmd.sync import TimelineSemaphore
from pydla.kmd.taskcache import TaskCache

Fence = tuple[TimelineSemaphore, int]  # (semaphore, value): NvDlaFence in the KMD
DEFAULT_TIMEOUT_MS = 10_000
MAX_EXTENSIONS = 10
MAX_ADDRESSES = 4096
MAX_PREPARED = 4096  # prepared jobs per context
QUEUED, RUNNING, COMPLETED, FAILED = "queued", "running", "completed", "failed"


@dataclass
class _Buffer:
    bo: BufferObject
    iova: int


@dataclass
class PreparedJob:
    """A task validated once (:meth:`Kmd.prepare`): its resolved address list and the KMD's own copy
    of its descriptors (the graph). Submitting it again skips nothing that could have changed: the
    graph is the KMD's copy, not the client's memory, and the job is dropped when a buffer it uses
    is destroyed."""

    prep_id: int
    handles: frozenset[int]
    addresses: list[ResolvedEntry]
    graph: TaskGraph


@dataclass
class Context:
    """A client's device context: its address space (ctx id), its buffer objects by handle, and
    its prepared jobs by id."""

    ctx: int
    buffers: dict[int, _Buffer] = field(default_factory=dict)
    next_handle: int = 1
    prepared: dict[int, PreparedJob] = field(default_factory=dict)
    next_prepared: int = 1


class Job:
    """A submitted task. ``wait`` returns when it completed and raises when it failed."""

    def __init__(self, kmd: Kmd, job_id: int, context: Context, task: TaskDesc, graph: TaskGraph,
                 priority: int, timeout_ms: int, pre_fences: list[Fence] | None = None,
                 post_fences: list[Fence] | None = None) -> None:
        self.kmd = kmd
        self.job_id = job_id
        self.context = context
        self.task = task
        self.graph = graph
        self.priority = priority
        self.timeout_ms = timeout_ms
        self.state = QUEUED
        self.error: DlaError | None = None
        self.run: TaskRun | None = None
        self.deadline = 0.0
        self.extensions = 0
        self.ops_seen = 0
        self.started_at = 0.0
        self.finished_at = 0.0
        self.pre_fences = list(pre_fences or [])
        self.post_fences = list(post_fences or [])
        self._done = False
        self._event: threading.Event | None = None  # made by a thread that waits (see _wait_step)
        self._listening = False  # the KMD listens to the pre-fences while the job is queued

    def _listen(self) -> None:
        if not self.pre_fences:
            return
        self._listening = True
        for sem, _ in self.pre_fences:
            sem.add_listener(self.kmd._wake)

    def _stop_listening(self) -> None:
        if self._listening:
            self._listening = False
            for sem, _ in self.pre_fences:
                sem.remove_listener(self.kmd._wake)

    @property
    def done(self) -> bool:
        return self._done

    def _wait_step(self, seconds: float) -> None:
        """Sleep until the job finishes or ``seconds`` pass. The event is made before ``done`` is
        looked at, and _finish sets ``done`` before it looks for the event: one of them sees the
        other, so a finish is never missed."""
        event = self._event
        if event is None:
            event = self._event = threading.Event()
        if not self._done:
            event.wait(seconds)

    def wait(self, timeout_ms: float | None = None) -> None:
        """Block until the job finishes: return if it completed, raise its error if it failed.
        NvError Timeout if ``timeout_ms`` passes first (the job itself goes on)."""
        self.kmd.wait_for(self, timeout_ms)
        if self.error is not None:
            raise self.error

    def _finish(self, error: DlaError | None) -> None:
        if self._listening:
            self._stop_listening()
        self.error = error
        self.state = FAILED if error else COMPLETED
        self.finished_at = time.monotonic()
        self._done = True  # before looking for a waiter's event (see _wait_step)
        event = self._event
        if event is not None:
            event.set()
        for sem, value in self.post_fences:
            if error is None:
                sem.signal(value)
            else:
                sem.fail(error)

    def __repr__(self) -> str:
        return f"Job({self.job_id}, ctx={self.context.ctx}, {self.state})"


class Kmd:
    """The driver of one device. See the module docstring."""

    def __init__(self, device: VirtualDevice, *, default_timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self.device = device
        self.config = device.config
        self.port = VirtualDevicePort(device)
        self.engine = Engine(self.port, device.config)
        self.tasks = TaskCache()
        self.engine.dla_engine_init()
        self.default_timeout_ms = default_timeout_ms
        self._lock = threading.RLock()
        self._contexts: dict[int, Context] = {}
        self._queues: dict[int, deque[Job]] = {}
        self._last_served: int | None = None
        self._running: Job | None = None
        self._next_job = 1
        self.history: deque[Job] = deque(maxlen=64)
        self.service_errors: deque[str] = deque(maxlen=64)
        self._submitting: list[TaskDesc] = []
        self._closed = False
        self._service: threading.Thread | None = None
        if device.mode == "threaded":
            # The ISR wakes no one: the interrupt's thread runs the bottom half (_irq_thread) and
            # wakes the service thread only when it cannot.
            self.port.connect_interrupt(self._irq_thread)  # after the engine's ISR
            self._service = threading.Thread(target=self._service_loop, daemon=True,
                                             name=f"pydla-kmd{device.instance}")
            self._service.start()

    # -- contexts and buffers --------------------------------------------------------------------

    def open_context(self) -> int:
        with self._lock:
            self._check_open()
            ctx = self.device.iommu.create_context()
            self._contexts[ctx] = Context(ctx)
            self._queues[ctx] = deque()
            return ctx

    def close_context(self, ctx: int) -> None:
        """Abort the context's jobs, free its buffers, and release its address space."""
        with self._lock:
            context = self._context(ctx)
            error = DlaError(NvError.InvalidState, f"context {ctx} was closed")
            for job in list(self._queues[ctx]):
                job._finish(error)
            self._queues[ctx].clear()
            running = self._running
            if running is not None and running.context is context and running.run is not None:
                self.engine.abort(running.run, error)
            self._poll_locked()
            for buf in context.buffers.values():
                self.device.memory.free(buf.bo)
            context.buffers.clear()
            del self._contexts[ctx]
            del self._queues[ctx]
            self.device.iommu.destroy_context(ctx)
            self.tasks.forget(ctx)

    def bo_create(self, ctx: int, size: int, *, fd: int | None = None) -> int:
        """A new buffer object of ``size`` bytes mapped into ``ctx``; returns its handle. With ``fd``
        its memory is that shared memory (a memfd another process maps too), whose descriptor the
        buffer object then owns, also when this fails."""
        with self._lock:
            try:
                context = self._context(ctx)
            except DlaError:
                if fd is not None:
                    os.close(fd)
                raise
            bo = self.device.memory.allocate(size, fd=fd)
            try:
                iova = self.device.iommu.map(ctx, bo)
            except DlaError:
                self.device.memory.free(bo)
                raise
            handle = context.next_handle
            context.next_handle += 1
            context.buffers[handle] = _Buffer(bo, iova)
            return handle

    def bo_destroy(self, ctx: int, handle: int) -> None:
        with self._lock:
            context = self._context(ctx)
            buf = self._buffer(context, handle)
            if self._in_use(context, buf):
                raise DlaError(NvError.Busy, f"buffer {handle} of context {ctx} is used by a queued "
                                             "or running job")
            self.device.iommu.unmap(ctx, buf.iova)
            self.device.memory.free(buf.bo)
            del context.buffers[handle]
            self.tasks.forget(ctx, handle)
            context.prepared = {k: p for k, p in context.prepared.items() if handle not in p.handles}

    def bo_array(self, ctx: int, handle: int) -> npt.NDArray[np.uint8]:
        """The buffer's bytes as a numpy array (the host's mapping of it)."""
        with self._lock:
            return self._buffer(self._context(ctx), handle).bo.array

    def bo_iova(self, ctx: int, handle: int) -> int:
        with self._lock:
            return self._buffer(self._context(ctx), handle).iova

    def bo_size(self, ctx: int, handle: int) -> int:
        with self._lock:
            return self._buffer(self._context(ctx), handle).bo.size

    # -- jobs -------------------------------------------------------------------------------------

    def submit(self, ctx: int, addresses: list[AddressEntry], *, priority: int = 0,
               timeout_ms: int | None = None, pre_fences: list[Fence] | None = None,
               post_fences: list[Fence] | None = None) -> Job:
        """Validate the task whose network descriptor is ``addresses[0]`` and queue it. It starts
        once every pre-fence's semaphore reaches its value (a context's jobs start in order); on
        completion it signals its post-fences (on failure it fails them)."""
        timeout_ms = self._check_job_args(priority, timeout_ms)
        with self._lock:
            self._check_open()
            context = self._context(ctx)
            job_id = self._next_job
            self._next_job += 1
            task = TaskDesc(job_id, ctx, self._resolve(context, addresses, f"task {job_id}"))
            self._submitting.append(task)  # its buffers are in use while they are being checked
        try:
            # Copies and checks every descriptor (or reuses the graph of identical ones).
            graph = self.tasks.get(self.port, task, tuple(e.handle for e in addresses), self.config)
        finally:
            with self._lock:
                self._submitting.remove(task)
        with self._lock:
            return self._enqueue(context, task, graph, priority, timeout_ms, pre_fences, post_fences)

    def prepare(self, ctx: int, addresses: list[AddressEntry]) -> int:
        """Validate a task once and keep it (the KMD's copy of its descriptors, its resolved
        addresses); :meth:`submit_prepared` then queues it any number of times. Returns its id in
        ``ctx``. A prepared job is dropped when a buffer it uses is destroyed or its context closes."""
        with self._lock:
            self._check_open()
            context = self._context(ctx)
            if len(context.prepared) >= MAX_PREPARED:
                raise DlaError(NvError.ResourceError,
                               f"context {ctx} holds {MAX_PREPARED} prepared jobs: release some first")
            prep_id = context.next_prepared
            context.next_prepared += 1
            what = f"prepared task {prep_id}"
            task = TaskDesc(prep_id, ctx, self._resolve(context, addresses, what))
            self._submitting.append(task)
        try:
            graph = load_task(self.port, task, self.config)
        finally:
            with self._lock:
                self._submitting.remove(task)
        with self._lock:
            if self._contexts.get(ctx) is not context:
                raise DlaError(NvError.InvalidState, f"context {ctx} was closed")
            handles = frozenset(e.handle for e in addresses)
            if any(h not in context.buffers for h in handles):
                raise DlaError(NvError.InvalidState, f"{what}: a buffer it uses was destroyed meanwhile")
            context.prepared[prep_id] = PreparedJob(prep_id, handles, task.addresses, graph)
            return prep_id

    def submit_prepared(self, ctx: int, prep_id: int, *, priority: int = 0, timeout_ms: int | None = None,
                        pre_fences: list[Fence] | None = None, post_fences: list[Fence] | None = None) -> Job:
        """Queue prepared job ``prep_id`` of ``ctx`` (see :meth:`prepare`), as :meth:`submit` would."""
        timeout_ms = self._check_job_args(priority, timeout_ms)
        with self._lock:
            self._check_open()
            context = self._context(ctx)
            prepared = context.prepared.get(prep_id) if type(prep_id) is int else None
            if prepared is None:
                raise DlaError(NvError.BadParameter,
                               f"prepared task {prep_id!r} is not one of context {ctx}'s (never prepared, "
                               "released, or dropped when a buffer it uses was destroyed)")
            job_id = self._next_job
            self._next_job += 1
            task = TaskDesc(job_id, ctx, prepared.addresses)
            return self._enqueue(context, task, prepared.graph, priority, timeout_ms, pre_fences, post_fences)

    def prepared_ids(self, ctx: int) -> list[int]:
        """The ids of the prepared jobs ``ctx`` holds."""
        with self._lock:
            return list(self._context(ctx).prepared)

    def release_prepared(self, ctx: int, prep_id: int) -> None:
        """Forget prepared job ``prep_id`` (queued jobs made from it run on). Releasing one that is
        already gone is not an error."""
        with self._lock:
            self._context(ctx).prepared.pop(prep_id, None)

    def _check_job_args(self, priority: int, timeout_ms: int | None) -> int:
        timeout_ms = self.default_timeout_ms if timeout_ms is None else timeout_ms
        if not 0 < timeout_ms <= 3_600_000:
            raise DlaError(NvError.BadParameter, f"timeout_ms {timeout_ms} must be 1..3600000")
        if not 0 <= priority <= 255:
            raise DlaError(NvError.BadParameter, f"priority {priority} must be 0..255")
        return timeout_ms

    @staticmethod
    def _resolve(context: Context, addresses: list[AddressEntry], what: str) -> list[ResolvedEntry]:
        """Under the lock: each entry checked against its buffer, and resolved to it."""
        if not 0 < len(addresses) <= MAX_ADDRESSES:
            raise DlaError(NvError.BadParameter,
                           f"address list of {len(addresses)} entries: must hold 1..{MAX_ADDRESSES}")
        resolved = []
        for i, entry in enumerate(addresses):
            buf = context.buffers.get(entry.handle)
            if buf is None:
                raise DlaError(NvError.BadParameter,
                               f"{what}: address {i}: handle {entry.handle} is not a "
                               f"buffer of context {context.ctx}")
            for value, name in ((entry.offset, "offset"), (entry.size, "size")):
                if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                    raise DlaError(NvError.BadParameter,
                                   f"{what}: address {i}: {name} {value!r} is not an integer")
            if not 0 <= entry.offset < buf.bo.size:
                raise DlaError(NvError.BadParameter,
                               f"{what}: address {i}: offset {entry.offset} is outside "
                               f"buffer {entry.handle} ({buf.bo.size} bytes)")
            if entry.size is not None and not 0 < entry.size <= buf.bo.size - entry.offset:
                raise DlaError(NvError.InvalidSize,
                               f"{what}: address {i}: size {entry.size} at offset {entry.offset} "
                               f"is outside buffer {entry.handle} ({buf.bo.size} bytes)")
            resolved.append(ResolvedEntry(buf.bo, buf.iova, entry.offset, entry.size))
        return resolved

    def _enqueue(self, context: Context, task: TaskDesc, graph: TaskGraph, priority: int, timeout_ms: int,
                 pre_fences: list[Fence] | None, post_fences: list[Fence] | None) -> Job:
        """Under the lock: queue a validated task as a job, and start it if the device is idle."""
        self._check_open()
        ctx = context.ctx
        if self._contexts.get(ctx) is not context:
            raise DlaError(NvError.InvalidState, f"context {ctx} was closed")
        job = Job(self, task.task_id, context, task, graph, priority, timeout_ms, pre_fences, post_fences)
        job._listen()
        self._queues[ctx].append(job)
        if self._service is None and self.device.mode == "deterministic":
            self._poll_locked()
        elif self._service is not None and self._start_next():
            pass  # the device was idle: programmed from the caller, as a submit ioctl does
        else:
            self._wake()
        return job

    def poll(self) -> None:
        """Process device events, check timeouts, start the next job. Never blocks."""
        with self._lock:
            self._poll_locked()

    def wait_for(self, job: Job, timeout_ms: float | None) -> None:
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while not job.done:
            if self._service is None:
                self.poll()
                if job.done:
                    break
                nap = 0.001 if self.engine.pending_events() == 0 else 0.0
            else:
                nap = 0.05
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DlaError(NvError.Timeout,
                                   f"job {job.job_id} did not finish within {timeout_ms} ms "
                                   f"(it is {job.state})")
                nap = min(nap, left)
            if self._service is None:
                if nap:
                    time.sleep(nap)
            else:
                job._wait_step(nap)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            for ctx in list(self._contexts):
                self.close_context(ctx)
            self._closed = True
            self.port.disconnect_interrupt(self.engine.dla_isr_handler)
            if self._service is not None:
                self.port.disconnect_interrupt(self._irq_thread)
        self.engine.wake()
        if self._service is not None:
            self._service.join(timeout=5)

    @property
    def contexts(self) -> list[int]:
        with self._lock:
            return list(self._contexts)

    # -- internals --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DlaError(NvError.InvalidState, "the driver was closed")

    def _context(self, ctx: int) -> Context:
        context = self._contexts.get(ctx)
        if context is None:
            raise DlaError(NvError.BadParameter, f"context {ctx} is not open")
        return context

    @staticmethod
    def _buffer(context: Context, handle: int) -> _Buffer:
        buf = context.buffers.get(handle)
        if buf is None:
            raise DlaError(NvError.BadParameter, f"handle {handle} is not a buffer of context {context.ctx}")
        return buf

    def _in_use(self, context: Context, buf: _Buffer) -> bool:
        tasks = [job.task for job in self._queues[context.ctx]] + list(self._submitting)
        if self._running is not None and self._running.context is context:
            tasks.append(self._running.task)
        return any(e.bo is buf.bo for task in tasks for e in task.addresses)

    def _wake(self) -> None:
        self.engine.wake()

    def _poll_locked(self) -> None:
        engine = self.engine
        while True:
            engine.dla_process_events()
            if self._running is not None:
                self._check_timeout()
            started = self._running is None and self._start_next()
            if not started and engine.pending_events() == 0:
                return

    def _on_finish(self, run: TaskRun) -> None:
        job = self._running
        if job is None or job.run is not run:
            return
        self._running = None
        self.history.append(job)
        job._finish(run.error)
        if run.error is not None and run.error.code == NvError.InvalidAddress:
            abort = DlaError(NvError.InvalidState,
                             f"aborted: job {job.job_id} of context {job.context.ctx} caused an MMU fault")
            for queued in self._queues.get(job.context.ctx, ()):
                queued._finish(abort)
            if job.context.ctx in self._queues:
                self._queues[job.context.ctx].clear()

    def _pick(self) -> Job | None:
        """The next job to start: among the contexts whose first job may start (its pre-fences
        reached), the highest priority, then the context after the one served last."""
        best: list[int] = []
        top = -1
        for ctx, q in self._queues.items():
            if not q:
                continue
            head = q[0]
            if head.pre_fences:
                while q and any(sem.error is not None and not sem.reached(v) for sem, v in q[0].pre_fences):
                    # a head whose fence failed fails at once, never runs
                    failed = next(sem.error for sem, v in q[0].pre_fences if sem.error is not None)
                    assert failed is not None
                    q.popleft()._finish(DlaError(failed.code, f"a pre-fence failed: {failed.message}"))
                if not q or not all(sem.reached(v) for sem, v in q[0].pre_fences):
                    continue
                head = q[0]
            if head.priority > top:
                top, best = head.priority, [ctx]
            elif head.priority == top:
                best.append(ctx)
        if not best:
            return None
        if len(best) == 1:
            ctx = best[0]
        else:
            ctxs = sorted(best)
            last = self._last_served
            ctx = next((c for c in ctxs if last is not None and c > last), ctxs[0])
        self._last_served = ctx
        job = self._queues[ctx].popleft()
        if job._listening:
            job._stop_listening()
        return job

    def _start_next(self) -> bool:
        if self._running is not None:
            return False
        job = self._pick()
        if job is None:
            return False
        self._running = job
        job.state = RUNNING
        job.started_at = time.monotonic()
        job.deadline = job.started_at + job.timeout_ms / 1000
        job.ops_seen = self.port.dla_reg_read(R.GLB_OPS_DONE)
        try:
            job.run = self.engine.dla_execute_task(job.task, job.graph, self._on_finish)
        except DlaError as e:
            self._running = None
            job._finish(e)
        return True

    def _check_timeout(self) -> None:
        job = self._running
        if job is None or job.run is None or time.monotonic() < job.deadline:
            return
        ops = self.port.dla_reg_read(R.GLB_OPS_DONE)
        if ops != job.ops_seen and job.extensions < MAX_EXTENSIONS:
            job.ops_seen = ops
            job.extensions += 1
            job.deadline = time.monotonic() + job.timeout_ms / 1000
            return
        detail = self.engine.describe_stuck(job.run)
        blocks = ", ".join(b.name for b in job.graph.blocks)
        error = DlaError(NvError.Timeout,
                         f"task {job.job_id} timed out after {job.timeout_ms} ms"
                         f"{f' (+{job.extensions} extensions for progress)' if job.extensions else ''}: "
                         f"{detail}; blocks {blocks} were reset")
        self.engine.abort(job.run, error)

    def _irq_thread(self) -> None:
        """Threaded mode, after the ISR: the thread that raised the interrupt (a device block's) runs
        the bottom half itself when the driver is free, as a threaded interrupt handler does; this
        saves a thread handoff per job. It never waits for the driver: when another thread holds it,
        the service thread (woken by the ISR) does the work."""
        if not self._lock.acquire(blocking=False):
            self.engine.wake()  # the service thread does it
            return
        try:
            if not self._closed:
                self._poll_locked()
        except Exception as e:  # as in the service loop: the job fails, the driver goes on
            self._bottom_half_failed(e)
        finally:
            self._lock.release()

    def _bottom_half_failed(self, e: Exception) -> None:
        self.service_errors.append(f"{type(e).__name__}: {e}")
        job = self._running
        if job is not None and job.run is not None:
            self.engine.abort(job.run, DlaError(NvError.ResourceError,
                                                f"job {job.job_id} failed in the driver: {e}"))

    def _service_loop(self) -> None:
        """Threaded mode: the driver's bottom half, acting on events and watching deadlines."""
        while not self._closed:
            with self._lock:
                job = self._running
                wait = 0.05 if job is None else max(0.0, min(0.05, job.deadline - time.monotonic()))
            self.engine.wait_for_events(wait)
            if self._closed:
                return
            try:
                self.poll()
            except Exception as e:  # the bottom half must outlive any one job's failure
                self._bottom_half_failed(e)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "contexts": len(self._contexts),
                "queued": sum(len(q) for q in self._queues.values()),
                "running": self._running.job_id if self._running else None,
                "buffers": sum(len(c.buffers) for c in self._contexts.values()),
            }
