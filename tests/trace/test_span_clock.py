"""The device's spans lie within their own events: a timeline draws an operation (or a SHAVE tile's
task) from its start event's stamp for the duration its end event carries, so that duration must be
counted from no earlier than the stamp. It was counted from a clock reading taken before the start
event was written: a thread preempted in between (ms on a loaded machine) stretched the span past
the operation's end, over the block's next operation (PDP's two operations are some 10 us apart)
and out of its task, and the Chrome-format and capture tests failed now and then in full-suite runs.
Here the preemption is made to happen, on every start event, by a pause where it fell."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pydla
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model
from pydla.trace import Capture

PAUSE_S = 0.003  # longer than any gap between two operations of one block


@pytest.fixture(scope="module")
def blob() -> bytes:
    return bytes(compile_model(build_demo_model()).blob)


def preempted_before(call: Callable[..., Any], starts_only: bool = False) -> Callable[..., Any]:
    """``call`` after a pause, as if the thread lost the processor just before it (for the SHAVE
    tiles' hook, only at a task's start: its duration argument is None)."""
    def paused(*args: Any) -> Any:
        if not starts_only or args[2] is None:
            time.sleep(PAUSE_S)
        return call(*args)
    return paused


def test_a_span_never_ends_past_its_end_event_even_when_the_start_was_late(blob: bytes) -> None:
    sess = pydla.Session(blob)
    dev = sess.runtime.port.platform.probe(0).device
    dev.trace_out.op_start = preempted_before(dev.trace_out.op_start)  # type: ignore[method-assign]
    assert dev.shave is not None
    for tile in dev.shave.tiles:
        assert tile.on_task is not None
        tile.on_task = preempted_before(tile.on_task, starts_only=True)
    capture = Capture(sess.runtime)
    x = {t.name: np.ones(t.shape, np.float32) for t in sess.inputs}
    for _ in range(2):
        sess.run(x)
    result = capture.finish()
    sess.close()

    # In the ring: start stamp + duration <= end stamp, for every operation and tile task.
    starts: dict[tuple[str, int, int], int] = {}
    checked = {"op": 0, "cu": 0}
    for e in result.contents.events:
        r = e.record
        if e.name in ("op_start", "cu_start"):
            key = ("op", int(r.block), int(r.seq)) if e.name == "op_start" else ("cu", int(r.unit),
                                                                                    int(r.execution))
            starts[key] = e.timestamp_ns
        elif e.name in ("op_end", "cu_end"):
            key = ("op", int(r.block), int(r.seq)) if e.name == "op_end" else ("cu", int(r.unit),
                                                                                  int(r.execution))
            begin = starts.pop(key)
            assert begin + r.duration_ns <= e.timestamp_ns, (e.name, key, e.timestamp_ns - begin)
            checked[key[0]] += 1
    assert checked == {"op": 2 * 8, "cu": 2}

    # On the timeline: a block's (and a tile's) spans follow each other; each lies in its task's.
    events = result.chrome()["traceEvents"]
    device = [e for e in events if e["ph"] == "X" and e["pid"] == 2 and e["cat"] in ("device", "cu")]
    for track in {e["tid"] for e in device}:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in device if e["tid"] == track)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), spans
    tasks = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X" and e["cat"] == "task"]
    assert len(tasks) == 2 * 2
    for op in device:
        assert any(a <= op["ts"] and op["ts"] + op["dur"] <= b for a, b in tasks), op
