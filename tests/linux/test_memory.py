"""Caller memory (process_vm_readv/writev) and shared buffers (sealed memfd), across processes."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys

import pytest

from pydla.linux import read_process_memory, take_process_fd, write_process_memory
from pydla.uapi.shm import SharedBuffer, check_shared_fd

CHILD = """
import ctypes, sys
buf = ctypes.create_string_buffer(b"hello from the client", 32)
print(ctypes.addressof(buf), flush=True)
sys.stdin.readline()
print(buf.raw.hex(), flush=True)
"""


def test_process_vm_round_trip() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        address = int(child.stdout.readline())
        assert read_process_memory(child.pid, address, 21) == b"hello from the client"
        write_process_memory(child.pid, address, b"HELLO")
        assert read_process_memory(child.pid, address, 32) == b"HELLO from the client" + bytes(11)
        for call, err in ((lambda: read_process_memory(child.pid, 16, 8), errno.EFAULT),
                          (lambda: write_process_memory(child.pid, 16, b"x"), errno.EFAULT),
                          (lambda: read_process_memory(child.pid, address, 1 << 30), errno.E2BIG),
                          (lambda: read_process_memory(child.pid, address, -1), errno.EINVAL),
                          (lambda: read_process_memory(child.pid, -8, 8), errno.EFAULT),
                          (lambda: read_process_memory(child.pid, 2**64 - 4, 8), errno.EFAULT),
                          (lambda: read_process_memory(0, address, 8), errno.ESRCH)):
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == err
        assert read_process_memory(child.pid, address, 0) == b""
        out, _ = child.communicate("\n", timeout=10)
        assert bytes.fromhex(out.strip()) == b"HELLO from the client" + bytes(11)
    finally:
        child.kill()
        child.wait(5)


def test_read_across_an_unmapped_page_is_efault() -> None:
    # The last bytes of a mapping followed by a hole: a short copy must not pass silently.
    import mmap
    m = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    m[mmap.PAGESIZE - 4:mmap.PAGESIZE] = b"tail"
    ctypes.CDLL(None).munmap(ctypes.c_void_p(base + mmap.PAGESIZE), ctypes.c_size_t(mmap.PAGESIZE))
    assert read_process_memory(os.getpid(), base + mmap.PAGESIZE - 4, 4) == b"tail"
    with pytest.raises(OSError) as e:
        read_process_memory(os.getpid(), base + mmap.PAGESIZE - 4, 8)
    assert e.value.errno == errno.EFAULT


def test_a_clients_shared_buffer_taken_by_the_daemon() -> None:
    """The client creates and maps a sealed memfd; the daemon takes the descriptor (pidfd_getfd),
    checks it and maps it: both see each other's writes, and nobody can resize it."""
    import mmap

    code = """
import errno, os, sys
from pydla.uapi.shm import SharedBuffer
bo = SharedBuffer(8192, name="bo-test")
bo.view[:5] = b"hello"
print(bo.fd, flush=True)
sys.stdin.readline()
print(bytes(bo.view[100:103]).decode())
for size in (10, 1 << 20):
    try:
        os.ftruncate(bo.fd, size); print("resized")
    except OSError as e:
        print(errno.errorcode[e.errno])
bo.close(); bo.close()
print(bo.fd, bo.mapping)
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        their_fd = int(child.stdout.readline())
        fd = take_process_fd(child.pid, their_fd)
        try:
            check_shared_fd(fd, 8192)
            with pytest.raises(ValueError, match="8193 bytes asked of a 8192-byte memfd"):
                check_shared_fd(fd, 8193)
            m = mmap.mmap(fd, 8192)
        finally:
            os.close(fd)
        assert m[:5] == b"hello"
        m[100:103] = b"abc"
        with pytest.raises(OSError) as e:
            take_process_fd(child.pid, 999)
        assert e.value.errno == errno.EBADF
        child.stdin.write("\n")
        child.stdin.flush()
        out = child.stdout.read().split()
        assert child.wait(15) == 0
        assert out == ["abc", "EPERM", "EPERM", "-1", "None"]  # sealed: no resize
        m.close()
    finally:
        child.kill()
        child.wait()


def test_check_shared_fd_refuses_what_could_change_or_block() -> None:
    unsealed = os.memfd_create("x")
    r, w = os.pipe()
    try:
        os.ftruncate(unsealed, 4096)
        with pytest.raises(ValueError, match="do not include F_SEAL_SHRINK"):
            check_shared_fd(unsealed, 4096)
        with pytest.raises(ValueError, match="not a memfd"):
            check_shared_fd(r, 1)
    finally:
        for fd in (unsealed, r, w):
            os.close(fd)
    with pytest.raises(ValueError):
        SharedBuffer(0)
    with pytest.raises(ValueError):
        SharedBuffer(1 << 20, max_size=4096)
    with pytest.raises(OSError) as e:
        take_process_fd(os.getpid(), -1)
    assert e.value.errno == errno.EBADF
