"""The virtual device's register file and the host's access to it.

The register space is a window of ``WINDOW`` bytes per block after the global (GLB) window: in each
block window the S registers (status, the producer/consumer pointer, errors, the completed-operation
count) come first (``S_AREA``), then the D group's configuration registers, of which there are two
copies, the register groups; the pointer's producer bit selects the group a write lands in. Writing
``d_op_enable`` hands the group to execution (:mod:`pydla.hw.execution`); GLB holds the interrupt
status and mask, the MMU fault registers and the reset register (:mod:`pydla.hw.faults`).

Every access is looked up in a memo of addresses (``_where``) and, when the device records a trace,
appended to it as a :class:`RegAccess`.

Usage::

    dev.reg_write(R.BDMA_S_POINTER, 1)        # select group 1
    dev.reg_write(R.BDMA_D_OP_ENABLE, 1)
    status = dev.reg_read(R.GLB_INTR_STATUS)
"""

from __future__ import annotations

import collections
import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.hw.compute_units import CU_INTR_BIT as _CU_INTR_BIT
from pydla.hw.compute_units import CuInterrupt
from pydla.hw.state import DeviceState

WINDOW = 0x1000
S_AREA = 0x40
OP_ENABLE = R.BDMA_D_OP_ENABLE - R.BDMA_S_STATUS  # the same in every block window
# Offsets of the S registers inside a block window (the same in every block).
_S = {name: R.REGISTERS[f"BDMA_S_{name.upper()}"] - R.BDMA_S_STATUS
      for name in ("status", "pointer", "error", "error_group", "ops_done")}
IDLE, ENABLED, RUNNING = (int(R.group_state_e.IDLE), int(R.group_state_e.ENABLED),
                          int(R.group_state_e.RUNNING))
MMU_FAULT_BIT = 31
_ENABLED, _STATUS = 1, 2  # what a register write changed: an operation enabled, interrupt status

_S_STATUS, _S_POINTER, _S_ERROR, _S_ERROR_GROUP, _S_OPS_DONE = (
    _S["status"], _S["pointer"], _S["error"], _S["error_group"], _S["ops_done"])
_REG_TYPES = {b: getattr(R, f"{b.name.lower()}_regs_t") for b in dla_block_e}
_NAMES = {addr: name for name, addr in R.REGISTERS.items()}
SDP_SRC_MODE = R.SDP_D_SRC_MODE - R.SDP_S_STATUS
_GLB_INTR_STATUS, _GLB_OPS_DONE, _GLB_CU_INTR_STATUS = R.GLB_INTR_STATUS, R.GLB_OPS_DONE, R.GLB_CU_INTR_STATUS
_TRACE_REG_WRITE = int(R.trace_class_e.REG_WRITE)  # the class of reg_write events (pydla.hw.trace_out)


def done_bit(block: int, group: int) -> int:
    return 1 << (2 * block + group)


def error_bit(block: int, group: int) -> int:
    return 1 << (16 + 2 * block + group)


@dataclass(frozen=True)
class RegAccess:
    """One entry of the register trace: R or W, the register's name, the value, the D group."""

    op: str
    address: int
    name: str
    value: int
    group: int | None

    def __str__(self) -> str:
        g = f"[g{self.group}]" if self.group is not None else ""
        return f"{self.op} {self.name}{g} = {self.value:#x}"


class Block:
    """One block's registers: its two D groups (as bytes, 32-bit words and numpy arrays) and its
    S state (group states, pointer, error, completed operations)."""

    def __init__(self, kind: dla_block_e, lock: threading.RLock) -> None:
        self.kind = kind
        # Its worker thread waits here (threaded mode): an enable wakes only the block it concerns,
        # not every block's thread.
        self.wake = threading.Condition(lock)
        self.index = int(kind)
        self.regs_type = _REG_TYPES[kind]
        self.groups = [bytearray(WINDOW), bytearray(WINDOW)]
        # The same bytes as 32-bit registers, in the host's order as the ctypes snapshot reads them;
        # and as numpy arrays, for a program written in one store (reg_write_words).
        self.words = [memoryview(g).cast("I") for g in self.groups]
        self.word_arrays = [np.frombuffer(g, dtype=np.uint32) for g in self.groups]
        self.regs_size = ctypes.sizeof(self.regs_type)  # the bytes a decoded group is keyed by
        self.reset()
        self.ops_done = 0
        self.hangs = 0
        self.injected_errors: collections.deque[int] = collections.deque()
        self.epoch = 0
        self.wedged = False  # ignores its block-reset bit (fault injection); a device reset clears it

    def reset(self) -> None:
        self.state = [IDLE, IDLE]
        self.producer = 0
        self.consumer = 0
        self.error = 0
        self.error_group = 0

    def reg(self, group: int, offset: int) -> int:
        value: int = self.words[group][offset >> 2]
        return value

    def snapshot(self, group: int) -> Any:
        return self.regs_type.from_buffer_copy(self.groups[group])


class RegisterFile(DeviceState):
    """The host's register access (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

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
                    name = self._names.get(address, f"{address:#x}")
                    self.trace.append(RegAccess("R", address, name, value, group))
                return value
        except CuInterrupt as e:
            # A read of a compute unit moved its clock on and it interrupts: the line is raised
            # without the lock, as after any event (a try costs nothing on the fast path).
            self._raise_irq()
            return e.value

    def reg_write(self, address: int, value: int) -> None:
        value &= 0xFFFFFFFF
        with self._lock:
            group, effect = self._write(address, value)
            if self.trace is not None:
                self.trace.append(RegAccess("W", address, self._names.get(address, f"{address:#x}"), value,
                                            group))
            if self.trace_mask & _TRACE_REG_WRITE:
                self._trace_write(address, value, group)
            kick = effect == _ENABLED and self.mode == "deterministic" and not self._kicking
            if kick:
                self._kicking = True  # this thread runs what is runnable, others' enables included
        if kick:
            self._run_runnable()
        elif effect == _STATUS:
            self._raise_irq()

    def reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        """``reg_write`` of each ``(address, value)`` in order, taking the lock once per run of writes
        with no side effect (an enable or an interrupt change is acted on right after its write)."""
        i, n = 0, len(writes)
        where_of = self._where.get
        while i < n:
            kick = status = False
            with self._lock:
                # the fast path stores without recording: not while accesses are recorded or traced
                plain = self.trace is None and not self.trace_mask & _TRACE_REG_WRITE
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
                        self.trace.append(RegAccess("W", address, self._names.get(address, f"{address:#x}"),
                                                    value, group))
                    if self.trace_mask & _TRACE_REG_WRITE:
                        self._trace_write(address, value, group)
                    if effect == _ENABLED and self.mode == "deterministic" and not self._kicking:
                        self._kicking = kick = True
                        break
                    if effect == _STATUS:
                        status = True
                        break
            if kick:
                self._run_runnable()
            elif status:
                self._raise_irq()

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
                if self.trace is None and not self.trace_mask & _TRACE_REG_WRITE:
                    block.word_arrays[block.producer][index] = values
                    return
        self.reg_write_many(list(zip(addresses.tolist(), values.tolist(), strict=True)))

    def _trace_write(self, address: int, value: int, group: int | None) -> None:
        """Under the lock: a reg_write event in the device's trace ring (block 255: not a block's)."""
        where = self._where.get(address)
        block = where[0] if where is not None else None
        self.trace_reg_write(address, value, block.index if block is not None else 0xFF,
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
        if where is None:
            return self._cu_read(address)  # a compute unit's window, or a bus error
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
        if address == _GLB_INTR_STATUS:  # read by every interrupt handler: first
            return self.intr_status
        if address == _GLB_OPS_DONE:  # read at every job start
            return self.ops_done & 0xFFFFFFFF
        if address == _GLB_CU_INTR_STATUS:
            return self._cu_read_status()
        extra = self.glb_extra.get(address)
        if extra is not None:
            return extra[0]()
        fault_addr, fault_ctx, fault_block = self.fault
        return {
            R.GLB_HW_VERSION: self.config.hw_version,
            R.GLB_CONFIG: self.config.block_mask,
            R.GLB_INTR_MASK: self.intr_mask,
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
        if where is None:
            return self._cu_write(address, value)  # a compute unit's window, or a bus error
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
                self._pending.append((block, group))
                if self._threads:
                    self._wake(block)
                return group, _ENABLED
            if not value & 1 and block.state[group] == ENABLED:
                block.state[group] = IDLE
                if (block, group) in self._pending:
                    self._pending.remove((block, group))
        return group, 0

    def _write_glb(self, address: int, value: int) -> int:
        if address == _GLB_INTR_STATUS:  # written by every interrupt handler: first
            self.intr_status &= ~value
            if self.cu_intr_status:  # bit 30 stays while a compute unit's bit does
                self.intr_status |= 1 << _CU_INTR_BIT
            return 0
        if address == R.GLB_INTR_MASK:
            self.intr_mask = value
            return _STATUS  # unmasking may expose pending status
        if address == R.GLB_INTR_SET:
            self.intr_status |= value
            return _STATUS
        if address == R.GLB_RESET:
            self._reset(value)
        elif address == _GLB_CU_INTR_STATUS:
            return self._cu_ack(value)
        else:
            extra = self.glb_extra.get(address)
            if extra is not None:
                return extra[1](value)
        return 0
