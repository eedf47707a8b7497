"""Executions per second of a no-op compute unit driven by the KMD: AP_CTRL_HS against AP_CTRL_CHAIN.

Both units take the same latency per execution (``--latency-us``, wall time on a threaded device,
so the test is latency-bound as a real kernel is); the CHAIN unit has pipeline depth 3 and takes a new
start every latency / 3. HS serves one execution at a time (START1=>DONE1=>START2...); CHAIN keeps
three in flight. The goal: CHAIN >= 1.5x HS. Interrupt-driven (m_int_enable 1) unless --polling.
Medians of several runs.

Run: python bench/bench_cu.py [--executions 300] [--repeats 5] [--latency-us 1000] [--polling]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.target.config import load_config, parse_config

GOAL = 1.5


def config(latency_us: int, int_enable: int) -> Any:
    full = load_config("full")
    common = {"m_type": "IP_KERNEL", "m_int_enable": int_enable, "window": 0x10000, "model": "noop",
              "latency_cycles": int(latency_us * full.clock_mhz)}
    return parse_config({
        "name": "bench_cu", "description": "two no-op compute units", "instances": 1,
        "hw_version": full.hw_version, "blocks": [b.name for b in full.blocks],
        "precisions": [p.name for p in full.precisions], "memory_bytes": 1 << 24, "contexts": 4,
        "iova_base": full.iova_base, "iova_size": 1 << 32, "clock_mhz": full.clock_mhz,
        "ip_layout": [
            {**common, "m_name": "noop:hs", "m_interrupt_id": 0, "m_ip_control": "AP_CTRL_HS",
             "m_base_address": 0x10000},
            {**common, "m_name": "noop:chain", "m_interrupt_id": 1, "m_ip_control": "AP_CTRL_CHAIN",
             "m_base_address": 0x20000, "pipeline_depth": 3},
        ]}, "bench_cu")


def rate(kmd: Kmd, ctx: int, unit: str, executions: int) -> float:
    """Executions per second: all submitted at once (as XRT's host code should for CHAIN), then waited."""
    t0 = time.perf_counter()
    runs = [kmd.cu_submit(ctx, unit, [], timeout_ms=60_000) for _ in range(executions)]
    for ex in runs:
        ex.wait(60_000)
    return executions / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=300, help="executions per run (default 300)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs per unit; the median is shown (default 5)")
    parser.add_argument("--latency-us", type=int, default=1000,
                        help="one execution's latency in microseconds (default 1000)")
    parser.add_argument("--polling", action="store_true", help="units without interrupts (m_int_enable 0)")
    args = parser.parse_args()
    dev = VirtualDevice(config(args.latency_us, 0 if args.polling else 1), mode="threaded")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        ctx = kmd.open_context()
        rate(kmd, ctx, "hs", 5)  # warm up: the units' workers and the driver's threads start
        rate(kmd, ctx, "chain", 5)
        hs = statistics.median(rate(kmd, ctx, "hs", args.executions) for _ in range(args.repeats))
        chain = statistics.median(rate(kmd, ctx, "chain", args.executions) for _ in range(args.repeats))
    finally:
        kmd.close()
        dev.close()
    bound = 1e6 / args.latency_us
    how = "polling" if args.polling else "interrupts"
    print(f"no-op compute unit, latency {args.latency_us} us, {args.executions} executions, {how}, "
          f"median of {args.repeats}")
    print(f"  AP_CTRL_HS:             {hs:9.0f} executions/s  (latency bound {bound:.0f}/s)")
    print(f"  AP_CTRL_CHAIN depth 3:  {chain:9.0f} executions/s  (latency bound {3 * bound:.0f}/s)")
    ratio = chain / hs
    print(f"  CHAIN / HS: {ratio:.2f}x  (goal >= {GOAL}x: {'met' if ratio >= GOAL else 'NOT met'})")


if __name__ == "__main__":
    main()
