"""Preparing a mount point: a non-empty directory is refused, a stale mount of our own file system type
is cleared (and one of another type is not), a live mount is never touched."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pydla import devices
from pydla.errors import DlaError, NvError
from pydla.linux import FuseServer
from pydla.linux.daemon import KmdDaemon
from pydla.linux.fuse_mount import FuseMountError, list_mounts, mount_fuse, open_fuse_device
from tests.linux.conftest import TestHandler, fuse_unavailable


def _stale(mountpoint: Path, name: str) -> None:
    """A FUSE mount of type fuse.<name> whose "daemon" died at once (closed /dev/fuse)."""
    fd = open_fuse_device()
    try:
        mount_fuse(fd, str(mountpoint), name)
    finally:
        os.close(fd)


def _stop(process: subprocess.Popen[str], timeout: float = 10.0) -> None:
    """SIGSTOP ``process`` and return once every one of its threads is stopped.

    kill() returns before the stop takes effect, and on this project's VMs a SIGSTOP sent while the
    daemon's threads were busy was seen still pending 2 s later (the daemon answered a listing
    meanwhile), so the signal is sent again until /proc shows every thread stopped."""
    deadline = time.monotonic() + timeout
    while True:
        process.send_signal(signal.SIGSTOP)
        resend = time.monotonic() + 0.5
        while time.monotonic() < resend:
            states = []
            for tid in os.listdir(f"/proc/{process.pid}/task"):
                try:
                    with open(f"/proc/{process.pid}/task/{tid}/stat", encoding="ascii") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except OSError:  # a thread that ended meanwhile
                    pass
            if states and all(state == "T" for state in states):
                return
            time.sleep(0.01)
        assert time.monotonic() < deadline, f"pid {process.pid} did not stop: thread states {states}"


def test_a_non_empty_directory_is_refused_naming_it_and_what_it_holds(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "sub").mkdir()
    with pytest.raises(FuseMountError) as e:
        FuseServer(tmp_path, {"x": TestHandler()}, threads=1).start()
    assert e.value.errno == errno.ENOTEMPTY
    assert str(tmp_path) in str(e.value) and "notes.txt, sub" in str(e.value)
    assert "empty directory" in str(e.value)
    daemon = KmdDaemon("small", mode="deterministic")
    try:
        with pytest.raises(DlaError) as d:
            daemon.serve(tmp_path)
        assert d.value.code == NvError.ResourceError and "not empty" in d.value.message
    finally:
        daemon.close()
    assert not os.path.ismount(tmp_path) and (tmp_path / "notes.txt").read_text() == "mine"


def test_a_stale_mount_of_our_own_type_is_cleared_and_served(mountpoint: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    _stale(mountpoint, "pydla")
    server = FuseServer(mountpoint, {"x": TestHandler()}, threads=1)
    with caplog.at_level("WARNING"), server:
        assert server.cleared_stale == 1
        assert os.listdir(mountpoint) == ["x"]
    assert f"cleared a stale fuse.pydla mount at {mountpoint}" in caplog.text
    assert not os.path.ismount(mountpoint)


def test_a_live_mount_is_never_unmounted(serve: Callable[..., FuseServer], mountpoint: Path) -> None:
    serve()
    with pytest.raises(FuseMountError) as e:
        FuseServer(mountpoint, {"x": TestHandler()}, threads=1).start()
    assert e.value.errno == errno.EBUSY and "running daemon" in str(e.value)
    assert f"pydla devices {mountpoint}" in str(e.value)
    assert sorted(os.listdir(mountpoint)) == ["dla0", "dla1"]  # still served


def test_list_mounts_finds_our_mounts(serve: Callable[..., FuseServer], mountpoint: Path) -> None:
    serve()
    found = [m for m in list_mounts("fuse.pydla") if m.mount_point == str(mountpoint)]
    assert len(found) == 1 and found[0].source == "pydla"


def test_a_stopped_daemon_is_neither_waited_for_nor_unmounted(mountpoint: Path) -> None:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    daemon = subprocess.Popen([sys.executable, "-m", "pydla", "kmd", "--mount", str(mountpoint),
                               "--config", "small"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert daemon.stdout is not None and "serving dla0" in daemon.stdout.readline()
        _stop(daemon)
        started = time.monotonic()
        with pytest.raises(FuseMountError) as e:
            FuseServer(mountpoint, {"x": TestHandler()}, threads=1).start()
        assert e.value.errno == errno.EBUSY and "does not answer within 2 s" in str(e.value)
        entry = devices.examine(str(mountpoint), timeout=1.0)
        assert entry["state"] == "not answering"
        assert time.monotonic() - started < 10
        assert any(m.mount_point == str(mountpoint) for m in list_mounts("fuse.pydla"))
    finally:
        daemon.send_signal(signal.SIGCONT)
        daemon.terminate()
        daemon.communicate(timeout=30)
    assert not any(m.mount_point == str(mountpoint) for m in list_mounts())
