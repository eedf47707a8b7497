"""Fuzzing the submission ring (uAPI 2.4) of the Linux port's daemon, in two ways.

- :func:`hammer_index` (in :mod:`pydla.testing.ring_hammer`): two processes hammer one index of a
  ring header: one stores a growing value as fast as it can, the other loads it and must never see
  it go back, nor a 0 after the first store. It holds with :func:`pydla.uapi.ring.header_words` (one
  aligned 4-byte access each); with ``struct.pack_into`` (:class:`StructWords`, how the indices were
  written before) the reader sees zeros and mixed bytes, thousands a second on a 2-core machine.
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

import contextlib
import ctypes
import logging
import os
import select
import struct
import subprocess
import sys
import time
import weakref
from typing import Any

import numpy as np

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.testing.fuzz import Target

# The hammer of one index lives in ring_hammer; its names stay importable from here.
from pydla.testing.ring_hammer import RING_ENTRIES, HammerResult, StructWords, hammer_index, struct_words
from pydla.uapi.ring import (
    CQ_HEAD,
    CQ_TAIL,
    CQE,
    FLAGS,
    INDEX_MASK,
    SQ_TAIL,
    RingLayout,
    header_words,
)
from pydla.uapi.shm import SharedBuffer

__all__ = ["ANSWER_TIMEOUT_S", "KINDS", "RECORD", "RING_ENTRIES", "SEEDS", "SETTLE_TIMEOUT_S", "HammerResult",
           "StructWords", "hammer_index", "ring_target", "struct_words"]

ANSWER_TIMEOUT_S = 5.0  # the other client's entry must be answered (and its job end) within this
SETTLE_TIMEOUT_S = 5.0  # the daemon must have read or refused the hostile ring within this
RECORD = struct.Struct("<BBHI")  # one hostile action: kind, word or slot, a 16-bit field, a value
#: What a record does, by its kind modulo 7 (see :func:`ring_target`).
KINDS = ("store", "entry", "kick", "hammer", "poke", "reap", "fence")


# -- a hostile client's ring, served by a daemon -----------------------------------------------------

#: The hostile client process: makes a ring (``new``: prints its three descriptor numbers), then
#: applies a case's records to it (``run``), stores and kicks as fast as Python goes.
_HOSTILE = """
import os, sys, time
from pydla.deviceapi.generated import dla_uapi as U
from pydla.uapi.ring import CQ_HEAD, CQ_TAIL, HEADER_SIZE, RingLayout, header_words
from pydla.uapi.shm import SharedBuffer
from pydla.testing.fuzz_ring import RECORD
layout = RingLayout(int(sys.argv[1]))
ring = None

def close():
    global ring
    if ring is not None:
        words, shm, s, c = ring
        words.release(); shm.close(); os.close(s); os.close(c)
        ring = None

def entry(m, slot):
    off = layout.sqe_offset(slot)
    return U.dla_ring_sqe_t.from_buffer_copy(m, off), off

def run(own, good_prep, good_sync, data):
    words, shm, s, c = ring
    m = shm.mapping
    names = {0xFFFF: own, 0xFFFE: good_prep}
    for i in range(0, len(data) - RECORD.size + 1, RECORD.size):
        kind, a, b, v = RECORD.unpack_from(data, i)
        kind %= 7
        if kind == 0:
            words[a % 16] = v
        elif kind == 1:
            sqe = U.dla_ring_sqe_t(user_data=v, prepared=names.get(b, b), timeout_ms=2000)
            off = layout.sqe_offset(a)
            m[off:off + len(bytes(sqe))] = bytes(sqe)
        elif kind == 2:
            os.eventfd_write(s, 1)
        elif kind == 3:
            os.eventfd_write(s, 1)
            for j in range(b % 2048 + 1):
                words[a % 16] = (v + j) & 0xFFFFFFFF
        elif kind == 4:
            off = HEADER_SIZE + ((a << 16) | b) % (layout.size - HEADER_SIZE - 3)
            m[off:off + 4] = v.to_bytes(4, "little")
        elif kind == 5:
            time.sleep((b % 1000) / 1e6)
            words[CQ_HEAD] = words[CQ_TAIL]
        else:
            sqe, off = entry(m, a)
            sqe.num_post_fences = 1
            sqe.post_fences[0].sync = good_sync if b == 0xFFFE else b
            sqe.post_fences[0].value = v
            m[off:off + len(bytes(sqe))] = bytes(sqe)
    os.eventfd_write(s, 1)

for line in sys.stdin:
    cmd, *rest = line.split()
    if cmd == "new":
        close()
        shm = SharedBuffer(layout.size, name="pydla-hostile-ring")
        s, c = os.eventfd(0, os.EFD_NONBLOCK), os.eventfd(0, os.EFD_NONBLOCK)
        ring = (header_words(shm.mapping), shm, s, c)
        print(shm.fd, s, c, flush=True)
    elif cmd == "run":
        run(int(rest[0]), int(rest[1]), int(rest[2]), bytes.fromhex(rest[3]) if len(rest) > 3 else b"")
        print("done", flush=True)
    else:
        break
close()
"""

OWN, GOOD_PREPARED, GOOD_SYNC = 0xFFFF, 0xFFFE, 0xFFFE  # markers in records: the real ids per case


def _records(*actions: tuple[str, int, int, int]) -> bytes:
    return b"".join(RECORD.pack(KINDS.index(kind), a, b, v) for kind, a, b, v in actions)

#: Valid and typical behaviours to mutate: entries of its own task, read answers, and a few
#: classic rule breaks (another client's task and sync, an index hammered through every value).
SEEDS = [
    _records(("entry", 0, OWN, 1), ("store", SQ_TAIL, 0, 1), ("kick", 0, 0, 0), ("reap", 0, 500, 0)),
    _records(*[("entry", i, OWN, 10 + i) for i in range(4)], ("store", SQ_TAIL, 0, 4),
             ("kick", 0, 0, 0), ("reap", 0, 900, 0), ("entry", 4, OWN, 20), ("store", SQ_TAIL, 0, 5),
             ("reap", 0, 900, 0)),
    _records(("entry", 0, GOOD_PREPARED, 7), ("fence", 0, GOOD_SYNC, 1), ("store", SQ_TAIL, 0, 1),
             ("reap", 0, 500, 0)),
    _records(("entry", 0, OWN, 1), ("entry", 1, OWN, 2), ("hammer", SQ_TAIL, 2000, 0), ("reap", 0, 0, 0)),
    _records(("entry", 0, OWN, 1), ("store", SQ_TAIL, 0, 1), ("hammer", CQ_HEAD, 2000, 0)),
    _records(*[("entry", i % RING_ENTRIES, OWN, i) for i in range(12)], ("store", SQ_TAIL, 0, 8),
             ("kick", 0, 0, 0), ("store", SQ_TAIL, 0, 16), ("kick", 0, 0, 0), ("poke", 0, 12, 9)),
]


class _ErrorLog(logging.Handler):
    """What the daemon logged at ERROR or above (a bug it caught: the campaign reports it)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage() + (f": {record.exc_info[1]!r}" if record.exc_info else ""))


class _RawRing:
    """A well-behaved client's ring, written by hand as :mod:`pydla.uapi.ring` lays it out."""

    def __init__(self, daemon: Any, client: Any) -> None:
        self.layout = RingLayout(RING_ENTRIES)
        self.shm = SharedBuffer(self.layout.size, name="pydla-good-ring")
        assert self.shm.mapping is not None
        self.words = header_words(self.shm.mapping)
        self.submit_efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.complete_efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.sq_tail = self.cq_head = 0
        _call(daemon, client, os.getpid(), U.dla_ioctl_e.RING_SETUP, U.dla_ring_setup_t(
            ring_fd=self.shm.fd, submit_efd=self.submit_efd, complete_efd=self.complete_efd,
            entries=RING_ENTRIES, ring_bytes=self.layout.size))

    def run(self, prepared: int, user_data: int) -> list[tuple[int, int, int, int, int]]:
        """Submit ``prepared`` and wait for its two answers (ACCEPTED, FINISHED)."""
        assert self.shm.mapping is not None
        sqe = U.dla_ring_sqe_t(user_data=user_data, prepared=prepared,
                               timeout_ms=int(ANSWER_TIMEOUT_S * 1000))
        off = self.layout.sqe_offset(self.sq_tail)
        self.shm.mapping[off:off + len(bytes(sqe))] = bytes(sqe)
        self.sq_tail = (self.sq_tail + 1) & INDEX_MASK
        self.words[SQ_TAIL] = self.sq_tail
        os.eventfd_write(self.submit_efd, 1)
        answers: list[tuple[int, int, int, int, int]] = []
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        poller = select.poll()
        poller.register(self.complete_efd, select.POLLIN)
        while len(answers) < 2:
            tail = self.words[CQ_TAIL]
            while self.cq_head != tail:
                answers.append(CQE.unpack_from(self.shm.mapping, self.layout.cqe_offset(self.cq_head)))
                self.cq_head = (self.cq_head + 1) & INDEX_MASK
            self.words[CQ_HEAD] = self.cq_head
            left = deadline - time.monotonic()
            if len(answers) >= 2 or left <= 0 or self.words[FLAGS]:
                break
            poller.poll(left * 1000)
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self.complete_efd)
        return answers

    def close(self) -> None:
        self.words.release()
        self.shm.close()
        os.close(self.submit_efd)
        os.close(self.complete_efd)


def _call(daemon: Any, client: Any, pid: int, nr: int, args: Any) -> Any:
    """An ioctl of ``client`` (as process ``pid``) to the daemon, in this process; its answer."""
    from pydla.linux.fuse_context import RequestContext
    from pydla.uapi.ioctl import COMMANDS

    _, out = daemon.ioctl(client, RequestContext(1, 0, 2, 0, 0, pid), COMMANDS[nr], bytes(args))
    return type(args).from_buffer_copy(out)


class _Relu:
    """y = relu(x) on SDP: a task's buffers in this process's memfds, prepared for any client."""

    def __init__(self) -> None:
        from pydla.loadable.taskbuilder import DESCRIPTORS, TaskBuilder

        tb = TaskBuilder()
        tb.sdp(tb.cube("x", (1, 2, 4)), tb.cube("y", (1, 2, 4)), act="relu")
        built = tb.build()
        self.buffers = {name: SharedBuffer(max(size, 64), name=f"pydla-fuzz-{name}")
                        for name, size in built.buffers.items()}
        self.buffers[DESCRIPTORS].view[:len(built.descriptors)] = built.descriptors
        self.x = np.array([-2, -1, 0, 1, 2, 3, -4, 5], np.float32)
        self.buffers["x"].view[:32] = self.x.tobytes()
        self.addresses = built.addresses

    def prepare(self, daemon: Any, client: Any) -> int:
        pid = os.getpid()
        handles = {name: _call(daemon, client, pid, U.dla_ioctl_e.BO_CREATE,
                               U.dla_bo_create_t(size=buf.size, fd=buf.fd)).handle
                   for name, buf in self.buffers.items()}
        entries = (U.dla_address_t * len(self.addresses))(
            *[U.dla_address_t(handle=handles[name], offset=off) for name, off in self.addresses])
        return int(_call(daemon, client, pid, U.dla_ioctl_e.PREPARE, U.dla_prepare_t(
            addresses=ctypes.addressof(entries), num_addresses=len(self.addresses))).prepared)

    def output_right(self) -> bool:
        y = np.frombuffer(self.buffers["y"].view[:32], np.float32)
        return bool(np.array_equal(y, np.maximum(self.x, 0)))


class _RingFuzz:
    """The daemon, the well-behaved client and the hostile client's process of :func:`ring_target`."""

    def __init__(self) -> None:
        from pydla.linux.daemon import KmdDaemon

        self.daemon = KmdDaemon("full", max_wait_ms=50)
        self.errors = _ErrorLog()
        logging.getLogger("pydla").addHandler(self.errors)  # the daemon, its KMDs and devices
        self.relu = _Relu()
        self.good: Any = None
        self.good_ring: _RawRing | None = None
        self.good_runs = 0
        self.hostile = subprocess.Popen([sys.executable, "-c", _HOSTILE, str(RING_ENTRIES)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._fresh_good_client()

    def _fresh_good_client(self) -> None:
        if self.good is not None:
            self.daemon.release(self.good)
        if self.good_ring is not None:
            self.good_ring.close()
        self.good = self._client(os.getpid())
        self.good_prepared = self.relu.prepare(self.daemon, self.good)
        self.good_sync = int(_call(self.daemon, self.good, os.getpid(), U.dla_ioctl_e.SYNC_CREATE,
                                   U.dla_sync_create_t(initial=0)).sync)
        self.good_ring = _RawRing(self.daemon, self.good)
        self.good_runs = 0

    def _client(self, pid: int) -> Any:
        client = self.daemon.open_client(0, pid)
        _call(self.daemon, client, pid, U.dla_ioctl_e.HANDSHAKE, U.dla_handshake_t(
            major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2], layout_hash64=U.LAYOUT_HASH64))
        return client

    def _ask(self, line: str) -> str:
        """A command to the hostile process; its answer line (RuntimeError when it does not answer)."""
        stdin, stdout = self.hostile.stdin, self.hostile.stdout
        assert stdin is not None and stdout is not None
        stdin.write(line + "\n")
        stdin.flush()
        ready, _, _ = select.select([stdout], [], [], 30.0)
        answer = stdout.readline() if ready else ""
        if not answer:
            raise RuntimeError(f"the hostile client process did not answer {line.split()[0]!r} "
                               f"(exit {self.hostile.poll()})")
        return answer.strip()

    def check(self, data: bytes) -> None:
        self.errors.messages.clear()
        ring_fd, submit_efd, complete_efd = map(int, self._ask("new").split())
        pid = self.hostile.pid
        hostile = self._client(pid)
        try:
            own = self.relu.prepare(self.daemon, hostile)
            _call(self.daemon, hostile, pid, U.dla_ioctl_e.RING_SETUP, U.dla_ring_setup_t(
                ring_fd=ring_fd, submit_efd=submit_efd, complete_efd=complete_efd, entries=RING_ENTRIES,
                ring_bytes=RingLayout(RING_ENTRIES).size))
            served = hostile.ring
            self._ask(f"run {own} {self.good_prepared} {self.good_sync} {data.hex()}")
            self._settle(served)
            self._check_the_good_client()
            _call(self.daemon, hostile, pid, U.dla_ioctl_e.GET_PARAM,  # its file still answers
                  U.dla_get_param_t(param=int(U.dla_param_e.NUM_DEVICES)))
            broken = served.broken  # before the release, which ends the ring too
        finally:
            self.daemon.release(hostile)
        if self.errors.messages:
            raise RuntimeError(f"the daemon logged an error: {self.errors.messages[0]}")
        if broken:
            if served.why_broken == "the daemon failed serving it":
                raise RuntimeError("the daemon failed serving a ring (a bug it caught)")
            raise DlaError(NvError.BadParameter,
                           f"the daemon broke the hostile client's ring: {served.why_broken}")

    @staticmethod
    def _settle(served: Any) -> None:
        """Wait until the daemon has read the hostile ring up to its sq_tail, or broken it."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not served.broken and served.sq_head != served.words[SQ_TAIL]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon neither read nor refused a ring within {SETTLE_TIMEOUT_S} s "
                                   f"(sq_head {served.sq_head}, sq_tail {served.words[SQ_TAIL]})")
            time.sleep(0.0005)

    def _check_the_good_client(self) -> None:
        """The other client's job is accepted, runs and ends well, and nobody ran its task but it."""
        assert self.good_ring is not None
        self.relu.buffers["y"].view[:32] = bytes(32)
        self.good_runs += 1
        answers = self.good_ring.run(self.good_prepared, self.good_runs)
        kinds = [(a[2], a[3]) for a in answers]
        accepted, finished = int(U.dla_ring_cqe_kind_e.ACCEPTED), int(U.dla_ring_cqe_kind_e.FINISHED)
        if kinds != [(accepted, 0), (finished, 0)] or not self.relu.output_right():
            self._fresh_good_client()
            raise RuntimeError(f"another client's ring job was not answered and done right within "
                               f"{ANSWER_TIMEOUT_S} s (answers {kinds})")
        _, clients = self.daemon.jobs.snapshot()
        submitted = clients.get(self.good, {}).get("submitted", 0)
        if submitted != self.good_runs:
            self._fresh_good_client()
            raise RuntimeError(f"the other client's task ran {submitted} times for {self.good_runs} submits")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ask("quit")
        if self.hostile.poll() is None:
            self.hostile.kill()
        self.hostile.wait()
        logging.getLogger("pydla").removeHandler(self.errors)
        if self.good_ring is not None:
            self.good_ring.close()
        self.daemon.close()


def ring_target() -> Target:
    """The daemon's ring thread against a hostile client process (see the module docstring). An input
    is a list of 8-byte records (kind, word or slot, a 16-bit field, a 32-bit value): store a header
    word, write an entry (of its own task, of the other client's, or any id), hammer a word with
    2,048 values, poke a u32 anywhere past the header, read the answers, set a post-fence; the ring
    is kicked after the last. Linux only; the process and the daemon end when the target is
    collected or at exit."""
    fuzz = _RingFuzz()
    target = Target("ring", list(SEEDS), fuzz.check)
    weakref.finalize(target, fuzz.close)
    return target
