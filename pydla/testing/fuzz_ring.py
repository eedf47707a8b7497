"""Fuzzing the submission ring (uAPI 2.4) of the Linux port's daemon, in two ways.

- :func:`hammer_index`: two processes hammer one index of a ring header: one stores a growing value
  as fast as it can, the other loads it and must never see it go back, nor a 0 after the first
  store. It holds with :func:`pydla.linux.ring.header_words` (one aligned 4-byte access each); with
  ``struct.pack_into`` (:class:`StructWords`, how the indices were written before) the reader sees
  zeros and mixed bytes, thousands a second on a 2-core machine.
- :func:`ring_target`: a :class:`~pydla.testing.fuzz.Target` whose inputs are what a hostile client
  writes into its ring: header words (sq_tail, cq_head, and the daemon's own sq_head, cq_tail, flags
  and entries), submission entries and kicks, stored by a client *process* while the daemon's ring
  thread serves it. The daemon must answer or refuse that client's ring (a break, flag BROKEN: the
  case counts as refused, a DlaError) and nothing else: no exception in the daemon, no stall of
  another client, whose ring job must be accepted and finished, right, within
  :data:`ANSWER_TIMEOUT_S` after every case, and no job of that client run by anyone else.

Both need Linux (memfd, eventfd, pidfd_getfd) and the rights to take a child's descriptors (root, or
ptrace rights over one's children); no FUSE mount.

Usage::

    result = hammer_index(1.0)
    assert result.regressions == 0 and result.changes > 100
    report = run_campaign([ring_target()], cases=500, seed=1)
"""

from __future__ import annotations

import importlib
import mmap
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

from pydla.errors import DlaError, NvError
from pydla.linux.ring import (
    CQ_TAIL,
    FLAGS,
    RingLayout,
)
from pydla.linux.shm import SharedBuffer

ANSWER_TIMEOUT_S = 5.0  # the other client's entry must be answered (and its job end) within this
SETTLE_TIMEOUT_S = 5.0  # the daemon must have read or refused the hostile ring within this
ENTRIES = 8
RECORD = struct.Struct("<BBHI")  # one hostile action: kind, word or slot, a 16-bit field, a value
KINDS = ("store", "entry", "kick", "hammer")


# -- two processes, one index -----------------------------------------------------------------------


class StructWords:
    """Header words accessed with ``struct.pack_into`` / ``unpack_from``: how the ring's indices were
    written before the rule of :mod:`pydla.linux.ring` (only to show what that rule prevents)."""

    _INDEX = struct.Struct("<I")

    def __init__(self, mapping: mmap.mmap) -> None:
        self._m = mapping

    def __getitem__(self, word: int) -> int:
        return int(self._INDEX.unpack_from(self._m, 4 * word)[0])

    def __setitem__(self, word: int, value: int) -> None:
        self._INDEX.pack_into(self._m, 4 * word, value)

    def release(self) -> None:
        pass


def struct_words(mapping: mmap.mmap) -> StructWords:
    return StructWords(mapping)


@dataclass
class HammerResult:
    """What the reading process saw of an index another process kept storing."""

    reads: int  # loads of the index
    changes: int  # loads that saw a larger value than the one before
    regressions: int  # loads that saw a smaller value than one seen before (a torn or stale store)
    zeros: int  # loads that saw 0 after a non-zero value (part of the regressions)
    last: int  # the largest value seen
    seconds: float

    def summary(self) -> str:
        return (f"{self.reads:,} reads in {self.seconds:.1f} s, {self.changes:,} changes seen, "
                f"{self.regressions:,} going back ({self.zeros:,} of them 0), up to {self.last:,}")


_WRITER = """
import importlib, mmap, os, sys, time
from pydla.linux.ring import FLAGS, HEADER_SIZE
module, _, name = sys.argv[3].partition(":")
words = getattr(importlib.import_module(module), name)(mmap.mmap(int(sys.argv[1]), HEADER_SIZE))
word, seconds = int(sys.argv[2]), float(sys.argv[4])
words[FLAGS] = 1  # started
value, end = 1, time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(2000):
        words[word] = value
        value += 1
words[FLAGS] = 2  # done
words.release()
"""


def hammer_index(seconds: float, *, word: int = CQ_TAIL,
                 accessor: str = "pydla.linux.ring:header_words") -> HammerResult:
    """A child process stores 1, 2, 3... into ``word`` of a shared ring header for ``seconds``
    while this one loads it; both reach the header through ``accessor`` ("module:function" of a
    mapping, returning words). Raises DlaError Timeout when the child does not start or end."""
    shared = SharedBuffer(RingLayout(ENTRIES).size, name="pydla-hammer")
    assert shared.mapping is not None
    module, _, name = accessor.partition(":")
    words = getattr(importlib.import_module(module), name)(shared.mapping)
    command = [sys.executable, "-c", _WRITER, str(shared.fd), str(word), accessor, str(seconds)]
    child = subprocess.Popen(command,
                             pass_fds=(shared.fd,))
    try:
        deadline = time.monotonic() + 30.0
        while words[FLAGS] == 0:
            if child.poll() is not None or time.monotonic() > deadline:
                raise DlaError(NvError.Timeout, f"the hammering process did not start (exit {child.poll()})")
            time.sleep(0.001)
        reads = changes = regressions = zeros = 0
        last = 0
        start = time.monotonic()
        while words[FLAGS] == 1:
            for _ in range(2000):
                value = words[word]
                if value > last:
                    last = value
                    changes += 1
                elif value < last:
                    regressions += 1
                    zeros += value == 0
            reads += 2000
            if time.monotonic() - start > seconds + 30.0:
                raise DlaError(NvError.Timeout, "the hammering process did not end")
        elapsed = time.monotonic() - start
        child.wait(timeout=30.0)
        return HammerResult(reads, changes, regressions, zeros, last, elapsed)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        words.release()
        shared.close()
