"""A submission ring the daemon breaks while a client is using it: every submit is run exactly once
(the entries the daemon took are answered through the broken ring, the others go by ioctl), and a
submit never raises for a job that was queued (a caller that retries would run it twice)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pydla.linux.daemon import KmdDaemon
from pydla.linux.ring_server import ServedRing
from tests.linux.test_daemon import client, daemon, finish, net, wait_until  # noqa: F401 (fixtures)

SUBMITS = 8
BODY = f"""
rt = pydla.createRuntime("linux", path=MNT)
rt.load(BLOB)
x, y = run_net(rt, 0)  # binds the tensors; then the same task again and again
ok = 1
for _ in range({SUBMITS} - 1):
    rt.submit(); ok += 1
print("submits", ok)
print("ring gone", rt.handle.ring() is None)
np.save(os.path.dirname(MNT) + "/x.npy", x); np.save(os.path.dirname(MNT) + "/y.npy", y)
rt.close()
"""


def count_jobs(d: KmdDaemon, monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Jobs the daemon queued per client pid, by ring or by ioctl (the one place both go through)."""
    queued: Counter[int] = Counter()
    lock = threading.Lock()
    real = d._queue_prepared

    def counted(client: Any, a: Any, on_done: Any, what: str) -> Any:
        job = real(client, a, on_done, what)
        with lock:
            queued[client.pid] += 1
        return job

    monkeypatch.setattr(d, "_queue_prepared", counted)
    return queued


def check_ran_once(d: KmdDaemon, queued: Counter[int], lines: list[str], model: object, mnt: Path) -> None:
    from pydla.demo import reference

    assert lines[0] == f"submits {SUBMITS}"
    assert lines[1] == "ring gone True"  # the rest went by ioctl
    assert list(queued.values()) == [SUBMITS], queued  # one client, each submit queued once
    x, y = np.load(mnt.parent / "x.npy"), np.load(mnt.parent / "y.npy")
    np.testing.assert_allclose(y, reference(model, {"input": x})[0], rtol=1e-5, atol=1e-6)
    wait_until(lambda: d.counts() == {"clients": 0, "buffers": 0, "syncs": 0})


@pytest.mark.headless_only("the ring's answers do not depend on where the engine scheduler runs")
def test_a_break_after_the_daemon_queued_an_entry_still_answers_it(
        daemon: tuple[KmdDaemon, Path], net: tuple[Path, object],  # noqa: F811 (fixtures)
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The break lands between queueing the third ring entry and answering it (as a completion
    queue read as full did): the entry is answered through the broken ring, the submit returns."""
    d, mnt = daemon
    blob, model = net
    queued = count_jobs(d, monkeypatch)
    real_submit = d._rings._submit
    ring_entries = 0

    def break_after_queueing(c: Any, sqe: Any, on_done: Any) -> Any:
        nonlocal ring_entries
        job = real_submit(c, sqe, on_done)
        ring_entries += 1
        if ring_entries == 3:
            c.ring.break_ring("broken by the test after queueing an entry")
        return job

    monkeypatch.setattr(d._rings, "_submit", break_after_queueing)
    check_ran_once(d, queued, finish(client(mnt, blob, BODY)), model, mnt)
    assert ring_entries == 3  # the ring took three, the ioctl the others


@pytest.mark.headless_only("the ring's answers do not depend on where the engine scheduler runs")
def test_a_break_before_the_daemon_took_an_entry_sends_it_by_ioctl(
        daemon: tuple[KmdDaemon, Path], net: tuple[Path, object],  # noqa: F811 (fixtures)
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The break lands when the fourth entry is written but not yet taken: the daemon never takes
    it (sq_head says so), the client submits it by ioctl, once."""
    d, mnt = daemon
    blob, model = net
    queued = count_jobs(d, monkeypatch)
    real_take = ServedRing.take
    taken = 0

    def break_before_the_fourth(ring: ServedRing) -> Any:
        nonlocal taken
        if taken == 3:
            ring.break_ring("broken by the test before taking an entry")
        sqe = real_take(ring)
        taken += sqe is not None
        return sqe

    monkeypatch.setattr(ServedRing, "take", break_before_the_fourth)
    check_ran_once(d, queued, finish(client(mnt, blob, BODY)), model, mnt)
    assert taken == 3
