"""The trace ring: the writer (TraceRing) and the reader (read_ring) that trusts nothing."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.deviceapi.generated import trace
from pydla.deviceapi.generated.headers import trace_entry_header_t, trace_ring_header_t
from pydla.deviceapi.runtime import Record
from pydla.deviceapi.trace import (
    ENTRY_SIZE,
    HEADER_SIZE,
    MAGIC,
    PAD_ID,
    RingContents,
    TraceRing,
    read_ring,
    write_jsonl,
    write_text,
)

API = trace.API


def _align8(n: int) -> int:
    return (n + 7) & ~7


def _total(event: Record) -> int:
    return _align8(ENTRY_SIZE + ctypes.sizeof(event))


def _events(n: int) -> list[Record]:
    """n events cycling through several types, each with distinct field values."""
    out: list[Record] = []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            out.append(trace.task_start(task_id=1000 + i, num_ops=i, context_id=i % 7))
        elif kind == 1:
            out.append(trace.layer_end(task_id=1000 + i, duration_ns=10 * i, op_index=i, block=1,
                                       group=i % 2))
        elif kind == 2:
            out.append(trace.log(level=i % 4, text=f"line {i}".encode()))
        elif kind == 3:
            out.append(trace.interrupt(status=i, mask=0xFFFF0000 | i))
        else:
            out.append(trace.error(task_id=1000 + i, fault_address=0xDEAD0000 + i, status=4,
                                   op_index=i, block=2))
    return out


def _fill(capacity: int, events: list[Record], t0: int = 100) -> TraceRing:
    ring = TraceRing.create(capacity, API)
    for i, event in enumerate(events):
        ring.emit(event, timestamp_ns=t0 + i)
    return ring


def _header(buf: bytearray) -> Any:
    return trace_ring_header_t.from_buffer(buf)


def _entry(buf: bytearray, counter: int, capacity: int) -> Any:
    return trace_entry_header_t.from_buffer(buf, HEADER_SIZE + counter % capacity)


def _error(buf: bytes | bytearray, code: NvError = NvError.BadValue, **kwargs: Any) -> str:
    with pytest.raises(DlaError) as info:
        read_ring(buf, API, **kwargs)
    assert info.value.code == code, str(info.value)
    return str(info.value)


# -- round trip -------------------------------------------------------------------------------------


def test_round_trip_several_event_types() -> None:
    emitted = _events(12)
    ring = _fill(4096, emitted, t0=5_000)
    result = read_ring(ring.buffer, API)
    assert isinstance(result, RingContents)
    assert len(result.events) == 12
    assert result.dropped == 0
    assert result.lost_bytes == 0
    assert result.wrap_count == 0
    assert result.head == sum(_total(e) for e in emitted)
    for i, (got, sent) in enumerate(zip(result.events, emitted, strict=True)):
        assert got.seq == i
        assert got.timestamp_ns == 5_000 + i
        assert got.name == type(sent).__name__
        assert got.record == sent
        assert got.record.to_dict() == sent.to_dict()
    names = [e.name for e in result.events]
    assert {"task_start", "layer_end", "log", "interrupt", "error"} <= set(names)


def test_round_trip_decodes_strings_and_enums() -> None:
    ring = _fill(1024, [trace.log(level=3, text=b"hello, ring"),
                        trace.task_end(task_id=9, status=2, context_id=1),
                        trace.layer_start(task_id=9, op_index=4, block=1, group=1)])
    ev = read_ring(ring.buffer, API).events
    assert ev[0].record.to_dict() == {"level": 3, "text": "hello, ring"}
    assert ev[1].record.to_dict() == {"task_id": 9, "status": "TIMEOUT", "context_id": 1}
    assert ev[2].record.to_dict() == {"task_id": 9, "op_index": 4, "block": "CONV", "group": 1}
    assert [e.position for e in ev] == [0, 80, 112]


def test_read_accepts_bytes_bytearray_and_memoryview() -> None:
    ring = _fill(512, _events(4))
    expected = [e.as_json() for e in read_ring(ring.buffer, API).events]
    for buf in (bytes(ring.buffer), bytearray(ring.buffer), memoryview(ring.buffer)):
        assert [e.as_json() for e in read_ring(buf, API).events] == expected


def test_empty_ring() -> None:
    result = read_ring(TraceRing.create(64, API).buffer, API)
    assert result.events == []
    assert (result.head, result.dropped, result.wrap_count, result.lost_bytes) == (0, 0, 0, 0)


# -- wrap-around ------------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [128, 256, 264])
def test_wrap_around_keeps_only_the_newest(capacity: int) -> None:
    emitted = _events(200)
    ring = _fill(capacity, emitted)
    h = ring.header
    result = read_ring(ring.buffer, API)
    k = len(result.events)
    assert 0 < k < len(emitted)
    assert result.dropped == h.dropped == len(emitted) - k
    assert result.head == h.head
    assert result.wrap_count == h.wrap_count == h.head // capacity
    assert h.head - h.tail <= capacity
    kept = emitted[-k:]
    assert [e.record for e in result.events] == kept
    assert [e.seq for e in result.events] == list(range(len(emitted) - k, len(emitted)))
    assert [e.timestamp_ns for e in result.events] == [100 + i for i in range(len(emitted) - k, len(emitted))]
    # The ring holds as many as it can: exactly those that start within the last lap's bytes.
    assert result.events[0].position >= h.tail
    head, starts = _model(capacity, emitted)
    assert head == h.head
    assert k == sum(1 for s in starts if s >= head - capacity)


def test_entries_never_straddle_the_end_of_the_data_area() -> None:
    capacity = 256
    emitted = _events(60)
    ring = _fill(capacity, emitted)
    result = read_ring(ring.buffer, API)
    assert result.wrap_count > 3
    for event in result.events:
        offset = event.position % capacity
        assert offset % 8 == 0
        assert offset + _total(event.record) <= capacity


def test_the_rest_of_a_lap_is_padded() -> None:
    # log entries take 80 bytes: three per 256-byte lap, then a 16-byte padding entry.
    capacity = 256
    ring = _fill(capacity, [trace.log(level=1, text=b"x")] * 4)
    assert ring.header.head == 256 + 80
    assert ring.header.wrap_count == 1
    pad = _entry(ring.buffer, 240, capacity)
    assert (pad.id, pad.size) == (PAD_ID, 0)
    result = read_ring(ring.buffer, API)
    assert [e.position for e in result.events] == [80, 160, 256]
    assert [e.seq for e in result.events] == [1, 2, 3]
    assert result.dropped == 1


def test_a_gap_smaller_than_an_entry_header_is_skipped() -> None:
    # Two 40-byte error entries and a 32-byte task_start fill 112 of 120 bytes: the 8 bytes left
    # cannot hold even a padding entry's header, so the writer skips them.
    capacity = 120
    ring = _fill(capacity, [trace.error(task_id=1), trace.error(task_id=2),
                            trace.task_start(task_id=3), trace.task_start(task_id=4)])
    assert ring.header.head == 120 + 32
    result = read_ring(ring.buffer, API)
    assert result.wrap_count == 1
    assert [e.record.task_id for e in result.events] == [2, 3, 4]
    assert [e.position for e in result.events] == [40, 80, 120]


def test_wrap_count_wraps_like_the_u32_it_is() -> None:
    # A long-running writer: 2**32 - 1 laps of a 64-byte ring so far (as if it had emitted them).
    capacity = 64
    ring = TraceRing.create(capacity, API)
    laps = 2**32 - 1
    ring.header.head = ring.header.tail = laps * capacity
    ring.header.wrap_count = laps
    for i in range(3):  # 24-byte entries: the third pads the lap and starts lap 2**32
        ring.emit(trace.interrupt(status=i, mask=0), timestamp_ns=i)
    assert ring.header.head == 2**32 * capacity + 24
    assert ring.header.wrap_count == 0  # the u32 went round
    result = read_ring(ring.buffer, API)
    assert [e.record.status for e in result.events] == [1, 2]
    assert result.dropped == 1


def test_create_rejects_bad_capacities() -> None:
    for capacity in (0, 56, 100, 2**32):
        with pytest.raises(DlaError) as info:
            TraceRing.create(capacity, API)
        assert info.value.code == NvError.BadParameter


def test_entry_larger_than_the_ring_is_rejected() -> None:
    ring = TraceRing.create(64, API)
    with pytest.raises(DlaError) as info:
        ring.emit(trace.log(level=0, text=b"too big"), timestamp_ns=0)
    assert info.value.code == NvError.InvalidSize


def test_emit_rejects_a_record_that_is_not_a_trace_event() -> None:
    from pydla.deviceapi.generated import device_api

    ring = TraceRing.create(256, API)
    with pytest.raises(DlaError) as info:
        ring.emit(device_api.api_version_t(), timestamp_ns=0)
    assert info.value.code == NvError.BadParameter


# -- since ------------------------------------------------------------------------------------------


def test_since_returns_only_newer_entries() -> None:
    emitted = _events(9)
    ring = TraceRing.create(4096, API)
    for i, event in enumerate(emitted[:5]):
        ring.emit(event, timestamp_ns=i)
    first = read_ring(ring.buffer, API)
    for i, event in enumerate(emitted[5:], start=5):
        ring.emit(event, timestamp_ns=i)
    second = read_ring(ring.buffer, API, since=first.head)
    assert [e.record for e in second.events] == emitted[5:]
    assert [e.seq for e in second.events] == [5, 6, 7, 8]
    assert second.lost_bytes == 0
    again = read_ring(ring.buffer, API, since=second.head)
    assert again.events == []
    assert again.lost_bytes == 0


def test_since_reports_lost_bytes_when_the_reader_fell_behind() -> None:
    emitted = _events(40)
    capacity = 256
    ring = TraceRing.create(capacity, API)
    for i, event in enumerate(emitted[:3]):
        ring.emit(event, timestamp_ns=i)
    first = read_ring(ring.buffer, API)
    assert first.dropped == 0
    for i, event in enumerate(emitted[3:], start=3):
        ring.emit(event, timestamp_ns=i)
    second = read_ring(ring.buffer, API, since=first.head)
    tail = ring.header.tail
    assert tail > first.head
    assert second.lost_bytes == tail - first.head > 0
    full = read_ring(ring.buffer, API)
    assert [e.record for e in second.events] == [e.record for e in full.events]
    assert [e.record for e in second.events] == emitted[-len(second.events):]


def test_since_in_a_partially_overwritten_ring_with_no_loss() -> None:
    # The ring has wrapped and dropped entries, but not the ones after the reader's last head.
    capacity = 256
    emitted = _events(30)
    ring = TraceRing.create(capacity, API)
    for i, event in enumerate(emitted[:29]):
        ring.emit(event, timestamp_ns=i)
    first = read_ring(ring.buffer, API)
    assert first.dropped > 0
    ring.emit(emitted[29], timestamp_ns=29)
    second = read_ring(ring.buffer, API, since=first.head)
    assert second.lost_bytes == 0
    assert [e.record for e in second.events] == [emitted[29]]
    assert [e.seq for e in second.events] == [29]


def test_since_beyond_head_is_an_error() -> None:
    ring = _fill(512, _events(3))
    head = ring.header.head
    text = _error(ring.buffer, NvError.BadParameter, since=head + 8)
    assert "since" in text
    assert str(head) in text


# -- a corrupt ring is a DlaError naming the field ---------------------------------------------------


@pytest.fixture
def wrapped() -> bytearray:
    """A copy of a 256-byte ring that has gone round several times."""
    ring = _fill(256, _events(40))
    assert ring.header.head > 2 * 256
    return bytearray(ring.buffer)


@pytest.fixture
def fresh() -> bytearray:
    """A copy of a ring with a few entries, not wrapped."""
    return bytearray(_fill(1024, _events(4)).buffer)


def test_bad_magic(fresh: bytearray) -> None:
    _header(fresh).magic = MAGIC ^ 1
    assert "magic" in _error(fresh)


def test_capacity_larger_than_the_buffer(fresh: bytearray) -> None:
    _header(fresh).capacity = 2048
    text = _error(fresh)
    assert "capacity 2048" in text


def test_buffer_truncated_below_header_plus_capacity(fresh: bytearray) -> None:
    assert "capacity" in _error(fresh[:-8])


def test_capacity_not_a_multiple_of_8(fresh: bytearray) -> None:
    _header(fresh).capacity = 1020
    assert "capacity" in _error(fresh)


def test_tail_after_head(fresh: bytearray) -> None:
    h = _header(fresh)
    h.tail = h.head + 8
    text = _error(fresh)
    assert "tail" in text
    assert "head" in text


def test_head_more_than_capacity_ahead_of_tail(wrapped: bytearray) -> None:
    h = _header(wrapped)
    h.tail = 0
    text = _error(wrapped)
    assert "head" in text
    assert "tail" in text
    assert "capacity" in text


def test_unaligned_head(fresh: bytearray) -> None:
    _header(fresh).head += 4
    assert "head" in _error(fresh)


@pytest.mark.parametrize("delta", [-1, 1, 100])
def test_inconsistent_wrap_count(wrapped: bytearray, delta: int) -> None:
    h = _header(wrapped)
    h.wrap_count += delta
    assert "wrap_count" in _error(wrapped)


def test_entry_whose_size_runs_past_head(fresh: bytearray) -> None:
    h = _header(fresh)
    events = read_ring(fresh, API).events
    last = events[-1]
    _entry(fresh, last.position, h.capacity).size += 64
    text = _error(fresh)
    assert "size" in text
    assert "head" in text
    assert str(last.position) in text


def test_entry_whose_size_runs_past_the_data_area(wrapped: bytearray) -> None:
    h = _header(wrapped)
    last = read_ring(wrapped, API).events[-1]
    # Make the newest entry's size run past the end of the data area.
    _entry(wrapped, last.position, h.capacity).size = 0xFFF0
    text = _error(wrapped)
    assert "size 65520" in text
    assert "data area" in text


def test_unknown_event_id(fresh: bytearray) -> None:
    second = read_ring(fresh, API).events[1]
    _entry(fresh, second.position, _header(fresh).capacity).id = 99
    text = _error(fresh, NvError.NotSupported)
    assert "event id 99" in text
    assert str(second.position) in text


def test_entry_too_small_for_its_event(fresh: bytearray) -> None:
    # The newest entry is an interrupt (8 bytes): claim it holds only 4 (it still ends at head).
    last = read_ring(fresh, API).events[-1]
    assert last.name == "interrupt"
    _entry(fresh, last.position, _header(fresh).capacity).size = 4
    assert "bytes" in _error(fresh, NvError.InvalidSize)


def test_seq_gap(fresh: bytearray) -> None:
    third = read_ring(fresh, API).events[2]
    _entry(fresh, third.position, _header(fresh).capacity).seq = 7
    text = _error(fresh)
    assert "seq 7" in text
    assert "expected 2" in text


def test_buffer_shorter_than_the_header(fresh: bytearray) -> None:
    for n in (0, 8, HEADER_SIZE - 1):
        text = _error(fresh[:n], NvError.InvalidSize)
        assert "header" in text


def test_version_major_mismatch(fresh: bytearray) -> None:
    major, minor, patch = trace.API.version
    _header(fresh).version_major = major + 1
    text = _error(fresh, NvError.VersionMismatch)
    assert f"{major + 1}.{minor}.{patch}" in text
    assert f"{major}.{minor}.{patch}" in text
    assert "trace ring" in text


def test_newer_minor_in_the_ring_header(fresh: bytearray) -> None:
    major, minor, patch = trace.API.version
    _header(fresh).version_minor = minor + 1
    text = _error(fresh, NvError.VersionMismatch)
    assert f"{major}.{minor + 1}.{patch}" in text
    assert "upgrade" in text


def test_layout_hash_mismatch_with_the_same_version(fresh: bytearray) -> None:
    _header(fresh).layout_hash ^= 0x1
    text = _error(fresh, NvError.VersionMismatch)
    assert "layout" in text
    assert "without a" in text


def test_header_size_below_the_header(fresh: bytearray) -> None:
    _header(fresh).header_size = 8
    assert "header_size" in _error(fresh)


# -- output formats ---------------------------------------------------------------------------------


def test_write_jsonl_and_write_text() -> None:
    emitted = _events(6)
    events = read_ring(_fill(1024, emitted).buffer, API).events
    lines = write_jsonl(events).splitlines()
    assert len(lines) == 6
    rows = [json.loads(line) for line in lines]
    for i, (row, sent) in enumerate(zip(rows, emitted, strict=True)):
        assert set(row) == {"seq", "timestamp_ns", "event", "fields"}
        assert row["seq"] == i
        assert row["timestamp_ns"] == 100 + i
        assert row["event"] == type(sent).__name__
        assert row["fields"] == sent.to_dict()
    assert rows[2]["fields"]["text"] == "line 2"
    text = write_text(events)
    assert len(text.splitlines()) == 6
    for name in ("task_start", "layer_end", "log", "interrupt", "error"):
        assert name in text
    assert "line 2" in text
    assert write_jsonl([]) == write_text([]) == ""


# -- property: the reader returns exactly the suffix the writer kept --------------------------------

_EVENT = st.one_of(
    st.builds(trace.task_start, task_id=st.integers(0, 2**64 - 1), num_ops=st.integers(0, 2**32 - 1),
              context_id=st.integers(0, 2**16 - 1)),
    st.builds(trace.task_end, task_id=st.integers(0, 2**64 - 1), status=st.integers(0, 6),
              context_id=st.integers(0, 2**16 - 1)),
    st.builds(trace.layer_start, task_id=st.integers(0, 2**64 - 1), op_index=st.integers(0, 2**16 - 1),
              block=st.integers(0, 5), group=st.integers(0, 1)),
    st.builds(trace.layer_end, task_id=st.integers(0, 2**64 - 1), duration_ns=st.integers(0, 2**64 - 1),
              op_index=st.integers(0, 2**16 - 1), block=st.integers(0, 5), group=st.integers(0, 1)),
    st.builds(trace.reg_write, address=st.integers(0, 2**32 - 1), value=st.integers(0, 2**32 - 1),
              block=st.integers(0, 5), group=st.integers(0, 1)),
    st.builds(trace.interrupt, status=st.integers(0, 2**32 - 1), mask=st.integers(0, 2**32 - 1)),
    st.builds(trace.error, task_id=st.integers(0, 2**64 - 1), fault_address=st.integers(0, 2**64 - 1),
              status=st.integers(0, 255), op_index=st.integers(0, 2**16 - 1), block=st.integers(0, 255)),
    st.builds(trace.log, level=st.integers(0, 255),
              text=st.binary(max_size=63).map(lambda b: b.replace(b"\0", b"."))),
)


def _model(capacity: int, emitted: list[Record]) -> tuple[int, list[int]]:
    """Where each entry starts (byte counter), by the documented rules, and the final head."""
    head, starts = 0, []
    for event in emitted:
        need = _total(event)
        if capacity - head % capacity < need:
            head += capacity - head % capacity
        starts.append(head)
        head += need
    return head, starts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(10, 80).map(lambda n: n * 8), emitted=st.lists(_EVENT, max_size=60),
       t0=st.integers(0, 2**63))
def test_reader_returns_exactly_the_kept_suffix(capacity: int, emitted: list[Record], t0: int) -> None:
    ring = _fill(capacity, emitted, t0=t0)
    result = read_ring(ring.buffer, API)
    head, starts = _model(capacity, emitted)
    kept = [i for i, s in enumerate(starts) if s >= head - capacity]
    assert kept == list(range(len(emitted) - len(kept), len(emitted)))
    assert result.head == head
    assert result.wrap_count == head // capacity
    assert result.dropped == len(emitted) - len(kept)
    assert [e.seq for e in result.events] == kept
    assert [e.position for e in result.events] == [starts[i] for i in kept]
    assert [e.timestamp_ns for e in result.events] == [t0 + i for i in kept]
    assert [bytes(e.record) for e in result.events] == [bytes(emitted[i]) for i in kept]
    assert [e.name for e in result.events] == [type(emitted[i]).__name__ for i in kept]
    # Reading from any earlier head (the ring's head after some emit) returns the newer part.
    earlier_heads = [0] + [s + _total(e) for s, e in zip(starts, emitted, strict=True)]
    for since in [*earlier_heads[:: max(1, len(earlier_heads) // 6)], head]:
        part = read_ring(ring.buffer, API, since=since)
        assert part.lost_bytes == max(0, ring.header.tail - since)
        assert [e.seq for e in part.events] == [i for i in kept if starts[i] >= since]


# -- CLI --------------------------------------------------------------------------------------------


def test_cli_trace_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emitted = _events(5)
    path = tmp_path / "ring.bin"
    path.write_bytes(bytes(_fill(1024, emitted).buffer))
    assert main(["deviceapi", "trace", str(path), "--format", "jsonl"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["event"] for r in rows] == [type(e).__name__ for e in emitted]
    assert [r["seq"] for r in rows] == list(range(5))
    assert rows[2]["fields"] == {"level": 2, "text": "line 2"}
    assert "5 events" in captured.err


def test_cli_trace_text_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ring.bin"
    ring = _fill(1024, _events(3))
    path.write_bytes(bytes(ring.buffer))
    assert main(["deviceapi", "trace", str(path)]) == 0
    out = capsys.readouterr().out
    assert "task_start" in out
    assert "log" in out
    bad = bytearray(ring.buffer)
    _header(bad).magic = 0
    path.write_bytes(bytes(bad))
    assert main(["deviceapi", "trace", str(path)]) == 1
    assert "magic" in capsys.readouterr().err
    assert main(["deviceapi", "trace", str(tmp_path / "missing.bin")]) == 1
    assert "missing.bin" in capsys.readouterr().err
