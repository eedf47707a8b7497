"""Four client processes submitting through their rings at once for a few seconds (the short form of
bench/bench_linux_clients.py): no ring broken, every submit run exactly once (the clients' task ids
against the daemon's record of every job), right outputs, and no client starved."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pydla.linux import unmount
from pydla.testing.ring_load import Ledger, ledger_daemon, run_clients, write_relu_network
from tests.linux.conftest import fuse_unavailable

CLIENTS, SECONDS = 4, 3.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, Path, Ledger]]:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt, blob = tmp_path / "mnt", tmp_path / "relu.dla"
    mnt.mkdir()
    write_relu_network(blob)
    daemon, ledger = ledger_daemon(CLIENTS)
    server = daemon.serve(mnt)
    try:
        yield mnt, blob, ledger
    finally:
        server.stop(timeout=5.0)
        daemon.close()
        unmount(str(mnt))


def test_clients_at_once_lose_and_duplicate_nothing_and_no_ring_breaks(
        served: tuple[Path, Path, Ledger]) -> None:
    mnt, blob, ledger = served
    report = run_clients(mnt, blob, clients=CLIENTS, seconds=SECONDS)
    summary = report.summary(ledger)
    assert report.broken == [] and all(r.ring for r in report.runs), summary
    assert report.lost(ledger) == {} and report.duplicated(ledger) == {}, summary
    assert all(r.right and r.errors == [] for r in report.runs), summary
    for r in report.runs:  # each submit's id is a job the daemon completed for that very client
        assert sorted(r.ids) == sorted(ledger.queued[r.pid]) and len(r.ids) == r.window + 1, summary
    # The ring thread serves the rings in turn: a client far below the mean would be starved by it.
    mean = report.total / CLIENTS
    assert min(r.window for r in report.runs) >= 0.25 * mean > 0, summary
