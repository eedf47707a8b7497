"""The SHAVE tiles as a part of :class:`~pydla.hw.device.VirtualDevice`.

The SHAVE registers (dla_regs ``shave_regs_t``, at ``SHAVE_TILES`` = 0x7800) are reached through the
register file's slow path, in front of the compute units' windows: this part's ``_cu_read`` /
``_cu_write`` take the SHAVE window and hand everything else on. On a configuration without tiles
every SHAVE address is a bus error. A new SHAVE interrupt bit sets GLB ``intr_status`` bit 29 and
raises the device's interrupt line (unless bit 29 is masked).

Usage::

    dev = VirtualDevice("full")
    dev.reg_read(R.SHAVE_TILES)        # 2
"""

from __future__ import annotations

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.shave.system import ShaveSystem
from pydla.hw.state import DeviceState

SHAVE_INTR_BIT = 29  # GLB intr_status: the SHAVE tiles interrupt (see SHAVE_INTR_STATUS)
WINDOW_START = R.SHAVE_TILES
WINDOW_END = R.SHAVE_TILES + R.shave_regs_t.SIZE


class ShaveTiles(DeviceState):
    """SHAVE tiles, DMA and barriers (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

    shave: ShaveSystem | None

    def _init_shave(self) -> None:
        cfg = self.config.shave
        self.shave = None if cfg is None else ShaveSystem(cfg, self.iommu, self.log.append)

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
            raised = self.shave.write(address, value) if self.shave is not None and address % 4 == 0 else None
            if raised is None:
                self.bus_errors += 1
                return None, 0
            if raised:
                self.intr_status |= 1 << SHAVE_INTR_BIT
                if not self.intr_mask >> SHAVE_INTR_BIT & 1:
                    return None, 2  # the register file raises the line once the lock is released
            return None, 0
        return super()._cu_write(address, value)
