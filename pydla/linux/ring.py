"""The layout of a submission ring, shared by the Linux port (client) and the daemon.

A ring (uAPI 2.4, RING_SETUP) is memory both processes map: a ``dla_ring_header_t``, then
``entries`` submission entries (``dla_ring_sqe_t``), then ``2 * entries`` completion entries
(``dla_ring_cqe_t``), as io_uring lays out its queues. Each side owns the indices it writes
(the client ``sq_tail`` and ``cq_head``, the daemon ``sq_head`` and ``cq_tail``) and keeps its own
copy of them; what it reads of the other side's is checked before use. An eventfd each way says
"look at the ring": a counter, so a kick is never lost whoever sleeps when. The ring replaces a
submit's ioctl (a FUSE request, about 30-50 us here) by an eventfd write (about 4 us a round trip
each way), and lets the daemon take several clients' submissions in one wake-up.

Ordering: an entry is written before the index that publishes it, and the eventfd write (a system
call) comes after both. On x86-64 (stores are not reordered with stores, loads not with loads) a
reader that sees an index sees the entries before it. Elsewhere a reader could see a stale entry
of the same client's ring: it is checked like any other, so it can only hurt that client.

Usage::

    layout = RingLayout(64)
    buf = SharedBuffer(layout.size)
    sqe = U.dla_ring_sqe_t.from_buffer(buf.mapping, layout.sqe_offset(3))
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct

from pydla.deviceapi.generated import dla_uapi as U

MIN_ENTRIES, MAX_ENTRIES = 8, 256
HEADER_SIZE = ctypes.sizeof(U.dla_ring_header_t)
SQE_SIZE = ctypes.sizeof(U.dla_ring_sqe_t)
CQE_SIZE = ctypes.sizeof(U.dla_ring_cqe_t)
#: Where each index lives in the header (one little-endian u32 each).
SQ_TAIL = U.dla_ring_header_t.sq_tail.offset
SQ_HEAD = U.dla_ring_header_t.sq_head.offset
CQ_TAIL = U.dla_ring_header_t.cq_tail.offset
CQ_HEAD = U.dla_ring_header_t.cq_head.offset
FLAGS = U.dla_ring_header_t.flags.offset
ENTRIES = U.dla_ring_header_t.entries.offset
INDEX = struct.Struct("<I")
INDEX_MASK = 0xFFFFFFFF
#: A completion entry as (user_data, task_id, kind, status, completed): read without a ctypes object.
CQE = struct.Struct("<QQIII4x")
assert CQE.size == CQE_SIZE


class RingLayout:
    """Offsets of a ring of ``entries`` submission entries (a power of two in 8..256)."""

    __slots__ = ("cq_base", "cq_entries", "entries", "size", "sq_base")

    def __init__(self, entries: int) -> None:
        if not valid_entries(entries):
            raise ValueError(f"ring entries {entries}: must be a power of two in "
                             f"{MIN_ENTRIES}..{MAX_ENTRIES}")
        self.entries = entries
        self.cq_entries = 2 * entries  # an accepted entry is answered twice (ACCEPTED, FINISHED)
        self.sq_base = HEADER_SIZE
        self.cq_base = HEADER_SIZE + entries * SQE_SIZE
        self.size = self.cq_base + self.cq_entries * CQE_SIZE

    def sqe_offset(self, index: int) -> int:
        return self.sq_base + (index % self.entries) * SQE_SIZE

    def cqe_offset(self, index: int) -> int:
        return self.cq_base + (index % self.cq_entries) * CQE_SIZE


def valid_entries(entries: object) -> bool:
    return (type(entries) is int and MIN_ENTRIES <= entries <= MAX_ENTRIES
            and entries & (entries - 1) == 0)


def is_eventfd(fd: int) -> bool:
    """Whether ``fd`` (of this process) is an eventfd."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
    except OSError:
        return False


def kick(efd: int) -> None:
    """Add 1 to eventfd ``efd`` (never blocks: a counter that would overflow is already non-zero)."""
    with contextlib.suppress(BlockingIOError):  # the reader has a wake-up pending already
        os.eventfd_write(efd, 1)


def drain(efd: int) -> None:
    """Reset eventfd ``efd`` to 0 (non-blocking)."""
    with contextlib.suppress(BlockingIOError):  # it was 0
        os.eventfd_read(efd)
