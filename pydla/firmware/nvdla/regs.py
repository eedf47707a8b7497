"""Writing NVDLA registers by name: the register map of a configuration, and a collector of one
operation's register writes (fields packed as the generated map declares them, values that do not
fit refused with the operation and register named).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pydla.deviceapi.generated import nvdla_v1_regs, nvdla_v2_regs
from pydla.errors import DlaError, NvError
from pydla.firmware.graph import Operation
from pydla.firmware.interface import FirmwarePortability, TaskDesc

# by the generated module's name, or the configuration's ("nvdla_v1": nv_full, "nvdla_v2": the others)
MAPS: dict[str, ModuleType] = {"nvdla_v1_regs": nvdla_v1_regs, "nvdla_v2_regs": nvdla_v2_regs,
                               "nvdla_v1": nvdla_v1_regs, "nvdla_v2": nvdla_v2_regs}
WORD = 0xFFFFFFFF
# dla_data_cube.type -> a *_RAM_TYPE field: MC (DRAM) is MCIF 1, CV (SRAM) is CVIF 0
RAM_TYPE = {0: 1, 1: 0}


def register_map(name: str) -> ModuleType:
    regs = MAPS.get(name)
    if regs is None:
        raise DlaError(NvError.NotSupported, f"register map {name!r} is not an NVDLA map "
                                             f"({', '.join(MAPS)})")
    return regs


def address(regs: ModuleType, block: str, reg: str) -> int:
    addr: int = regs.REGISTERS[f"NVDLA_{block}_{reg}_0"]
    return addr


def pack(regs: ModuleType, block: str, reg: str, fields: dict[str, int], what: str) -> int:
    """The word of ``block``'s ``reg`` with ``fields`` set (0 elsewhere, as NVIDIA's firmware builds it)."""
    info = regs.REGISTER_INFO[f"NVDLA_{block}_{reg}_0"]
    word = 0
    for name, value in fields.items():
        try:
            word = info.field(name).put(word, int(value))
        except DlaError as e:
            raise DlaError(NvError.BadValue, f"{what}: {block}.{reg}.{name} = {value} does not fit the "
                                             f"register field ({e.message})") from None
    return word


class Writes:
    """One operation's register writes, in order (what NVIDIA's ``processor_*_program`` writes)."""

    def __init__(self, regs: ModuleType, port: FirmwarePortability, task: TaskDesc, op: Operation) -> None:
        self.regs, self.port, self.task, self.op = regs, port, task, op
        self.writes: list[tuple[int, int]] = []

    def f(self, block: str, reg: str, **fields: int) -> None:
        """Write fields of a register (the others 0)."""
        word = pack(self.regs, block, reg, fields, self.op.name)
        self.writes.append((address(self.regs, block, reg), word))

    def v(self, block: str, reg: str, value: int) -> None:
        """Write a whole register (an address word, a stride, a size)."""
        self.writes.append((address(self.regs, block, reg), int(value) & WORD))

    def dma(self, index: int, what: str, offset: int = 0) -> int:
        """The DMA address of address-list entry ``index`` (+ ``offset``)."""
        return self.port.dla_read_dma_address(self.task, index, f"{self.op.name}: {what}") + offset

    def cube_address(self, cube: Any, what: str) -> int:
        """A data cube's DMA address; 0 for none. Its own ``offset`` counts from interface 0.12 on: the
        cube records of 0.10 and 0.11 (decoded by the task's version) have no such field."""
        if cube.address == -1:
            return 0
        return self.dma(int(cube.address), what, int(getattr(cube, "offset", 0)))
