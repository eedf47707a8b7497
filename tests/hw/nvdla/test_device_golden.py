"""NVIDIA's regression tests through the NVDLA device: each operation's registers programmed by hand as
NVIDIA's firmware programs them (values from the loadable's descriptors, tests/hw/nvdla/nvdla_run.py;
writes in the firmware's order, tests/hw/nvdla/nvdla_program.py) through the device's register window,
on buffers allocated in device memory and mapped into an IOMMU context (the registers hold their
device addresses); the output image equal to NVIDIA's golden .dimg byte for byte. Skipped, with the
reason, without ../shared/nvdla-regression."""

from __future__ import annotations

from typing import Any

import pytest

from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.target import NvdlaTarget
from pydla.hw.nvdla_device import NvdlaDevice
from tests.hw.nvdla import nvdla_run
from tests.hw.nvdla.device_arena import DeviceArena

GLB_DONE = {"BDMA": 1 << 6, "PDP": 1 << 4, "SDP": 1 << 0, "CDP": 1 << 2, "RUBIK": 1 << 8}
CONV_DONE = (1 << 16) | (1 << 18) | (1 << 20)  # CDMA data, CDMA weights, CACC (group 0)


class DeviceRun(nvdla_run.Run):
    """A regression test's memory list in device memory: one buffer per entry, mapped into the arena's
    context, SET contents copied in; addresses are device addresses."""

    def __init__(self, name: str, dev: NvdlaDevice) -> None:
        super().__init__(name)
        self.arena = DeviceArena(dev)
        self.iova: dict[int, int] = {}
        for m in self.lo.memory_list:
            self.iova[m.id] = self.arena.buffer(max(m.size, 1))
            self.arena.memory.write(self.iova[m.id], self.memory.read(self.base[m.id], m.size))

    def address(self, index: int) -> int:
        entry = self.lo.address_list[self.task.address_list[index]]
        return self.iova[entry.mem_id] + entry.offset

    def image(self) -> bytes:
        """The output buffer read from the device, as NVIDIA's runtime writes its image."""
        out = self.lo.memory_list[self.output_mem]
        self.memory = ByteMemory(self.memory.size)
        self.memory.write(self.base[out.id], self.arena.memory.read(self.iova[out.id], out.size))
        return super().image()


def _params(run: DeviceRun, op: Any, target: NvdlaTarget) -> tuple[str, Any]:
    block = op.block.name
    if block == "CONV":
        return block, nvdla_run.conv_params(run, op, target)
    derive = {"BDMA": nvdla_run.bdma_params, "PDP": nvdla_run.pdp_params, "SDP": nvdla_run.sdp_params,
              "CDP": nvdla_run.cdp_params, "RUBIK": nvdla_run.rubik_params}[block]
    return block, derive(run, op)


@pytest.mark.parametrize(("name", "config"), [
    ("BDMA_L0_0", "nv_full"), ("PDP_L0_0", "nv_full"), ("PDP_L0_0_small", "nv_small"),
    ("SDP_X1_L0_0", "nv_full"), ("SDP_X1_L0_0_small", "nv_small"), ("CDP_L0_0", "nv_full"),
    ("CDP_L0_0_small", "nv_small"), ("RBK_L0_0", "nv_full"), ("CONV_D_L0_0", "nv_full"),
    ("CONV_D_L0_0_small", "nv_small")])
def test_nvidia_golden_images_through_the_registers(name: str, config: str) -> None:
    dev = NvdlaDevice(config)
    run = DeviceRun(name, dev)
    ops = [_params(run, op, dev.target) for op in run.net.operations]
    if [p for p, _ in ops] == ["CONV", "SDP"]:
        ops.reverse()  # the firmware enables the fused SDP before its convolution
    want = 0
    for processor, params in ops:
        run.arena.program(processor, params)
        want |= CONV_DONE if processor == "CONV" else GLB_DONE[processor]
    assert list(dev.errors) == [] and dev.bus_errors == 0 and not dev.regs.faults
    assert run.arena.status() == want and dev.irq
    assert run.image() == run.golden()
    dev.close()
