"""``pydla kmd``: the KMD and its virtual devices in one process, serving ``DIR/dla0``, ``DIR/dla1``...
through FUSE, so that clients in other processes reach them with real ioctl(2) calls.

Each open of a device file is a KMD context (a client). The ioctls are those of the ``dla_uapi``
binary contract (:mod:`pydla.uapi.ioctl`). Buffer-object and sync-object handles are numbered across
the whole daemon, so a handle of another client is never mistaken for one of the caller's; it is
answered as a handle that does not exist (ENOENT), so that a client cannot learn which numbers others
hold. Every handle, count, offset and size a client sends is checked against the
caller's own context before anything reaches the KMD; a failed request answers an errno and leaves the
reason in LAST_ERROR. When a client closes its file, or dies, its jobs are aborted and its buffers and
sync objects freed and its CU contexts closed (RELEASE). The compute-unit commands are in
:mod:`pydla.linux.cu_handlers`. A WAIT blocks only its own request thread and is abandoned at once when
the caller is killed (FUSE_INTERRUPT).

Buffer memory is the client's own memfd, which the daemon takes with pidfd_getfd (see
:mod:`pydla.uapi.shm`): a client never holds a way to reach another's buffers. What one open file may
hold is bounded (:class:`Quotas`: buffers, bytes, sync objects, WAITs in progress) and one WAIT blocks
a request thread at most ``max_wait_ms``, so that no client can exhaust the daemon for the others.

Beside the device files, ``DIR/status`` is a read-only JSON document of the daemon's state (versions,
configuration, clients, job counts, uptime: :mod:`pydla.linux.status`), which ``pydla devices``
reads. Serving refuses a non-empty directory and clears a stale mount a killed daemon left there.

Usage::

    daemon = KmdDaemon("full")
    with daemon.serve("/run/pydla"):          # /run/pydla/dla0, /run/pydla/dla1, /run/pydla/status
        ...
    # or from a shell: pydla kmd --mount /run/pydla
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydla._version import __version__
from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.kmd.port import AddressEntry
from pydla.kmd.recovery import DEFAULT_TDR_MS
from pydla.kmd.sync import TimelineSemaphore
from pydla.linux.clients import Client, DeviceFile, Quotas
from pydla.linux.cu_handlers import cu_handlers
from pydla.linux.fuse_context import FuseError, RequestContext
from pydla.linux.fuse_mount import FuseMountError, resolve_mountpoint
from pydla.linux.fuse_server import FuseServer
from pydla.linux.process_memory import read_process_memory, take_process_fd
from pydla.linux.ring_server import RingServer, ServedRing, set_up_ring
from pydla.linux.status import STATUS_FILE, JobCounter, StatusFile, status_document
from pydla.linux.trace_handlers import TraceHandlers, trace_handlers
from pydla.platform import ConfigLike, Platform
from pydla.uapi.ioctl import (
    BY_COMMAND,
    ERRNO,
    INLINE_FENCES,
    MAX_ADDRESSES,
    MAX_FENCES,
    MAX_SCALARS,
    MAX_STREAM_BYTES,
    STRUCTS,
    text,
    untext,
)
from pydla.uapi.shm import check_shared_fd

__all__ = ["Client", "KmdDaemon", "Quotas", "register"]
log = logging.getLogger("pydla.linux.daemon")
T = TypeVar("T")
WAIT_SLICE_S = 0.05  # how often a WAIT on a deterministic device drives its driver
MAX_WAIT_MS = 1000  # the longest one WAIT blocks a request thread; clients repeat longer waits
FS_NAME = "pydla"  # the mounts' source; their type is fuse.pydla (how `pydla devices` finds daemons)


class KmdDaemon:
    """The devices of configuration ``config`` (one per instance, from the composition root), their
    drivers, and the clients. What the daemon reports of a device is its driver's knowledge of it."""

    trace_handlers: TraceHandlers  # set by pydla.linux.trace_handlers.trace_handlers

    def __init__(self, config: ConfigLike = "full", *, mode: str = "threaded",
                 default_timeout_ms: int = 10_000, quotas: Quotas | None = None,
                 max_wait_ms: int = MAX_WAIT_MS, threads: int = 4,
                 tdr_ms: int = DEFAULT_TDR_MS) -> None:
        self.platform = Platform(config, mode=mode, default_timeout_ms=default_timeout_ms, tdr_ms=tdr_ms)
        probed = self.platform.probe_all()
        self.devices = [p.device for p in probed]  # for tests and diagnostics; served through the KMDs
        self.kmds = [p.kmd for p in probed]
        self.memory_bytes = self.kmds[0].info.memory_bytes  # every instance has the same configuration
        quotas = quotas or Quotas()
        if quotas.bytes is None:
            quotas = Quotas(quotas.buffers, self.memory_bytes // 2, quotas.syncs, quotas.waits)
        self.quotas, self.max_wait_ms, self.threads = quotas, max_wait_ms, threads
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._clients: set[Client] = set()
        self._buffers: dict[int, Client] = {}  # daemon handle -> owner
        self._syncs: dict[int, Client] = {}
        self._handlers: dict[int, Any] = {
            U.dla_ioctl_e.HANDSHAKE: self._handshake, U.dla_ioctl_e.GET_PARAM: self._get_param,
            U.dla_ioctl_e.BO_CREATE: self._bo_create, U.dla_ioctl_e.BO_INFO: self._bo_info,
            U.dla_ioctl_e.BO_DESTROY: self._bo_destroy, U.dla_ioctl_e.SUBMIT: self._submit,
            U.dla_ioctl_e.WAIT: self._wait, U.dla_ioctl_e.SYNC_CREATE: self._sync_create,
            U.dla_ioctl_e.SYNC_SIGNAL: self._sync_signal, U.dla_ioctl_e.SYNC_QUERY: self._sync_query,
            U.dla_ioctl_e.SYNC_DESTROY: self._sync_destroy, U.dla_ioctl_e.PREPARE: self._prepare,
            U.dla_ioctl_e.SUBMIT_PREPARED: self._submit_prepared, U.dla_ioctl_e.PREPARE_ARGS: self._prepare,
            U.dla_ioctl_e.RELEASE_PREPARED: self._release_prepared,
            U.dla_ioctl_e.RING_SETUP: self._ring_setup,
        }
        self._handlers.update(cu_handlers(self))  # CU contexts, registers, streams, IP_LAYOUT (2.5)
        self._handlers.update(trace_handlers(self))  # the device's trace ring (2.8)
        self._rings = RingServer(self._ring_submit)
        self.jobs = JobCounter(len(self.kmds))
        self.started = time.time()
        self._started_monotonic = time.monotonic()
        self.mountpoint: str | None = None  # where serve() (or `pydla kmd`) serves the files

    # -- serving ---------------------------------------------------------------------------------

    def files(self) -> dict[str, Any]:
        """What the daemon serves: ``dla0``, ``dla1``... and the read-only ``status`` document."""
        files: dict[str, Any] = {f"dla{i}": DeviceFile(self, i) for i in range(len(self.kmds))}
        files[STATUS_FILE] = StatusFile(self.status)
        return files

    def server(self, mountpoint: str | os.PathLike[str]) -> FuseServer:
        """An unstarted FUSE server for this daemon's files at ``mountpoint``."""
        self.mountpoint = resolve_mountpoint(mountpoint)
        return FuseServer(mountpoint, self.files(), threads=self.threads, name=FS_NAME)

    def serve(self, mountpoint: str | os.PathLike[str]) -> FuseServer:
        """A started FUSE server for this daemon's files (``with`` stops and unmounts it). A stale
        mount a killed daemon left at ``mountpoint`` is cleared first; a non-empty directory, a live
        mount or another file system's stale mount is refused (DlaError ResourceError, saying why
        and what to do)."""
        server = self.server(mountpoint)
        try:
            return server.start()
        except FuseMountError as e:
            raise DlaError(NvError.ResourceError, str(e)) from None

    def status(self) -> dict[str, Any]:
        """The document ``DIR/status`` serves (:func:`pydla.linux.status.status_document`)."""
        return status_document(self)

    @property
    def uptime(self) -> float:
        """Seconds since the daemon was made."""
        return time.monotonic() - self._started_monotonic

    def client_rows(self) -> list[dict[str, Any]]:
        """What each open device file holds, snapshot under the daemon's lock (for the status)."""
        with self._lock:
            return [{"client": c, "pid": c.pid, "device": c.device, "buffers": len(c.buffers),
                     "buffer_bytes": c.bytes, "syncs": len(c.syncs), "waits": c.waits,
                     "ring": isinstance(c.ring, ServedRing)} for c in self._clients]

    def close(self) -> None:
        with self._lock:
            clients = list(self._clients)
        for c in clients:
            self.release(c)
        self._rings.close()
        self.platform.close()

    def counts(self) -> dict[str, int]:
        """Open clients, buffer objects and sync objects (for leak checks)."""
        with self._lock:
            return {"clients": len(self._clients), "buffers": len(self._buffers), "syncs": len(self._syncs)}

    # -- clients ---------------------------------------------------------------------------------

    def open_client(self, device: int, pid: int) -> Client:
        kmd = self.kmds[device]
        client = Client(device, kmd, kmd.open_context(), pid)
        with self._lock:
            self._clients.add(client)
        log.info("client pid %d opened dla%d (context %d)", pid, device, client.ctx)
        return client

    def release(self, client: Client) -> None:
        """The client's file is closed (or the client died): abort its jobs, free what it made."""
        with self._lock:
            if client.closed:
                return
            client.closed = True
            self._clients.discard(client)
            for h in client.buffers:
                self._buffers.pop(h, None)
            for s in client.syncs:
                self._syncs.pop(s, None)
            ring, client.ring = client.ring, None
        if isinstance(ring, ServedRing):
            self._rings.remove(ring)  # before the abort below: no answers into a closed ring
        error = DlaError(NvError.Disconnected, f"client {client.pid} closed its device file")
        for sem in client.syncs.values():
            sem.fail(error)
        self.trace_handlers.forget(client)  # its traces stop (their contexts are the driver's)
        try:
            client.kmd.close_context(client.ctx)  # aborts its jobs and frees its buffers
        except DlaError as e:
            log.warning("closing the context of client %d: %s", client.pid, e)
        client.buffers.clear()
        client.syncs.clear()
        self.jobs.forget(client)
        log.info("client pid %d closed dla%d (context %d)", client.pid, client.device, client.ctx)

    def ioctl(self, client: Client, ctx: RequestContext, cmd: int, data: bytes) -> tuple[int, bytes]:
        nr = BY_COMMAND.get(cmd)
        if nr is None:
            client.last_error = f"ioctl {cmd:#x} is not a pydla command"
            raise FuseError(errno.ENOTTY, client.last_error)
        struct = STRUCTS[nr]
        if len(data) != ctypes.sizeof(struct):
            client.last_error = f"{U.dla_ioctl_e(nr).name}: {len(data)} bytes, not {ctypes.sizeof(struct)}"
            raise FuseError(errno.EINVAL, client.last_error)
        if not client.compatible and nr != U.dla_ioctl_e.HANDSHAKE:
            client.last_error = "HANDSHAKE first: versions were not agreed"
            raise FuseError(errno.EPROTO, client.last_error)
        args = struct.from_buffer_copy(data)
        try:
            result = self._handlers[nr](client, ctx, args)
        except DlaError as e:
            client.last_error = e.message
            raise FuseError(ERRNO.get(e.code, errno.EIO), client.last_error) from None
        except FuseError as e:
            client.last_error = e.message
            raise
        return result, bytes(args)

    # -- handles -----------------------------------------------------------------------------------

    def _own(self, client: Client, handle: int, table: dict[int, Client], what: str) -> None:
        # Under self._lock (a concurrent destroy or release must not slip between check and use).
        # One answer for "nobody's" and "another client's": a different one would let a client probe
        # which handle numbers the others hold.
        owner = table.get(handle)
        if owner is None or owner.closed or owner is not client:
            raise FuseError(errno.ENOENT, f"{what} {handle} is not one of this client's")

    def _buffer(self, client: Client, handle: int) -> int:
        with self._lock:
            self._own(client, handle, self._buffers, "buffer object")
            entry = client.buffers.get(handle)
        if entry is None:
            raise FuseError(errno.ENOENT, f"buffer object {handle} is not one of this client's")
        return entry[0]

    def _sync(self, client: Client, handle: int) -> TimelineSemaphore:
        with self._lock:
            self._own(client, handle, self._syncs, "sync object")
            sem = client.syncs.get(handle)
        if sem is None:
            raise FuseError(errno.ENOENT, f"sync object {handle} is not one of this client's")
        return sem

    # -- commands ----------------------------------------------------------------------------------

    def _handshake(self, client: Client, ctx: RequestContext, a: Any) -> int:
        # The same major version agrees; at the very same version, so must the layout hash.
        theirs = (a.major, a.minor, a.patch)
        same_layout = a.layout_hash64 == U.LAYOUT_HASH64
        client.compatible = a.major == U.VERSION[0] and (theirs != U.VERSION or same_layout)
        a.major, a.minor, a.patch = U.VERSION
        a.layout_hash64 = U.LAYOUT_HASH64
        a.package_version = text(__version__, 32)
        return 0

    def _get_param(self, client: Client, ctx: RequestContext, a: Any) -> int:
        p = U.dla_param_e
        q = self.quotas
        info = client.kmd.info
        values = {p.NUM_DEVICES: len(self.kmds), p.DEVICE_INDEX: client.device,
                  p.HW_VERSION: info.hw_version, p.BLOCK_MASK: sum(1 << int(b) for b in info.blocks),
                  p.PRECISION_MASK: sum(1 << int(x) for x in info.precisions),
                  p.MEMORY_BYTES: info.memory_bytes, p.DAEMON_PID: os.getpid(),
                  p.MAX_WAIT_MS: self.max_wait_ms, p.QUOTA_BUFFERS: q.buffers, p.QUOTA_BYTES: q.bytes,
                  p.QUOTA_SYNCS: q.syncs, p.QUOTA_WAITS: q.waits,
                  p.NUM_CUS: len(client.kmd.compute_units), p.MAX_STREAM_BYTES: MAX_STREAM_BYTES}
        texts = {p.CONFIG_NAME: info.name, p.LAST_ERROR: client.last_error}
        if a.param in values:
            a.value = values[a.param]
        elif a.param in texts:
            a.text = text(texts[a.param], 192)
        else:
            raise FuseError(errno.EINVAL, f"GET_PARAM: parameter {a.param} is unknown")
        return 0

    def _reserve(self, client: Client, size: int) -> None:
        """Count a new buffer of ``size`` bytes against the client's quotas (under self._lock)."""
        q = self.quotas
        if len(client.buffers) >= q.buffers:
            raise FuseError(errno.EDQUOT, f"BO_CREATE: this file holds {len(client.buffers)} buffer "
                                          f"objects, its quota")
        assert q.bytes is not None
        if client.bytes + size > q.bytes:
            raise FuseError(errno.EDQUOT, f"BO_CREATE: {size} bytes more than the {client.bytes} this "
                                          f"file holds exceeds its quota of {q.bytes}")
        client.bytes += size

    def _bo_create(self, client: Client, ctx: RequestContext, a: Any) -> int:
        size = int(a.size)
        if not 0 < size <= self.memory_bytes:
            raise FuseError(errno.EINVAL, f"BO_CREATE: size {size} (1..{self.memory_bytes})")
        with self._lock:
            self._reserve(client, size)
        try:
            try:
                fd = take_process_fd(ctx.pid, int(a.fd))
            except OSError as e:
                raise FuseError(errno.EBADF, f"BO_CREATE: descriptor {a.fd} of process {ctx.pid}: "
                                             f"{os.strerror(e.errno or 0)}") from None
            try:
                check_shared_fd(fd, size)
            except ValueError as e:
                os.close(fd)
                raise FuseError(errno.EINVAL, f"BO_CREATE: descriptor {a.fd}: {e}") from None
            handle = client.kmd.bo_create(client.ctx, size, fd=fd)  # owns fd from here on
        except BaseException:
            with self._lock:
                client.bytes -= size
            raise
        gid = next(self._ids)
        with self._lock:
            client.buffers[gid] = (handle, size)
            self._buffers[gid] = client
        a.handle, a.fd = gid, -1
        a.iova = client.kmd.bo_iova(client.ctx, handle)
        return 0

    def _bo_info(self, client: Client, ctx: RequestContext, a: Any) -> int:
        handle = self._buffer(client, a.handle)
        a.size = client.kmd.bo_size(client.ctx, handle)
        a.iova = client.kmd.bo_iova(client.ctx, handle)
        return 0

    def _bo_destroy(self, client: Client, ctx: RequestContext, a: Any) -> int:
        handle = self._buffer(client, a.handle)
        client.kmd.bo_destroy(client.ctx, handle)  # Busy while a job uses it
        with self._lock:
            entry = client.buffers.pop(a.handle, None)
            self._buffers.pop(a.handle, None)
            if entry is not None:
                client.bytes -= entry[1]
        return 0

    def _read_array(self, ctx: RequestContext, address: int, count: int, cls: Any, limit: int,
                    what: str, command: str = "SUBMIT") -> list[Any]:
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

    def _fences(self, client: Client, fences: list[Any]) -> list[tuple[TimelineSemaphore, int]]:
        return [(self._sync(client, f.sync), int(f.value)) for f in fences]

    def _inline_fences(self, client: Client, a: Any) -> tuple[list[tuple[TimelineSemaphore, int]],
                                                               list[tuple[TimelineSemaphore, int]]]:
        """The pre- and post-fences a struct carries inline (its counts checked by the caller)."""
        pre = self._fences(client, a.pre_fences[:a.num_pre_fences]) if a.num_pre_fences else []
        post = self._fences(client, a.post_fences[:a.num_post_fences]) if a.num_post_fences else []
        return pre, post

    def _submit(self, client: Client, ctx: RequestContext, a: Any) -> int:
        entries = self._read_array(ctx, a.addresses, a.num_addresses, U.dla_address_t, MAX_ADDRESSES,
                                   "addresses")
        if not entries:
            raise FuseError(errno.EINVAL, "SUBMIT: the address list is empty")
        pre = self._read_array(ctx, a.pre_fences, a.num_pre_fences, U.dla_fence_t, MAX_FENCES, "pre-fences")
        post = self._read_array(ctx, a.post_fences, a.num_post_fences, U.dla_fence_t, MAX_FENCES,
                                "post-fences")
        addresses = [AddressEntry(self._buffer(client, e.handle), int(e.offset), int(e.size) or None)
                     for e in entries]
        job = client.kmd.submit(client.ctx, addresses, priority=a.priority,
                                timeout_ms=a.timeout_ms or None, pre_fences=self._fences(client, pre),
                                post_fences=self._fences(client, post))
        self.jobs.watch(client, job)
        a.task_id = job.job_id
        a.completed = int(job.signalled)
        return 0

    def _prepare(self, client: Client, ctx: RequestContext, a: Any) -> int:
        """PREPARE, and PREPARE_ARGS (the same with the task's scalar arguments)."""
        what = "PREPARE_ARGS" if isinstance(a, U.dla_prepare_args_t) else "PREPARE"
        entries = self._read_array(ctx, a.addresses, a.num_addresses, U.dla_address_t, MAX_ADDRESSES,
                                   "addresses", what)
        if not entries:
            raise FuseError(errno.EINVAL, f"{what}: the address list is empty")
        scalars: list[tuple[int, int]] = []
        if what == "PREPARE_ARGS":
            scalars = [(int(s.argidx), int(s.value)) for s in self._read_array(
                ctx, a.scalars, a.num_scalars, U.dla_scalar_t, MAX_SCALARS, "scalars", what)]
        addresses = [AddressEntry(self._buffer(client, e.handle), int(e.offset), int(e.size) or None)
                     for e in entries]
        a.prepared = client.kmd.prepare(client.ctx, addresses, scalars)
        return 0

    def _submit_prepared(self, client: Client, ctx: RequestContext, a: Any) -> int:
        """Nothing is read from the caller's memory: the fences are in the struct."""
        job = self._queue_prepared(client, a, None, "SUBMIT_PREPARED")
        a.task_id = job.job_id
        a.completed = int(job.signalled)
        return 0

    def _queue_prepared(self, client: Client, a: Any, on_done: Callable[[Any], None] | None,
                        what: str) -> Any:
        """Queue prepared task ``a.prepared`` with the fences in ``a`` (a dla_submit_prepared_t or a
        ring's dla_ring_sqe_t); the KMD's job."""
        if not (0 <= a.num_pre_fences <= INLINE_FENCES and 0 <= a.num_post_fences <= INLINE_FENCES):
            raise FuseError(errno.EINVAL, f"{what}: {a.num_pre_fences} and {a.num_post_fences} "
                                          f"fences (at most {INLINE_FENCES} each; more: SUBMIT)")
        pre, post = self._inline_fences(client, a)
        kmd = client.kmd
        try:
            job = kmd.submit_prepared(client.ctx, a.prepared, priority=a.priority,
                                      timeout_ms=a.timeout_ms or None, pre_fences=pre, post_fences=post,
                                      on_done=self.jobs.hook(on_done))
            self.jobs.submitted(client, job)
            return job
        except DlaError as e:
            if e.code == NvError.BadParameter and a.prepared not in kmd.prepared_ids(client.ctx):
                raise FuseError(errno.ENOENT, f"{what}: prepared task {a.prepared} does not "
                                              "exist (released, or dropped with a buffer it used)") from None
            raise

    def _ring_submit(self, client: Client, sqe: Any, on_done: Callable[[Any], None]) -> Any:
        """A ring entry, queued as SUBMIT_PREPARED would queue it; the reason of a refusal is the
        client's LAST_ERROR, as after a failed ioctl."""
        try:
            if client.closed:
                raise FuseError(errno.EBADF, "SUBMIT_PREPARED (ring): the file is closed")
            return self._queue_prepared(client, sqe, on_done, "SUBMIT_PREPARED (ring)")
        except DlaError as e:
            client.last_error = e.message
            raise
        except FuseError as e:
            client.last_error = e.message
            raise

    def _ring_setup(self, client: Client, ctx: RequestContext, a: Any) -> int:
        set_up_ring(self._rings, self._lock, client, ctx.pid, a)
        return 0

    def _release_prepared(self, client: Client, ctx: RequestContext, a: Any) -> int:
        client.kmd.release_prepared(client.ctx, a.prepared)
        return 0

    def _counted(self, client: Client, command: str, call: Callable[[], T], counted: str = "WAITs") -> T:
        """``call()`` counted as one of the file's WAITs in progress (its quota bounds them: EAGAIN
        beyond, naming what is ``counted``)."""
        with self._lock:
            if client.waits >= self.quotas.waits:
                raise FuseError(errno.EAGAIN, f"{command}: {client.waits} {counted} of this file are in "
                                              "progress (its quota); try again")
            client.waits += 1
        try:
            return call()
        finally:
            with self._lock:
                client.waits -= 1

    def _wait(self, client: Client, ctx: RequestContext, a: Any) -> int:
        sem = self._sync(client, a.fence.sync)
        return self._counted(client, "WAIT", lambda: self._wait_fence(client, ctx, a, sem))

    def _wait_fence(self, client: Client, ctx: RequestContext, a: Any, sem: TimelineSemaphore) -> int:
        value, timeout_ms = int(a.fence.value), min(int(a.timeout_ms), self.max_wait_ms)
        ctx.on_interrupt(sem.wake)
        polled = client.kmd.info.mode != "threaded"
        deadline = timeout_ms / 1000
        try:
            while True:
                if polled:
                    client.kmd.poll()
                slice_ms = min(deadline, WAIT_SLICE_S) * 1000 if polled else deadline * 1000
                try:
                    sem.wait(value, slice_ms, abort=lambda: ctx.is_interrupted or client.closed)
                    a.status, a.message = 0, b""
                    return 0
                except DlaError as e:
                    if e.code == NvError.Timeout and polled and deadline > WAIT_SLICE_S:
                        deadline -= WAIT_SLICE_S
                        continue
                    raise
        except DlaError as e:
            if ctx.is_interrupted:
                raise FuseError(errno.EINTR, "WAIT interrupted") from None
            a.status = int(e.code)
            a.message = text(e.message, 192)
            return 0

    def _sync_create(self, client: Client, ctx: RequestContext, a: Any) -> int:
        sem = TimelineSemaphore(int(a.initial))
        gid = next(self._ids)
        with self._lock:
            if len(client.syncs) >= self.quotas.syncs:
                raise FuseError(errno.EDQUOT, f"SYNC_CREATE: this file holds {len(client.syncs)} sync "
                                              "objects, its quota")
            client.syncs[gid] = sem
            self._syncs[gid] = client
        a.sync = gid
        return 0

    def _sync_signal(self, client: Client, ctx: RequestContext, a: Any) -> int:
        sem = self._sync(client, a.fence.sync)
        if a.status == 0:
            sem.signal(int(a.fence.value))
        else:
            code = NvError(a.status) if a.status in NvError._value2member_map_ else NvError.ResourceError
            sem.fail(DlaError(code, untext(bytes(a.message)) or "failed by the application"))
        return 0

    def _sync_query(self, client: Client, ctx: RequestContext, a: Any) -> int:
        sem = self._sync(client, a.sync)
        a.value = sem.value
        a.status = int(sem.error.code) if sem.error is not None else 0
        return 0

    def _sync_destroy(self, client: Client, ctx: RequestContext, a: Any) -> int:
        self._sync(client, a.sync)
        with self._lock:
            client.syncs.pop(a.sync, None)
            self._syncs.pop(a.sync, None)
        return 0


# -- the command ---------------------------------------------------------------------------------------


def register(commands: Any) -> None:
    """Add ``pydla kmd`` (:mod:`pydla.linux.kmd_command`) to the ``pydla`` command."""
    from pydla.linux import kmd_command

    kmd_command.register(commands)
