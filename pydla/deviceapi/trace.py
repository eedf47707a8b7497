"""The trace ring: binary log entries the device writes and the host pulls (the device API's tracing).

Layout (``trace_ring_header_t`` and ``trace_entry_header_t`` in ``specs/headers.yaml``): a header,
then a data area of ``capacity`` bytes. ``head`` and ``tail`` count bytes ever written; an entry lives
at ``counter % capacity``, is 8-byte aligned and never straddles the end of the data area. When the
writer needs room it drops the oldest entries (advancing ``tail``, counting ``dropped``).

A ring comes from the device, so the reader trusts nothing: every counter, id and size is checked
against the ring it was read from, and a problem is a DlaError naming the field and its value.

Usage::

    ring = TraceRing.create(4096, trace.API)              # the writer's side (the device)
    ring.emit(trace.task_start(task_id=1, num_ops=3), timestamp_ns=10)
    result = read_ring(ring.buffer, trace.API)            # the host's side
    for event in result.events:
        print(event.text())
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydla.deviceapi.generated.headers import trace_entry_header_t, trace_ring_header_t
from pydla.deviceapi.runtime import ApiInfo, Buffer, Record
from pydla.deviceapi.version import ContractVersion, check_compatible
from pydla.errors import DlaError, NvError, file_error
from pydla.files import TRACE_RING, wrong_kind

MAGIC = int.from_bytes(b"PYDLATRC", "little")
PAD_ID = 0xFFFF
ALIGN = 8
HEADER_SIZE = ctypes.sizeof(trace_ring_header_t)
ENTRY_SIZE = ctypes.sizeof(trace_entry_header_t)
MAX_PAYLOAD = 0xFFFF


def _align(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


class TraceRing:
    """The writer's side of a ring in a caller-supplied or newly allocated buffer."""

    def __init__(self, buffer: bytearray | memoryview, api: ApiInfo) -> None:
        self.buffer = buffer
        self.api = api
        self.header = trace_ring_header_t.from_buffer(buffer)
        self.capacity = self.header.capacity
        self._data = memoryview(buffer)[HEADER_SIZE:HEADER_SIZE + self.capacity]
        self._seq = 0

    @classmethod
    def create(cls, capacity: int, api: ApiInfo) -> TraceRing:
        """A new, empty ring with a data area of ``capacity`` bytes (a multiple of 8, >= 64)."""
        if capacity < 64 or capacity % ALIGN or capacity > 0xFFFFFFFF:
            raise DlaError(NvError.BadParameter,
                           f"trace ring capacity {capacity}: must be a multiple of 8, 64..2^32-1")
        buffer = bytearray(HEADER_SIZE + capacity)
        h = trace_ring_header_t.from_buffer(buffer)
        h.magic = MAGIC
        h.layout_hash = api.layout_hash64
        h.capacity = capacity
        h.version_major, h.version_minor, h.version_patch = api.version
        h.header_size = HEADER_SIZE
        return cls(buffer, api)

    def emit(self, event: Record, timestamp_ns: int) -> None:
        """Append ``event`` (a generated trace-event record), dropping the oldest entries if needed."""
        event_id = getattr(type(event), "TRACE_ID", None)
        if event_id is None or self.api.trace_events.get(event_id) is not type(event):
            raise DlaError(NvError.BadParameter,
                           f"{type(event).__name__} is not a trace event of {self.api.name}")
        payload = bytes(event)
        self._write(event_id, payload, timestamp_ns)

    def _write(self, event_id: int, payload: bytes, timestamp_ns: int) -> None:
        need = _align(ENTRY_SIZE + len(payload))
        if need > self.capacity or len(payload) > MAX_PAYLOAD:
            raise DlaError(NvError.InvalidSize,
                           f"trace entry of {need} bytes does not fit a ring of {self.capacity}")
        h = self.header
        room_to_end = self.capacity - h.head % self.capacity
        if room_to_end < need:
            # The rest of this lap cannot hold the entry: pad it out and start the next lap.
            self._make_room(room_to_end)
            if room_to_end >= ENTRY_SIZE:
                self._put(PAD_ID, b"", timestamp_ns, room_to_end - ENTRY_SIZE, room_to_end)
            else:
                h.head += room_to_end
            h.wrap_count = (h.wrap_count + 1) & 0xFFFFFFFF
        self._make_room(need)
        self._put(event_id, payload, timestamp_ns, len(payload), need)
        if h.head % self.capacity == 0:
            h.wrap_count = (h.wrap_count + 1) & 0xFFFFFFFF

    def _make_room(self, need: int) -> None:
        h = self.header
        while h.head + need - h.tail > self.capacity:
            pos = h.tail % self.capacity
            if self.capacity - pos < ENTRY_SIZE:
                h.tail += self.capacity - pos
                continue
            entry = trace_entry_header_t.from_buffer(self._data, pos)
            h.tail += _align(ENTRY_SIZE + entry.size)
            if entry.id != PAD_ID:
                h.dropped += 1

    def _put(self, event_id: int, payload: bytes, timestamp_ns: int, size: int, total: int) -> None:
        h = self.header
        pos = h.head % self.capacity
        entry = trace_entry_header_t.from_buffer(self._data, pos)
        entry.timestamp_ns = timestamp_ns
        entry.seq = self._seq & 0xFFFFFFFF
        entry.id = event_id
        entry.size = size
        self._data[pos + ENTRY_SIZE:pos + ENTRY_SIZE + len(payload)] = payload
        if event_id != PAD_ID:
            self._seq += 1
        h.head += total


@dataclass(frozen=True)
class TraceEvent:
    """One decoded entry: sequence number, time, the event record, and where it was in the ring."""

    seq: int
    timestamp_ns: int
    record: Record
    position: int

    @property
    def name(self) -> str:
        return type(self.record).__name__

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "timestamp_ns": self.timestamp_ns, "event": self.name,
                "fields": self.record.to_dict()}

    def text(self) -> str:
        values = " ".join(f"{k}={v}" for k, v in self.record.to_dict().items())
        return f"[{self.timestamp_ns / 1e9:14.9f}] #{self.seq:<6} {self.name:<12} {values}"


@dataclass
class RingContents:
    """What a read found: the events, and how many were lost to overwriting."""

    events: list[TraceEvent] = field(default_factory=list)
    dropped: int = 0
    lost_bytes: int = 0
    head: int = 0
    wrap_count: int = 0


def read_ring(buf: Buffer, api: ApiInfo, *, since: int | None = None) -> RingContents:
    """Decode the ring in ``buf``. ``since`` is the ``head`` of an earlier read: only newer entries
    are returned, and ``lost_bytes`` says how much was overwritten before this read could see it."""
    if len(buf) < HEADER_SIZE:
        raise DlaError(NvError.InvalidSize,
                       f"trace ring: {len(buf)} bytes is shorter than its {HEADER_SIZE}-byte header")
    h = trace_ring_header_t.from_buffer_copy(bytes(buf[:HEADER_SIZE]))
    _check_header(h, len(buf), api)
    data = memoryview(buf)[h.header_size:h.header_size + h.capacity]
    out = RingContents(dropped=h.dropped, head=h.head, wrap_count=h.wrap_count)
    start = h.tail
    if since is not None:
        if since > h.head:
            raise DlaError(NvError.BadParameter,
                           f"trace ring: since={since} is past the ring's head {h.head}")
        out.lost_bytes = max(0, h.tail - since)
        start = max(since, h.tail)
    pos = start
    expected_seq: int | None = None
    while pos < h.head:
        offset = pos % h.capacity
        if h.capacity - offset < ENTRY_SIZE:
            pos += h.capacity - offset
            continue
        entry = trace_entry_header_t.from_buffer_copy(bytes(data[offset:offset + ENTRY_SIZE]))
        total = _align(ENTRY_SIZE + entry.size)
        if offset + total > h.capacity or pos + total > h.head:
            raise DlaError(NvError.BadValue,
                           f"trace ring: entry at counter {pos} (offset {offset}) has size "
                           f"{entry.size}, which runs past the "
                           + ("data area" if offset + total > h.capacity else "ring's head"))
        if entry.id != PAD_ID:
            if expected_seq is not None and entry.seq != expected_seq:
                raise DlaError(NvError.BadValue,
                               f"trace ring: entry at counter {pos} has seq {entry.seq}, "
                               f"expected {expected_seq}")
            expected_seq = (entry.seq + 1) & 0xFFFFFFFF
            out.events.append(_decode_entry(api, entry, data, offset, pos))
        pos += total
    return out


def _check_header(h: Any, buf_len: int, api: ApiInfo) -> None:
    if h.magic != MAGIC:
        raise DlaError(NvError.BadValue, f"trace ring: magic {h.magic:#018x} is not {MAGIC:#018x}")
    peer = ContractVersion(api.name, (h.version_major, h.version_minor, h.version_patch),
                           h.layout_hash)
    check_compatible(ContractVersion.of(api), peer, local_role="reader", peer_role="trace ring")
    if h.header_size < HEADER_SIZE or h.header_size % ALIGN:
        raise DlaError(NvError.BadValue, f"trace ring: header_size {h.header_size} is invalid")
    if h.capacity == 0 or h.capacity % ALIGN or h.header_size + h.capacity > buf_len:
        raise DlaError(NvError.BadValue,
                       f"trace ring: capacity {h.capacity} does not fit the {buf_len}-byte buffer "
                       "or is not a multiple of 8")
    if h.tail > h.head or h.head - h.tail > h.capacity or h.tail % ALIGN or h.head % ALIGN:
        raise DlaError(NvError.BadValue,
                       f"trace ring: head {h.head} and tail {h.tail} are inconsistent with "
                       f"capacity {h.capacity}")
    laps = (h.head // h.capacity) & 0xFFFFFFFF  # wrap_count is a u32 and wraps with it
    if h.wrap_count != laps:
        raise DlaError(NvError.BadValue,
                       f"trace ring: wrap_count {h.wrap_count} disagrees with head {h.head} "
                       f"(expected {laps})")


def _decode_entry(api: ApiInfo, entry: Any, data: memoryview, offset: int, pos: int) -> TraceEvent:
    cls = api.trace_events.get(entry.id)
    if cls is None:
        raise DlaError(NvError.NotSupported,
                       f"trace ring: entry at counter {pos} has unknown event id {entry.id}")
    size = ctypes.sizeof(cls)
    if entry.size < size:
        raise DlaError(NvError.InvalidSize,
                       f"trace ring: {cls.__name__} entry at counter {pos} holds {entry.size} bytes, "
                       f"the event needs {size}")
    start = offset + ENTRY_SIZE
    record = cls.from_buffer_copy(bytes(data[start:start + size]))
    return TraceEvent(entry.seq, entry.timestamp_ns, record, pos)


def write_jsonl(events: Iterable[TraceEvent]) -> str:
    return "".join(json.dumps(e.as_json()) + "\n" for e in events)


def write_text(events: Iterable[TraceEvent]) -> str:
    return "".join(e.text() + "\n" for e in events)


def read_ring_file(path: Path) -> bytes:
    """The bytes of a saved trace ring; a file of another kind (a loadable, a Chrome trace's JSON) is
    refused saying what it is, a file that cannot be read as every command says it."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise file_error(path, e) from None
    error = wrong_kind(data[:64], "a trace ring (saved by `pydla run MODEL --trace-ring RING`)", path=path,
                       accept=(TRACE_RING,))
    if error is not None:
        raise error
    return data


def decode_ring_file(path: Path, api: ApiInfo, since: int | None = None) -> RingContents:
    """The events of the trace ring saved in ``path`` (:func:`read_ring`); a malformed ring's error
    names the file. ``pydla trace`` and ``pydla deviceapi trace`` read rings with it."""
    data = read_ring_file(path)
    try:
        return read_ring(data, api, since=since)
    except DlaError as e:
        raise DlaError(e.code, f"{path}: {e.message}") from e
