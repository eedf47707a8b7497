"""Caller memory (process_vm_readv/writev) and shared buffers (sealed memfd), across processes."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys

import pytest

from pydla.linux import SharedBuffer, read_process_memory, write_process_memory

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


def test_shared_buffer_mapped_by_a_client() -> None:
    with SharedBuffer(8192, name="bo-test") as bo:
        assert bo.path == f"/proc/{os.getpid()}/fd/{bo.fd}"
        bo.view[:5] = b"daemo"
        code = f"""
import errno, os
from pydla.linux import map_shared
m = map_shared({bo.path!r}, 8192)
print(m[:5].decode())
m[100:103] = b"abc"
fd = os.open({bo.path!r}, os.O_RDWR)
for size in (10, 1 << 20):
    try:
        os.ftruncate(fd, size); print("resized")
    except OSError as e:
        print(errno.errorcode[e.errno])
try:
    map_shared({bo.path!r}, 8193)
except ValueError as e:
    print("refused")
"""
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=15)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == ["daemo", "EPERM", "EPERM", "refused"]  # sealed: no resize
        assert bytes(bo.view[100:103]) == b"abc"
    assert bo.fd == -1
    bo.close()  # idempotent
    with pytest.raises(ValueError):
        SharedBuffer(0)
    with pytest.raises(ValueError):
        SharedBuffer(1 << 20, max_size=4096)
