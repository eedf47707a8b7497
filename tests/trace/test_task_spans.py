"""The timeline's tasks: task_start/task_end paired per context into spans on "tasks" tracks, pipelined
tasks on a second lane (spans on one track must nest), unpaired events left as instants."""

from __future__ import annotations

import itertools

from pydla.trace.timeline import Mark, chrome_trace, task_spans


def start(t: int, task: int, ctx: int = 1, ops: int = 2) -> Mark:
    return Mark("task_start", t, {"task_id": task, "num_ops": ops, "context_id": ctx})


def end(t: int, task: int, ctx: int = 1, status: str = "OK") -> Mark:
    return Mark("task_end", t, {"task_id": task, "status": status, "context_id": ctx})


def test_starts_and_ends_pair_by_context_and_task() -> None:
    marks = [start(0, 1), start(5, 1, ctx=2), Mark("interrupt", 7), end(10, 1),
             end(12, 1, ctx=2, status="ERROR"), end(20, 9), start(30, 3)]
    spans, rest = task_spans(marks)
    assert [(s.task_id, s.context_id, s.start_ns, s.duration_ns, s.status) for s in spans] == [
        (1, 1, 0, 10, "OK"), (1, 2, 5, 7, "ERROR")]
    assert [(m.name, m.time_ns) for m in rest] == [("interrupt", 7), ("task_end", 20), ("task_start", 30)]


def test_pipelined_tasks_of_a_context_go_on_a_second_lane() -> None:
    marks = [start(0, 1), start(2_000, 2), end(5_000, 1), start(6_000, 3), end(8_000, 2), end(9_000, 3)]
    ev = chrome_trace(None, [], [], marks)["traceEvents"]
    spans = {e["name"]: e["tid"] for e in ev if e["ph"] == "X"}
    tracks = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert spans["task 1"] == spans["task 3"] != spans["task 2"]
    assert tracks[spans["task 1"]] == "tasks (context 1)" and tracks[spans["task 2"]] == "tasks (context 1) 2"
    by_tid: dict[int, list[tuple[float, float]]] = {}
    for e in ev:
        if e["ph"] == "X":
            by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans_of_track in by_tid.values():  # on each track: one after another
        spans_of_track.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans_of_track))
