"""A fake port over NVDLA's real register file (pydla.hw.nvdla.regfile): it records every register
write, completes every launched operation at once and raises the interrupt; and the address list of
an NVDLA Loadable's DLA task bound to buffers as the submit contract says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.firmware.interface import (
    CpuAddress,
    FirmwarePortability,
    KmdDeviceInfo,
    NvdlaFacts,
    ResolvedEntry,
    TaskDesc,
)
from pydla.hw.nvdla.regfile import NvdlaRegisterFile
from pydla.hw.nvdla.regfile_units import Launch

PLATFORM = 0x20000  # the platform's registers (an SMMU's context, a reset) begin past NVDLA's map
FACTS = {
    "nv_full": (NvdlaFacts("nvdla_v1_regs", (0, 1, 2), 32, weight_compression=True, winograd=True), True),
    "nv_small": (NvdlaFacts("nvdla_v2_regs", (0,), 8, sdp_lut=False, sdp_y=False), False),
}


def device_info(config: str) -> KmdDeviceInfo:
    facts, big = FACTS[config]
    blocks = tuple(dla_block_e) if big else (dla_block_e.CONV, dla_block_e.SDP, dla_block_e.PDP,
                                             dla_block_e.CDP)
    return KmdDeviceInfo(0, "deterministic", config, 1, blocks, (dla_precision_e.FP16,), 1 << 28, 4,
                         nvdla=facts)


@dataclass
class Buffer:
    handle: int
    array: npt.NDArray[np.uint8]
    iova: int

    @property
    def size(self) -> int:
        return int(self.array.size)


class RegfilePort(FirmwarePortability):
    def __init__(self, config: str) -> None:
        self.writes: list[tuple[int, int]] = []
        self.launches: list[Launch] = []
        self.handlers: list[Callable[[], object]] = []
        self.rf = NvdlaRegisterFile(config, on_launch=self._launch, on_irq=self._irq)

    def _launch(self, launch: Launch) -> None:
        self.launches.append(launch)
        self.rf.complete(launch.processor, launch.group)

    def _irq(self, line: bool) -> None:
        if line:
            for h in list(self.handlers):
                h()

    def dla_reg_write(self, addr: int, reg: int) -> None:
        self.writes.append((addr, reg))
        if addr < PLATFORM:  # past NVDLA's 128 KiB: the platform's registers (recorded only)
            self.rf.write(addr, reg)

    def dla_reg_read(self, addr: int) -> int:
        return self.rf.read(addr)

    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        e = task.entry(index, what)
        return CpuAddress(e.bo, e.offset, e.size)

    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        self.handlers.append(handler)

    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        self.handlers.remove(handler)


def bind(lo: Any, task: Any) -> tuple[list[ResolvedEntry], dict[int, Buffer]]:
    """Each memory of the loadable in its own buffer (4 KiB apart, SET contents in), and the task's
    address list as the submit contract says: entry i = (buffer of address_list[task.address_list[i]],
    that entry's offset, size)."""
    from pydla.loadable.nvdla.memory import read_memory
    from pydla.loadable.nvdla.model import MemoryFlags
    buffers: dict[int, Buffer] = {}
    iova = 0x10000
    for m in lo.memory_list:
        array = np.zeros(m.size, dtype=np.uint8)
        if m.flags & MemoryFlags.SET:
            array[:] = np.frombuffer(bytes(read_memory(lo, m.id, 0, m.size, "test")), dtype=np.uint8)
        buffers[m.id] = Buffer(m.id + 1, array, iova)
        iova += (m.size + 0xFFF) & ~0xFFF
    entries = []
    for i in task.address_list:
        a = lo.address_list[i]
        b = buffers[a.mem_id]
        entries.append(ResolvedEntry(b, b.iova, a.offset, a.size or None))  # size 0: to the end
    return entries, buffers
