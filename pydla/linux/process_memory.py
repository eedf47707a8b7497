"""Reading and writing a client process's memory: process_vm_readv(2) / process_vm_writev(2).

The daemon uses these with the pid of an ioctl's caller (from the FUSE request header) to follow a
pointer inside an ioctl argument, e.g. a SUBMIT's task list: restricted FUSE ioctls carry only the
fixed-size struct. The kernel checks that the daemon may ptrace the target (root may); an address
the target has not mapped fails with EFAULT. Sizes are bounded so that a client cannot make the
daemon allocate without limit.

Usage::

    tasks = read_process_memory(ctx.pid, args.tasks_ptr, args.count * TASK_SIZE)
    write_process_memory(ctx.pid, args.status_ptr, status_bytes)
"""

from __future__ import annotations

import ctypes
import errno
import os
from functools import lru_cache

#: The largest transfer allowed by default (a task list is a few KiB; this leaves room).
MAX_TRANSFER = 16 << 20
_ADDRESS_LIMIT = 1 << 64


class _iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    for name in ("process_vm_readv", "process_vm_writev"):
        fn = getattr(libc, name)
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(_iovec), ctypes.c_ulong, ctypes.POINTER(_iovec),
                       ctypes.c_ulong, ctypes.c_ulong]
        fn.restype = ctypes.c_ssize_t
    return libc


def _check(pid: int, address: int, size: int, max_size: int) -> None:
    if not isinstance(pid, int) or pid <= 0:
        raise OSError(errno.ESRCH, f"pid {pid!r}: not a process id")
    if not 0 <= size <= max_size:
        raise OSError(errno.E2BIG if size > max_size else errno.EINVAL,
                      f"size {size}: must be within 0..{max_size} bytes")
    if address < 0 or address + size > _ADDRESS_LIMIT:
        raise OSError(errno.EFAULT, f"address {address:#x} + {size}: outside the address space")


def _transfer(name: str, pid: int, local: ctypes.Array[ctypes.c_char], address: int, size: int) -> None:
    lio, rio, done = _iovec(), _iovec(), 0
    while done < size:
        # A transfer can stop short at a page the target has not mapped; retry the rest once so
        # that the failing page is reported as EFAULT instead of a silent short copy.
        lio.iov_base, lio.iov_len = ctypes.addressof(local) + done, size - done
        rio.iov_base, rio.iov_len = address + done, size - done
        n = getattr(_libc(), name)(pid, ctypes.byref(lio), 1, ctypes.byref(rio), 1, 0)
        if n < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{name}(pid {pid}, {address + done:#x}, {size - done}): {os.strerror(err)}")
        if n == 0:
            raise OSError(errno.EFAULT, f"{name}(pid {pid}, {address + done:#x}): nothing transferred")
        done += n


def read_process_memory(pid: int, address: int, size: int, max_size: int = MAX_TRANSFER) -> bytes:
    """``size`` bytes at ``address`` in process ``pid``. Raises OSError (EFAULT, ESRCH, EPERM, E2BIG).

    Usage: ``data = read_process_memory(ctx.pid, ptr, 64)``
    """
    _check(pid, address, size, max_size)
    if size == 0:
        return b""
    buf = ctypes.create_string_buffer(size)
    _transfer("process_vm_readv", pid, buf, address, size)
    return buf.raw


def write_process_memory(pid: int, address: int, data: bytes | bytearray | memoryview,
                         max_size: int = MAX_TRANSFER) -> None:
    """Write ``data`` at ``address`` in process ``pid``. Raises OSError as read_process_memory.

    Usage: ``write_process_memory(ctx.pid, ptr, b"\\x01\\x00\\x00\\x00")``
    """
    raw = bytes(data)
    _check(pid, address, len(raw), max_size)
    if raw:
        buf = ctypes.create_string_buffer(raw, len(raw))
        _transfer("process_vm_writev", pid, buf, address, len(raw))


_SYS_PIDFD_GETFD = 438  # the same number on every architecture (the unified syscall table, Linux 5.6)


def _thread_group(pid: int) -> int:
    """The process (thread group) of ``pid``, which FUSE may report as one of its threads."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    raise OSError(errno.ESRCH, f"pid {pid}: no such process")


def take_process_fd(pid: int, fd: int) -> int:
    """A duplicate, in this process, of descriptor ``fd`` of process ``pid`` (pidfd_getfd(2)).

    Needs ptrace rights over ``pid`` (root has them). The caller owns the result (close-on-exec).
    Raises OSError: ESRCH (no such process), EBADF (no such descriptor), EPERM.
    Usage: ``mine = take_process_fd(ctx.pid, args.fd)``
    """
    if not isinstance(fd, int) or not 0 <= fd < 1 << 31:
        raise OSError(errno.EBADF, f"descriptor {fd!r}: not a descriptor number")
    # The caller is blocked in its ioctl while we run, so its pid cannot be reused meanwhile.
    pidfd = os.pidfd_open(_thread_group(pid))
    try:
        mine = int(_libc().syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0))
        if mine < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd(pid {pid}, fd {fd}): {os.strerror(err)}")
        return mine
    finally:
        os.close(pidfd)
