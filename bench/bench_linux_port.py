"""The Linux port: submits through real ioctl(2) calls to the KMD daemon, against the in-process port
and a raw ioctl, in one run; then several client processes submitting at once.

A daemon (``python -m pydla kmd``, full configuration, threaded devices unless ``--mode
deterministic``) serves a temporary mount.
1. Round trip, one client: ``rt.submit()`` of a one-Relu network (compiled once) through
   ``createRuntime("linux")`` and through ``createRuntime(mode=...)`` (in-process, with the daemon's
   device mode: a threaded daemon is compared with threaded in-process devices), and a raw ioctl of the
   same kind as a submit's (GET_PARAM: a 208-byte struct in and out, nothing done) — medians and p90
   of alternating blocks. Goals: what the Linux port adds to an in-process submit, counted in raw
   ioctl round trips, <= 3; and (the earlier goal) <= 100 us per submit through the Linux port.
2. Throughput: N client processes (default 4), each submitting back to back for a few seconds;
   submits per second in total and each client's share, against one in-process submit loop's rate
   (from step 1). Goals: total >= 0.5x that rate (and the earlier >= 20,000/s), every client within
   20% of the mean (the KMD's round-robin across contexts).

Needs root and /dev/fuse (it says so otherwise). Run: python bench/bench_linux_port.py [--clients 4]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

GOAL_US = 100.0
GOAL_ROUND_TRIPS = 3.0  # (Linux submit - in-process submit) / raw ioctl
GOAL_RATE = 20_000
GOAL_RATE_RATIO = 0.5  # N clients' total rate / one in-process submit loop's rate (the daemon's mode)
GOAL_SHARE = 0.2

CLIENT = """
import sys, time, numpy as np, pydla
rt = pydla.createRuntime("linux", path=sys.argv[1])
rt.load(open(sys.argv[2], "rb").read())
d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
a, b = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
rt.bindInputTensor(0, a); rt.bindOutputTensor(0, b)
rt.submit()
print("ready", flush=True)
start = float(sys.stdin.readline())
while time.time() < start:
    time.sleep(0.001)
end, n = start + float(sys.argv[3]), 0
while time.time() < end:
    rt.submit(); n += 1
print(n, flush=True)
"""


def bound_runtime(port: str | None, mnt: Path, blob: bytes, ring: bool = True,
                  mode: str = "deterministic") -> Any:
    import pydla

    os.environ["PYDLA_LINUX_RING"] = "1" if ring else "0"
    rt = pydla.createRuntime(port, path=mnt) if port else pydla.createRuntime(mode=mode)
    rt.load(blob)
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    a, b = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
    x = np.random.default_rng(0).standard_normal(d_in.dims).astype(np.float32)
    a.array(np.float32, d_in.dims)[...] = x
    rt.bindInputTensor(0, a)
    rt.bindOutputTensor(0, b)
    rt.submit()
    if not np.array_equal(b.array(np.float32, d_out.dims), np.maximum(x, 0)):
        raise SystemExit(f"{port or 'inprocess'}: wrong result")
    return rt


def timed(fns: dict[str, Callable[[], object]], repeats: int, block: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="alternating blocks per measurement")
    parser.add_argument("--block", type=int, default=200, help="timed calls per block")
    parser.add_argument("--clients", type=int, default=4, help="client processes for the throughput part")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of the throughput part")
    parser.add_argument("--mode", choices=("threaded", "deterministic"), default="threaded",
                        help="the daemon's device mode")
    args = parser.parse_args()
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0:
        raise SystemExit("needs root and /dev/fuse: the KMD daemon mounts a FUSE file system")
    from pydla.deviceapi.generated import dla_uapi as U
    from pydla.linux import unmount
    from pydla.testing.ring_load import write_relu_network
    from pydla.uapi.ioctl import COMMANDS

    with tempfile.TemporaryDirectory(prefix="pydla-bench-") as tmp:
        mnt, blob_path = Path(tmp) / "mnt", Path(tmp) / "relu.dla"
        mnt.mkdir()
        write_relu_network(blob_path)
        command = [sys.executable, "-m", "pydla", "kmd", "--mount", str(mnt), "--mode", args.mode,
                   "--threads", str(max(4, args.clients + 1))]
        daemon = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            assert daemon.stdout is not None
            print(daemon.stdout.readline().strip())
            blob = blob_path.read_bytes()
            linux, local = bound_runtime("linux", mnt, blob), bound_runtime(None, mnt, blob, mode=args.mode)
            linux_ioctl = bound_runtime("linux", mnt, blob, ring=False)
            fd = os.open(mnt / "dla0", os.O_RDWR)
            hello = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                                      layout_hash64=U.LAYOUT_HASH64)
            fcntl.ioctl(fd, COMMANDS[U.dla_ioctl_e.HANDSHAKE], bytearray(bytes(hello)), True)
            raw = bytearray(bytes(U.dla_get_param_t(param=U.dla_param_e.NUM_DEVICES)))
            cmd = COMMANDS[U.dla_ioctl_e.GET_PARAM]
            times = timed({"raw ioctl (GET_PARAM, 208 B)": lambda: fcntl.ioctl(fd, cmd, raw, True),
                           "submit, in-process port": local.submit,
                           "submit, Linux port": linux.submit,
                           "submit, Linux port, no ring": linux_ioctl.submit}, args.repeats, args.block)
            os.close(fd)
            med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
            p90 = {k: float(np.percentile(v, 90)) * 1e6 for k, v in times.items()}
            ioctl_us = med["raw ioctl (GET_PARAM, 208 B)"]
            print(f"\none-Relu network, {args.repeats} blocks of {args.block} calls each")
            print(f"{'':34s} {'median':>10s} {'p90':>10s} {'/ ioctl':>8s}")
            for k in times:
                print(f"{k:34s} {med[k]:8.1f} us {p90[k]:8.1f} us {med[k] / ioctl_us:7.1f}x")
            linux_us = med["submit, Linux port"]
            local_us = med["submit, in-process port"]
            print(f"Linux port / in-process: {linux_us / local_us:.2f}x; with ioctls instead of "
                  f"the submission ring {med['submit, Linux port, no ring'] / local_us:.2f}x")
            trips = (linux_us - local_us) / ioctl_us
            print(f"goal Linux submit - in-process submit <= {GOAL_ROUND_TRIPS:.0f} raw ioctl round trips: "
                  f"{trips:.1f}: {'met' if trips <= GOAL_ROUND_TRIPS else 'NOT met'}")
            verdict = "met" if linux_us <= GOAL_US else f"NOT met ({linux_us / GOAL_US:.1f}x over)"
            print(f"goal submit through the Linux port <= {GOAL_US:.0f} us: {linux_us:.1f} us: {verdict}")
            linux.close()
            linux_ioctl.close()
            local.close()

            local_rate = 1e6 / local_us
            for ring in (True, False):
                throughput(args, mnt, blob_path, local_rate, ring)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
            unmount(str(mnt))


def throughput(args: argparse.Namespace, mnt: Path, blob_path: Path, local_rate: float, ring: bool) -> None:
    """``args.clients`` client processes submit for ``args.seconds``; their total against ``local_rate``."""
    env = dict(os.environ, PYDLA_LINUX_RING="1" if ring else "0")
    clients = [subprocess.Popen([sys.executable, "-c", CLIENT, str(mnt), str(blob_path), str(args.seconds)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
               for _ in range(args.clients)]
    for c in clients:
        assert c.stdout is not None and c.stdout.readline().strip() == "ready"
    start = time.time() + 0.5
    for c in clients:
        assert c.stdin is not None
        c.stdin.write(f"{start}\n")
        c.stdin.flush()
    counts = [int(c.communicate(timeout=args.seconds + 60)[0].strip()) for c in clients]
    rate = sum(counts) / args.seconds
    mean = sum(counts) / len(counts)
    worst = max(abs(n - mean) / mean for n in counts)
    shares = ", ".join(f"{n / sum(counts):.0%}" for n in counts)
    how = "through the submission ring" if ring else "with ioctls only (PYDLA_LINUX_RING=0)"
    print(f"\n{args.clients} client processes for {args.seconds:.0f} s, {how}: {sum(counts)} submits, "
          f"{rate:,.0f}/s in total; shares {shares} (worst {worst:.0%} from the mean)")
    ratio = rate / local_rate
    print(f"goal total / one in-process loop ({local_rate:,.0f}/s) >= {GOAL_RATE_RATIO:.1f}x: "
          f"{ratio:.2f}x: {'met' if ratio >= GOAL_RATE_RATIO else 'NOT met'}")
    print(f"goal >= {GOAL_RATE:,}/s in total: {'met' if rate >= GOAL_RATE else 'NOT met'}; "
          f"each within {GOAL_SHARE:.0%} of the mean: {'met' if worst <= GOAL_SHARE else 'NOT met'}")


if __name__ == "__main__":
    main()
