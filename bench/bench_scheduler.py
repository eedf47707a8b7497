"""Scheduler cost per operation: a 100-operation graph against a 10,000-operation graph.

Both graphs are chains of tiny BDMA copies (16 bytes, ping-pong between two buffers), so the time
is the KMD's: validating the descriptors, programming registers, handling interrupts and events.
Goal: the cost per operation of the large graph within 1.2x of the small one (the scheduler is
linear). Deterministic device mode, medians of several runs.

Run: python bench/bench_scheduler.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.kmd.graph import load_task
from pydla.kmd.taskbuilder import TaskBuilder


def chain(n: int) -> TaskBuilder:
    tb = TaskBuilder()
    a, b = tb.ref("a", 16), tb.ref("b", 16)
    for i in range(n):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        tb.bdma(src, dst, line_size=16)
    return tb


def measure(n: int, repeats: int) -> tuple[float, float]:
    dev = VirtualDevice("full", mode="deterministic")
    kmd = Kmd(dev)
    ctx = kmd.open_context()
    built = chain(n).build()
    loaded = built.load(kmd, ctx)
    run_times, check_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        kmd.submit(ctx, loaded.addresses, timeout_ms=600_000).wait(600_000)
        run_times.append((time.perf_counter() - t0) / n)
        job = kmd.history[-1]
        t0 = time.perf_counter()
        load_task(kmd.port, job.task, dev.config)
        check_times.append((time.perf_counter() - t0) / n)
    kmd.close()
    dev.close()
    return statistics.median(run_times), statistics.median(check_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=10_000)
    args = parser.parse_args()
    small = measure(args.small, args.repeats)
    large = measure(args.large, max(1, args.repeats // 2))
    for name, (run, check) in ((f"{args.small} ops", small), (f"{args.large} ops", large)):
        print(f"{name:>10}: {run * 1e6:8.1f} us/op submit-to-done, {check * 1e6:6.1f} us/op of it validating")
    print(f"ratio large/small per operation: {large[0] / small[0]:.2f}x (goal <= 1.2)")


if __name__ == "__main__":
    main()
