"""Two processes, one index of a ring header: one stores a growing value as fast as it can, the other
loads it and must never see it go back, nor a 0 after the first store (:func:`hammer_index`). It
holds with :func:`pydla.uapi.ring.header_words` (one aligned 4-byte access each); with
``struct.pack_into`` (:class:`StructWords`, how the indices were written before) the reader sees
zeros and mixed bytes, thousands a second on a 2-core machine. Needs Linux (memfd).

Usage::

    result = hammer_index(1.0)
    assert result.regressions == 0 and result.changes > 100
"""

from __future__ import annotations

import importlib
import mmap
import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

from pydla.errors import DlaError, NvError
from pydla.uapi.ring import CQ_TAIL, FLAGS, RingLayout
from pydla.uapi.ring import ENTRIES as STOP_WORD  # the hammer's reader -> writer: stop
from pydla.uapi.shm import SharedBuffer

RING_ENTRIES = 8


class StructWords:
    """Header words accessed with ``struct.pack_into`` / ``unpack_from``: how the ring's indices were
    written before the rule of :mod:`pydla.uapi.ring` (only to show what that rule prevents)."""

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
from pydla.uapi.ring import ENTRIES as STOP, FLAGS, HEADER_SIZE
module, _, name = sys.argv[3].partition(":")
words = getattr(importlib.import_module(module), name)(mmap.mmap(int(sys.argv[1]), HEADER_SIZE))
word, seconds, cpu = int(sys.argv[2]), float(sys.argv[4]), int(sys.argv[5])
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
words[FLAGS] = 1  # started
value, end = 1, time.monotonic() + seconds
while words[STOP] == 0 and time.monotonic() < end:  # until the reader says stop
    for _ in range(2000):
        words[word] = value
        value += 1
words[FLAGS] = 2  # done
words.release()
"""


def hammer_index(seconds: float, *, word: int = CQ_TAIL, accessor: str = "pydla.uapi.ring:header_words",
                 min_changes: int = 0, max_seconds: float = 30.0) -> HammerResult:
    """A child process stores 1, 2, 3... into ``word`` of a shared ring header while this one loads
    it, for ``seconds`` and then until the loads have seen ``min_changes`` new values (at most
    ``max_seconds``); both reach the header through ``accessor`` ("module:function" of a mapping,
    returning words). With two CPUs or more the two processes are pinned to different ones (and
    this one's affinity restored after), so that they run at the same time whatever else runs.
    Raises DlaError Timeout when the child does not start or end."""
    shared = SharedBuffer(RingLayout(RING_ENTRIES).size, name="pydla-hammer")
    assert shared.mapping is not None
    module, _, name = accessor.partition(":")
    words = getattr(importlib.import_module(module), name)(shared.mapping)
    cpus = sorted(os.sched_getaffinity(0))
    pinned = len(cpus) >= 2
    command = [sys.executable, "-c", _WRITER, str(shared.fd), str(word), accessor, str(max_seconds + 5.0),
               str(cpus[1] if pinned else -1)]
    child = subprocess.Popen(command, pass_fds=(shared.fd,))
    try:
        if pinned:
            os.sched_setaffinity(0, {cpus[0]})
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
            elapsed = time.monotonic() - start
            if elapsed >= max_seconds or (elapsed >= seconds and changes >= min_changes):
                words[STOP_WORD] = 1  # stop
        elapsed = time.monotonic() - start
        child.wait(timeout=30.0)
        return HammerResult(reads, changes, regressions, zeros, last, elapsed)
    finally:
        if pinned:
            os.sched_setaffinity(0, cpus)
        if child.poll() is None:
            child.kill()
            child.wait()
        words.release()
        shared.close()
