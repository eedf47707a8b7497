"""The daemon's trace commands (uAPI 2.8): TRACE_START, TRACE_READ, TRACE_STOP.

A file starts a trace of its device (the driver's :class:`~pydla.kmd.trace.KmdTrace`: one per device,
EBUSY while another runs), reads consistent copies of the ring into its own memory while the device
writes on, and stops it; its traces stop when the file is closed. Every field is checked here
(the size and mask by the driver's rules, the handle is this file's, the destination holds the whole
ring and is writable) before anything is copied.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError
from pydla.kmd.trace import KmdTrace
from pydla.linux.fuse_context import FuseError, RequestContext
from pydla.linux.process_memory import write_process_memory
from pydla.uapi.ioctl import ERRNO

if TYPE_CHECKING:
    from pydla.linux.clients import Client
    from pydla.linux.daemon import KmdDaemon


def trace_handlers(daemon: KmdDaemon) -> dict[int, Callable[[Client, RequestContext, Any], int]]:
    """The trace commands' handlers, for the daemon's table; ``daemon.release`` calls ``forget``."""
    h = TraceHandlers()
    daemon.trace_handlers = h
    e = U.dla_ioctl_e
    return {e.TRACE_START: h.start, e.TRACE_READ: h.read, e.TRACE_STOP: h.stop}


class TraceHandlers:
    """The traces of the daemon's files: (file, handle) -> trace."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._traces: dict[tuple[int, int], KmdTrace] = {}
        self._next = 1

    def start(self, client: Client, ctx: RequestContext, a: Any) -> int:
        trace = _kmd("TRACE_START", lambda: KmdTrace(client.kmd, size=int(a.size), mask=int(a.mask)))
        with self._lock:
            handle, self._next = self._next, self._next + 1
            self._traces[(id(client), handle)] = trace
        a.trace, a.context_id = handle, client.ctx
        return 0

    def _mine(self, client: Client, a: Any, command: str, remove: bool) -> KmdTrace:
        if a.reserved:
            raise FuseError(errno.EINVAL, f"{command}: reserved {a.reserved:#x} must be 0")
        with self._lock:
            key = (id(client), int(a.trace))
            trace = self._traces.pop(key, None) if remove else self._traces.get(key)
        if trace is None:
            raise FuseError(errno.ENOENT, f"{command}: trace {a.trace} is not one this file started")
        if a.size < trace.size:
            if remove:
                with self._lock:
                    self._traces[key] = trace  # nothing happened: it may stop it with a larger buffer
            raise FuseError(errno.EINVAL,
                            f"{command}: the buffer holds {a.size} bytes, the ring {trace.size}")
        return trace

    def read(self, client: Client, ctx: RequestContext, a: Any) -> int:
        trace = self._mine(client, a, "TRACE_READ", remove=False)
        return self._copy_out(ctx, a, trace.snapshot(), "TRACE_READ")

    def stop(self, client: Client, ctx: RequestContext, a: Any) -> int:
        trace = self._mine(client, a, "TRACE_STOP", remove=True)
        return self._copy_out(ctx, a, trace.stop(), "TRACE_STOP")

    @staticmethod
    def _copy_out(ctx: RequestContext, a: Any, data: bytes, command: str) -> int:
        try:
            write_process_memory(ctx.pid, int(a.data), data, len(data))
        except OSError as e:
            raise FuseError(errno.EFAULT, f"{command}: data at {int(a.data):#x} ({len(data)} bytes): "
                                          f"{os.strerror(e.errno or 0)}") from None
        a.written = len(data)
        return 0

    def forget(self, client: Client) -> None:
        """The file is closed: its traces stop."""
        with self._lock:
            mine = [k for k in self._traces if k[0] == id(client)]
            traces = [self._traces.pop(k) for k in mine]
        for trace in traces:
            trace.stop()


def _kmd(command: str, call: Callable[[], KmdTrace]) -> KmdTrace:
    try:
        return call()
    except DlaError as e:
        raise FuseError(ERRNO.get(e.code, errno.EIO), f"{command}: {e.message}") from None
