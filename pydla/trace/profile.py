"""A per-operation profile from a trace: each operation's block, shape and device time (a block's
operation, or a compute unit's execution: a SHAVE task list's on its tile), and each step's host
overhead (its wall time on the host minus the time the device was busy with it),
sorted by cost.

Usage::

    rows, steps = profile(ops, host, units, unit_names)   # ops named by pydla.trace.timeline.attribute
    print(format_profile(rows, steps))
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pydla.trace.host import HostTrace
from pydla.trace.timeline import CuRun, DeviceOp


@dataclass(frozen=True)
class OpRow:
    step: str
    op_index: int
    block: str
    shape: str
    runs: int
    median_us: float
    total_us: float


@dataclass(frozen=True)
class StepRow:
    step: str
    runs: int
    wall_us: float  # median host time of the step (submit to done), from the host's spans
    device_us: float  # median time the device was busy with it (the union of its operations)
    overhead_us: float  # wall - device: the host's share


def profile(ops: Sequence[DeviceOp], host: HostTrace | None, units: Sequence[CuRun] = (),
            unit_names: Sequence[str] = ()) -> tuple[list[OpRow], list[StepRow]]:
    """The operation rows (a block's operation, or a compute unit's execution: a SHAVE task list runs
    on a SHAVE tile) and a row per step the host ran (an NPU step with or without block operations,
    a CPU step), each step's device time the union of its operations and executions. An execution
    belongs to the step whose host span (submit to done, on the same clock) it starts in."""
    spans = [s for s in host.spans if s.cat in ("npu", "cpu") and s.duration_ns] if host is not None else []
    by_op: dict[tuple[str, int, str], list[tuple[str, int, int]]] = {}  # -> (shape, start, duration)
    by_run: dict[tuple[str, int], list[tuple[int, int]]] = {}
    blocks: dict[tuple[str, int, str], str] = {}
    for o in ops:
        if o.step is None:
            continue
        key = (o.step, o.op_index, "")
        blocks[key] = o.block
        by_op.setdefault(key, []).append((o.shape, o.start_ns, o.duration_ns))
        by_run.setdefault((o.step, o.run), []).append((o.start_ns, o.start_ns + o.duration_ns))
    runs: dict[str, int] = {}  # how many times each step's span was seen: the run of an execution
    for s in sorted((s for s in spans if s.cat == "npu"), key=lambda s: s.start_ns):
        step = str(s.args.get("step", s.name))
        run, runs[step] = runs.get(step, 0), runs.get(step, 0) + 1
        inside = [u for u in units if s.start_ns <= u.start_ns < s.start_ns + s.duration_ns]
        for k, u in enumerate(sorted(inside, key=lambda u: u.start_ns)):
            name = unit_names[u.unit] if 0 <= u.unit < len(unit_names) else f"unit {u.unit}"
            key = (step, k, name)
            blocks[key] = "SHAVE" if name.startswith("shave") else "CU"
            by_op.setdefault(key, []).append((f"on {name}", u.start_ns, u.duration_ns))
            by_run.setdefault((step, run), []).append((u.start_ns, u.start_ns + u.duration_ns))
    rows = [OpRow(step, index, blocks[(step, index, unit)], done[0][0], len(done),
                  statistics.median(d for _, _, d in done) / 1000, sum(d for _, _, d in done) / 1000)
            for (step, index, unit), done in by_op.items()]
    rows.sort(key=lambda r: (-r.total_us, r.step, r.op_index))
    busy: dict[str, list[float]] = {}
    for (step, _), intervals in by_run.items():
        busy.setdefault(step, []).append(_union_ns(intervals) / 1000)
    walls: dict[str, list[float]] = {}
    for s in spans:  # every step the host ran has a row, with device work or without (a CPU step)
        step = str(s.args.get("step", s.name))
        walls.setdefault(step, []).append(s.duration_ns / 1000)
        busy.setdefault(step, [])
    steps = []
    for step, device in busy.items():
        wall = statistics.median(walls[step]) if step in walls else float("nan")
        dev = statistics.median(device) if device else 0.0
        steps.append(StepRow(step, max(len(device), len(walls.get(step, ()))), wall, dev, wall - dev))
    steps.sort(key=lambda r: -r.wall_us if r.wall_us == r.wall_us else 0.0)
    return rows, steps


def _union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def format_profile(rows: Sequence[OpRow], steps: Sequence[StepRow], *, limit: int = 40) -> str:
    head = f"{'step':<16} {'op':>4} {'block':<6} {'device us (median)':>18} {'total us':>10} {'runs':>5}"
    lines = [head + "  shape"]
    for r in rows[:limit]:
        lines.append(f"{r.step[:16]:<16} {r.op_index:>4} {r.block:<6} {r.median_us:>18.1f} "
                     f"{r.total_us:>10.1f} {r.runs:>5}  {r.shape}")
    if len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more operations")
    if steps:
        lines.append("")
        lines.append(f"{'step':<16} {'wall us':>10} {'device us':>10} {'host overhead us':>17} {'runs':>5}")
        for s in steps:
            lines.append(f"{s.step[:16]:<16} {s.wall_us:>10.1f} {s.device_us:>10.1f} {s.overhead_us:>17.1f} "
                         f"{s.runs:>5}")
    return "\n".join(lines)
