"""``pydla devices`` and the daemon's ``DIR/status``: configurations, running daemons with their
versions, contexts, clients and job counts; stale and silent daemons; the status file's rules."""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pydla import devices
from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.linux import FuseServer, unmount
from pydla.linux.daemon import KmdDaemon
from pydla.linux.fuse_mount import mount_fuse, open_fuse_device
from pydla.linux.status import StatusFile
from tests.linux.conftest import fuse_unavailable
from tests.linux.test_daemon import PRELUDE, client, daemon, finish, net, wait_until  # noqa: F401 (fixtures)

RUN_JOBS = """
rt = pydla.createRuntime("linux", path=MNT, device={device})
rt.load(BLOB)
for s in range({jobs}):
    run_net(rt, s)
print("ran", flush=True)
if {hold}:
    sys.stdin.readline()  # keeps its device file (its context) open until told
"""


def pydla_devices(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``pydla devices ARGV`` in this process (the parser as pydla's cli builds it); its stdout."""
    parser = argparse.ArgumentParser(prog="pydla")
    devices.register(parser.add_subparsers())
    args = parser.parse_args(["devices", *argv])
    capsys.readouterr()
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_devices_json_reports_versions_contexts_clients_and_jobs(
        daemon: tuple[KmdDaemon, Path], net: tuple[Path, object],  # noqa: F811 (fixtures)
        capsys: pytest.CaptureFixture[str]) -> None:
    d, mnt = daemon
    blob, _ = net
    holder = subprocess.Popen([sys.executable, "-c", PRELUDE.format(mnt=str(mnt), blob=str(blob))
                               + RUN_JOBS.format(device=0, jobs=3, hold=True)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    gone = client(mnt, blob, RUN_JOBS.format(device=1, jobs=2, hold=False))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ran"
        assert finish(gone)[0] == "ran"
        # The daemon forgets a client before it closes the client's context: wait for both.
        wait_until(lambda: d.counts()["clients"] == 1 and d.kmds[1].stats()["contexts"] == 0)
        entry = json.loads(pydla_devices(capsys, "--json", str(mnt)))
        assert entry["state"] == "running" and entry["mount"] == str(mnt) and entry["error"] is None
        s = entry["status"]
        assert s["format"] == 1 and s["pid"] == os.getpid() and s["mount"] == str(mnt)
        assert s["uapi"] == ".".join(map(str, U.VERSION))
        assert s["uapi_layout_hash"] == f"{U.LAYOUT_HASH64:016x}"
        assert s["config"] == d.platform.name and s["mode"] == "threaded" and s["uptime_s"] > 0
        dev0, dev1 = s["devices"]
        assert (dev0["file"], dev0["contexts"], dev1["contexts"]) == ("dla0", 1, 0)
        assert dev0["jobs"] == {"queued": 0, "running": 0, "submitted": 3, "completed": 3, "failed": 0}
        assert dev1["jobs"]["completed"] == 2  # the jobs of a client that has gone still count
        assert "CONV" in dev0["blocks"] and dev0["memory_bytes"] == d.memory_bytes
        assert dev0["banned_contexts"] == 0
        assert dev0["recovery"] == {"tdr_ms": d.kmds[0].watchdog.tdr_ms, "ban_after": 3, "hangs": 0,
                                    "budget_timeouts": 0, "context_aborts": 0, "block_resets": 0,
                                    "device_resets": 0, "failed_resets": 0, "bans": 0}
        [c] = s["clients"]
        assert c["pid"] == holder.pid and c["device"] == 0 and c["command"].startswith("python")
        assert c["jobs"] == {"submitted": 3, "completed": 3, "failed": 0, "in_flight": 0}
        assert c["buffers"] > 0 and c["buffer_bytes"] > 0
        assert s["totals"] == {"clients": 1, "jobs_queued": 0, "jobs_running": 0, "jobs_submitted": 5,
                               "jobs_completed": 5, "jobs_failed": 0}
        text = pydla_devices(capsys, str(mnt))
        assert "uAPI 2." in text and "dla0: 1 context(s); jobs: 0 queued, 0 running, 3 completed" in text
        assert "hang timeout 2000 ms; 0 hang(s), 0 block reset(s), 0 device reset(s), 0 banned" in text
        assert f"client pid {holder.pid}" in text
        holder.communicate("go\n", timeout=30)  # it closes its file: its context goes
        wait_until(lambda: json.loads(pydla_devices(capsys, "--json", str(mnt)))["status"]["devices"][0]
                   ["contexts"] == 0)
    finally:
        for p in (holder, gone):
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)


def test_devices_lists_configurations_and_every_daemon(daemon: tuple[KmdDaemon, Path],  # noqa: F811
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, mnt = daemon
    found = json.loads(pydla_devices(capsys, "--json"))
    names = [c["name"] for c in found["configurations"]]
    assert "full" in names and "small" in names
    small = found["configurations"][names.index("small")]
    assert small["instances"] == 1 and "RUBIK" not in small["blocks"]
    ours = [e for e in found["daemons"] if e["mount"] == str(mnt)]
    assert len(ours) == 1 and ours[0]["state"] == "running"
    text = pydla_devices(capsys)
    assert "Virtual device configurations" in text and f"  {mnt}: pid {os.getpid()}" in text


def test_devices_says_when_nothing_serves_the_directory(tmp_path: Path) -> None:
    with pytest.raises(DlaError) as e:
        devices.examine(str(tmp_path))
    assert e.value.code == NvError.DeviceNotFound
    assert f"`pydla kmd --mount {tmp_path}`" in e.value.message


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[Path]:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    path = tmp_path / "mnt"
    path.mkdir()
    yield path
    unmount(str(path))


def test_a_stale_daemon_is_shown_with_the_command_that_clears_it(mnt: Path) -> None:
    fd = open_fuse_device()
    try:
        mount_fuse(fd, str(mnt), "pydla")
    finally:
        os.close(fd)  # the daemon "dies" without unmounting
    entry = devices.examine(str(mnt))
    assert entry["state"] == "stale" and f"pydla kmd --mount {mnt}" in entry["error"]
    assert f"umount -l {mnt}" in entry["error"]
    assert any(e["mount"] == str(mnt) and e["state"] == "stale" for e in devices.examine()["daemons"])


def test_a_daemon_that_does_not_answer_is_reported_within_the_timeout(mnt: Path) -> None:
    gate = threading.Event()

    def make() -> dict[str, Any]:
        gate.wait(30)
        return {"late": True}

    with FuseServer(mnt, {"status": StatusFile(make)}, threads=2):
        try:
            entry = devices.read_daemon(str(mnt), timeout=0.5)
            assert entry["state"] == "not answering" and "0.5 s" in entry["error"]
        finally:
            gate.set()


def test_the_status_file_is_read_only_and_takes_no_ioctls(daemon: tuple[KmdDaemon, Path]) -> None:  # noqa: F811
    _, mnt = daemon
    path = mnt / "status"
    assert (path.stat().st_mode & 0o777) == 0o444
    with pytest.raises(PermissionError):
        os.open(path, os.O_WRONLY)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as e:
            fcntl.ioctl(fd, 0x80086401, bytearray(8), True)
        assert e.value.errno == errno.ENOTTY
        chunks = []
        while chunk := os.read(fd, 7):  # small reads: one snapshot, read in pieces
            chunks.append(chunk)
        assert json.loads(b"".join(chunks))["format"] == 1
    finally:
        os.close(fd)
    fd = os.open(mnt / "dla0", os.O_RDWR)
    try:
        with pytest.raises(OSError) as e:
            os.read(fd, 8)  # a device file is not read
        assert e.value.errno == errno.EINVAL
    finally:
        os.close(fd)


class _FakeJob:
    def __init__(self) -> None:
        self.state, self.done, self.on_done = "queued", False, None

    def end(self, state: str) -> None:  # as Job._finish: state and done first, then the hook
        self.state, self.done = state, True
        hook, self.on_done = self.on_done, None
        if hook is not None:
            hook(self)


class _FakeClient:
    device = 0


def test_job_counter_counts_each_end_once_whatever_the_order() -> None:
    from pydla.linux.status import JobCounter

    counter = JobCounter(devices=1)
    c = _FakeClient()
    early = _FakeJob()  # ends inside its submit, before the daemon counts it
    early.on_done = counter.hook()
    early.end("completed")
    counter.submitted(c, early)
    late = _FakeJob()  # the SUBMIT ioctl's: the hook is set after the KMD returned the job
    counter.watch(c, late)
    unhooked = _FakeJob()  # ends between the KMD's return and watch(): done already
    unhooked.state, unhooked.done = "failed", True
    counter.watch(c, unhooked)
    assert counter.snapshot()[1][c] == {"submitted": 3, "completed": 1, "failed": 1, "in_flight": 1}
    late.state, late.done = "completed", True  # ended, its hook not run yet: the snapshot counts it
    devices_, clients = counter.snapshot()
    assert devices_[0] == {"submitted": 3, "completed": 2, "failed": 1}
    assert clients[c]["in_flight"] == 0
    late.on_done(late)  # type: ignore[misc]  # the hook running now counts nothing twice
    assert counter.snapshot()[0][0] == {"submitted": 3, "completed": 2, "failed": 1}
    counter.forget(c)
    assert counter.snapshot()[1] == {} and counter.snapshot()[0][0]["completed"] == 2
