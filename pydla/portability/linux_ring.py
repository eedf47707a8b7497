"""The Linux port's side of a submission ring (uAPI 2.4; layout in :mod:`pydla.uapi.ring`).

A prepared task's submit becomes an entry written into memory the daemon maps and one eventfd
write, instead of a SUBMIT_PREPARED ioctl; the daemon's answers (ACCEPTED, then FINISHED when the
job ends) come back through the same memory and a second eventfd. A submit still returns only once
the daemon has accepted or refused the entry, so its errors are raised where the ioctl raised them;
a wait for a post-fence of a ring submission needs no WAIT ioctl when the job ends within
``RING_WAIT_S``. Anything the ring cannot do (a full ring, a broken one, a fence no ring entry
signals, a failed job's message) falls back to the ioctls, which stay the reference.

The header's indices are stored and loaded only through :func:`pydla.uapi.ring.header_words` (one
aligned 4-byte access each: the ring module's rule). When the daemon breaks the ring (flag BROKEN),
each submit still waiting is decided exactly once: if sq_head (final once BROKEN is seen) says the
daemon took the entry, its answer still comes through the ring and is returned as usual; if not, the
daemon will never take it, and the submit goes to the ioctl. A submit never raises for an entry
that was queued, so a caller that retries after an error never runs a job twice.

Usage (inside LinuxPort)::

    ring = ClientRing.open(device)           # None: the daemon has no rings (before uAPI 2.4)
    answer = ring.submit(args, post)          # None: use the ioctl
"""

from __future__ import annotations

import errno
import itertools
import os
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.uapi.ioctl import NVERROR
from pydla.uapi.ring import (
    CQ_HEAD,
    CQ_TAIL,
    CQE,
    FLAGS,
    INDEX_MASK,
    SQ_HEAD,
    SQ_TAIL,
    RingLayout,
    drain,
    header_words,
    kick,
)
from pydla.uapi.shm import SharedBuffer

if TYPE_CHECKING:
    from pydla.portability.linux_handle import DeviceFile, ReachedValue

RING_ENTRIES = 64
RING_WAIT_S = 0.2  # a fence wait looks at the ring this long before it asks the daemon (WAIT)
ACCEPT_SLICE_S = 1.0  # between checks that the daemon is still there, while an entry is not answered
ACCEPT_TIMEOUT_S = 60.0  # an entry the daemon has not answered by then: Timeout, and the ring is dropped
ACCEPTED, FINISHED = int(U.dla_ring_cqe_kind_e.ACCEPTED), int(U.dla_ring_cqe_kind_e.FINISHED)
BROKEN = int(U.dla_ring_flags_e.BROKEN)


class TaskGone(Exception):
    """The daemon dropped the prepared task (ENOENT): prepare it again."""


class ClientRing:
    """One device file's submission ring. Thread-safe: one thread at a time reaps the completion
    queue, the others wait on a condition it notifies."""

    def __init__(self, device: DeviceFile, entries: int = RING_ENTRIES) -> None:
        self.device = device
        self.layout = RingLayout(entries)
        self._shared = SharedBuffer(self.layout.size, name="pydla-ring")
        assert self._shared.mapping is not None
        self._m = self._shared.mapping
        self._words = header_words(self._m)
        flags = os.EFD_CLOEXEC | os.EFD_NONBLOCK
        self.submit_efd = os.eventfd(0, flags)
        self.complete_efd = os.eventfd(0, flags)
        self._cond = threading.Condition(threading.Lock())
        self._reaping = False
        self._sq_tail = 0
        self._cq_head = 0
        self._user_data = itertools.count(1)
        self._in_flight = 0  # entries not answered in full (bounds what the completion queue holds)
        self._answers: dict[int, tuple[int, int, int]] = {}  # user_data -> ACCEPTED (status, task, done)
        self._waiting: set[int] = set()  # user_data whose ACCEPTED a submitter waits for
        self._unfinished: dict[int, list[tuple[ReachedValue, int]]] = {}  # accepted, job not ended
        self.broken = False
        self.broken_by_daemon = False  # BROKEN seen in the header: sq_head is final
        self._lost: str | None = None  # why no answer will be read any more (then broken too)
        self.closed = False
        self._poll = select.poll()
        self._poll.register(self.complete_efd, select.POLLIN)

    @classmethod
    def open(cls, device: DeviceFile) -> ClientRing | None:
        """Set up a ring on ``device``; None when its daemon has none (before uAPI 2.4) or refused."""
        if device.daemon_version[:2] < (2, 4):
            return None
        ring = cls(device)
        try:
            device.ioctl(U.dla_ioctl_e.RING_SETUP, U.dla_ring_setup_t(
                ring_fd=ring._shared.fd, submit_efd=ring.submit_efd, complete_efd=ring.complete_efd,
                entries=ring.layout.entries, ring_bytes=ring.layout.size))
        except DlaError:
            ring.close()
            return None
        ring._shared.close_fd()  # the daemon holds its own reference
        return ring

    def close(self) -> None:
        with self._cond:
            if self.closed:
                return
            self.closed = self.broken = True
            self._cond.notify_all()
        self._words.release()  # before the mapping closes (it cannot while a view exists)
        self._shared.close()
        os.close(self.submit_efd)
        os.close(self.complete_efd)

    # -- submitting ---------------------------------------------------------------------------------

    def submit(self, args: Any, post: list[tuple[ReachedValue, int]]) -> tuple[int, int] | None:
        """Queue ``args`` (a dla_submit_prepared_t); (task_id, completed) once the daemon accepted it,
        None when the ring cannot take it (use the ioctl). Raises the refusal as the ioctl would,
        TaskGone when the daemon no longer holds the prepared task (prepare it again)."""
        sqe = U.dla_ring_sqe_t(prepared=args.prepared, num_pre_fences=args.num_pre_fences,
                               num_post_fences=args.num_post_fences, priority=args.priority,
                               timeout_ms=args.timeout_ms, pre_fences=args.pre_fences,
                               post_fences=args.post_fences)
        with self._cond:
            if self.broken or self._in_flight >= self.layout.entries:
                return None
            user_data = sqe.user_data = next(self._user_data)
            seq = self._sq_tail
            offset = self.layout.sqe_offset(seq)
            raw = bytes(sqe)
            self._m[offset:offset + len(raw)] = raw
            self._sq_tail = (seq + 1) & INDEX_MASK
            self._words[SQ_TAIL] = self._sq_tail  # after the entry: publishes it
            self._in_flight += 1
            self._waiting.add(user_data)
            self._unfinished[user_data] = post
        kick(self.submit_efd)
        answer = self._wait_answer(user_data, seq)
        if answer is None:
            return None
        status, task_id, completed = answer
        if status == errno.ENOENT:
            raise TaskGone()
        if status:
            raise self._refusal(status)
        return task_id, completed

    def _refusal(self, status: int) -> DlaError:
        code = NVERROR.get(status, NvError.IoctlFailed)
        reason = self.device.last_error() or os.strerror(status)
        if not reason.startswith("SUBMIT_PREPARED"):
            reason = f"SUBMIT_PREPARED: {reason}"
        return DlaError(code, f"{self.device.path}: {reason}")

    def _wait_answer(self, user_data: int, seq: int) -> tuple[int, int, int] | None:
        """The daemon's ACCEPTED answer to the entry ``user_data`` written at index ``seq``; None when
        the daemon broke the ring before taking it (it never will: the ioctl is the way, once)."""
        deadline = time.monotonic() + ACCEPT_TIMEOUT_S

        def decided() -> bool:
            return user_data in self._answers or (self.broken_by_daemon and not self._taken(seq))

        while True:
            slice_s = min(ACCEPT_SLICE_S, deadline - time.monotonic())
            self._wait_for(decided, slice_s, through_break=True)
            with self._cond:
                if user_data in self._answers:
                    self._waiting.discard(user_data)
                    return self._answers.pop(user_data)
                if self.closed:
                    raise DlaError(NvError.InvalidState, f"{self.device.path}: the device was closed")
                if self.broken_by_daemon and not self._taken(seq):
                    self._waiting.discard(user_data)
                    self._unfinished.pop(user_data, None)
                    self._in_flight -= 1
                    return None
                if self._lost is not None:
                    # The entry may be queued and no answer will be read: the ioctl cannot be tried
                    # either (it could run the job twice). Say so.
                    self._waiting.discard(user_data)
                    self._unfinished.pop(user_data, None)
                    raise DlaError(NvError.ResourceError, f"{self.device.path}: SUBMIT_PREPARED: "
                                                          f"{self._lost}; whether the ring entry was "
                                                          "queued is unknown")
            # Taken and not yet answered (a broken ring is answered too): the daemon is still there?
            self.device.param(U.dla_param_e.DAEMON_PID)  # raises Disconnected when the daemon is gone
            if time.monotonic() >= deadline:
                why = f"the daemon did not answer a ring entry within {ACCEPT_TIMEOUT_S:.0f} s"
                with self._cond:
                    self._lose_locked(why)
                raise DlaError(NvError.Timeout, f"{self.device.path}: SUBMIT_PREPARED: {why}")

    def _taken(self, seq: int) -> bool:
        """Whether the daemon has taken the entry at index ``seq`` (sq_head is past it); under the
        lock. The daemon's sq_head is believed only between this side's sq_tail and one ring back."""
        head = self._words[SQ_HEAD]
        if (self._sq_tail - head) & INDEX_MASK > self.layout.entries:
            self._lose_locked(f"the daemon's sq_head {head} is out of range (sq_tail {self._sq_tail})")
            return True
        return 0 < (head - seq) & INDEX_MASK <= self.layout.entries

    # -- waiting ------------------------------------------------------------------------------------

    def wait_fence(self, semaphore: ReachedValue, value: int, timeout_s: float) -> bool:
        """True once a ring job that signals ``semaphore`` to ``value`` or more has ended well and
        the value is known reached; False when no ring job covers it, it failed, or ``timeout_s``
        passed (the caller then asks the daemon)."""
        def covering() -> bool:
            return any(s is semaphore and v >= value for posts in self._unfinished.values() for s, v in posts)

        with self._cond:
            if not covering():
                return semaphore.reached >= value
        self._wait_for(lambda: semaphore.reached >= value or not covering(), timeout_s)
        return semaphore.reached >= value

    def _wait_for(self, done: Callable[[], bool], timeout_s: float, *, through_break: bool = False) -> bool:
        """Reap answers until ``done()`` (under the lock) or ``timeout_s`` passes or the ring breaks
        (``through_break``: or its answers stop, as a broken ring's still come)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while True:
                self._reap_locked()
                if done():
                    return True
                left = deadline - time.monotonic()
                stop = self.closed or self._lost is not None if through_break else self.broken
                if stop or left <= 0:
                    return False
                if self._reaping:
                    self._cond.wait(left)
                    continue
                self._reaping = True
                self._cond.release()
                try:
                    self._poll.poll(left * 1000)
                    drain(self.complete_efd)  # before reaping: a later answer kicks again
                finally:
                    self._cond.acquire()
                    self._reaping = False
                    self._cond.notify_all()

    def _reap_locked(self) -> None:
        if self.closed or self._lost is not None:
            return
        m, words = self._m, self._words
        if not self.broken_by_daemon and words[FLAGS] & BROKEN:
            self.broken_by_daemon = True  # loaded before sq_head is: sq_head is final now
            self._broken_locked()
        tail = words[CQ_TAIL]
        count = (tail - self._cq_head) & INDEX_MASK
        if count > self.layout.cq_entries:
            self._lose_locked(f"the daemon's cq_tail {tail} is out of range (cq_head {self._cq_head})")
            return
        for _ in range(count):
            answer = CQE.unpack_from(m, self.layout.cqe_offset(self._cq_head))
            user_data, task_id, kind, status, completed = answer
            self._cq_head = (self._cq_head + 1) & INDEX_MASK
            if kind == ACCEPTED:
                if user_data in self._waiting:
                    self._answers[user_data] = (status, task_id, completed)
                if status:  # refused: no FINISHED follows
                    self._unfinished.pop(user_data, None)
                    self._in_flight -= 1
            elif kind == FINISHED:
                posts = self._unfinished.pop(user_data, None)
                if posts is not None and status == 0:
                    for sem, value in posts:
                        sem.note_reached(value)
                self._in_flight -= 1
        if count:
            words[CQ_HEAD] = self._cq_head
            self._cond.notify_all()

    def _broken_locked(self) -> None:
        self.broken = True
        self._unfinished.clear()
        self._cond.notify_all()

    def _lose_locked(self, why: str) -> None:
        self._lost = why
        self._broken_locked()
