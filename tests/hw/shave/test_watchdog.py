"""The SHAVE time budget counts the emulating thread's CPU time: a kernel is not stopped for time its
thread spent waiting for a core (the fuzz campaign, run under ``nice -n 19`` at load 15, saw a
64-element kernel stopped at its 50 ms budget: BUDGET)."""

from __future__ import annotations

import time

import pytest

from pydla.hw.shave.watchdog import WATCHDOG


class FakeEmulator:
    def __init__(self) -> None:
        self.stops = 0

    def emu_stop(self) -> None:
        self.stops += 1


@pytest.mark.skipif(not hasattr(time, "pthread_getcpuclockid"), reason="no thread CPU clock: wall time")
def test_the_budget_counts_cpu_time_not_the_time_the_thread_waits() -> None:
    uc = FakeEmulator()
    with WATCHDOG.watch(uc, 0.05) as waiting:
        time.sleep(0.4)  # as a thread that gets no core: wall time passes, no CPU time
    assert not waiting.stopped and uc.stops == 0
    with WATCHDOG.watch(uc, 0.05) as running:
        end = time.thread_time() + 2.0
        while time.thread_time() < end and not running.stopped:
            pass
    assert running.stopped and uc.stops >= 1
    assert time.thread_time() < end  # stopped near its budget, not at the loop's own end
