"""ISync (the NVDLA runtime API): a sync point on a timeline semaphore: wait, signal, and its values.

Usage::

    syncs = rt.submitNonBlocking()
    syncs[0].wait(1000)
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.portability.interface import NvDlaFence, NvDlaPort, check_timeout_ms


class ISync:
    """A semaphore and the value that means "signaled". An ``owned`` one destroys its semaphore when
    it is garbage-collected (the KMD's tasks keep what they use), so that syncs do not pile up in
    the KMD (the Linux daemon counts them against a quota)."""

    def __init__(self, port: NvDlaPort, semaphore: Any, wait_value: int, *, owned: bool = False) -> None:
        self.port = port
        self.semaphore = semaphore
        self._wait_value = wait_value
        if owned:
            # Not at exit: the process's end releases everything it had (its device files close).
            weakref.finalize(self, _destroy, port, semaphore).atexit = False

    @property
    def fence(self) -> NvDlaFence:
        return NvDlaFence(self.semaphore, self._wait_value)

    def wait(self, timeout: int) -> None:
        """Block until signaled; NvError Timeout after ``timeout`` ms (0: only look); the task's error
        if it failed. Every wait has a timeout: None, a negative one, a float or a string is refused."""
        timeout = check_timeout_ms(timeout, "ISync.wait: timeout", minimum=0, maximum=2**31 - 1)
        self.port.NvDlaWaitFence(self.fence, timeout)

    def signal(self) -> None:
        """Signal from the application (releases submits waiting on this sync)."""
        self.port.NvDlaSignalFence(self.fence)

    def setWaitValue(self, val: int) -> None:
        """The value :meth:`wait`, :meth:`signal` and a submit waiting on this sync use from now on
        (the NVDLA runtime API's NvU32). Usage: ``sync.setWaitValue(2)``"""
        if isinstance(val, bool) or not isinstance(val, int) or not 0 <= val <= 0xFFFFFFFF:
            raise DlaError(NvError.BadParameter, f"ISync.setWaitValue: val {val!r} must be an integer "
                                                 f"0..0xffffffff (an NvU32)")
        self._wait_value = val

    def getWaitValue(self) -> int:
        return self._wait_value

    def getValue(self) -> int:
        return self.port.NvDlaGetSemaphoreValue(self.semaphore)


def _destroy(port: NvDlaPort, semaphore: Any) -> None:
    with contextlib.suppress(DlaError):  # a finalizer has no one to tell (e.g. a daemon that died)
        port.NvDlaDestroySemaphore(semaphore)
