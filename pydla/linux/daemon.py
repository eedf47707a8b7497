"""``pydla kmd``: the KMD and its virtual devices in one process, serving ``DIR/dla0``, ``DIR/dla1``...
through FUSE, so that clients in other processes reach them with real ioctl(2) calls.

Each open of a device file is a KMD context (a client). The ioctls are those of the ``dla_uapi``
binary contract (:mod:`pydla.uapi.ioctl`). Every handle, count, offset and size a client sends is
checked against the caller's own context before anything reaches the KMD; a failed request answers an
errno and leaves the reason in LAST_ERROR. When a client closes its file, or dies, its jobs are
aborted and its buffers and sync objects freed and its CU contexts closed (RELEASE). What one open
file may hold is bounded (:class:`Quotas`: buffers, bytes, sync objects, WAITs in progress) and one
WAIT blocks a request thread at most ``max_wait_ms``, so that no client can exhaust the daemon for the
others.

The daemon answers HANDSHAKE and GET_PARAM itself and hands every other command to the part that has
its concern, as a Linux accel driver splits its ioctls by file: the open files, their handles and
quotas (:class:`~pydla.linux.clients.ClientTable`), buffer objects
(:mod:`~pydla.linux.buffer_handlers`), sync objects and WAIT (:mod:`~pydla.linux.sync_handlers`), tasks
and submission rings (:mod:`~pydla.linux.submit_handlers`), compute units
(:mod:`~pydla.linux.cu_handlers`) and traces (:mod:`~pydla.linux.trace_handlers`); the FUSE request
loop is :class:`~pydla.linux.fuse_server.FuseServer`'s.

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
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from pydla._version import __version__
from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.kmd.recovery import DEFAULT_TDR_MS
from pydla.linux.buffer_handlers import BufferHandlers
from pydla.linux.clients import Client, ClientTable, DeviceFile, Quotas
from pydla.linux.cu_handlers import cu_handlers
from pydla.linux.fuse_context import FuseError, RequestContext
from pydla.linux.fuse_mount import FuseMountError, resolve_mountpoint
from pydla.linux.fuse_server import FuseServer
from pydla.linux.ring_server import ServedRing
from pydla.linux.status import STATUS_FILE, JobCounter, StatusFile, status_document
from pydla.linux.submit_handlers import SubmitHandlers
from pydla.linux.sync_handlers import WAIT_SLICE_S, SyncHandlers
from pydla.linux.trace_handlers import TraceHandlers, trace_handlers
from pydla.platform import ConfigLike, Platform
from pydla.uapi.ioctl import BY_COMMAND, ERRNO, MAX_STREAM_BYTES, STRUCTS, text

__all__ = ["WAIT_SLICE_S", "Client", "KmdDaemon", "Quotas", "register"]
log = logging.getLogger("pydla.linux.daemon")
MAX_WAIT_MS = 1000  # the longest one WAIT blocks a request thread; clients repeat longer waits
FS_NAME = "pydla"  # the mounts' source; their type is fuse.pydla (how `pydla devices` finds daemons)
Handler = Callable[[Client, RequestContext, Any], int]


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
        self.jobs = JobCounter(len(self.kmds))
        # Its parts: the open files and their handles, then a part per concern of the commands.
        self.clients = ClientTable(quotas)
        self.buffers = BufferHandlers(self)
        self.syncs = SyncHandlers(self)
        self.submits = SubmitHandlers(self)
        self._rings = self.submits.rings
        self._handlers: dict[int, Handler] = {U.dla_ioctl_e.HANDSHAKE: self._handshake,
                                              U.dla_ioctl_e.GET_PARAM: self._get_param}
        self._handlers.update(self.buffers.handlers())
        self._handlers.update(self.syncs.handlers())
        self._handlers.update(self.submits.handlers())  # with RING_SETUP (2.4)
        self._handlers.update(cu_handlers(self))  # CU contexts, registers, streams, IP_LAYOUT (2.5)
        self._handlers.update(trace_handlers(self))  # the device's trace ring (2.8)
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
        """What each open device file holds, snapshot under the client table's lock (for the status)."""
        return self.clients.rows(lambda c: isinstance(c.ring, ServedRing))

    def close(self) -> None:
        for c in self.clients.all():
            self.release(c)
        self._rings.close()
        self.platform.close()

    def counts(self) -> dict[str, int]:
        """Open clients, buffer objects and sync objects (for leak checks)."""
        return self.clients.counts()

    # -- clients ---------------------------------------------------------------------------------

    def open_client(self, device: int, pid: int) -> Client:
        kmd = self.kmds[device]
        client = Client(device, kmd, kmd.open_context(), pid)
        self.clients.add(client)
        log.info("client pid %d opened dla%d (context %d)", pid, device, client.ctx)
        return client

    def release(self, client: Client) -> None:
        """The client's file is closed (or the client died): abort its jobs, free what it made."""
        removed, ring = self.clients.remove(client)
        if not removed:
            return
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

    # -- the daemon's own commands -------------------------------------------------------------------

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

    def _queue_prepared(self, client: Client, a: Any, on_done: Callable[[Any], None] | None,
                        what: str) -> Any:
        """:meth:`SubmitHandlers.queue_prepared`: the one place ring entries and SUBMIT_PREPARED
        ioctls meet (what a test counts, or a load test's ledger watches)."""
        return self.submits.queue_prepared(client, a, on_done, what)


# -- the command ---------------------------------------------------------------------------------------


def register(commands: Any) -> None:
    """Add ``pydla kmd`` (:mod:`pydla.linux.kmd_command`) to the ``pydla`` command."""
    from pydla.linux import kmd_command

    kmd_command.register(commands)
