"""Many client processes through the Linux port's submission rings for a chosen time, every submit
accounted for, against one in-process submit loop, in one run.

A KMD daemon in this process (full configuration, threaded devices unless ``--mode deterministic``,
a FUSE thread per client) serves ``--clients`` processes (default 8) that each run a one-Relu network
with ``rt.submit()`` back to back for ``--seconds`` (default 60) from a common start, recording the
task id of every submit (:mod:`pydla.testing.ring_load`). The daemon's job counter records the id
and end of every job per client. Printed: broken rings (the daemon's and the clients' view), lost
submits (an id a submit returned that the daemon did not complete), duplicated ones (a job the
daemon queued that no submit returned, or an id returned twice), errors, each client's share, and
the total rate against one in-process submit loop of the daemon's mode (a process of its own,
blocks of 0.25 s; the median block), run before and after the clients. The machine is shared, so
the ratio is also measured in ``--rounds`` alternating pairs (the in-process loop for 2 s, then
the clients for 4 s): the median of the pairs' ratios is the figure to quote.

Goals (the reliability issue's ring goal, and the performance issue's Linux-port goal):
0 broken rings, 0 lost or duplicated submits, every share within 20% of the mean; total / one
in-process loop >= 0.5x.

Needs root and /dev/fuse (it says so otherwise). Run:
``python bench/bench_linux_clients.py [--clients 8] [--seconds 60]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

GOAL_SHARE = 0.2
GOAL_RATIO = 0.5

ANCHOR = """
import json, sys, time
import numpy as np
import pydla
rt = pydla.createRuntime(mode=sys.argv[2])
rt.load(open(sys.argv[1], "rb").read())
d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
a, b = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
rt.bindInputTensor(0, a); rt.bindOutputTensor(0, b)
rt.submit()
rates, end = [], time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 0.25:
        rt.submit(); n += 1
    rates.append(n / (time.monotonic() - t0))
print(json.dumps(rates))
"""


def anchor_rates(blob: Path, mode: str, seconds: float) -> list[float]:
    """Submits per second of one in-process loop, per 0.25 s block."""
    out = subprocess.run([sys.executable, "-c", ANCHOR, str(blob), mode, str(seconds)], capture_output=True,
                         text=True, check=True, timeout=seconds + 120)
    return [float(r) for r in json.loads(out.stdout)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the clients submit")
    parser.add_argument("--anchor-seconds", type=float, default=5.0,
                        help="the in-process loop, before and after the clients")
    parser.add_argument("--mode", choices=("threaded", "deterministic"), default="threaded",
                        help="the daemon's device mode (and the in-process loop's)")
    parser.add_argument("--no-ring", action="store_true", help="ioctls only (PYDLA_LINUX_RING=0)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating pairs for the ratio")
    args = parser.parse_args()
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0:
        raise SystemExit("needs root and /dev/fuse: the KMD daemon mounts a FUSE file system")
    from pydla.linux import unmount
    from pydla.testing.ring_load import ledger_daemon, run_clients, write_relu_network

    ring = not args.no_ring
    with tempfile.TemporaryDirectory(prefix="pydla-bench-") as tmp:
        mnt, blob = Path(tmp) / "mnt", Path(tmp) / "relu.dla"
        mnt.mkdir()
        write_relu_network(blob)
        daemon, ledger = ledger_daemon(args.clients, mode=args.mode)
        server = daemon.serve(mnt)
        try:
            before = anchor_rates(blob, args.mode, args.anchor_seconds)
            report = run_clients(mnt, blob, clients=args.clients, seconds=args.seconds, ring=ring)
            after = anchor_rates(blob, args.mode, args.anchor_seconds)
            pairs = []
            for _ in range(args.rounds):
                local = statistics.median(anchor_rates(blob, args.mode, 2.0))
                paired = run_clients(mnt, blob, clients=args.clients, seconds=4.0, ring=ring)
                pairs.append(paired.rate / local)
        finally:
            server.stop(timeout=10.0)
            daemon.close()
            unmount(str(mnt))

    how = "ioctls only" if args.no_ring else "submission rings"
    print(f"Linux port, {how}, daemon mode {args.mode}, one-Relu network (1x8x4x4)")
    print(report.summary(ledger))
    local = statistics.median(before + after)
    soak_ratio = report.rate / local
    print(f"one in-process loop ({args.mode}): median {local:,.0f}/s (before "
          f"{statistics.median(before):,.0f}, after {statistics.median(after):,.0f}); "
          f"total / in-process: {soak_ratio:.2f}x")
    ratio = statistics.median(pairs) if pairs else soak_ratio
    print(f"{len(pairs)} alternating pairs (in-process 2 s, {args.clients} clients 4 s): "
          f"{', '.join(f'{r:.2f}x' for r in pairs)}; median {ratio:.2f}x")
    lost, dup = report.lost(ledger), report.duplicated(ledger)
    verdicts = [
        ("0 broken rings", report.broken_rings() == 0),
        ("0 lost or duplicated submits", not lost and not dup),
        (f"shares within {GOAL_SHARE:.0%} of the mean ({report.worst_share():.1%})",
         report.worst_share() <= GOAL_SHARE),
        (f"total / one in-process loop >= {GOAL_RATIO}x ({ratio:.2f}x)", ratio >= GOAL_RATIO),
    ]
    for goal, met in verdicts:
        print(f"goal {goal}: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
