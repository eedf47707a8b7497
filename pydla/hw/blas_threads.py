"""How many threads the device's BLAS products run on: ``PYDLA_BLAS_THREADS``.

OpenBLAS's threads wait for each other by spinning and yielding. On a machine whose cores other
processes take, a product's threads meet only when each one's turn comes, and a product costs many
times what one thread takes (measured on 2 shared cores, ``bench/bench_ab.py --base . --base-env
PYDLA_BLAS_THREADS=2`` against ``auto`` at load average 5-6: SqueezeNet 1.1 at 128x128 680 ms a
run with 2 BLAS threads against 19 ms, MobileNet-v2 224x224 407 against 74 ms, ResNet-18 249 against
80 ms; ``auto`` there was one thread's time within 2.5%). On an idle machine the threads pay
(ResNet-18's products are arithmetic).

The policy, decided before each product and re-decided at most every :data:`RESAMPLE_S`:

- ``PYDLA_BLAS_THREADS=N`` (N >= 1): N threads, always (at most the library's own count: OpenBLAS
  makes its threads when it loads, from ``OPENBLAS_NUM_THREADS`` or the cores);
- unset, or ``auto``: as many threads as the cores other processes leave idle, at least one and at
  most the library's own count. Other processes' use is the CPU time the system spent (the
  ``cpu`` line of ``/proc/stat``) less this process's own (``os.times``), over the last interval;
  a core counts as idle when less than :data:`BUSY_SHARE` of it is used by others. Before the first
  interval, and where ``/proc/stat`` cannot be read, the one-minute load average decides: one
  thread when it exceeds the cores. On an idle machine the library's count is never touched.

The count is the library's, for every caller: where the device runs on numpy's own OpenBLAS (no
private instance, see :mod:`pydla.hw.blas`), the application's numpy products run with it too
while the machine is busy.

Usage::

    policy = ThreadPolicy(set_threads, default=2, setting=os.environ.get("PYDLA_BLAS_THREADS"))
    policy.before_product()            # the library's count set for this product
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections.abc import Callable

# Re-decide at most this often (reading /proc/stat costs ~30 us).
RESAMPLE_S = 0.5
# A core whose time other processes take more than this share of is not idle (0.25: on 2 cores,
# another process's steady 30% of a core already makes a second BLAS thread wait for its turns).
BUSY_SHARE = 0.25


def parse_setting(setting: str | None) -> int | None:
    """The fixed thread count ``PYDLA_BLAS_THREADS`` asks for, or None for ``auto`` (also unset or
    empty). A value that is neither is warned about once and taken as ``auto``."""
    text = (setting or "").strip().lower()
    if text in ("", "auto"):
        return None
    if text.isdigit() and 1 <= int(text) <= 1024:
        return int(text)
    warnings.warn(f"PYDLA_BLAS_THREADS={setting!r}: expected 'auto' or a thread count 1..1024; "
                  "using 'auto'", RuntimeWarning, stacklevel=3)
    return None


def threads_for(idle_cores: float, default: int) -> int:
    """The thread count for ``idle_cores`` cores left idle by other processes (see
    :data:`BUSY_SHARE`): at least 1, at most ``default``."""
    return max(1, min(default, math.floor(idle_cores + BUSY_SHARE)))


def system_busy_seconds() -> float | None:
    """CPU seconds all CPUs have spent busy since boot (``/proc/stat``), or None where unknown."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    try:
        # user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
        values = [int(v) for v in fields[1:9]]
    except ValueError:
        return None
    busy = values[0] + values[1] + values[2] + values[5] + values[6] + values[7]
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


class ThreadPolicy:
    """The thread count of one BLAS library, kept as the policy says (see the module's text).

    ``set_threads`` sets the library's count; ``default`` is its own count. The samplers and the
    clock are parameters so that tests can drive them."""

    def __init__(self, set_threads: Callable[[int], None], default: int, setting: str | None, *,
                 cores: int | None = None, clock: Callable[[], float] = time.monotonic,
                 busy: Callable[[], float | None] = system_busy_seconds,
                 own: Callable[[], float] = own_cpu_seconds,
                 load: Callable[[], float | None] = load_average) -> None:
        self._set = set_threads
        self.default = max(1, default)
        self.cores = max(1, cores or os.cpu_count() or 1)
        self.fixed = parse_setting(setting)
        self._clock, self._busy, self._own, self._load = clock, busy, own, load
        self._lock = threading.Lock()
        self.current = self.default  # the library's count as it loaded
        self._next = 0.0  # when to decide again
        self._sample: tuple[float, float, float] | None = None  # (wall, system busy, own cpu)
        if self.fixed is not None:
            self._apply(min(self.fixed, self.default))
            self._next = math.inf

    def before_product(self) -> None:
        """Set the library's count for the product about to run (re-decided at most every
        RESAMPLE_S; a fixed setting was applied once)."""
        if self._clock() < self._next:
            return
        with self._lock:
            now = self._clock()
            if now < self._next:
                return
            self._next = now + RESAMPLE_S
            self._apply(self._decide(now))

    def _decide(self, now: float) -> int:
        busy, own = self._busy(), self._own()
        previous = self._sample
        self._sample = (now, busy, own) if busy is not None else None
        if busy is not None and previous is not None and now > previous[0]:
            others = max(0.0, (busy - previous[1]) - (own - previous[2])) / (now - previous[0])
            return threads_for(self.cores - others, self.default)
        load = self._load()
        return 1 if load is not None and load > self.cores else self.default

    def _apply(self, threads: int) -> None:
        if threads != self.current:
            self._set(threads)
            self.current = threads
