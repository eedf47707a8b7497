"""The time budget of emulated kernels: one daemon thread for the whole process stops (emu_stop) an
emulation that runs longer than its budget.

The budget counts the CPU time of the thread that emulates (its POSIX CPU clock, read from the
watchdog's thread), not wall time: on a loaded machine, or in a process run under ``nice``, a thread
can wait for a core longer than a short budget, and a kernel would be stopped (BUDGET) for time it
never ran (the fuzz campaign saw it at load 15 with a 50 ms budget). Where a thread's CPU clock
cannot be read (no ``time.pthread_getcpuclockid``), wall time.

unicorn's own ``timeout`` starts a thread for every emu_start (about 0.3 ms each, measured: more than
an empty kernel's whole invocation), and its instruction ``count`` slows emulation about 2.5x; this
costs two attribute writes per emulation. The thread starts with the first watched emulation and
polls every ``POLL_S`` (or a tenth of the shortest budget seen, at least ``MIN_POLL_S``), so a
runaway kernel stops within its budget plus one poll.

Usage::

    with WATCHDOG.watch(uc, budget_s) as hit:
        uc.emu_start(...)
    if hit.stopped: ...   # the budget ran out
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

POLL_S = 0.05
MIN_POLL_S = 0.01  # a short budget (a test's) polls faster, never more than 100 times a second


class Watch:
    """One emulation: its emulator, the clock it is timed by (its thread's CPU time, or wall time)
    and the reading at which its budget ends."""

    def __init__(self, uc: Any, budget_s: float) -> None:
        self.uc = uc
        self.clock = _emulating_thread_clock()
        self.deadline = self.clock() + budget_s
        self.stopped = False

    def expired(self) -> bool:
        try:
            return self.clock() >= self.deadline
        except OSError:  # the thread is gone: its emulation has ended
            return False


def _emulating_thread_clock() -> Callable[[], float]:
    """The calling thread's CPU time as seen from any thread, else the monotonic clock."""
    getcpuclockid = getattr(time, "pthread_getcpuclockid", None)
    if getcpuclockid is not None:
        try:
            clock = int(getcpuclockid(threading.get_ident()))
            return lambda: time.clock_gettime(clock)
        except OSError:
            pass
    return time.monotonic


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._poll = POLL_S

    @contextmanager
    def watch(self, uc: Any, budget_s: float) -> Iterator[Watch]:
        w = Watch(uc, budget_s)
        with self._lock:
            self._watches.add(w)
            self._poll = min(self._poll, max(budget_s / 10, MIN_POLL_S))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="pydla-shave-watchdog")
                self._thread.start()
        try:
            yield w
        finally:
            with self._lock:
                self._watches.discard(w)

    def _run(self) -> None:
        while True:
            time.sleep(self._poll)
            with self._lock:
                for w in self._watches:
                    if w.expired():
                        # Again at every poll until the emulation ends: a stop requested just before
                        # the emulator started would be forgotten by it.
                        w.stopped = True
                        w.uc.emu_stop()


WATCHDOG = Watchdog()
