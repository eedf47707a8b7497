"""The NVDLA device on NVDLA's configurations: operations programmed through NVDLA's register map as the
firmware programs them, computed on device memory through the selected IOMMU context, the done
interrupt; the on-the-fly pipeline (CONV -> SDP -> PDP); bad accesses and memory faults counted, never
raised; the interrupt line and the modes."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.surface import Cube
from pydla.hw.nvdla_device import NvdlaDevice
from tests.hw.nvdla.device_arena import DeviceArena

PDP_DONE0, SDP_DONE0, CACC_DONE0 = 1 << 4, 1 << 0, 1 << 20
INT8 = Precision.INT8


def _max_pool(arena: DeviceArena, src: Cube, dst: Cube) -> PdpParams:
    """2x2/2 max pooling of ``src`` into ``dst`` from memory."""
    return PdpParams(
        cube_in_width=src.width - 1, cube_in_height=src.height - 1, cube_in_channel=src.channel - 1,
        cube_out_width=dst.width - 1, cube_out_height=dst.height - 1, cube_out_channel=dst.channel - 1,
        pooling_method=1, kernel_width=1, kernel_height=1, kernel_stride_width=1, kernel_stride_height=1,
        pad_left=0, pad_top=0, pad_right=0, pad_bottom=0, input_data=0, src_base_addr=src.address,
        src_line_stride=src.line_stride, src_surface_stride=src.surf_stride, dst_base_addr=dst.address,
        dst_line_stride=dst.line_stride, dst_surface_stride=dst.surf_stride)


@pytest.mark.parametrize("config", ["nv_full", "nv_small", "nv_large", "nv_medium_512"])
def test_a_max_pooling_programmed_through_the_registers(config: str) -> None:
    dev = NvdlaDevice(config)
    calls: list[int] = []
    dev.connect_irq(lambda: calls.append(dev.reg_read(dev.regs.regs.NVDLA_GLB_S_INTR_STATUS_0)))
    arena = DeviceArena(dev)
    c, h, w = 11, 6, 8
    x = np.random.default_rng(5).integers(-128, 128, (c, h, w), dtype=np.int8)
    src, dst = arena.cube(w, h, c, INT8, x), arena.cube(w // 2, h // 2, c, INT8)
    arena.program("PDP", _max_pool(arena, src, dst))
    assert np.array_equal(arena.get(dst), x.reshape(c, h // 2, 2, w // 2, 2).max(axis=(2, 4)))
    assert arena.status() == PDP_DONE0 and calls == [PDP_DONE0] and dev.irq
    assert (dev.ops_done, dev.ops_failed, dev.bus_errors) == (1, 0, 0)
    dev.reg_write(dev.regs.regs.NVDLA_GLB_S_INTR_STATUS_0, PDP_DONE0)  # the ISR clears it: the line drops
    assert not dev.irq and arena.status() == 0
    dev.close()
