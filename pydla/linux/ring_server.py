"""The daemon's side of submission rings (uAPI 2.4, RING_SETUP; layout in :mod:`pydla.uapi.ring`).

One thread serves every client's ring: it sleeps in epoll on the rings' submit eventfds, takes what
each ready ring holds (a few entries per ring per turn, so that one busy client cannot starve the
others), queues each entry as SUBMIT_PREPARED would, and answers it in the ring's completion queue:
ACCEPTED at once, FINISHED when the job ends (from whichever thread ends it). Everything read from the
ring is checked as an ioctl's arguments are: the daemon keeps its own indices and never trusts the
client's beyond one bounds check; the header's words are read and written only through
:func:`pydla.uapi.ring.header_words` (one aligned 4-byte access each: the ring module's rule). A
client that breaks the ring's rules (an index out of range, a completion queue it does not empty)
loses its ring (header flag BROKEN) and keeps its file.

A broken ring is answered exactly once, as the ioctls would be: the daemon takes no entry from it
after setting BROKEN (an entry is taken, and sq_head published, under the ring's lock, which the
break holds too), and still answers every entry it took (ACCEPTED, then FINISHED) while its
completion queue has room. So a client that sees BROKEN knows from sq_head which of its entries
were taken (their answers come) and which were not (it submits those with the ioctl): none is lost
and none runs twice.

Usage::

    server = RingServer(submit)              # submit(client, sqe, on_done) -> Job; raises FuseError
    server.add(ServedRing(client, mapping, layout, submit_efd, complete_efd))
    ...
    server.close()
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import select
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError
from pydla.linux.fuse_context import FuseError
from pydla.linux.process_memory import take_process_fd
from pydla.uapi.ioctl import ERRNO
from pydla.uapi.ring import (
    CQ_HEAD,
    CQ_TAIL,
    CQE,
    ENTRIES,
    FLAGS,
    INDEX_MASK,
    MAX_ENTRIES,
    MIN_ENTRIES,
    SQ_HEAD,
    SQ_TAIL,
    RingLayout,
    drain,
    header_words,
    is_eventfd,
    kick,
    valid_entries,
)
from pydla.uapi.shm import check_shared_fd

log = logging.getLogger("pydla.linux.ring")

TURN = 8  # entries taken from one ring before the next ring's turn
ACCEPTED, FINISHED = int(U.dla_ring_cqe_kind_e.ACCEPTED), int(U.dla_ring_cqe_kind_e.FINISHED)
BROKEN = int(U.dla_ring_flags_e.BROKEN)

#: How the daemon queues one entry: (client, entry, on_done) -> the KMD's job. Raises FuseError
#: or DlaError for an entry it refuses, having recorded the reason as the client's LAST_ERROR.
Submit = Callable[[Any, Any, Callable[[Any], None]], Any]


class ServedRing:
    """One client's ring, as the daemon holds it. The ring thread alone reads the submission queue
    and closes the mapping; completions may be written from any thread, under ``lock``."""

    why_broken = ""

    def __init__(self, client: Any, mapping: mmap.mmap, layout: RingLayout, submit_efd: int,
                 complete_efd: int) -> None:
        self.client, self.mapping, self.layout = client, mapping, layout
        self.words = header_words(mapping)
        self.submit_efd, self.complete_efd = submit_efd, complete_efd
        self.lock = threading.Lock()
        self.sq_head = 0  # the daemon's own copies: never read back from the ring
        self.cq_tail = 0
        self.unfinished = 0  # accepted entries whose job has not ended
        self.closed = False
        self.broken = False  # no entry is taken any more; the answers owed are still written
        self.detached = False  # the client closed its file: nothing is written any more
        self.words[ENTRIES] = layout.entries
        for word in (SQ_HEAD, CQ_TAIL, FLAGS):
            self.words[word] = 0

    def take(self) -> Any | None:
        """The next submission entry (a copy), its sq_head published; None once the ring is broken
        (the caller has checked that sq_tail is past sq_head). Under the lock, so that a break
        comes either before an entry is taken or after sq_head says that it was."""
        with self.lock:
            if self.broken or self.closed:
                return None
            sqe = U.dla_ring_sqe_t.from_buffer_copy(self.mapping, self.layout.sqe_offset(self.sq_head))
            self.sq_head = (self.sq_head + 1) & INDEX_MASK
            self.words[SQ_HEAD] = self.sq_head
            return sqe

    def post(self, user_data: int, task_id: int, kind: int, status: int, completed: int = 0, *,
             wake: bool = False) -> bool:
        """Write one completion entry, also into a broken ring (the answers the daemon owes for the
        entries it took), and kick the client if ``wake``; False when nothing was written: the file
        is closed, or the completion queue is full (which breaks the ring)."""
        with self.lock:
            if self.closed or self.detached:
                return False
            if kind == FINISHED:
                self.unfinished -= 1
            words = self.words
            used = (self.cq_tail - words[CQ_HEAD]) & INDEX_MASK
            if used >= self.layout.cq_entries:
                self._break_locked(f"its completion queue is full ({used} entries unread)")
                return False
            CQE.pack_into(self.mapping, self.layout.cqe_offset(self.cq_tail), user_data, task_id, kind,
                          status, completed)
            self.cq_tail = (self.cq_tail + 1) & INDEX_MASK
            words[CQ_TAIL] = self.cq_tail  # after the entry: publishes it
            if wake:  # under the lock: the ring thread closes the eventfd under it too
                kick(self.complete_efd)
            return True

    def wake(self) -> None:
        """Kick the client (unless its ring was closed: its eventfd number may be another file's)."""
        with self.lock:
            if not self.closed:
                kick(self.complete_efd)

    def break_ring(self, why: str) -> None:
        with self.lock:
            self._break_locked(why)

    def _break_locked(self, why: str) -> None:
        if self.broken or self.closed or self.detached:
            return
        self.broken = True
        self.why_broken = why
        log.warning("client %d broke its submission ring (%s): it goes on with ioctls",
                    self.client.pid, why)
        self.words[FLAGS] = BROKEN  # after every sq_head this ring publishes (take() holds the lock)
        kick(self.complete_efd)

    def close_locked(self) -> None:
        """Under ``lock``, from the ring thread: release the mapping and the descriptors."""
        self.closed = True
        self.words.release()  # an mmap cannot close while a view of it exists
        self.mapping.close()
        os.close(self.submit_efd)
        os.close(self.complete_efd)


class RingServer:
    """The thread that serves every ring (started with the first one)."""

    def __init__(self, submit: Submit) -> None:
        self._submit = submit
        self._lock = threading.Lock()
        self._epoll = select.epoll()
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._epoll.register(self._wake, select.EPOLLIN)
        self._rings: dict[int, ServedRing] = {}  # submit eventfd -> ring
        self._retire: list[ServedRing] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ident = -1

    def add(self, ring: ServedRing) -> None:
        with self._lock:
            if self._stopping:
                raise FuseError(errno.ESHUTDOWN, "RING_SETUP: the daemon is stopping")
            self._rings[ring.submit_efd] = ring
            # Edge-triggered: a kick is reported once, so the ring thread never reads the eventfd
            # back (one syscall, and one release of the GIL, less per wake-up). It reads sq_tail
            # after the report, and an entry published later comes with a kick of its own.
            self._epoll.register(ring.submit_efd, select.EPOLLIN | select.EPOLLET)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="pydla-rings", daemon=True)
                self._thread.start()
        with ring.lock:  # a release may have closed it meanwhile (and its number be another file's)
            if not ring.closed:
                kick(ring.submit_efd)  # entries written before the setup answered are taken now

    def remove(self, ring: ServedRing) -> None:
        """The client closed its file: its ring is closed by the ring thread (or here, if none runs)."""
        with ring.lock:
            if ring.closed:
                return
            ring.broken = ring.detached = True  # no more entries or answers; the ring thread unmaps it
        with self._lock:
            if self._rings.pop(ring.submit_efd, None) is None:
                return
            self._epoll.unregister(ring.submit_efd)
            self._retire.append(ring)
        kick(self._wake)
        if self._thread is None:
            self._close_retired()

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            rings, self._rings = list(self._rings.values()), {}
            self._retire.extend(rings)
            thread = self._thread
        kick(self._wake)
        if thread is not None:
            thread.join(timeout=10)
        self._close_retired()
        self._epoll.close()
        os.close(self._wake)

    def _close_retired(self) -> None:
        with self._lock:
            retire, self._retire = self._retire, []
        for ring in retire:
            with ring.lock:
                if not ring.closed:
                    ring.close_locked()

    # -- the ring thread ----------------------------------------------------------------------------

    def _serve(self) -> None:
        self._ident = threading.get_ident()
        ready: deque[ServedRing] = deque()
        while not self._stopping:
            try:
                events = self._epoll.poll(1.0 if not ready else 0)
            except InterruptedError:
                continue
            with self._lock:
                for fd, _ in events:
                    if fd == self._wake:
                        drain(fd)
                        continue
                    ring = self._rings.get(fd)
                    if ring is not None and ring not in ready:
                        ready.append(ring)
                retire = bool(self._retire)
            if retire:
                ready = deque(r for r in ready if not r.detached)
                self._close_retired()
            answered: list[ServedRing] = []
            for _ in range(len(ready)):
                ring = ready.popleft()
                try:
                    more = self._take(ring)
                except Exception:  # a bug here must not stop every client's ring
                    log.exception("serving the ring of client %d", ring.client.pid)
                    ring.break_ring("the daemon failed serving it")
                    more = False
                answered.append(ring)
                if more:
                    ready.append(ring)
            for ring in answered:
                ring.wake()
        self._close_retired()

    def _take(self, ring: ServedRing) -> bool:
        """Queue up to TURN entries of ``ring``; True if it holds more."""
        if ring.broken or ring.closed:
            return False
        entries = ring.layout.entries
        avail = (ring.words[SQ_TAIL] - ring.sq_head) & INDEX_MASK
        if avail > entries:
            ring.break_ring(f"sq_tail is {avail} entries past sq_head, the ring holds {entries}")
            return False
        for _ in range(min(avail, TURN)):
            sqe = ring.take()
            if sqe is None:
                return False
            self._queue(ring, sqe)
        return bool(avail > TURN)

    def _queue(self, ring: ServedRing, sqe: Any) -> None:
        user_data = int(sqe.user_data)
        with ring.lock:
            full = ring.unfinished >= ring.layout.entries
            if not full:
                ring.unfinished += 1  # counted before the job can end (on_done may run inside submit)
        if full:
            ring.client.last_error = (f"SUBMIT_PREPARED (ring): {ring.layout.entries} accepted entries are "
                                      "unfinished, the ring's limit")
            ring.post(user_data, 0, ACCEPTED, errno.EAGAIN)
            return

        # The job can end before submit returns here (inside it, or on another thread while this one
        # waits for the CPU): its FINISHED is then held until ACCEPTED is written (the order the
        # client is promised; the ring fuzz target found FINISHED first in 1 of 10,000 cases).
        order: dict[str, Any] = {"accepted": False, "held": None}

        def on_done(job: Any) -> None:
            status = 0 if job.error is None else int(job.error.code)
            with ring.lock:
                if not order["accepted"]:
                    order["held"] = (job.job_id, status)
                    return
            # From another thread (the job's end) it kicks at once; the ring thread kicks once per turn.
            ring.post(user_data, job.job_id, FINISHED, status, wake=threading.get_ident() != self._ident)

        try:
            job = self._submit(ring.client, sqe, on_done)
        except Exception as e:
            with ring.lock:
                ring.unfinished -= 1
            if isinstance(e, FuseError):
                code = e.errno
            elif isinstance(e, DlaError):
                code = ERRNO.get(e.code, errno.EIO)
            else:  # a bug: answered EIO, as the FUSE server answers an ioctl whose handler raised
                log.exception("queueing a ring entry of client %d", ring.client.pid)
                code = errno.EIO
            ring.post(user_data, 0, ACCEPTED, code)
            return
        ring.post(user_data, job.job_id, ACCEPTED, 0, int(job.signalled))
        with ring.lock:
            order["accepted"] = True
            held = order["held"]
        if held is not None:
            ring.post(user_data, held[0], FINISHED, held[1])


def set_up_ring(rings: RingServer, lock: threading.Lock, client: Any, pid: int, a: Any) -> None:
    """RING_SETUP for ``client`` (its ``ring`` and ``closed`` are guarded by the daemon's ``lock``):
    check the arguments ``a``, take the ring memory and eventfds from process ``pid``, and serve the
    ring; FuseError with the reason otherwise."""
    if not valid_entries(int(a.entries)):
        raise FuseError(errno.EINVAL, f"RING_SETUP: entries {a.entries} (a power of two in "
                                      f"{MIN_ENTRIES}..{MAX_ENTRIES})")
    layout = RingLayout(int(a.entries))
    if int(a.ring_bytes) < layout.size:
        raise FuseError(errno.EINVAL, f"RING_SETUP: ring_bytes {a.ring_bytes}, a ring of {a.entries} "
                                      f"entries takes {layout.size}")
    with lock:
        if client.ring is not None:
            raise FuseError(errno.EBUSY, "RING_SETUP: this file has a ring already")
        client.ring = "setting up"
    taken: list[int] = []
    try:
        for name in ("ring_fd", "submit_efd", "complete_efd"):
            number = int(getattr(a, name))
            try:
                taken.append(take_process_fd(pid, number))
            except OSError as e:
                raise FuseError(errno.EBADF, f"RING_SETUP: {name} {number} of process {pid}: "
                                             f"{os.strerror(e.errno or 0)}") from None
        ring_fd, submit_efd, complete_efd = taken
        try:
            check_shared_fd(ring_fd, layout.size)
        except ValueError as e:
            raise FuseError(errno.EINVAL, f"RING_SETUP: ring_fd {a.ring_fd}: {e}") from None
        for name, fd in (("submit_efd", submit_efd), ("complete_efd", complete_efd)):
            if not is_eventfd(fd):
                raise FuseError(errno.EINVAL, f"RING_SETUP: {name} {getattr(a, name)} is not an eventfd")
        mapping = mmap.mmap(ring_fd, layout.size)
        os.close(ring_fd)
        taken.remove(ring_fd)
        ring = ServedRing(client, mapping, layout, submit_efd, complete_efd)
        taken.clear()
        with lock:
            client.ring = ring
            if client.closed:  # closed meanwhile: release() did not see this ring
                client.ring = None
                ring.close_locked()
                raise FuseError(errno.EBADF, "RING_SETUP: the file is closed")
        rings.add(ring)
    except BaseException:
        for fd in taken:
            os.close(fd)
        with lock:
            if client.ring == "setting up":
                client.ring = None
        raise
