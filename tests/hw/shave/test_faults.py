"""Faults of the SHAVE tiles and their DMA: each stops the tile (or the DMA) with a distinct error
status naming the tile, the kernel, the PC and the address, raises the interrupt, and leaves the
device usable after SHAVE_RESET. The host never sees an emulator error."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.device import VirtualDevice
from pydla.kernels.build import kernel_elf
from pydla.target.config import load_config, parse_config
from tests.hw.regs import raw_config
from tests.hw.shave.host import (
    AUIPC_T0,
    EBREAK_WORD,
    LOOP,
    RET,
    Host,
    cmx,
    lw,
    sw,
    tiny_elf,
    treg,
)
from tests.hw.shave.test_scenario import clamp_args, run_clamp

E = R.shave_error_e
State = R.shave_tile_state_e
A0, T0 = 10, 5


def fault_of(host: Host, tile: int, name: str, words: list[int] | None = None, image: bytes | None = None,
             args: bytes = b"\0" * 4) -> dict[str, int]:
    host.start_tile(tile)
    elf = tiny_elf(words) if image is None else image
    host.kernel(tile, name, args, image=elf)
    status = host.tile_error(tile)
    assert status["state"] == State.ERROR
    assert host.r(R.SHAVE_INTR_STATUS) & 1 << tile
    assert host.r(R.GLB_INTR_STATUS) & 1 << 29 and host.irqs >= 1
    assert status["error_kernel"] == host.kernel_ids[name] and status["error_task"] >= 1
    return status


def usable_after(host: Host) -> None:
    """SHAVE_RESET, then the scenario runs right on both tiles."""
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
    host.w(R.SHAVE_CTX, host.ctx)
    for tile in (0, 1):
        host.start_tile(tile)
        x = np.linspace(-3, 12, 200).astype(np.float16)
        assert np.array_equal(run_clamp(host, x, 0, 6, tile), np.clip(x, np.float16(0), np.float16(6)))
        assert host.r(treg(tile, "error")) == E.NONE


def test_read_outside_the_windows(host: Host) -> None:
    s = fault_of(host, 0, "reader", [lw(A0, 0, 0x100), RET])
    assert s["error"] == E.READ_FAULT and s["error_addr"] == 0x100 and s["error_pc"] == S.WIN_D
    usable_after(host)


def test_write_outside_the_windows_and_into_code(host: Host) -> None:
    s = fault_of(host, 1, "writer", [sw(A0, 0, 0x140), RET])
    assert s["error"] == E.WRITE_FAULT and s["error_addr"] == 0x140 and s["error_pc"] == S.WIN_D
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_CTX, host.ctx)
    s = fault_of(host, 0, "self_modifying", [AUIPC_T0, sw(0, T0, 0), RET])
    assert s["error"] == E.WRITE_FAULT and s["error_addr"] == S.WIN_D and s["error_pc"] == S.WIN_D + 4
    usable_after(host)


def test_stack_overflow_hits_the_guard_page(host: Host) -> None:
    """A kernel pushing forever: the first store below the configured stack faults in the guard page."""
    push_forever = [0xFF010113, sw(0, 2, 0), 0xFF9FF06F]  # addi sp, sp, -16; sw zero, 0(sp); j -8
    host.start_tile(0, stack=8192)
    host.kernel(0, "deep", b"", image=tiny_elf(push_forever))
    s = host.tile_error(0)
    top = S.WIN_F + host.r(R.SHAVE_CMX_BYTES)
    assert s["error"] == E.WRITE_FAULT and top - 8192 - 4096 <= s["error_addr"] < top - 8192
    assert any("stack overflow" in line for line in host.dev.log)
    usable_after(host)


def test_illegal_instruction(host: Host) -> None:
    s = fault_of(host, 0, "illegal", [0xFFFFFFFF, RET])
    assert s["error"] == E.ILLEGAL_INSTRUCTION and s["error_pc"] == S.WIN_D
    assert s["error_addr"] == 0xFFFFFFFF  # the instruction's bits
    usable_after(host)


def test_a_kernel_assert_is_a_trap(host: Host) -> None:
    s = fault_of(host, 0, "asserts", [EBREAK_WORD])
    assert s["error"] == E.TRAP and s["error_pc"] == S.WIN_D
    # The shipped clamp asserts argsSize == sizeof(ClampParams), as the seed's example does.
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_CTX, host.ctx)
    host.start_tile(0)
    host.kernel(0, "clamp", bytes(clamp_args(cmx(0), cmx(64), (4,), np.float16, 0, 1)) + b"\0")
    s = host.tile_error(0)
    assert s["error"] == E.TRAP and S.WIN_D <= s["error_pc"] < S.WIN_D + S.WIN_D_BYTES
    usable_after(host)


@pytest.fixture(params=[{"instruction_budget": 100_000}, {"time_budget_ms": 50}],
                ids=["instructions", "time"])
def small_budget(request: pytest.FixtureRequest) -> Iterator[Host]:
    raw = raw_config()
    raw["shave"] = {"tiles": 2, "cmx_bytes": 1 << 20, **request.param}
    dev = VirtualDevice(parse_config(raw, "test"))
    yield Host(dev)
    dev.close()


def test_runaway_loop_stops_at_the_budget(small_budget: Host) -> None:
    s = fault_of(small_budget, 1, "spin", [LOOP])
    assert s["error"] == E.BUDGET and s["error_pc"] == S.WIN_D
    assert any("budget" in line for line in small_budget.dev.log)
    usable_after(small_budget)


def test_bad_barrier_configuration(host: Host) -> None:
    host.w(R.SHAVE_BAR_SELECT, 32)  # the device has 32: 0..31
    host.w(R.SHAVE_BAR_CONFIG, 1 | 1 << 16)
    assert host.r(R.SHAVE_DMA_ERROR) == E.BAD_BARRIER and host.r(R.SHAVE_DMA_ERROR_ADDR_LO) == 32
    assert host.r(R.SHAVE_INTR_STATUS) & 1 << 16
    usable_after(host)
    # A task producing a barrier nobody configured: the tile stops, naming the kernel.
    host.start_tile(0)
    host.kernel(0, "noop", b"", image=tiny_elf([RET]), update=1 << 7)
    s = host.tile_error(0)
    assert s["error"] == E.BAD_BARRIER and s["error_addr"] == 7
    assert s["error_kernel"] == host.kernel_ids["noop"]
    # A mask naming barriers the device does not have: refused when the task is read.
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_CTX, host.ctx)
    host.dma(host.put(b"x" * 16), host.alloc(16), 16, wait=1 << 31 | 1 << 3)
    assert host.r(R.SHAVE_DMA_ERROR) == E.BAD_BARRIER or host.r(R.SHAVE_DMA_LEVEL) == 1
    usable_after(host)


@pytest.mark.parametrize("corrupt", ["magic", "machine", "truncated", "segment_outside", "phoff"])
def test_corrupted_kernel_elf(host: Host, corrupt: str) -> None:
    elf = bytearray(kernel_elf("clamp"))
    if corrupt == "magic":
        elf[1] = ord("X")
    elif corrupt == "machine":
        elf[18:20] = struct.pack("<H", 62)  # x86-64
    elif corrupt == "truncated":
        del elf[200:]
    elif corrupt == "segment_outside":
        elf[52 + 8:52 + 12] = struct.pack("<I", 0x100)  # p_vaddr of the first segment
    else:
        elf[28:32] = struct.pack("<I", 0xFFFFFFF0)  # e_phoff
    s = fault_of(host, 0, "clamp_corrupted", image=bytes(elf), args=bytes(clamp_args(cmx(0), cmx(64), (4,),
                                                                            np.float16, 0, 1)))
    assert s["error"] == E.BAD_ELF
    assert any("BAD_ELF" in line and "kernel" in line for line in host.dev.log)
    usable_after(host)


def test_corrupted_runtime_kernel_at_start(host: Host) -> None:
    host.start_tile(1, runtime=b"\x7fELF" + bytes(60))
    assert host.r(treg(1, "state")) == State.ERROR and host.r(treg(1, "error")) == E.BAD_ELF
    host.start_tile(1, runtime=tiny_elf([RET]))  # linked at WIN_D, not RT_WIN
    assert host.r(treg(1, "error")) == E.BAD_ELF
    host.w(treg(1, "stack_size"), 100)
    host.w(treg(1, "ctrl"), 2 | 1)  # HALT, then START with a bad stack size
    assert host.r(treg(1, "error")) == E.BAD_TASK
    usable_after(host)


def test_bad_descriptors_and_unmapped_memory(host: Host) -> None:
    host.start_tile(0)
    host.w(treg(0, "push_lo"), 0x1000)  # nothing mapped there
    host.w(treg(0, "push_hi"), 0)
    s = host.tile_error(0)
    assert s["error"] == E.MMU_FAULT and s["error_kernel"] == 0xFFFFFFFF
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_CTX, host.ctx)
    host.start_tile(0)
    desc = host.kernel(0, "clamp", b"\0" * 68, push=False)
    task = S.ActKernelTask.from_buffer_copy(host.read(desc, S.ActKernelTask.SIZE))
    task.invocation.args_size = S.ARGS_MAX_BYTES + 4
    host.write(desc, bytes(task))
    host.w(treg(0, "push_lo"), desc & 0xFFFFFFFF)
    host.w(treg(0, "push_hi"), desc >> 32)
    assert host.r(treg(0, "error")) == E.BAD_TASK
    assert any("args_size" in line for line in host.dev.log)
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_CTX, host.ctx)
    host.dma(0x1000, cmx(0), 64, dst_tile=0)  # DMA from unmapped device memory
    assert host.r(R.SHAVE_DMA_ERROR) == E.MMU_FAULT and host.r(R.SHAVE_DMA_ERROR_ADDR_LO) == 0x1000
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_CTX, host.ctx)
    host.dma(host.put(b"\0" * 64), cmx(S.WIN_F_MAX_BYTES), 64, dst_tile=0)  # outside the CMX slice
    assert host.r(R.SHAVE_DMA_ERROR) == E.BAD_TASK
    usable_after(host)


def test_fifo_full(host: Host) -> None:
    desc = host.kernel(0, "noop", b"", image=tiny_elf([RET]), push=False)
    for _ in range(S.FIFO_DEPTH):
        host.w(treg(0, "push_lo"), desc & 0xFFFFFFFF)
        host.w(treg(0, "push_hi"), desc >> 32)
    assert host.r(treg(0, "level")) == S.FIFO_DEPTH and host.r(treg(0, "error")) == E.NONE
    host.w(treg(0, "push_hi"), desc >> 32)
    assert host.r(treg(0, "error")) == E.FIFO_FULL
    host.w(treg(0, "ctrl"), 2)  # HALT clears the error and the FIFO
    assert host.r(treg(0, "error")) == E.NONE and host.r(treg(0, "level")) == 0
    host.start_tile(0)
    for _ in range(3):
        host.w(treg(0, "push_lo"), desc & 0xFFFFFFFF)
        host.w(treg(0, "push_hi"), desc >> 32)
    assert host.r(treg(0, "done")) == 3
    usable_after(host)


def test_small_config_cmx_config_rules() -> None:
    raw = raw_config()
    for bad in ({"tiles": 0}, {"tiles": 2, "cmx_bytes": 1000}, {"tiles": 2, "barriers": 33},
                {"tiles": 2, "instruction_budget": True},
                {"tiles": 2, "time_budget_ms": 0}, {"tiles": 2, "extra": 1}, [2]):
        raw["shave"] = bad
        with pytest.raises(Exception, match="shave"):
            parse_config(raw, "test")
    assert load_config("small").shave is None and load_config("full").shave is not None
