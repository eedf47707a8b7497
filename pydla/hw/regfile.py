"""The virtual device's register file and the host's access to it (:class:`RegisterFile`, a part of
:class:`~pydla.hw.device.VirtualDevice`, whose ``reg_read`` / ``reg_write`` / ``reg_write_many`` /
``reg_write_words`` are this part's methods themselves: one call per access).

The register space is a window of ``WINDOW`` bytes per block after the global (GLB) window: in each
block window the S registers (status, the producer/consumer pointer, errors, the completed-operation
count) come first (``S_AREA``), then the D group's configuration registers, of which there are two
copies, the register groups; the pointer's producer bit selects the group a write lands in. Writing
``d_op_enable`` hands the group to execution (:mod:`pydla.hw.execution`); GLB holds the interrupt
status and mask, the MMU fault registers and the reset register (:mod:`pydla.hw.faults`). Addresses
outside the block windows go to the SHAVE tiles' window (:mod:`pydla.hw.shave.part`) or the compute
units' (:mod:`pydla.hw.compute_units`), else they are bus errors.

Every access is looked up in a memo of addresses (``_where``) and, when the device records a trace,
appended to it as a :class:`RegAccess`.

Usage::

    dev.reg_write(R.BDMA_S_POINTER, 1)        # select group 1
    dev.reg_write(R.BDMA_D_OP_ENABLE, 1)
    status = dev.reg_read(R.GLB_INTR_STATUS)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.cmdproc import DOORBELL
from pydla.hw.compute_units import CU_INTR_BIT as _CU_INTR_BIT
from pydla.hw.compute_units import ComputeUnits, CuInterrupt, register_names
from pydla.hw.execution import Execution
from pydla.hw.faults import Faults
from pydla.hw.irq import InterruptLine
from pydla.hw.shave.part import WINDOW_END as _SHAVE_END
from pydla.hw.shave.part import WINDOW_START as _SHAVE_START
from pydla.hw.shave.part import ShaveTiles
from pydla.hw.state import ENABLED, IDLE, OP_ENABLE, S_AREA, WINDOW, Block, DeviceState, RegAccess
from pydla.hw.trace_out import TraceOutput

# Offsets of the S registers inside a block window (the same in every block).
_S = {name: R.REGISTERS[f"BDMA_S_{name.upper()}"] - R.BDMA_S_STATUS
      for name in ("status", "pointer", "error", "error_group", "ops_done")}
# What a register write changed: an operation enabled, interrupt status, the command processor's
# doorbell rung (pydla.hw.cmdproc.DOORBELL: the job runs in the writing thread once the lock is released)
_ENABLED, _STATUS, _DOORBELL = 1, 2, DOORBELL

_S_STATUS, _S_POINTER, _S_ERROR, _S_ERROR_GROUP, _S_OPS_DONE = (
    _S["status"], _S["pointer"], _S["error"], _S["error_group"], _S["ops_done"])
NAMES = {addr: name for name, addr in R.REGISTERS.items()}
_GLB_INTR_STATUS, _GLB_OPS_DONE, _GLB_CU_INTR_STATUS = R.GLB_INTR_STATUS, R.GLB_OPS_DONE, R.GLB_CU_INTR_STATUS
_TRACE_REG_WRITE = int(R.trace_class_e.REG_WRITE)  # the class of reg_write events (pydla.hw.trace_out)
GlbRegister = tuple[Callable[[], int], Callable[[int], int]]  # (read, write); a write returns its effect


class RegisterFile:
    """The host's register access (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

    def __init__(self, state: DeviceState, execution: Execution, faults: Faults, tiles: ShaveTiles,
                 units: ComputeUnits, irq: InterruptLine, trace: TraceOutput) -> None:
        self._state = state
        self._lock = state.lock
        self._blocks = state.blocks
        self._execution = execution
        self._faults = faults
        self._tiles = tiles
        self._units = units
        self._irq = irq
        self._trace_out = trace
        self._deterministic = state.mode == "deterministic"
        # _locate's memo: address -> (block or None for the global window, offset), or None if invalid
        self._where: dict[int, tuple[Block | None, int] | None] = {}
        # reg_write_words' memo: an address array's bytes -> (block, word indices) when every address
        # is a configuration register of that block's D group, once each; else None
        self._word_targets: dict[bytes, tuple[Block, npt.NDArray[np.intp]] | None] = {}
        self.trace: list[RegAccess] | None = None  # every access, while recorded (record_trace)
        self.names = dict(NAMES) | register_names(units.units)  # register names for the trace
        # GLB registers served by a part of the device (the microcontroller's, the trace ring's):
        # address -> (read, write); a write returns what it changed (0, or a status change to act on).
        self.glb_extra: dict[int, GlbRegister] = trace.glb_registers()
        # The command processor's job, run when a write rang its doorbell (pydla.hw.cmdproc; set by
        # the device when it has one)
        self.doorbell: Callable[[], None] = lambda: None

    def record_trace(self, on: bool = True) -> list[RegAccess]:
        """Start (or stop) recording every register access; returns the list being filled."""
        with self._lock:
            self.trace = [] if on else None
            return self.trace if self.trace is not None else []

    def reg_read(self, address: int) -> int:
        try:
            with self._lock:
                value, group = self._read(address)
                if self.trace is not None:
                    name = self.names.get(address, f"{address:#x}")
                    self.trace.append(RegAccess("R", address, name, value, group))
                return value
        except CuInterrupt as e:
            # A read of a compute unit moved its clock on and it interrupts: the line is raised
            # without the lock, as after any event (a try costs nothing on the fast path).
            with self._lock:
                if self.trace is not None:
                    name = self.names.get(address, f"{address:#x}")
                    self.trace.append(RegAccess("R", address, name, e.value, None))
            self._irq.signal()
            return e.value

    def reg_write(self, address: int, value: int) -> None:
        value &= 0xFFFFFFFF
        with self._lock:
            group, effect = self._write(address, value)
            if self.trace is not None:
                self.trace.append(RegAccess("W", address, self.names.get(address, f"{address:#x}"), value,
                                            group))
            if self._state.trace_mask & _TRACE_REG_WRITE:
                self._trace_write(address, value, group)
            execution = self._execution
            kick = effect == _ENABLED and self._deterministic and not execution.kicking
            if kick:
                execution.kicking = True  # this thread runs what is runnable, others' enables included
        if kick:
            execution.run_runnable()
        elif effect == _STATUS:
            self._irq.signal()
        elif effect == _DOORBELL:
            self.doorbell()

    def reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        """``reg_write`` of each ``(address, value)`` in order, taking the lock once per run of writes
        with no side effect (an enable or an interrupt change is acted on right after its write)."""
        i, n = 0, len(writes)
        where_of = self._where.get
        state, execution = self._state, self._execution
        while i < n:
            kick = status = doorbell = False
            with self._lock:
                # the fast path stores without recording: not while accesses are recorded or traced
                plain = self.trace is None and not state.trace_mask & _TRACE_REG_WRITE
                while i < n:
                    address, value = writes[i]
                    i += 1
                    value &= 0xFFFFFFFF
                    # Most writes are a configuration register of a block's D group (a program is
                    # some 40 of them): stored here directly, without the general path's calls.
                    where = where_of(address)
                    if where is not None and plain:
                        block, offset = where
                        if block is not None and offset >= S_AREA and offset != OP_ENABLE:
                            block.words[block.producer][offset >> 2] = value
                            continue
                    group, effect = self._write(address, value)
                    if self.trace is not None:
                        self.trace.append(RegAccess("W", address, self.names.get(address, f"{address:#x}"),
                                                    value, group))
                    if state.trace_mask & _TRACE_REG_WRITE:
                        self._trace_write(address, value, group)
                    if effect == _ENABLED and self._deterministic and not execution.kicking:
                        execution.kicking = kick = True
                        break
                    if effect == _STATUS:
                        status = True
                        break
                    if effect == _DOORBELL:
                        doorbell = True
                        break
            if kick:
                execution.run_runnable()
            elif status:
                self._irq.signal()
            elif doorbell:
                self.doorbell()

    def reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None:
        """``reg_write`` of ``values[i]`` to ``addresses[i]``, in order. When every address is a
        configuration register of one block's D group (an operation's program) and no trace is
        recorded, the values are stored in one numpy assignment under one lock; otherwise the writes
        go one by one, with their effects."""
        key = addresses.tobytes()
        if key in self._word_targets:
            target = self._word_targets[key]
        else:
            target = self._word_target(addresses.tolist())
            if len(self._word_targets) >= 1 << 12:  # the programs of the loaded tasks; bounded
                self._word_targets.clear()
            self._word_targets[key] = target
        if target is not None and len(values) == len(target[1]):
            block, index = target
            with self._lock:
                if self.trace is None and not self._state.trace_mask & _TRACE_REG_WRITE:
                    block.word_arrays[block.producer][index] = values
                    return
        self.reg_write_many(list(zip(addresses.tolist(), values.tolist(), strict=True)))

    def _trace_write(self, address: int, value: int, group: int | None) -> None:
        """Under the lock: a reg_write event in the device's trace ring (block 255: not a block's)."""
        where = self._where.get(address)
        block = where[0] if where is not None else None
        self._trace_out.reg_write(address, value, block.index if block is not None else 0xFF,
                             0xFF if group is None else group)

    def _word_target(self, addresses: list[int]) -> tuple[Block, npt.NDArray[np.intp]] | None:
        where = [self._locate(a) for a in addresses]
        if not where or len(set(addresses)) != len(addresses):
            return None
        block = where[0][0] if where[0] is not None else None
        if block is None or any(w is None or w[0] is not block or w[1] < S_AREA or w[1] == OP_ENABLE
                                for w in where):
            return None
        return block, np.array([w[1] >> 2 for w in where if w is not None], dtype=np.intp)

    def _locate(self, address: int) -> tuple[Block | None, int] | None:
        if address in self._where:
            return self._where[address]
        if address % 4 or not 0 <= address < WINDOW * 7:
            where = None
        else:
            window, offset = divmod(address, WINDOW)
            block = self._blocks.get(window - 1) if window else None
            where = (block, offset) if window == 0 or block is not None else None
        if len(self._where) < 1 << 16:  # the register window is finite; a bad address stream is not
            self._where[address] = where
        return where

    def _read(self, address: int) -> tuple[int, int | None]:
        try:
            where = self._where[address]  # the memo, without a call
        except KeyError:
            where = self._locate(address)
        if where is None:  # the SHAVE window, a compute unit's, or a bus error
            if _SHAVE_START <= address < _SHAVE_END:
                return self._tiles.bus_read(address)
            return self._units.bus_read(address)
        block, offset = where
        if block is None:
            return self._read_glb(address), None
        if offset < S_AREA:
            if offset == _S_POINTER:
                return block.producer | (block.consumer << 16), None
            if offset == _S_STATUS:
                return block.state[0] | (block.state[1] << 16), None
            if offset == _S_ERROR:
                return block.error, None
            if offset == _S_ERROR_GROUP:
                return block.error_group, None
            if offset == _S_OPS_DONE:
                return block.ops_done & 0xFFFFFFFF, None
            return 0, None
        return block.words[block.producer][offset >> 2], block.producer

    def _read_glb(self, address: int) -> int:
        state = self._state
        if address == _GLB_INTR_STATUS:  # read by every interrupt handler: first
            return state.intr_status
        if address == _GLB_OPS_DONE:  # read at every job start
            return state.ops_done & 0xFFFFFFFF
        if address == _GLB_CU_INTR_STATUS:
            return self._units.read_status()
        extra = self.glb_extra.get(address)
        if extra is not None:
            return extra[0]()
        fault_addr, fault_ctx, fault_block = state.fault
        return {
            R.GLB_HW_VERSION: state.config.hw_version,
            R.GLB_CONFIG: state.config.block_mask,
            R.GLB_INTR_MASK: state.intr_mask,
            R.GLB_MMU_FAULT_ADDR_LO: fault_addr & 0xFFFFFFFF,
            R.GLB_MMU_FAULT_ADDR_HI: fault_addr >> 32,
            R.GLB_MMU_FAULT_CTX: fault_ctx,
            R.GLB_MMU_FAULT_BLOCK: fault_block,
        }.get(address, 0)

    def _write(self, address: int, value: int) -> tuple[int | None, int]:
        """Under the lock: apply a write; return the D group written and what it changed."""
        try:
            where = self._where[address]  # the memo, without a call
        except KeyError:
            where = self._locate(address)
        if where is None:  # the SHAVE window, a compute unit's, or a bus error
            if _SHAVE_START <= address < _SHAVE_END:
                return self._tiles.bus_write(address, value)
            return self._units.bus_write(address, value)
        block, offset = where
        if block is None:
            return None, self._write_glb(address, value)
        if offset < S_AREA:
            if offset == _S["pointer"]:
                block.producer = value & 1
            return None, 0
        group = block.producer
        block.words[group][offset >> 2] = value
        if offset == OP_ENABLE:
            if value & 1 and block.state[group] == IDLE:
                block.state[group] = ENABLED
                execution = self._execution  # (Execution.enable, inline: an enable per operation)
                execution.pending.append((block, group))
                if execution.threaded:
                    execution.wake(block)
                return group, _ENABLED
            if not value & 1 and block.state[group] == ENABLED:
                block.state[group] = IDLE
                pending = self._execution.pending
                if (block, group) in pending:
                    pending.remove((block, group))
        return group, 0

    def _write_glb(self, address: int, value: int) -> int:
        state = self._state
        if address == _GLB_INTR_STATUS:  # written by every interrupt handler: first
            state.intr_status &= ~value
            if self._units.intr_status:  # bit 30 stays while a compute unit's bit does
                state.intr_status |= 1 << _CU_INTR_BIT
            return 0
        if address == R.GLB_INTR_MASK:
            state.intr_mask = value
            return _STATUS  # unmasking may expose pending status
        if address == R.GLB_INTR_SET:
            state.intr_status |= value
            return _STATUS
        if address == R.GLB_RESET:
            self._faults.reset(value)
        elif address == _GLB_CU_INTR_STATUS:
            return self._units.ack(value)
        else:
            extra = self.glb_extra.get(address)
            if extra is not None:
                return extra[1](value)
        return 0
