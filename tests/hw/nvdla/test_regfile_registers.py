"""The NVDLA register file, register by register: reset values, what writes store and reads return,
configurations without some blocks, and every kind of bad access (never an exception: a bus error)."""

from __future__ import annotations

import pytest

from pydla.deviceapi.generated import nvdla_v1_regs as V1
from pydla.deviceapi.generated import nvdla_v2_regs as V2
from pydla.deviceapi.registers import RegisterInfo
from pydla.hw.nvdla.regfile import NvdlaRegisterFile
from pydla.hw.nvdla.regfile_config import NAMES, regfile_config

CONFIGS = ("nv_full", "nv_small", "nv_large", "nv_medium_1024_full")
# Registers whose value the hardware computes, or whose writes act (tested in their own files).
COMPUTED = ("_S_STATUS_0", "_S_POINTER_0", "_S_CBUF_FLUSH_STATUS_0", "_D_OP_ENABLE_0", "_S_LUT_ACCESS_CFG_0",
            "_S_LUT_ACCESS_DATA_0", "NVDLA_GLB_S_INTR_", "NVDLA_BDMA_CFG_OP_0", "NVDLA_BDMA_CFG_LAUNCH",
            "NVDLA_BDMA_STATUS_0")


def _present(rf: NvdlaRegisterFile) -> list[RegisterInfo]:
    return [r for r in rf.regs.REGISTER_INFO.values()
            if any(rf.bases[b] <= r.address < rf.bases[b] + 0x1000 for b in rf.bases)]


def _plain(rf: NvdlaRegisterFile) -> list[RegisterInfo]:
    return [r for r in _present(rf) if not any(c in r.name for c in COMPUTED)]


@pytest.mark.parametrize("config", CONFIGS)
def test_every_register_reads_its_reset_value(config: str) -> None:
    rf = NvdlaRegisterFile(config)
    cfg = regfile_config(config)
    checked = 0
    for r in _present(rf):
        expected = cfg.rom.get(r.name, r.reset) & r.read_mask
        if r.name.endswith("_S_CBUF_FLUSH_STATUS_0"):
            expected = 1  # always flushed: the model has no convolution buffer
        assert rf.read(r.address) == expected, r.name
        checked += 1
    assert rf.bus_errors == 0 and not rf.faults
    assert checked == len(_present(rf)) > 300
    assert rf.read(rf.regs.NVDLA_GLB_S_NVDLA_HW_VERSION_0) == 0x303031
    assert not rf.irq


@pytest.mark.parametrize("config", ["nv_full", "nv_small"])
def test_writes_store_the_writable_bits_and_reads_the_readable_ones(config: str) -> None:
    rf = NvdlaRegisterFile(config)
    for r in _plain(rf):
        keep = r.reset & ~r.write_mask  # read-only bits keep their value
        rf.write(r.address, 0xFFFFFFFF)
        assert rf.read(r.address) == (keep | r.write_mask) & r.read_mask, r.name
        rf.write(r.address, 0)
        assert rf.read(r.address) == keep & r.read_mask, r.name
        rf.write(r.address, 0x5A5A5A5A)
        assert rf.read(r.address) == (keep | (0x5A5A5A5A & r.write_mask)) & r.read_mask, r.name
    assert rf.bus_errors == 0 and not rf.faults


def test_read_only_registers_ignore_writes() -> None:
    for config in ("nv_full", "nv_large"):
        rf = NvdlaRegisterFile(config)
        version = rf.regs.NVDLA_GLB_S_NVDLA_HW_VERSION_0
        rf.write(version, 0)
        assert rf.read(version) == 0x303031
        rf.write(rf.regs.NVDLA_CDMA_S_STATUS_0, 0x10001)
        assert rf.read(rf.regs.NVDLA_CDMA_S_STATUS_0) == 0
    rf = NvdlaRegisterFile("nv_large")
    atomic_c = V2.NVDLA_CFGROM_CFGROM_CDMA_BASE_ATOMIC_C_0
    rf.write(atomic_c, 1)
    assert rf.read(atomic_c) == 64 and rf.bus_errors == 0


def test_write_only_bits_read_zero() -> None:
    rf = NvdlaRegisterFile("nv_full")
    force = V1.REGISTER_INFO["NVDLA_GEC_ERRSLICE0_MISSIONERR_FORCE_0"]
    assert force.write_only_mask == 0xFFFFFFFF
    rf.write(force.address, 0xFFFFFFFF)
    assert rf.read(force.address) == 0
    rf.write(V1.NVDLA_GLB_S_INTR_SET_0, 0)
    assert rf.read(V1.NVDLA_GLB_S_INTR_SET_0) == 0


def test_d_registers_are_per_group_and_follow_the_producer() -> None:
    rf = NvdlaRegisterFile("nv_full")
    width = V1.NVDLA_PDP_D_DATA_CUBE_IN_WIDTH_0
    rf.write(width, 7)
    rf.write(V1.NVDLA_PDP_S_POINTER_0, 1)
    assert rf.read(width) == 0  # group 1 still at reset
    rf.write(width, 9)
    assert rf.read(width) == 9
    rf.write(V1.NVDLA_PDP_S_POINTER_0, 0)
    assert rf.read(width) == 7
    # A single register is the same whichever group the producer selects.
    cfg = V1.NVDLA_SDP_S_LUT_CFG_0
    rf.write(cfg, 0x71)
    rf.write(V1.NVDLA_SDP_S_POINTER_0, 1)
    assert rf.read(cfg) == 0x71
    assert rf.units["PDP"].snapshot(1).d_data_cube_in_width.cube_in_width == 9


@pytest.mark.parametrize(("config", "absent"), [
    ("nv_small", ("BDMA", "RBK", "CVIF", "GEC")),
    ("nv_large", ("BDMA", "RBK", "GEC")),
    ("nv_full", ()),
])
def test_blocks_a_configuration_lacks_are_bus_errors(config: str, absent: tuple[str, ...]) -> None:
    rf = NvdlaRegisterFile(config)
    for block in absent:
        names = [n for n in rf.regs.REGISTERS if n.startswith(f"NVDLA_{block}_")]
        assert names
        errors = rf.bus_errors
        for name in names:
            address = rf.regs.REGISTERS[name]
            rf.write(address, 0xFFFFFFFF)
            assert rf.read(address) == 0
        assert rf.bus_errors == errors + 2 * len(names)
        assert rf.faults[-1].kind == "bus error" and f"{block} is not in {config}" in rf.faults[-1].message
    assert set(rf.bases) == regfile_config(config).blocks


@pytest.mark.parametrize("offset", [1, 2, 0x5003, 0x5008 + 0x1F00, 0x11000, 0x12000, 0x40000, -4, 1 << 40,
                                    "0x5014", 4.0, None, True])
def test_bad_offsets_are_bus_errors(offset: object) -> None:
    rf = NvdlaRegisterFile("nv_full")
    before = {r.address: rf.read(r.address) for r in _plain(rf)}
    rf.write(offset, 0xFFFFFFFF)  # type: ignore[arg-type]
    assert rf.read(offset) == 0  # type: ignore[arg-type]
    assert rf.bus_errors == 2
    assert all(f.kind == "bus error" for f in rf.faults)
    assert {r.address: rf.read(r.address) for r in _plain(rf)} == before
    assert not rf.irq


def test_a_hole_between_registers_is_a_bus_error() -> None:
    rf = NvdlaRegisterFile("nv_full")
    hole = V1.NVDLA_GEC_FEATURE_0 + 0x10  # GEC has no register there
    assert hole not in V1.REGISTERS.values()
    assert rf.read(hole) == 0 and rf.bus_errors == 1
    assert "no register there" in str(rf.faults[-1]) and f"{hole:#07x}" in str(rf.faults[-1])


@pytest.mark.parametrize("value", [-1, 1 << 32, 2**64, "1", 1.0, None])
def test_values_that_are_not_32_bits_are_bus_errors(value: object) -> None:
    rf = NvdlaRegisterFile("nv_small")
    width = V2.NVDLA_PDP_D_DATA_CUBE_IN_WIDTH_0
    rf.write(width, 5)
    rf.write(width, value)  # type: ignore[arg-type]
    assert rf.read(width) == 5
    assert rf.bus_errors == 1 and "not a 32-bit value" in rf.faults[-1].message
    assert rf.faults[-1].address == width


def test_faults_are_bounded_and_reported() -> None:
    seen = []
    rf = NvdlaRegisterFile("nv_small", on_fault=seen.append)
    for i in range(200):
        rf.read(4 * i + 0x30000)
    assert rf.bus_errors == 200 and len(seen) == 200 and len(rf.faults) == 64


def test_reset_restores_every_register() -> None:
    rf = NvdlaRegisterFile("nv_full")
    fresh = {r.address: rf.read(r.address) for r in _present(rf)}
    for r in _plain(rf):
        rf.write(r.address, 0xFFFFFFFF)
    rf.write(V1.NVDLA_GLB_S_INTR_SET_0, 1)
    rf.write(V1.NVDLA_RBK_S_POINTER_0, 1)
    rf.reset()
    assert {r.address: rf.read(r.address) for r in _present(rf)} == fresh


def test_configurations() -> None:
    assert set(NAMES) == {"nv_full", "nv_large", "nv_small", "nv_small_256", "nv_small_256_full",
                          "nv_medium_512", "nv_medium_1024_full"}
    assert regfile_config("nv_full").regmap is V1 and regfile_config("nv_small_256").regmap is V2
    with pytest.raises(Exception, match="nv_tiny") as e:
        regfile_config("nv_tiny")
    assert "known: nv_full" in str(e.value)
