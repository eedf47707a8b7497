"""The layout of a submission ring, shared by the Linux port (client) and the daemon.

A ring (uAPI 2.4, RING_SETUP) is memory both processes map: a ``dla_ring_header_t``, then
``entries`` submission entries (``dla_ring_sqe_t``), then ``2 * entries`` completion entries
(``dla_ring_cqe_t``), as io_uring lays out its queues. Each side owns the indices it writes
(the client ``sq_tail`` and ``cq_head``, the daemon ``sq_head`` and ``cq_tail``) and keeps its own
copy of them; what it reads of the other side's is checked before use. An eventfd each way says
"look at the ring": a counter, so a kick is never lost whoever sleeps when. The ring replaces a
submit's ioctl (a FUSE request, about 30-50 us here) by an eventfd write (about 4 us a round trip
each way), and lets the daemon take several clients' submissions in one wake-up.

The rule for the header: **every shared index (and the flags and entries words) is stored and
loaded with one aligned 4-byte access, through** :func:`header_words` **only** (``words[SQ_TAIL] =
tail``, ``head = words[SQ_HEAD]``), on both sides. Never ``struct.pack_into``/``unpack_from``, a slice
assignment or a ctypes field of the header: CPython's ``struct.pack_into`` first fills its
destination with zeros (``s_pack_internal``'s memset, Modules/_struct.c) and then writes a ``<I``
one byte at a time (``lp_uint``), so the other process can read an index as 0 or as a mix of bytes
(seen: 12,404 reads of 0 in 6.9 million of an index that only grows from 1; the daemon then read a
well-behaved client's cq_head as 0 and broke its ring as "full"). A memoryview cast to ``"I"``
stores ``words[i] = v`` straight into the buffer (``memory_ass_sub`` -> ``pack_single`` in
Objects/memoryobject.c: ``PACK_SINGLE(ptr, value, unsigned int)``, a ``memcpy`` of
``sizeof(unsigned int)`` bytes from a local, which compilers emit as one 32-bit store; in the
CPython 3.11.7 build here ``mov %r14d,(%r12)``) and loads ``words[i]`` with ``UNPACK_SINGLE`` (one
32-bit load, ``mov (%rdi),%edi``). The header starts the mapping (page aligned), every word is at a
multiple of 4, and an aligned 4-byte access is atomic on x86-64 (Intel SDM vol. 3A, "Guaranteed
Atomic Operations") and AArch64. :func:`header_words` checks the alignment and the item size. The
words are in the machine's byte order, as the generated ``c_uint32`` fields and the C header's
``uint32_t`` lay them out.

Ordering: an entry is written before the index that publishes it, and the eventfd write (a system
call) comes after both. On x86-64 (stores are not reordered with stores, loads not with loads) a
reader that sees an index sees the entries before it. Elsewhere a reader could see a stale entry
of the same client's ring: it is checked like any other, so it can only hurt that client.

Usage::

    layout = RingLayout(64)
    buf = SharedBuffer(layout.size)
    words = header_words(buf.mapping)          # words[SQ_TAIL] = 1; words[CQ_TAIL] -> int
    sqe = U.dla_ring_sqe_t.from_buffer(buf.mapping, layout.sqe_offset(3))
    words.release()                            # before the mapping closes
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import struct

from pydla.deviceapi.generated import dla_uapi as U

MIN_ENTRIES, MAX_ENTRIES = 8, 256
HEADER_SIZE = ctypes.sizeof(U.dla_ring_header_t)
SQE_SIZE = ctypes.sizeof(U.dla_ring_sqe_t)
CQE_SIZE = ctypes.sizeof(U.dla_ring_cqe_t)
WORD = 4


def _word(field: str) -> int:
    offset = int(getattr(U.dla_ring_header_t, field).offset)
    assert offset % WORD == 0 and getattr(U.dla_ring_header_t, field).size == WORD, field
    return offset // WORD


#: Which word of :func:`header_words` each u32 of the header is (its byte offset / 4).
SQ_TAIL = _word("sq_tail")
SQ_HEAD = _word("sq_head")
CQ_TAIL = _word("cq_tail")
CQ_HEAD = _word("cq_head")
FLAGS = _word("flags")
ENTRIES = _word("entries")
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


def header_words(mapping: mmap.mmap) -> memoryview:
    """The ring header of ``mapping`` (a ring's shared memory, the header at offset 0) as u32 words,
    each stored and loaded with one aligned 4-byte access (the module's rule says why). Release the
    view before the mapping closes (an mmap with a view cannot close)."""
    words = memoryview(mapping)[:HEADER_SIZE].cast("I")
    if words.itemsize != WORD:  # unsigned int is 4 bytes wherever CPython runs; say so if not
        words.release()
        raise RuntimeError(f"a memoryview item 'I' is {words.itemsize} bytes here, not {WORD}")
    anchor = ctypes.c_char.from_buffer(mapping)
    address = ctypes.addressof(anchor)
    del anchor  # its export of the mapping goes with it
    if address % WORD:
        words.release()
        raise RuntimeError(f"the ring header at {address:#x} is not {WORD}-byte aligned")
    return words


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
