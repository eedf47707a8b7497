"""The daemon's sync-object commands: SYNC_CREATE, SYNC_SIGNAL, SYNC_QUERY, SYNC_DESTROY, and WAIT.

A WAIT blocks only its own request thread, at most the daemon's ``max_wait_ms`` (clients repeat
longer waits), counts against the file's WAIT quota (EAGAIN beyond) and is abandoned at once when the
caller is killed (FUSE_INTERRUPT: EINTR). A failed fence is answered in the struct (its NvError and
message), not as an errno. The fences other commands carry are resolved here too (:meth:`fences`).

Usage (inside :class:`~pydla.linux.daemon.KmdDaemon`)::

    self.syncs = SyncHandlers(self)
    pre, post = self.syncs.inline_fences(client, a)
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.kmd.sync import TimelineSemaphore
from pydla.linux.clients import Client
from pydla.linux.fuse_context import FuseError, RequestContext
from pydla.uapi.ioctl import text, untext

if TYPE_CHECKING:
    from pydla.linux.daemon import KmdDaemon

WAIT_SLICE_S = 0.05  # how often a WAIT on a deterministic device drives its driver
Fences = list[tuple[TimelineSemaphore, int]]


class SyncHandlers:
    """The handlers; ``daemon`` provides the client table and the wait bound."""

    def __init__(self, daemon: KmdDaemon) -> None:
        self.daemon = daemon
        self.clients = daemon.clients

    def handlers(self) -> dict[int, Callable[[Client, RequestContext, Any], int]]:
        """For the daemon's table."""
        e = U.dla_ioctl_e
        return {e.WAIT: self.wait, e.SYNC_CREATE: self.create, e.SYNC_SIGNAL: self.signal,
                e.SYNC_QUERY: self.query, e.SYNC_DESTROY: self.destroy}

    # -- fences other commands carry ------------------------------------------------------------

    def fences(self, client: Client, fences: list[Any]) -> Fences:
        """``client``'s sync objects and values named by dla_fence_t ``fences`` (ENOENT for another's)."""
        return [(self.clients.sync(client, f.sync), int(f.value)) for f in fences]

    def inline_fences(self, client: Client, a: Any) -> tuple[Fences, Fences]:
        """The pre- and post-fences a struct carries inline (its counts checked by the caller)."""
        pre = self.fences(client, a.pre_fences[:a.num_pre_fences]) if a.num_pre_fences else []
        post = self.fences(client, a.post_fences[:a.num_post_fences]) if a.num_post_fences else []
        return pre, post

    # -- commands --------------------------------------------------------------------------------

    def wait(self, client: Client, ctx: RequestContext, a: Any) -> int:
        sem = self.clients.sync(client, a.fence.sync)
        return self.clients.counted(client, "WAIT", lambda: self._wait_fence(client, ctx, a, sem))

    def _wait_fence(self, client: Client, ctx: RequestContext, a: Any, sem: TimelineSemaphore) -> int:
        value, timeout_ms = int(a.fence.value), min(int(a.timeout_ms), self.daemon.max_wait_ms)
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

    def create(self, client: Client, ctx: RequestContext, a: Any) -> int:
        a.sync = self.clients.add_sync(client, TimelineSemaphore(int(a.initial)))
        return 0

    def signal(self, client: Client, ctx: RequestContext, a: Any) -> int:
        sem = self.clients.sync(client, a.fence.sync)
        if a.status == 0:
            sem.signal(int(a.fence.value))
        else:
            code = NvError(a.status) if a.status in NvError._value2member_map_ else NvError.ResourceError
            sem.fail(DlaError(code, untext(bytes(a.message)) or "failed by the application"))
        return 0

    def query(self, client: Client, ctx: RequestContext, a: Any) -> int:
        sem = self.clients.sync(client, a.sync)
        a.value = sem.value
        a.status = int(sem.error.code) if sem.error is not None else 0
        return 0

    def destroy(self, client: Client, ctx: RequestContext, a: Any) -> int:
        self.clients.sync(client, a.sync)
        self.clients.drop_sync(client, a.sync)
        return 0
