"""The driver's lock: reentrant, and it knows which thread holds it.

The driver takes one lock around its state (contexts, queues, the jobs in flight). An interrupt may
reach the driver on a thread that is already inside it, holding that lock: headed, a doorbell the
driver rings runs an idle firmware in the ringing thread, whose interrupt then comes back on it
(:meth:`pydla.kmd.bottom_half.BottomHalf.irq_thread`). That thread must not run the driver's bottom half
re-entrantly in the middle of its own work; :meth:`OwnedLock.held_by_caller` tells it so, from an
explicit record of the owner rather than the lock's private state.

Usage::

    lock = OwnedLock()
    with lock:
        assert lock.held_by_caller()
"""

from __future__ import annotations

import threading
from threading import get_ident


class OwnedLock:
    """A reentrant lock that records its owner (see the module docstring). ``with`` costs four Python
    calls more than a bare RLock's: a headed driver takes it (it asks), a headless one an RLock."""

    __slots__ = ("_acquire", "_depth", "_owner", "_release")

    def __init__(self) -> None:
        lock = threading.RLock()
        self._acquire, self._release = lock.acquire, lock.release
        self._owner = 0  # the holding thread's ident; 0 when free
        self._depth = 0  # how many times the owner holds it

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._acquire(blocking, timeout):
            return False
        self._owner = get_ident()
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = 0
        self._release()

    def __enter__(self) -> None:
        self._acquire()
        self._owner = get_ident()
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = 0
        self._release()

    def held_by_caller(self) -> bool:
        """Whether the calling thread holds the lock (read without taking it: only the owner itself
        ever records its own ident, so the answer about the caller is exact)."""
        return self._owner == get_ident()
