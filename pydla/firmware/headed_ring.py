"""The headed-mode mailbox as both sides read and write it: its layout and its three byte rings.

The mailbox is one buffer of device memory the host KMD allocates and maps into a context of its own;
GLB ``mcu_mbox_base_lo/hi``, ``mcu_mbox_ctx`` and ``mcu_mbox_size`` tell the microcontroller where it
is. At offset 0 sits the generated ``mailbox_header_t`` (device_api): a magic, each ring's head and
tail, and where each area is. Three rings follow: commands (host to firmware), responses and events
(firmware to host); then the lists area, where the host writes the address lists of the tasks it
submits (``address_entry_t`` arrays named by ``task_submit_list_cmd``).

A ring's head and tail count bytes ever written and consumed; a message (a generated device-API
message, its size in its common header) starts 8-byte aligned at ``counter % capacity`` and may wrap
around the end. The producer writes the head, the consumer the tail. Each side keeps its own counter
privately and checks the other side's before using it: nothing one side wrote is trusted by the
other (a head beyond the capacity, a size that runs past what was written: :class:`RingError`, and
the consumer drops what is left, as it cannot find the next message).

Usage::

    layout = Layout.default(lists_size=4 * 4096 * 16)
    layout.write_header(mem)                       # the host, before it attaches the mailbox
    cmds = Ring(mem, layout.cmd, producer=True)    # the host's side of the command ring
    cmds.write(bytes(msg))
    cmds.write_packed(st, *values)                 # or packed straight into the ring (one struct)

On the hot path (a task's submit, its response and its task_done event) each side packs and unpacks
messages with one precompiled ``struct`` (:mod:`pydla.deviceapi.packing`) straight in the ring's
memory (:meth:`Ring.write_packed`, :meth:`Ring.peek` then :meth:`Ring.consume`), and reads the
counters through a memoryview: a ctypes message costs a call per field, a numpy scalar several
times a memoryview's item.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import device_api as api
from pydla.errors import DlaError, NvError

MAGIC = int.from_bytes(b"PYDLAMBX", "little")
HEADER_SIZE = ctypes.sizeof(api.mailbox_header_t)
MAX_MESSAGE = 256  # the largest device-API message either side accepts (the largest is under 100)
ALIGN = 8
ENTRY_SIZE = ctypes.sizeof(api.address_entry_t)
_U64 = {name: getattr(api.mailbox_header_t, name).offset // 8
        for name in ("magic", "cmd_head", "cmd_tail", "rsp_head", "rsp_tail", "evt_head", "evt_tail",
                     "evt_dropped")}
_U32_BASE = api.mailbox_header_t.cmd_offset.offset
_SIZE = struct.Struct("<I")  # a message's first field: its size
_AREAS = ("cmd", "rsp", "evt", "lists")


class RingError(DlaError):
    """What one side wrote into a ring is not a well-formed message stream."""


@dataclass(frozen=True)
class Area:
    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class Layout:
    """Where the rings and the lists area are in the mailbox."""

    cmd: Area
    rsp: Area
    evt: Area
    lists: Area

    @property
    def size(self) -> int:
        return self.lists.offset + self.lists.size

    @classmethod
    def default(cls, lists_size: int, *, cmd: int = 16384, rsp: int = 16384, evt: int = 65536) -> Layout:
        at = 128  # after the header, rounded up
        areas = []
        for name, size in zip(_AREAS, (cmd, rsp, evt, lists_size), strict=True):
            areas.append(Area(name, at, size))
            at += size
        return cls(*areas)

    def write_header(self, mem: npt.NDArray[np.uint8]) -> None:
        """Zero the header (every counter at 0) and describe the areas (the host, before attaching)."""
        mem[:HEADER_SIZE] = 0
        words = mem[:HEADER_SIZE].view("<u8")
        words[_U64["magic"]] = MAGIC
        sizes = mem[_U32_BASE:HEADER_SIZE].view("<u4")
        for i, area in enumerate((self.cmd, self.rsp, self.evt, self.lists)):
            sizes[2 * i] = area.offset
            sizes[2 * i + 1] = area.size

    @classmethod
    def read(cls, mem: npt.NDArray[np.uint8]) -> Layout:
        """The layout the header describes, every field checked against the mailbox's real size (the
        firmware, when it attaches: the host's header is not trusted)."""
        size = len(mem)
        if size < HEADER_SIZE:
            raise DlaError(NvError.InvalidSize, f"mailbox: mcu_mbox_size {size} is smaller than its "
                                                f"{HEADER_SIZE}-byte header")
        magic = int(mem[:8].view("<u8")[0])
        if magic != MAGIC:
            raise DlaError(NvError.BadValue, f"mailbox: magic {magic:#x} is not 'PYDLAMBX' ({MAGIC:#x})")
        sizes = [int(v) for v in mem[_U32_BASE:HEADER_SIZE].view("<u4")]
        areas = []
        taken = [(0, HEADER_SIZE)]
        for i, name in enumerate(_AREAS):
            offset, length = sizes[2 * i], sizes[2 * i + 1]
            minimum = ENTRY_SIZE if name == "lists" else 2 * MAX_MESSAGE
            if offset % ALIGN or length % ALIGN or length < minimum or offset + length > size:
                raise DlaError(NvError.BadValue,
                               f"mailbox: {name}_offset {offset} / {name}_capacity {length}: must be "
                               f"multiples of {ALIGN}, at least {minimum} bytes, inside the mailbox's "
                               f"{size} bytes")
            for start, end in taken:
                if offset < end and start < offset + length:
                    raise DlaError(NvError.BadValue, f"mailbox: the {name} area ({offset}, {length} bytes) "
                                                     f"overlaps another area at {start}..{end}")
            taken.append((offset, offset + length))
            areas.append(Area(name, offset, length))
        return cls(*areas)


def counters(mem: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """The header's u64 fields (magic, heads, tails, evt_dropped) as a writable view."""
    return mem[:64].view("<u8")


class Ring:
    """One ring as one side sees it: ``producer`` writes messages, a consumer reads them."""

    def __init__(self, mem: npt.NDArray[np.uint8], area: Area, *, producer: bool) -> None:
        self.mem = mem
        self.area = area
        self.data = mem[area.offset:area.offset + area.size]
        self.view = self.data.data  # the same bytes as a memoryview: struct packs into it
        self.capacity = area.size
        self.words: memoryview[int] = mem[:64].data.cast("Q")  # the header's u64 fields, as counters()
        self._head = _U64[f"{area.name}_head"]
        self._tail = _U64[f"{area.name}_tail"]
        self.head_word = self._head  # words[head_word] != count: something to read (a consumer's check)
        self.producer = producer
        self.count = 0  # this side's counter (head of a producer, tail of a consumer), never re-read
        self._taken = 0  # bytes of the message peek() returned, consumed by consume()
        self.words[self._head if producer else self._tail] = 0

    # -- consumer --------------------------------------------------------------------------------

    def unread(self) -> int:
        """Bytes written and not yet read (as the producer's head says; checked by :meth:`read`)."""
        return int(self.words[self._head] - self.count) & 0xFFFF_FFFF_FFFF_FFFF

    def read(self) -> bytes | None:
        """The next message's bytes, or None when there is none. RingError when the producer's head
        or a message's size is impossible; what was left in the ring is then dropped."""
        found = self.peek()
        if found is None:
            return None
        buf, at, size = found
        data = bytes(buf[at:at + size])
        self.consume()
        return data

    def peek(self) -> tuple[Any, int, int] | None:
        """The next message, not consumed yet: ``(buffer, offset, size)`` to unpack it from (the
        ring's own memory, or a copy when the message wraps around its end); then :meth:`consume`.
        None when there is none; RingError as :meth:`read`."""
        count = self.count
        head = self.words[self._head]
        avail = head - count
        if avail == 0:
            return None
        if avail < 0 or avail > self.capacity or avail % ALIGN:
            self._drop(head)
            raise RingError(NvError.BadValue, f"mailbox {self.area.name} ring: head {head} with "
                                              f"{count} consumed: not a multiple of {ALIGN} within "
                                              f"the {self.capacity}-byte ring; the ring was skipped to it")
        start = count % self.capacity
        if start + 4 <= self.capacity:
            (size,) = _SIZE.unpack_from(self.view, start)
        else:
            size = int.from_bytes(self._copy(count, 4), "little")
        padded = -(-size // ALIGN) * ALIGN
        if not 8 <= size <= MAX_MESSAGE or padded > avail:
            self._drop(head)
            raise RingError(NvError.InvalidSize,
                            f"mailbox {self.area.name} ring: message size {size} at {count}: must be "
                            f"8..{MAX_MESSAGE} and within the {avail} bytes written; the ring was skipped "
                            f"to {head}")
        self._taken = padded
        if start + size <= self.capacity:
            return self.view, start, size
        return self._copy(count, size), 0, size

    def consume(self) -> None:
        """Let the producer reuse the message :meth:`peek` returned (unpack it before)."""
        self.count += self._taken
        self._taken = 0
        self.words[self._tail] = self.count

    def _drop(self, head: int) -> None:
        if 0 <= head - self.count <= self.capacity:
            self.count = head
        else:
            self.count = max(self.count, head)  # a head that went backwards is not followed back
        self.words[self._tail] = self.count

    def _copy(self, at: int, size: int) -> bytes:
        start = at % self.capacity
        end = start + size
        if end <= self.capacity:
            return self.data[start:end].tobytes()
        return self.data[start:].tobytes() + self.data[:end - self.capacity].tobytes()

    # -- producer ---------------------------------------------------------------------------------

    def free(self) -> int:
        """Bytes the producer may write; 0 when the consumer's tail is impossible (treated as full)."""
        used = self.count - self.words[self._tail]
        if not 0 <= used <= self.capacity:
            return 0
        return self.capacity - int(used)

    def write(self, data: bytes) -> bool:
        """Append one message; False (nothing written) when it does not fit."""
        size = len(data)
        padded = -(-size // ALIGN) * ALIGN
        if padded > self.free():
            return False
        start = self.count % self.capacity
        end = start + size
        buf = np.frombuffer(data, dtype=np.uint8)
        if end <= self.capacity:
            self.data[start:end] = buf
        else:
            first = self.capacity - start
            self.data[start:] = buf[:first]
            self.data[:size - first] = buf[first:]
        self.count += padded
        self.words[self._head] = self.count  # after the bytes: the consumer never sees a partial message
        return True

    def write_packed(self, st: struct.Struct, *values: Any) -> bool:
        """Append one message packed by ``st`` from ``values``; False (nothing written) when it does
        not fit. The same bytes as ``write(st.pack(*values))``, without the copies."""
        count, capacity = self.count, self.capacity
        padded = -(-st.size // ALIGN) * ALIGN
        used = count - self.words[self._tail]
        if not 0 <= used <= capacity - padded:
            return False
        start = count % capacity
        if start + st.size <= capacity:
            st.pack_into(self.view, start, *values)
        else:  # it wraps around the end: pack it, then copy its two parts
            data = np.frombuffer(st.pack(*values), dtype=np.uint8)
            first = capacity - start
            self.data[start:] = data[:first]
            self.data[:st.size - first] = data[first:]
        self.count = count + padded
        self.words[self._head] = self.count  # after the bytes: the consumer never sees a partial message
        return True
