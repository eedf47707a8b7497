"""Many NVDLA register writes in one call (the port's ``dla_reg_write_words``: an operation's program,
some 40 registers, or a LUT's 322 data words), with exactly the effects of writing them one by one.

A write list is planned once per list of addresses (kept by their bytes): runs of plain D registers of
one block (double-buffered, no side effect: not ``D_OP_ENABLE``, not a pointer, status or LUT port)
become one numpy store into the producer's group, each register merged through its write mask (a
register written twice in a run keeps its last value, as in order); runs of plain single registers
(the LUT's configuration) one store into both groups' copies; runs of ``S_LUT_ACCESS_DATA``
become one store into the LUT table, moving the entry as each write would; everything else is written
one by one through :meth:`~pydla.hw.nvdla.regfile.NvdlaRegisterFile.write`. Whatever one write would
refuse goes one by one too, so every fault is recorded as before: a run into an enabled group (each
write dropped and counted), LUT data past its table, an address that is no register (a bus error).

Usage::

    plan = plan_writes(regfile, addresses.tolist())
    write_planned(regfile, plan, addresses, values)       # values: uint32, one per address
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.regfile_units import WINDOW, GroupedUnit

if TYPE_CHECKING:
    from pydla.hw.nvdla.regfile import NvdlaRegisterFile

U32 = npt.NDArray[np.uint32]


@dataclass(frozen=True)
class Store:
    """Writes ``start:stop`` to plain registers of one block: D registers merged into the producer's
    group; single registers (``single``: the LUT's configuration, ...) into both groups' copies."""

    unit: GroupedUnit
    start: int
    stop: int
    words: npt.NDArray[np.intp]  # word index in the group window, each once
    masks: U32  # its write mask
    last: npt.NDArray[np.intp]  # the position of the write that decides each word
    single: bool = False


@dataclass(frozen=True)
class LutData:
    """``S_LUT_ACCESS_DATA`` writes ``start:stop`` to block ``unit``'s LUT."""

    unit: str
    start: int
    stop: int


@dataclass(frozen=True)
class One:
    """Writes ``start:stop``, one by one."""

    start: int
    stop: int


Step = Store | LutData | One
Plan = tuple[Step, ...]


def plan_writes(rf: NvdlaRegisterFile, addresses: list[int]) -> Plan:
    """The steps writing ``addresses`` (byte offsets) in order on register file ``rf``."""
    kinds: list[tuple[str, GroupedUnit | None]] = []
    for address in addresses:
        reg = rf._info.get(address)
        unit = rf._unit_of.get(address // WINDOW)
        if reg is None or unit is None or address // WINDOW not in rf._window:
            kinds.append(("one", None))
            continue
        role = rf._role.get(address)
        if reg.double and role is None and address - unit.base != unit.op_enable:
            kinds.append(("store", unit))
        elif not reg.double and role is None:
            kinds.append(("single", unit))
        elif role == "S_LUT_ACCESS_DATA":
            kinds.append(("lut", unit))
        else:
            kinds.append(("one", None))
    steps: list[Step] = []
    i = 0
    while i < len(kinds):
        kind, block = kinds[i]
        j = i + 1
        while j < len(kinds) and kinds[j] == (kind, block) and kind != "one":
            j += 1
        if kind in ("store", "single"):
            assert block is not None
            last: dict[int, int] = {}
            for pos in range(i, j):
                last[(addresses[pos] - block.base) >> 2] = pos
            words = np.fromiter(last.keys(), np.intp, len(last))
            masks = np.array([rf._info[block.base + 4 * w].write_mask for w in last], np.uint32)
            steps.append(Store(block, i, j, words, masks, np.fromiter(last.values(), np.intp, len(last)),
                               kind == "single"))
        elif kind == "lut":
            assert block is not None
            steps.append(LutData(block.name, i, j))
        elif steps and isinstance(steps[-1], One) and steps[-1].stop == i:
            steps[-1] = One(steps[-1].start, j)
        else:
            steps.append(One(i, j))
        i = j
    return tuple(steps)


def write_planned(rf: NvdlaRegisterFile, plan: Plan, addresses: list[int], values: U32) -> None:
    """Do ``plan`` with ``values`` (a uint32 array, one per address): as ``rf.write`` of each in order."""
    for step in plan:
        if type(step) is Store:
            unit = step.unit
            masks = step.masks
            if step.single:  # as store_single: group 0's copy merged, written to both
                merged = (unit.arrays[0][step.words] & ~masks) | (values[step.last] & masks)
                unit.arrays[0][step.words] = merged
                unit.arrays[1][step.words] = merged
                continue
            group = unit.producer
            if not unit.op_en(group):
                arr = unit.arrays[group]
                arr[step.words] = (arr[step.words] & ~masks) | (values[step.last] & masks)
                continue
        elif type(step) is LutData:
            lut = rf.luts[step.unit]
            if not lut.write_access:
                continue  # a data write under read access changes nothing
            if lut.write_run(values[step.start:step.stop]):
                continue
        # one by one: with their effects and faults
        for pos in range(step.start, step.stop):
            rf.write(addresses[pos], int(values[pos]))
