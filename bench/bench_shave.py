"""SHAVE tiles: softmax on an emulated tile against numpy's, and the cost of one kernel invocation.

1. Softmax over 1k and 64k float32 elements: the shipped RV32IMF kernel on a tile of a deterministic
   virtual device (the push of its ActKernelTask, which runs it: descriptor, windows, runtime kernel,
   kernel; the data already in CMX) against numpy's softmax on the same data, in the same run. Goal:
   within 100x of numpy at 64k. Both emulation modes: ``exact`` (the kernel's machine code) and
   ``fast`` (the default: the unchanged shipped kernel as its numpy equivalent, pydla.hw.shave.hle,
   behind the same runtime kernel, FIFO and barriers).
2. One invocation of an empty kernel (``ret``) through the whole path (push to the tile's FIFO, the
   runtime kernel's pop, a barrier wait and update, the launch, task_done) against a bare
   ``emu_start`` call of the same instruction on a bare unicorn CPU.

Wall-clock medians of ``--repeats`` runs; the tile and numpy are timed alternately and the ratio is
the median of the per-pair ratios, so that a busy machine slows both sides alike.
Run: python bench/bench_shave.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.device import VirtualDevice
from pydla.target.config import load_config
from tests.hw.shave.host import RET, Args, Host, cmx, tiny_elf, treg

GOAL_64K = 100.0
# The output's offset in CMX: not a multiple of 1 MiB from the input's. The emulator's data TLB is
# direct-mapped over 256 pages, so two buffers 1 MiB apart evict each other at every element: at
# exactly 1 MiB the same softmax measured 1.5x slower (29 ms against 19 ms at 64k).
OUT = 0x110000


def once_s(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_s(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(once_s(fn) for _ in range(repeats))


def paired(a: Callable[[], object], b: Callable[[], object], repeats: int, b_times: int = 1
           ) -> tuple[float, float, float]:
    """Medians of a's and b's times, timed alternately, and the median of the per-pair ratios a / b.
    ``b_times``: b runs that many times back to back per pair (warm caches), its time divided."""
    pairs = [(once_s(a), once_s(lambda: [b() for _ in range(b_times)]) / b_times) for _ in range(repeats)]
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[0] / p[1] for p in pairs))


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def softmax_task(host: Host, n: int) -> tuple[int, np.ndarray]:
    """An ActKernelTask for softmax over n floats already in tile 0's CMX, and the data."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    host.dma(host.put(x), cmx(0), x.nbytes, dst_tile=0)
    a = Args(S.SoftmaxParams)
    a.memref("input", cmx(0), (n,), np.float32)
    a.memref("output", cmx(OUT), (n,), np.float32)
    return host.kernel(0, "softmax", a, push=False), x


def push(host: Host, tile: int, desc: int) -> None:
    host.w(treg(tile, "push_lo"), desc & 0xFFFFFFFF)
    host.w(treg(tile, "push_hi"), desc >> 32)


def bare_call(calls: int) -> Callable[[], None]:
    """``calls`` emu_starts of a `ret` on a bare unicorn RV32 CPU (no windows, no device)."""
    import unicorn
    from unicorn import riscv_const as rv

    uc = unicorn.Uc(unicorn.UC_ARCH_RISCV, unicorn.UC_MODE_RISCV32)
    uc.mem_map(S.WIN_D, 0x2000, unicorn.UC_PROT_READ | unicorn.UC_PROT_EXEC)
    uc.mem_write(S.WIN_D, RET.to_bytes(4, "little"))
    until = S.WIN_D + 0x1000  # mapped: emulation stops there before fetching it

    def run() -> None:
        for _ in range(calls):
            uc.reg_write(rv.UC_RISCV_REG_RA, until)
            uc.emu_start(S.WIN_D, until)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=21, help="runs per measurement; medians shown")
    args = parser.parse_args()
    full = load_config("full")
    assert full.shave is not None
    for mode in ("exact", "fast"):
        config = dataclasses.replace(full, shave=dataclasses.replace(full.shave, emulation=mode))
        dev = VirtualDevice(config, mode="deterministic")
        host = Host(dev)
        host.start_tile(0)
        what = "its machine code under unicorn" if mode == "exact" else "its numpy equivalent"
        print(f"softmax, float32, one tile, emulation '{mode}' ({what}) against numpy, medians:")
        ratio_64k = 0.0
        for n in (1024, 65536):
            desc, x = softmax_task(host, n)
            push(host, 0, desc)  # the first run loads the kernel into WIN_D
            assert host.r(treg(0, "error")) == 0
            tile_s, numpy_s, ratio = paired(lambda d=desc, h=host: push(h, 0, d), lambda x=x: np_softmax(x),
                                            args.repeats, b_times=20)
            got = np.frombuffer(dev.shave.cmx(0)[OUT:OUT + 4 * n].tobytes(), np.float32)  # type: ignore[union-attr]
            np.testing.assert_allclose(got, np_softmax(x.astype(np.float64)), rtol=1e-5)
            ratio_64k = ratio
            print(f"  {n:6d} elements: tile {tile_s * 1e3:8.3f} ms   numpy {numpy_s * 1e3:7.3f} ms   "
                  f"ratio {ratio:6.1f}x")
        verdict = "met" if ratio_64k <= GOAL_64K else "NOT met"
        print(f"  goal: within {GOAL_64K:.0f}x of numpy at 64k: {verdict}")
        if mode == "exact":
            dev.close()

    calls = 200
    host.barrier(0, 0, 1)  # always fired (no producers): every task waits on it and consumes it
    host.barrier(1, 1, 0)  # produced by every task, reset at once (no consumers)
    desc = host.kernel(0, "empty", b"", image=tiny_elf([RET]), wait=1 << 0, update=1 << 1, push=False)

    def invocations() -> None:
        for _ in range(calls):
            push(host, 0, desc)

    invocations()
    done = host.r(treg(0, "done"))
    bare = bare_call(calls)
    invocation_s, bare_s, ratio = paired(invocations, bare, args.repeats)
    assert host.r(treg(0, "done")) == done + calls * args.repeats and host.r(treg(0, "error")) == 0
    assert host.r(R.SHAVE_BAR_FIRED) & 2
    print("one invocation of an empty kernel, medians:")
    print(f"  FIFO + barriers + launch: {invocation_s / calls * 1e6:7.1f} us   bare emu_start: "
          f"{bare_s / calls * 1e6:6.1f} us   ratio {ratio:5.1f}x")
    dev.close()


if __name__ == "__main__":
    main()
