"""The daemon's task commands: SUBMIT (its address and fence arrays read from the caller's memory
during the call), PREPARE and PREPARE_ARGS (the KMD validates a task once and keeps it),
SUBMIT_PREPARED (the fences in the struct: nothing read from the caller), RELEASE_PREPARED, and
RING_SETUP with the ring's entries, which are queued as SUBMIT_PREPARED would queue them
(:mod:`pydla.linux.ring_server`).

Every count is bounded before an array is read (EINVAL beyond), an address the caller cannot give is
EFAULT, and every buffer and sync object named must be the caller's own (ENOENT, as for one that does
not exist). A prepared task the KMD dropped (a buffer it used was destroyed) is ENOENT, so that the
client prepares it again.

Usage (inside :class:`~pydla.linux.daemon.KmdDaemon`)::

    self.submits = SubmitHandlers(self)
    self._handlers.update(self.submits.handlers())
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.kmd.port import AddressEntry
from pydla.linux.clients import Client
from pydla.linux.fuse_context import FuseError, RequestContext
from pydla.linux.process_memory import read_process_memory
from pydla.linux.ring_server import RingServer, set_up_ring
from pydla.uapi.ioctl import INLINE_FENCES, MAX_ADDRESSES, MAX_FENCES, MAX_SCALARS

if TYPE_CHECKING:
    from pydla.linux.daemon import KmdDaemon


def read_array(ctx: RequestContext, address: int, count: int, cls: Any, limit: int, what: str,
               command: str = "SUBMIT") -> list[Any]:
    """``count`` structs ``cls`` at ``address`` in the caller's memory (at most ``limit``: EINVAL;
    memory it cannot give: EFAULT), copied."""
    if not 0 <= count <= limit:
        raise FuseError(errno.EINVAL, f"{command}: {count} {what} (at most {limit})")
    if count == 0:
        return []
    size = ctypes.sizeof(cls)
    try:
        raw = read_process_memory(ctx.pid, address, count * size)
    except OSError as e:
        reason = os.strerror(e.errno or 0)
        raise FuseError(errno.EFAULT, f"{command}: {what} at {address:#x}: {reason}") from None
    return [cls.from_buffer_copy(raw, i * size) for i in range(count)]


class SubmitHandlers:
    """The handlers and the ring server; ``daemon`` provides the client table, the sync handlers
    (fences) and the job counter."""

    def __init__(self, daemon: KmdDaemon) -> None:
        self.daemon = daemon
        self.clients = daemon.clients
        self.rings = RingServer(self.ring_submit)  # takes the entries of every file's ring

    def handlers(self) -> dict[int, Callable[[Client, RequestContext, Any], int]]:
        """For the daemon's table."""
        e = U.dla_ioctl_e
        return {e.SUBMIT: self.submit, e.PREPARE: self.prepare, e.PREPARE_ARGS: self.prepare,
                e.PREPARE_NVDLA: self.prepare,
                e.SUBMIT_PREPARED: self.submit_prepared, e.RELEASE_PREPARED: self.release_prepared,
                e.RING_SETUP: self.ring_setup}

    def _addresses(self, client: Client, entries: list[Any]) -> list[AddressEntry]:
        return [AddressEntry(self.clients.buffer(client, e.handle), int(e.offset), int(e.size) or None)
                for e in entries]

    def submit(self, client: Client, ctx: RequestContext, a: Any) -> int:
        entries = read_array(ctx, a.addresses, a.num_addresses, U.dla_address_t, MAX_ADDRESSES, "addresses")
        if not entries:
            raise FuseError(errno.EINVAL, "SUBMIT: the address list is empty")
        pre = read_array(ctx, a.pre_fences, a.num_pre_fences, U.dla_fence_t, MAX_FENCES, "pre-fences")
        post = read_array(ctx, a.post_fences, a.num_post_fences, U.dla_fence_t, MAX_FENCES, "post-fences")
        syncs = self.daemon.syncs
        job = client.kmd.submit(client.ctx, self._addresses(client, entries), priority=a.priority,
                                timeout_ms=a.timeout_ms or None, pre_fences=syncs.fences(client, pre),
                                post_fences=syncs.fences(client, post))
        self.daemon.jobs.watch(client, job)
        a.task_id = job.job_id
        a.completed = int(job.signalled)
        return 0

    def prepare(self, client: Client, ctx: RequestContext, a: Any) -> int:
        """PREPARE, PREPARE_ARGS (the same with the task's scalar arguments) and PREPARE_NVDLA (an
        NVDLA Loadable's DLA task with its firmware interface version, uAPI 2.10)."""
        kinds = {U.dla_prepare_args_t: "PREPARE_ARGS", U.dla_prepare_nvdla_t: "PREPARE_NVDLA"}
        what = kinds.get(type(a), "PREPARE")
        nvdla_interface = None
        if what == "PREPARE_NVDLA":
            if a.reserved or a.reserved2:
                raise FuseError(errno.EINVAL, f"PREPARE_NVDLA: reserved = {a.reserved}, reserved2 = "
                                              f"{a.reserved2}: must be 0")
            nvdla_interface = (int(a.interface_major), int(a.interface_minor), int(a.interface_sub_minor))
        entries = read_array(ctx, a.addresses, a.num_addresses, U.dla_address_t, MAX_ADDRESSES,
                             "addresses", what)
        if not entries:
            raise FuseError(errno.EINVAL, f"{what}: the address list is empty")
        scalars: list[tuple[int, int]] = []
        if what == "PREPARE_ARGS":
            scalars = [(int(s.argidx), int(s.value)) for s in read_array(
                ctx, a.scalars, a.num_scalars, U.dla_scalar_t, MAX_SCALARS, "scalars", what)]
        a.prepared = client.kmd.prepare(client.ctx, self._addresses(client, entries), scalars,
                                        nvdla_interface=nvdla_interface)
        return 0

    def submit_prepared(self, client: Client, ctx: RequestContext, a: Any) -> int:
        """Nothing is read from the caller's memory: the fences are in the struct."""
        # Through the daemon's _queue_prepared: the one place ring entries and ioctls meet.
        job = self.daemon._queue_prepared(client, a, None, "SUBMIT_PREPARED")
        a.task_id = job.job_id
        a.completed = int(job.signalled)
        return 0

    def queue_prepared(self, client: Client, a: Any, on_done: Callable[[Any], None] | None,
                       what: str) -> Any:
        """Queue prepared task ``a.prepared`` with the fences in ``a`` (a dla_submit_prepared_t or a
        ring's dla_ring_sqe_t); the KMD's job."""
        if not (0 <= a.num_pre_fences <= INLINE_FENCES and 0 <= a.num_post_fences <= INLINE_FENCES):
            raise FuseError(errno.EINVAL, f"{what}: {a.num_pre_fences} and {a.num_post_fences} "
                                          f"fences (at most {INLINE_FENCES} each; more: SUBMIT)")
        pre, post = self.daemon.syncs.inline_fences(client, a)
        kmd, jobs = client.kmd, self.daemon.jobs
        try:
            job = kmd.submit_prepared(client.ctx, a.prepared, priority=a.priority,
                                      timeout_ms=a.timeout_ms or None, pre_fences=pre, post_fences=post,
                                      on_done=jobs.hook(on_done))
            jobs.submitted(client, job)
            return job
        except DlaError as e:
            if e.code == NvError.BadParameter and a.prepared not in kmd.prepared_ids(client.ctx):
                raise FuseError(errno.ENOENT, f"{what}: prepared task {a.prepared} does not "
                                              "exist (released, or dropped with a buffer it used)") from None
            raise

    def ring_submit(self, client: Client, sqe: Any, on_done: Callable[[Any], None]) -> Any:
        """A ring entry, queued as SUBMIT_PREPARED would queue it; the reason of a refusal is the
        client's LAST_ERROR, as after a failed ioctl."""
        try:
            if client.closed:
                raise FuseError(errno.EBADF, "SUBMIT_PREPARED (ring): the file is closed")
            return self.daemon._queue_prepared(client, sqe, on_done, "SUBMIT_PREPARED (ring)")
        except DlaError as e:
            client.last_error = e.message
            raise
        except FuseError as e:
            client.last_error = e.message
            raise

    def ring_setup(self, client: Client, ctx: RequestContext, a: Any) -> int:
        set_up_ring(self.rings, self.clients.lock, client, ctx.pid, a)
        return 0

    def release_prepared(self, client: Client, ctx: RequestContext, a: Any) -> int:
        client.kmd.release_prepared(client.ctx, a.prepared)
        return 0
