"""The long fuzz campaign over pydla's readers (the test suite runs a short one).

Every target of :func:`pydla.testing.fuzz.standard_targets` gets ``--cases`` mutated inputs, split
over ``--jobs`` processes. The goal: 0 exceptions other than DlaError, 0 hangs, 0 corrupted
loadables that load, run and answer differently from the original. There is no outside anchor to
compare speed with; the rate (inputs/s per target) is printed so that a slower reader shows.

Usage::

    python bench/bench_fuzz.py --cases 1000000 --jobs 2 --save /tmp/findings
    python bench/bench_fuzz.py --cases 2000 --targets loadable,recipe
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

from pydla.testing.fuzz import Finding, Report, run_campaign, standard_targets

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "demo_model.onnx"


def _worker(job: tuple[list[str] | None, int, int, int]) -> Report:
    from pydla.session import loadable_bytes

    only, seed, first, count = job
    return run_campaign(standard_targets(loadable_bytes(MODEL), only=only), cases=count, seed=seed,
                        first_case=first)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=20_000, help="inputs per target (default 20000)")
    p.add_argument("--jobs", type=int, default=multiprocessing.cpu_count(), help="processes")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--targets", default=None, help="comma-separated target names (default: all)")
    p.add_argument("--chunk", type=int, default=2_000, help="inputs per target per work item")
    p.add_argument("--save", type=Path, default=None, help="write each finding's input here")
    args = p.parse_args()
    only = args.targets.split(",") if args.targets else None
    work = [(only, args.seed, first, min(args.chunk, args.cases - first))
            for first in range(0, args.cases, args.chunk)]
    total = Report()
    start = time.monotonic()
    done = 0
    with multiprocessing.Pool(args.jobs) as pool:
        for report in pool.imap_unordered(_worker, work):
            done += 1
            for name, n in report.cases.items():
                total.cases[name] = total.cases.get(name, 0) + n
                total.refused[name] = total.refused.get(name, 0) + report.refused[name]
                total.accepted[name] = total.accepted.get(name, 0) + report.accepted[name]
                total.seconds[name] = total.seconds.get(name, 0.0) + report.seconds[name]
            total.findings.extend(report.findings)
            elapsed = time.monotonic() - start
            print(f"\r{done}/{len(work)} work items, {sum(total.cases.values())} inputs, "
                  f"{len(total.findings)} findings, {elapsed:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"seed {args.seed}, {args.jobs} processes, {time.monotonic() - start:.0f} s wall")
    print(total.summary())
    if args.save is not None and total.findings:
        args.save.mkdir(parents=True, exist_ok=True)
        for f in total.findings:
            _save(args.save, f)
        print(f"inputs of the findings written to {args.save}")
    return 1 if total.findings else 0


def _save(folder: Path, f: Finding) -> None:
    (folder / f"{f.target}-{f.case}-{f.kind}.bin").write_bytes(f.data)


if __name__ == "__main__":
    sys.exit(main())
