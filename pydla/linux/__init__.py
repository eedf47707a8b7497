"""The Linux port's foundation: a FUSE server over /dev/fuse (no libfuse), caller-memory access and
shared buffers. Linux only; serving needs root and /dev/fuse.

Usage::

    from pydla.linux import FuseServer, FuseError
    server = FuseServer("/run/pydla", {"dla0": handler}).start()
"""

from __future__ import annotations

from pydla.linux.fuse_context import FileHandler, FuseError, RequestContext
from pydla.linux.fuse_mount import FuseMountError, StaleMountError, unmount
from pydla.linux.fuse_protocol import IOR, IOW, IOWR, ioc_decode
from pydla.linux.fuse_server import FuseServer
from pydla.linux.process_memory import read_process_memory, write_process_memory
from pydla.linux.shm import SharedBuffer, fd_path, map_shared

__all__ = [
    "IOR",
    "IOW",
    "IOWR",
    "FileHandler",
    "FuseError",
    "FuseMountError",
    "FuseServer",
    "RequestContext",
    "SharedBuffer",
    "StaleMountError",
    "fd_path",
    "ioc_decode",
    "map_shared",
    "read_process_memory",
    "unmount",
    "write_process_memory",
]
