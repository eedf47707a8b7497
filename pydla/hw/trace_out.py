"""The trace ring the device writes (:class:`TraceOutput`, a part of :class:`~pydla.hw.device.VirtualDevice`).

The host (the KMD, for whoever asked to trace) puts a ring in device memory, writes its header
(:meth:`pydla.deviceapi.trace.TraceRing.create`'s layout), and tells the device where it is through
the GLB registers ``trace_base_lo/hi``, ``trace_ctx`` and ``trace_size`` (writing the size starts
tracing, 0 stops); ``trace_mask`` (``trace_class_e`` bits) says which classes of events are written.
The device then appends, as it works and without stopping, the events of the ``trace`` contract:
``op_start``/``op_end`` of each block's operation (class LAYER), ``cu_start``/``cu_end`` of each
compute-unit execution (LAYER), ``interrupt`` at each rise of the interrupt line (INTERRUPT),
``error`` for a failed operation (ERROR), ``reg_write`` for each register write it takes
(REG_WRITE), ``task_start``/``task_end`` when the engine scheduler writes ``trace_task_cmd`` (TASK; see
below), and ``log`` for each line of the device's log and of its firmware's (LOG). Timestamps are the
host's monotonic clock in ns (the virtual device shares it), so host and device events fall on one
timeline. When the ring is full the oldest entries are dropped and counted in its header; the host
reads it whenever it likes (``read_ring``).

The device writes the ring as :class:`pydla.deviceapi.trace.TraceRing` (the contract's reference
writer) does, byte for byte, but faster (:class:`RingWriter`): it keeps the ring's counters itself,
packs each event with its entry header in one precompiled ``struct`` call and updates the header's
``head``; only an entry that must drop old ones or pad the end of a lap takes the slower path. An
event costs about a microsecond instead of six, which is what keeps a traced run near an untraced one.

A ring the device cannot use (not mapped in that context, a header that is not a trace ring of this
contract, a size smaller than the header says) is refused: nothing is written and the device log
says why. Tracing costs one attribute test per event site while it is off.

Tasks: the device does not know what a task is; the engine scheduler does, wherever it runs (on the
host, headless, or on the microcontroller, headed), and it reaches the device only through registers.
So it tells the ring through registers: ``trace_task_lo/hi`` (the task id; ``hi`` reads 0 again after
each command, so a task id that fits 32 bits needs ``lo`` only), ``trace_task_info`` (the number of
operations for a start, the ``dla_status_e`` for an end), then ``trace_task_cmd`` (bits 3:0
``TASK_START`` or ``TASK_END``, bits 31:16 the context), which writes the event when TASK is on and
nothing otherwise. The engine writes them only while it knows a trace with TASK runs, so an untraced
task's register writes are those of before.

Log lines: the device's ``log`` (a :class:`DeviceLog`) also writes each line it takes as a ``log``
event while LOG is on (level ``LOG_WARNING``: what the device logs is a refusal or a fault); the
firmware writes its own lines through :meth:`TraceOutput.log`. Text longer than the event's
63 bytes is cut (UTF-8, on a character boundary).

Usage (the host's side, through registers)::

    dev.reg_write(R.GLB_TRACE_BASE_LO, iova & 0xFFFFFFFF); dev.reg_write(R.GLB_TRACE_BASE_HI, iova >> 32)
    dev.reg_write(R.GLB_TRACE_CTX, ctx); dev.reg_write(R.GLB_TRACE_MASK, 0xFF)
    dev.reg_write(R.GLB_TRACE_SIZE, size)          # starts
"""

from __future__ import annotations

import collections
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import trace as T
from pydla.deviceapi.generated.device_api import dla_block_e, dla_status_e
from pydla.deviceapi.generated.headers import trace_entry_header_t, trace_ring_header_t
from pydla.deviceapi.packing import record_struct
from pydla.deviceapi.trace import ALIGN, ENTRY_SIZE, HEADER_SIZE, PAD_ID, read_ring
from pydla.errors import DlaError
from pydla.hw.memory import MmuFault
from pydla.hw.state import DeviceState

TASK, LAYER, REG_WRITE, INTERRUPT, ERROR, LOG = (int(c) for c in R.trace_class_e)
ALL_CLASSES = TASK | LAYER | REG_WRITE | INTERRUPT | ERROR | LOG
_STATUS_OF_ERROR = {int(R.dla_hw_error_e.MMU_FAULT): dla_status_e.MMU_FAULT}
_REGS = ("trace_base_lo", "trace_base_hi", "trace_ctx", "trace_size", "trace_mask", "trace_task_lo",
         "trace_task_hi", "trace_task_info", "trace_task_cmd")
TASK_START, TASK_END = 1, 2  # trace_task_cmd bits 3:0 (dla_regs.yaml)
# The levels of a log event (its u8 level): the lower, the more severe (as syslog's).
LOG_ERROR, LOG_WARNING, LOG_INFO, LOG_DEBUG = 3, 4, 6, 7
_LOG_TEXT = 63  # bytes of a log event's text (trace.yaml)
# Per block (dla_block_e index): the word of its D group holding d_ctx_id (an operation's context).
CTX_WORD = {int(b): (getattr(R, f"{b.name}_D_CTX_ID") - 0x1000 * (int(b) + 1)) >> 2
            for b in dla_block_e if hasattr(R, f"{b.name}_D_CTX_ID")}
_U32 = 0xFFFFFFFF
_HEAD = struct.Struct("<Q")
_COUNTERS = struct.Struct("<QQQ")  # head, tail, dropped: adjacent in the ring's header
_WRAP = struct.Struct("<I")
_AT_HEAD, _AT_TAIL, _AT_DROPPED, _AT_WRAP = (getattr(trace_ring_header_t, f).offset
                                             for f in ("head", "tail", "dropped", "wrap_count"))
assert (_AT_TAIL, _AT_DROPPED) == (_AT_HEAD + 8, _AT_HEAD + 16)
_PAD = record_struct(trace_entry_header_t)[0]
_ENTRY_ID = struct.Struct("<H")
_AT_ID, _AT_SIZE = trace_entry_header_t.id.offset, trace_entry_header_t.size.offset


class EventKind:
    """One trace event's entry (header and payload) as one precompiled struct; its values are
    ``timestamp_ns, seq, id, size`` and then the event's fields in their order."""

    __slots__ = ("id", "need", "size", "struct")

    def __init__(self, cls: type[Any]) -> None:
        head, _ = record_struct(trace_entry_header_t)
        body, _ = record_struct(cls)
        self.id = int(cls.TRACE_ID)
        self.struct = struct.Struct(head.format + body.format.lstrip("<"))
        self.size = body.size
        self.need = (ENTRY_SIZE + body.size + ALIGN - 1) & ~(ALIGN - 1)


_OP_START, _OP_END, _ERROR, _INTERRUPT, _REG_WRITE, _CU_START, _CU_END, _TASK_START, _TASK_END, _LOG = (
    EventKind(c) for c in (T.op_start, T.op_end, T.error, T.interrupt, T.reg_write, T.cu_start, T.cu_end,
                           T.task_start, T.task_end, T.log))


def log_text(text: str) -> bytes:
    """``text`` as a log event holds it: UTF-8, cut to its 63 bytes without splitting a character."""
    return text.encode("utf-8", "replace")[:_LOG_TEXT].decode("utf-8", "ignore").encode("utf-8")


class DeviceLog(collections.deque[str]):
    """The device's log (its last lines); each line appended is also a ``log`` event of the trace
    ring while its LOG class is on (one attribute test while it is off)."""

    def __init__(self, state: DeviceState, write: Callable[[int, str], None], maxlen: int,
                 lines: Iterable[str] = ()) -> None:
        super().__init__(lines, maxlen=maxlen)
        self.state = state
        self.write = write

    def append(self, line: str) -> None:
        super().append(line)
        if self.state.trace_mask & LOG:
            self.write(LOG_WARNING, line)


class RingWriter:
    """The device's side of an attached ring (see the module docstring). The counters start from the
    header the host wrote (checked by ``read_ring`` before) and are the device's own from then on:
    entries are never read back except the oldest, when dropped, and those reads are bounded."""

    def __init__(self, buffer: memoryview) -> None:
        header = trace_ring_header_t.from_buffer_copy(buffer[:HEADER_SIZE])
        self.buffer = buffer
        self.capacity = int(header.capacity)
        start = int(header.header_size)
        self.data = buffer[start:start + self.capacity]
        self.head, self.tail, self.dropped = int(header.head), int(header.tail), int(header.dropped)
        self.wrap = int(header.wrap_count)
        self.seq = 0

    def put(self, kind: EventKind, *values: int | bytes) -> None:
        """Append one event stamped now (dropping the oldest entries when the ring is full)."""
        now = time.monotonic_ns()
        head, cap, need = self.head, self.capacity, kind.need
        pos = head % cap
        if head + need - self.tail > cap or cap - pos < need:
            self._make_room(need, now)
            head = self.head
            pos = head % cap
        kind.struct.pack_into(self.data, pos, now, self.seq, kind.id, kind.size, *values)
        self.seq = (self.seq + 1) & _U32
        head += need
        self.head = head
        if pos + need == cap:
            self.wrap = (self.wrap + 1) & _U32
            _WRAP.pack_into(self.buffer, _AT_WRAP, self.wrap)
        _HEAD.pack_into(self.buffer, _AT_HEAD, head)  # after the entry: a reader never sees half of one

    def _make_room(self, need: int, now: int) -> None:
        """The slow path: pad out the rest of a lap that cannot hold the entry, and drop the oldest
        entries until it fits (what TraceRing._write does)."""
        cap = self.capacity
        room_to_end = cap - self.head % cap
        if room_to_end < need:
            self._drop_until(room_to_end)
            if room_to_end >= ENTRY_SIZE:  # a pad entry: a header only
                _PAD.pack_into(self.data, self.head % cap, now, self.seq, PAD_ID, room_to_end - ENTRY_SIZE)
            self.head += room_to_end
            self.wrap = (self.wrap + 1) & _U32
            _WRAP.pack_into(self.buffer, _AT_WRAP, self.wrap)
        self._drop_until(need)
        _COUNTERS.pack_into(self.buffer, _AT_HEAD, self.head, self.tail, self.dropped)

    def _drop_until(self, need: int) -> None:
        cap, data = self.capacity, self.data
        while self.head + need - self.tail > cap:
            pos = self.tail % cap
            if cap - pos < ENTRY_SIZE:
                self.tail += cap - pos
                continue
            (event_id,) = _ENTRY_ID.unpack_from(data, pos + _AT_ID)
            (size,) = _ENTRY_ID.unpack_from(data, pos + _AT_SIZE)
            self.tail = min(self.tail + ((ENTRY_SIZE + size + ALIGN - 1) & ~(ALIGN - 1)), self.head)
            if event_id != PAD_ID:
                self.dropped += 1


class TraceOutput:
    """The device's side of the trace ring (a part of :class:`~pydla.hw.device.VirtualDevice`). See
    the module docstring. The classes written now are the shared ``state.trace_mask``: the other
    parts test it at each event site. The ``op_start`` ... ``cu`` methods write under the device
    lock."""

    def __init__(self, state: DeviceState) -> None:
        self._state = state
        self._lock = state.lock
        self._iommu = state.iommu
        self._ring: RingWriter | None = None
        # The device's log, made with the state: kept, and written to the ring too (DeviceLog).
        state.log = DeviceLog(state, self.log, state.log.maxlen or 256, state.log)
        self._regs = dict.fromkeys(_REGS, 0)
        self._seq = [0] * 8

    def glb_registers(self) -> dict[int, tuple[Callable[[], int], Callable[[int], int]]]:
        """The GLB trace_* registers this part serves: address -> (read, write)."""
        return {getattr(R, f"GLB_{name.upper()}"): (self._reader(name), self._writer(name)) for name in _REGS}

    def _reader(self, name: str) -> Callable[[], int]:
        regs = self._regs
        return lambda: regs[name]

    def _writer(self, name: str) -> Callable[[int], int]:
        regs = self._regs
        state = self._state
        if name == "trace_task_cmd":
            def command(value: int) -> int:
                regs[name] = value
                if state.trace_mask & TASK:  # (nothing to do while TASK is off)
                    self._task(value)
                return 0
            return command
        if name.startswith("trace_task_"):  # written at each traced task's start and end: a store
            def store(value: int) -> int:
                regs[name] = value
                return 0
            return store

        def write(value: int) -> int:
            regs[name] = value
            if name == "trace_size":
                self._attach(value)
            elif name == "trace_mask":
                state.trace_mask = value & ALL_CLASSES if self._ring is not None else 0
            return 0
        return write

    def _attach(self, size: int) -> None:
        """Under the lock: take the ring the registers describe (size 0: stop)."""
        state = self._state
        self._ring, state.trace_mask = None, 0
        if size == 0:
            return
        r = self._regs
        base = r["trace_base_hi"] << 32 | r["trace_base_lo"]
        if size < HEADER_SIZE:
            state.log.append(f"trace ring at {base:#x}: refused: {size} bytes is less than its header")
            return
        try:
            bo, offset = self._iommu.translate(r["trace_ctx"], base, size)
            buffer = bo.array[offset:offset + size].data  # a writable memoryview: written in place
            read_ring(buffer, T.API)  # the header is a ring of this contract that fits the buffer
            self._ring = RingWriter(buffer)
        except MmuFault as e:
            state.log.append(f"trace ring at {base:#x}: refused: {e}")
            return
        except DlaError as e:
            state.log.append(f"trace ring at {base:#x}: refused: {e.message}")
            return
        state.trace_mask = r["trace_mask"] & ALL_CLASSES
        state.log.append(f"trace ring at {base:#x} in context {r['trace_ctx']}: {size} bytes")

    def reset(self) -> None:
        """A device reset stops tracing (the registers read 0 again)."""
        self._ring, self._state.trace_mask = None, 0
        self._regs.update(dict.fromkeys(_REGS, 0))  # in place: the register writers hold the dict

    # -- what the device writes (under the device lock) ----------------------------------------------

    def _task(self, cmd: int) -> None:
        """trace_task_cmd written while TASK is on: the task event the trace_task_* registers say."""
        ring = self._ring
        if ring is None:
            return
        r = self._regs
        task_id = r["trace_task_hi"] << 32 | r["trace_task_lo"]
        r["trace_task_hi"] = 0  # cleared by each command: a writer of 32-bit ids saves its write
        kind, ctx = cmd & 0xF, cmd >> 16 & 0xFFFF
        if kind == TASK_START:
            ring.put(_TASK_START, task_id, r["trace_task_info"], ctx)
        elif kind == TASK_END:
            ring.put(_TASK_END, task_id, r["trace_task_info"], ctx)

    def log(self, level: int, text: str) -> None:
        """A ``log`` event, when LOG is on (the firmware's lines and the device's own). It takes the
        device's lock (reentrant): a log line may come from a thread that does not hold it."""
        if not self._state.trace_mask & LOG:
            return
        with self._lock:
            ring = self._ring
            if ring is not None:
                ring.put(_LOG, level & 0xFF, log_text(text))

    def op_start(self, block_index: int, group: int, ctx: int) -> None:
        seq = self._seq[block_index]
        self._seq[block_index] = (seq + 1) & _U32
        ring = self._ring
        if ring is not None:
            ring.put(_OP_START, seq, ctx & 0xFFFF, block_index, group)

    def op_end(self, block_index: int, group: int, ctx: int, duration_ns: int, error: int) -> None:
        ring = self._ring
        if ring is not None:
            seq = (self._seq[block_index] - 1) & _U32
            ring.put(_OP_END, duration_ns, seq, error, ctx & 0xFFFF, block_index, group)

    def error(self, block_index: int, error: int, fault_address: int) -> None:
        ring = self._ring
        if ring is not None:
            status = int(_STATUS_OF_ERROR.get(error, dla_status_e.ERROR))
            ring.put(_ERROR, 0, fault_address, status, 0xFFFF, block_index)

    def interrupt(self, status: int, mask: int) -> None:
        ring = self._ring
        if ring is not None:
            ring.put(_INTERRUPT, status, mask)

    def reg_write(self, address: int, value: int, block_index: int, group: int) -> None:
        ring = self._ring
        if ring is not None:
            ring.put(_REG_WRITE, address, value, block_index, group)

    def cu(self, unit: int, execution: int, duration_ns: int | None, error: int = 0) -> None:
        ring = self._ring
        if ring is None or not self._state.trace_mask & LAYER:  # (a SHAVE tile's calls do not test it)
            return
        if duration_ns is None:
            ring.put(_CU_START, execution, unit)
        else:
            ring.put(_CU_END, duration_ns, execution, error, unit)
