"""Progress of a compile: the callback ``compile_model(progress=...)`` takes, and the one
``pydla compile`` draws on a terminal.

The callback is called as ``progress(done, total, what)``. ``what`` is a phase name, or a phase
name, a colon and a detail. The phases, in order (a model given as an object is not read):

- ``reading``, ``checking``, ``shape inference``, ``folding constants``, ``planning``: each
  reported once, as it starts, with ``done == total == 0`` (no count);
- ``lowering``: once per step, ``done`` from 1 to ``total`` (the number of steps), the detail
  naming the step's first node (``lowering: conv3``);
- ``writing``: the loadable is assembled (``done == total == 0``);
- ``done``: the last call, ``done == total == 1``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

Progress = Callable[[int, int, str], None]

PHASES = ("reading", "checking", "shape inference", "folding constants", "planning", "lowering", "writing",
          "done")


def report(progress: Progress | None, phase: str, done: int = 0, total: int = 0, detail: str = "") -> None:
    """Call ``progress`` (when there is one) for ``phase``."""
    if progress is not None:
        progress(done, total, f"{phase}: {detail}" if detail else phase)


class TerminalProgress:
    """Draws the progress on one line of a terminal (``\\r`` rewrites it), at most every
    ``interval`` seconds within a phase: writing a line per step of a graph of tens of thousands
    of nodes would cost more than lowering them. A new phase and the last step are always drawn."""

    WIDTH = 30

    def __init__(self, stream: TextIO, interval: float = 0.1) -> None:
        self.stream = stream
        self.interval = interval
        self._phase = ""
        self._drawn = 0.0
        self._started = time.monotonic()
        self._length = 0  # of the line drawn last, so that a shorter one overwrites all of it

    def __call__(self, done: int, total: int, what: str) -> None:
        phase = what.split(":", 1)[0]
        now = time.monotonic()
        if phase == "done":
            self._draw(f"compiled in {now - self._started:.1f} s")
            self.close()
            return
        if phase == self._phase and done != total and now - self._drawn < self.interval:
            return
        self._phase, self._drawn = phase, now
        if total > 0:
            filled = self.WIDTH * done // total
            bar = "#" * filled + "." * (self.WIDTH - filled)
            self._draw(f"compiling [{bar}] {done}/{total} {_fit(what, 40)}")
        else:
            self._draw(f"compiling: {_fit(what, 60)} ...")

    def close(self) -> None:
        """End the line drawn (once; nothing when nothing was drawn)."""
        if self._length:
            self.stream.write("\n")
            self.stream.flush()
            self._length = 0

    def _draw(self, line: str) -> None:
        self.stream.write("\r" + line.ljust(self._length))
        self.stream.flush()
        self._length = len(line)


def _fit(what: str, width: int) -> str:
    """``what`` in ``width`` characters: the phase and the end of the detail (a path's file name,
    a node name's last part), so that the line stays on one row of the terminal."""
    if len(what) <= width:
        return what
    phase, _, detail = what.partition(": ")
    keep = width - len(phase) - len(": ...")
    return f"{phase}: ...{detail[-keep:]}" if detail and keep > 0 else what[:width]
