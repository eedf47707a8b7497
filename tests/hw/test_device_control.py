"""The virtual device's control plane: register groups, status, interrupts, errors, modes, reset, trace.

As in ``test_device_blocks.py`` the device is driven only through registers and memory it maps.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.hw.device import VirtualDevice
from pydla.target.config import load_config, parse_config
from tests.hw.regs import (
    FP16,
    FP32,
    MMU_FAULT_BIT,
    SENTINEL,
    Arena,
    Cube,
    IrqWaiter,
    bdma_op,
    consumer,
    done_bit,
    error_bit,
    group_state,
    max_pool_2x2,
    pdp_op,
    pool_input,
    program,
    raw_config,
    reg,
    status,
)

IDLE, ENABLED, RUNNING = (int(R.group_state_e.IDLE), int(R.group_state_e.ENABLED),
                          int(R.group_state_e.RUNNING))
HW = R.dla_hw_error_e


@pytest.fixture
def dev() -> Any:
    device = VirtualDevice("full", mode="deterministic")
    yield device
    device.close()


@pytest.fixture
def arena(dev: VirtualDevice) -> Arena:
    return Arena(dev)


def pool_pair(arena: Arena, seed: int) -> tuple[Cube, Cube, np.ndarray]:
    """A (1, 4, 4) source, room for its (1, 2, 2) 2x2 max pool, and the expected result."""
    x = pool_input(seed)
    return arena.put(x), arena.cube((1, 2, 2)), max_pool_2x2(x)


def small_conv(dev: VirtualDevice, arena: Arena, *, out_hw: tuple[int, int] = (2, 2), group: int = 0,
               precision: int = FP32, mode: int = int(R.conv_mode_e.DIRECT)) -> tuple[Cube, np.ndarray]:
    """CONV (1 -> 1 channel, 3x3 of ones over a 4x4 input) and its flying SDP; returns dst and expected."""
    dt = np.float16 if precision == FP16 else np.float32
    x = np.arange(16, dtype=dt).reshape(1, 4, 4)
    src = arena.put(x)
    dst = arena.cube((1, *out_hw), dt)
    program(dev, "CONV", group=group, ctx_id=arena.ctx, precision=precision, mode=mode, src=src,
            wt_addr=arena.vector(np.ones(9, dt)), wt_kernels=1, wt_channels=1, wt_height=3, wt_width=3,
            stride_x=1, stride_y=1, pad_left=0, pad_right=0, pad_top=0, pad_bottom=0, dilation_x=1,
            dilation_y=1, groups=1, out_width=out_hw[1], out_height=out_hw[0], out_pad_x=0, out_pad_y=0,
            op_enable=1)
    program(dev, "SDP", group=group, ctx_id=arena.ctx, precision=precision, out_precision=precision,
            src_mode=int(R.sdp_src_mode_e.FLYING), src=Cube(0, (1, *out_hw), 0, 0, np.dtype(dt), 0), dst=dst,
            bias_enable=0, bn_enable=0, ew_op=0, act=0, op_enable=1)
    xf = x[0].astype(np.float32)
    expect = np.array([[[xf[i:i + 3, j:j + 3].sum() for j in range(2)] for i in range(2)]], np.float32)
    return dst, expect


# -- register groups and status ---------------------------------------------------------------------------


def test_producer_pointer_selects_the_group_written_and_read(dev: VirtualDevice) -> None:
    for block in ("BDMA", "CONV", "SDP", "PDP", "CDP", "RUBIK"):
        field = {"BDMA": "line_size", "CONV": "wt_kernels", "SDP": "act_alpha", "PDP": "kernel_width",
                 "CDP": "lrn_size", "RUBIK": "block_x"}[block]
        program(dev, block, group=0, **{field: 0x1234})
        program(dev, block, group=1, **{field: 0x5678})
        assert dev.reg_read(reg(block, "s_pointer")) == 1
        assert dev.reg_read(reg(block, field)) == 0x5678
        dev.reg_write(reg(block, "s_pointer"), 0)
        assert dev.reg_read(reg(block, field)) == 0x1234
        # Only bit 0 is the producer; the consumer bit (16) is read only.
        dev.reg_write(reg(block, "s_pointer"), 0x10000)
        assert dev.reg_read(reg(block, "s_pointer")) == 0
        dev.reg_write(reg(block, "s_pointer"), 3)
        assert dev.reg_read(reg(block, "s_pointer")) == 1
        assert dev.reg_read(reg(block, field)) == 0x5678


def test_groups_keep_their_own_configuration(dev: VirtualDevice, arena: Arena) -> None:
    # Group 1 is programmed and enabled first; it waits for group 0, which is next in turn.
    x1 = pool_input(100, (2, 4, 4))
    src1, dst1 = arena.put(x1), arena.cube((2, 2, 2))
    pdp_op(dev, src1, dst1, arena.ctx, group=1, method=R.pdp_method_e.MIN)
    assert group_state(dev, "PDP", 1) == ENABLED
    assert group_state(dev, "PDP", 0) == IDLE
    assert consumer(dev, "PDP") == 0
    assert status(dev) == 0
    src0, dst0, expect0 = pool_pair(arena, 7)
    pdp_op(dev, src0, dst0, arena.ctx, group=0, kernel=(2, 2))
    # Both ran, group 0 then group 1, each with its own registers.
    assert status(dev) == done_bit("PDP", 0) | done_bit("PDP", 1)
    np.testing.assert_array_equal(arena.get(dst0), expect0)
    np.testing.assert_array_equal(arena.get(dst1), x1.reshape(2, 2, 2, 2, 2).min(axis=(2, 4)))
    assert consumer(dev, "PDP") == 0
    assert dev.reg_read(R.PDP_S_STATUS) == 0


def test_block_alternates_groups(dev: VirtualDevice, arena: Arena) -> None:
    src, dst, expect = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=0)
    assert status(dev) == done_bit("PDP", 0)
    np.testing.assert_array_equal(arena.get(dst), expect)
    assert consumer(dev, "PDP") == 1
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    # Group 0 again: it is group 1's turn, so it waits ...
    src2, dst2, expect2 = pool_pair(arena, 2)
    pdp_op(dev, src2, dst2, arena.ctx, group=0)
    assert group_state(dev, "PDP", 0) == ENABLED
    assert status(dev) == 0
    assert (arena.raw(dst2) == SENTINEL).all()
    # ... until group 1 has run.
    src3, dst3, expect3 = pool_pair(arena, 3)
    pdp_op(dev, src3, dst3, arena.ctx, group=1)
    assert status(dev) == done_bit("PDP", 0) | done_bit("PDP", 1)
    np.testing.assert_array_equal(arena.get(dst2), expect2)
    np.testing.assert_array_equal(arena.get(dst3), expect3)
    assert consumer(dev, "PDP") == 1
    assert dev.reg_read(R.PDP_S_OPS_DONE) == 3


def test_op_enable_zero_cancels_an_enabled_group(dev: VirtualDevice, arena: Arena) -> None:
    src, dst, _ = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=1)
    assert group_state(dev, "PDP", 1) == ENABLED
    program(dev, "PDP", group=1, op_enable=0)
    assert group_state(dev, "PDP", 1) == IDLE
    src0, dst0, expect0 = pool_pair(arena, 2)
    pdp_op(dev, src0, dst0, arena.ctx, group=0)
    assert status(dev) == done_bit("PDP", 0)
    np.testing.assert_array_equal(arena.get(dst0), expect0)
    assert (arena.raw(dst) == SENTINEL).all()


def test_status_states_idle_enabled_running(dev: VirtualDevice, arena: Arena) -> None:
    assert dev.reg_read(R.PDP_S_STATUS) == 0
    dev.inject_hang("PDP")
    src, dst, _ = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=0)
    src1, dst1, _ = pool_pair(arena, 2)
    pdp_op(dev, src1, dst1, arena.ctx, group=1)
    assert dev.reg_read(R.PDP_S_STATUS) == RUNNING | ENABLED << 16
    assert group_state(dev, "PDP", 0) == RUNNING
    assert group_state(dev, "PDP", 1) == ENABLED


def test_ops_done_counters(dev: VirtualDevice, arena: Arena) -> None:
    for i in range(3):
        data = arena.vector(np.full(8, i, np.uint8))
        bdma_op(dev, data, arena.iova + arena.alloc(8), arena.ctx, line_size=8, group=i % 2)
    for i in range(2):
        src, dst, _ = pool_pair(arena, i)
        pdp_op(dev, src, dst, arena.ctx, group=i % 2)
    small_conv(dev, arena)
    # A failed operation counts nowhere.
    src, dst, _ = pool_pair(arena, 9)
    pdp_op(dev, src, dst, arena.ctx, group=0, method=9)
    assert status(dev) & error_bit("PDP", 0)
    counts = {"BDMA": 3, "CONV": 1, "SDP": 1, "PDP": 2, "CDP": 0, "RUBIK": 0}
    for block, n in counts.items():
        assert dev.reg_read(reg(block, "s_ops_done")) == n, block
    assert dev.reg_read(R.GLB_OPS_DONE) == sum(counts.values())


@pytest.mark.parametrize("address", [R.BDMA_D_LINE_SIZE + 1, R.BDMA_D_LINE_SIZE + 2, 0x7000, 0x7FFC,
                                     0x100000, -4, 1 << 40])
def test_bad_register_addresses_do_not_raise(dev: VirtualDevice, address: int) -> None:
    errors = dev.bus_errors
    dev.reg_write(address, 0xFFFFFFFF)
    assert dev.reg_read(address) == 0
    assert dev.bus_errors == errors + 2
    assert dev.reg_read(R.BDMA_D_LINE_SIZE) == 0
    assert status(dev) == 0


def test_unaligned_op_enable_does_not_enable(dev: VirtualDevice) -> None:
    dev.reg_write(R.BDMA_D_OP_ENABLE + 1, 1)
    dev.reg_write(R.BDMA_D_OP_ENABLE + 2, 1)
    assert dev.reg_read(R.BDMA_S_STATUS) == 0
    assert dev.idle()


def test_unused_offsets_read_zero(dev: VirtualDevice) -> None:
    for address in (R.GLB_OPS_DONE + 4, 0xFFC, R.BDMA_S_OPS_DONE + 4, R.CONV_S_STATUS + 0x3C):
        dev.reg_write(address, 0x55)
        assert dev.reg_read(address) == 0
    # GLB_INTR_SET is write only.
    dev.reg_write(R.GLB_INTR_SET, 1)
    assert dev.reg_read(R.GLB_INTR_SET) == 0


@pytest.mark.parametrize("name", ["full", "small"])
def test_hw_version_and_config_registers(name: str) -> None:
    cfg = load_config(name)
    dev = VirtualDevice(name)
    assert dev.reg_read(R.GLB_HW_VERSION) == cfg.hw_version
    present = dev.reg_read(R.GLB_CONFIG)
    assert present == sum(1 << int(b) for b in cfg.blocks)
    assert {b.name for b in dla_block_e if present >> int(b) & 1} == {b.name for b in cfg.blocks}
    # Read only.
    dev.reg_write(R.GLB_HW_VERSION, 0)
    dev.reg_write(R.GLB_CONFIG, 0)
    assert dev.reg_read(R.GLB_HW_VERSION) == cfg.hw_version
    assert dev.reg_read(R.GLB_CONFIG) == present


def test_small_config_ignores_absent_blocks() -> None:
    dev = VirtualDevice("small")
    assert dev.reg_read(R.GLB_CONFIG) == 0b011110
    arena = Arena(dev)
    dst = arena.iova + arena.alloc(8)
    bdma_op(dev, arena.vector(np.arange(8, dtype=np.uint8)), dst, arena.ctx, line_size=8, group=0)
    assert dev.reg_read(R.BDMA_D_LINE_SIZE) == 0
    assert dev.reg_read(R.BDMA_S_STATUS) == 0
    program(dev, "RUBIK", group=1, block_x=2, op_enable=1)
    assert dev.reg_read(R.RUBIK_D_BLOCK_X) == 0
    assert dev.reg_read(R.RUBIK_S_POINTER) == 0
    assert status(dev) == 0 and dev.idle()
    assert (arena.bo.array[dst - arena.iova:dst - arena.iova + 8] == SENTINEL).all()
    with pytest.raises(DlaError) as e:
        dev.inject_hang("BDMA")
    assert e.value.code == NvError.NotSupported
    # The blocks it has work.
    src, out, expect = pool_pair(arena, 1)
    pdp_op(dev, src, out, arena.ctx)
    assert status(dev) == done_bit("PDP", 0)
    np.testing.assert_array_equal(arena.get(out), expect)


# -- interrupts --------------------------------------------------------------------------------------------


def run_one(dev: VirtualDevice, arena: Arena, block: str, group: int) -> Cube | int:
    """One small operation of ``block`` in ``group``; returns its destination."""
    if block == "BDMA":
        address = arena.iova + arena.alloc(16)
        bdma_op(dev, arena.vector(np.arange(16, dtype=np.uint8)), address, arena.ctx, line_size=16,
                group=group)
        return address
    x = pool_input(group, (4, 2, 2))
    src = arena.put(x)
    if block == "PDP":
        dst = arena.cube((4, 1, 1))
        pdp_op(dev, src, dst, arena.ctx, group=group)
    elif block == "CDP":
        dst = arena.cube((4, 2, 2))
        program(dev, "CDP", group=group, ctx_id=arena.ctx, precision=FP32, src=src, dst=dst, lrn_size=3,
                lrn_alpha=1e-4, lrn_beta=0.75, lrn_bias=1.0, op_enable=1)
    else:
        dst = arena.cube((1, 4, 4))
        program(dev, "RUBIK", group=group, ctx_id=arena.ctx, precision=FP32,
                mode=int(R.rubik_mode_e.CONTRACT), src=src, dst=dst, block_x=2, block_y=2, dcr=1, op_enable=1)
    return dst


@pytest.mark.parametrize("block", ["BDMA", "PDP", "CDP", "RUBIK"])
def test_done_bit_per_block_and_group(dev: VirtualDevice, arena: Arena, block: str) -> None:
    run_one(dev, arena, block, 0)
    assert status(dev) == done_bit(block, 0) == 1 << (2 * int(dla_block_e[block]))
    dev.reg_write(R.GLB_INTR_STATUS, done_bit(block, 0))
    run_one(dev, arena, block, 1)
    assert status(dev) == done_bit(block, 1) == 1 << (2 * int(dla_block_e[block]) + 1)


def test_conv_sdp_pair_done_bits(dev: VirtualDevice, arena: Arena) -> None:
    dst, expect = small_conv(dev, arena)
    assert status(dev) == done_bit("CONV", 0) | done_bit("SDP", 0) == 0b10100
    np.testing.assert_array_equal(arena.get(dst), expect)


def test_handler_runs_inside_the_op_enable_write(dev: VirtualDevice, arena: Arena) -> None:
    src, dst, expect = pool_pair(arena, 4)
    seen: list[tuple[int, np.ndarray]] = []

    def handler() -> None:
        value = status(dev)
        seen.append((value, arena.get(dst)))
        dev.reg_write(R.GLB_INTR_STATUS, value)  # the handler acknowledges: no deadlock

    dev.connect_irq(handler)
    pdp_op(dev, src, dst, arena.ctx, enable=False)
    assert seen == []
    program(dev, "PDP", op_enable=1)
    assert len(seen) == 1
    assert seen[0][0] == done_bit("PDP", 0)
    np.testing.assert_array_equal(seen[0][1], expect)
    assert status(dev) == 0


def test_mask_suppresses_the_handler_not_the_status(dev: VirtualDevice, arena: Arena) -> None:
    calls = []
    dev.connect_irq(lambda: calls.append(status(dev)))
    dev.reg_write(R.GLB_INTR_MASK, done_bit("PDP", 0) | done_bit("PDP", 1))
    assert dev.reg_read(R.GLB_INTR_MASK) == done_bit("PDP", 0) | done_bit("PDP", 1)
    src, dst, expect = pool_pair(arena, 5)
    pdp_op(dev, src, dst, arena.ctx)
    assert calls == []
    assert status(dev) == done_bit("PDP", 0)
    np.testing.assert_array_equal(arena.get(dst), expect)
    # An unmasked source still interrupts.
    run_one(dev, arena, "BDMA", 0)
    assert calls and calls[0] == done_bit("PDP", 0) | done_bit("BDMA", 0)


def test_intr_status_is_write_one_to_clear(dev: VirtualDevice) -> None:
    dev.reg_write(R.GLB_INTR_MASK, 0xFFFFFFFF)
    dev.reg_write(R.GLB_INTR_SET, 0b1011 | 1 << 20)
    assert status(dev) == 0b1011 | 1 << 20
    dev.reg_write(R.GLB_INTR_STATUS, 0)
    assert status(dev) == 0b1011 | 1 << 20
    dev.reg_write(R.GLB_INTR_STATUS, 0b0010)
    assert status(dev) == 0b1001 | 1 << 20
    dev.reg_write(R.GLB_INTR_STATUS, 1 << 20 | 1 << 30)
    assert status(dev) == 0b1001
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    assert status(dev) == 0


def test_intr_set_raises_the_handler(dev: VirtualDevice) -> None:
    calls = []
    dev.connect_irq(lambda: calls.append(status(dev)))
    dev.reg_write(R.GLB_INTR_SET, 1 << 5)
    assert calls == [1 << 5]
    assert status(dev) == 1 << 5
    dev.reg_write(R.GLB_INTR_STATUS, 1 << 5)
    # A masked bit raised with intr_set does not call the handler.
    dev.reg_write(R.GLB_INTR_MASK, 1 << 7)
    dev.reg_write(R.GLB_INTR_SET, 1 << 7)
    assert calls == [1 << 5]
    assert status(dev) == 1 << 7


def test_disconnected_handler_is_not_called(dev: VirtualDevice) -> None:
    calls = []

    def handler() -> None:
        calls.append(1)

    dev.connect_irq(handler)
    dev.disconnect_irq(handler)
    dev.reg_write(R.GLB_INTR_SET, 1)
    assert calls == []


# -- errors ------------------------------------------------------------------------------------------------


def assert_failed(dev: VirtualDevice, block: str, group: int, code: int, detail: str,
                  also: tuple[str, ...] = ()) -> None:
    want = error_bit(block, group)
    for other in also:
        want |= error_bit(other, group)
    if code == HW.MMU_FAULT:
        want |= MMU_FAULT_BIT
    assert status(dev) == want, (hex(status(dev)), list(dev.log))
    for b in (block, *also):
        assert dev.reg_read(reg(b, "s_error")) == code
        assert dev.reg_read(reg(b, "s_error_group")) == group
        assert dev.reg_read(reg(b, "s_status")) == 0
        assert consumer(dev, b) == group ^ 1
    assert dev.log and detail in dev.log[-1], list(dev.log)
    assert f"{block} group {group}: {HW(code).name}" in dev.log[-1]


def test_mmu_fault_outside_any_mapping(dev: VirtualDevice, arena: Arena) -> None:
    run_one(dev, arena, "BDMA", 0)
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    bad = arena.iova + (1 << 30)
    dst = arena.iova + arena.alloc(16)
    bdma_op(dev, bad, dst, arena.ctx, line_size=16, group=1)
    assert_failed(dev, "BDMA", 1, HW.MMU_FAULT, "not mapped")
    assert dev.reg_read(R.GLB_MMU_FAULT_ADDR_LO) == bad & 0xFFFFFFFF
    assert dev.reg_read(R.GLB_MMU_FAULT_ADDR_HI) == bad >> 32
    assert dev.reg_read(R.GLB_MMU_FAULT_CTX) == arena.ctx
    assert dev.reg_read(R.GLB_MMU_FAULT_BLOCK) == int(dla_block_e.BDMA)
    assert (arena.bo.array[dst - arena.iova:dst - arena.iova + 16] == SENTINEL).all()


def test_mmu_fault_address_above_4g() -> None:
    dev = VirtualDevice(parse_config(raw_config(iova_base=3 << 32)))
    arena = Arena(dev, 1 << 16)
    src = arena.put(pool_input(0))
    bad = Cube((7 << 32) + 0x40, (1, 2, 2), 8, 16, np.dtype(np.float32), 0)
    pdp_op(dev, src, bad, arena.ctx, group=0)
    assert_failed(dev, "PDP", 0, HW.MMU_FAULT, "not mapped")
    assert dev.reg_read(R.GLB_MMU_FAULT_ADDR_LO) == 0x40
    assert dev.reg_read(R.GLB_MMU_FAULT_ADDR_HI) == 7
    assert dev.reg_read(R.GLB_MMU_FAULT_BLOCK) == int(dla_block_e.PDP)


def test_mmu_fault_in_conv_fails_the_pair(dev: VirtualDevice, arena: Arena) -> None:
    dst = arena.cube((1, 2, 2))
    program(dev, "CONV", group=0, ctx_id=arena.ctx, precision=FP32, mode=0,
            src=Cube(arena.iova + arena.size - 32, (1, 4, 4), 16, 64, np.dtype(np.float32), 0),
            wt_addr=arena.vector(np.ones(9, np.float32)), wt_kernels=1, wt_channels=1, wt_height=3,
            wt_width=3, stride_x=1, stride_y=1, dilation_x=1, dilation_y=1, groups=1, out_width=2,
            out_height=2, op_enable=1)
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32, src_mode=1,
            src=Cube(0, (1, 2, 2), 0, 0, np.dtype(np.float32), 0), dst=dst, op_enable=1)
    assert_failed(dev, "CONV", 0, HW.MMU_FAULT, "runs past the end", also=("SDP",))
    assert dev.reg_read(R.GLB_MMU_FAULT_BLOCK) == int(dla_block_e.CONV)
    assert dev.reg_read(R.GLB_MMU_FAULT_ADDR_LO) == (arena.iova + arena.size - 32) & 0xFFFFFFFF
    assert (arena.raw(dst) == SENTINEL).all()


def test_access_in_another_contexts_space_faults(dev: VirtualDevice) -> None:
    a = Arena(dev, 8192)
    b = Arena(dev, 8192)
    b_second = dev.memory.allocate(4096)
    b_second.array[:] = 7
    b_iova = dev.iommu.map(b.ctx, b_second)
    assert a.ctx != b.ctx
    assert all(m.iova != b_iova for m in dev.iommu.mappings(a.ctx))
    # Context a reads (then writes) at an address only context b has mapped.
    bdma_op(dev, b_iova, a.iova, a.ctx, line_size=16, group=0)
    assert_failed(dev, "BDMA", 0, HW.MMU_FAULT, "not mapped")
    assert dev.reg_read(R.GLB_MMU_FAULT_CTX) == a.ctx
    assert (a.bo.array[:16] == SENTINEL).all()
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    bdma_op(dev, a.iova, b_iova, a.ctx, line_size=16, group=1)
    assert_failed(dev, "BDMA", 1, HW.MMU_FAULT, "not mapped")
    assert (b_second.array == 7).all()
    # The same copy in context b works.
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    bdma_op(dev, b.iova, b_iova, b.ctx, line_size=16, group=0)
    assert status(dev) == done_bit("BDMA", 0)
    assert (b_second.array[:16] == SENTINEL).all() and (b_second.array[16:] == 7).all()


def test_unknown_context_faults(dev: VirtualDevice, arena: Arena) -> None:
    bdma_op(dev, arena.iova, arena.iova + 64, 999, line_size=16)
    assert_failed(dev, "BDMA", 0, HW.MMU_FAULT, "no such context")
    assert dev.reg_read(R.GLB_MMU_FAULT_CTX) == 999


BAD_CONFIGS = {
    # name: (block, detail in the log)
    "pdp_zero_width": ("PDP", "out of range"),
    "pdp_unknown_method": ("PDP", "method 7"),
    "pdp_pad_not_smaller_than_kernel": ("PDP", "pad must be smaller"),
    "pdp_wrong_output_size": ("PDP", "output height"),
    "pdp_unknown_precision": ("PDP", "precision 5"),
    "bdma_zero_lines": ("BDMA", "BDMA"),
    "cdp_lrn_size_zero": ("CDP", "LRN size 0"),
    "rubik_unknown_mode": ("RUBIK", "mode 9"),
    "rubik_bad_permutation": ("RUBIK", "permutation"),
    "rubik_contract_wrong_dims": ("RUBIK", "contract"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config(dev: VirtualDevice, arena: Arena, case: str) -> None:
    block, detail = BAD_CONFIGS[case]
    x = pool_input(0, (4, 4, 4))
    src = arena.put(x)
    dst = arena.cube((4, 2, 2))
    if block == "PDP":
        cases: dict[str, dict[str, Any]] = {
            "pdp_zero_width": {"src": Cube(src.addr, (4, 4, 0), 16, 64, src.dtype, 0)},
            "pdp_unknown_method": {"method": 7},
            "pdp_pad_not_smaller_than_kernel": {"pads": (2, 0, 0, 0)},
            "pdp_wrong_output_size": {"dst": Cube(dst.addr, (4, 1, 2), 8, 8, dst.dtype, 0)},
            "pdp_unknown_precision": {},
        }
        fields = cases[case]
        pdp_op(dev, fields.pop("src", src), fields.pop("dst", dst), arena.ctx, group=0, enable=False,
               **fields)
        if case == "pdp_unknown_precision":
            program(dev, "PDP", precision=5)
        program(dev, "PDP", op_enable=1)
    elif block == "BDMA":
        bdma_op(dev, src.addr, dst.addr, arena.ctx, line_size=16, lines=0)
    elif block == "CDP":
        program(dev, "CDP", group=0, ctx_id=arena.ctx, precision=FP32, src=src, dst=arena.cube((4, 4, 4)),
                lrn_size=0, op_enable=1)
    else:
        mode, perm, out = {
            "rubik_unknown_mode": (9, 0, (4, 4, 4)),
            "rubik_bad_permutation": (int(R.rubik_mode_e.TRANSPOSE), 0, (4, 4, 4)),
            "rubik_contract_wrong_dims": (int(R.rubik_mode_e.CONTRACT), 0, (1, 8, 4)),
        }[case]
        dst = arena.cube(out)
        program(dev, "RUBIK", group=0, ctx_id=arena.ctx, precision=FP32, mode=mode, src=src, dst=dst,
                block_x=2, block_y=2, dcr=1, perm=perm, op_enable=1)
    assert_failed(dev, block, 0, HW.BAD_CONFIG, detail)
    assert (arena.raw(dst) == SENTINEL).all()
    assert dev.reg_read(R.GLB_MMU_FAULT_ADDR_LO) == 0


SDP_BAD = {
    "unknown_activation": ({"act": 9}, "activation 9"),
    "unknown_ew_op": ({"ew_op": 9}, "element-wise op 9"),
    "unknown_ew_mode": ({"ew_op": 1, "ew_mode": 7}, "element-wise mode 7"),
    "unknown_src_mode": ({"src_mode": 4}, "source mode 4"),
    "dst_dims_differ": ({"dst_channels": 3}, "destination dims"),
    "unknown_out_precision": ({"out_precision": 2}, "precision 2"),
}


@pytest.mark.parametrize("case", list(SDP_BAD))
def test_sdp_bad_config(dev: VirtualDevice, arena: Arena, case: str) -> None:
    fields, detail = SDP_BAD[case]
    x = pool_input(0, (4, 2, 2))
    src, dst = arena.put(x), arena.cube((4, 2, 2))
    regs = {"ctx_id": arena.ctx, "precision": FP32, "out_precision": FP32, "src_mode": 0, "src": src,
            "dst": dst, "ew_addr": arena.vector(np.ones(4, np.float32))}
    program(dev, "SDP", group=0, **{**regs, **fields}, op_enable=1)
    assert_failed(dev, "SDP", 0, HW.BAD_CONFIG, detail)
    assert (arena.raw(dst) == SENTINEL).all()


CONV_BAD = {
    "out_dims_inconsistent": ({"out_width": 3}, "output (2, 3)"),
    "zero_kernels": ({"wt_kernels": 0}, "kernels"),
    "zero_stride": ({"stride_x": 0}, "stride"),
    "groups_disagree": ({"groups": 2}, "do not agree"),
    "unknown_mode": ({"mode": 3}, "mode 3"),
    "zero_src_height": ({"src_height": 0}, "out of range"),
    "unknown_weight_format": ({"wt_format": 7}, "weight format 7"),
}


@pytest.mark.parametrize("case", list(CONV_BAD))
def test_conv_bad_config_fails_the_pair(dev: VirtualDevice, arena: Arena, case: str) -> None:
    fields, detail = CONV_BAD[case]
    x = np.ones((1, 4, 4), np.float32)
    src = arena.put(x)
    dst = arena.cube((1, 2, 2))
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32, src_mode=1,
            src=Cube(0, (1, 2, 2), 0, 0, np.dtype(np.float32), 0), dst=dst, op_enable=1)
    regs = {"ctx_id": arena.ctx, "precision": FP32, "mode": 0, "src": src,
            "wt_addr": arena.vector(np.ones(9, np.float32)), "wt_kernels": 1, "wt_channels": 1,
            "wt_height": 3, "wt_width": 3, "stride_x": 1, "stride_y": 1, "dilation_x": 1, "dilation_y": 1,
            "groups": 1, "out_width": 2, "out_height": 2}
    program(dev, "CONV", group=0, **{**regs, **fields}, op_enable=1)
    assert_failed(dev, "CONV", 0, HW.BAD_CONFIG, detail, also=("SDP",))
    assert (arena.raw(dst) == SENTINEL).all()


def test_conv_and_sdp_in_different_contexts_is_bad_config(dev: VirtualDevice, arena: Arena) -> None:
    other = dev.iommu.create_context()
    dev.iommu.map(other, arena.bo)
    dst = arena.cube((1, 2, 2))
    program(dev, "SDP", group=0, ctx_id=other, precision=FP32, out_precision=FP32, src_mode=1,
            src=Cube(0, (1, 2, 2), 0, 0, np.dtype(np.float32), 0), dst=dst, op_enable=1)
    program(dev, "CONV", group=0, ctx_id=arena.ctx, precision=FP32, mode=0,
            src=arena.put(np.ones((1, 4, 4), np.float32)), wt_addr=arena.vector(np.ones(9, np.float32)),
            wt_kernels=1, wt_channels=1, wt_height=3, wt_width=3, stride_x=1, stride_y=1, dilation_x=1,
            dilation_y=1, groups=1, out_width=2, out_height=2, op_enable=1)
    assert_failed(dev, "CONV", 0, HW.BAD_CONFIG, "context", also=("SDP",))


def test_fp16_without_fp16_is_unsupported() -> None:
    dev = VirtualDevice(parse_config(raw_config(precisions=["FP32"])))
    arena = Arena(dev)
    x = pool_input(0).astype(np.float16)
    src, dst = arena.put(x), arena.cube((1, 2, 2), np.float16)
    pdp_op(dev, src, dst, arena.ctx, group=0)
    assert_failed(dev, "PDP", 0, HW.UNSUPPORTED, "FP16")
    assert (arena.raw(dst) == SENTINEL).all()
    # fp32 still works; so does CONV, which fails the same way in fp16.
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    src, dst, expect = pool_pair(arena, 3)
    pdp_op(dev, src, dst, arena.ctx, group=1)
    assert status(dev) == done_bit("PDP", 1)
    np.testing.assert_array_equal(arena.get(dst), expect)
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    small_conv(dev, arena, precision=FP16)
    assert_failed(dev, "CONV", 0, HW.UNSUPPORTED, "not supported", also=("SDP",))


def test_block_works_after_an_error(dev: VirtualDevice, arena: Arena) -> None:
    src, dst, expect = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=0, method=7)
    assert status(dev) == error_bit("PDP", 0)
    dev.reg_write(R.GLB_INTR_STATUS, error_bit("PDP", 0))
    pdp_op(dev, src, dst, arena.ctx, group=1)
    assert status(dev) == done_bit("PDP", 1)
    np.testing.assert_array_equal(arena.get(dst), expect)
    # s_error keeps the last failure.
    assert dev.reg_read(R.PDP_S_ERROR) == HW.BAD_CONFIG


@pytest.mark.parametrize("code", [HW.BAD_CONFIG, HW.UNSUPPORTED, HW.MMU_FAULT, HW.NO_PRODUCER])
def test_inject_error(dev: VirtualDevice, arena: Arena, code: int) -> None:
    dev.inject_error("BDMA", code)
    dst = arena.iova + arena.alloc(16)
    bdma_op(dev, arena.vector(np.arange(16, dtype=np.uint8)), dst, arena.ctx, line_size=16, group=0)
    want = error_bit("BDMA", 0)
    assert status(dev) & ~MMU_FAULT_BIT == want
    assert dev.reg_read(R.BDMA_S_ERROR) == code
    assert "injected" in dev.log[-1]
    assert (arena.bo.array[dst - arena.iova:dst - arena.iova + 16] == SENTINEL).all()
    # Only the next operation fails.
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    run_one(dev, arena, "BDMA", 1)
    assert status(dev) == done_bit("BDMA", 1)


def test_inject_error_of_unknown_code_never_raises_into_the_host(dev: VirtualDevice, arena: Arena) -> None:
    try:
        dev.inject_error("BDMA", 99)
    except DlaError:
        return  # rejected up front: fine
    # Accepted: the next operation fails, inside the device.
    run_one(dev, arena, "BDMA", 0)
    assert status(dev) == error_bit("BDMA", 0)
    assert dev.reg_read(R.BDMA_S_STATUS) == 0
    assert dev.log and "BDMA group 0" in dev.log[-1]


# -- modes -------------------------------------------------------------------------------------------------


def test_step_mode(arena_step: tuple[VirtualDevice, Arena]) -> None:
    dev, arena = arena_step
    src, dst, expect = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=0)
    data = np.arange(32, dtype=np.uint8)
    bdst = arena.iova + arena.alloc(32)
    bdma_op(dev, arena.vector(data), bdst, arena.ctx, line_size=32, group=0)
    src1, dst1, expect1 = pool_pair(arena, 2)
    pdp_op(dev, src1, dst1, arena.ctx, group=1)
    # Nothing runs until step().
    assert status(dev) == 0
    assert group_state(dev, "PDP", 0) == ENABLED and group_state(dev, "BDMA", 0) == ENABLED
    assert (arena.raw(dst) == SENTINEL).all()
    # In enable order: PDP group 0, BDMA, PDP group 1.
    assert dev.step() is True
    assert status(dev) == done_bit("PDP", 0)
    np.testing.assert_array_equal(arena.get(dst), expect)
    assert group_state(dev, "BDMA", 0) == ENABLED
    assert dev.step() is True
    assert status(dev) == done_bit("PDP", 0) | done_bit("BDMA", 0)
    assert np.array_equal(arena.bo.array[bdst - arena.iova:bdst - arena.iova + 32], data)
    assert dev.step() is True
    assert status(dev) == done_bit("PDP", 0) | done_bit("BDMA", 0) | done_bit("PDP", 1)
    np.testing.assert_array_equal(arena.get(dst1), expect1)
    assert dev.step() is False
    assert dev.idle()


def test_step_mode_skips_what_cannot_run(arena_step: tuple[VirtualDevice, Arena]) -> None:
    dev, arena = arena_step
    # PDP group 1 first: not its turn. A CONV without its SDP. Then a BDMA which can run.
    src, dst, _ = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=1)
    x = np.ones((1, 4, 4), np.float32)
    program(dev, "CONV", group=0, ctx_id=arena.ctx, precision=FP32, mode=0, src=arena.put(x),
            wt_addr=arena.vector(np.ones(9, np.float32)), wt_kernels=1, wt_channels=1, wt_height=3,
            wt_width=3, stride_x=1, stride_y=1, dilation_x=1, dilation_y=1, groups=1, out_width=2,
            out_height=2, op_enable=1)
    assert dev.step() is False
    run_one(dev, arena, "BDMA", 0)
    assert dev.step() is True
    assert status(dev) == done_bit("BDMA", 0)
    assert dev.step() is False
    cdst = arena.cube((1, 2, 2))
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32, src_mode=1,
            src=Cube(0, (1, 2, 2), 0, 0, np.dtype(np.float32), 0), dst=cdst, op_enable=1)
    assert dev.step() is True
    assert status(dev) == done_bit("BDMA", 0) | done_bit("CONV", 0) | done_bit("SDP", 0)
    np.testing.assert_array_equal(arena.get(cdst), np.full((1, 2, 2), 9, np.float32))
    assert dev.step() is False
    assert group_state(dev, "PDP", 1) == ENABLED


def test_step_mode_keeps_enable_order_after_a_flying_pair(arena_step: tuple[VirtualDevice, Arena]) -> None:
    dev, arena = arena_step

    def sdp_from_memory(group: int) -> Cube:
        dst = arena.cube((1, 2, 2))
        program(dev, "SDP", group=group, ctx_id=arena.ctx, precision=FP32, out_precision=FP32, src_mode=0,
                src=arena.put(np.ones((1, 2, 2), np.float32)), dst=dst, bias_enable=0, bn_enable=0, ew_op=0,
                act=int(R.sdp_act_e.NONE), op_enable=1)
        return dst

    small_conv(dev, arena, group=0)  # CONV group 0 with SDP group 0, flying
    assert dev.step() is True
    assert status(dev) == done_bit("CONV", 0) | done_bit("SDP", 0)
    sdp_from_memory(1)
    assert dev.step() is True
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    # Enabled in this order: PDP group 0, then SDP group 0 (from memory). Both can run.
    src, dst, _ = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=0)
    sdp_from_memory(0)
    assert dev.step() is True
    assert status(dev) == done_bit("PDP", 0), "step() must run the operation enabled first"
    assert dev.step() is True
    assert status(dev) == done_bit("PDP", 0) | done_bit("SDP", 0)
    assert dev.step() is False


def test_inject_error_in_sdp_fails_its_flying_pair(dev: VirtualDevice, arena: Arena) -> None:
    # The next SDP operation is the one flying from CONV: it is the one that fails.
    dev.inject_error("SDP", HW.UNSUPPORTED)
    dst, _ = small_conv(dev, arena)
    assert status(dev) & (error_bit("CONV", 0) | error_bit("SDP", 0)), (hex(status(dev)), list(dev.log))
    assert not status(dev) & (done_bit("CONV", 0) | done_bit("SDP", 0))
    assert dev.reg_read(R.SDP_S_ERROR) == HW.UNSUPPORTED
    assert (arena.raw(dst) == SENTINEL).all()


def test_inject_hang_in_sdp_hangs_its_flying_pair(dev: VirtualDevice, arena: Arena) -> None:
    dev.inject_hang("SDP")
    dst, _ = small_conv(dev, arena)
    assert status(dev) == 0, (hex(status(dev)), list(dev.log))
    assert group_state(dev, "SDP", 0) == RUNNING
    assert (arena.raw(dst) == SENTINEL).all()
    # Resetting both blocks of the pair recovers them.
    dev.reg_write(R.GLB_RESET, 1 << int(dla_block_e.CONV) | 1 << int(dla_block_e.SDP))
    assert dev.idle()
    dst, expect = small_conv(dev, arena)
    assert status(dev) == done_bit("CONV", 0) | done_bit("SDP", 0)
    np.testing.assert_array_equal(arena.get(dst), expect)


def test_inject_hang_in_conv_hangs_the_pair_until_reset(dev: VirtualDevice, arena: Arena) -> None:
    dev.inject_hang("CONV")
    dst, _ = small_conv(dev, arena)
    assert status(dev) == 0
    assert group_state(dev, "CONV", 0) == RUNNING and group_state(dev, "SDP", 0) == RUNNING
    assert (arena.raw(dst) == SENTINEL).all()
    dev.reg_write(R.GLB_RESET, 1 << int(dla_block_e.CONV) | 1 << int(dla_block_e.SDP))
    assert dev.idle()
    dst, expect = small_conv(dev, arena)
    assert status(dev) == done_bit("CONV", 0) | done_bit("SDP", 0)
    np.testing.assert_array_equal(arena.get(dst), expect)


def test_step_needs_step_mode(dev: VirtualDevice) -> None:
    with pytest.raises(DlaError) as e:
        dev.step()
    assert e.value.code == NvError.InvalidState


@pytest.fixture
def arena_step() -> Any:
    device = VirtualDevice("full", mode="step")
    yield device, Arena(device)
    device.close()


@pytest.fixture
def threaded() -> Any:
    device = VirtualDevice("full", mode="threaded")
    yield device
    device.close()


def test_threaded_mode_computes_the_same(threaded: VirtualDevice) -> None:
    results = {}
    for mode in ("deterministic", "threaded"):
        dev = threaded if mode == "threaded" else VirtualDevice("full")
        arena = Arena(dev)
        waiter = IrqWaiter(dev)
        cdst, cexpect = small_conv(dev, arena)
        src, pdst, pexpect = pool_pair(arena, 3)
        pdp_op(dev, src, pdst, arena.ctx, group=0)
        value = waiter.wait(done_bit("CONV", 0) | done_bit("SDP", 0) | done_bit("PDP", 0))
        assert value == done_bit("CONV", 0) | done_bit("SDP", 0) | done_bit("PDP", 0)
        assert waiter.calls >= 1
        np.testing.assert_array_equal(arena.get(cdst), cexpect)
        np.testing.assert_array_equal(arena.get(pdst), pexpect)
        results[mode] = (arena.get(cdst), arena.get(pdst))
    for a, b in zip(results["deterministic"], results["threaded"], strict=True):
        np.testing.assert_array_equal(a, b)


def test_threaded_errors_and_faults(threaded: VirtualDevice) -> None:
    arena = Arena(threaded)
    waiter = IrqWaiter(threaded)
    bdma_op(threaded, arena.iova + (1 << 30), arena.iova, arena.ctx, line_size=4)
    value = waiter.wait(error_bit("BDMA", 0) | MMU_FAULT_BIT)
    assert value == error_bit("BDMA", 0) | MMU_FAULT_BIT
    assert threaded.reg_read(R.BDMA_S_ERROR) == HW.MMU_FAULT


def pingpong(dev: VirtualDevice, arena: Arena, block: str, n: int, failures: list[str]) -> None:
    """``n`` operations of ``block``, alternating groups, two in flight; each result checked."""
    try:
        waiter = IrqWaiter(dev)
        if block == "PDP":
            bufs = [(arena.cube((1, 4, 4)), arena.cube((1, 2, 2))) for _ in range(2)]
        else:
            bufs = [(arena.cube((1, 1, 64), np.uint8), arena.cube((1, 1, 64), np.uint8)) for _ in range(2)]
        in_flight: deque[tuple[int, np.ndarray]] = deque()

        def finish() -> None:
            i, expect = in_flight.popleft()
            g = i % 2
            waiter.wait(done_bit(block, g))
            got = arena.get(bufs[g][1])
            if not np.array_equal(got, expect):
                failures.append(f"{block} op {i}: {got.ravel()[:4]} != {expect.ravel()[:4]}")
            dev.reg_write(R.GLB_INTR_STATUS, done_bit(block, g))

        for i in range(n):
            g = i % 2
            if len(in_flight) == 2:
                finish()
            src, dst = bufs[g]
            if block == "PDP":
                x = pool_input(i)
                arena.view(src)[...] = x
                pdp_op(dev, src, dst, arena.ctx, group=g)
                in_flight.append((i, max_pool_2x2(x)))
            else:
                x = ((np.arange(64) + i) % 256).astype(np.uint8).reshape(1, 1, 64)
                arena.view(src)[...] = x
                bdma_op(dev, src.addr, dst.addr, arena.ctx, line_size=64, group=g)
                in_flight.append((i, x))
        while in_flight:
            finish()
        if status(dev) & (error_bit(block, 0) | error_bit(block, 1)):
            failures.append(f"{block}: error status {status(dev):#x}")
    except Exception as e:  # reported by the main thread
        failures.append(f"{block}: {type(e).__name__}: {e}")


def test_threaded_stress_two_host_threads(threaded: VirtualDevice) -> None:
    arena = Arena(threaded)
    failures: list[str] = []
    threads = [threading.Thread(target=pingpong, args=(threaded, arena, block, 100, failures))
               for block in ("BDMA", "PDP")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "deadlock: a host thread did not finish"
    assert failures == []
    assert threaded.reg_read(R.BDMA_S_OPS_DONE) == 100
    assert threaded.reg_read(R.PDP_S_OPS_DONE) == 100
    assert threaded.reg_read(R.GLB_OPS_DONE) == 200
    assert threaded.idle()


def test_close_stops_the_threads() -> None:
    before = set(threading.enumerate())
    dev = VirtualDevice("full", instance=1, mode="threaded")
    mine = [t for t in threading.enumerate() if t not in before]
    assert len(mine) == len(load_config("full").blocks) + 1  # and the command processor's
    assert all(t.is_alive() for t in mine)
    arena = Arena(dev)
    waiter = IrqWaiter(dev)
    run_one(dev, arena, "BDMA", 0)
    waiter.wait(done_bit("BDMA", 0))
    dev.close()
    assert not any(t.is_alive() for t in mine)


def test_bad_mode_and_instance() -> None:
    with pytest.raises(DlaError) as e:
        VirtualDevice("full", mode="turbo")
    assert e.value.code == NvError.BadParameter and "turbo" in str(e.value)
    with pytest.raises(DlaError) as e:
        VirtualDevice("full", instance=5)
    assert e.value.code == NvError.BadParameter and "5" in str(e.value)
    with pytest.raises(DlaError):
        VirtualDevice("small", instance=1)
    with pytest.raises(DlaError):
        VirtualDevice("full", instance=-1)
    VirtualDevice("full", instance=1).close()


# -- hangs and reset ---------------------------------------------------------------------------------------


def test_hang_then_block_reset(dev: VirtualDevice, arena: Arena) -> None:
    dev.inject_hang("PDP")
    src, dst, expect = pool_pair(arena, 1)
    pdp_op(dev, src, dst, arena.ctx, group=0)
    assert group_state(dev, "PDP", 0) == RUNNING
    assert status(dev) == 0
    assert (arena.raw(dst) == SENTINEL).all()
    # Other blocks are not held up.
    run_one(dev, arena, "BDMA", 0)
    assert status(dev) == done_bit("BDMA", 0)
    # Stale PDP bits, and a group 1 operation waiting behind the hung one.
    dev.reg_write(R.GLB_INTR_SET, done_bit("PDP", 1) | error_bit("PDP", 1))
    src1, dst1, _ = pool_pair(arena, 2)
    pdp_op(dev, src1, dst1, arena.ctx, group=1)
    assert dev.reg_read(R.PDP_S_STATUS) == RUNNING | ENABLED << 16
    dev.reg_write(R.GLB_RESET, 1 << int(dla_block_e.PDP))
    assert dev.reg_read(R.PDP_S_STATUS) == 0
    assert dev.reg_read(R.PDP_S_POINTER) == 0
    assert dev.reg_read(R.PDP_S_ERROR) == 0
    assert status(dev) == done_bit("BDMA", 0)
    assert dev.idle()
    assert (arena.raw(dst1) == SENTINEL).all()
    assert "reset of PDP" in dev.log[-1]
    # A later operation runs normally, in group 0 again.
    pdp_op(dev, src, dst, arena.ctx, group=0)
    assert status(dev) == done_bit("BDMA", 0) | done_bit("PDP", 0)
    np.testing.assert_array_equal(arena.get(dst), expect)


def test_hang_count_and_device_reset(dev: VirtualDevice, arena: Arena) -> None:
    dev.inject_hang("BDMA", count=2)
    run_one(dev, arena, "BDMA", 0)
    assert group_state(dev, "BDMA", 0) == RUNNING
    dev.reg_write(R.GLB_RESET, 1 << int(dla_block_e.BDMA))
    # A reset also drops the remaining injected hangs.
    run_one(dev, arena, "BDMA", 0)
    assert status(dev) == done_bit("BDMA", 0)
    dev.inject_hang("BDMA", count=2)
    run_one(dev, arena, "BDMA", 1)
    assert group_state(dev, "BDMA", 1) == RUNNING
    bdma_op(dev, arena.iova + (1 << 30), arena.iova, arena.ctx, line_size=4, group=0, enable=False)
    run_one(dev, arena, "PDP", 0)
    pdp_src = Cube(arena.iova + (1 << 30), (4, 2, 2), 8, 16, np.dtype(np.float32), 0)
    pdp_op(dev, pdp_src, arena.cube((4, 1, 1)), arena.ctx, group=1)
    assert status(dev) & MMU_FAULT_BIT
    assert dev.reg_read(R.GLB_MMU_FAULT_ADDR_LO) != 0
    dev.reg_write(R.GLB_RESET, 1 << 31)
    assert status(dev) == 0
    assert dev.idle()
    for address in (R.GLB_MMU_FAULT_ADDR_LO, R.GLB_MMU_FAULT_ADDR_HI, R.GLB_MMU_FAULT_CTX,
                    R.GLB_MMU_FAULT_BLOCK):
        assert dev.reg_read(address) == 0
    for block in ("BDMA", "PDP"):
        assert dev.reg_read(reg(block, "s_pointer")) == 0
        assert dev.reg_read(reg(block, "s_error")) == 0
    run_one(dev, arena, "BDMA", 0)
    assert status(dev) == done_bit("BDMA", 0)


def test_hang_in_threaded_mode_then_reset(threaded: VirtualDevice) -> None:
    arena = Arena(threaded)
    waiter = IrqWaiter(threaded)
    threaded.inject_hang("PDP")
    src, dst, expect = pool_pair(arena, 1)
    pdp_op(threaded, src, dst, arena.ctx, group=0)
    # The hung operation starts and never completes; a BDMA operation meanwhile does.
    deadline = time.monotonic() + 10
    while group_state(threaded, "PDP", 0) != RUNNING:
        assert time.monotonic() < deadline, "the PDP operation did not start"
        time.sleep(0.001)
    run_one(threaded, arena, "BDMA", 0)
    waiter.wait(done_bit("BDMA", 0))
    assert group_state(threaded, "PDP", 0) == RUNNING
    assert not status(threaded) & done_bit("PDP", 0)
    threaded.reg_write(R.GLB_RESET, 1 << int(dla_block_e.PDP))
    assert group_state(threaded, "PDP", 0) == IDLE
    pdp_op(threaded, src, dst, arena.ctx, group=0)
    waiter.wait(done_bit("PDP", 0))
    np.testing.assert_array_equal(arena.get(dst), expect)


def test_reset_waits_until_an_abandoned_operation_stops_writing(threaded: VirtualDevice,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A reset during a long computation returns only once it has stopped writing memory, so the
    next job's data is never overwritten late by an abandoned one; nor is it reported done."""
    from pydla.hw import blocks

    arena = Arena(threaded)
    src, dst, expect = pool_pair(arena, 2)
    started, real = threading.Event(), blocks.decode_pdp
    writes: list[float] = []

    def slow_pdp(regs: Any, mem: Any) -> Any:  # the device decodes, then executes
        execute = real(regs, mem)

        def slow() -> None:
            started.set()
            time.sleep(0.4)
            execute()
            writes.append(time.monotonic())
        return slow

    monkeypatch.setattr(blocks, "decode_pdp", slow_pdp)
    pdp_op(threaded, src, dst, arena.ctx, group=0)
    assert started.wait(10)
    threaded.reg_write(R.GLB_RESET, 1 << int(dla_block_e.PDP))
    returned = time.monotonic()
    assert len(writes) == 1 and writes[0] <= returned  # the write happened before the reset returned
    assert group_state(threaded, "PDP", 0) == IDLE
    time.sleep(0.05)
    assert not status(threaded) & (done_bit("PDP", 0) | error_bit("PDP", 0))  # abandoned, not done
    np.testing.assert_array_equal(arena.get(dst), expect)


def test_hang_in_step_mode(arena_step: tuple[VirtualDevice, Arena]) -> None:
    dev, arena = arena_step
    dev.inject_hang("RUBIK")
    run_one(dev, arena, "RUBIK", 0)
    assert dev.step() is True
    assert group_state(dev, "RUBIK", 0) == RUNNING
    assert status(dev) == 0
    assert dev.step() is False


# -- register trace ----------------------------------------------------------------------------------------


def test_register_trace(dev: VirtualDevice, arena: Arena) -> None:
    run_one(dev, arena, "BDMA", 0)
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
    trace = dev.record_trace()
    assert trace == []
    dst = arena.iova + arena.alloc(16)
    bdma_op(dev, arena.vector(np.arange(16, dtype=np.uint8)), dst, arena.ctx, line_size=16, group=1)
    value = status(dev)
    dev.reg_read(0x7000)
    names = [(e.op, e.name, e.group) for e in trace]
    assert names[0] == ("W", "BDMA_S_POINTER", None)
    assert names[1] == ("W", "BDMA_D_CTX_ID", 1)
    assert ("W", "BDMA_D_SRC_ADDR_LO", 1) in names and ("W", "BDMA_D_DST_ADDR_HI", 1) in names
    assert names[-3] == ("W", "BDMA_D_OP_ENABLE", 1)
    assert names[-2] == ("R", "GLB_INTR_STATUS", None)
    assert trace[-2].value == value == done_bit("BDMA", 1)
    assert trace[-1].name == "0x7000" and trace[-1].value == 0
    line = next(e for e in trace if e.name == "BDMA_D_LINE_SIZE")
    assert line.address == R.BDMA_D_LINE_SIZE and line.value == 16
    assert str(trace[-3]) == "W BDMA_D_OP_ENABLE[g1] = 0x1"
    assert str(trace[-2]) == f"R GLB_INTR_STATUS = {value:#x}"
    # Every D-register write of the operation is in the trace, in order.
    d_writes = [e.name for e in trace if e.op == "W" and e.group == 1]
    assert d_writes == ["BDMA_D_CTX_ID", "BDMA_D_SRC_ADDR_LO", "BDMA_D_SRC_ADDR_HI", "BDMA_D_DST_ADDR_LO",
                        "BDMA_D_DST_ADDR_HI", "BDMA_D_LINE_SIZE", "BDMA_D_LINE_REPEAT",
                        "BDMA_D_SRC_LINE_STRIDE", "BDMA_D_DST_LINE_STRIDE", "BDMA_D_SURF_REPEAT",
                        "BDMA_D_SRC_SURF_STRIDE", "BDMA_D_DST_SURF_STRIDE", "BDMA_D_OP_ENABLE"]
    n = len(trace)
    assert dev.record_trace(False) == []
    status(dev)
    assert len(trace) == n


def test_reg_write_many_acts_on_each_write_in_order(dev: VirtualDevice, arena: Arena) -> None:
    """A batch behaves as its writes one by one: an enable runs the operation (deterministic mode) and
    an interrupt is raised before the writes after it; the trace is the same."""
    src, dst, expect = pool_pair(arena, 6)
    seen: list[tuple[int, bool]] = []
    dev.connect_irq(lambda: seen.append((status(dev), bool(np.array_equal(arena.get(dst), expect)))))
    pdp_op(dev, src, dst, arena.ctx, enable=False)
    trace = dev.record_trace()
    dev.reg_write_many([(R.PDP_S_POINTER, 0), (R.PDP_D_OP_ENABLE, 1), (R.GLB_INTR_STATUS, 0xFFFFFFFF),
                        (R.GLB_INTR_SET, 1 << 9), (0x3, 5), (R.GLB_INTR_STATUS, 1 << 9)])
    assert seen == [(done_bit("PDP", 0), True), (1 << 9, True)]  # the pool ran before the clear
    assert status(dev) == 0 and dev.bus_errors == 1
    assert [(a.op, a.address, a.value) for a in trace if a.op == "W"] == [
        ("W", R.PDP_S_POINTER, 0), ("W", R.PDP_D_OP_ENABLE, 1), ("W", R.GLB_INTR_STATUS, 0xFFFFFFFF),
        ("W", R.GLB_INTR_SET, 1 << 9), ("W", 0x3, 5), ("W", R.GLB_INTR_STATUS, 1 << 9)]


def test_reg_write_many_equals_writes_one_by_one() -> None:
    """The batch's direct store of D-group configuration registers leaves the device exactly as the
    same writes one by one: pointer switches between them, S and global registers, OP_ENABLE = 0,
    unknown and misaligned addresses included."""
    rng = np.random.default_rng(11)
    names = [n for n in R.REGISTERS if n.split("_")[0] in ("BDMA", "CONV", "SDP", "PDP", "CDP", "RUBIK")
             and "_D_" in n]
    pointers = [a for n, a in R.REGISTERS.items() if n.endswith("_S_POINTER")]
    others = [R.GLB_INTR_MASK, R.BDMA_S_STATUS, R.SDP_S_STATUS, 0x3, 7 * 0x1000 + 8, 0x7FFFFFF0]
    writes: list[tuple[int, int]] = []
    for _ in range(3000):
        kind = rng.integers(10)
        if kind == 0:
            writes.append((int(rng.choice(pointers)), int(rng.integers(2))))
        elif kind == 1:
            writes.append((int(rng.choice(others)), int(rng.integers(1 << 32))))
        else:
            name = str(rng.choice(names))
            value = 0 if name.endswith("OP_ENABLE") else int(rng.integers(1 << 33))  # wider than 32 bits
            writes.append((R.REGISTERS[name], value))
    batch, single = VirtualDevice("full", mode="deterministic"), VirtualDevice("full", mode="deterministic")
    try:
        batch.reg_write_many(writes)
        for address, value in writes:
            single.reg_write(address, value)
        assert batch.bus_errors == single.bus_errors > 0

        def registers(device: VirtualDevice) -> list[int]:
            values = []
            for pointer in pointers:
                for group in (0, 1):
                    device.reg_write(pointer, group)
                    values += [device.reg_read(R.REGISTERS[n]) for n in names]
            return values + [device.reg_read(a) for a in others[:3]]

        assert registers(batch) == registers(single)
    finally:
        batch.close()
        single.close()
