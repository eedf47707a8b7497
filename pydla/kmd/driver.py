"""The kernel-mode driver of one device: it composes contexts, jobs and recovery.

One :class:`Kmd` drives one device through an :class:`~pydla.firmware.engine.Engine`. Clients open
contexts (each its own device address space), create buffer objects in them, and submit tasks
(address lists of their own buffers); see :mod:`pydla.kmd.context`. Jobs from all contexts wait in
one queue and start by priority, round-robin across contexts, then in order (:mod:`pydla.kmd.job`).
A watchdog declares a job hung when none of its operations completes within the driver's hang
timeout (``tdr_ms``, which a job's own timeout can only shorten) and runs the recovery ladder; a
device error fails the job, an MMU fault also the other queued jobs of its context, never another
context's (:mod:`pydla.kmd.recovery`).

The driver reaches its device only through its :class:`~pydla.kmd.port.KmdPortability`: registers
and the interrupt (through the engine), address spaces and buffer objects, and what the device is
(asked once, here: its instance, how it runs, its blocks and precisions).

Usage::

    kmd = Kmd(VirtualDevicePort(VirtualDevice("full")))   # built by pydla.platform.probe
    ctx = kmd.open_context()
    h = kmd.bo_create(ctx, 4096)
    job = kmd.submit(ctx, [AddressEntry(h)], timeout_ms=1000)
    job.wait(1000)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.firmware.engine_api import EngineApi, RunState
from pydla.firmware.graph import TaskGraph, load_task
from pydla.firmware.interface import MAX_ADDRESSES, TaskDesc
from pydla.kmd.context import (
    Buffer,
    Context,
    PreparedJob,
    buffer_of,
    check_not_banned,
    create_buffer,
    destroy_buffer,
    release_context,
    resolve,
)
from pydla.kmd.cu import check_scalars
from pydla.kmd.cu_api import KmdComputeUnits
from pydla.kmd.cu_sched import CuScheduler
from pydla.kmd.headed import make_engine
from pydla.kmd.job import (
    COMPLETED,
    DEFAULT_TIMEOUT_MS,
    FAILED,
    QUEUED,
    RUNNING,
    Fence,
    Job,
    JobQueues,
    check_job_args,
)
from pydla.kmd.lock import OwnedLock
from pydla.kmd.port import AddressEntry, KmdPortability
from pydla.kmd.recovery import (
    BAN_AFTER_HANGS,
    DEFAULT_TDR_MS,
    MAX_EXTENSIONS,
    Watchdog,
    abort_context,
    fail_running,
    mmu_fault_error,
)
from pydla.kmd.shave_run import ShaveEngine, ShaveRun, read_caps
from pydla.kmd.taskcache import TaskCache

__all__ = [
    "COMPLETED", "DEFAULT_TIMEOUT_MS", "FAILED", "MAX_ADDRESSES", "MAX_EXTENSIONS", "MAX_PREPARED", "QUEUED",
    "RUNNING", "Buffer", "Context", "Fence", "Job", "Kmd", "PreparedJob",
]

MAX_PREPARED = 4096  # prepared jobs per context
log = logging.getLogger("pydla.kmd")


class Kmd(KmdComputeUnits):
    """The driver of one device. See the module docstring; compute units: :mod:`pydla.kmd.cu_api`."""

    def __init__(self, port: KmdPortability, *,
                 default_timeout_ms: int = DEFAULT_TIMEOUT_MS, tdr_ms: int = DEFAULT_TDR_MS,
                 ban_after: int = BAN_AFTER_HANGS) -> None:
        """``tdr_ms``: how long a job may go without completing an operation before it is declared
        hung (a submitter's ``timeout_ms`` can only shorten it); ``ban_after``: how many hung jobs
        get a context banned."""
        self.port = port
        info = self.port.dla_get_device_info()
        if info.shave is None and info.nvdla is None:  # the SHAVE tiles, from their registers (shave_run)
            info = dataclasses.replace(info, shave=read_caps(self.port))
        self.info = info
        self.config = info  # what descriptors are validated against (its name, blocks, precisions)
        # Deterministic devices compute inside the register write that enables an operation: a
        # submit then polls at once (the job usually finished within it).
        self._polled_at_submit = info.mode == "deterministic"
        # The engine scheduler itself, or on a headed device the proxy to it (pydla.kmd.headed).
        self.engine: EngineApi = make_engine(self.port, info, rpc_timeout_ms=max(50, min(tdr_ms, 2000)))
        self.watchdog = Watchdog(self.engine, self.port, tdr_ms=tdr_ms, ban_after=ban_after)
        self.tasks = TaskCache()
        self.cus = CuScheduler(self.port, info, tdr_ms=tdr_ms, ban_after=ban_after,
                               default_timeout_ms=default_timeout_ms, reset_device=self._cu_device_reset)
        self.watchdog.on_device_reset = self.engine.on_device_reset = self.cus.device_was_reset
        self.engine.dla_engine_init()
        # SHAVE task lists run beside the engine, on the host in both modes (pydla.kmd.shave_run).
        self.shave = ShaveEngine(self.port, info.shave, wake=self.engine.wake)
        self.shave.dla = self.engine  # the DLA operations of a task beside its SHAVE list
        self.cus.share_tiles(self.shave.owners, self.poll)  # a tile's unit executions and lists take turns
        self.port.connect_interrupt(self.shave.isr)
        self.watchdog.shave = self.shave
        self.default_timeout_ms = default_timeout_ms
        # An interrupt may come back on a thread that is inside the driver (headed: a doorbell ran the
        # firmware; threaded: a SHAVE start the tile refuses at once raises it inside
        # dla_execute_task), and _irq_thread asks whether this thread holds the lock: those drivers'
        # lock records its owner. A deterministic headless driver has no _irq_thread: nothing asks,
        # and the bare RLock costs four Python calls less per job.
        self._owned_lock = OwnedLock() if info.headed or info.mode == "threaded" else None
        self._lock: OwnedLock | threading.RLock = self._owned_lock or threading.RLock()
        self._contexts: dict[int, Context] = {}
        self.queues = JobQueues()
        self._queues = self.queues.by_context  # the same dict: the driver appends to it directly
        # The jobs on the device, in order: the first runs, the others are programmed behind it
        # (the engine's pipeline depth: pydla.firmware.engine, "The engine as a compute unit").
        self._inflight: list[Job] = []
        # A SHAVE job picked while DLA tasks were in flight: it starts, alone, once they ended.
        self._held: Job | None = None
        self._next_job = 1
        self.history: deque[Job] = deque(maxlen=64)
        self.service_errors: deque[str] = deque(maxlen=64)
        self._submitting: list[TaskDesc] = []
        self._closed = False
        self._service: threading.Thread | None = None
        if info.mode == "threaded":
            # The ISR wakes no one: the interrupt's thread runs the bottom half (_irq_thread) and
            # wakes the service thread only when it cannot.
            if self.engine.bottom_half_on_irq:
                self.port.connect_interrupt(self._irq_thread)  # after the engine's ISR
            self._service = threading.Thread(target=self._service_loop, daemon=True,
                                             name=f"pydla-kmd{info.instance}")
            self._service.start()

    # -- contexts and buffers --------------------------------------------------------------------

    def open_context(self) -> int:
        with self._lock:
            self._check_open()
            ctx = self.port.dla_create_context()
            self._contexts[ctx] = Context(ctx)
            self._queues[ctx] = deque()
            log.debug("device %d: context %d opened (%d open)", self.info.instance, ctx, len(self._contexts))
            return ctx

    def close_context(self, ctx: int) -> None:
        """Abort the context's jobs, free its buffers, and release its address space."""
        with self._lock:
            context = self._context(ctx)
            error = DlaError(NvError.InvalidState, f"context {ctx} was closed")
            held = [self._held] if self._held is not None and self._held.context is context else []
            for job in held + list(self._queues[ctx]):
                job._finish(error)
            if held:
                self._held = None
                self.shave.unclaim(held[0].graph)
            self._queues[ctx].clear()
            for running in [j for j in self._inflight if j.context is context]:
                if running.run is not None:
                    self._engine_of(running.run).abort(running.run, error)
            self._poll_locked()
            self.shave.forget_context(ctx)
            self.cus.forget_context(context)
            self._cu_release(ctx)
            del self._contexts[ctx]
            del self._queues[ctx]
            release_context(self.port, context)
            self.tasks.forget(ctx)
            log.debug("device %d: context %d closed (%d open)", self.info.instance, ctx, len(self._contexts))

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
            return create_buffer(self.port, context, size, fd)

    def bo_destroy(self, ctx: int, handle: int) -> None:
        self._drive()  # a hung job's buffers are freed once the hang is declared, whoever asks
        with self._lock:
            context = self._context(ctx)
            buf = buffer_of(context, handle)
            if self._in_use(context, buf) or self.cus.busy_with(buf.bo):
                raise DlaError(NvError.Busy, f"buffer {handle} of context {ctx} is used by a queued "
                                             "or running job")
            destroy_buffer(self.port, context, handle)
            self.tasks.forget(ctx, handle)

    def bo_array(self, ctx: int, handle: int) -> npt.NDArray[np.uint8]:
        """The buffer's bytes as a numpy array (the host's mapping of it)."""
        with self._lock:
            return buffer_of(self._context(ctx), handle).bo.array

    def bo_iova(self, ctx: int, handle: int) -> int:
        with self._lock:
            return buffer_of(self._context(ctx), handle).iova

    def bo_size(self, ctx: int, handle: int) -> int:
        with self._lock:
            return buffer_of(self._context(ctx), handle).bo.size

    # -- jobs -------------------------------------------------------------------------------------

    def submit(self, ctx: int, addresses: list[AddressEntry], *, priority: int = 0,
               timeout_ms: int | None = None, pre_fences: list[Fence] | None = None,
               post_fences: list[Fence] | None = None, scalars: Sequence[tuple[int, int]] = (),
               nvdla_interface: tuple[int, int, int] | None = None) -> Job:
        """Validate the task whose network descriptor is ``addresses[0]`` and queue it. It starts
        once every pre-fence's semaphore reaches its value (a context's jobs start in order); on
        completion it signals its post-fences (on failure it fails them). ``scalars``: (argidx,
        value) integer arguments of the engine's compute unit (its argument registers while the task
        runs: XRT's scalar kernel arguments, such as the DPU opcode). ``nvdla_interface``: an NVDLA
        DLA task's firmware interface version (docs/development/nvdla/firmware.md, "pydla's submit
        contract")."""
        timeout_ms = check_job_args(priority, timeout_ms, self.default_timeout_ms)
        if self._inflight:  # (read unlocked: the hot path pays one attribute read)
            self._drive()  # a hang due by now is declared before this job queues behind it
        with self._lock:
            self._check_open()
            context = self._context(ctx)
            job_id = self._next_job
            self._next_job += 1
            checked = check_scalars(self.info, scalars, f"task {job_id}")
            task = TaskDesc(job_id, ctx, resolve(context, addresses, f"task {job_id}"), checked,
                            nvdla_interface)
            self._submitting.append(task)  # its buffers are in use while they are being checked
        try:
            # Copies and checks every descriptor (or reuses the graph of identical ones).
            graph = self.tasks.get(self.port, task, tuple(e.handle for e in addresses), self.config)
        finally:
            with self._lock:
                self._submitting.remove(task)
        with self._lock:
            return self._enqueue(context, task, graph, priority, timeout_ms, pre_fences, post_fences)

    def prepare(self, ctx: int, addresses: list[AddressEntry], scalars: Sequence[tuple[int, int]] = (),
                nvdla_interface: tuple[int, int, int] | None = None) -> int:
        """Validate a task once and keep it (the KMD's copy of its descriptors, its resolved
        addresses, its ``scalars`` as :meth:`submit` takes them); :meth:`submit_prepared` then queues
        it any number of times. Returns its id in ``ctx``. A prepared job is dropped when a buffer it
        uses is destroyed or its context closes."""
        with self._lock:
            self._check_open()
            context = self._context(ctx)
            if len(context.prepared) >= MAX_PREPARED:
                raise DlaError(NvError.ResourceError,
                               f"context {ctx} holds {MAX_PREPARED} prepared jobs: release some first")
            prep_id = context.next_prepared
            context.next_prepared += 1
            what = f"prepared task {prep_id}"
            checked = check_scalars(self.info, scalars, what)
            task = TaskDesc(prep_id, ctx, resolve(context, addresses, what), checked, nvdla_interface)
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
            context.prepared[prep_id] = PreparedJob(prep_id, handles, task.addresses, graph, task.scalars,
                                                    task.nvdla_interface)
            return prep_id

    def submit_prepared(self, ctx: int, prep_id: int, *, priority: int = 0, timeout_ms: int | None = None,
                        pre_fences: list[Fence] | None = None, post_fences: list[Fence] | None = None,
                        on_done: Callable[[Job], None] | None = None) -> Job:
        """Queue prepared job ``prep_id`` of ``ctx`` (see :meth:`prepare`), as :meth:`submit` would.
        ``on_done(job)`` is called once when the job ends (completed or failed; after its post-fences
        are signalled or failed), from the thread that ends it, possibly before this returns: it must
        be quick and must not call into the KMD."""
        timeout_ms = check_job_args(priority, timeout_ms, self.default_timeout_ms)
        if self._inflight:
            self._drive()  # as in submit
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
            task = TaskDesc(job_id, ctx, prepared.addresses, prepared.scalars, prepared.nvdla_interface)
            return self._enqueue(context, task, prepared.graph, priority, timeout_ms, pre_fences, post_fences,
                                 on_done)

    def prepared_ids(self, ctx: int) -> list[int]:
        """The ids of the prepared jobs ``ctx`` holds."""
        with self._lock:
            return list(self._context(ctx).prepared)

    def release_prepared(self, ctx: int, prep_id: int) -> None:
        """Forget prepared job ``prep_id`` (queued jobs made from it run on). Releasing one that is
        already gone is not an error."""
        with self._lock:
            self._context(ctx).prepared.pop(prep_id, None)

    def _enqueue(self, context: Context, task: TaskDesc, graph: TaskGraph, priority: int, timeout_ms: int,
                 pre_fences: list[Fence] | None, post_fences: list[Fence] | None,
                 on_done: Callable[[Job], None] | None = None) -> Job:
        """Under the lock: queue a validated task as a job, and start it if the device is idle."""
        self._check_open()
        ctx = context.ctx
        if self._contexts.get(ctx) is not context:
            raise DlaError(NvError.InvalidState, f"context {ctx} was closed")
        check_not_banned(context)
        job = Job(self, task.task_id, context, task, graph, priority, timeout_ms, pre_fences, post_fences)
        job.on_done = on_done
        job._listen()
        self._queues[ctx].append(job)
        if self._service is None and self._polled_at_submit:
            self._poll_locked()
        elif self._service is not None and self._start_next():
            pass  # the device was idle: programmed from the caller, as a submit ioctl does
        else:
            self._wake()
        return job

    def poll(self) -> None:
        """Process device events, check timeouts, start the next job; on a device that is not
        threaded, drive the compute units' executions too. Never blocks."""
        with self._lock:
            self._poll_locked()
        self.cus.poll()  # outside the driver's lock: a unit's recovery may take it (a device reset)

    def _drive(self) -> None:
        """Without a service thread, whoever calls in drives the driver, so a hang is declared for
        any caller a hung job could block, not only for its waiter (one that gave up just before the
        TDR left the job's buffers Busy for good). Deterministic: a full poll. Step mode (the owner
        steps the device and starts jobs): the raised events and the watchdogs, no job starts."""
        if self._service is not None:
            return  # threaded: the service thread watches the deadlines
        deterministic = self._polled_at_submit
        with self._lock:
            if self._closed:
                return
            self._poll_locked(start=deterministic)
        # outside the driver's lock, as in poll(): a unit's recovery may take it (a device reset)
        if deterministic:
            self.cus.poll()
        else:
            self.cus.check_deadlines()

    def wait_for(self, job: Job, timeout_ms: float | None) -> None:
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while not job.done:
            if self._service is None:
                self.poll()
                if job.done:
                    break
                nap = 0.001 if self.engine.pending_events() + self.shave.pending_events() == 0 else 0.0
            else:
                nap = 0.05
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DlaError(NvError.Timeout,
                                   f"job {job.job_id} did not finish within {timeout_ms} ms "
                                   f"(it is {job.state}; the driver declares a job hung when none of "
                                   f"its operations completes within {self.watchdog.window_ms(job)} ms)")
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
            self.port.disconnect_interrupt(self.shave.isr)
            if self._service is not None and self.engine.bottom_half_on_irq:
                self.port.disconnect_interrupt(self._irq_thread)
            self.engine.close()
        self.engine.wake()
        self.cus.close()
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

    def _in_use(self, context: Context, buf: Buffer) -> bool:
        tasks = [job.task for job in self._queues[context.ctx]] + list(self._submitting)
        tasks += [job.task for job in self._inflight if job.context is context]
        if self._held is not None and self._held.context is context:
            tasks.append(self._held.task)
        return any(e.bo is buf.bo for task in tasks for e in task.addresses)

    def _cu_device_reset(self, reset: Callable[[], None]) -> bool:
        """For the compute-unit scheduler: run ``reset`` (a device reset) if no DLA job runs."""
        with self._lock:
            if self._inflight or self._closed:
                return False
            reset()
            return True

    def _wake(self) -> None:
        self.engine.wake()

    @property
    def _running(self) -> Job | None:
        """The job that runs now: the first of those on the device."""
        return self._inflight[0] if self._inflight else None

    def _poll_locked(self, start: bool = True) -> None:
        """Take the device's events, run the watchdog over the running job and (``start``) start the
        next job, until nothing more happens."""
        engine, shave = self.engine, self.shave
        while True:
            engine.dla_process_events()
            if shave.irq_pending:  # (one attribute read on the DLA path)
                shave.dla_process_events()
            if self._inflight:
                running = self._inflight[0]
                self.watchdog.check(running, self._queues.get(running.context.ctx))
            started = start and self._start_next()
            if not started and engine.pending_events() == 0 and not shave.irq_pending:
                return

    def _on_finish(self, run: RunState) -> None:
        inflight = self._inflight
        if inflight and inflight[0].task is run.task:  # the usual case: the head ended
            job, head = inflight.pop(0), True
        else:
            found = [j for j in inflight if j.task is run.task]
            if not found:
                return
            job, head = found[0], False
            inflight.remove(job)
        self.history.append(job)
        job._finish(run.error)
        error = run.error
        if error is not None and (error.code == NvError.InvalidAddress or job.hung):
            # The context is guilty: its jobs behind this one may depend on it (the watchdog aborts
            # the queued ones of a hung job; those already programmed behind it are aborted here).
            why = (mmu_fault_error(job) if error.code == NvError.InvalidAddress else
                   DlaError(NvError.Timeout, f"aborted: task {job.job_id} of context {job.context.ctx} "
                                             "hung before it"))
            if error.code == NvError.InvalidAddress:
                abort_context(self._queues.get(job.context.ctx), why)
            behind = [j.run for j in self._inflight if j.context is job.context and j.run is not None]
            if behind and job.hung and not self._queues.get(job.context.ctx):
                self.watchdog.stats.context_aborts += 1  # else the watchdog counts it with the queue
            for later in behind:
                if later is not None:
                    self._engine_of(later).abort(later, why)
        if head and self._inflight:
            self.watchdog.start(self._inflight[0])  # its time counts from now: it runs now

    def _start_next(self) -> bool:
        inflight = self._inflight
        job: Job | None = self._held
        if job is not None:  # a SHAVE job runs alone: it waits for the DLA tasks to end
            if inflight or not self.shave.claim(job.job_id, job.graph):
                return False
            self._held = None
        else:
            if len(inflight) >= self.engine.depth or (inflight and inflight[0].graph.shave is not None):
                return False
            job = self.queues.pick()
            if job is None:
                return False
            # (and for its tiles, while a compute unit's execution has one: pydla.kmd.tile_owner)
            if job.graph.shave is not None and (inflight or not self.shave.claim(job.job_id, job.graph)):
                self._held = job  # nothing else starts before it (it keeps its turn)
                return False
        inflight.append(job)
        job.state = RUNNING
        if inflight[0] is job:  # it runs now (else it starts when the ones before it end)
            self.watchdog.start(job)
        try:
            runner = self.engine if job.graph.shave is None else self.shave
            job.run = runner.dla_execute_task(job.task, job.graph, self._on_finish)
        except DlaError as e:
            if job in self._inflight:
                self._inflight.remove(job)
            job._finish(e)
        return True

    def _irq_thread(self) -> None:
        """Threaded mode, after the ISR: the thread that raised the interrupt (a device block's) runs
        the bottom half itself when the driver is free, as a threaded interrupt handler does; this
        saves a thread handoff per job. It never waits for the driver: when another thread holds it,
        the service thread (woken by the ISR) does the work. Headed, the interrupt may come from a
        thread inside the driver (its doorbell ran the firmware): that thread's own poll, or the
        service thread, takes the events; and block interrupts are the firmware's, not the driver's."""
        owned = self._owned_lock  # (threaded: see __init__)
        if (owned is not None and owned.held_by_caller()) or (self.info.headed
                                                              and not self.engine.pending_events()):
            # Never the bottom half re-entrantly in the middle of this thread's own driver work (it
            # would reset the tiles a SHAVE list is being started on): the service thread does it.
            self.engine.wake()
            return
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
        running = self._running
        fail_running(self.engine if running is None or running.run is None else self._engine_of(running.run),
                     running, e)

    def _engine_of(self, run: RunState) -> EngineApi | ShaveEngine:
        """Who runs ``run``: the SHAVE engine for a SHAVE task list, else the engine scheduler."""
        return self.shave if isinstance(run, ShaveRun) else self.engine

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
        self._drive()
        with self._lock:
            return {
                "contexts": len(self._contexts),
                "queued": sum(len(q) for q in self._queues.values()) + (self._held is not None),
                "running": self._running.job_id if self._running else None,
                "in_flight": [j.job_id for j in self._inflight],
                "buffers": sum(len(c.buffers) for c in self._contexts.values()),
                "banned_contexts": sorted(c.ctx for c in self._contexts.values() if c.banned is not None),
                "recovery": self.watchdog.as_dict(),
                "compute_units": self.cus.stats(),
                "shave": dict(self.shave.stats),
            }
