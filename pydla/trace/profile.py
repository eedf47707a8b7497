"""A per-operation profile from a trace: each operation's block, shape and device time, and each
step's host overhead (its wall time on the host minus the time the device was busy with it),
sorted by cost.

Usage::

    rows, steps = profile(ops, host)         # ops named by pydla.trace.timeline.attribute
    print(format_profile(rows, steps))
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pydla.trace.host import HostTrace
from pydla.trace.timeline import DeviceOp


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


def profile(ops: Sequence[DeviceOp], host: HostTrace | None) -> tuple[list[OpRow], list[StepRow]]:
    by_op: dict[tuple[str, int], list[DeviceOp]] = {}
    by_run: dict[tuple[str, int], list[DeviceOp]] = {}
    for o in ops:
        if o.step is None:
            continue
        by_op.setdefault((o.step, o.op_index), []).append(o)
        by_run.setdefault((o.step, o.run), []).append(o)
    rows = [OpRow(step, index, done[0].block, done[0].shape, len(done),
                  statistics.median(d.duration_ns for d in done) / 1000,
                  sum(d.duration_ns for d in done) / 1000)
            for (step, index), done in by_op.items()]
    rows.sort(key=lambda r: (-r.total_us, r.step, r.op_index))
    busy: dict[str, list[float]] = {}
    for (step, _), done in by_run.items():
        busy.setdefault(step, []).append(_union_ns(done) / 1000)
    walls: dict[str, list[float]] = {}
    if host is not None:
        for s in host.spans:
            if s.cat == "npu" and s.duration_ns:
                walls.setdefault(s.args.get("step", s.name), []).append(s.duration_ns / 1000)
    if host is not None:  # CPU runs: the host's alone
        for s in host.spans:
            if s.cat == "cpu" and s.duration_ns:
                walls.setdefault(s.args.get("step", s.name), []).append(s.duration_ns / 1000)
                busy.setdefault(s.args.get("step", s.name), [])
    steps = []
    for step, device in busy.items():
        wall = statistics.median(walls[step]) if step in walls else float("nan")
        dev = statistics.median(device) if device else 0.0
        steps.append(StepRow(step, len(device) or len(walls.get(step, ())), wall, dev, wall - dev))
    steps.sort(key=lambda r: -r.wall_us if r.wall_us == r.wall_us else 0.0)
    return rows, steps


def _union_ns(ops: Sequence[DeviceOp]) -> int:
    spans = sorted((o.start_ns, o.start_ns + o.duration_ns) for o in ops)
    total, end = 0, None
    for a, b in spans:
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
