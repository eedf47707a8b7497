"""Scheduler cost per operation: a 100-operation graph against a 10,000-operation graph.

Both graphs are chains of tiny BDMA copies (16 bytes, ping-pong between two buffers), so the time
is the KMD's: validating the descriptors, programming registers, handling interrupts and events.
Goal: the cost per operation of the large graph within 1.2x of the small one (the scheduler is
linear). Deterministic device mode. Three figures per graph: the first submit (the KMD reads and
validates the task, then caches it), later submits of the same task (medians; the cache is checked
byte for byte, nothing is validated again), and a validation alone (``load_task``, medians).

Run: python bench/bench_scheduler.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.firmware.graph import load_task
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.loadable.taskbuilder import TaskBuilder


def chain(n: int) -> TaskBuilder:
    tb = TaskBuilder()
    a, b = tb.ref("a", 16), tb.ref("b", 16)
    for i in range(n):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        tb.bdma(src, dst, line_size=16)
    return tb


def measure(n: int, repeats: int) -> tuple[float, float, float]:
    """Per operation, in seconds: the first submit, later submits (median), a validation (median)."""
    dev = VirtualDevice("full", mode="deterministic")
    kmd = Kmd(VirtualDevicePort(dev))
    ctx = kmd.open_context()
    built = chain(n).build()
    loaded = built.load(kmd, ctx)

    def submit() -> float:
        t0 = time.perf_counter()
        kmd.submit(ctx, loaded.addresses, timeout_ms=600_000).wait(600_000)
        return (time.perf_counter() - t0) / n

    first = submit()
    run_times, check_times = [], []
    for _ in range(repeats):
        run_times.append(submit())
        job = kmd.history[-1]
        t0 = time.perf_counter()
        load_task(kmd.port, job.task, dev.config)
        check_times.append((time.perf_counter() - t0) / n)
    kmd.close()
    dev.close()
    return first, statistics.median(run_times), statistics.median(check_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=10_000)
    args = parser.parse_args()
    small = measure(args.small, args.repeats)
    large = measure(args.large, args.repeats)
    for name, (first, run, check) in ((f"{args.small} ops", small), (f"{args.large} ops", large)):
        print(f"{name:>10}: first submit {first * 1e6:6.1f} us/op, later submits {run * 1e6:6.1f} us/op, "
              f"validation {check * 1e6:5.1f} us/op")
    for what, i in (("first submit", 0), ("later submits", 1), ("validation", 2)):
        ratio = large[i] / small[i]
        print(f"ratio large/small per operation, {what}: {ratio:.2f}x (goal <= 1.2): "
              f"{'met' if ratio <= 1.2 else 'NOT met'}")


if __name__ == "__main__":
    main()
