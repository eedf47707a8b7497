"""What the daemon keeps per open device file (:class:`Client`), the limits on it (:class:`Quotas`),
the table of open files and the handles they made (:class:`ClientTable`), and the FileHandler of
``dla<N>`` (:class:`DeviceFile`) that turns FUSE requests into daemon calls.

Buffer-object and sync-object handles are numbered across the whole daemon, so a handle of another
client is never mistaken for one of the caller's; it is answered as a handle that does not exist
(ENOENT), so that a client cannot learn which numbers others hold.

Usage::

    files = {f"dla{i}": DeviceFile(daemon, i) for i in range(n)}
    kmd_handle = daemon.clients.buffer(client, handle)    # ENOENT unless the client's own
"""

from __future__ import annotations

import errno
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydla.kmd.driver import Kmd
from pydla.kmd.sync import TimelineSemaphore
from pydla.linux.fuse_context import FuseError, RequestContext

if TYPE_CHECKING:
    from pydla.linux.daemon import KmdDaemon

T = TypeVar("T")


@dataclass(frozen=True)
class Quotas:
    """What one open device file may hold at once; beyond it a request fails (EDQUOT, EAGAIN for
    WAITs). ``bytes`` None: half of the device memory. The request-thread pool grows to 64 threads;
    with ``waits`` per file and every WAIT ending within ``max_wait_ms``, a request thread is free
    again within a second whatever the clients do."""

    buffers: int = 4096
    bytes: int | None = None
    syncs: int = 4096
    waits: int = 8


@dataclass(eq=False)
class Client:
    """One open device file: a KMD context and what it created."""

    device: int
    kmd: Kmd
    ctx: int
    pid: int
    compatible: bool = False
    last_error: str = ""
    buffers: dict[int, tuple[int, int]] = field(default_factory=dict)  # handle -> (KMD handle, size)
    syncs: dict[int, TimelineSemaphore] = field(default_factory=dict)
    closed: bool = False
    bytes: int = 0  # of its buffers
    waits: int = 0  # WAITs in progress
    ring: Any = None  # its ServedRing (RING_SETUP), if any


class ClientTable:
    """The open device files and, by daemon-wide handle, which of them owns each buffer and sync
    object; what each file holds is counted against ``quotas``. ``lock`` guards all of it (and a
    client's tables, counts and ring)."""

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self._clients: set[Client] = set()
        self._buffers: dict[int, Client] = {}  # daemon handle -> owner
        self._syncs: dict[int, Client] = {}

    def add(self, client: Client) -> None:
        with self.lock:
            self._clients.add(client)

    def remove(self, client: Client) -> tuple[bool, Any]:
        """Mark ``client`` closed, forget its handles and take its ring, at once: (False, None) when
        it already was closed, else (True, the ring it had or None)."""
        with self.lock:
            if client.closed:
                return False, None
            client.closed = True
            self._clients.discard(client)
            for h in client.buffers:
                self._buffers.pop(h, None)
            for s in client.syncs:
                self._syncs.pop(s, None)
            ring, client.ring = client.ring, None
            return True, ring

    def all(self) -> list[Client]:
        with self.lock:
            return list(self._clients)

    def rows(self, has_ring: Callable[[Client], bool]) -> list[dict[str, Any]]:
        """What each open device file holds, snapshot under the lock (for the status)."""
        with self.lock:
            return [{"client": c, "pid": c.pid, "device": c.device, "buffers": len(c.buffers),
                     "buffer_bytes": c.bytes, "syncs": len(c.syncs), "waits": c.waits,
                     "ring": has_ring(c)} for c in self._clients]

    def counts(self) -> dict[str, int]:
        """Open clients, buffer objects and sync objects (for leak checks)."""
        with self.lock:
            return {"clients": len(self._clients), "buffers": len(self._buffers), "syncs": len(self._syncs)}

    # -- handles ---------------------------------------------------------------------------------

    @staticmethod
    def _own(client: Client, handle: int, table: dict[int, Client], what: str) -> None:
        # Under self.lock (a concurrent destroy or release must not slip between check and use).
        # One answer for "nobody's" and "another client's": a different one would let a client probe
        # which handle numbers the others hold.
        owner = table.get(handle)
        if owner is None or owner.closed or owner is not client:
            raise FuseError(errno.ENOENT, f"{what} {handle} is not one of this client's")

    def buffer(self, client: Client, handle: int) -> int:
        """The KMD's handle of ``client``'s buffer object ``handle`` (ENOENT if not the client's)."""
        with self.lock:
            self._own(client, handle, self._buffers, "buffer object")
            entry = client.buffers.get(handle)
        if entry is None:
            raise FuseError(errno.ENOENT, f"buffer object {handle} is not one of this client's")
        return entry[0]

    def sync(self, client: Client, handle: int) -> TimelineSemaphore:
        """``client``'s sync object ``handle`` (ENOENT if not the client's)."""
        with self.lock:
            self._own(client, handle, self._syncs, "sync object")
            sem = client.syncs.get(handle)
        if sem is None:
            raise FuseError(errno.ENOENT, f"sync object {handle} is not one of this client's")
        return sem

    def reserve(self, client: Client, size: int) -> None:
        """Count a new buffer of ``size`` bytes against the client's quotas (EDQUOT beyond them)."""
        q = self.quotas
        with self.lock:
            if len(client.buffers) >= q.buffers:
                raise FuseError(errno.EDQUOT, f"BO_CREATE: this file holds {len(client.buffers)} buffer "
                                              f"objects, its quota")
            assert q.bytes is not None
            if client.bytes + size > q.bytes:
                raise FuseError(errno.EDQUOT, f"BO_CREATE: {size} bytes more than the {client.bytes} this "
                                              f"file holds exceeds its quota of {q.bytes}")
            client.bytes += size

    def unreserve(self, client: Client, size: int) -> None:
        """A buffer :meth:`reserve` counted was not made after all."""
        with self.lock:
            client.bytes -= size

    def add_buffer(self, client: Client, kmd_handle: int, size: int) -> int:
        """Record a reserved buffer the KMD made; its daemon-wide handle."""
        gid = next(self._ids)
        with self.lock:
            client.buffers[gid] = (kmd_handle, size)
            self._buffers[gid] = client
        return gid

    def drop_buffer(self, client: Client, handle: int) -> None:
        with self.lock:
            entry = client.buffers.pop(handle, None)
            self._buffers.pop(handle, None)
            if entry is not None:
                client.bytes -= entry[1]

    def add_sync(self, client: Client, sem: TimelineSemaphore) -> int:
        """Record a new sync object of ``client`` (EDQUOT beyond its quota); its daemon-wide handle."""
        gid = next(self._ids)
        with self.lock:
            if len(client.syncs) >= self.quotas.syncs:
                raise FuseError(errno.EDQUOT, f"SYNC_CREATE: this file holds {len(client.syncs)} sync "
                                              "objects, its quota")
            client.syncs[gid] = sem
            self._syncs[gid] = client
        return gid

    def drop_sync(self, client: Client, handle: int) -> None:
        with self.lock:
            client.syncs.pop(handle, None)
            self._syncs.pop(handle, None)

    def counted(self, client: Client, command: str, call: Callable[[], T], counted: str = "WAITs") -> T:
        """``call()`` counted as one of the file's WAITs in progress (its quota bounds them: EAGAIN
        beyond, naming what is ``counted``)."""
        with self.lock:
            if client.waits >= self.quotas.waits:
                raise FuseError(errno.EAGAIN, f"{command}: {client.waits} {counted} of this file are in "
                                              "progress (its quota); try again")
            client.waits += 1
        try:
            return call()
        finally:
            with self.lock:
                client.waits -= 1


class DeviceFile:
    """The FileHandler of ``dla<index>``."""

    def __init__(self, daemon: KmdDaemon, index: int) -> None:
        self.daemon, self.index = daemon, index

    def open(self, ctx: RequestContext) -> object:
        return self.daemon.open_client(self.index, ctx.pid)

    def ioctl(self, fh: object, ctx: RequestContext, cmd: int, data: bytes,
              out_size: int) -> tuple[int, bytes]:
        assert isinstance(fh, Client)
        return self.daemon.ioctl(fh, ctx, cmd, data)

    def release(self, fh: object, ctx: RequestContext) -> None:
        assert isinstance(fh, Client)
        self.daemon.release(fh)
