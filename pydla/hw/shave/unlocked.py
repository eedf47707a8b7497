"""A threaded device's SHAVE tiles compute their kernels without the device lock.

The SHAVE worker (:mod:`pydla.hw.shave.part`) runs the tiles holding the device lock, which guards
what the SHAVE system shares with the rest of the device: the barriers (the engine's DLA operations
produce and consume them through SHAVE_BAR_PRODUCE / SHAVE_BAR_CONSUME), the FIFOs, the tiles' and
GLB's interrupt status, the trace ring, resets. A kernel's computation (its numpy equivalent, or an
emulation of its machine code) touches only its own tile's emulator, windows and CMX slice, so it
runs with the lock released: the engine programs and completes DLA operations meanwhile. What an
emulation does on the control page (take a task, wait for or update barriers, end a task) takes the
lock again. A CMX slice is also the DMA's; a DMA task and a kernel on the same bytes at once is the
task list's race, as on hardware (its barriers order them).

A reset, a HALT or a START of a tile that computes so :meth:`Unlocked.abandon`\\s it: an emulation is
stopped at once (``emu_stop``, thread-safe, as the budget's watchdog uses it), a kernel's equivalent
runs to its end and its result is discarded, and the tile takes nothing more; the reset waits (the
lock released) until the tile is no longer ``busy``, as a DLA block's reset waits for its abandoned
operation. In ``deterministic`` and ``step`` modes nothing is released: a run stays reproducible to
the register write.

Usage (the worker, holding the lock once)::

    shave.run(DeviceLockRelease(state.lock, idle))
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class Releaser(Protocol):
    """The device lock as a tile sees it: ``with release():`` runs without it (the caller holds it
    once), ``with release.locked():`` with it."""

    def __call__(self) -> contextlib.AbstractContextManager[None]: ...

    def locked(self) -> contextlib.AbstractContextManager[Any]: ...


class DeviceLockRelease:
    """The threaded device's :class:`Releaser`: its lock, and the condition a reset waits on for a
    tile to stop computing (notified whenever a computation ends)."""

    def __init__(self, lock: threading.RLock, idle: threading.Condition) -> None:
        self._lock = lock
        self._idle = idle

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._idle.notify_all()

    def locked(self) -> threading.RLock:
        return self._lock


class Unlocked:
    """A tile's side (mixed into :class:`pydla.hw.shave.tile.Tile`): ``busy`` while its kernel
    computes without the lock, ``stopping`` from :meth:`abandon` until the caller halted or
    restarted it."""

    uc: Any

    def _init_unlocked(self) -> None:
        self.busy = False
        self.stopping = False
        self._release: Releaser | None = None  # set during a resume by the threaded worker

    def abandon(self) -> None:
        """Under the lock, before a reset, HALT or START: what the tile computes is abandoned."""
        self.stopping = True
        if self.busy and self.uc is not None:
            self.uc.emu_stop()

    @contextlib.contextmanager
    def _computing(self) -> Iterator[None]:
        """Around a kernel's computation: without the lock when the worker gave a way to release it."""
        release = self._release
        if release is None:
            yield
            return
        self.busy = True
        try:
            with release():
                yield
        finally:
            self.busy = False  # the lock is held again

    def _locked_hook(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """An emulator hook that touches shared state: it takes the lock when the emulation runs
        without it, and does nothing but stop the emulation once the tile is abandoned."""
        def locked(*args: Any) -> Any:
            release = self._release
            with release.locked() if release is not None else contextlib.nullcontext():
                if self.stopping:
                    self.uc.emu_stop()
                    return 0
                return hook(*args)
        return locked
