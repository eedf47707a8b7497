"""The virtual device's compute units (:class:`ComputeUnits`, a part of
:class:`~pydla.hw.device.VirtualDevice`).

The configuration's IP_LAYOUT places each unit's register window (:mod:`pydla.hw.cu.unit` has the
control block) in the register space above the DLA's blocks; an access there reaches the unit
through the address lookup's slow path (the DLA blocks' registers are not slowed down). A unit's
interrupt output sets its bit (``m_interrupt_id``) of GLB ``cu_intr_status`` and, while any bit is
set, bit 30 of GLB ``intr_status``: the device's one interrupt line.

Time: a unit's executions take ``latency_cycles`` at the configured ``clock_mhz``.

- ``threaded``: wall time; a worker thread per unit computes and completes executions.
- ``deterministic``: a virtual clock that stands still while the host programs the units and moves
  on, to the units' next event, when the host waits for them: when it reads a unit's CTRL or ISR, or
  GLB cu_intr_status, and gets the same value as its previous read of that register with no write
  to a unit in between (a polling loop), when it waits on a stream, or :meth:`ComputeUnits.advance`.
  Executions compute inside the write of ap_start that starts them, as blocks do in their enable.
- ``step``: the clock moves only in :meth:`~pydla.hw.device.VirtualDevice.step` (one event per step
  once no block operation is runnable) or :meth:`ComputeUnits.advance`.

Usage::

    dev.reg_write(base + 0x0, 1)               # ap_start
    while not dev.reg_read(base) & 2: pass     # ap_done (deterministic: the poll moves the clock)
    [str(e) for e in dev.cu_events("noop_hs")] # ['START1', 'DONE1', 'READY']
    dev.units.advance(1000)                    # deterministic: 1000 cycles on
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.hw.cu.models import create_model
from pydla.hw.cu.shave_tile import ShaveTileUnit
from pydla.hw.cu.unit import CTRL, ISR, REG_NAMES, ComputeUnit, CuEvent
from pydla.hw.irq import InterruptLine
from pydla.hw.state import DeviceState
from pydla.hw.trace_out import LAYER, TraceOutput

if TYPE_CHECKING:
    from pydla.hw.shave.system import ShaveSystem

CU_INTR_BIT = 30  # GLB intr_status: some compute unit interrupts (see cu_intr_status)
_POLLED = (CTRL, ISR)
WORKER_NAP_S = 0.5  # the longest a unit's worker sleeps without an event (it re-checks)


class CuInterrupt(Exception):
    """Raised out of a register read that made a compute unit interrupt, so that the read's caller
    raises the line once the lock is released (a try costs nothing in the read's fast path)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def register_names(units: list[ComputeUnit]) -> dict[int, str]:
    """The units' registers by address, as the register trace names them (``noop_hs_1.CTRL``)."""
    return {u.info.m_base_address + off: f"{u.info.instance}.{reg}"
            for u in units for off, reg in REG_NAMES.items()}


class ComputeUnits:
    """Compute units (a part of :class:`~pydla.hw.device.VirtualDevice`). The register file hands it
    the accesses no block window takes (``bus_read``, ``bus_write``) and GLB cu_intr_status."""

    def __init__(self, state: DeviceState, irq: InterruptLine, trace: TraceOutput,
                 shave: Callable[[], ShaveSystem | None]) -> None:
        self._state = state
        self._lock = state.lock
        self._mode = state.mode
        self._config = state.config
        self._irq = irq
        self._trace = trace
        inline = self._mode != "threaded"
        self.units: list[ComputeUnit] = []
        for info in self._config.ip_layout:
            if not info.is_engine:  # the engine runs as the DLA blocks; its entry is metadata
                self.units.append(ComputeUnit(info, create_model(info), len(self.units), state.iommu,
                                              self._lock, inline))
        self.units.sort(key=lambda u: u.info.m_base_address)
        for u in self.units:
            u.traced = self._traced
            if isinstance(u.model, ShaveTileUnit):
                u.model.bind(shave, self._lock)
        self._bases = [u.info.m_base_address for u in self.units]
        self._by_name = {n: u for u in self.units for n in (u.info.name, u.info.instance)}
        self._hz = self._config.clock_mhz * 1e6
        self._t0 = time.monotonic()
        self._clock = 0
        self._poll: tuple[int, int] | None = None
        self.intr_status = 0  # GLB cu_intr_status
        # Threaded mode: a unit's worker starts at its first write (a device whose units nobody
        # uses runs no more threads than its blocks).
        self._workers: set[int] = set()

    def _traced(self, unit: ComputeUnit, kind: str, n: int, t: int) -> None:
        """Under the lock: a unit's START or DONE as cu_start / cu_end in the trace ring (class LAYER);
        durations in ns from the units' clock (cycles at the configuration's clock_mhz)."""
        if not self._state.trace_mask & LAYER:
            unit.trace_starts.clear()
            return
        index = self._config.ip_layout.index(unit.info)  # the IP_LAYOUT's numbering, as CU_QUERY's
        if kind == "START":
            unit.trace_starts[n] = t
            self._trace.cu(index, n, None)
            return
        start = unit.trace_starts.pop(n, t)
        error = unit.error if unit.error_exec == n else 0
        self._trace.cu(index, n, int((t - start) * 1000 / self._config.clock_mhz), error)

    def _start_worker(self, u: ComputeUnit) -> None:
        """Under the lock, threaded mode: start ``u``'s worker thread if it has none."""
        if u.index in self._workers or self._state.closed:
            return
        self._workers.add(u.index)
        t = threading.Thread(target=self._worker, args=(u,), daemon=True,
                             name=f"pydla-dev{self._state.instance}-cu-{u.info.instance}")
        t.start()
        self._state.threads.append(t)

    # -- for the host and for tests -------------------------------------------------------------

    @property
    def clock(self) -> int:
        """The compute units' clock, in cycles (virtual unless threaded)."""
        with self._lock:
            return self.now()

    def events(self, name: str) -> list[CuEvent]:
        """The control events of unit ``name`` (m_name or instance) in order: START n, READY, DONE n,
        CONTINUE n (the last 65,536)."""
        with self._lock:
            return list(self.unit(name).events)

    def clear_events(self, name: str) -> None:
        with self._lock:
            self.unit(name).events.clear()

    def log(self, name: str) -> list[str]:
        """Why the unit's recent executions failed, if they did."""
        with self._lock:
            return list(self.unit(name).log)

    def advance(self, cycles: int | None = None) -> bool:
        """Deterministic and step modes: move the units' clock on by ``cycles``, or (None) to their
        next event; False if there was no event to move to."""
        if self._mode == "threaded":
            raise DlaError(NvError.InvalidState, "advance() needs mode 'deterministic' or 'step'")
        if cycles is not None and cycles < 0:
            raise DlaError(NvError.BadParameter, f"advance cycles {cycles} must be >= 0")
        with self._lock:
            moved = self._move(None if cycles is None else self._clock + cycles)
            irq = self.sync_irq()
        if irq:
            self._irq.signal()
        return moved

    def stream_write(self, name: str, data: bytes, timeout_s: float = 5.0) -> None:
        """Write ``data`` into an AP_CTRL_NONE unit's input stream, waiting (up to ``timeout_s``)
        for room; DlaError(Timeout) says how much went in when it runs out."""
        data = bytes(data)
        sent = [0]

        def give(u: ComputeUnit) -> int:
            n = u.stream_write(data[sent[0]:], self.now())
            sent[0] += n
            return n

        self._stream_wait(name, give, len(data), timeout_s, "write")

    def stream_read(self, name: str, nbytes: int, timeout_s: float = 5.0) -> bytes:
        """Read exactly ``nbytes`` from an AP_CTRL_NONE unit's output stream, waiting (up to
        ``timeout_s``); DlaError(Timeout) says how much had come when it runs out."""
        if not isinstance(nbytes, int) or nbytes < 0:
            raise DlaError(NvError.BadParameter, f"stream read of {nbytes!r} bytes")
        parts: list[bytes] = []
        got = [0]

        def take(u: ComputeUnit) -> int:
            part = u.stream_read(nbytes - got[0], self.now())
            parts.append(part)
            got[0] += len(part)
            return len(part)

        self._stream_wait(name, take, nbytes, timeout_s, "read")
        return b"".join(parts)

    # -- the register file's slow path ------------------------------------------------------------

    def _locate(self, address: int) -> tuple[ComputeUnit, int] | None:
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0 or address % 4:
            return None
        u = self.units[i]
        offset = address - u.info.m_base_address
        return (u, offset) if offset < u.info.window else None

    def bus_read(self, address: int) -> tuple[int, None]:
        """Under the lock: a read of a unit's register, or a bus error. Raises CuInterrupt (with the
        value read) when the read made a unit interrupt."""
        where = self._locate(address)
        if where is None:
            self._state.bus_errors += 1
            return 0, None
        u, offset = where
        now = self.now()
        if self._mode == "threaded":
            u.advance(now)
        if offset in _POLLED:  # the same value read again: the host polls (see _poll_moves)
            self._poll_moves(address, u.peek(offset, now))
        value = u.read(offset, self.now())
        self._poll = (address, value)
        if self.sync_irq():
            raise CuInterrupt(value)
        return value, None

    def read_status(self) -> int:
        """Under the lock: GLB cu_intr_status (a register a polling driver may spin on)."""
        value = self.intr_status
        if self._poll_moves(R.GLB_CU_INTR_STATUS, value):
            value = self.intr_status
        self._poll = (R.GLB_CU_INTR_STATUS, value)
        return value

    def _poll_moves(self, address: int, value: int) -> bool:
        """Deterministic mode: the host read the same value again, so it waits: move the clock on
        to the units' next event. True if it moved."""
        if self._mode != "deterministic" or self._poll != (address, value):
            return False
        return self._move(None)

    def bus_write(self, address: int, value: int) -> tuple[None, int]:
        """Under the lock: a write of a unit's register, or a bus error; the effect (2 when an
        interrupt became pending)."""
        where = self._locate(address)
        if where is None:
            self._state.bus_errors += 1
            return None, 0
        u, offset = where
        self._poll = None
        with np.errstate(all="ignore"):  # a model computes inside an accepted start (not threaded)
            u.write(offset, value, self.now())
        if self._mode == "threaded":
            self._start_worker(u)
            u.wake.notify()
        return None, 2 if self.sync_irq() else 0

    def ack(self, value: int) -> int:
        """GLB cu_intr_status written: clear those bits (a unit still interrupting keeps its own)."""
        self._poll = None
        self.intr_status &= ~value
        self.sync_irq()
        return 0

    # -- time and interrupts ------------------------------------------------------------------

    def now(self) -> int:
        if self._mode == "threaded":
            return int((time.monotonic() - self._t0) * self._hz)
        return self._clock

    def _move(self, until: int | None) -> bool:
        """Under the lock (not threaded): move the clock to ``until``, or to the next event."""
        if until is None:
            times = [t for u in self.units if (t := u.next_time(self._clock)) is not None]
            if not times:
                return False
            until = min(times)
        self._clock = max(self._clock, until)
        with np.errstate(all="ignore"):
            for u in self.units:
                u.advance(self._clock)
                if u.control == "NONE":
                    u.stream.notify_all()
        return True

    def sync_irq(self) -> bool:
        """Under the lock: fold the units' interrupt outputs into GLB; True if the line should be
        raised (a bit newly set and bit 30 not masked)."""
        asserted = 0
        for u in self.units:
            if u.irq_out():
                asserted |= 1 << u.info.m_interrupt_id
        new = asserted & ~self.intr_status
        self.intr_status |= asserted
        state = self._state
        if self.intr_status:
            state.intr_status |= 1 << CU_INTR_BIT
        else:
            state.intr_status &= ~(1 << CU_INTR_BIT)
        return bool(new) and not state.intr_mask >> CU_INTR_BIT & 1

    def step(self) -> bool:
        """Step mode, nothing else runnable: move to the units' next event."""
        with self._lock:
            moved = self._move(None)
            irq = self.sync_irq()
        if irq:
            self._irq.signal()
        return moved

    def reset(self) -> None:
        """Under the lock: a device reset: every unit's registers, executions and streams."""
        for u in self.units:
            u.reset(self.now())
            u.wake.notify()
            u.stream.notify_all()
        self.intr_status = 0
        self._poll = None

    def wake_all(self) -> None:
        """Under the lock: wake every unit's worker and stream waiter (the device closes)."""
        for u in self.units:
            u.wake.notify()
            u.stream.notify_all()

    def unit(self, name: str) -> ComputeUnit:
        """The unit named ``name`` (its m_name or instance)."""
        u = self._by_name.get(name)
        if u is None:
            names = ", ".join(u.info.name for u in self.units) or "none"
            raise DlaError(NvError.BadParameter,
                           f"compute unit '{name}': device config '{self._config.name}' has {names}")
        return u

    def _stream_wait(self, name: str, move: Callable[[ComputeUnit], int], total: int, timeout_s: float,
                     what: str) -> None:
        """Call ``move(unit)`` (bytes moved) until ``total`` moved, waiting for the unit between."""
        if not 0 < timeout_s < 1e6:
            raise DlaError(NvError.BadParameter, f"stream {what} timeout {timeout_s!r} s must be > 0")
        deadline = time.monotonic() + timeout_s
        moved = 0
        irq = False
        with self._lock:
            u = self.unit(name)
            if u.control != "NONE":
                raise DlaError(NvError.NotSupported,
                               f"compute unit '{u.info.name}' is {u.info.m_ip_control}: only AP_CTRL_NONE "
                               "units have streams")
            while True:
                with np.errstate(all="ignore"):
                    moved += move(u)
                irq = self.sync_irq() or irq
                if self._mode == "threaded":
                    self._start_worker(u)
                    u.wake.notify()  # its worker converts what came in, or fills the room made
                if moved >= total:
                    break
                left = deadline - time.monotonic()
                if self._mode == "deterministic" and self._move(None):
                    continue  # the host waits: the clock moves on
                if left <= 0 or self._mode == "deterministic":
                    raise DlaError(NvError.Timeout,
                                   f"compute unit '{u.info.name}': stream {what} of {total} bytes: "
                                   f"{moved} in {timeout_s} s (input {len(u.fifo_in)}, output "
                                   f"{len(u.fifo_out)} bytes waiting)")
                u.stream.wait(left)
        if irq:
            self._irq.signal()

    def _worker(self, u: ComputeUnit) -> None:
        state = self._state
        with np.errstate(all="ignore"):  # this thread's setting, for its lifetime
            while True:
                with self._lock:
                    if state.closed:
                        return
                    now = self.now()
                    u.advance(now)
                    irq = self.sync_irq()
                    job = u.take_uncomputed()
                    epoch = u.epoch
                    if job is None and not irq:
                        t = u.next_time(now)
                        nap = WORKER_NAP_S if t is None else min(WORKER_NAP_S, (t - now) / self._hz)
                        if nap > 0:
                            u.wake.wait(nap)
                        continue
                if irq:
                    self._irq.signal()
                if job is not None:
                    u.compute(job)  # outside the lock, as blocks compute
                    with self._lock:
                        if u.epoch == epoch:
                            job.computed = True
