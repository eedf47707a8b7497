"""From trace events to a timeline: device operations paired and named, and a Perfetto / Chrome
trace JSON with a track per block, per compute unit, and per host thread.

The device's ring holds what its hardware knows (``op_start``/``op_end`` of a block, with the
operation's context and the block's running count). :func:`attribute` names them: a client's tasks
run one after another, so in start order the first operations of the client's context are its
first task's, and within a task a block runs its operations in the order of the task's operation
list (pydla's compiler programs each block's chain in that order); an operation count that does not
match what the loadable says stops the naming there (the rest stay unnamed, never misnamed).

Tasks: the engine scheduler has the device record ``task_start``/``task_end``; they come out of
:func:`device_work` as marks and :func:`chrome_trace` pairs them (by context and task id) into spans
on a "tasks" track per context, the task's status and operation count in their arguments. A start
whose end is not in the ring (still running, or the end was not written) and an end whose start was
dropped stay instant marks. Log lines (``log``) and the other marks are instant events on the marks
track, a log line named by its text.

Usage::

    ops, units, marks = device_work(read_ring(ring, trace.API).events)
    attribute(ops, steps, context_id=trace.context_id)
    json.dump(chrome_trace(host, ops, units, marks, unit_names=names), open("out.json", "w"))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.trace import TraceEvent
from pydla.trace.host import HostTrace

HOST_PID, DEVICE_PID = 1, 2
MARKS_TID = 90  # interrupts, errors, log lines
CU_TID = 100  # + the unit's IP_LAYOUT index
TASKS_TID = 200  # + 16 * the task's context + its lane: "tasks" tracks per context
TASK_LANES = 16
BLOCK_ORDER = ("BDMA", "CONV", "SDP", "PDP", "CDP", "RUBIK")


@dataclass
class DeviceOp:
    """One operation a block ran, as the device's trace ring tells it; ``step``/``op_index``/``shape``
    once :func:`attribute` has named it."""

    block: str
    group: int
    context_id: int
    seq: int
    start_ns: int
    duration_ns: int
    hw_error: int
    step: str | None = None
    run: int = 0  # which run of the steps (0, 1, ...)
    op_index: int = -1
    shape: str = ""

    @property
    def label(self) -> str:
        if self.step is None:
            return f"{self.block} operation (context {self.context_id}, #{self.seq})"
        return f"{self.step}: operation {self.op_index} ({self.block})"


@dataclass
class CuRun:
    unit: int
    execution: int
    start_ns: int
    duration_ns: int
    hw_error: int


@dataclass
class Mark:
    name: str
    time_ns: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskSpan:
    """One task the engine scheduler ran, from its task_start and task_end events."""

    task_id: int
    context_id: int
    start_ns: int
    duration_ns: int
    num_ops: int
    status: str


def task_spans(marks: Iterable[Mark]) -> tuple[list[TaskSpan], list[Mark]]:
    """Pair the task_start and task_end marks into spans; the other marks (and the unpaired ones)
    in their order."""
    started: dict[tuple[int, int], Mark] = {}
    ended: list[tuple[Mark, Mark]] = []
    rest: list[Mark] = []
    for m in marks:
        if m.name == "task_start":
            key = (int(m.args.get("context_id", 0)), int(m.args.get("task_id", 0)))
            if key in started:  # a second start of the same id: the first never ended in the ring
                rest.append(started.pop(key))
            started[key] = m
        elif m.name == "task_end":
            begin = started.pop((int(m.args.get("context_id", 0)), int(m.args.get("task_id", 0))), None)
            if begin is None:
                rest.append(m)
            else:
                ended.append((begin, m))
        else:
            rest.append(m)
    rest.extend(started.values())
    rest.sort(key=lambda m: m.time_ns)
    spans = [TaskSpan(int(b.args["task_id"]), int(b.args["context_id"]), b.time_ns, e.time_ns - b.time_ns,
                      int(b.args.get("num_ops", 0)), str(e.args.get("status", "")))
             for b, e in ended]
    spans.sort(key=lambda t: t.start_ns)
    return spans, rest


@dataclass(frozen=True)
class StepOps:
    """What a loadable says one NPU step runs: ``(op_index, block name, shape)`` in operation order."""

    name: str
    ops: tuple[tuple[int, str, str], ...]


def device_work(events: Iterable[TraceEvent]) -> tuple[list[DeviceOp], list[CuRun], list[Mark]]:
    """Pair the ring's start and end events; the rest are marks. An end whose start was dropped
    starts at its end minus its duration; a start without an end (still running) is left out."""
    started: dict[tuple[str, int], TraceEvent] = {}
    cu_started: dict[tuple[int, int], int] = {}
    ops: list[DeviceOp] = []
    units: list[CuRun] = []
    marks: list[Mark] = []
    for e in events:
        r = e.record
        if e.name == "op_start":
            started[(_block(r.block), r.seq)] = e
        elif e.name == "op_end":
            begin = started.pop((_block(r.block), r.seq), None)
            start = begin.timestamp_ns if begin is not None else e.timestamp_ns - r.duration_ns
            ops.append(DeviceOp(_block(r.block), r.group, r.context_id, r.seq, start, r.duration_ns,
                                r.hw_error))
        elif e.name == "cu_start":
            cu_started[(r.unit, r.execution)] = e.timestamp_ns
        elif e.name == "cu_end":
            start = cu_started.pop((r.unit, r.execution), e.timestamp_ns - r.duration_ns)
            units.append(CuRun(r.unit, r.execution, start, r.duration_ns, r.hw_error))
        elif e.name in ("interrupt", "error", "log", "reg_write", "task_start", "task_end"):
            marks.append(Mark(e.name, e.timestamp_ns, r.to_dict()))
    ops.sort(key=lambda o: o.start_ns)
    return ops, units, marks


def _block(value: Any) -> str:
    """A block's name from a record's field (an int on the wire)."""
    known = dla_block_e._value2member_map_.get(int(value))
    return known.name if known is not None else f"block {int(value)}"


def attribute(ops: Sequence[DeviceOp], steps: Sequence[StepOps], context_id: int) -> int:
    """Name the operations of ``context_id`` after the loadable's ``steps``, run after run (see the
    module docstring). Returns how many were named."""
    mine = [o for o in ops if o.context_id == context_id] if context_id >= 0 else list(ops)
    npu = [s for s in steps if s.ops]
    if not npu:
        return 0
    named, pos, run = 0, 0, 0
    while pos < len(mine):
        for step in npu:
            chunk = mine[pos:pos + len(step.ops)]
            if len(chunk) < len(step.ops) or not _name_step(chunk, step, run):
                return named
            named += len(chunk)
            pos += len(chunk)
        run += 1
    return named


def _name_step(chunk: list[DeviceOp], step: StepOps, run: int) -> bool:
    by_block: dict[str, list[tuple[int, str, str]]] = {}
    for op in step.ops:
        by_block.setdefault(op[1], []).append(op)
    seen: dict[str, list[DeviceOp]] = {}
    for o in chunk:
        seen.setdefault(o.block, []).append(o)
    if {b: len(v) for b, v in seen.items()} != {b: len(v) for b, v in by_block.items()}:
        return False
    for block, done in seen.items():
        for o, (index, _, shape) in zip(sorted(done, key=lambda d: d.seq), by_block[block], strict=True):
            o.step, o.run, o.op_index, o.shape = step.name, run, index, shape
    return True


def chrome_trace(host: HostTrace | None, ops: Sequence[DeviceOp], units: Sequence[CuRun],
                 marks: Sequence[Mark], *, unit_names: Sequence[str] = (), device_name: str = "device",
                 dropped: int = 0) -> dict[str, Any]:
    """The Chrome trace-event JSON Perfetto opens (https://ui.perfetto.dev: Open trace file)."""
    ev: list[dict[str, Any]] = []

    def meta(pid: int, tid: int | None, what: str, name: str) -> None:
        item: dict[str, Any] = {"ph": "M", "pid": pid, "name": what, "args": {"name": name}}
        if tid is not None:
            item["tid"] = tid
        ev.append(item)

    meta(DEVICE_PID, None, "process_name", f"{device_name} (the device's trace ring)")
    for i, block in enumerate(BLOCK_ORDER):
        if any(o.block == block for o in ops):
            meta(DEVICE_PID, i + 1, "thread_name", block)
    for o in ops:
        args: dict[str, Any] = {"context": o.context_id, "group": o.group, "block count": o.seq}
        if o.shape:
            args["shape"] = o.shape
        if o.hw_error:
            args["hw_error"] = o.hw_error
        ev.append({"ph": "X", "pid": DEVICE_PID, "tid": _block_tid(o.block), "name": o.label, "cat": "device",
                   "ts": o.start_ns / 1000, "dur": o.duration_ns / 1000, "args": args})
    for index in sorted({u.unit for u in units}):
        name = unit_names[index] if index < len(unit_names) else f"compute unit {index}"
        meta(DEVICE_PID, CU_TID + index, "thread_name", f"CU {name}")
    for u in units:
        ev.append({"ph": "X", "pid": DEVICE_PID, "tid": CU_TID + u.unit, "name": f"execution {u.execution}",
                   "cat": "cu", "ts": u.start_ns / 1000, "dur": u.duration_ns / 1000,
                   "args": {"hw_error": u.hw_error} if u.hw_error else {}})
    tasks, marks = task_spans(marks)
    # Pipelined tasks of a context overlap without nesting: each goes on the first of the context's
    # lanes (tracks) that is free by its start, as spans on one track must nest.
    lanes: dict[int, list[int]] = {}
    for t in tasks:
        ends = lanes.setdefault(t.context_id, [])
        lane = next((i for i, end in enumerate(ends) if end <= t.start_ns), len(ends))
        if lane == len(ends):
            if lane == TASK_LANES:
                lane -= 1  # (never in practice: more overlapping tasks than the engine's depth)
            else:
                ends.append(0)
                name = f"tasks (context {t.context_id})" + (f" {lane + 1}" if lane else "")
                meta(DEVICE_PID, _task_tid(t.context_id, lane), "thread_name", name)
        ends[lane] = max(ends[lane], t.start_ns + t.duration_ns)
        ev.append({"ph": "X", "pid": DEVICE_PID, "tid": _task_tid(t.context_id, lane),
                   "name": f"task {t.task_id}", "cat": "task", "ts": t.start_ns / 1000,
                   "dur": t.duration_ns / 1000,
                   "args": {"context": t.context_id, "operations": t.num_ops, "status": t.status}})
    if marks:
        meta(DEVICE_PID, MARKS_TID, "thread_name", "interrupts, errors, log")
    for m in marks:
        name = f"log: {m.args.get('text', '')}" if m.name == "log" else m.name
        ev.append({"ph": "i", "s": "t", "pid": DEVICE_PID, "tid": MARKS_TID, "name": name, "cat": "device",
                   "ts": m.time_ns / 1000, "args": m.args})
    if host is not None:
        meta(HOST_PID, None, "process_name", "host (UMD, KMD, CPU runs)")
        for tid, name in host.threads.items():
            meta(HOST_PID, tid, "thread_name", name)
        for s in host.spans:
            item = {"pid": HOST_PID, "tid": s.tid, "name": s.name, "cat": s.cat, "ts": s.start_ns / 1000,
                    "args": s.args}
            item.update({"ph": "X", "dur": s.duration_ns / 1000} if s.duration_ns else {"ph": "i", "s": "t"})
            ev.append(item)
    other = {"dropped_device_events": dropped, "dropped_host_spans": host.dropped if host else 0}
    return {"traceEvents": ev, "displayTimeUnit": "ms", "otherData": other}


def _block_tid(block: str) -> int:
    return BLOCK_ORDER.index(block) + 1 if block in BLOCK_ORDER else len(BLOCK_ORDER) + 1


def _task_tid(context_id: int, lane: int) -> int:
    return TASKS_TID + TASK_LANES * context_id + lane
