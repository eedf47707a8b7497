"""The virtual device: a register file, functional blocks behind it, device memory, an interrupt.

The host (the KMD, through its portability layer) sees only :meth:`VirtualDevice.reg_write`,
:meth:`VirtualDevice.reg_read`, the memory it maps through the IOMMU, and the interrupt line
(:meth:`VirtualDevice.connect_irq`). The device computes only from what was written there.

It runs in one of three modes (:mod:`pydla.hw.execution` says how each runs): ``deterministic``
(an operation executes inside the register write that enables it, so that a KMD test is
reproducible to the register write), ``step`` (:meth:`VirtualDevice.step` executes one) and
``threaded`` (a thread per block, beside the host, as hardware runs).

The device is made of parts it owns, one concern each, each an object with its own state; what
they share is one :class:`~pydla.hw.state.DeviceState` (the lock, the blocks' registers, the GLB
status registers, the log). ``dev.regs``: the register file and the host's access to it
(:mod:`pydla.hw.regfile`); ``dev.execution``: running operations (:mod:`pydla.hw.execution`);
``dev.irq``: the interrupt line (:mod:`pydla.hw.irq`); ``dev.faults``: fault injection and reset
(:mod:`pydla.hw.faults`); ``dev.units``: the compute units of the configuration's IP_LAYOUT
(:mod:`pydla.hw.compute_units`); ``dev.tiles``: the SHAVE tiles (:mod:`pydla.hw.shave.part`);
``dev.trace_out``: the trace ring (:mod:`pydla.hw.trace_out`). This module builds them, each given
the parts it calls, and keeps the host's surface: the register accesses are the register file's
own bound methods (a dispatch table made once: an access costs one call, as when the device was
one class), the rest delegates.

Usage::

    dev = VirtualDevice("full", mode="deterministic")
    dev.connect_irq(lambda: print(hex(dev.reg_read(R.GLB_INTR_STATUS))))
    dev.reg_write(R.BDMA_D_OP_ENABLE, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.hw.cmdproc import CommandProcessor
from pydla.hw.compute_units import ComputeUnits
from pydla.hw.cu.unit import CuEvent
from pydla.hw.execution import Execution
from pydla.hw.faults import DEVICE_RESET_BIT, RESET_QUIESCE_S, Faults
from pydla.hw.irq import InterruptLine
from pydla.hw.memory import DeviceMemory
from pydla.hw.regfile import RegisterFile
from pydla.hw.shave.part import ShaveTiles
from pydla.hw.state import (
    ENABLED,
    IDLE,
    MMU_FAULT_BIT,
    OP_ENABLE,
    RUNNING,
    S_AREA,
    WINDOW,
    DeviceState,
    RegAccess,
    done_bit,
    error_bit,
)
from pydla.hw.trace_out import TraceOutput
from pydla.target.config import DeviceConfig, load_config

if TYPE_CHECKING:
    from pydla.hw.mcu import Microcontroller

__all__ = [
    "DEVICE_RESET_BIT", "ENABLED", "IDLE", "MMU_FAULT_BIT", "MODES", "OP_ENABLE", "RESET_QUIESCE_S",
    "RUNNING", "S_AREA", "WINDOW", "RegAccess", "VirtualDevice", "done_bit", "error_bit",
]

MODES = ("deterministic", "step", "threaded")


class WriteWords(Protocol):
    """:meth:`RegisterFile.reg_write_words`' signature (its parameter names included)."""

    def __call__(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None: ...


class VirtualDevice:
    """One device instance. See the module docstring."""

    # The dispatch table: the parts' own bound methods, set once in __init__.
    reg_read: Callable[[int], int]
    """Read a register (:meth:`RegisterFile.reg_read <pydla.hw.regfile.RegisterFile.reg_read>`)."""
    reg_write: Callable[[int, int], None]
    """Write a register; an enable runs the operation (deterministic mode) before it returns."""
    reg_write_many: Callable[[Sequence[tuple[int, int]]], None]
    """``reg_write`` of each ``(address, value)`` in order, the lock taken once per run of writes."""
    reg_write_words: WriteWords
    """``reg_write`` of ``values[i]`` to ``addresses[i]``: an operation's program in one store."""
    connect_irq: Callable[[Callable[[], object]], None]
    """Call the handler (no device lock held) whenever an unmasked status bit is set."""
    disconnect_irq: Callable[[Callable[[], object]], None]
    """Stop calling a handler ``connect_irq`` took."""
    step: Callable[[], bool]
    """Step mode: execute the next runnable operation, or move the compute units to their next
    event; False when there is neither."""
    idle: Callable[[], bool]
    """No group of any block is enabled or running."""
    trace_log: Callable[[int, str], None]
    """A ``log`` event in the trace ring (level, text), when its LOG class is on."""

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
        self.state = state = DeviceState(self.config, instance, mode, self.memory)
        self.decoded = state.decoded
        # The parts, each given those it calls (in that order: no part calls one made after it).
        self.trace_out = trace = TraceOutput(state)
        self.log = state.log  # (the trace part's DeviceLog)
        self.irq = irq = InterruptLine(state, trace)
        self.tiles = tiles = ShaveTiles(state, irq, trace.cu)
        self.shave = tiles.shave
        self.units = units = ComputeUnits(state, irq, trace, lambda: tiles.shave)
        self.execution = execution = Execution(state, irq, trace, units)
        self.faults = Faults(state, execution, units, tiles, trace)
        self.regs = regs = RegisterFile(state, execution, self.faults, tiles, units, irq, trace)
        self.cp = cp = CommandProcessor(state, execution, irq, trace)  # (its registers read 0 if absent)
        regs.glb_extra.update(cp.glb_registers())
        regs.doorbell = cp.run
        self.glb_extra = regs.glb_extra
        self.reg_read, self.reg_write = regs.reg_read, regs.reg_write
        self.reg_write_many, self.reg_write_words = regs.reg_write_many, regs.reg_write_words
        self.connect_irq, self.disconnect_irq = irq.connect, irq.disconnect
        self.step, self.idle = execution.step, execution.idle
        self.trace_log = trace.log
        self.mcu: Microcontroller | None = None
        if self.config.headed:  # the microcontroller running the engine scheduler (pydla.hw.mcu)
            from pydla.hw.mcu import Microcontroller  # only when headed: a headless device loads no firmware

            self.mcu = Microcontroller(self)
        execution.start()
        cp.start()

    # -- the GLB status the host and the firmware read (the shared state's) -------------------------

    @property
    def intr_status(self) -> int:
        return self.state.intr_status

    @property
    def intr_mask(self) -> int:
        return self.state.intr_mask

    @property
    def fault(self) -> tuple[int, int, int]:
        """The MMU fault registers: address, context, block."""
        return self.state.fault

    @property
    def ops_done(self) -> int:
        return self.state.ops_done

    @property
    def bus_errors(self) -> int:
        """Accesses that reached no register."""
        return self.state.bus_errors

    @property
    def trace_mask(self) -> int:
        """The trace_class_e classes the device writes to its trace ring now."""
        return self.state.trace_mask

    # -- for tests and driver developers ---------------------------------------------------------

    @property
    def trace(self) -> list[RegAccess] | None:
        """The register accesses recorded since :meth:`record_trace` (None when not recording)."""
        return self.regs.trace

    @trace.setter
    def trace(self, accesses: list[RegAccess] | None) -> None:
        with self.state.lock:
            self.regs.trace = accesses

    def record_trace(self, on: bool = True) -> list[RegAccess]:
        """Start (or stop) recording every register access; returns the list being filled."""
        return self.regs.record_trace(on)

    def inject_hang(self, block: dla_block_e | str, count: int = 1) -> None:
        """The next ``count`` operations of ``block`` start and never finish (until a reset)."""
        self.faults.inject_hang(block, count)

    def inject_wedge(self, block: dla_block_e | str) -> None:
        """``block`` ignores its own bit of the reset register; only a device reset brings it back."""
        self.faults.inject_wedge(block)

    def inject_error(self, block: dla_block_e | str, code: int = int(R.dla_hw_error_e.BAD_CONFIG)) -> None:
        """The next operation of ``block`` fails with ``code`` (a dla_hw_error_e)."""
        self.faults.inject_error(block, code)

    def cu_events(self, name: str) -> list[CuEvent]:
        """The control events of compute unit ``name`` (m_name or instance) in order."""
        return self.units.events(name)

    def cu_log(self, name: str) -> list[str]:
        """Why the unit's recent executions failed, if they did."""
        return self.units.log(name)

    def cu_stream_write(self, name: str, data: bytes, timeout_s: float = 5.0) -> None:
        """Write ``data`` into an AP_CTRL_NONE unit's input stream (:meth:`ComputeUnits.stream_write`)."""
        self.units.stream_write(name, data, timeout_s)

    def cu_stream_read(self, name: str, nbytes: int, timeout_s: float = 5.0) -> bytes:
        """Read ``nbytes`` from an AP_CTRL_NONE unit's output stream (:meth:`ComputeUnits.stream_read`)."""
        return self.units.stream_read(name, nbytes, timeout_s)

    def close(self) -> None:
        if self.mcu is not None:
            self.mcu.close()
        state = self.state
        with state.cond:
            state.closed = True
            state.cond.notify_all()
            for block in state.blocks.values():
                block.wake.notify()
            self.units.wake_all()
        for t in state.threads:
            t.join(timeout=5)
        with state.lock:
            self.tiles.close()
