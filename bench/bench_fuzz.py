"""The long fuzz campaign over every reader of untrusted input (the test suite runs a short one).

Each target of :func:`pydla.testing.fuzz.standard_targets` gets its share of ``--cases`` mutated
inputs by :data:`PLAN` (the fast readers more: a device-API message takes 20 us, a loadable that is
loaded and run 10 ms): 1,000,000 over the readers, and 20,000 loadables mutated behind their section
digests (rewritten to match) on a device in each of the deterministic and threaded modes, which must
stay usable after every one. The goal: 0 exceptions other than DlaError, 0 hangs, 0 corrupted inputs
accepted with another answer than the original's, 0 devices left unusable. There is no outside
anchor to compare speed with; the rate (inputs/s per target) is printed so that a slower reader
shows.

The work is cut into chunks of about a minute each, run by ``--jobs`` processes (the slowest first);
each process keeps a target (its device, its daemon) from one chunk to the next. Progress goes to
stderr as chunks end; the table to stdout; the exit status is 1 when there is a finding.

Usage::

    nice -n 19 python bench/bench_fuzz.py --jobs 2 --save /tmp/findings       # the whole campaign
    python bench/bench_fuzz.py --cases 20000 --targets loadable,recipe --seed 3
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pydla.testing.fuzz import Finding, Report, Target, run_campaign, standard_targets

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "demo_model.onnx"
# Inputs per target in the whole campaign: 1,000,000 over the readers, weighted by their speed, and
# the digest-rewritten loadables in each mode.
PLAN = {
    "device-api": 280_000, "ioctl": 150_000, "trace-ring": 120_000, "mailbox": 100_000,
    "recipe": 100_000, "device-config": 80_000, "kernel-elf": 40_000, "control-code": 40_000,
    "nvdla-loadable": 30_000, "loadable": 30_000, "shave-kernel": 10_000, "onnx": 10_000, "ring": 10_000,
    "rehashed-deterministic": 20_000, "rehashed-threaded": 20_000, "nvdla-run": 5_000,
}
# Inputs/s of each on one unloaded core (2026-11-29): the chunks' sizes, the time left.
RATE = {
    "device-api": 45_000, "ioctl": 10_000, "trace-ring": 13_000, "mailbox": 13_000, "recipe": 7_000,
    "device-config": 10_000, "kernel-elf": 1_300, "control-code": 870, "nvdla-loadable": 600, "loadable": 260,
    "shave-kernel": 200, "onnx": 180, "ring": 160, "rehashed-deterministic": 30, "rehashed-threaded": 55,
    "nvdla-run": 20,
}
CHUNK_SECONDS = 60
SHOWN = 20  # findings printed one by one
Chunk = tuple[str, int, int, int, float]  # target, seed, first case, cases, case timeout

_held: dict[str, Target] = {}  # per process: the targets built so far


def plan(total: int | None, names: list[str]) -> dict[str, int]:
    """Inputs per target: :data:`PLAN`'s, or ``total`` shared in its proportions."""
    weights = {n: PLAN[n] for n in names}
    if total is None:
        return weights
    scale = total / sum(weights.values())
    counts = {n: max(1, math.floor(w * scale)) for n, w in weights.items()}
    counts[max(counts, key=lambda n: weights[n])] += total - sum(counts.values())  # the rounding
    return counts


def chunks(counts: dict[str, int], seed: int, case_timeout_s: float) -> list[Chunk]:
    """About a minute of work each, the longest targets' first (so no process ends long after the
    others)."""
    out: list[Chunk] = []
    for name, count in counts.items():
        size = max(100, RATE[name] * CHUNK_SECONDS)
        out += [(name, seed, first, min(size, count - first), case_timeout_s)
                for first in range(0, count, size)]
    return sorted(out, key=lambda c: -c[3] / RATE[c[0]])


def run_chunk(chunk: Chunk) -> Report:
    """In a worker process: the chunk's cases, on the target this process built for an earlier
    chunk when there was one."""
    name, seed, first, count, case_timeout_s = chunk
    if name not in _held:
        from pydla.session import loadable_bytes

        # What the drivers log (a hung job, a reset) is part of the cases, not of the report.
        logging.getLogger("pydla").addHandler(logging.NullHandler())
        (_held[name],) = standard_targets(loadable_bytes(MODEL), only=[name])
    return run_campaign([_held[name]], cases=count, seed=seed, first_case=first,
                        case_timeout_s=case_timeout_s)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=None,
                   help=f"inputs in all, shared as the plan shares them (default: the plan's "
                        f"{sum(PLAN.values()):,})")
    p.add_argument("--targets", default=None, help=f"comma-separated (default: all): {', '.join(PLAN)}")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes (default: one per core; 2 processes on 2 shared cores: 1.2x one)")
    p.add_argument("--case-timeout", type=float, default=20.0, help="seconds before a case is a hang")
    p.add_argument("--save", type=Path, default=None, help="write each finding's input here")
    args = p.parse_args()
    names = args.targets.split(",") if args.targets else list(PLAN)
    unknown = [n for n in names if n not in PLAN]
    if unknown:
        p.error(f"unknown targets {unknown}: choose from {', '.join(PLAN)}")
    counts = plan(args.cases, names)
    work = chunks(counts, args.seed, args.case_timeout)
    print(f"seed {args.seed}, {args.jobs} process(es), {sum(counts.values()):,} inputs in {len(work)} "
          "chunks: " + ", ".join(f"{n} {c:,}" for n, c in counts.items()), flush=True)
    start = time.monotonic()
    total, broken = _run(work, args.jobs, start, args.save)
    wall = time.monotonic() - start
    print(f"{wall:.0f} s wall, {sum(total.seconds.values()):.0f} s in the targets, {args.jobs} process(es)")
    print(total.summary())
    for f in total.findings[:SHOWN]:
        print(f"finding: {f.target} case {f.case} ({f.kind}): {f.detail.splitlines()[0][:300]}")
    if len(total.findings) > SHOWN:
        print(f"... and {len(total.findings) - SHOWN} more findings (--save DIR writes each)")
    if broken:
        print(f"a worker process died: {broken}")
    if args.save is not None and total.findings:
        print(f"inputs of the findings written to {args.save} (reproduce: the target, --seed {args.seed} and "
              "the case number with run_campaign(first_case=N, cases=1))")
    return 1 if total.findings or broken else 0


def _run(work: list[Chunk], jobs: int, start: float, save: Path | None) -> tuple[Report, str]:
    total = Report()
    for name in PLAN:  # the table in the plan's order
        if any(c[0] == name for c in work):
            total.merge(Report({name: 0}, {name: 0}, {name: 0}, {name: 0.0}))
    planned = sum(c[3] for c in work)
    nominal = {"all": sum(c[3] / RATE[c[0]] for c in work), "done": 0.0}  # seconds at RATE

    def ended(chunk: Chunk, report: Report) -> None:
        total.merge(report)
        if save is not None:  # as they come: a long campaign's findings can be looked at while it runs
            save.mkdir(parents=True, exist_ok=True)
            for f in report.findings:
                _save(save, f)
        nominal["done"] += chunk[3] / RATE[chunk[0]]
        done = sum(total.cases.values())
        elapsed = time.monotonic() - start
        left = elapsed * (nominal["all"] - nominal["done"]) / nominal["done"]  # at the pace so far
        print(f"[{100 * done / planned:5.1f}%] {done:,} of {planned:,} inputs, {len(total.findings)} "
              f"findings, {elapsed:.0f} s, about {left:.0f} s left (done: {chunk[0]} "
              f"{chunk[2]:,}..{chunk[2] + chunk[3] - 1:,})", file=sys.stderr, flush=True)

    if jobs <= 1:  # in this process: a hang is caught by SIGALRM in the main thread
        for chunk in work:
            ended(chunk, run_chunk(chunk))
        return total, ""
    with ProcessPoolExecutor(jobs) as pool:
        pending: dict[Future[Report], Chunk] = {pool.submit(run_chunk, c): c for c in work}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                chunk = pending.pop(future)
                try:
                    report = future.result()
                except BrokenProcessPool as e:  # a crash in a reader (a signal): a finding of its own
                    left = sorted({c[0] for c in pending.values()} | {chunk[0]})
                    return total, f"{e} (targets with chunks not done: {left})"
                ended(chunk, report)
    return total, ""


def _save(folder: Path, f: Finding) -> None:
    """The input (a .dla for a loadable) and, beside it, what was found (.txt)."""
    suffix = ".dla" if "loadable" in f.target or f.target.startswith("rehashed") else ".bin"
    stem = folder / f"{f.target}-{f.case}-{f.kind}"
    stem.with_suffix(suffix).write_bytes(f.data)
    stem.with_suffix(".txt").write_text(f"{f.target} case {f.case}: {f.kind}\n{f.detail}\n")


if __name__ == "__main__":
    sys.exit(main())
