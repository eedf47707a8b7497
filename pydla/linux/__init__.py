"""The Linux port's daemon side: a FUSE server over /dev/fuse (no libfuse) and caller-memory access.
Linux only; serving needs root and /dev/fuse. What the client port shares with it (the ioctl
commands, the ring layout, the shared buffers) is :mod:`pydla.uapi`.

Usage::

    from pydla.linux import FuseServer, FuseError
    server = FuseServer("/run/pydla", {"dla0": handler}).start()
"""

from __future__ import annotations

from pydla.linux.fuse_context import FileHandler, FuseError, RequestContext
from pydla.linux.fuse_mount import FuseMountError, StaleMountError, unmount
from pydla.linux.fuse_protocol import IOR, IOW, IOWR, ioc_decode
from pydla.linux.fuse_server import FuseServer
from pydla.linux.process_memory import read_process_memory, take_process_fd, write_process_memory

__all__ = [
    "IOR",
    "IOW",
    "IOWR",
    "FileHandler",
    "FuseError",
    "FuseMountError",
    "FuseServer",
    "RequestContext",
    "StaleMountError",
    "ioc_decode",
    "read_process_memory",
    "take_process_fd",
    "unmount",
    "write_process_memory",
]
