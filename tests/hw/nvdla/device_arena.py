"""Device memory for the NVDLA device tests: buffers allocated on the device, mapped into one IOMMU
context, filled and read through their host views; operations programmed only through registers.

Usage::

    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)                 # a context, selected in PYDLA_SMMU_CTX
    src = arena.cube(w, h, c, Precision.INT8, data)
    arena.program("PDP", params)             # the firmware's writes (nvdla_program)
    out = arena.get(dst)
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from pydla.deviceapi.generated import nvdla_smmu as S
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.smmu import IommuMemory
from pydla.hw.nvdla.surface import Cube, gather, scatter
from pydla.hw.nvdla_device import NvdlaDevice
from tests.hw.nvdla.nvdla_program import operation_writes


class DeviceArena:
    """Buffers of one context of ``dev``, which is selected in the SMMU."""

    def __init__(self, dev: NvdlaDevice) -> None:
        self.dev = dev
        self.ctx = dev.iommu.create_context()
        self.memory = IommuMemory(dev.iommu, self.ctx)  # the host's view of the same bytes, for tests
        dev.reg_write(S.PYDLA_SMMU_CTX, self.ctx)
        self.regs = dev.regs.regs

    def buffer(self, size: int) -> int:
        """A zeroed buffer of ``size`` bytes; its device address."""
        bo = self.dev.memory.allocate(size)
        return self.dev.iommu.map(self.ctx, bo)

    def cube(self, width: int, height: int, channel: int, prec: Precision,
             data: npt.ArrayLike | None = None) -> Cube:
        """A packed cube in a buffer of its own, holding ``data`` (C, H, W) when given."""
        atom = self.dev.target.atom
        surfaces = -(-channel * prec.bpe // atom)
        line, surf = width * atom, width * height * atom
        cube = Cube(self.buffer(surfaces * surf), width, height, channel, line, surf, prec)
        if data is not None:
            scatter(self.memory, cube, self.dev.target, data, "test")
        return cube

    def get(self, cube: Cube) -> npt.NDArray[Any]:
        return gather(self.memory, cube, self.dev.target, "test")

    def program(self, processor: str, params: Any, group: int = 0) -> None:
        for address, value in operation_writes(self.regs, processor, params, group):
            self.dev.reg_write(address, value)

    def status(self) -> int:
        return self.dev.reg_read(self.regs.NVDLA_GLB_S_INTR_STATUS_0)
