"""What the daemon keeps per open device file (:class:`Client`), the limits on it (:class:`Quotas`),
and the FileHandler of ``dla<N>`` (:class:`DeviceFile`) that turns FUSE requests into daemon calls.

Usage: ``files = {f"dla{i}": DeviceFile(daemon, i) for i in range(n)}``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydla.kmd.driver import Kmd
from pydla.kmd.sync import TimelineSemaphore
from pydla.linux.fuse_context import RequestContext

if TYPE_CHECKING:
    from pydla.linux.daemon import KmdDaemon


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
