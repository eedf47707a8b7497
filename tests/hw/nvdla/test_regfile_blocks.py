"""The NVDLA register file's blocks with behaviour of their own: GLB's interrupts, BDMA's queue and
launches, the LUT RAM of SDP and CDP, and the configuration ROM of each newer configuration."""

from __future__ import annotations

import pytest

from pydla.deviceapi.generated import nvdla_v1_regs as V1
from pydla.deviceapi.generated import nvdla_v2_regs as V2
from pydla.hw.nvdla.regfile import NvdlaRegisterFile
from pydla.hw.nvdla.regfile_config import regfile_config
from pydla.hw.nvdla.regfile_units import Launch

# -- GLB interrupts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("config", ["nv_full", "nv_small"])
def test_interrupt_status_mask_set_and_write_one_to_clear(config: str) -> None:
    edges: list[bool] = []
    rf = NvdlaRegisterFile(config, on_irq=edges.append)
    r = rf.regs
    status, mask, set_ = r.NVDLA_GLB_S_INTR_STATUS_0, r.NVDLA_GLB_S_INTR_MASK_0, r.NVDLA_GLB_S_INTR_SET_0
    rf.write(mask, 0xFFFFFFFF)
    assert rf.read(mask) == 0x3F03FF  # the defined bits only
    rf.write(set_, 0xFFFFFFFF)
    assert rf.read(status) == 0x3F03FF and not rf.irq and edges == []  # masked: recorded, no line
    rf.write(mask, ~(1 << 20) & 0xFFFFFFFF)  # unmask CACC_DONE_STATUS0
    assert rf.irq and edges == [True]
    rf.write(status, 1 << 21)  # clears only the bits written as 1
    assert rf.read(status) == 0x3F03FF & ~(1 << 21) and rf.irq
    rf.write(status, 1 << 20)
    assert not rf.irq and edges == [True, False]
    rf.write(status, 0)
    assert rf.read(status) == 0x3F03FF & ~(3 << 20)
    rf.write(status, 0xFFFFFFFF)
    assert rf.read(status) == 0
    rf.write(mask, 0)
    assert rf.read(set_) == 0 and not rf.irq  # S_INTR_SET is write-only


def test_a_done_while_masked_raises_the_line_when_unmasked() -> None:
    edges: list[bool] = []
    rf = NvdlaRegisterFile("nv_full", on_irq=edges.append, on_launch=lambda x: None)
    rf.write(V1.NVDLA_GLB_S_INTR_MASK_0, 0x3F03FF)
    rf.write(V1.NVDLA_RBK_D_OP_ENABLE_0, 1)
    rf.complete("RUBIK", 0)
    assert rf.read(V1.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 8 and edges == []
    rf.write(V1.NVDLA_GLB_S_INTR_MASK_0, 0x3F03FF & ~(1 << 8))  # the firmware's dla_enable_intr
    assert edges == [True]


# -- BDMA -------------------------------------------------------------------------------------------


def _bdma_transfer(rf: NvdlaRegisterFile, src: int, dst: int, line: int) -> None:
    rf.write(V1.NVDLA_BDMA_CFG_SRC_ADDR_LOW_0, src)
    rf.write(V1.NVDLA_BDMA_CFG_DST_ADDR_LOW_0, dst)
    rf.write(V1.NVDLA_BDMA_CFG_LINE_0, line)
    rf.write(V1.NVDLA_BDMA_CFG_CMD_0, 3)
    rf.write(V1.NVDLA_BDMA_CFG_OP_0, 1)


def _bdma_status(rf: NvdlaRegisterFile) -> tuple[int, int, int, int]:
    word = rf.read(V1.NVDLA_BDMA_STATUS_0)
    return word & 0xFF, (word >> 8) & 1, (word >> 9) & 1, (word >> 10) & 1


def test_bdma_queues_transfers_and_launches_them_by_group() -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile("nv_full", on_launch=launches.append)
    assert _bdma_status(rf) == (20, 1, 0, 0)
    _bdma_transfer(rf, 0x1000, 0x2000, 3)
    _bdma_transfer(rf, 0x3000, 0x4000, 7)
    assert _bdma_status(rf) == (18, 0, 0, 0) and rf.read(V1.NVDLA_BDMA_CFG_OP_0) == 0
    rf.write(V1.NVDLA_BDMA_CFG_LAUNCH0_0, 1)
    assert [(x.processor, x.group, len(x.transfers)) for x in launches] == [("BDMA", 0, 2)]
    first, second = launches[0].transfers
    assert (first.cfg_src_addr_low.v32 << 5, first.cfg_dst_addr_low.v32 << 5, first.cfg_line.size) == \
        (0x1000, 0x2000, 3)
    assert (second.cfg_src_addr_low.v32 << 5, second.cfg_line.size, second.cfg_cmd.dst_ram_type) == \
        (0x3000, 7, 1)
    assert _bdma_status(rf) == (18, 0, 1, 0) and rf.read(V1.NVDLA_BDMA_CFG_LAUNCH0_0) == 1
    # A second operation queued and launched as group 1 while group 0 runs follows it; launching a
    # running group again is refused.
    _bdma_transfer(rf, 0x5000, 0x6000, 1)
    rf.write(V1.NVDLA_BDMA_CFG_LAUNCH1_0, 1)
    rf.write(V1.NVDLA_BDMA_CFG_LAUNCH0_0, 1)
    assert len(launches) == 1 and [f.kind for f in rf.faults] == ["busy launch"]
    assert _bdma_status(rf) == (17, 0, 1, 1)
    rf.complete("BDMA", 0)
    assert rf.read(V1.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 6  # BDMA_DONE_STATUS0
    assert _bdma_status(rf) == (19, 0, 0, 1) and rf.read(V1.NVDLA_BDMA_CFG_LAUNCH0_0) == 0
    assert [(x.group, [t.cfg_src_addr_low.v32 << 5 for t in x.transfers]) for x in launches[1:]] == \
        [(1, [0x5000])]
    rf.complete("BDMA", 1)
    assert _bdma_status(rf) == (20, 1, 0, 0)
    assert rf.read(V1.NVDLA_GLB_S_INTR_STATUS_0) == 3 << 6


def test_bdma_queue_full_drops_the_transfer() -> None:
    rf = NvdlaRegisterFile("nv_full")
    for i in range(21):
        _bdma_transfer(rf, 0x1000 * i, 0, 0)
    assert _bdma_status(rf)[0] == 0
    assert [f.kind for f in rf.faults] == ["queue full"] and "FREE_SLOT 0" in rf.faults[0].message
    rf.write(V1.NVDLA_BDMA_CFG_OP_0, 0)  # EN 0 queues nothing
    assert len(rf.faults) == 1


def test_bdma_launch_without_transfers_is_an_empty_operation() -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile("nv_full", on_launch=launches.append)
    rf.write(V1.NVDLA_BDMA_CFG_LAUNCH1_0, 1)
    assert [(x.group, x.transfers) for x in launches] == [(1, ())]
    rf.complete("BDMA", 1)
    assert rf.read(V1.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 7


# -- LUT RAM --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", ["SDP", "CDP"])
def test_lut_tables_through_access_cfg_and_data(block: str) -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile("nv_full", on_launch=launches.append)
    cfg = V1.REGISTER_INFO[f"NVDLA_{block}_S_LUT_ACCESS_CFG_0"]
    data = V1.REGISTERS[f"NVDLA_{block}_S_LUT_ACCESS_DATA_0"]
    rf.write(cfg.address, cfg.pack(LUT_TABLE_ID=0, LUT_ACCESS_TYPE=1, LUT_ADDR=0))
    for i in range(65):
        rf.write(data, (i * 3) | 0xFFFF0000)  # the firmware writes sign-extended 16-bit entries
    rf.write(cfg.address, cfg.pack(LUT_TABLE_ID=1, LUT_ACCESS_TYPE=1, LUT_ADDR=0))
    for i in range(257):
        rf.write(data, 0x8000 + i)
    rf.write(data, 0x1234)  # past the end: the last entry again (the address stops at the table's end)
    assert rf.read(cfg.address) == cfg.pack(LUT_TABLE_ID=1, LUT_ACCESS_TYPE=1, LUT_ADDR=256)
    rf.write(cfg.address, cfg.pack(LUT_TABLE_ID=0, LUT_ACCESS_TYPE=0, LUT_ADDR=63))
    assert [rf.read(data) for _ in range(3)] == [189, 192, 192]
    rf.write(V1.REGISTERS[f"NVDLA_{block}_RDMA_D_OP_ENABLE_0"], 1)
    rf.write(V1.REGISTERS[f"NVDLA_{block}_D_FEATURE_MODE_CFG_0"] if block == "SDP"
             else V1.NVDLA_CDP_D_DATA_FORMAT_0, 0)
    rf.write(V1.REGISTERS[f"NVDLA_{block}_D_OP_ENABLE_0"], 1)
    launch = launches[-1]
    assert launch.processor == block
    assert launch.lut_le == tuple(i * 3 for i in range(65))
    assert launch.lut_lo == (*range(0x8000, 0x8000 + 256), 0x1234)
    assert not rf.faults


def test_lut_access_past_the_table_is_a_fault() -> None:
    rf = NvdlaRegisterFile("nv_full")
    cfg = V1.REGISTER_INFO["NVDLA_CDP_S_LUT_ACCESS_CFG_0"]
    rf.write(cfg.address, cfg.pack(LUT_TABLE_ID=0, LUT_ACCESS_TYPE=1, LUT_ADDR=65))  # LE has 65 entries
    rf.write(V1.NVDLA_CDP_S_LUT_ACCESS_DATA_0, 7)
    assert [f.kind for f in rf.faults] == ["lut range", "lut range"]
    rf.write(cfg.address, cfg.pack(LUT_TABLE_ID=1, LUT_ACCESS_TYPE=0, LUT_ADDR=1000))
    assert rf.read(V1.NVDLA_CDP_S_LUT_ACCESS_DATA_0) == 0 and len(rf.faults) == 4
    assert rf.bus_errors == 0


# -- the configuration ROM ---------------------------------------------------------------------------


def _rom(rf: NvdlaRegisterFile, name: str) -> int:
    return rf.read(V2.REGISTERS[f"NVDLA_CFGROM_CFGROM_{name}_0"])


def test_nv_small_reads_nvidias_rom() -> None:
    rf = NvdlaRegisterFile("nv_small")
    for name, info in V2.REGISTER_INFO.items():
        if name.startswith("NVDLA_CFGROM_"):
            assert rf.read(info.address) == info.reset, name
    assert (_rom(rf, "CIF_BASE_BURST_LENGTH_MAX"), _rom(rf, "CIF_BASE_MEM_ADDR_WIDTH")) == (4 << 5, 32 << 5)


@pytest.mark.parametrize(("config", "facts"), [
    # atomic C, K, memory atom, CBUF banks x width x depth, SDP caps, BS/BN/EW, PDP, CDP, CIF bytes,
    # address bits
    ("nv_large", (64, 32, 32, 16, 64, 512, 0x3C, 16, 16, 4, 8, 8, 32, 64)),
    ("nv_small_256", (32, 8, 8, 32, 32, 128, 0x18, 1, 1, 0, 1, 1, 8, 32)),
    ("nv_small_256_full", (32, 8, 8, 32, 32, 128, 0x3C, 2, 2, 1, 1, 1, 8, 32)),
    ("nv_medium_512", (32, 16, 16, 32, 32, 512, 0x18, 4, 4, 0, 2, 2, 16, 64)),
    ("nv_medium_1024_full", (32, 32, 32, 32, 32, 512, 0x3C, 8, 8, 2, 4, 4, 32, 64)),
])
def test_the_rom_of_each_configuration(config: str, facts: tuple[int, ...]) -> None:
    rf = NvdlaRegisterFile(config)
    got = (_rom(rf, "CDMA_BASE_ATOMIC_C"), _rom(rf, "CSC_BASE_ATOMIC_K"), _rom(rf, "SDP_RDMA_BASE_ATOMIC_M"),
           _rom(rf, "CBUF_BASE_CBUF_BANK_NUM"), _rom(rf, "CBUF_BASE_CBUF_BANK_WIDTH"),
           _rom(rf, "CDMA_BASE_CBUF_BANK_DEPTH"), _rom(rf, "SDP_CAP_COMPAT"), _rom(rf, "SDP_BS_THROUGHPUT"),
           _rom(rf, "SDP_BN_THROUGHPUT"), _rom(rf, "SDP_EW_THROUGHPUT"), _rom(rf, "PDP_BASE_THROUGHPUT"),
           _rom(rf, "CDP_BASE_THROUGHPUT"), _rom(rf, "CIF_BASE_WIDTH"),
           _rom(rf, "CIF_BASE_MEM_ADDR_WIDTH") >> 5)
    assert got == facts
    # The parts every INT8 configuration shares: descriptors, data types, no batches.
    assert (_rom(rf, "HW_VERSION"), _rom(rf, "CDMA_DESC"), _rom(rf, "CDMA_BASE_FEATURE_TYPES"),
            _rom(rf, "CDMA_MULTI_BATCH_MAX"), _rom(rf, "END_OF_LIST")) == (0x10001, 0x340003, 0x10, 0, 0)
    assert rf.read(V2.NVDLA_CVIF_STATUS_0) == (1 << 8 if "CVIF" in regfile_config(config).blocks else 0)


def test_nv_full_has_no_rom() -> None:
    rf = NvdlaRegisterFile("nv_full")
    assert rf.read(0) == 0x303031  # GLB S_NVDLA_HW_VERSION sits at 0 in the nvdlav1 map
    assert not regfile_config("nv_full").rom and rf.bus_errors == 0
