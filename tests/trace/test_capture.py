"""Tracing a runtime end to end: Session(trace=), pydla run --trace/--profile/--trace-ring, pydla trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.cli import main
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model
from pydla.trace import Capture
from pydla.trace.profile import profile

OPS_PER_RUN = 8  # the demo network's NPU step: CONV+SDP, CONV+SDP, PDP, PDP, CONV+SDP
# ... then its softmax, a SHAVE task list on a tile (one compute-unit execution on the tile's track)
TILE_RUNS_PER_RUN = 1


@pytest.fixture(scope="module")
def blob() -> bytes:
    return bytes(compile_model(build_demo_model()).blob)


def feeds(sess: Any, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in sess.inputs}


def tracks_by_tid(events: list[dict[str, Any]]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
            and e["pid"] == 2}


def test_a_session_writes_one_timeline_of_device_and_host(blob: bytes, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    with pydla.Session(blob, trace=out) as sess:
        plain = pydla.Session(blob)
        for seed in range(3):
            x = feeds(sess, seed)
            np.testing.assert_array_equal(sess.run(x)["probabilities"], plain.run(x)["probabilities"])
        plain.close()
    events = json.loads(out.read_text())["traceEvents"]
    names = {(e["pid"], e["name"]) for e in events if e["ph"] == "M"}
    assert (2, "thread_name") in names and (1, "process_name") in names
    tracks = {e["args"]["name"] for e in events
              if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 2}
    assert {"CONV", "SDP", "PDP"} <= tracks
    device = [e for e in events if e["ph"] == "X" and e["pid"] == 2 and e["name"].startswith("task")
              and e["cat"] == "device"]
    assert len(device) == 3 * OPS_PER_RUN
    tiles = [e for e in events if e["ph"] == "X" and e["pid"] == 2 and not e["name"].startswith("task")]
    assert len(tiles) == 3 * TILE_RUNS_PER_RUN
    # The engine schedulers' tasks on the client's "tasks" track: per run, the NPU task and the SHAVE
    # task list, each ended OK; the NPU task's span holds its operations.
    tasks = [e for e in events if e["ph"] == "X" and e["cat"] == "task"]
    assert len(tasks) == 3 * 2 and all(e["args"]["status"] == "OK" for e in tasks)
    track = f"tasks (context {tasks[0]['args']['context']})"
    assert {tracks_by_tid(events)[e["tid"]] for e in tasks} == {track}
    npu = [e for e in tasks if e["args"]["operations"] == OPS_PER_RUN]
    assert len(npu) == 3
    for op in device:
        assert any(t["ts"] <= op["ts"] and op["ts"] + op["dur"] <= t["ts"] + t["dur"] for t in npu), op
    blocks = ["CONV", "SDP", "CONV", "SDP", "PDP", "PDP", "CONV", "SDP"]
    expected = sorted(f"task0: operation {i} ({b})" for i, b in enumerate(blocks))
    assert sorted({e["name"] for e in device}) == expected
    assert all(e["dur"] > 0 and "shape" in e["args"] for e in device)
    host = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert [e["name"] for e in host].count("npu task0") == 3
    assert [e["name"] for e in host].count("npu task1") == 3  # the softmax's SHAVE task list
    assert [e["name"] for e in host].count("NvDlaWaitFence") == 3 * 2
    # each run's device work lies inside its host span (one clock for both)
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in host if e["name"] == "npu task0")
    for op in device:
        assert any(a <= op["ts"] and op["ts"] + op["dur"] <= b + 1 for a, b in spans), op


def test_the_profile_names_every_operation_and_the_host_overhead(blob: bytes) -> None:
    sess = pydla.Session(blob)
    capture = Capture(sess.runtime)
    for seed in range(4):
        sess.run(feeds(sess, seed))
    result = capture.finish()
    sess.close()
    assert result.named == len(result.ops) == 4 * OPS_PER_RUN
    text = result.profile_text()
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["step", "op", "block", "device"]
    op_lines = [line for line in lines[1:OPS_PER_RUN + TILE_RUNS_PER_RUN + 1] if line.startswith("task0 ")]
    assert sorted(int(line.split()[1]) for line in op_lines) == list(range(OPS_PER_RUN))
    totals = [float(line.split()[4]) for line in op_lines]
    assert totals == sorted(totals, reverse=True)  # sorted by cost
    assert "src 3x32x32" in text and "dst 16x16x16" in text
    steps = {line.split()[0]: line.split() for line in lines if line.startswith("task0 ")
             and len(line.split()) == 5}
    wall, device, overhead = (float(v) for v in steps["task0"][1:4])
    assert wall > device > 0 and abs(overhead - (wall - device)) < 0.2


def test_the_profile_shows_the_shave_task_list(blob: bytes) -> None:
    """On the full configuration the softmax is a SHAVE task list (step task1): its execution on a
    tile is an operation row, and the step has its row (it had none: only steps with block
    operations did)."""
    sess = pydla.Session(blob)
    capture = Capture(sess.runtime)
    for seed in range(3):
        sess.run(feeds(sess, seed))
    result = capture.finish()
    sess.close()
    rows, steps = profile(result.ops, result.host, result.units, result.unit_names)
    shave = [r for r in rows if r.step == "task1"]
    assert [(r.op_index, r.block, r.runs) for r in shave] == [(0, "SHAVE", 3)]
    assert shave[0].shape.startswith("on shave:tile") and shave[0].median_us > 0
    by_step = {s.step: s for s in steps}
    assert sorted(by_step) == ["task0", "task1"]
    task1 = by_step["task1"]
    assert task1.runs == 3 and task1.wall_us > task1.device_us == shave[0].median_us > 0
    text = result.profile_text()
    assert any(line.split()[:3] == ["task1", "0", "SHAVE"] for line in text.splitlines())
    assert any(line.split()[:1] == ["task1"] and len(line.split()) == 5 for line in text.splitlines())


def test_one_trace_per_device_at_a_time(blob: bytes) -> None:
    sess = pydla.Session(blob)
    port = sess.runtime.port
    other = port.NvDlaOpen(0)  # another client of the same device
    capture = Capture(sess.runtime)
    with pytest.raises(DlaError) as info:
        port.NvDlaTraceStart(other, 1 << 16, 1)
    assert info.value.code == NvError.Busy and "another trace is running" in info.value.message
    with pytest.raises(DlaError) as info:
        port.NvDlaTraceRead(other, capture.trace)  # nor can it read or stop another's
    assert info.value.code == NvError.BadParameter
    capture.finish()
    trace = port.NvDlaTraceStart(other, 1 << 16, 1)  # free again
    assert port.NvDlaTraceStop(other, trace) == port.NvDlaTraceStop(other, trace)  # idempotent
    for size, mask in ((100, 1), (1 << 16, 0), (1 << 16, 1 << 20)):
        with pytest.raises(DlaError) as info:
            port.NvDlaTraceStart(other, size, mask)
        assert info.value.code == NvError.BadParameter
    port.NvDlaClose(other)
    sess.close()


def test_a_small_ring_drops_old_events_and_names_nothing_wrongly(blob: bytes) -> None:
    sess = pydla.Session(blob)
    capture = Capture(sess.runtime, size=4096)
    for seed in range(20):
        sess.run(feeds(sess, seed))
    result = capture.finish()
    sess.close()
    assert result.contents.dropped > 0
    assert "device events were dropped" in result.profile_text()
    # whatever is named is named consistently with the block it ran on
    blocks = ["CONV", "SDP", "CONV", "SDP", "PDP", "PDP", "CONV", "SDP"]
    assert all(o.step is None or blocks[o.op_index] == o.block for o in result.ops)


def test_pydla_run_traces_profiles_and_saves_the_ring(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "m.onnx"
    import onnx

    onnx.save(build_demo_model(), str(model))
    out, ring = tmp_path / "t.json", tmp_path / "ring.bin"
    assert main(["run", str(model), "--iterations", "2", "--trace", str(out), "--trace-ring", str(ring),
                 "--profile"]) == 0
    text = capsys.readouterr().out
    assert f"trace of 2 run(s) written to {out}" in text
    assert "host overhead us" in text
    assert len([e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]) \
        == 2 * (OPS_PER_RUN + TILE_RUNS_PER_RUN + 2)  # + the NPU task and the SHAVE task list
    assert main(["trace", str(ring)]) == 0
    shown = capsys.readouterr()
    assert shown.out.count("op_end") == 2 * OPS_PER_RUN and "events" in shown.err
    assert main(["trace", str(ring), "--format", "jsonl"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(json.loads(line)["event"] for line in lines)
    chrome = tmp_path / "c.json"
    assert main(["trace", str(ring), "--format", "chrome", "-o", str(chrome)]) == 0
    assert json.loads(chrome.read_text())["traceEvents"]


def test_pydla_trace_refuses_what_is_not_a_ring(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\0" * 256)
    assert main(["trace", str(bad)]) == 1
    assert "trace ring: magic" in capsys.readouterr().err
    assert main(["trace", str(tmp_path / "missing.bin")]) == 1
    assert "missing.bin" in capsys.readouterr().err


def test_a_port_that_cannot_trace_says_so(blob: bytes) -> None:
    from pydla.portability.interface import NvDlaPort

    sess = pydla.Session(blob)
    with pytest.raises(DlaError) as info:
        NvDlaPort.NvDlaTraceStart(sess.runtime.port, sess.runtime.handle, 1 << 16, 1)
    assert info.value.code == NvError.NotSupported and "cannot trace the device" in info.value.message
    sess.close()


def test_pydla_run_records_the_event_classes_asked_for(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    import onnx

    model = tmp_path / "m.onnx"
    onnx.save(build_demo_model(), str(model))
    ring = tmp_path / "ring.bin"
    assert main(["run", str(model), "--trace-ring", str(ring), "--trace-events", "interrupt, REG_WRITE"]) == 0
    capsys.readouterr()
    assert main(["trace", str(ring), "--format", "jsonl"]) == 0
    kinds = {json.loads(line)["event"] for line in capsys.readouterr().out.splitlines()}
    assert kinds == {"interrupt", "reg_write"}
    assert main(["run", str(model), "--profile", "--trace-events", "layer,nonsense"]) == 1
    assert "'nonsense' is not one of task, layer, reg_write, interrupt, error, log" in capsys.readouterr().err
