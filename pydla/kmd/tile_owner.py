"""One owner of each SHAVE tile at a time: the KMD's SHAVE task lists or a compute unit's execution.

A tile is reached two ways: a SHAVE task list (pydla.kmd.shave_run: it starts the tile's runtime
kernel, DMAs into its CMX, pushes kernel tasks, and the tile is the list's until the list ends)
and an execution of the tile's compute unit (``shave:tileN``, pydla.hw.cu.shave_tile: one
ActKernelTask run on the tile, in its CMX). If both met on a tile, a unit execution could run
between a list's DMA into CMX and its kernel (and write over its data), find the tile busy with the
list (and fail), or be counted in the list's task counters. So each tile has one owner at a time:

- a list owns every tile it runs kernels on or moves data to or from, from its start to its end
  (done, failed, or aborted by the recovery ladder);
- a compute unit owns its tile while it has an execution in flight (and, after one hung, until the
  device reset that recovers it).

The other waits its turn, not an error: a list that cannot have its tiles is held by the driver (it
keeps its place in the job queue, nothing starts before it), a unit execution stays queued. Turns
go in the order of asking: each side that waits for a tile takes a ticket when it first asks, and a
free tile goes to the lower ticket, so neither side can starve the other (a list waiting behind an
execution starts before that unit's next execution). The side that frees a tile another waits for
is told to wake it (the driver's bottom half, the compute-unit scheduler's thread). Timeouts are the
waiters' own: a queued job or execution waits as long as its caller's wait allows; the hang timers
start when the work starts.

Usage (the KMD does this)::

    owners = TileOwners()
    owners.acquire(LIST, (0, 1), "task 7")      # False: it waits; ask again when woken
    owners.release(LIST, (0, 1))
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable

LIST, UNIT = "SHAVE task list", "compute unit"
_OTHER = {LIST: UNIT, UNIT: LIST}


class TileOwners:
    """See the module docstring. Thread-safe; its lock is taken last (never held while calling out)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: dict[int, tuple[str, str]] = {}  # tile -> (side, who)
        self._waiting: dict[int, dict[str, int]] = {}  # tile -> side -> its ticket
        self._tickets = itertools.count(1)
        self.wake: dict[str, Callable[[], None]] = {}  # side -> how to wake it when its tile is free
        # side -> how a waiter of the other side makes it progress where no thread does (the
        # deterministic and step modes): the driver's poll, which ends a list that owns a tile.
        self.drive: dict[str, Callable[[], None]] = {}
        self.waits = {LIST: 0, UNIT: 0}  # times a side had to wait (statistics)

    def acquire(self, side: str, tiles: Iterable[int], who: str) -> bool:
        """All of ``tiles`` for ``side`` (``who`` names it in :meth:`owner`), or none: False when a
        tile is the other side's, or the other side asked for it first (then ``side`` waits, with its
        ticket, and is woken when it may ask again)."""
        wanted = tuple(sorted(set(tiles)))
        with self._lock:
            mine = [self._waiting.get(t, {}).get(side) for t in wanted]
            ticket = min((m for m in mine if m is not None), default=None)
            if ticket is None:
                ticket = next(self._tickets)
            other = _OTHER[side]
            free = all(self._owner.get(t, (side,))[0] == side
                       and self._waiting.get(t, {}).get(other, ticket + 1) > ticket for t in wanted)
            if free:
                for t in wanted:
                    self._owner[t] = (side, who)
                    self._waiting.get(t, {}).pop(side, None)
                return True
            if None in mine:
                self.waits[side] += 1
            for t in wanted:
                self._waiting.setdefault(t, {}).setdefault(side, ticket)
            return False

    def release(self, side: str, tiles: Iterable[int] | None = None) -> None:
        """``side`` no longer owns ``tiles`` (all it owns when None); the other side is woken if it
        waits for one of them."""
        chosen = None if tiles is None else set(tiles)
        with self._lock:
            freed = [t for t, (s, _) in self._owner.items() if s == side and (chosen is None or t in chosen)]
            for t in freed:
                del self._owner[t]
            other = _OTHER[side]
            wake = any(other in self._waiting.get(t, {}) for t in freed)
        if wake and other in self.wake:
            self.wake[other]()

    def withdraw(self, side: str, tiles: Iterable[int]) -> None:
        """``side`` no longer waits for ``tiles`` (what waited was dropped); the other side is woken if
        it waited behind it."""
        wake = False
        with self._lock:
            for t in tiles:
                waiting = self._waiting.get(t, {})
                if waiting.pop(side, None) is not None and waiting and t not in self._owner:
                    wake = True
        other = _OTHER[side]
        if wake and other in self.wake:
            self.wake[other]()

    def owner(self, tile: int) -> str | None:
        """Who owns ``tile`` now, in words (None: nobody)."""
        with self._lock:
            held = self._owner.get(tile)
        return None if held is None else f"{held[0]} ({held[1]})"
