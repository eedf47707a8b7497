"""The SHAVE tiles as a part of :class:`~pydla.hw.device.VirtualDevice`.

The SHAVE registers (dla_regs ``shave_regs_t``, at ``SHAVE_TILES`` = 0x7800) are reached through the
register file's slow path, in front of the compute units' windows: the register file hands this
part's ``bus_read`` / ``bus_write`` the accesses in the SHAVE window (``WINDOW_START`` ..
``WINDOW_END``). On a configuration without tiles
every SHAVE address is a bus error. A new SHAVE interrupt bit sets GLB ``intr_status`` bit 29 and
raises the device's interrupt line (unless bit 29 is masked).

In ``deterministic`` and ``step`` modes the tiles run inside the register write that lets them
progress; in ``threaded`` mode a SHAVE worker thread runs them, so a push returns at once. The worker
holds the device lock except while a tile computes a kernel (:mod:`pydla.hw.shave.unlocked`: what
the SHAVE system shares with the rest of the device, and what a kernel touches alone), so the
engine programs and completes DLA operations meanwhile.

Usage::

    dev = VirtualDevice("full")
    dev.reg_read(R.SHAVE_TILES)        # 2
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.irq import InterruptLine
from pydla.hw.shave.system import ShaveSystem
from pydla.hw.shave.unlocked import DeviceLockRelease
from pydla.hw.state import DeviceState

WORKER_NAP_S = 0.1  # the longest the SHAVE worker sleeps without a kick (it re-checks for close)
QUIESCE_S = 30.0  # the longest a reset waits for an abandoned kernel to stop (as a DLA block's reset)
SHAVE_INTR_BIT = 29  # GLB intr_status: the SHAVE tiles interrupt (see SHAVE_INTR_STATUS)
WINDOW_START = R.SHAVE_TILES
WINDOW_END = R.SHAVE_TILES + R.shave_regs_t.SIZE


class ShaveTiles:
    """SHAVE tiles, DMA and barriers (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

    def __init__(self, state: DeviceState, irq: InterruptLine,
                 trace_cu: Callable[[int, int, int | None, int], None]) -> None:
        self._state = state
        self._lock = state.lock
        self._irq = irq
        self._trace_cu = trace_cu
        cfg = state.config.shave
        # The IP_LAYOUT index of each tile's compute unit: a kernel task is an execution there, so
        # the trace shows one track per tile.
        self._tile_units = {dict(cu.params).get("tile"): i for i, cu in enumerate(state.config.ip_layout)
                            if cu.model == "shave_tile"}
        self.shave = None if cfg is None else ShaveSystem(cfg, state.iommu, state.log.append, self._task)
        self._wake = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)  # a tile stopped computing without the lock
        self._release = DeviceLockRelease(self._lock, self._idle)
        if self.shave is not None:
            self.shave.wait_idle = self._wait_idle
        self._kicked = False
        self._thread: threading.Thread | None = None

    def _task(self, tile: int, task: int, duration_ns: int | None, error: int) -> None:
        """A kernel task started (``duration_ns`` None) or ended on ``tile``: a compute-unit trace
        event of the tile's unit (the device's trace ring, when it is on)."""
        unit = self._tile_units.get(tile)
        if unit is not None:
            self._trace_cu(unit, task & 0xFFFFFFFF, duration_ns, error)

    def _kick(self) -> None:
        """Under the lock, threaded mode: the worker runs what the last write lets run."""
        self._kicked = True
        if self._thread is None and not self._state.closed:
            self._thread = threading.Thread(target=self._worker, daemon=True,
                                            name=f"pydla-dev{self._state.instance}-shave")
            self._thread.start()
            self._state.threads.append(self._thread)
        self._wake.notify()

    def _worker(self) -> None:
        shave = self.shave
        assert shave is not None
        state = self._state
        while True:
            with self._lock:
                while not self._kicked and not state.closed:
                    self._wake.wait(WORKER_NAP_S)
                if state.closed:
                    return
                self._kicked = False
                raises = shave.raises
                shave.run(self._release)  # releases the lock while a tile computes
                irq = self._raised(shave.raises != raises)
            if irq:
                self._irq.signal()

    def _wait_idle(self, done: Callable[[], bool]) -> bool:
        """Under the lock: wait (releasing it) until ``done()``, at most QUIESCE_S."""
        return self._idle.wait_for(done, QUIESCE_S)

    def _raised(self, raised: bool) -> bool:
        """Under the lock: a new SHAVE interrupt bit sets GLB bit 29; True if the line goes up."""
        if not raised:
            return False
        state = self._state
        state.intr_status |= 1 << SHAVE_INTR_BIT
        return not state.intr_mask >> SHAVE_INTR_BIT & 1

    def close(self) -> None:
        if self.shave is not None:
            self.shave.close()

    def reset(self) -> None:
        """Under the lock: a device reset resets the tiles, the DMA and the barriers."""
        if self.shave is not None:
            self.shave.reset()

    def bus_read(self, address: int) -> tuple[int, None]:
        """Under the lock: a read in the SHAVE window, or a bus error."""
        value = self.shave.read(address) if self.shave is not None and address % 4 == 0 else None
        if value is None:
            self._state.bus_errors += 1
            return 0, None
        return value & 0xFFFFFFFF, None

    def bus_write(self, address: int, value: int) -> tuple[None, int]:
        """Under the lock: a write in the SHAVE window, or a bus error; the effect (2: the register
        file raises the line once the lock is released)."""
        threaded = self._state.mode == "threaded"
        raised = None
        if self.shave is not None and address % 4 == 0:
            raised = self.shave.write(address, value, run=not threaded)
        if raised is None:
            self._state.bus_errors += 1
            return None, 0
        if threaded:
            self._kick()
        return None, 2 if self._raised(raised) else 0

