"""The virtual device: a register file, functional blocks behind it, device memory, an interrupt.

The host (the KMD, through its portability layer) sees only :meth:`VirtualDevice.reg_write`,
:meth:`VirtualDevice.reg_read`, the memory it maps through the IOMMU, and the interrupt line
(:meth:`VirtualDevice.connect_irq`). The device computes only from what was written there.

It runs in one of three modes (:mod:`pydla.hw.execution` says how each runs): ``deterministic``
(an operation executes inside the register write that enables it, so that a KMD test is
reproducible to the register write), ``step`` (:meth:`VirtualDevice.step` executes one) and
``threaded`` (a thread per block, beside the host, as hardware runs).

The device is made of parts, one concern each (see :mod:`pydla.hw.state`): the register file and
the host's access to it (:mod:`pydla.hw.regfile`), execution and the interrupt line
(:mod:`pydla.hw.execution`), fault injection and reset (:mod:`pydla.hw.faults`), the compute units
of the configuration's IP_LAYOUT (:mod:`pydla.hw.compute_units`). This module puts them together
and creates the state they share.

Usage::

    dev = VirtualDevice("full", mode="deterministic")
    dev.connect_irq(lambda: print(hex(dev.reg_read(R.GLB_INTR_STATUS))))
    dev.reg_write(R.BDMA_D_OP_ENABLE, 1)
"""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from pydla.errors import DlaError, NvError
from pydla.hw.compute_units import ComputeUnits
from pydla.hw.decoded import DecodedCache
from pydla.hw.execution import Execution
from pydla.hw.faults import DEVICE_RESET_BIT, RESET_QUIESCE_S, FaultsAndReset
from pydla.hw.memory import DeviceMemory
from pydla.hw.regfile import (
    _NAMES,
    ENABLED,
    IDLE,
    MMU_FAULT_BIT,
    OP_ENABLE,
    RUNNING,
    S_AREA,
    WINDOW,
    Block,
    RegAccess,
    RegisterFile,
    done_bit,
    error_bit,
)
from pydla.hw.shave.part import ShaveTiles
from pydla.hw.trace_out import TraceOutput
from pydla.target.config import DeviceConfig, load_config

if TYPE_CHECKING:
    from pydla.hw.mcu import Microcontroller

__all__ = [
    "DEVICE_RESET_BIT", "ENABLED", "IDLE", "MMU_FAULT_BIT", "MODES", "OP_ENABLE", "RESET_QUIESCE_S",
    "RUNNING", "S_AREA", "WINDOW", "RegAccess", "VirtualDevice", "done_bit", "error_bit",
]

MODES = ("deterministic", "step", "threaded")


# ShaveTiles before ComputeUnits: it takes the SHAVE register window of the slow path first.
class VirtualDevice(RegisterFile, Execution, FaultsAndReset, ShaveTiles, ComputeUnits, TraceOutput):
    """One device instance. See the module docstring."""

    def __init__(self, config: DeviceConfig | str | Path = "full", *, instance: int = 0,
                 mode: str = "deterministic", memory: DeviceMemory | None = None) -> None:
        self.config = load_config(config)
        if mode not in MODES:
            raise DlaError(NvError.BadParameter, f"device mode '{mode}': choose one of {', '.join(MODES)}")
        if not 0 <= instance < self.config.instances:
            raise DlaError(NvError.BadParameter,
                           f"device instance {instance}: config '{self.config.name}' has "
                           f"{self.config.instances}")
        self.instance = instance
        self.mode = mode
        self.memory = memory or DeviceMemory(self.config)
        self.iommu = self.memory.iommu
        # _locate's memo: address -> (block or None for the global window, offset), or None if invalid
        self._where = {}
        # reg_write_words' memo: an address array's bytes -> (block, word indices) when every address
        # is a configuration register of that block's D group, once each; else None
        self._word_targets = {}
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # an operation finished (reset waits on it)
        self._quiescing = 0  # resets waiting on _cond: an operation's end notifies only then
        self._blocks = {int(b): Block(b, self._lock) for b in self.config.blocks}
        self._pending = collections.deque()
        self._running = []  # operations computing now (hung ones excluded)
        self._irq_handlers = []
        self._kicking = False
        self._closed = False
        self.intr_mask = 0
        self.intr_status = 0
        self.fault = (0, 0, 0)  # address, context, block
        self.ops_done = 0
        self.bus_errors = 0
        self.log = collections.deque(maxlen=256)
        self.trace = None
        self._precisions = tuple(int(p) for p in self.config.precisions)
        self.decoded = DecodedCache(self.iommu, self._precisions)
        self._threads = []
        self._names = dict(_NAMES)
        self.glb_extra = {}
        self._init_trace()
        self._init_cus()
        self._init_shave()
        self.mcu: Microcontroller | None = None
        if self.config.headed:  # the microcontroller running the engine scheduler (pydla.hw.mcu)
            from pydla.hw.mcu import Microcontroller  # here: the firmware imports the KMD, which imports this

            self.mcu = Microcontroller(self)
        if mode == "threaded":
            for block in self._blocks.values():
                t = threading.Thread(target=self._worker, args=(block,), daemon=True,
                                     name=f"pydla-dev{instance}-{block.kind.name}")
                t.start()
                self._threads.append(t)

    def _reset(self, bits: int) -> None:
        super()._reset(bits)
        if bits >> DEVICE_RESET_BIT & 1:
            self._shave_reset()  # the SHAVE tiles are reset with the device (SHAVE_RESET alone)
            self._trace_reset()  # and tracing stops (its registers read 0)

    def close(self) -> None:
        if self.mcu is not None:
            self.mcu.close()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            for block in self._blocks.values():
                block.wake.notify()
            for unit in self._cus:
                unit.wake.notify()
                unit.stream.notify_all()
        for t in self._threads:
            t.join(timeout=5)
        with self._lock:
            self._close_shave()
