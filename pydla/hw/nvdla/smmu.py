"""The I/O MMU in front of an NVDLA device's DMA: which address space its operations use, the memory the
blocks see through it, and the record of the accesses it refused.

NVDLA's blocks put device addresses on the bus as the registers hold them; pydla's device translates
each access through one IOMMU context (:class:`pydla.hw.memory.Iommu`): the one ``PYDLA_SMMU_CTX``
selected when the operation was launched (the contract ``nvdla_smmu``, a window past NVDLA's register
space). :class:`IommuMemory` is that context as the blocks' :class:`~pydla.hw.nvdla.memory.NvdlaMemory`;
an access outside its mappings raises :class:`~pydla.hw.memory.MmuFault` inside the device, which
:meth:`Smmu.record` turns into the fault registers and the SMMU's interrupt line.

Usage::

    smmu = Smmu(on_line=print)
    smmu.write(S.PYDLA_SMMU_CTX, ctx)
    mem = IommuMemory(iommu, smmu.ctx)       # latched by an operation at its launch
    mem.read(iova, 64)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import nvdla_smmu as S
from pydla.hw.memory import Iommu, MmuFault

WORD = 0xFFFFFFFF
FIRST, LAST = S.PYDLA_SMMU_CTX, S.PYDLA_SMMU_FAULT_COUNT
NO_UNIT = 0xFF  # FAULT_UNIT before any fault


class IommuMemory:
    """The device memory of IOMMU context ``ctx`` as NVDLA's DMA reaches it (every access translated and
    bounds-checked; MmuFault for anything outside one mapping)."""

    def __init__(self, iommu: Iommu, ctx: int) -> None:
        self.iommu = iommu
        self.ctx = ctx

    def read(self, address: int, size: int) -> npt.NDArray[np.uint8]:
        if size == 0:
            return np.zeros(0, dtype=np.uint8)
        bo, offset = self.iommu.translate(self.ctx, address, size)
        out: npt.NDArray[np.uint8] = bo.array[offset:offset + size].copy()
        return out

    def write(self, address: int, data: npt.NDArray[np.uint8]) -> None:
        flat = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
        if flat.size == 0:
            return
        bo, offset = self.iommu.translate(self.ctx, address, flat.size)
        bo.array[offset:offset + flat.size] = flat


class Smmu:
    """The ``nvdla_smmu`` registers: the context select, the first fault since FAULT was cleared, the
    fault count; ``line`` is its interrupt output (a fault recorded and not masked)."""

    def __init__(self, on_line: Callable[[bool], None] | None = None) -> None:
        self.on_line = on_line
        self.reset()

    def reset(self) -> None:
        self.ctx = 0
        self.fault_status = 0
        self.mask = 0
        self.fault_address = 0
        self.fault_ctx = 0
        self.fault_unit = NO_UNIT
        self.count = 0
        self.line = False

    @staticmethod
    def owns(address: object) -> bool:
        """Whether ``address`` is a register of this window (anything else is NVDLA's, or no register)."""
        return isinstance(address, int) and not isinstance(address, bool) and FIRST <= address <= LAST \
            and address % 4 == 0

    def read(self, address: int) -> int:
        return {S.PYDLA_SMMU_CTX: self.ctx, S.PYDLA_SMMU_FAULT_STATUS: self.fault_status,
                S.PYDLA_SMMU_FAULT_MASK: self.mask, S.PYDLA_SMMU_FAULT_ADDR_LO: self.fault_address & WORD,
                S.PYDLA_SMMU_FAULT_ADDR_HI: self.fault_address >> 32 & WORD,
                S.PYDLA_SMMU_FAULT_CTX: self.fault_ctx, S.PYDLA_SMMU_FAULT_UNIT: self.fault_unit,
                S.PYDLA_SMMU_FAULT_COUNT: self.count}[address]

    def write(self, address: int, value: int) -> None:
        """A 32-bit ``value`` (the caller checked it); read-only registers ignore writes."""
        if address == S.PYDLA_SMMU_CTX:
            self.ctx = value & 0xFFFF
        elif address == S.PYDLA_SMMU_FAULT_STATUS:
            self.fault_status &= ~value & 1
        elif address == S.PYDLA_SMMU_FAULT_MASK:
            self.mask = value & 1
        self._update()

    def record(self, fault: MmuFault, unit: int) -> None:
        """An access of operation ``unit`` (DLA_OP_*) faulted: the registers keep the first one until
        FAULT is cleared; every one is counted."""
        self.count = min(self.count + 1, WORD)
        if not self.fault_status:
            self.fault_status = 1
            self.fault_address = fault.address & ((1 << 64) - 1) if fault.address >= 0 else 0
            self.fault_ctx = fault.ctx & 0xFFFF
            self.fault_unit = unit & 0xFF
        self._update()

    def _update(self) -> None:
        line = bool(self.fault_status and not self.mask)
        if line != self.line:
            self.line = line
            if self.on_line is not None:
                self.on_line(line)
