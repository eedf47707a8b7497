"""Fixtures for the FUSE server tests: a test handler, a server on a temporary mount point, clients
run as separate processes (real open(2)/ioctl(2) syscalls routed by the kernel to the server)."""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from pydla.linux import IOR, IOWR, FuseError, FuseServer, RequestContext, unmount

D = ord("d")
ECHO = IOWR(D, 1, 64)  # result = sum of the input bytes, output = the input reversed
FAIL = IOWR(D, 2, 8)  # the handler raises RuntimeError -> EIO
WAIT = IOWR(D, 3, 8)  # blocks until the test opens the gate (result 1) or the caller is interrupted
NOSYS = IOWR(D, 4, 8)  # the handler raises FuseError(ENOSYS): the server must answer ENOTTY
WHO = IOR(D, 5, 12)  # the caller's pid, uid, gid as the server saw them
CLIENT_TIMEOUT = 15.0


class TestHandler:
    """Records every open/ioctl/release; WAIT blocks on a gate and honours interrupts."""

    __test__ = False

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.gate = False
        self.opens: list[int] = []
        self.releases: list[int] = []
        self.ioctls: list[int] = []
        self.waiting = 0
        self.interrupted: list[int] = []

    def open(self, ctx: RequestContext) -> object:
        with self.lock:
            self.opens.append(ctx.pid)
            self.lock.notify_all()
        return {"pid": ctx.pid}

    def ioctl(self, fh: Any, ctx: RequestContext, cmd: int, data: bytes,
              out_size: int) -> tuple[int, bytes]:
        with self.lock:
            self.ioctls.append(cmd)
        if cmd == ECHO:
            return sum(data), data[::-1]
        if cmd == FAIL:
            raise RuntimeError("handler bug (expected by the test)")
        if cmd == NOSYS:
            raise FuseError(errno.ENOSYS)
        if cmd == WHO:
            return 0, struct.pack("<III", ctx.pid, ctx.uid, ctx.gid)
        if cmd == WAIT:
            ctx.on_interrupt(self._wake)
            with self.lock:
                self.waiting += 1
                self.lock.notify_all()
                try:
                    self.lock.wait_for(lambda: self.gate or ctx.is_interrupted, CLIENT_TIMEOUT)
                finally:
                    self.waiting -= 1
                if ctx.is_interrupted:
                    self.interrupted.append(fh["pid"])
            ctx.raise_if_interrupted()
            return 1, b""
        raise FuseError(errno.ENOTTY, f"unknown command {cmd:#x}")

    def _wake(self) -> None:
        with self.lock:
            self.lock.notify_all()

    def release(self, fh: Any, ctx: RequestContext) -> None:
        with self.lock:
            self.releases.append(fh["pid"])
            self.lock.notify_all()

    def open_gate(self) -> None:
        with self.lock:
            self.gate = True
            self.lock.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        with self.lock:
            return self.lock.wait_for(predicate, timeout)


@lru_cache(maxsize=1)
def fuse_unavailable() -> str | None:
    """Why FUSE cannot be mounted here, or None. Probes one real mount."""
    if not sys.platform.startswith("linux"):
        return "the FUSE server is Linux only"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (FUSE not in this kernel or container)"
    try:
        with tempfile.TemporaryDirectory(prefix="pydla-fuse-probe-") as d:
            server = FuseServer(d, {}, threads=1)
            server.start(timeout=5.0)
            server.stop()
    except OSError as e:
        return f"cannot mount FUSE here ({e}); mounting needs root (CAP_SYS_ADMIN) and /dev/fuse"
    return None


@pytest.fixture
def handler() -> TestHandler:
    return TestHandler()


@pytest.fixture
def mountpoint(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    yield mnt
    unmount(str(mnt))  # the safety net: never leave a mount behind


@pytest.fixture
def serve(mountpoint: Path, handler: TestHandler) -> Iterator[Callable[..., FuseServer]]:
    """serve(**kwargs) -> a started FuseServer with dla0 and dla1 (both the ``handler`` fixture)."""
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    servers: list[FuseServer] = []

    def start(**kwargs: Any) -> FuseServer:
        server = FuseServer(mountpoint, {"dla0": handler, "dla1": handler}, **kwargs)
        servers.append(server)
        return server.start()

    yield start
    for s in servers:
        s.stop(timeout=5.0)


def client_code(mountpoint: Path, body: str) -> str:
    """A client script: the command numbers and a helper, then ``body``."""
    return (f"import errno, fcntl, os, struct, sys, time\n"
            f"MNT = {str(mountpoint)!r}\n"
            f"ECHO, FAIL, WAIT, NOSYS, WHO = {ECHO}, {FAIL}, {WAIT}, {NOSYS}, {WHO}\n"
            "def call(fd, cmd, buf):\n"
            "    try:\n"
            "        return fcntl.ioctl(fd, cmd, buf, True)\n"
            "    except OSError as e:\n"
            "        return errno.errorcode[e.errno]\n"
            f"{body}\n")


def run_client(mountpoint: Path, body: str, timeout: float = CLIENT_TIMEOUT) -> list[str]:
    """Run a client to completion; its stdout lines."""
    p = subprocess.run([sys.executable, "-c", client_code(mountpoint, body)], capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def start_client(mountpoint: Path, body: str) -> subprocess.Popen[str]:
    """Start a client; its stdin, stdout and stderr are pipes."""
    return subprocess.Popen([sys.executable, "-c", client_code(mountpoint, body)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "headless_only(reason): the test does not run over headed devices")
