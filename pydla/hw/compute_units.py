"""The virtual device's compute units (a part of :class:`~pydla.hw.device.VirtualDevice`).

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
  to a unit in between (a polling loop), when it waits on a stream, or :meth:`cu_advance`.
  Executions compute inside the write of ap_start that starts them, as blocks do in their enable.
- ``step``: the clock moves only in :meth:`~pydla.hw.device.VirtualDevice.step` (one event per step
  once no block operation is runnable) or :meth:`cu_advance`.

Usage::

    dev.reg_write(base + 0x0, 1)               # ap_start
    while not dev.reg_read(base) & 2: pass     # ap_done (deterministic: the poll moves the clock)
    [str(e) for e in dev.cu_events("noop_hs")] # ['START1', 'DONE1', 'READY']
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.hw.cu.models import create_model
from pydla.hw.cu.shave_tile import ShaveTileUnit
from pydla.hw.cu.unit import CTRL, ISR, REG_NAMES, ComputeUnit, CuEvent
from pydla.hw.state import DeviceState
from pydla.hw.trace_out import LAYER
from pydla.target.ip_layout import ComputeUnitInfo

CU_INTR_BIT = 30  # GLB intr_status: some compute unit interrupts (see cu_intr_status)
_POLLED = (CTRL, ISR)
WORKER_NAP_S = 0.5  # the longest a unit's worker sleeps without an event (it re-checks)


class CuInterrupt(Exception):
    """Raised out of a register read that made a compute unit interrupt, so that the read's caller
    raises the line once the lock is released (a try costs nothing in the read's fast path)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class ComputeUnits(DeviceState):
    """Compute units (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

    def _cu_traced(self, unit: ComputeUnit, kind: str, n: int, t: int) -> None:
        """Under the lock: a unit's START or DONE as cu_start / cu_end in the trace ring (class LAYER);
        durations in ns from the units' clock (cycles at the configuration's clock_mhz)."""
        if not self.trace_mask & LAYER:
            unit.trace_starts.clear()
            return
        index = self.config.ip_layout.index(unit.info)  # the IP_LAYOUT's numbering, as CU_QUERY's
        if kind == "START":
            unit.trace_starts[n] = t
            self.trace_cu(index, n, None)
            return
        start = unit.trace_starts.pop(n, t)
        error = unit.error if unit.error_exec == n else 0
        self.trace_cu(index, n, int((t - start) * 1000 / self.config.clock_mhz), error)

    def _init_cus(self) -> None:
        inline = self.mode != "threaded"
        self._cus: list[ComputeUnit] = []
        for info in self.config.ip_layout:
            if not info.is_engine:  # the engine runs as the DLA blocks; its entry is metadata
                self._cus.append(ComputeUnit(info, create_model(info), len(self._cus), self.iommu,
                                             self._lock, inline))
        self._cus.sort(key=lambda u: u.info.m_base_address)
        for u in self._cus:
            u.traced = self._cu_traced
            if isinstance(u.model, ShaveTileUnit):  # the tiles come after the units (_init_shave)
                u.model.bind(lambda: getattr(self, "shave", None), self._lock)
        self._cu_bases = [u.info.m_base_address for u in self._cus]
        self._cu_by_name = {n: u for u in self._cus for n in (u.info.name, u.info.instance)}
        self._cu_hz = self.config.clock_mhz * 1e6
        self._cu_t0 = time.monotonic()
        self._cu_clock = 0
        self._cu_poll: tuple[int, int] | None = None
        self.cu_intr_status = 0
        for u in self._cus:
            base = u.info.m_base_address
            for off, reg in REG_NAMES.items():
                self._names[base + off] = f"{u.info.instance}.{reg}"
        # Threaded mode: a unit's worker starts at its first write (a device whose units nobody
        # uses runs no more threads than its blocks).
        self._cu_workers: set[int] = set()

    def _cu_start_worker(self, u: ComputeUnit) -> None:
        """Under the lock, threaded mode: start ``u``'s worker thread if it has none."""
        if u.index in self._cu_workers or self._closed:
            return
        self._cu_workers.add(u.index)
        t = threading.Thread(target=self._cu_worker, args=(u,), daemon=True,
                             name=f"pydla-dev{self.instance}-cu-{u.info.instance}")
        t.start()
        self._threads.append(t)

    # -- for the host and for tests -------------------------------------------------------------

    @property
    def compute_units(self) -> tuple[ComputeUnitInfo, ...]:
        """The IP_LAYOUT of the device (the engine's entry included)."""
        return self.config.ip_layout

    @property
    def cu_clock(self) -> int:
        """The compute units' clock, in cycles (virtual unless threaded)."""
        with self._lock:
            return self._cu_now()

    def cu_events(self, name: str) -> list[CuEvent]:
        """The control events of unit ``name`` (m_name or instance) in order: START n, READY, DONE n,
        CONTINUE n (the last 65,536)."""
        with self._lock:
            return list(self._cu(name).events)

    def clear_cu_events(self, name: str) -> None:
        with self._lock:
            self._cu(name).events.clear()

    def cu_log(self, name: str) -> list[str]:
        """Why the unit's recent executions failed, if they did."""
        with self._lock:
            return list(self._cu(name).log)

    def cu_advance(self, cycles: int | None = None) -> bool:
        """Deterministic and step modes: move the units' clock on by ``cycles``, or (None) to their
        next event; False if there was no event to move to."""
        if self.mode == "threaded":
            raise DlaError(NvError.InvalidState, "cu_advance() needs mode 'deterministic' or 'step'")
        if cycles is not None and cycles < 0:
            raise DlaError(NvError.BadParameter, f"cu_advance cycles {cycles} must be >= 0")
        with self._lock:
            moved = self._cu_move(None if cycles is None else self._cu_clock + cycles)
            irq = self._cu_sync_irq()
        if irq:
            self._raise_irq()
        return moved

    def cu_stream_write(self, name: str, data: bytes, timeout_s: float = 5.0) -> None:
        """Write ``data`` into an AP_CTRL_NONE unit's input stream, waiting (up to ``timeout_s``)
        for room; DlaError(Timeout) says how much went in when it runs out."""
        data = bytes(data)
        sent = [0]

        def give(u: ComputeUnit) -> int:
            n = u.stream_write(data[sent[0]:], self._cu_now())
            sent[0] += n
            return n

        self._cu_stream_wait(name, give, len(data), timeout_s, "write")

    def cu_stream_read(self, name: str, nbytes: int, timeout_s: float = 5.0) -> bytes:
        """Read exactly ``nbytes`` from an AP_CTRL_NONE unit's output stream, waiting (up to
        ``timeout_s``); DlaError(Timeout) says how much had come when it runs out."""
        if not isinstance(nbytes, int) or nbytes < 0:
            raise DlaError(NvError.BadParameter, f"stream read of {nbytes!r} bytes")
        parts: list[bytes] = []
        got = [0]

        def take(u: ComputeUnit) -> int:
            part = u.stream_read(nbytes - got[0], self._cu_now())
            parts.append(part)
            got[0] += len(part)
            return len(part)

        self._cu_stream_wait(name, take, nbytes, timeout_s, "read")
        return b"".join(parts)

    # -- the register file's slow path ------------------------------------------------------------

    def _cu_locate(self, address: int) -> tuple[ComputeUnit, int] | None:
        i = bisect.bisect_right(self._cu_bases, address) - 1
        if i < 0 or address % 4:
            return None
        u = self._cus[i]
        offset = address - u.info.m_base_address
        return (u, offset) if offset < u.info.window else None

    def _cu_read(self, address: int) -> tuple[int, None]:
        """Under the lock: a read of a unit's register, or a bus error."""
        where = self._cu_locate(address)
        if where is None:
            self.bus_errors += 1
            return 0, None
        u, offset = where
        now = self._cu_now()
        if self.mode == "threaded":
            u.advance(now)
        if offset in _POLLED:  # the same value read again: the host polls (see _cu_poll_moves)
            self._cu_poll_moves(address, u.peek(offset, now))
        value = u.read(offset, self._cu_now())
        return self._cu_read_done(address, value)

    def _cu_read_status(self) -> int:
        """Under the lock: GLB cu_intr_status (a register a polling driver may spin on)."""
        value = self.cu_intr_status
        if self._cu_poll_moves(R.GLB_CU_INTR_STATUS, value):
            value = self.cu_intr_status
        self._cu_poll = (R.GLB_CU_INTR_STATUS, value)
        return value

    def _cu_read_done(self, address: int, value: int) -> tuple[int, None]:
        self._cu_poll = (address, value)
        if self._cu_sync_irq():
            if self.trace is not None:
                from pydla.hw.regfile import RegAccess
                name = self._names.get(address, f"{address:#x}")
                self.trace.append(RegAccess("R", address, name, value, None))
            raise CuInterrupt(value)
        return value, None

    def _cu_poll_moves(self, address: int, value: int) -> bool:
        """Deterministic mode: the host read the same value again, so it waits: move the clock on
        to the units' next event. True if it moved."""
        if self.mode != "deterministic" or self._cu_poll != (address, value):
            return False
        return self._cu_move(None)

    def _cu_write(self, address: int, value: int) -> tuple[None, int]:
        """Under the lock: a write of a unit's register, or a bus error; the effect (_STATUS when an
        interrupt became pending)."""
        where = self._cu_locate(address)
        if where is None:
            self.bus_errors += 1
            return None, 0
        u, offset = where
        self._cu_poll = None
        with np.errstate(all="ignore"):  # a model computes inside an accepted start (not threaded)
            u.write(offset, value, self._cu_now())
        if self.mode == "threaded":
            self._cu_start_worker(u)
            u.wake.notify()
        return None, 2 if self._cu_sync_irq() else 0

    def _cu_ack(self, value: int) -> int:
        """GLB cu_intr_status written: clear those bits (a unit still interrupting keeps its own)."""
        self._cu_poll = None
        self.cu_intr_status &= ~value
        self._cu_sync_irq()
        return 0

    # -- time and interrupts ------------------------------------------------------------------

    def _cu_now(self) -> int:
        if self.mode == "threaded":
            return int((time.monotonic() - self._cu_t0) * self._cu_hz)
        return self._cu_clock

    def _cu_move(self, until: int | None) -> bool:
        """Under the lock (not threaded): move the clock to ``until``, or to the next event."""
        if until is None:
            times = [t for u in self._cus if (t := u.next_time(self._cu_clock)) is not None]
            if not times:
                return False
            until = min(times)
        self._cu_clock = max(self._cu_clock, until)
        with np.errstate(all="ignore"):
            for u in self._cus:
                u.advance(self._cu_clock)
                if u.control == "NONE":
                    u.stream.notify_all()
        return True

    def _cu_sync_irq(self) -> bool:
        """Under the lock: fold the units' interrupt outputs into GLB; True if the line should be
        raised (a bit newly set and bit 30 not masked)."""
        asserted = 0
        for u in self._cus:
            if u.irq_out():
                asserted |= 1 << u.info.m_interrupt_id
        new = asserted & ~self.cu_intr_status
        self.cu_intr_status |= asserted
        if self.cu_intr_status:
            self.intr_status |= 1 << CU_INTR_BIT
        else:
            self.intr_status &= ~(1 << CU_INTR_BIT)
        return bool(new) and not self.intr_mask >> CU_INTR_BIT & 1

    def _cu_step(self) -> bool:
        """Step mode, nothing else runnable: move to the units' next event."""
        with self._lock:
            moved = self._cu_move(None)
            irq = self._cu_sync_irq()
        if irq:
            self._raise_irq()
        return moved

    def _cu_reset(self) -> None:
        """Under the lock: a device reset: every unit's registers, executions and streams."""
        for u in self._cus:
            u.reset(self._cu_now())
            u.wake.notify()
            u.stream.notify_all()
        self.cu_intr_status = 0
        self._cu_poll = None

    def _cu(self, name: str) -> ComputeUnit:
        u = self._cu_by_name.get(name)
        if u is None:
            names = ", ".join(u.info.name for u in self._cus) or "none"
            raise DlaError(NvError.BadParameter,
                           f"compute unit '{name}': device config '{self.config.name}' has {names}")
        return u

    def _cu_stream_wait(self, name: str, move: Callable[[ComputeUnit], int], total: int, timeout_s: float,
                        what: str) -> None:
        """Call ``move(unit)`` (bytes moved) until ``total`` moved, waiting for the unit between."""
        if not 0 < timeout_s < 1e6:
            raise DlaError(NvError.BadParameter, f"stream {what} timeout {timeout_s!r} s must be > 0")
        deadline = time.monotonic() + timeout_s
        moved = 0
        irq = False
        with self._lock:
            u = self._cu(name)
            if u.control != "NONE":
                raise DlaError(NvError.NotSupported,
                               f"compute unit '{u.info.name}' is {u.info.m_ip_control}: only AP_CTRL_NONE "
                               "units have streams")
            while True:
                with np.errstate(all="ignore"):
                    moved += move(u)
                irq = self._cu_sync_irq() or irq
                if self.mode == "threaded":
                    self._cu_start_worker(u)
                    u.wake.notify()  # its worker converts what came in, or fills the room made
                if moved >= total:
                    break
                left = deadline - time.monotonic()
                if self.mode == "deterministic" and self._cu_move(None):
                    continue  # the host waits: the clock moves on
                if left <= 0 or self.mode == "deterministic":
                    raise DlaError(NvError.Timeout,
                                   f"compute unit '{u.info.name}': stream {what} of {total} bytes: "
                                   f"{moved} in {timeout_s} s (input {len(u.fifo_in)}, output "
                                   f"{len(u.fifo_out)} bytes waiting)")
                u.stream.wait(left)
        if irq:
            self._raise_irq()

    def _cu_worker(self, u: ComputeUnit) -> None:
        with np.errstate(all="ignore"):  # this thread's setting, for its lifetime
            while True:
                with self._lock:
                    if self._closed:
                        return
                    now = self._cu_now()
                    u.advance(now)
                    irq = self._cu_sync_irq()
                    job = u.take_uncomputed()
                    epoch = u.epoch
                    if job is None and not irq:
                        t = u.next_time(now)
                        nap = WORKER_NAP_S if t is None else min(WORKER_NAP_S, (t - now) / self._cu_hz)
                        if nap > 0:
                            u.wake.wait(nap)
                        continue
                if irq:
                    self._raise_irq()
                if job is not None:
                    u.compute(job)  # outside the lock, as blocks compute
                    with self._lock:
                        if u.epoch == epoch:
                            job.computed = True
