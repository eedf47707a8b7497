"""Jobs of the KMD: a submitted task, its fences, and the queue policy across contexts.

Jobs from all contexts wait in one set of queues, one per context (:class:`JobQueues`). The policy
that picks the next one is: highest priority first, then round-robin across contexts (the context
after the one served last), then submission order within a context. A job whose pre-fences are not
all reached waits (its context's later jobs wait behind it); one whose pre-fence failed fails at
once and never runs. A finished job signals its post-fences, or fails them with its error.

Usage::

    queues = JobQueues()
    queues.by_context[ctx] = deque([job])
    job = queues.pick()                # under the driver's lock
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pydla.errors import DlaError, NvError
from pydla.firmware.engine_api import RunState
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import TaskDesc
from pydla.kmd.sync import TimelineSemaphore

log = logging.getLogger("pydla.kmd")

if TYPE_CHECKING:
    from pydla.kmd.context import Context

Fence = tuple[TimelineSemaphore, int]  # (semaphore, value): NvDlaFence in the KMD
DEFAULT_TIMEOUT_MS = 10_000
QUEUED, RUNNING, COMPLETED, FAILED = "queued", "running", "completed", "failed"


def check_job_args(priority: int, timeout_ms: int | None, default_timeout_ms: int) -> int:
    """The job's timeout (``default_timeout_ms`` for None), once both arguments are checked."""
    timeout_ms = default_timeout_ms if timeout_ms is None else timeout_ms
    if type(timeout_ms) is not int or type(priority) is not int:
        raise DlaError(NvError.BadParameter, f"timeout_ms {timeout_ms!r} and priority {priority!r} must be "
                                             "integers")
    if not 0 < timeout_ms <= 3_600_000:
        raise DlaError(NvError.BadParameter, f"timeout_ms {timeout_ms} must be 1..3600000")
    if not 0 <= priority <= 255:
        raise DlaError(NvError.BadParameter, f"priority {priority} must be 0..255")
    return timeout_ms


class JobDriver(Protocol):
    """What a job needs of the driver: a wait for it, and a wake-up when a pre-fence moves (the
    driver's bottom half is one: :class:`pydla.kmd.bottom_half.BottomHalf`)."""

    def wait_for(self, job: Job, timeout_ms: float | None) -> None: ...
    def wake(self) -> None: ...


class Job:
    """A submitted task. ``wait`` returns when it completed and raises when it failed. The methods
    after ``wait`` are the driver's (its scheduler's and bottom half's), not a client's."""

    def __init__(self, driver: JobDriver, job_id: int, context: Context, task: TaskDesc, graph: TaskGraph,
                 priority: int, timeout_ms: int, pre_fences: list[Fence] | None = None,
                 post_fences: list[Fence] | None = None) -> None:
        self.driver = driver
        self.job_id = job_id
        self.context = context
        self.task = task
        self.graph = graph
        self.priority = priority
        self.timeout_ms = timeout_ms
        self.state = QUEUED
        self.error: DlaError | None = None
        self.run: RunState | None = None
        # The watchdog's (pydla.kmd.recovery): when it looks next, the end of the job's time budget,
        # when an operation last completed and how many had then, and how often progress extended it.
        self.deadline = 0.0
        self.budget_end = 0.0
        self.last_progress = 0.0
        self.completed_seen = 0
        self.extensions = 0
        self.hung = False  # the watchdog declared it hung (its context is guilty)
        self.started_at = 0.0
        self.finished_at = 0.0
        self.pre_fences = list(pre_fences or [])
        self.post_fences = list(post_fences or [])
        self._done = False
        self._event: threading.Event | None = None  # made by a thread that waits (see wait_step)
        self.listening = False  # the KMD listens to the pre-fences while the job is queued
        self.on_done: Callable[[Job], None] | None = None  # see Kmd.submit_prepared

    @property
    def done(self) -> bool:
        return self._done

    @property
    def signalled(self) -> bool:
        """It completed and its post-fences are reached: a waiter for them need not wait."""
        return self.state == COMPLETED and all(sem.reached(v) for sem, v in self.post_fences)

    def wait_step(self, seconds: float) -> None:
        """Sleep until the job finishes or ``seconds`` pass. The event is made before ``done`` is
        looked at, and finish sets ``done`` before it looks for the event: one of them sees the
        other, so a finish is never missed."""
        event = self._event
        if event is None:
            event = self._event = threading.Event()
        if not self._done:
            event.wait(seconds)

    def wait(self, timeout_ms: float | None = None) -> None:
        """Block until the job finishes: return if it completed, raise its error if it failed.
        NvError Timeout if ``timeout_ms`` passes first (the job itself goes on)."""
        self.driver.wait_for(self, timeout_ms)
        if self.error is not None:
            raise self.error

    def listen_to_fences(self) -> None:
        """Queued: the driver is woken whenever a pre-fence's semaphore moves."""
        if not self.pre_fences:
            return
        self.listening = True
        for sem, _ in self.pre_fences:
            sem.add_listener(self.driver.wake)

    def stop_listening(self) -> None:
        if self.listening:
            self.listening = False
            for sem, _ in self.pre_fences:
                sem.remove_listener(self.driver.wake)

    def finish(self, error: DlaError | None) -> None:
        """The job ended (``error`` None: completed): its state, its waiters, its post-fences, its
        on_done hook."""
        if self.listening:
            self.stop_listening()
        self.error = error
        self.state = FAILED if error else COMPLETED
        self.finished_at = time.monotonic()
        self._done = True  # before looking for a waiter's event (see wait_step)
        event = self._event
        if event is not None:
            event.set()
        for sem, value in self.post_fences:
            if error is None:
                sem.signal(value)
            else:
                sem.fail(error)
        on_done = self.on_done
        if on_done is not None:
            self.on_done = None
            try:
                on_done(self)
            except Exception:  # the caller's hook must not break the driver's bottom half
                log.exception("job %d: its on_done hook failed", self.job_id)

    def __repr__(self) -> str:
        return f"Job({self.job_id}, ctx={self.context.ctx}, {self.state})"


class JobQueues:
    """The queued jobs of every context, and the policy that picks the next (see the module
    docstring). Used under the driver's lock."""

    def __init__(self) -> None:
        self.by_context: dict[int, deque[Job]] = {}
        self.last_served: int | None = None

    def pick(self) -> Job | None:
        """The next job to start, taken off its queue: among the contexts whose first job may start
        (its pre-fences reached), the highest priority, then the context after the one served last."""
        best: list[int] = []
        top = -1
        for ctx, q in self.by_context.items():
            if not q:
                continue
            head = q[0]
            if head.pre_fences:
                while q and any(sem.error is not None and not sem.reached(v) for sem, v in q[0].pre_fences):
                    # a head whose fence failed fails at once, never runs
                    failed = next(sem.error for sem, v in q[0].pre_fences if sem.error is not None)
                    assert failed is not None
                    q.popleft().finish(DlaError(failed.code, f"a pre-fence failed: {failed.message}"))
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
            last = self.last_served
            ctx = next((c for c in ctxs if last is not None and c > last), ctxs[0])
        self.last_served = ctx
        job = self.by_context[ctx].popleft()
        if job.listening:
            job.stop_listening()
        return job
