"""Shared memory for buffer objects: a sealed memfd the daemon owns and a client maps.

The daemon creates the memory (``SharedBuffer``) and tells the client a path, ``/proc/<daemon
pid>/fd/<n>``; the client opens that path and mmaps it (``map_shared``). Opening another process's
descriptor through /proc needs ptrace-read access to the daemon: root has it, and so does a client of
the daemon's own uid. Chosen over /dev/shm names (nothing to clean up when the daemon dies, no name
another user can guess) and SCM_RIGHTS (needs a socket beside the ioctl channel). A later option is
FUSE passthrough (mmap of the device file itself), see shared/notes/linux-port-fuse.md.

The memfd's size is sealed (F_SEAL_SHRINK | F_SEAL_GROW): a client that can open it cannot truncate
it, which would make the daemon's own accesses fault with SIGBUS.

Usage::

    bo = SharedBuffer(4096)                  # daemon
    bo.view[:4] = b"abcd"; send(bo.path)
    m = map_shared(path, 4096)               # client
"""

from __future__ import annotations

import fcntl
import mmap
import os

#: Default upper bound of one buffer (callers pass their own limits).
MAX_BUFFER_SIZE = 1 << 32


class SharedBuffer:
    """A memfd of ``size`` bytes, mapped read-write in this process, with a path clients open.

    Usage: ``bo = SharedBuffer(1 << 20, name="bo-7"); bo.view[0] = 1; bo.close()``
    """

    def __init__(self, size: int, name: str = "pydla-bo", max_size: int = MAX_BUFFER_SIZE) -> None:
        if not 0 < size <= max_size:
            raise ValueError(f"buffer size {size}: must be within 1..{max_size} bytes")
        self.size = size
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, seals)
            self._map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.view = memoryview(self._map)

    @property
    def path(self) -> str:
        """What a client opens to map this buffer: ``/proc/<pid>/fd/<n>``."""
        return fd_path(self.fd)

    def close(self) -> None:
        """Unmap and close; clients' mappings stay valid until they unmap. Idempotent."""
        if self.fd < 0:
            return
        self.view.release()
        self._map.close()
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> SharedBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fd_path(fd: int) -> str:
    """The path by which another process opens this process's descriptor ``fd`` (any memfd, e.g.
    a KMD buffer object's). Usage: ``fd_path(kmd.bo_fd(ctx, handle))``
    """
    return f"/proc/{os.getpid()}/fd/{fd}"


def map_shared(path: str, size: int, writable: bool = True) -> mmap.mmap:
    """Client side: map ``size`` bytes of the shared buffer at ``path``; checks the real size first.

    Usage: ``m = map_shared("/proc/1234/fd/9", 4096); m[:4] = b"abcd"``
    """
    fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
    try:
        real = os.fstat(fd).st_size
        if not 0 < size <= real:
            raise ValueError(f"{path}: asked to map {size} bytes of a {real}-byte buffer")
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        return mmap.mmap(fd, size, access=access)
    finally:
        os.close(fd)
