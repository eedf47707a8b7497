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

:class:`Kmd` is the driver's entry points (what the ports call) over parts it owns, each one concern:
its open contexts (:class:`~pydla.kmd.context.ContextTable`), the job queues and what runs
(:class:`~pydla.kmd.job_sched.JobScheduler`), the interrupt's and the service thread's bottom half
(:class:`~pydla.kmd.bottom_half.BottomHalf`), the compute units
(:class:`~pydla.kmd.cu_api.KmdComputeUnits` over :class:`~pydla.kmd.cu_sched.CuScheduler`), the
SHAVE task lists (:class:`~pydla.kmd.shave_run.ShaveEngine`), the watchdog
(:class:`~pydla.kmd.recovery.Watchdog`) and the validated tasks (:class:`~pydla.kmd.taskcache.TaskCache`).
They share the driver's one lock.

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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.firmware.engine_api import EngineApi
from pydla.firmware.graph import load_task
from pydla.firmware.interface import MAX_ADDRESSES, CuDesc, TaskDesc
from pydla.kmd.bottom_half import BottomHalf
from pydla.kmd.cmdbuf import CommandBuffers, device_has_command_processor
from pydla.kmd.context import (
    Buffer,
    Context,
    ContextTable,
    PreparedJob,
    buffer_of,
    create_buffer,
    destroy_buffer,
    release_context,
    resolve,
)
from pydla.kmd.cu import CuArg, CuExecution, check_scalars
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
    check_job_args,
)
from pydla.kmd.job_sched import JobScheduler
from pydla.kmd.lock import OwnedLock
from pydla.kmd.port import AddressEntry, KmdPortability
from pydla.kmd.recovery import BAN_AFTER_HANGS, DEFAULT_TDR_MS, MAX_EXTENSIONS, Watchdog
from pydla.kmd.shave_run import ShaveEngine, read_caps
from pydla.kmd.taskcache import TaskCache

__all__ = [
    "COMPLETED", "DEFAULT_TIMEOUT_MS", "FAILED", "MAX_ADDRESSES", "MAX_EXTENSIONS", "MAX_PREPARED", "QUEUED",
    "RUNNING", "Buffer", "Context", "Fence", "Job", "Kmd", "PreparedJob",
]

MAX_PREPARED = 4096  # prepared jobs per context
log = logging.getLogger("pydla.kmd")


class Kmd:
    """The driver of one device: its entry points over the parts it owns (see the module docstring)."""

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
        self.default_timeout_ms = default_timeout_ms
        # The engine scheduler itself, or on a headed device the proxy to it (pydla.kmd.headed).
        self.engine: EngineApi = make_engine(self.port, info, rpc_timeout_ms=max(50, min(tdr_ms, 2000)))
        self.watchdog = Watchdog(self.engine, self.port, tdr_ms=tdr_ms, ban_after=ban_after)
        self.tasks = TaskCache()
        # Each task's command buffer, on a device whose command processor runs a task from one doorbell
        # (not headed: the microcontroller's firmware builds its own, pydla.hw.mcu.cmdbufs; not NVDLA's)
        self.cmdbufs = CommandBuffers(port, present=not info.headed and info.nvdla is None
                                      and device_has_command_processor(port))
        # SHAVE task lists run beside the engine, on the host in both modes (pydla.kmd.shave_run).
        self.shave = ShaveEngine(self.port, info.shave, wake=self.engine.wake)
        self.shave.dla = self.engine  # the DLA operations of a task beside its SHAVE list
        # An interrupt may come back on a thread that is inside the driver (headed: a doorbell ran the
        # firmware; threaded: a SHAVE start the tile refuses at once raises it inside
        # dla_execute_task), and the bottom half asks whether this thread holds the lock: those
        # drivers' lock records its owner. A deterministic headless driver has no interrupt bottom
        # half: nothing asks, and the bare RLock costs four Python calls less per job.
        owned_lock = OwnedLock() if info.headed or info.mode == "threaded" else None
        self._lock: OwnedLock | threading.RLock = owned_lock or threading.RLock()
        self.open_contexts = ContextTable()
        self.jobs = JobScheduler(self._lock, self.open_contexts, self.engine, self.shave, self.watchdog,
                                 mode=info.mode)
        self.queues, self.history = self.jobs.queues, self.jobs.history
        self.cus = CuScheduler(self.port, info, tdr_ms=tdr_ms, ban_after=ban_after,
                               default_timeout_ms=default_timeout_ms,
                               reset_device=self.jobs.reset_device_if_idle)
        self.units = KmdComputeUnits(self.port, info, self.cus, self.engine, self._lock, self.open_contexts)
        self.watchdog.on_device_reset = self.engine.on_device_reset = self.cus.device_was_reset
        self.engine.dla_engine_init()
        self.bottom_half = BottomHalf(self.port, self._lock, self.open_contexts, self.jobs, self.cus,
                                      owned_lock=owned_lock, headed=info.headed,
                                      name=f"pydla-kmd{info.instance}")
        self.service_errors = self.bottom_half.service_errors
        # A tile's unit executions and lists take turns (pydla.kmd.tile_owner).
        self.cus.share_tiles(self.shave.owners, self.bottom_half.poll)
        self.port.connect_interrupt(self.shave.isr)
        self.watchdog.shave = self.shave
        self.bottom_half.start()

    # -- contexts and buffers --------------------------------------------------------------------

    def open_context(self) -> int:
        with self._lock:
            self.open_contexts.check_open()
            ctx = self.port.dla_create_context()
            self.open_contexts.by_id[ctx] = Context(ctx)
            self.jobs.open_queue(ctx)
            log.debug("device %d: context %d opened (%d open)", self.info.instance, ctx,
                      len(self.open_contexts.by_id))
            return ctx

    def close_context(self, ctx: int) -> None:
        """Abort the context's jobs, free its buffers, and release its address space."""
        with self._lock:
            context = self.open_contexts.get(ctx)
            self.jobs.close_queue(context)
            self.shave.forget_context(ctx)
            self.cus.forget_context(context)
            self.units.release(ctx)
            del self.open_contexts.by_id[ctx]
            release_context(self.port, context)
            self.tasks.forget(ctx)
            self.cmdbufs.forget(ctx)
            log.debug("device %d: context %d closed (%d open)", self.info.instance, ctx,
                      len(self.open_contexts.by_id))

    def bo_create(self, ctx: int, size: int, *, fd: int | None = None) -> int:
        """A new buffer object of ``size`` bytes mapped into ``ctx``; returns its handle. With ``fd``
        its memory is that shared memory (a memfd another process maps too), whose descriptor the
        buffer object then owns, also when this fails."""
        with self._lock:
            try:
                context = self.open_contexts.get(ctx)
            except DlaError:
                if fd is not None:
                    os.close(fd)
                raise
            return create_buffer(self.port, context, size, fd)

    def bo_destroy(self, ctx: int, handle: int) -> None:
        self.bottom_half.drive()  # a hung job's buffers are freed once the hang is declared, whoever asks
        with self._lock:
            context = self.open_contexts.get(ctx)
            buf = buffer_of(context, handle)
            if self.jobs.in_use(context, buf) or self.cus.busy_with(buf.bo):
                raise DlaError(NvError.Busy, f"buffer {handle} of context {ctx} is used by a queued "
                                             "or running job")
            destroy_buffer(self.port, context, handle)
            self.tasks.forget(ctx, handle)

    def bo_array(self, ctx: int, handle: int) -> npt.NDArray[np.uint8]:
        """The buffer's bytes as a numpy array (the host's mapping of it)."""
        with self._lock:
            return buffer_of(self.open_contexts.get(ctx), handle).bo.array

    def bo_iova(self, ctx: int, handle: int) -> int:
        with self._lock:
            return buffer_of(self.open_contexts.get(ctx), handle).iova

    def bo_size(self, ctx: int, handle: int) -> int:
        with self._lock:
            return buffer_of(self.open_contexts.get(ctx), handle).bo.size

    @property
    def contexts(self) -> list[int]:
        with self._lock:
            return list(self.open_contexts.by_id)

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
        jobs = self.jobs
        if jobs.inflight:  # (read unlocked: the hot path pays two attribute reads)
            self.bottom_half.drive()  # a hang due by now is declared before this job queues behind it
        with self._lock:
            contexts = self.open_contexts
            contexts.check_open()
            context = contexts.get(ctx)
            job_id = jobs.next_job
            jobs.next_job += 1
            checked = check_scalars(self.info, scalars, f"task {job_id}")
            task = TaskDesc(job_id, ctx, resolve(context, addresses, f"task {job_id}"), checked,
                            nvdla_interface)
            jobs.submitting.append(task)  # its buffers are in use while they are being checked
        try:
            # Copies and checks every descriptor (or reuses the graph of identical ones).
            graph = self.tasks.get(self.port, task, tuple(e.handle for e in addresses), self.config)
        finally:
            with self._lock:
                jobs.submitting.remove(task)
        job = Job(self.bottom_half, job_id, context, task, graph, priority, timeout_ms, pre_fences,
                  post_fences)
        with self._lock:
            task.command_buffer = self.cmdbufs.get(task, graph)
            return jobs.enqueue(job)

    def prepare(self, ctx: int, addresses: list[AddressEntry], scalars: Sequence[tuple[int, int]] = (),
                nvdla_interface: tuple[int, int, int] | None = None) -> int:
        """Validate a task once and keep it (the KMD's copy of its descriptors, its resolved
        addresses, its ``scalars`` as :meth:`submit` takes them); :meth:`submit_prepared` then queues
        it any number of times. Returns its id in ``ctx``. A prepared job is dropped when a buffer it
        uses is destroyed or its context closes."""
        with self._lock:
            self.open_contexts.check_open()
            context = self.open_contexts.get(ctx)
            if len(context.prepared) >= MAX_PREPARED:
                raise DlaError(NvError.ResourceError,
                               f"context {ctx} holds {MAX_PREPARED} prepared jobs: release some first")
            prep_id = context.next_prepared
            context.next_prepared += 1
            what = f"prepared task {prep_id}"
            checked = check_scalars(self.info, scalars, what)
            task = TaskDesc(prep_id, ctx, resolve(context, addresses, what), checked, nvdla_interface)
            self.jobs.submitting.append(task)
        try:
            graph = load_task(self.port, task, self.config)
        finally:
            with self._lock:
                self.jobs.submitting.remove(task)
        with self._lock:
            if self.open_contexts.by_id.get(ctx) is not context:
                raise DlaError(NvError.InvalidState, f"context {ctx} was closed")
            handles = frozenset(e.handle for e in addresses)
            if any(h not in context.buffers for h in handles):
                raise DlaError(NvError.InvalidState, f"{what}: a buffer it uses was destroyed meanwhile")
            context.prepared[prep_id] = PreparedJob(prep_id, handles, task.addresses, graph, task.scalars,
                                                    task.nvdla_interface)
            self.cmdbufs.get(task, graph)  # written once, here: each submit rings the doorbell
            return prep_id

    def submit_prepared(self, ctx: int, prep_id: int, *, priority: int = 0, timeout_ms: int | None = None,
                        pre_fences: list[Fence] | None = None, post_fences: list[Fence] | None = None,
                        on_done: Callable[[Job], None] | None = None) -> Job:
        """Queue prepared job ``prep_id`` of ``ctx`` (see :meth:`prepare`), as :meth:`submit` would.
        ``on_done(job)`` is called once when the job ends (completed or failed; after its post-fences
        are signalled or failed), from the thread that ends it, possibly before this returns: it must
        be quick and must not call into the KMD."""
        timeout_ms = check_job_args(priority, timeout_ms, self.default_timeout_ms)
        jobs = self.jobs
        if jobs.inflight:
            self.bottom_half.drive()  # as in submit
        with self._lock:
            contexts = self.open_contexts
            contexts.check_open()
            context = contexts.get(ctx)
            prepared = context.prepared.get(prep_id) if type(prep_id) is int else None
            if prepared is None:
                raise DlaError(NvError.BadParameter,
                               f"prepared task {prep_id!r} is not one of context {ctx}'s (never prepared, "
                               "released, or dropped when a buffer it uses was destroyed)")
            job_id = jobs.next_job
            jobs.next_job += 1
            task = TaskDesc(job_id, ctx, prepared.addresses, prepared.scalars, prepared.nvdla_interface)
            task.command_buffer = self.cmdbufs.get(task, prepared.graph)
            job = Job(self.bottom_half, job_id, context, task, prepared.graph, priority, timeout_ms,
                      pre_fences, post_fences)
            job.on_done = on_done
            return jobs.enqueue(job)

    def prepared_ids(self, ctx: int) -> list[int]:
        """The ids of the prepared jobs ``ctx`` holds."""
        with self._lock:
            return list(self.open_contexts.get(ctx).prepared)

    def release_prepared(self, ctx: int, prep_id: int) -> None:
        """Forget prepared job ``prep_id`` (queued jobs made from it run on). Releasing one that is
        already gone is not an error."""
        with self._lock:
            self.open_contexts.get(ctx).prepared.pop(prep_id, None)

    def poll(self) -> None:
        """Process device events, check timeouts, start the next job; on a device that is not
        threaded, drive the compute units' executions too. Never blocks."""
        self.bottom_half.poll()

    def close(self) -> None:
        with self._lock:
            if self.open_contexts.closed:
                return
            for ctx in list(self.open_contexts.by_id):
                self.close_context(ctx)
            self.open_contexts.closed = True
            self.port.disconnect_interrupt(self.engine.dla_isr_handler)
            self.port.disconnect_interrupt(self.shave.isr)
            self.bottom_half.disconnect()
            self.engine.close()
        self.engine.wake()
        self.cus.close()
        self.bottom_half.join()

    def stats(self) -> dict[str, Any]:
        self.bottom_half.drive()
        with self._lock:
            contexts = self.open_contexts.by_id.values()
            running = self.jobs.running
            return {
                "contexts": len(contexts),
                "queued": self.jobs.queued(),
                "running": running.job_id if running else None,
                "in_flight": [j.job_id for j in self.jobs.inflight],
                "buffers": sum(len(c.buffers) for c in contexts),
                "banned_contexts": sorted(c.ctx for c in contexts if c.banned is not None),
                "recovery": self.watchdog.as_dict(),
                "compute_units": self.cus.stats(),
                "shave": dict(self.shave.stats),
            }

    # -- compute units: the entry points of the compute-unit part (pydla.kmd.cu_api) --------------

    @property
    def compute_units(self) -> tuple[CuDesc, ...]:
        """The device's IP_LAYOUT, as the port described it."""
        return self.info.compute_units

    def cu_submit(self, ctx: int, cu: str, args: list[CuArg], *, timeout_ms: int | None = None,
                  pre_fences: list[Fence] | None = None,
                  post_fences: list[Fence] | None = None) -> CuExecution:
        """Queue one execution of compute unit ``cu``: :meth:`KmdComputeUnits.submit`."""
        return self.units.submit(ctx, cu, args, timeout_ms=timeout_ms, pre_fences=pre_fences,
                                 post_fences=post_fences)

    def cu_open_context(self, ctx: int, cu: str, *, exclusive: bool) -> None:
        """xclOpenContext: :meth:`KmdComputeUnits.open_context`."""
        self.units.open_context(ctx, cu, exclusive=exclusive)

    def cu_close_context(self, ctx: int, cu: str) -> None:
        """xclCloseContext: :meth:`KmdComputeUnits.close_context`."""
        self.units.close_context(ctx, cu)

    def cu_reg_read(self, ctx: int, cu: str, offset: int) -> int:
        """xclRegRead: :meth:`KmdComputeUnits.reg_read`."""
        return self.units.reg_read(ctx, cu, offset)

    def cu_reg_write(self, ctx: int, cu: str, offset: int, value: int) -> None:
        """xclRegWrite: :meth:`KmdComputeUnits.reg_write`."""
        self.units.reg_write(ctx, cu, offset, value)

    def cu_stream_write(self, ctx: int, cu: str, data: bytes, *, timeout_ms: int) -> None:
        """An AP_CTRL_NONE unit's input stream: :meth:`KmdComputeUnits.stream_write`."""
        self.units.stream_write(ctx, cu, data, timeout_ms=timeout_ms)

    def cu_stream_read(self, ctx: int, cu: str, nbytes: int, *, timeout_ms: int) -> bytes:
        """An AP_CTRL_NONE unit's output stream: :meth:`KmdComputeUnits.stream_read`."""
        return self.units.stream_read(ctx, cu, nbytes, timeout_ms=timeout_ms)
