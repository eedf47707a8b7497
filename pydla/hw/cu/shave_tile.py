"""A SHAVE tile as an AP_CTRL_HS compute unit (the model ``shave_tile``).

A configuration with SHAVE tiles lists each tile in its IP_LAYOUT (``"model": "shave_tile",
"tile": N``, AP_CTRL_HS): the same tile the SHAVE registers drive (:mod:`pydla.hw.shave`), seen as
XRT sees a kernel. One execution runs one ActKernelTask, whose device address is in argument words
0-1 (low, high; in the unit's context, its ``ctx`` register), to its end: ap_done when its kernel
returned, the unit's ``error`` register when the kernel faulted (the tile's error, named in the
device log). The tile must already run its runtime kernel and be idle (SHAVE protocol steps 1-2:
the host starts it with its stack), and the task must wait on no barrier: a unit's executions are
ordered by the execution model, not by barriers.

Usage (a KMD): ``kmd.cu_submit(ctx, "tile0", [CuBuffer(task_handle)])``
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.target.cu_model import ComputeUnitModel, CuArgs, CuError, UnitMemory

if TYPE_CHECKING:
    from pydla.hw.shave.system import ShaveSystem
    from pydla.target.ip_layout import ComputeUnitInfo


class ShaveTileUnit(ComputeUnitModel):
    """See the module docstring."""

    def __init__(self, info: ComputeUnitInfo, params: Mapping[str, Any]) -> None:
        tile = params.get("tile")
        if type(tile) is not int or not 0 <= tile < 64:
            raise DlaError(NvError.BadValue, f"compute unit '{info.name}': model 'shave_tile' needs "
                                             f"'tile': the tile's index (0..63), not {tile!r}")
        self.tile = tile
        self.name = info.name
        self._system: Callable[[], ShaveSystem | None] = lambda: None
        self._lock: threading.RLock | None = None

    def bind(self, system: Callable[[], ShaveSystem | None], lock: threading.RLock) -> None:
        """The device's SHAVE system (looked up at each execution) and its lock."""
        self._system, self._lock = system, lock

    def execute(self, args: CuArgs, memory: UnitMemory) -> None:
        system = self._system()
        if system is None or self.tile >= system.config.tiles:
            have = 0 if system is None else system.config.tiles
            raise CuError(int(R.dla_hw_error_e.UNSUPPORTED),
                          f"'{self.name}': the device has {have} SHAVE tile(s), no tile {self.tile}")
        assert self._lock is not None
        with self._lock:  # the tile is the SHAVE system's: one user at a time
            why = system.run_task(self.tile, memory.ctx, args.u64(0))
        if why is not None:
            raise CuError(int(R.dla_hw_error_e.BAD_CONFIG), why)
