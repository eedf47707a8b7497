"""The parts of the NVDLA register file that hold state: a block's two register groups with its
producer and consumer pointers, the LUT RAM of SDP and CDP, BDMA's transfer queue; and the records the
register file hands out (an operation launched, a fault).

The group rules are NVIDIA's RTL's (``NV_NVDLA_*_reg.v``): a D register write goes to the group
``S_POINTER.PRODUCER`` selects, and is dropped while that group's ``OP_EN`` is set; writing
``D_OP_ENABLE`` with bit 0 set enables the group (a write to an enabled group's ``OP_EN`` changes
nothing); a group's ``S_STATUS`` is IDLE without ``OP_EN``, RUNNING when it is the consumer, PENDING
otherwise; when the consumer group's operation is done its ``OP_EN`` clears and the consumer flips.

Usage::

    unit = GroupedUnit("PDP", V1.nvdla_v1_pdp_t, V1.REGISTER_INFO, 0xD000)
    unit.producer = 1
    unit.store(1, 0x10, 0x7)            # PDP D_DATA_CUBE_IN_WIDTH of group 1
    view = unit.snapshot(1)             # a V1.nvdla_v1_pdp_t copy: view.d_data_cube_in_width.cube_in_width
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.registers import RegisterInfo
from pydla.deviceapi.runtime import Record

WINDOW = 0x1000
IDLE, RUNNING, PENDING = 0, 1, 2
LE_ENTRIES, LO_ENTRIES = 65, 257
BDMA_SLOTS = 20  # BDMA's transfer queue (STATUS.FREE_SLOT at reset)


@dataclass(frozen=True)
class Launch:
    """An operation whose register groups are all enabled: what the device is to execute.

    ``views`` holds, per block taking part, a copy of that block's register window for the group it
    executes (``views["PDP"].d_pooling_kernel_cfg.kernel_width``): the D registers of that group and
    the block's single registers. ``groups`` says which group of each block; ``group`` is the group of
    the block whose done interrupt reports it (CACC for a convolution, the core block for SDP, PDP and
    CDP, BDMA's launch group). BDMA's ``transfers`` are the queued transfers (copies of its window as
    each was queued); SDP and CDP carry their LUT tables (``le``, ``lo``: 16-bit entries).
    """

    processor: str  # BDMA, CONV, SDP, PDP, CDP or RUBIK
    group: int
    views: dict[str, Record]
    groups: dict[str, int]
    transfers: tuple[Record, ...] = ()
    lut_le: tuple[int, ...] = ()
    lut_lo: tuple[int, ...] = ()


@dataclass(frozen=True)
class Fault:
    """Something the register file refused or could not do: a bus error (an access to no register, a
    value that is not 32 bits), a write to an enabled group, a queue overflow, a failed operation."""

    kind: str  # "bus error", "busy group", "queue full", "busy launch", "lut range", "operation failed"
    address: int | None
    value: int | None
    message: str

    def __str__(self) -> str:
        where = f" at {self.address:#07x}" if self.address is not None else ""
        return f"{self.kind}{where}: {self.message}"


class GroupedUnit:
    """A block with two register groups: the group windows (4 KiB each, the single registers copied
    in both), the producer and consumer pointers."""

    def __init__(self, name: str, struct: type[Record], info: dict[str, RegisterInfo], base: int) -> None:
        self.name = name
        self.struct = struct
        self.base = base
        regs = [r for r in info.values() if base <= r.address < base + WINDOW]
        self.op_enable = next(r.address - base for r in regs if r.name.endswith("_D_OP_ENABLE_0"))
        self._reset_words = [(r.address - base, r.reset) for r in regs]
        self.groups = [bytearray(WINDOW), bytearray(WINDOW)]
        self.words = [memoryview(g).cast("I") for g in self.groups]
        # the same words as numpy arrays, for a program stored in one assignment (regfile_block)
        self.arrays = [np.frombuffer(g, np.uint32) for g in self.groups]
        self.producer = 0
        self.consumer = 0
        self.reset()

    def reset(self) -> None:
        for words in self.words:
            words[:] = memoryview(bytes(WINDOW)).cast("I")
            for offset, value in self._reset_words:
                words[offset >> 2] = value
        self.producer = self.consumer = 0

    def op_en(self, group: int) -> bool:
        return bool(self.words[group][self.op_enable >> 2] & 1)

    def status(self, group: int) -> int:
        if not self.op_en(group):
            return IDLE
        return RUNNING if self.consumer == group else PENDING

    def load(self, group: int, offset: int) -> int:
        value: int = self.words[group][offset >> 2]
        return value

    def store(self, group: int, offset: int, value: int) -> None:
        self.words[group][offset >> 2] = value

    def store_single(self, offset: int, value: int) -> None:
        """A single (S) register: the same in both groups' copies."""
        self.words[0][offset >> 2] = self.words[1][offset >> 2] = value

    def ready(self) -> int | None:
        """The consumer group when its ``OP_EN`` is set: the group this block executes next."""
        return self.consumer if self.op_en(self.consumer) else None

    def done(self, group: int) -> None:
        """The operation of ``group`` is done: its ``OP_EN`` clears, the consumer flips to the other."""
        self.words[group][self.op_enable >> 2] &= ~1
        self.consumer = 1 - group

    def snapshot(self, group: int) -> Record:
        return self.struct.from_buffer_copy(self.groups[group])


class LutRam:
    """The LUT tables of SDP or CDP (65 LE and 257 LO 16-bit entries), written and read through
    ``S_LUT_ACCESS_CFG`` (table, entry, access type) and ``S_LUT_ACCESS_DATA``; each data access moves
    to the next entry, stopping at the table's last (NVIDIA's C model)."""

    def __init__(self) -> None:
        self.le = [0] * LE_ENTRIES
        self.lo = [0] * LO_ENTRIES
        self.table = 0  # 0 LE, 1 LO
        self.entry = 0
        self.write_access = 0  # 0 read, 1 write

    def configure(self, table: int, entry: int, write_access: int) -> bool:
        """Select the table and entry; False (the entry is kept) when the entry is past the table."""
        self.table, self.write_access = table, write_access
        self.entry = entry
        return entry < len(self._table())

    def _table(self) -> list[int]:
        return self.lo if self.table else self.le

    def _advance(self) -> None:
        if self.entry < len(self._table()) - 1:
            self.entry += 1

    def write(self, value: int) -> bool:
        """Write the current entry and move on; False when no entry is selected (past the table)."""
        table = self._table()
        if self.entry >= len(table):
            return False
        table[self.entry] = value & 0xFFFF
        self._advance()
        return True

    def write_run(self, values: npt.NDArray[np.uint32]) -> bool:
        """:meth:`write` of each of ``values`` in order; False (nothing written) when no entry is
        selected, so that each write is refused on its own."""
        table = self._table()
        entry, last = self.entry, len(table) - 1
        if entry > last:
            return False
        words = (values & 0xFFFF).tolist()
        before_last = min(len(words), last - entry)  # the writes that move on to the next entry
        table[entry:entry + before_last] = words[:before_last]
        if len(words) > before_last:
            table[last] = words[-1]
        self.entry = min(entry + len(words), last)
        return True

    def read(self) -> int | None:
        table = self._table()
        if self.entry >= len(table):
            return None
        value = table[self.entry]
        self._advance()
        return value


@dataclass
class BdmaQueue:
    """BDMA's queued transfers (each a copy of its window as ``CFG_OP.EN`` was written) and which launch
    group owns them: transfers queued since the last launch belong to the next ``CFG_LAUNCH0/1``."""

    queued: collections.deque[tuple[int | None, Record]] = field(default_factory=collections.deque)
    busy: list[bool] = field(default_factory=lambda: [False, False])

    @property
    def free(self) -> int:
        return BDMA_SLOTS - len(self.queued)

    def push(self, transfer: Record) -> bool:
        if self.free == 0:
            return False
        self.queued.append((None, transfer))
        return True

    def launch(self, group: int) -> tuple[Record, ...]:
        """The transfers not yet launched become ``group``'s; they stay queued until it completes."""
        mine = []
        for i, (owner, transfer) in enumerate(self.queued):
            if owner is None:
                self.queued[i] = (group, transfer)
                mine.append(transfer)
        self.busy[group] = True
        return tuple(mine)

    def complete(self, group: int) -> None:
        self.queued = collections.deque(item for item in self.queued if item[0] != group)
        self.busy[group] = False

    def reset(self) -> None:
        self.queued.clear()
        self.busy = [False, False]


def field_value(view: Any, register: str, name: str) -> int:
    """A bit field of a register in a typed view: ``field_value(v, "d_misc_cfg", "CONV_MODE")``."""
    value: int = getattr(getattr(view, register), name.lower())
    return value
