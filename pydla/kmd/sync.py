"""Timeline semaphores: the KMD's sync objects, behind NvDlaFence and the UMD's ISync.

A semaphore holds a 64-bit value that only grows. ``signal(v)`` raises it to ``v``; a waiter for
``v`` is released once the value reaches ``v``. A job can wait on semaphores before it may start
(pre-fences) and signal semaphores when it finishes (post-fences). A failed job does not signal:
it marks its post-fences failed, so a waiter learns the error instead of waiting forever.

Usage::

    sem = TimelineSemaphore()
    sem.signal(1); sem.wait(1, timeout_ms=10)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pydla.errors import DlaError, NvError, WaitTimeout

MAX_VALUE = (1 << 64) - 1


class TimelineSemaphore:
    """A monotonically increasing counter that threads (and the driver) can wait on."""

    _ids = 0
    _ids_lock = threading.Lock()

    def __init__(self, value: int = 0) -> None:
        with TimelineSemaphore._ids_lock:
            TimelineSemaphore._ids += 1
            self.sem_id = TimelineSemaphore._ids
        # The condition's lock is taken directly where nothing waits or is notified (a C-level lock,
        # cheaper than the Condition's Python methods); waiters are counted so that a signal with
        # none (the common case: the waiter polls, or is the signaller) notifies nobody.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiters = 0
        self._value = _check(value)
        self.error: DlaError | None = None
        self._listeners: list[Callable[[], None]] = []

    @property
    def value(self) -> int:
        return self._value  # one read of an int: atomic

    def signal(self, value: int) -> None:
        """Raise the value to ``value`` (never lowers it)."""
        if type(value) is not int or not 0 <= value <= MAX_VALUE:
            _check(value)
        with self._lock:
            if value > self._value:
                self._value = value
            listeners = self._changed_locked()
        for listener in listeners:
            listener()

    def fail(self, error: DlaError) -> None:
        """The work that was to signal this semaphore failed: waiters get ``error``."""
        with self._lock:
            self.error = error
            listeners = self._changed_locked()
        for listener in listeners:
            listener()

    def _changed_locked(self) -> list[Callable[[], None]]:
        """Under the lock: wake the waiters, if any; return the listeners, to be called once the
        lock is released."""
        if self._waiters:
            self._cond.notify_all()
        return list(self._listeners) if self._listeners else []

    def reached(self, value: int) -> bool:
        return self._value >= value  # one read of an int: atomic

    def wake(self) -> None:
        """Wake the threads waiting on this semaphore (to look at their ``abort`` condition)."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, value: int, timeout_ms: float, abort: Callable[[], bool] | None = None) -> None:
        """Return once the value reaches ``value``; NvError Timeout after ``timeout_ms``; the
        failure's error if the work that was to signal it failed; NvError Disconnected when
        ``abort()`` is true on a wake-up (see :meth:`wake`)."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._cond:
            while self._value < value:
                if self.error is not None:
                    raise self.error
                if abort is not None and abort():
                    raise DlaError(NvError.Disconnected, f"wait on semaphore {self.sem_id} was abandoned")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(NvError.Timeout, f"semaphore {self.sem_id} did not reach {value} "
                                                      f"within {timeout_ms} ms (it is at {self._value})")
                self._waiters += 1
                try:
                    self._cond.wait(left)
                finally:
                    self._waiters -= 1

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (with no lock held) after every signal or failure."""
        with self._cond:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        """Undo one :meth:`add_listener` of ``listener`` (none left: nothing happens)."""
        with self._cond:
            if listener in self._listeners:
                self._listeners.remove(listener)

    @property
    def listeners(self) -> int:
        with self._cond:
            return len(self._listeners)


def _check(value: int) -> int:
    if not isinstance(value, int) or not 0 <= value <= MAX_VALUE:
        raise DlaError(NvError.BadParameter, f"semaphore value {value!r} must be 0..2^64-1")
    return value
