"""Many register writes in one call (NvdlaRegisterFile.write_words, NvdlaDevice.reg_write_words): the
same registers, LUT, launches and faults as the writes one by one."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.deviceapi.generated import nvdla_smmu as S
from pydla.deviceapi.generated import nvdla_v1_regs as V1
from pydla.hw.nvdla.regfile import NvdlaRegisterFile
from pydla.hw.nvdla.regfile_units import LE_ENTRIES, LO_ENTRIES, Launch
from pydla.hw.nvdla_device import NvdlaDevice

U32 = np.uint32


def _state(rf: NvdlaRegisterFile) -> tuple[object, ...]:
    return (tuple(bytes(g) for u in rf.units.values() for g in u.groups),
            tuple((u.producer, u.consumer) for u in rf.units.values()),
            tuple((tuple(lut.le), tuple(lut.lo), lut.entry, lut.table) for lut in rf.luts.values()),
            sorted(rf._plain.items()), rf.bus_errors, [str(f) for f in rf.faults], rf.irq)


def _both(writes: list[tuple[int, int]]) -> tuple[NvdlaRegisterFile, NvdlaRegisterFile, list[Launch],
                                                    list[Launch]]:
    one: list[Launch] = []
    block: list[Launch] = []
    a = NvdlaRegisterFile("nv_full", on_launch=one.append)
    b = NvdlaRegisterFile("nv_full", on_launch=block.append)
    for address, value in writes:
        a.write(address, value)
    b.write_words(np.array([w[0] for w in writes], U32), np.array([w[1] for w in writes], U32))
    return a, b, one, block


def _lut_program(block: str, first: int, count: int, table: int = 0) -> list[tuple[int, int]]:
    cfg = V1.REGISTERS[f"NVDLA_{block}_S_LUT_ACCESS_CFG_0"]
    data = V1.REGISTERS[f"NVDLA_{block}_S_LUT_ACCESS_DATA_0"]
    word = first | (table << 16) | (1 << 17)  # LUT_ADDR, LUT_TABLE_ID, LUT_ACCESS_TYPE write
    return [(cfg, word)] + [(data, 0x10000 + 7 * i) for i in range(count)]


def test_a_program_with_pointers_repeats_and_enable_is_the_same_as_writes_one_by_one() -> None:
    r = V1.REGISTERS
    writes = [(r["NVDLA_SDP_S_POINTER_0"], 0), (r["NVDLA_SDP_RDMA_S_POINTER_0"], 1),
              (r["NVDLA_SDP_RDMA_D_FEATURE_MODE_CFG_0"], 0),
              (r["NVDLA_SDP_RDMA_D_BRDMA_CFG_0"], 1),
              (r["NVDLA_SDP_RDMA_D_FEATURE_MODE_CFG_0"], 0xFFFFFFFF),  # again: the last value counts
              (r["NVDLA_SDP_D_DATA_CUBE_WIDTH_0"], 0xFFFFFFFF),  # masked to its field
              (r["NVDLA_SDP_D_DATA_CUBE_HEIGHT_0"], 3), (r["NVDLA_SDP_D_DATA_CUBE_CHANNEL_0"], 31),
              (r["NVDLA_SDP_D_FEATURE_MODE_CFG_0"], 1), (r["NVDLA_SDP_S_STATUS_0"], 0xFFFF),  # read only
              (r["NVDLA_SDP_S_LUT_LE_START_0"], 0x1234), (r["NVDLA_SDP_S_LUT_INFO_0"], 0xFFFFFFFF),  # single
              (0x7, 1), (0xFFFFC, 2),  # no register there: bus errors
              (r["NVDLA_SDP_D_OP_ENABLE_0"], 1)]
    a, b, one, block = _both(writes)
    assert _state(a) == _state(b)
    assert a.bus_errors == 2
    assert [launch.processor for launch in one] == [launch.processor for launch in block] == ["SDP"]
    assert bytes(one[0].views["SDP"]) == bytes(block[0].views["SDP"])
    assert one[0].views["SDP"].d_data_cube_height.height == 3
    sdp = b.units["SDP"]
    at = (r["NVDLA_SDP_S_LUT_LE_START_0"] - sdp.base) >> 2
    assert sdp.arrays[0][at] == sdp.arrays[1][at] == 0x1234  # a single register: both groups' copies


def test_writes_into_an_enabled_group_are_each_dropped_and_counted() -> None:
    r = V1.REGISTERS
    enable = [(r["NVDLA_PDP_D_OP_ENABLE_0"], 1)]
    program = [(r["NVDLA_PDP_D_DATA_CUBE_IN_WIDTH_0"], 5), (r["NVDLA_PDP_D_DATA_CUBE_IN_HEIGHT_0"], 6)]
    # on the fly (FLYING_MODE 0): PDP waits for its SDP, so the group stays enabled
    a, b, _, _ = _both(enable + program)
    assert _state(a) == _state(b)
    assert [f.kind for f in b.faults] == ["busy group", "busy group"]


@pytest.mark.parametrize(("first", "count", "table"), [(0, LE_ENTRIES, 0), (0, LO_ENTRIES, 1),
                                                       (60, 20, 0),  # past the end: the last entry
                                                       (LE_ENTRIES - 1, 3, 0), (10, 5, 1)])
def test_lut_data_runs_fill_the_table_as_writes_one_by_one(first: int, count: int, table: int) -> None:
    a, b, _, _ = _both(_lut_program("CDP", first, count, table) + _lut_program("SDP", first, count, table))
    assert _state(a) == _state(b)
    assert b.luts["CDP"].entry == min(first + count, (LO_ENTRIES if table else LE_ENTRIES) - 1)


def test_lut_data_with_no_entry_selected_or_read_access_keeps_its_faults() -> None:
    r = V1.REGISTERS
    past = _lut_program("CDP", LE_ENTRIES + 3, 4)  # entry past the LE table: each write is refused
    read = [(r["NVDLA_SDP_S_LUT_ACCESS_CFG_0"], 0), (r["NVDLA_SDP_S_LUT_ACCESS_DATA_0"], 9)]
    a, b, _, _ = _both(past + read)
    assert _state(a) == _state(b)
    assert [f.kind for f in b.faults] == ["lut range"] * 5  # the CFG and the 4 data writes


def test_random_programs_agree_with_writes_one_by_one() -> None:
    rng = np.random.default_rng(7)
    addresses = sorted(set(V1.REGISTERS.values()))
    for _ in range(30):
        picked = rng.choice(addresses, size=60)
        writes = [(int(a), int(v)) for a, v in zip(picked, rng.integers(0, 1 << 32, 60), strict=True)]
        a, b, one, block = _both(writes)
        assert _state(a) == _state(b)
        assert [x.processor for x in one] == [x.processor for x in block]


def test_device_block_write_with_smmu_or_bad_values_goes_one_by_one() -> None:
    dev = NvdlaDevice("nv_full")
    r = V1.REGISTERS
    dev.reg_write_words(np.array([S.PYDLA_SMMU_CTX, r["NVDLA_PDP_D_DATA_CUBE_IN_WIDTH_0"]], U32),
                        np.array([3, 9], U32))
    assert dev.smmu.ctx == 3 and dev.reg_read(r["NVDLA_PDP_D_DATA_CUBE_IN_WIDTH_0"]) == 9
    dev.reg_write_words(np.array([r["NVDLA_PDP_D_DATA_CUBE_IN_HEIGHT_0"]], np.int64),
                        np.array([1 << 40], np.int64))  # not 32 bits: a bus error, nothing stored
    assert dev.bus_errors == 1 and dev.reg_read(r["NVDLA_PDP_D_DATA_CUBE_IN_HEIGHT_0"]) == 0
    dev.reg_write_words(np.array([r["NVDLA_PDP_D_DATA_CUBE_IN_HEIGHT_0"]], U32), np.array([4], U32))
    assert dev.reg_read(r["NVDLA_PDP_D_DATA_CUBE_IN_HEIGHT_0"]) == 4
