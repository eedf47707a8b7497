"""What a FUSE file handler sees: the request context, the error it raises, the interface it implements;
and the server's table of the requests in flight, through which FUSE_INTERRUPT reaches them.

Usage::

    class Echo:
        def open(self, ctx: RequestContext) -> object: return {"pid": ctx.pid}
        def ioctl(self, fh, ctx, cmd, data, out_size):
            if cmd != ECHO: raise FuseError(errno.ENOTTY)
            return len(data), data
        def release(self, fh, ctx) -> None: pass
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("pydla.linux.fuse")
EARLY_INTERRUPTS_MAX = 4096  # interrupts whose request was not (yet) seen; bounded, oldest dropped
EARLY_INTERRUPT_AGE = 30.0


class FuseError(Exception):
    """Raised by a handler to answer the request with ``errno`` (e.g. EPERM, EINVAL, ENOTTY).

    The kernel accepts only 1..511; anything else is answered with EIO.

    Usage: ``raise FuseError(errno.EPERM, "handle 3 belongs to another context")``
    """

    def __init__(self, err: int, message: str = "") -> None:
        super().__init__(err, message or errno.errorcode.get(err, str(err)))
        self.errno = err if 0 < err < 512 else errno.EIO
        self.message = message


class RequestContext:
    """One request from the kernel: who sent it, and whether the kernel has interrupted it.

    ``pid``/``uid``/``gid`` are the calling thread's (0 for requests the kernel sends on its own
    behalf, such as RELEASE after the caller exited). ``unique`` is the kernel's request id.

    A handler that blocks (a WAIT) must give up when the request is interrupted (the caller got a
    signal, e.g. SIGKILL, or the server is stopping): wait on ``ctx.interrupted`` (an Event), or
    register ``ctx.on_interrupt(callback)`` to wake a Condition of its own, then
    ``ctx.raise_if_interrupted()`` so that the caller is answered EINTR and dies at once.

    Usage: ``if ctx.interrupted.wait(timeout): raise FuseError(errno.EINTR)``
    """

    __slots__ = ("_callbacks", "_event", "_flag", "_lock", "flags", "gid", "name", "nodeid",
                 "opcode", "pid", "uid", "unique")

    def __init__(self, unique: int, opcode: int, nodeid: int, uid: int, gid: int, pid: int,
                 name: str = "", flags: int = 0, lock: threading.Lock | None = None) -> None:
        self.unique, self.opcode, self.nodeid = unique, opcode, nodeid
        self.uid, self.gid, self.pid = uid, gid, pid
        self.name = name  # the file's name in the mount, e.g. "dla0"
        self.flags = flags  # open(2) flags for OPEN, FUSE_IOCTL_* flags for IOCTL
        # The server shares one lock among its contexts; it guards the three fields below. The
        # Event is created only when a handler asks for it: most requests never wait.
        self._lock = lock if lock is not None else threading.Lock()
        self._flag = False
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    def __repr__(self) -> str:
        return (f"RequestContext(unique={self.unique}, opcode={self.opcode}, name={self.name!r}, "
                f"pid={self.pid}, uid={self.uid}, interrupted={self._flag})")

    @property
    def is_interrupted(self) -> bool:
        """True once the kernel sent FUSE_INTERRUPT for this request (or the server is stopping)."""
        return self._flag

    @property
    def interrupted(self) -> threading.Event:
        """An Event set when the request is interrupted. Usage: ``ctx.interrupted.wait(1.0)``"""
        with self._lock:
            if self._event is None:
                self._event = threading.Event()
                if self._flag:
                    self._event.set()
            return self._event

    def on_interrupt(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (from the server's thread) when the request is interrupted; at once
        if it already is. Usage: ``ctx.on_interrupt(lambda: cond_notify_all())``
        """
        with self._lock:
            if not self._flag:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback()

    def raise_if_interrupted(self) -> None:
        """Raise FuseError(EINTR) when interrupted. Usage: ``ctx.raise_if_interrupted()``"""
        if self._flag:
            raise FuseError(errno.EINTR, "interrupted")

    def _interrupt(self) -> None:
        with self._lock:
            if self._flag:
                return
            self._flag = True
            event, callbacks, self._callbacks = self._event, self._callbacks or [], None
        if event is not None:
            event.set()
        for cb in callbacks:
            try:
                cb()
            except Exception:
                log.exception("interrupt callback of request %d raised", self.unique)


class InFlight:
    """The requests whose handlers run now (by the kernel's ``unique``), so that FUSE_INTERRUPT, or
    the server stopping, reaches them; and the interrupts that came before their request was
    registered (another reader thread read it but has not registered it yet). ``lock`` is the
    server's, which the contexts share.

    Usage::

        in_flight.enter(ctx)            # before the handler runs
        try: ... finally: in_flight.leave(ctx.unique)
        in_flight.interrupt(unique)     # FUSE_INTERRUPT
    """

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.requests: dict[int, RequestContext] = {}
        self.early: dict[int, float] = {}  # unique -> when its interrupt came
        self.stopping = False  # every request registered from now on is interrupted at once

    def enter(self, ctx: RequestContext) -> None:
        with self._lock:
            self.requests[ctx.unique] = ctx
            if self.early.pop(ctx.unique, None) is not None or self.stopping:
                ctx._flag = True  # nobody can wait on it yet: no Event or callback to fire

    def leave(self, unique: int) -> None:
        with self._lock:
            self.requests.pop(unique, None)

    def call(self, ctx: RequestContext, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` with ``ctx`` registered as in flight."""
        self.enter(ctx)
        try:
            return fn()
        finally:
            self.leave(ctx.unique)

    def interrupt(self, unique: int) -> None:
        """FUSE_INTERRUPT of request ``unique``: now, or when it is registered."""
        with self._lock:
            ctx = self.requests.get(unique)
            if ctx is None:
                now = time.monotonic()
                if len(self.early) >= EARLY_INTERRUPTS_MAX:
                    for k in [k for k, t in self.early.items()
                              if now - t > EARLY_INTERRUPT_AGE] or [next(iter(self.early))]:
                        del self.early[k]
                self.early[unique] = now
        if ctx is not None:
            ctx._interrupt()

    def interrupt_all(self) -> None:
        """Wake every handler that waits (the server stops)."""
        with self._lock:
            waiting = list(self.requests.values())
        for ctx in waiting:
            ctx._interrupt()


class FileHandler(Protocol):
    """The object behind one file of the mount (``dla0``); called from several threads at once.

    - ``open(ctx)`` returns the per-open state (any object) handed back to ``ioctl`` and ``release``;
    - ``ioctl(fh, ctx, cmd, data, out_size)`` returns ``(result >= 0, out_bytes)`` with
      ``len(out_bytes) <= out_size``; ``data`` is what the caller passed for an _IOW/_IOWR command.
      An unknown ``cmd`` raises FuseError(ENOTTY) (never ENOSYS: the server maps that to ENOTTY,
      because after one ENOSYS the kernel refuses every later ioctl on the mount);
    - ``release(fh, ctx)`` when the last descriptor of that open is closed (also when the caller was
      killed); it cannot fail the close;
    - optionally ``read(fh, ctx, offset, size) -> bytes`` (at most ``size`` bytes from ``offset``;
      fewer at the end): the file can then be read (a status document); without it read(2) fails
      with EINVAL. The file's size shows as 0, so a reader reads until it gets no bytes;
    - optionally a ``file_mode`` attribute (e.g. 0o444) instead of the server's mode for its files.

    Raising FuseError(err) answers ``err``; any other exception answers EIO and is logged.

    Usage: ``FuseServer(path, {"dla0": handler}).start()``
    """

    def open(self, ctx: RequestContext) -> object: ...

    def ioctl(self, fh: object, ctx: RequestContext, cmd: int, data: bytes,
              out_size: int) -> tuple[int, bytes]: ...

    def release(self, fh: object, ctx: RequestContext) -> None: ...
