"""The encoder with and without barriers between its DLA operations and SHAVE tasks, in one run.

The transformer encoder of bench_session (4 pre-norm layers, hidden 256, 4 heads, sequence 128; its
Softmax, LayerNormalization and Gelu on the SHAVE tiles) compiled twice: with barriers
(``shave_barriers=True``; the default only on a configuration without a command processor, which
``full`` has: its device runs a task with a SHAVE list beside its operations per operation, not from
one doorbell; the line "default" says which one the default gave): each SHAVE step's first task
list runs in the task of the DLA operations before it, each chunk's DMA started by the barrier its
producer operations update, the VPUX per-variant barriers) and without
(``compile_model(..., shave_barriers=False)``: the list is a task of its own, started when the whole
DLA task before it ended). Both run on their own in-process runtime
(``createRuntime(mode=...)``, tensors bound once, ``rt.submit()`` timed), in the device modes
``deterministic`` (everything in the caller's thread: only the task round trips can differ) and
``threaded`` (the blocks and the tiles on their own threads: a list's first chunk may compute while
the DLA operations of the next chunk do). Blocks of --block submits alternate between the two (one
untimed submit first); the medians of wall-clock and of process CPU time are printed, and the
ratio with / without barriers (below 1: faster with them) as the median of the ratios of the
submits paired in each block, the first of a pair alternating (so that a busy machine slows both
sides alike). The outputs are
checked to be the same bytes. OPENBLAS_NUM_THREADS is 1 (set by re-running this script): on a
machine other work shares, BLAS threads that wait for each other make every figure noise. The load
average before and after each mode is printed: ``threaded`` can only gain where a core is free for
the SHAVE worker while the blocks compute (at a load above the core count, none is).

Run: python bench/bench_barriers.py [--repeats 15] [--block 4] [--modes deterministic,threaded]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def runtime(blob: bytes, mode: str, feeds: dict[str, np.ndarray]) -> tuple[Any, Any]:
    """A runtime with ``blob`` loaded and its tensors bound once; and its output's memory view."""
    import pydla

    rt = pydla.createRuntime(mode=mode)
    rt.load(blob)
    for i, value in enumerate(feeds.values()):
        d = rt.getInputTensorDesc(i)
        mem = rt.allocateSystemMemory(d.size)
        mem.array(value.dtype, d.dims)[...] = value
        rt.bindInputTensor(i, mem)
    d = rt.getOutputTensorDesc(0)
    out = rt.allocateSystemMemory(d.size)
    rt.bindOutputTensor(0, out)
    return rt, (lambda: out.array(np.float32, d.dims).copy())


def tasks(blob: bytes) -> str:
    from pydla.loadable.container import Loadable

    lo = Loadable.open(blob)
    kinds: dict[str, int] = {}
    for run in lo.recipe.runs:
        if run.where == "npu":
            code = lo.control_code(run.name)
            kind = "DLA+SHAVE" if code.is_mixed else "SHAVE" if code.is_shave else "DLA"
            kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))


def measure(mode: str, blobs: dict[str, bytes], feeds: dict[str, np.ndarray], repeats: int,
            block: int) -> float:
    runs = {name: runtime(blob, mode, feeds) for name, blob in blobs.items()}
    load = os.getloadavg()[0]
    outs = {}
    for name, (rt, read) in runs.items():
        rt.submit()
        outs[name] = read()
    if not np.array_equal(outs["with"], outs["without"]):
        raise SystemExit(f"{mode}: the outputs differ with and without barriers")
    wall: dict[str, list[float]] = {n: [] for n in runs}
    cpu: dict[str, list[float]] = {n: [] for n in runs}
    for _ in range(repeats):
        for rt, _ in runs.values():
            rt.submit()  # untimed: each block starts warm
        for k in range(block):  # the two alternate submit by submit: a pair sees the same machine;
            # who goes first alternates too (what one leaves running must not slow the other only)
            for name in (("with", "without") if k % 2 == 0 else ("without", "with")):
                rt = runs[name][0]
                w0, c0 = time.perf_counter(), time.process_time()
                rt.submit()
                wall[name].append(time.perf_counter() - w0)
                cpu[name].append(time.process_time() - c0)
        time.sleep(0.02)
    med = {n: (statistics.median(wall[n]) * 1e3, statistics.median(cpu[n]) * 1e3) for n in runs}
    ratio = statistics.median(a / b for a, b in zip(wall["with"], wall["without"], strict=True))
    cpu_ratio = statistics.median(a / b for a, b in zip(cpu["with"], cpu["without"], strict=True))
    print(f"{mode}: with barriers {med['with'][0]:.1f} ms (CPU {med['with'][1]:.1f}), without "
          f"{med['without'][0]:.1f} ms (CPU {med['without'][1]:.1f}); with / without {ratio:.3f} wall, "
          f"{cpu_ratio:.3f} CPU (medians of {len(wall['with'])} pairs; load average {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--block", type=int, default=4)
    parser.add_argument("--modes", default="deterministic,threaded")
    args = parser.parse_args()
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        return subprocess.call([sys.executable, *sys.argv], env=env)
    import bench_session as bs

    from pydla.compiler.api import compile_model

    model = bs.encoder(128)
    feeds, shapes = bs.feeds_of("encoder", model, 128)
    blobs = {"with": compile_model(model, input_shapes=shapes, shave_barriers=True).blob,
             "without": compile_model(model, input_shapes=shapes, shave_barriers=False).blob}
    default = compile_model(model, input_shapes=shapes).blob
    same = next((name for name, blob in blobs.items() if tasks(blob) == tasks(default)), "neither")
    print(f"encoder 1x128: with barriers {tasks(blobs['with'])}; without {tasks(blobs['without'])}; "
          f"default ({same}) {tasks(default)}")
    ratios = [measure(mode, blobs, feeds, args.repeats, args.block) for mode in args.modes.split(",")]
    return 0 if all(r < 1.0 for r in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
