"""NvDlaMemWrite / NvDlaMemRead bandwidth of the in-process port against a numpy copy of the same size.

For each size (4 KiB, 64 KiB, 1 MiB, 16 MiB by default) one buffer is allocated with NvDlaGetMem on
an in-process port (pydla.portability.inprocess, deterministic device) and written whole from a
uint8 numpy array with NvDlaMemWrite(mem, 0, src), and read whole with NvDlaMemRead(mem, 0, size)
(which returns new bytes, as the interface says). The anchor, measured in the same run and in
alternating blocks with the port's calls: np.copyto(dst, src) into a preallocated array of the same
size, the least a copy of those bytes costs. Times are per call (small sizes timed in batches so
that a timing is at least ~1 ms); bandwidth is bytes / median time.
Goal (issue #5): NvDlaMemWrite and NvDlaMemRead each >= 0.8x numpy's bandwidth, at every size.

Run: python bench/bench_memio.py [--repeats 7] [--sizes 4K,64K,1M,16M] [--budget 0.15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from pydla.platform import open_port
from pydla.portability.inprocess import InProcessPort

GOAL = 0.8


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _label(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _batch(fn: Callable[[], object], target: float) -> int:
    """Calls per timing so that one timing lasts about ``target`` seconds."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    return max(1, int(target / one))


def _time(fn: Callable[[], object], batch: int, timings: int) -> list[float]:
    times = []
    loop = range(batch)
    for _ in range(timings):
        t0 = time.perf_counter()
        for _ in loop:
            fn()
        times.append((time.perf_counter() - t0) / batch)
    return times


def _measure(port: InProcessPort, h: object, size: int, args: argparse.Namespace) -> dict[str, float]:
    """Median seconds per call of numpy, NvDlaMemWrite and NvDlaMemRead for ``size`` bytes."""
    mem, _ = port.NvDlaGetMem(h, size)
    try:
        src = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
        dst = np.empty_like(src)
        port.NvDlaMemWrite(mem, 0, src)
        if port.NvDlaMemRead(mem, 0, size) != src.tobytes():
            raise SystemExit(f"{_label(size)}: NvDlaMemRead did not return what NvDlaMemWrite wrote")
        fns: dict[str, Callable[[], object]] = {
            "numpy": lambda: np.copyto(dst, src),
            "write": lambda: port.NvDlaMemWrite(mem, 0, src),
            "read": lambda: port.NvDlaMemRead(mem, 0, size),
        }
        batches = {name: _batch(fn, args.timing) for name, fn in fns.items()}
        timings = max(3, int(args.budget / args.timing))
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.repeats):
            for name, fn in fns.items():
                fn()  # dropped
                times[name] += _time(fn, batches[name], timings)
        return {name: statistics.median(ts) for name, ts in times.items()}
    finally:
        port.NvDlaFreeMem(h, mem)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="alternating blocks per measurement")
    parser.add_argument("--sizes", default="4K,64K,1M,16M", help="comma-separated sizes (K, M suffixes)")
    parser.add_argument("--budget", type=float, default=0.15, help="seconds per block (about)")
    parser.add_argument("--timing", type=float, default=0.002, help="seconds per timing (about)")
    args = parser.parse_args()
    sizes = [_size(s) for s in args.sizes.split(",")]

    print(f"{'size':>8} {'':6} {'median':>11} {'GB/s':>8} {'numpy GB/s':>11} {'ratio':>7}  goal >= {GOAL}")
    missed = []
    with open_port("inprocess", "full") as port:
        h = port.NvDlaOpen(0)
        for size in sizes:
            med = _measure(port, h, size, args)
            numpy_gbs = size / med["numpy"] / 1e9
            for name in ("numpy", "write", "read"):
                gbs = size / med[name] / 1e9
                ratio = gbs / numpy_gbs
                mark = "" if name == "numpy" else ("met" if ratio >= GOAL else "NOT met")
                if mark == "NOT met":
                    missed.append(f"{name} {_label(size)} ({ratio:.2f}x)")
                print(f"{_label(size):>8} {name:6} {med[name] * 1e6:8.2f} us {gbs:8.2f} {numpy_gbs:11.2f} "
                      f"{ratio:6.2f}x  {mark}")
        port.NvDlaClose(h)
    print(f"goal NvDlaMemWrite / NvDlaMemRead >= {GOAL}x numpy at every size: "
          + ("met" if not missed else "NOT met: " + ", ".join(missed)))


if __name__ == "__main__":
    main()
