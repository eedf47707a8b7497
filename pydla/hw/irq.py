"""The virtual device's interrupt line (a part of :class:`~pydla.hw.device.VirtualDevice`).

One line: it is up while GLB ``intr_status`` has a bit that ``intr_mask`` does not mask (both in
the shared :class:`~pydla.hw.state.DeviceState`, since every part that interrupts sets its bits).
A part that set a bit calls :meth:`InterruptLine.signal` once it released the device lock; the
host's handlers then run, with no lock of the device held, in the thread that caused the event.

Usage::

    dev.connect_irq(lambda: print(hex(dev.reg_read(R.GLB_INTR_STATUS))))
"""

from __future__ import annotations

from collections.abc import Callable

from pydla.hw.state import DeviceState
from pydla.hw.trace_out import INTERRUPT, TraceOutput


class InterruptLine:
    """The host's interrupt handlers, and the raising of the line."""

    def __init__(self, state: DeviceState, trace: TraceOutput) -> None:
        self._state = state
        self._lock = state.lock
        self._trace = trace
        self._handlers: list[Callable[[], object]] = []

    def connect(self, handler: Callable[[], object]) -> None:
        """Call ``handler`` (with no lock of the device held) whenever an unmasked status bit is set."""
        with self._lock:
            self._handlers.append(handler)

    def disconnect(self, handler: Callable[[], object]) -> None:
        with self._lock:
            self._handlers.remove(handler)

    def pending(self) -> bool:
        """Under the lock: an unmasked status bit is set."""
        state = self._state
        return bool(state.intr_status & ~state.intr_mask & 0xFFFFFFFF)

    def signal(self) -> None:
        """Call the handlers if the line is up (not under the device lock)."""
        with self._lock:
            if not self.pending():
                return
            handlers = list(self._handlers)
            state = self._state
            if state.trace_mask & INTERRUPT:
                self._trace.interrupt(state.intr_status, state.intr_mask)
        for handler in handlers:
            handler()
