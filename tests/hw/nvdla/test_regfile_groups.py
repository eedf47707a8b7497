"""The register groups as NVIDIA's firmware drives them: producer and consumer pointers, OP_EN, S_STATUS,
the ping-pong of two operations, the convolution pipe enabled as one, the RDMA blocks joining their
core block, completion and its interrupts, in both register maps."""

from __future__ import annotations

from types import ModuleType

import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import nvdla_v1_regs as V1
from pydla.deviceapi.generated import nvdla_v2_regs as V2
from pydla.hw.nvdla.regfile import NvdlaRegisterFile
from pydla.hw.nvdla.regfile_units import IDLE, PENDING, RUNNING, Launch

CONV_UNITS = ("CACC", "CMAC_A", "CMAC_B", "CSC", "CDMA")  # the firmware's enable order
MAPS = [("nv_full", V1), ("nv_small", V2)]


def _status(rf: NvdlaRegisterFile, block: str) -> tuple[int, int]:
    word = rf.read(rf.regs.REGISTERS[f"NVDLA_{block}_S_STATUS_0"])
    return word & 3, (word >> 16) & 3


def _pointer(rf: NvdlaRegisterFile, block: str) -> tuple[int, int]:
    word = rf.read(rf.regs.REGISTERS[f"NVDLA_{block}_S_POINTER_0"])
    return word & 1, (word >> 16) & 1


def _pdp_program(rf: NvdlaRegisterFile, regs: ModuleType, group: int, width: int) -> None:
    """What the firmware writes for a PDP operation from memory (abridged): pointers, sizes, mode."""
    rf.write(regs.NVDLA_PDP_S_POINTER_0, group)
    rf.write(regs.NVDLA_PDP_RDMA_S_POINTER_0, group)
    rf.write(regs.NVDLA_PDP_RDMA_D_DATA_CUBE_IN_WIDTH_0, width)
    rf.write(regs.NVDLA_PDP_D_DATA_CUBE_IN_WIDTH_0, width)
    mode = regs.REGISTER_INFO["NVDLA_PDP_D_OPERATION_MODE_CFG_0"]
    rf.write(mode.address, mode.pack(POOLING_METHOD=1, FLYING_MODE=1))  # max, from memory


def _pdp_enable(rf: NvdlaRegisterFile, regs: ModuleType) -> None:
    rf.write(regs.NVDLA_PDP_RDMA_D_OP_ENABLE_0, 1)
    rf.write(regs.NVDLA_PDP_D_OP_ENABLE_0, 1)


@pytest.mark.parametrize(("config", "regs"), MAPS)
def test_ping_pong_as_the_firmware_runs_two_operations(config: str, regs: ModuleType) -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile(config, on_launch=launches.append)
    rf.write(regs.NVDLA_GLB_S_INTR_MASK_0, 0)
    # Group 0: programmed and enabled; it runs.
    _pdp_program(rf, regs, 0, 7)
    _pdp_enable(rf, regs)
    assert [(x.processor, x.group, x.groups) for x in launches] == [("PDP", 0, {"PDP": 0, "PDP_RDMA": 0})]
    assert launches[0].views["PDP"].d_data_cube_in_width.cube_in_width == 7
    assert _status(rf, "PDP") == (RUNNING, IDLE) and _pointer(rf, "PDP") == (0, 0)
    # Group 1 programmed while 0 runs: pending, not launched.
    _pdp_program(rf, regs, 1, 11)
    _pdp_enable(rf, regs)
    assert len(launches) == 1
    assert _status(rf, "PDP") == (RUNNING, PENDING) and _status(rf, "PDP_RDMA") == (RUNNING, PENDING)
    assert rf.read(regs.NVDLA_PDP_D_OP_ENABLE_0) == 1  # the producer's (group 1's) OP_EN
    # Group 0 done: its interrupt, the consumers flip, group 1 launched.
    rf.complete("PDP", 0)
    assert rf.read(regs.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 4  # PDP_DONE_STATUS0
    assert rf.irq
    assert _pointer(rf, "PDP") == (1, 1) and _pointer(rf, "PDP_RDMA") == (1, 1)
    assert _status(rf, "PDP") == (IDLE, RUNNING)
    assert [(x.group, x.views["PDP"].d_data_cube_in_width.cube_in_width) for x in launches[1:]] == [(1, 11)]
    # The ISR clears what it read.
    rf.write(regs.NVDLA_GLB_S_INTR_STATUS_0, rf.read(regs.NVDLA_GLB_S_INTR_STATUS_0))
    assert not rf.irq
    rf.complete("PDP", 1)
    assert rf.read(regs.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 5
    assert _pointer(rf, "PDP") == (1, 0) and _status(rf, "PDP") == (IDLE, IDLE)
    assert rf.read(regs.NVDLA_PDP_D_OP_ENABLE_0) == 0
    # Group 0 again, after the consumer came back to it.
    _pdp_program(rf, regs, 0, 3)
    _pdp_enable(rf, regs)
    assert (launches[-1].group, launches[-1].views["PDP_RDMA"].d_data_cube_in_width.cube_in_width) == (0, 3)


def test_an_enabled_group_drops_writes() -> None:
    rf = NvdlaRegisterFile("nv_full")
    regs = V1
    rf.write(regs.NVDLA_RBK_D_DATAIN_SIZE_1_0, 5)
    rf.write(regs.NVDLA_RBK_D_OP_ENABLE_0, 1)
    rf.write(regs.NVDLA_RBK_D_DATAIN_SIZE_1_0, 6)
    rf.write(regs.NVDLA_RBK_D_OP_ENABLE_0, 0)  # OP_EN cannot be taken back
    assert rf.read(regs.NVDLA_RBK_D_DATAIN_SIZE_1_0) == 5 and rf.read(regs.NVDLA_RBK_D_OP_ENABLE_0) == 1
    assert [f.kind for f in rf.faults] == ["busy group", "busy group"]
    assert "group 0 of RBK is enabled" in rf.faults[0].message and rf.bus_errors == 0
    rf.write(regs.NVDLA_RBK_S_POINTER_0, 1)  # the other group takes writes
    rf.write(regs.NVDLA_RBK_D_DATAIN_SIZE_1_0, 6)
    assert rf.read(regs.NVDLA_RBK_D_DATAIN_SIZE_1_0) == 6


@pytest.mark.parametrize(("config", "regs"), MAPS)
def test_the_convolution_pipe_is_enabled_as_one(config: str, regs: ModuleType) -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile(config, on_launch=launches.append)
    for unit in CONV_UNITS:
        rf.write(regs.REGISTERS[f"NVDLA_{unit}_S_POINTER_0"], 1)
    rf.write(regs.NVDLA_CACC_D_DATAOUT_SIZE_1_0, 31)
    rf.write(regs.NVDLA_CDMA_D_DATAIN_SIZE_1_0, 15)
    for unit in CONV_UNITS[:-1]:
        rf.write(regs.REGISTERS[f"NVDLA_{unit}_D_OP_ENABLE_0"], 1)
        assert _status(rf, unit) == (IDLE, PENDING)  # the consumer is still group 0
    assert not launches
    # Group 1 with group 0 idle: nothing runs until group 0 is enabled and done (the consumer is 0).
    for unit in CONV_UNITS:
        rf.write(regs.REGISTERS[f"NVDLA_{unit}_S_POINTER_0"], 0)
    for unit in CONV_UNITS:
        rf.write(regs.REGISTERS[f"NVDLA_{unit}_D_OP_ENABLE_0"], 1)
    assert [(x.processor, x.group, sorted(x.views)) for x in launches] == [("CONV", 0, sorted(CONV_UNITS))]
    rf.complete("CONV", 0)
    # CDMA data done, CDMA weight done and CACC done of group 0; group 1 of CDMA is not enabled yet.
    assert rf.read(regs.NVDLA_GLB_S_INTR_STATUS_0) == (1 << 16) | (1 << 18) | (1 << 20)
    assert all(_pointer(rf, u)[1] == 1 for u in CONV_UNITS) and len(launches) == 1
    rf.write(regs.NVDLA_CDMA_S_POINTER_0, 1)
    rf.write(regs.NVDLA_CDMA_D_OP_ENABLE_0, 1)
    assert [(x.group, x.views["CACC"].d_dataout_size_1.dataout_channel,
             x.views["CDMA"].d_datain_size_1.datain_channel) for x in launches[1:]] == [(1, 31, 15)]
    rf.complete("CONV", 1)
    assert rf.read(regs.NVDLA_GLB_S_INTR_STATUS_0) == 0x3F0000


def _sdp_regs(regs: ModuleType, **fields: int) -> dict[str, int]:
    info = regs.REGISTER_INFO
    return {"NVDLA_SDP_D_FEATURE_MODE_CFG_0": info["NVDLA_SDP_D_FEATURE_MODE_CFG_0"].pack(
        FLYING_MODE=fields.get("flying", 1)),
        "NVDLA_SDP_D_DP_BS_CFG_0": info["NVDLA_SDP_D_DP_BS_CFG_0"].pack(
            BS_BYPASS=fields.get("bs_bypass", 1), BS_ALU_BYPASS=0, BS_MUL_BYPASS=1, BS_MUL_PRELU=0,
            BS_RELU_BYPASS=0),
        "NVDLA_SDP_D_DP_BS_ALU_CFG_0": info["NVDLA_SDP_D_DP_BS_ALU_CFG_0"].pack(
            BS_ALU_SRC=fields.get("src", 0))}


@pytest.mark.parametrize(("fields", "needs_rdma"), [
    ({}, False),                                           # on the fly, no operand: CACC feeds it
    ({"flying": 0}, True),                                 # input from memory
    ({"bs_bypass": 0, "src": 1}, True),                    # X1's ALU operand from memory
    ({"bs_bypass": 0, "src": 0}, False),                   # X1's operand from the register
    ({"bs_bypass": 1, "src": 1}, False),                   # a bypassed stage reads nothing
])
@pytest.mark.parametrize(("config", "regs"), MAPS)
def test_sdp_waits_for_its_rdma_only_when_it_reads_memory(config: str, regs: ModuleType,
                                                          fields: dict[str, int], needs_rdma: bool) -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile(config, on_launch=launches.append)
    for name, value in _sdp_regs(regs, **fields).items():
        rf.write(regs.REGISTERS[name], value)
    rf.write(regs.NVDLA_SDP_D_OP_ENABLE_0, 1)
    if needs_rdma:
        assert not launches and _status(rf, "SDP") == (RUNNING, IDLE)
        rf.write(regs.NVDLA_SDP_RDMA_D_OP_ENABLE_0, 1)
    assert [(x.processor, sorted(x.groups)) for x in launches] == [
        ("SDP", ["SDP", "SDP_RDMA"] if needs_rdma else ["SDP"])]
    rf.complete("SDP", 0)
    assert _pointer(rf, "SDP")[1] == 1 and _pointer(rf, "SDP_RDMA")[1] == (1 if needs_rdma else 0)
    assert rf.read(regs.NVDLA_GLB_S_INTR_STATUS_0) == 1  # SDP_DONE_STATUS0


def test_an_rdma_enabled_first_joins_its_core_block() -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile("nv_full", on_launch=launches.append)
    rf.write(V1.NVDLA_SDP_RDMA_D_OP_ENABLE_0, 1)  # as the firmware does: RDMA, then SDP
    assert not launches and _status(rf, "SDP_RDMA") == (RUNNING, IDLE)
    for name, value in _sdp_regs(V1).items():
        rf.write(V1.REGISTERS[name], value)
    rf.write(V1.NVDLA_SDP_D_OP_ENABLE_0, 1)
    assert sorted(launches[0].groups) == ["SDP", "SDP_RDMA"]
    # PDP on the fly (from the SDP) needs no PDP_RDMA; CDP always waits for CDP_RDMA.
    rf.write(V1.NVDLA_PDP_D_OP_ENABLE_0, 1)
    assert launches[-1].processor == "PDP" and sorted(launches[-1].groups) == ["PDP"]
    rf.write(V1.NVDLA_CDP_D_OP_ENABLE_0, 1)
    assert launches[-1].processor == "PDP"
    rf.write(V1.NVDLA_CDP_RDMA_D_OP_ENABLE_0, 1)
    assert launches[-1].processor == "CDP"
    assert (len(launches[-1].lut_le), len(launches[-1].lut_lo)) == (65, 257)


def test_rubik_launch_and_status_registers_at_completion() -> None:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile("nv_full", on_launch=launches.append)
    rf.write(V1.NVDLA_RBK_D_PERF_ENABLE_0, 1)
    rf.write(V1.NVDLA_RBK_D_OP_ENABLE_0, 1)
    assert launches[-1].processor == "RUBIK" and launches[-1].views["RBK"].d_perf_enable.perf_en == 1
    rf.complete("RUBIK", 0, status={"NVDLA_RBK_D_PERF_READ_STALL_0": 123})
    assert rf.read(V1.NVDLA_RBK_D_PERF_READ_STALL_0) == 123  # read-only, set by the hardware
    rf.write(V1.NVDLA_RBK_D_PERF_READ_STALL_0, 5)
    assert rf.read(V1.NVDLA_RBK_D_PERF_READ_STALL_0) == 123
    assert rf.read(V1.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 8  # RUBIK_DONE_STATUS0


def test_complete_is_checked() -> None:
    rf = NvdlaRegisterFile("nv_full")
    for call in (lambda: rf.complete("PDP", 0), lambda: rf.complete("NOPE", 0)):
        with pytest.raises(DlaError) as e:
            call()
        assert e.value.code == NvError.BadParameter and "nothing runs" in e.value.message
    rf.write(V1.NVDLA_RBK_D_OP_ENABLE_0, 1)
    with pytest.raises(DlaError, match="group 0 runs"):
        rf.complete("RUBIK", 1)
    for status in ({"NVDLA_PDP_D_PERF_WRITE_STALL_0": 1}, {"NVDLA_RBK_D_PERF_READ_STALL_0": -1},
                   {"NVDLA_RBK_S_STATUS_0": 1}):
        with pytest.raises(DlaError, match="not a register of its groups"):
            rf.complete("RUBIK", 0, status=status)
    assert "RUBIK" in rf.active  # a refused completion changes nothing
    rf.complete("RUBIK", 0)
    assert rf.read(V1.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 8


def test_a_failed_operation_releases_its_groups_without_an_interrupt() -> None:
    faults = []
    launches: list[Launch] = []
    rf = NvdlaRegisterFile("nv_small", on_launch=launches.append, on_fault=faults.append)
    rf.write(V2.NVDLA_CDP_RDMA_D_OP_ENABLE_0, 1)
    rf.write(V2.NVDLA_CDP_D_OP_ENABLE_0, 1)
    rf.write(V2.NVDLA_CDP_S_POINTER_0, 1)
    rf.write(V2.NVDLA_CDP_RDMA_S_POINTER_0, 1)
    rf.write(V2.NVDLA_CDP_RDMA_D_OP_ENABLE_0, 1)
    rf.write(V2.NVDLA_CDP_D_OP_ENABLE_0, 1)
    rf.complete("CDP", 0, ok=False)
    assert rf.read(V2.NVDLA_GLB_S_INTR_STATUS_0) == 0 and not rf.irq
    assert [f.kind for f in faults] == ["operation failed"] and "CDP group 0 failed" in str(faults[0])
    assert [x.group for x in launches] == [0, 1]  # the next operation still runs
    rf.complete("CDP", 1)
    assert rf.read(V2.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 3


def test_a_device_completing_inside_on_launch_runs_the_chain_in_order() -> None:
    """A synchronous device completes each operation from its launch callback: the next group's launch
    follows (queued, not recursive), in order, with the right values."""
    order: list[tuple[int, int]] = []
    rf: NvdlaRegisterFile

    def run(launch: Launch) -> None:
        order.append((launch.group, launch.views["RBK"].d_datain_size_1.datain_channel))
        rf.complete(launch.processor, launch.group)
        order.append((launch.group, -1))

    rf = NvdlaRegisterFile("nv_full", on_launch=run)
    rf.write(V1.NVDLA_GLB_S_INTR_MASK_0, 0x3FFFFF)  # all masked: the status still records the dones
    for group, channels in ((0, 4), (1, 8)):
        rf.write(V1.NVDLA_RBK_S_POINTER_0, group)
        rf.write(V1.NVDLA_RBK_D_DATAIN_SIZE_1_0, channels)
        rf.write(V1.NVDLA_RBK_D_OP_ENABLE_0, 1)
    assert order == [(0, 4), (0, -1), (1, 8), (1, -1)]
    assert rf.read(V1.NVDLA_GLB_S_INTR_STATUS_0) == 0x300 and not rf.irq
