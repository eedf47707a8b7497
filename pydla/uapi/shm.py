"""Shared memory for buffer objects: a sealed memfd the *client* creates and the daemon takes.

The client creates the memory (``SharedBuffer``), maps it, and tells the daemon the descriptor's
number in its own table (BO_CREATE); the daemon takes its own reference with pidfd_getfd(2)
(:func:`pydla.linux.process_memory.take_process_fd`), checks it with :func:`check_shared_fd`, and maps
it for the device. So a client holds descriptors for its own buffers only, never a path or number by
which it could reach the daemon's or another client's memory, and the memory is charged to the client
that asked for it (its memory cgroup), not to the daemon. Chosen over daemon-created memfds opened
through ``/proc/<daemon pid>/fd/N`` (any client with ptrace rights over the daemon could open every
buffer, and a client of another uid could open none) and over SCM_RIGHTS (a socket beside the ioctl
channel). A later option is FUSE passthrough (mmap of the device file), see
shared/notes/linux-port-fuse.md.

The memfd's size is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL): the client cannot truncate it
under the device afterwards, which would turn the daemon's accesses into SIGBUS. The daemon accepts
only descriptors whose seals say so, which also limits them to memfd/shmem (nothing whose mmap could
block on another file system).

Usage::

    bo = SharedBuffer(4096)                  # client
    bo.view[:4] = b"abcd"; ioctl(BO_CREATE, fd=bo.fd); bo.close_fd()
    fd = take_process_fd(pid, their_fd); check_shared_fd(fd, 4096)   # daemon
"""

from __future__ import annotations

import fcntl
import mmap
import os

#: Default upper bound of one buffer (callers pass their own limits).
MAX_BUFFER_SIZE = 1 << 32
#: The seals a buffer object's memfd must carry.
REQUIRED_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class SharedBuffer:
    """A sealed memfd of ``size`` bytes, mapped read-write in this process.

    ``mapping`` stays valid after :meth:`close_fd` (the descriptor is needed only until the daemon
    has taken its own); :meth:`close` releases both.

    Usage: ``bo = SharedBuffer(1 << 20, name="bo-7"); bo.view[0] = 1; bo.close()``
    """

    def __init__(self, size: int, name: str = "pydla-bo", max_size: int = MAX_BUFFER_SIZE) -> None:
        if not 0 < size <= max_size:
            raise ValueError(f"buffer size {size}: must be within 1..{max_size} bytes")
        self.size = size
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, REQUIRED_SEALS | fcntl.F_SEAL_SEAL)
            self.mapping: mmap.mmap | None = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.view = memoryview(self.mapping)

    def close_fd(self) -> None:
        """Close the descriptor, keep the mapping. Idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """Close the descriptor and unmap (the daemon's reference stays valid). Idempotent."""
        self.close_fd()
        if self.mapping is not None:
            self.view.release()
            self.mapping.close()
            self.mapping = None

    def __enter__(self) -> SharedBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_shared_fd(fd: int, size: int) -> None:
    """Daemon side: ``fd`` must be a memfd/shmem file of at least ``size`` bytes whose size is sealed.

    Raises ValueError saying what is wrong. Usage: ``check_shared_fd(fd, args.size)``
    """
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise ValueError("not a memfd (it has no seals)") from None
    if seals & REQUIRED_SEALS != REQUIRED_SEALS:
        raise ValueError(f"its seals {seals:#x} do not include F_SEAL_SHRINK | F_SEAL_GROW")
    real = os.fstat(fd).st_size
    if not 0 < size <= real:
        raise ValueError(f"{size} bytes asked of a {real}-byte memfd")
