"""The NVDLA device as the KMD reaches it: through its port (the in-process VirtualDevicePort), NVDLA's
register map at NVDLA's byte addresses, the SMMU's context register, buffers the port allocates and maps,
the interrupt the port connects; and the composition root building it for an NVDLA configuration."""

from __future__ import annotations

import numpy as np

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import nvdla_smmu as S
from pydla.deviceapi.generated import nvdla_v1_regs as V1
from pydla.deviceapi.generated import nvdla_v2_regs as V2
from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.smmu import IommuMemory
from pydla.hw.nvdla.surface import Cube, gather, scatter
from pydla.hw.nvdla_device import NvdlaDevice
from pydla.platform import probe
from tests.hw.nvdla.nvdla_program import operation_writes


def test_the_port_programs_nvdla_registers_on_buffers_it_mapped() -> None:
    dev = NvdlaDevice("nv_small")
    port = VirtualDevicePort(dev)
    irqs: list[int] = []
    port.connect_interrupt(lambda: irqs.append(port.dla_reg_read(V2.NVDLA_GLB_S_INTR_STATUS_0)))
    ctx = port.dla_create_context()
    src_bo, dst_bo = port.dla_alloc(8 * 6 * 16), port.dla_alloc(4 * 3 * 16)
    src_iova, dst_iova = port.dla_map(ctx, src_bo), port.dla_map(ctx, dst_bo)
    x = np.random.default_rng(3).integers(-128, 128, (11, 6, 8), dtype=np.int8)
    target = dev.target
    src = Cube(src_iova, 8, 6, 11, 64, 384, Precision.INT8)
    dst = Cube(dst_iova, 4, 3, 11, 32, 96, Precision.INT8)
    scatter(IommuMemory(dev.iommu, ctx), src, target, x, "test")
    pool = PdpParams(cube_in_width=7, cube_in_height=5, cube_in_channel=10, cube_out_width=3,
                     cube_out_height=2, cube_out_channel=10, pooling_method=2, kernel_width=1,
                     kernel_height=1, kernel_stride_width=1, kernel_stride_height=1, pad_left=0, pad_top=0,
                     pad_right=0, pad_bottom=0, input_data=0, src_base_addr=src_iova, src_line_stride=64,
                     src_surface_stride=384, dst_base_addr=dst_iova, dst_line_stride=32,
                     dst_surface_stride=96)
    port.dla_reg_write(S.PYDLA_SMMU_CTX, ctx)  # the KMD selects the task's address space first
    for address, value in operation_writes(V2, "PDP", pool):
        port.dla_reg_write(address, value)
    assert irqs == [1 << 4]
    assert np.array_equal(gather(IommuMemory(dev.iommu, ctx), dst, target, "test"),
                          x.reshape(11, 3, 2, 4, 2).min(axis=(2, 4)))
    # the bytes are the buffer objects' the port handed out: 8-byte atoms, channels 8.. in the 2nd surface
    first = x[:, :2, :2].min(axis=(1, 2))
    out = dst_bo.array.view(np.int8)
    assert np.array_equal(out[:8], first[:8]) and np.array_equal(out[96:99], first[8:])
    info = port.dla_get_device_info()
    assert (info.name, info.headed, info.compute_units, info.hw_version) == ("nv_small", False, (), 0x303031)
    dev.close()


def test_probe_builds_the_nvdla_device_for_an_nvdla_configuration() -> None:
    probed = probe("nv_full")
    try:
        assert isinstance(probed.device, NvdlaDevice) and probed.kmd.info.name == "nv_full"
        port = probed.kmd.port
        assert port.dla_reg_read(V1.NVDLA_GLB_S_NVDLA_HW_VERSION_0) == 0x303031
        assert port.dla_reg_read(V1.NVDLA_CDMA_S_CBUF_FLUSH_STATUS_0) == 1
    finally:
        probed.close()
