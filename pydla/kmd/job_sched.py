"""The KMD's job scheduler (a part of :class:`~pydla.kmd.driver.Kmd`): the jobs of every context on
their way through the device.

It owns the queues (one per context, :class:`~pydla.kmd.job.JobQueues`, whose policy picks the next
job), the jobs on the device in order (the first runs, the others are programmed behind it: the
engine's pipeline depth, :mod:`pydla.firmware.engine`, "The engine as a compute unit"), and a SHAVE
job picked while DLA tasks were in flight (it starts, alone, once they ended). It starts the next
job, ends one when its engine reports it (the watchdog and the recovery of a guilty context,
:mod:`pydla.kmd.recovery`), and does the poll loop's work. Everything here runs under the driver's
lock, which it takes itself only in :meth:`JobScheduler.reset_device_if_idle` (the compute units'
scheduler calls that from outside it).

Usage (under the driver's lock)::

    jobs = JobScheduler(lock, contexts, engine, shave, watchdog, mode="deterministic")
    jobs.open_queue(ctx)
    jobs.enqueue(Job(bottom_half, job_id, context, task, graph, 0, 1000))
    jobs.poll_locked()
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from pydla.errors import DlaError, NvError
from pydla.firmware.engine_api import EngineApi, RunState
from pydla.firmware.interface import TaskDesc
from pydla.kmd.context import Buffer, Context, ContextTable, check_not_banned
from pydla.kmd.job import RUNNING, Job, JobQueues
from pydla.kmd.lock import OwnedLock
from pydla.kmd.recovery import Watchdog, abort_context, fail_running, mmu_fault_error
from pydla.kmd.shave_run import ShaveEngine, ShaveRun


class JobScheduler:
    """See the module docstring. ``mode`` is the device's (deterministic, threaded or step)."""

    def __init__(self, lock: OwnedLock | threading.RLock, contexts: ContextTable, engine: EngineApi,
                 shave: ShaveEngine, watchdog: Watchdog, *, mode: str) -> None:
        self.lock = lock
        self.contexts = contexts
        self.engine = engine
        self.shave = shave
        self.watchdog = watchdog
        # Threaded: a service thread runs the bottom half (pydla.kmd.bottom_half), and a job queued on
        # an idle device is programmed from the submitting thread, as a submit ioctl does.
        self.threaded = mode == "threaded"
        # Deterministic devices compute inside the register write that enables an operation: a
        # submit then polls at once (the job usually finished within it).
        self.polled_at_submit = mode == "deterministic"
        self.queues = JobQueues()
        self.inflight: list[Job] = []  # on the device, in order: the first runs
        self.held: Job | None = None  # a SHAVE job waiting for the DLA tasks in flight to end
        self.next_job = 1
        self.history: deque[Job] = deque(maxlen=64)
        self.submitting: list[TaskDesc] = []  # tasks being checked: their buffers are in use

    @property
    def running(self) -> Job | None:
        """The job that runs now: the first of those on the device."""
        return self.inflight[0] if self.inflight else None

    def open_queue(self, ctx: int) -> None:
        self.queues.by_context[ctx] = deque()

    def close_queue(self, context: Context) -> None:
        """``context`` closes: its held and queued jobs fail, those on the device are aborted (they
        end in the next poll), and its queue goes."""
        ctx = context.ctx
        queue = self.queues.by_context[ctx]
        error = DlaError(NvError.InvalidState, f"context {ctx} was closed")
        held = [self.held] if self.held is not None and self.held.context is context else []
        for job in held + list(queue):
            job.finish(error)
        if held:
            self.held = None
            self.shave.unclaim(held[0].graph)
        queue.clear()
        for running in [j for j in self.inflight if j.context is context]:
            if running.run is not None:
                self.engine_of(running.run).abort(running.run, error)
        self.poll_locked()
        del self.queues.by_context[ctx]

    def enqueue(self, job: Job) -> Job:
        """Queue a job of a validated task, and start it if the device is idle."""
        self.contexts.check_open()
        context = job.context
        ctx = context.ctx
        if self.contexts.by_id.get(ctx) is not context:
            raise DlaError(NvError.InvalidState, f"context {ctx} was closed")
        check_not_banned(context)
        job.listen_to_fences()
        self.queues.by_context[ctx].append(job)
        if self.polled_at_submit:  # (deterministic, so not threaded)
            self.poll_locked()
        elif self.threaded and self.start_next():
            pass  # the device was idle: programmed from the caller, as a submit ioctl does
        else:
            self.engine.wake()
        return job

    def in_use(self, context: Context, buf: Buffer) -> bool:
        """A queued, held, running or being-checked task of ``context`` uses ``buf``."""
        tasks = [job.task for job in self.queues.by_context[context.ctx]] + list(self.submitting)
        tasks += [job.task for job in self.inflight if job.context is context]
        if self.held is not None and self.held.context is context:
            tasks.append(self.held.task)
        return any(e.bo is buf.bo for task in tasks for e in task.addresses)

    def queued(self) -> int:
        """Jobs waiting to start (a held one included)."""
        return sum(len(q) for q in self.queues.by_context.values()) + (self.held is not None)

    def reset_device_if_idle(self, reset: Callable[[], None]) -> bool:
        """For the compute units' scheduler: run ``reset`` (a device reset) under the driver's lock
        if no DLA job runs (True if it did)."""
        with self.lock:
            if self.inflight or self.contexts.closed:
                return False
            reset()
            return True

    def poll_locked(self, start: bool = True) -> None:
        """Take the device's events, run the watchdog over the running job and (``start``) start the
        next job, until nothing more happens."""
        engine, shave = self.engine, self.shave
        while True:
            engine.dla_process_events()
            if shave.irq_pending:  # (one attribute read on the DLA path)
                shave.dla_process_events()
            if self.inflight:
                running = self.inflight[0]
                self.watchdog.check(running, self.queues.by_context.get(running.context.ctx))
            started = start and self.start_next()
            if not started and engine.pending_events() == 0 and not shave.irq_pending:
                return

    def start_next(self) -> bool:
        """Start the next job if the device takes one (True if a job was taken off a queue)."""
        inflight = self.inflight
        job: Job | None = self.held
        if job is not None:  # a SHAVE job runs alone: it waits for the DLA tasks to end
            if inflight or not self.shave.claim(job.job_id, job.graph):
                return False
            self.held = None
        else:
            if len(inflight) >= self.engine.depth or (inflight and inflight[0].graph.shave is not None):
                return False
            job = self.queues.pick()
            if job is None:
                return False
            # (and for its tiles, while a compute unit's execution has one: pydla.kmd.tile_owner)
            if job.graph.shave is not None and (inflight or not self.shave.claim(job.job_id, job.graph)):
                self.held = job  # nothing else starts before it (it keeps its turn)
                return False
        inflight.append(job)
        job.state = RUNNING
        if inflight[0] is job:  # it runs now (else it starts when the ones before it end)
            self.watchdog.start(job)
        try:
            runner = self.engine if job.graph.shave is None else self.shave
            job.run = runner.dla_execute_task(job.task, job.graph, self.on_finish)
        except DlaError as e:
            if job in self.inflight:
                self.inflight.remove(job)
            job.finish(e)
        return True

    def on_finish(self, run: RunState) -> None:
        """The engine ended ``run``: its job ends; a guilty context's jobs behind it are aborted."""
        inflight = self.inflight
        if inflight and inflight[0].task is run.task:  # the usual case: the head ended
            job, head = inflight.pop(0), True
        else:
            found = [j for j in inflight if j.task is run.task]
            if not found:
                return
            job, head = found[0], False
            inflight.remove(job)
        self.history.append(job)
        job.finish(run.error)
        error = run.error
        if error is not None and (error.code == NvError.InvalidAddress or job.hung):
            # The context is guilty: its jobs behind this one may depend on it (the watchdog aborts
            # the queued ones of a hung job; those already programmed behind it are aborted here).
            why = (mmu_fault_error(job) if error.code == NvError.InvalidAddress else
                   DlaError(NvError.Timeout, f"aborted: task {job.job_id} of context {job.context.ctx} "
                                             "hung before it"))
            queues = self.queues.by_context
            if error.code == NvError.InvalidAddress:
                abort_context(queues.get(job.context.ctx), why)
            behind = [j.run for j in self.inflight if j.context is job.context and j.run is not None]
            if behind and job.hung and not queues.get(job.context.ctx):
                self.watchdog.stats.context_aborts += 1  # else the watchdog counts it with the queue
            for later in behind:
                if later is not None:
                    self.engine_of(later).abort(later, why)
        if head and self.inflight:
            self.watchdog.start(self.inflight[0])  # its time counts from now: it runs now

    def fail_running(self, e: Exception) -> None:
        """The driver's bottom half failed with ``e``: the running job fails, the driver goes on."""
        running = self.running
        fail_running(self.engine if running is None or running.run is None else self.engine_of(running.run),
                     running, e)

    def engine_of(self, run: RunState) -> EngineApi | ShaveEngine:
        """Who runs ``run``: the SHAVE engine for a SHAVE task list, else the engine scheduler."""
        return self.shave if isinstance(run, ShaveRun) else self.engine
