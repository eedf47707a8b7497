"""Recovery of the KMD: a watchdog over the running job and the recovery ladder (DESIGN.md:
"Recovery is a ladder").

**Hang detection (TDR).** The driver owns a hang timeout, ``tdr_ms`` (2 s by default, as the Linux
ivpu driver's; set by whoever builds the driver, e.g. the daemon's administrator). A job whose
submitter gave a shorter ``timeout_ms`` is watched with that instead: a client may shorten the
window, never lengthen it. A job is *hung* when no operation of it completed for one window, counted
from its start or its last completed operation. A job that keeps completing operations may run up
to ``(MAX_EXTENSIONS + 1) * timeout_ms`` in all (its time budget); past that it fails with Timeout.

**The ladder**, when a job is declared hung:

1. the job fails with NvError Timeout, naming the operations that were stuck and what was reset;
2. its context is *guilty*: its other queued jobs are aborted (they may depend on the hung one);
3. the blocks the job used are reset (the GLB reset register, a bit per block; for a SHAVE task
   list, SHAVE_RESET: every tile halted, FIFOs emptied, barriers unconfigured); other contexts'
   queued work is untouched and runs next;
4. if a block is still busy after its reset, the whole device is reset; if even that fails the
   error says so.

A context whose jobs hung ``ban_after`` times is *banned*: its submits are refused until it is closed
and a new one opened, so that one misbehaving client cannot keep resetting the device for everyone.
An MMU fault also aborts the faulting job's context (never another one's), and a failure of the
driver's own bottom half fails the running job and leaves the driver serving the next. Every rung
is logged (logger ``pydla.kmd``) and counted in :attr:`Watchdog.stats`.

Usage (under the driver's lock)::

    watchdog = Watchdog(engine, port, tdr_ms=2000)
    watchdog.start(job)                   # when the job starts on the device
    watchdog.check(job, queue)            # from the poll loop, while the job runs
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from pydla.errors import DlaError, NvError
from pydla.firmware.engine import (
    DEVICE_RESET_BIT as DEVICE_RESET_BIT,  # the compute units reset the device too
)
from pydla.firmware.engine_api import EngineApi, RunState
from pydla.kmd.job import Job
from pydla.kmd.port import KmdPortability
from pydla.kmd.shave_run import ShaveEngine, ShaveRun

log = logging.getLogger("pydla.kmd")

DEFAULT_TDR_MS = 2_000
MAX_TDR_MS = 3_600_000
MAX_EXTENSIONS = 10  # a progressing job may run (MAX_EXTENSIONS + 1) * timeout_ms in all
BAN_AFTER_HANGS = 3


@dataclass
class RecoveryStats:
    """What the watchdog did since the driver started."""

    hangs: int = 0  # jobs declared hung (no operation completed within the window)
    budget_timeouts: int = 0  # jobs that kept progressing past their time budget
    context_aborts: int = 0  # guilty contexts whose queued jobs were aborted
    block_resets: int = 0
    device_resets: int = 0  # a block stayed busy after its reset
    failed_resets: int = 0  # a block stayed busy after the device reset too
    bans: int = 0  # contexts banned for hanging ban_after times


def check_recovery_args(tdr_ms: int, ban_after: int) -> None:
    if type(tdr_ms) is not int or not 0 < tdr_ms <= MAX_TDR_MS:
        raise DlaError(NvError.BadParameter, f"tdr_ms {tdr_ms!r} must be an integer 1..{MAX_TDR_MS}")
    if type(ban_after) is not int or ban_after < 1:
        raise DlaError(NvError.BadParameter, f"ban_after {ban_after!r} must be an integer >= 1")


class Watchdog:
    """The running job's hang and budget checks, and the recovery ladder. See the module docstring."""

    def __init__(self, engine: EngineApi, port: KmdPortability, *, tdr_ms: int = DEFAULT_TDR_MS,
                 ban_after: int = BAN_AFTER_HANGS) -> None:
        check_recovery_args(tdr_ms, ban_after)
        self.engine = engine
        self.port = port
        # Told when the ladder reset the whole device (the compute units' pipelines went with it).
        self.on_device_reset: Callable[[str], None] | None = None
        self.shave: ShaveEngine | None = None  # runs the SHAVE task lists (set by the driver)
        self.tdr_ms = tdr_ms
        self.ban_after = ban_after
        self.stats = RecoveryStats()

    def _engine(self, run: RunState) -> EngineApi | ShaveEngine:
        return self.shave if self.shave is not None and isinstance(run, ShaveRun) else self.engine

    def window_ms(self, job: Job) -> int:
        """How long ``job`` may go without completing an operation: the TDR, or the job's own
        shorter timeout."""
        return min(job.timeout_ms, self.tdr_ms)

    def start(self, job: Job) -> None:
        """``job`` was just started on the device."""
        now = time.monotonic()
        job.started_at = job.last_progress = now
        job.completed_seen = 0
        job.budget_end = now + job.timeout_ms * (MAX_EXTENSIONS + 1) / 1000
        job.deadline = min(now + self.window_ms(job) / 1000, job.budget_end)

    def check(self, job: Job, queue: deque[Job] | None) -> None:
        """From the poll loop, with ``job`` running: note its progress; past its deadline, extend it
        if the job progressed, else run the ladder. ``queue`` holds the job's context's queued jobs."""
        run = job.run
        if run is None:
            return
        now = time.monotonic()
        engine = self._engine(run)
        if not engine.live_progress and now < job.deadline:
            return  # progress costs a message to the firmware (headed): asked at the deadline only
        completed = engine.progress(run)
        if completed is None or run.finished:
            return  # the engine could not tell, and ended the job itself (a firmware reset)
        if completed != job.completed_seen:
            job.completed_seen = completed
            job.last_progress = now
        if now < job.deadline:
            return
        if now >= job.budget_end:
            self._budget_exceeded(job)
            return
        if job.last_progress > job.deadline - self.window_ms(job) / 1000:
            # progress since the window began: the next window counts from the last completion
            job.extensions += 1
            job.deadline = min(job.last_progress + self.window_ms(job) / 1000, job.budget_end)
            return
        self._hung(job, queue)

    # -- the ladder --------------------------------------------------------------------------------

    def _budget_exceeded(self, job: Job) -> None:
        assert job.run is not None
        engine = self._engine(job.run)
        detail = engine.describe_stuck(job.run)
        self.stats.budget_timeouts += 1
        reset = self._reset_blocks(job)
        error = DlaError(NvError.Timeout,
                         f"task {job.job_id} ran past its time budget of "
                         f"{job.timeout_ms * (MAX_EXTENSIONS + 1)} ms ({MAX_EXTENSIONS + 1} times its "
                         f"timeout of {job.timeout_ms} ms) although it was progressing "
                         f"(+{job.extensions} extensions for progress): {detail}; {reset}")
        log.warning("%s", error.message)
        engine.abort(job.run, error)

    def _hung(self, job: Job, queue: deque[Job] | None) -> None:
        assert job.run is not None
        context = job.context
        window = self.window_ms(job)
        engine = self._engine(job.run)
        detail = engine.describe_stuck(job.run)
        self.stats.hangs += 1
        context.hangs += 1
        reset = self._reset_blocks(job)
        extended = f", +{job.extensions} extensions for progress" if job.extensions else ""
        # What was stuck and what was reset come first: a port may carry only the first 192 bytes.
        parts = [f"task {job.job_id} of context {context.ctx} hung: no operation completed for "
                 f"{window} ms", reset, f"{detail} (hang timeout: the driver's {self.tdr_ms} ms, the "
                 f"job's {job.timeout_ms} ms{extended})"]
        if context.hangs >= self.ban_after and context.banned is None:
            context.banned = (f"its jobs hung {context.hangs} times (the last: task {job.job_id}, "
                              f"{detail})")
            self.stats.bans += 1
            parts.append(f"context {context.ctx} is now banned after {context.hangs} hung jobs")
        error = DlaError(NvError.Timeout, "; ".join(parts))
        log.warning("%s", error.message)
        job.hung = True
        engine.abort(job.run, error)
        aborted = abort_context(queue, DlaError(
            NvError.Timeout, f"aborted: task {job.job_id} of context {context.ctx} hung before it "
                             f"({detail}); the context's queued jobs were aborted"))
        if aborted:
            self.stats.context_aborts += 1
            log.warning("context %d: %d queued job(s) aborted after task %d hung", context.ctx, aborted,
                        job.job_id)

    def _reset_blocks(self, job: Job) -> str:
        """Reset the blocks ``job`` used (the SHAVE tiles for a SHAVE task list); escalate to a device
        reset when one stays busy. Says what ran."""
        if self.shave is not None and job.graph.shave is not None:
            names = "SHAVE tiles and DMA"
            busy_names = self.shave.reset()
        else:
            blocks = job.graph.blocks
            names = ", ".join(b.name for b in blocks)
            busy_names = [b.name for b in self.engine.reset_blocks(blocks)]
        self.stats.block_resets += 1
        if not busy_names:
            log.info("blocks %s were reset after task %d", names, job.job_id)
            return f"blocks {names} were reset"
        self.stats.device_resets += 1
        still = self.engine.reset_device()  # the SHAVE tiles too
        busy = ", ".join(busy_names)
        what = f"blocks {names} were reset, {busy} stayed busy, so the device was reset"
        if self.on_device_reset is not None:
            self.on_device_reset(f"task {job.job_id} hung and {busy} stayed busy")
        if still:
            self.stats.failed_resets += 1
            what += (f", and {', '.join(b.name for b in still)} stayed busy even so: the device needs "
                     "attention")
            log.error("%s", what)
        else:
            log.warning("task %d: %s", job.job_id, what)
        return what

    def as_dict(self) -> dict[str, int]:
        return {"tdr_ms": self.tdr_ms, "ban_after": self.ban_after, **asdict(self.stats)}


def abort_context(queue: deque[Job] | None, error: DlaError) -> int:
    """Fail the jobs a context still has queued (``queue``) with ``error``; how many there were."""
    if not queue:
        return 0
    n = len(queue)
    for queued in queue:
        queued.finish(error)
    queue.clear()
    return n


def mmu_fault_error(job: Job) -> DlaError:
    return DlaError(NvError.InvalidState,
                    f"aborted: job {job.job_id} of context {job.context.ctx} caused an MMU fault")


def fail_running(engine: EngineApi | ShaveEngine, job: Job | None, e: Exception) -> None:
    """The driver's bottom half failed with ``e`` while ``job`` ran: the job fails, the driver goes on."""
    if job is not None and job.run is not None:
        engine.abort(job.run, DlaError(NvError.ResourceError, f"job {job.job_id} failed in the driver: {e}"))
