"""Recovery of the KMD: job timeouts with a progress check, and aborts (DESIGN.md: "Recovery is a
ladder").

Every job has a timeout. When it expires the driver checks for progress (the device's completed-
operation counter): while the device keeps completing operations the deadline is extended, up to
``MAX_EXTENSIONS`` times; otherwise the job is aborted (the engine resets the blocks it used through
the GLB reset register) and fails with NvError Timeout naming the operation that hung. The next
job then runs normally. An MMU fault also fails the other queued jobs of the same context (the
context is aborted), never another context's. A failure of the driver's own bottom half fails the
running job and leaves the driver serving the next.

Usage (under the driver's lock)::

    check_timeout(engine, port, job)      # from the poll loop, while a job runs
"""

from __future__ import annotations

import time
from collections import deque

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.kmd.engine import Engine
from pydla.kmd.job import Job
from pydla.kmd.port import KmdPortability

MAX_EXTENSIONS = 10


def check_timeout(engine: Engine, port: KmdPortability, job: Job) -> None:
    """Past its deadline, extend ``job`` (the running one) if the device progressed, else abort it."""
    if job.run is None or time.monotonic() < job.deadline:
        return
    ops = port.dla_reg_read(R.GLB_OPS_DONE)
    if ops != job.ops_seen and job.extensions < MAX_EXTENSIONS:
        job.ops_seen = ops
        job.extensions += 1
        job.deadline = time.monotonic() + job.timeout_ms / 1000
        return
    detail = engine.describe_stuck(job.run)
    blocks = ", ".join(b.name for b in job.graph.blocks)
    error = DlaError(NvError.Timeout,
                     f"task {job.job_id} timed out after {job.timeout_ms} ms"
                     f"{f' (+{job.extensions} extensions for progress)' if job.extensions else ''}: "
                     f"{detail}; blocks {blocks} were reset")
    engine.abort(job.run, error)


def abort_context(queue: deque[Job] | None, job: Job) -> None:
    """``job`` caused an MMU fault: fail the jobs its context still has queued (``queue``)."""
    if queue is None:
        return
    abort = DlaError(NvError.InvalidState,
                     f"aborted: job {job.job_id} of context {job.context.ctx} caused an MMU fault")
    for queued in queue:
        queued._finish(abort)
    queue.clear()


def fail_running(engine: Engine, job: Job | None, e: Exception) -> None:
    """The driver's bottom half failed with ``e`` while ``job`` ran: the job fails, the driver goes on."""
    if job is not None and job.run is not None:
        engine.abort(job.run, DlaError(NvError.ResourceError, f"job {job.job_id} failed in the driver: {e}"))
