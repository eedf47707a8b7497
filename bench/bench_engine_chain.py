"""DLA tasks per second on a threaded device: the engine as AP_CTRL_CHAIN (depth 2) against AP_CTRL_HS.

Under CHAIN the driver programs the next task's operations into the register groups the running
task left free, so the host's programming overlaps the device's computing; HS takes one task at a
time. The work: --contexts contexts each submitting --tasks tasks of a --ops-long chain of BDMA
copies (--bytes each), non-blocking, then waiting for all. The anchor is the same run with the
engine declared AP_CTRL_HS, in alternating order. Medians of --repeats runs, with the ratio.

Run: python bench/bench_engine_chain.py [--repeats 5] [--contexts 2] [--tasks 100] [--ops 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.loadable.taskbuilder import TaskBuilder
from pydla.target.config import DeviceConfig, load_config


def engine_config(control: str, depth: int) -> DeviceConfig:
    config = load_config("full")
    units = tuple(replace(cu, m_ip_control=control, pipeline_depth=depth) if cu.is_engine else cu
                  for cu in config.ip_layout)
    return replace(config, ip_layout=units)


def chain(n: int, nbytes: int) -> TaskBuilder:
    tb = TaskBuilder()
    a, b = tb.ref("a", nbytes), tb.ref("b", nbytes)
    for i in range(n):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        tb.bdma(src, dst, line_size=nbytes)
    return tb


def tasks_per_second(config: DeviceConfig, contexts: int, tasks: int, ops: int, nbytes: int) -> float:
    dev = VirtualDevice(config, mode="threaded")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        built = chain(ops, nbytes).build()
        loaded = []
        for _ in range(contexts):
            ctx = kmd.open_context()
            loaded.append((ctx, built.load(kmd, ctx)))
        for ctx, task in loaded:  # warm the driver's task cache
            kmd.submit(ctx, task.addresses, timeout_ms=60_000).wait(60_000)
        t0 = time.perf_counter()
        jobs = [kmd.submit(ctx, task.addresses, timeout_ms=60_000)
                for _ in range(tasks) for ctx, task in loaded]
        for job in jobs:
            job.wait(60_000)
        return len(jobs) / (time.perf_counter() - t0)
    finally:
        kmd.close()
        dev.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--contexts", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=100, help="tasks per context")
    parser.add_argument("--ops", type=int, default=8, help="BDMA copies per task")
    parser.add_argument("--bytes", type=int, default=1 << 16, help="bytes per copy")
    args = parser.parse_args()
    chain_cfg, hs_cfg = engine_config("AP_CTRL_CHAIN", 2), engine_config("AP_CTRL_HS", 1)
    chain_rates, hs_rates = [], []
    for i in range(args.repeats):
        order = [(chain_cfg, chain_rates), (hs_cfg, hs_rates)]
        for config, rates in order if i % 2 == 0 else reversed(order):
            rates.append(tasks_per_second(config, args.contexts, args.tasks, args.ops, args.bytes))
    c, h = statistics.median(chain_rates), statistics.median(hs_rates)
    print(f"engine AP_CTRL_CHAIN depth 2: {c:8.1f} tasks/s (median of {args.repeats})")
    print(f"engine AP_CTRL_HS:            {h:8.1f} tasks/s")
    print(f"CHAIN / HS: {c / h:.2f}x")


if __name__ == "__main__":
    main()
