"""The SHAVE tiles as a part of :class:`~pydla.hw.device.VirtualDevice`.

The SHAVE registers (dla_regs ``shave_regs_t``, at ``SHAVE_TILES`` = 0x7800) are reached through the
register file's slow path, in front of the compute units' windows: this part's ``_cu_read`` /
``_cu_write`` take the SHAVE window and hand everything else on. On a configuration without tiles
every SHAVE address is a bus error. A new SHAVE interrupt bit sets GLB ``intr_status`` bit 29 and
raises the device's interrupt line (unless bit 29 is masked).

In ``deterministic`` and ``step`` modes the tiles run inside the register write that lets them
progress; in ``threaded`` mode a SHAVE worker thread runs them (holding the device lock while a tile
emulates: the host's register accesses wait for the tile's next stop), so a push returns at once.

Usage::

    dev = VirtualDevice("full")
    dev.reg_read(R.SHAVE_TILES)        # 2
"""

from __future__ import annotations

import threading

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.shave.system import ShaveSystem
from pydla.hw.state import DeviceState

WORKER_NAP_S = 0.1  # the longest the SHAVE worker sleeps without a kick (it re-checks for close)
SHAVE_INTR_BIT = 29  # GLB intr_status: the SHAVE tiles interrupt (see SHAVE_INTR_STATUS)
WINDOW_START = R.SHAVE_TILES
WINDOW_END = R.SHAVE_TILES + R.shave_regs_t.SIZE


class ShaveTiles(DeviceState):
    """SHAVE tiles, DMA and barriers (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

    shave: ShaveSystem | None

    def _init_shave(self) -> None:
        cfg = self.config.shave
        # The IP_LAYOUT index of each tile's compute unit: a kernel task is an execution there, so
        # the trace shows one track per tile.
        self._tile_units = {dict(cu.params).get("tile"): i for i, cu in enumerate(self.config.ip_layout)
                            if cu.model == "shave_tile"}
        self.shave = None if cfg is None else ShaveSystem(cfg, self.iommu, self.log.append, self._shave_task)
        self._shave_wake = threading.Condition(self._lock)
        self._shave_kicked = False
        self._shave_thread: threading.Thread | None = None

    def _shave_task(self, tile: int, task: int, duration_ns: int | None, error: int) -> None:
        """A kernel task started (``duration_ns`` None) or ended on ``tile``: a compute-unit trace
        event of the tile's unit (the device's trace ring, when it is on)."""
        unit = self._tile_units.get(tile)
        if unit is not None:
            self.trace_cu(unit, task & 0xFFFFFFFF, duration_ns, error)

    def _shave_kick(self) -> None:
        """Under the lock, threaded mode: the worker runs what the last write lets run."""
        self._shave_kicked = True
        if self._shave_thread is None and not self._closed:
            self._shave_thread = threading.Thread(target=self._shave_worker, daemon=True,
                                                  name=f"pydla-dev{self.instance}-shave")
            self._shave_thread.start()
            self._threads.append(self._shave_thread)
        self._shave_wake.notify()

    def _shave_worker(self) -> None:
        shave = self.shave
        assert shave is not None
        while True:
            with self._lock:
                while not self._shave_kicked and not self._closed:
                    self._shave_wake.wait(WORKER_NAP_S)
                if self._closed:
                    return
                self._shave_kicked = False
                before = shave.intr_status
                shave.run()
                irq = self._shave_irq(bool(shave.intr_status & ~before))
            if irq:
                self._raise_irq()

    def _shave_irq(self, raised: bool) -> bool:
        """Under the lock: a new SHAVE interrupt bit sets GLB bit 29; True if the line goes up."""
        if not raised:
            return False
        self.intr_status |= 1 << SHAVE_INTR_BIT
        return not self.intr_mask >> SHAVE_INTR_BIT & 1

    def _close_shave(self) -> None:
        if self.shave is not None:
            self.shave.close()

    def _shave_reset(self) -> None:
        """Under the lock: a device reset resets the tiles, the DMA and the barriers."""
        if self.shave is not None:
            self.shave.reset()

    def _cu_read(self, address: int) -> tuple[int, None]:
        if WINDOW_START <= address < WINDOW_END:
            value = self.shave.read(address) if self.shave is not None and address % 4 == 0 else None
            if value is None:
                self.bus_errors += 1
                return 0, None
            return value & 0xFFFFFFFF, None
        return super()._cu_read(address)

    def _cu_write(self, address: int, value: int) -> tuple[None, int]:
        if WINDOW_START <= address < WINDOW_END:
            threaded = self.mode == "threaded"
            raised = None
            if self.shave is not None and address % 4 == 0:
                raised = self.shave.write(address, value, run=not threaded)
            if raised is None:
                self.bus_errors += 1
                return None, 0
            if threaded:
                self._shave_kick()
            # 2: the register file raises the line once the lock is released
            return None, 2 if self._shave_irq(raised) else 0
        return super()._cu_write(address, value)
