"""The state the parts of the virtual device share, and the register layout of a block.

The device (:class:`~pydla.hw.device.VirtualDevice`) is made of parts, each an object with one
concern and its own state: the register file the host reads and writes (:mod:`pydla.hw.regfile`),
the execution of operations (:mod:`pydla.hw.execution`), the interrupt line (:mod:`pydla.hw.irq`),
fault injection and reset (:mod:`pydla.hw.faults`), the compute units (:mod:`pydla.hw.compute_units`),
the SHAVE tiles (:mod:`pydla.hw.shave.part`) and the trace ring (:mod:`pydla.hw.trace_out`). What
more than one of them reads or writes is here, in one :class:`DeviceState`: the lock, the blocks'
registers (:class:`Block`), the GLB status registers several parts set, the device log.

Usage::

    state = DeviceState(load_config("full"), 0, "deterministic", DeviceMemory(config))
    with state.lock:
        state.intr_status |= done_bit(int(dla_block_e.BDMA), 0)
"""

from __future__ import annotations

import collections
import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.runtime import Record
from pydla.hw.decoded import DecodedCache
from pydla.hw.memory import DeviceMemory
from pydla.target.config import DeviceConfig

WINDOW = 0x1000
S_AREA = 0x40
OP_ENABLE = R.BDMA_D_OP_ENABLE - R.BDMA_S_STATUS  # the same in every block window
IDLE, ENABLED, RUNNING = (int(R.group_state_e.IDLE), int(R.group_state_e.ENABLED),
                          int(R.group_state_e.RUNNING))
MMU_FAULT_BIT = 31
_REG_TYPES: dict[dla_block_e, type[Record]] = {
    b: getattr(R, f"{b.name.lower()}_regs_t") for b in dla_block_e}


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

    def snapshot(self, group: int) -> Record:
        return self.regs_type.from_buffer_copy(self.groups[group])


class DeviceState:
    """What the parts share. The lock guards all of it (reentrant: a part's method under the lock
    calls another's); ``cond`` is notified when an operation ends or the device closes."""

    def __init__(self, config: DeviceConfig, instance: int, mode: str, memory: DeviceMemory) -> None:
        self.config = config
        self.instance = instance
        self.mode = mode
        self.memory = memory
        self.iommu = memory.iommu
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.blocks = {int(b): Block(b, self.lock) for b in config.blocks}
        self.decoded = DecodedCache(self.iommu, tuple(int(p) for p in config.precisions))
        self.closed = False
        self.threads: list[threading.Thread] = []  # the workers close() joins
        # GLB registers that several parts set: the interrupt status (every part that interrupts)
        # and mask, the MMU fault registers (execution sets them, a reset clears them), the
        # completed operations, the accesses that reached no register.
        self.intr_status = 0
        self.intr_mask = 0
        self.fault = (0, 0, 0)  # address, context, block
        self.ops_done = 0
        self.bus_errors = 0
        self.trace_mask = 0  # the trace_class_e classes written now (pydla.hw.trace_out sets it)
        # The device's last lines; the trace part makes it a DeviceLog (lines also go to its ring).
        self.log: collections.deque[str] = collections.deque(maxlen=256)
