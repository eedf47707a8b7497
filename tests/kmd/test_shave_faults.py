"""Device faults of a SHAVE task list through the KMD: each fails its job with a DlaError naming the
tile, the task, the kernel id, the PC, the address and the error, with a fitting NvError; the tiles
are reset and the device stays usable for the next job (SHAVE or DLA) of this and other contexts.
A list whose barriers never fire is caught by the job timeout and recovered through the ladder.

Faulting kernels are hand-made RV32I machine code in a minimal ELF, as in tests/hw/shave/test_faults.py.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import FAILED, Kmd
from pydla.loadable.taskbuilder import TaskBuilder
from pydla.target.config import load_config
from tests.hw.shave.host import LOOP, RET, lw, sw, tiny_elf
from tests.kmd.shave_lists import F16, ListBuilder, seed_list
from tests.kmd.support import MakeKmd

State = R.shave_tile_state_e
A0 = 10
T0, T1, T2 = 5, 6, 7


def hanging_runtime() -> bytes:
    """A runtime kernel that never takes a task: it waits forever on barrier 31, which nothing
    configures (the tile sleeps in WAIT_BARRIER; the host is not blocked)."""
    words = [0x1E8002B7,  # lui t0, RT_CTRL >> 12
             0x80000337,  # lui t1, 0x80000 (barrier 31)
             sw(T1, T0, 4),  # barrier_wait = 1 << 31
             lw(T2, T0, 4),  # read it: sleeps until barrier 31 fires
             0xFFDFF06F]  # j -4
    return tiny_elf(words, base=S.RT_WIN)


def one_kernel_list(kmd: Kmd, ctx: int, words: list[int], *, tile: int = 0, kernel_id: int = 77) -> list:
    lb = ListBuilder(kmd, ctx)
    lb.act(tile, "bad", b"\0" * 4, image=tiny_elf(words), kernel_id=kernel_id, update=[0])
    return lb.addresses(notify=[0])


def assert_usable(dev: VirtualDevice, kmd: Kmd, ctx: int) -> None:
    """SHAVE lists on both tiles of ``ctx`` and of a new context, and a DLA job, run right."""
    other = kmd.open_context()
    for c, tile in ((ctx, 0), (ctx, 1), (other, 0)):
        x = np.linspace(-3, 12, 200).astype(F16)
        lb, out, addresses = seed_list(kmd, c, x, 0, 6, tile=tile)
        kmd.submit(c, addresses, timeout_ms=5000).wait(5000)
        got = lb.read(out, F16, x.shape)
        assert np.array_equal(got.view(np.uint16), np.clip(x, F16(0), F16(6)).view(np.uint16))
    tb = TaskBuilder()
    tb.sdp(tb.cube("x", (1, 2, 4)), tb.cube("y", (1, 2, 4)), act="relu")
    dla = tb.build().load(kmd, ctx)
    kmd.bo_array(ctx, dla.handles["x"])[:] = np.linspace(-1, 1, 8).astype(np.float32).view(np.uint8)
    kmd.submit(ctx, dla.addresses, timeout_ms=5000).wait(5000)
    y = kmd.bo_array(ctx, dla.handles["y"]).view(np.float32)
    assert np.array_equal(y, np.maximum(np.linspace(-1, 1, 8).astype(np.float32), 0))


def fail_of(kmd: Kmd, ctx: int, addresses: list, code: NvError) -> str:
    job = kmd.submit(ctx, addresses, timeout_ms=5000)
    with pytest.raises(DlaError) as e:
        job.wait(5000)
    assert job.state == FAILED and e.value.code == code, e.value
    return e.value.message


def test_a_read_outside_the_windows(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [lw(A0, 0, 0x100), RET]), NvError.InvalidAddress)
    assert re.search(r"SHAVE tile 0 stopped with READ_FAULT in kernel task 0 \(tile 0, kernel_id 77\): "
                     r"kernel_id 77, pc 0x1c000000, address 0x100", message), message
    assert dev.reg_read(R.SHAVE_T0_STATE) == State.IDLE  # reset: the next job starts it again
    assert_usable(dev, kmd, ctx)


def test_a_write_into_code_on_the_second_tile(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    auipc_t0 = 0x00000297
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [auipc_t0, sw(0, T0, 0), RET], tile=1, kernel_id=5),
                      NvError.InvalidAddress)
    assert "SHAVE tile 1 stopped with WRITE_FAULT" in message and "kernel_id 5" in message
    assert f"address {S.WIN_D:#x}" in message and f"pc {S.WIN_D + 4:#x}" in message
    assert_usable(dev, kmd, ctx)


def test_an_illegal_instruction(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [0xFFFFFFFF, RET]), NvError.BadValue)
    assert "ILLEGAL_INSTRUCTION" in message and "address 0xffffffff" in message and "kernel_id 77" in message
    assert_usable(dev, kmd, ctx)


def test_wfi_is_refused_with_its_own_message(make_kmd: MakeKmd) -> None:
    """wfi: not a runaway loop (BUDGET/Timeout) but the tile's refusal, named, at its PC."""
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    wfi = 0x10500073
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [0x00000013, wfi, RET], tile=1, kernel_id=9),
                      NvError.BadValue)
    assert re.search(r"^task \d+: SHAVE tile 1 stopped with ILLEGAL_INSTRUCTION \(wfi\) in kernel task 0 "
                     r"\(tile 1, kernel_id 9\): kernel_id 9, pc 0x1c000004, address 0x10500073; "
                     r"a SHAVE kernel may not use wfi: it has no interrupt to wait for", message), message
    assert "\n" not in message
    assert_usable(dev, kmd, ctx)


def test_ecall_and_csr_accesses_are_named(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [0x00000073]), NvError.BadValue)
    assert "stopped with TRAP (ecall) in" in message and "address 0x73" in message, message
    cycle_write = 0xC0029373  # csrrw t1, cycle, t0: a read-only CSR
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [cycle_write, RET]), NvError.BadValue)
    assert "stopped with ILLEGAL_INSTRUCTION (csrrw of CSR 0xc00) in" in message, message
    assert_usable(dev, kmd, ctx)


def test_a_runaway_loop_stops_at_the_budget(make_kmd: MakeKmd) -> None:
    cfg = load_config("full")
    assert cfg.shave is not None
    small = dataclasses.replace(cfg, shave=dataclasses.replace(cfg.shave, instruction_budget=100_000))
    dev, kmd = make_kmd(small)
    ctx = kmd.open_context()
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [LOOP]), NvError.Timeout)
    assert "BUDGET" in message and f"pc {S.WIN_D:#x}" in message
    assert_usable(dev, kmd, ctx)


def test_a_corrupt_runtime_kernel_fails_at_its_start(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    lb = ListBuilder(kmd, ctx)
    lb.act(0, "noop", b"", image=tiny_elf([RET]), update=[0])
    message = fail_of(kmd, ctx, lb.addresses(notify=[0], runtime=b"\x7fELF" + bytes(60)), NvError.BadValue)
    assert "BAD_ELF" in message and "the start of its runtime kernel" in message
    assert_usable(dev, kmd, ctx)


def test_a_list_whose_barriers_never_fire_times_out_and_is_recovered(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(tdr_ms=150)
    ctx = kmd.open_context()
    lb = ListBuilder(kmd, ctx)
    lb.act(0, "noop", b"", image=tiny_elf([RET]), update=[0])
    job = kmd.submit(ctx, lb.addresses(notify=[0], runtime=hanging_runtime()), timeout_ms=5000)
    with pytest.raises(DlaError) as e:
        job.wait(5000)
    assert e.value.code == NvError.Timeout
    assert "SHAVE tiles and DMA were reset" in e.value.message
    assert "tile 0 WAIT_BARRIER, 0 of 1 kernel tasks done" in e.value.message
    stats = kmd.stats()
    assert stats["recovery"]["hangs"] == 1 and stats["recovery"]["device_resets"] == 0
    assert dev.reg_read(R.SHAVE_T0_STATE) == State.IDLE
    assert_usable(dev, kmd, ctx)


def test_a_write_outside_the_windows(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    message = fail_of(kmd, ctx, one_kernel_list(kmd, ctx, [sw(0, 0, 0x200), RET], kernel_id=9),
                      NvError.InvalidAddress)
    assert re.search(r"WRITE_FAULT .*kernel_id 9, pc 0x1c000000, address 0x200", message), message
    assert_usable(dev, kmd, ctx)


@pytest.mark.parametrize("damage", ["magic", "segment_outside_the_windows", "truncated"])
def test_a_corrupt_kernel_elf(make_kmd: MakeKmd, damage: str) -> None:
    """A shipped kernel's ELF damaged in the loadable's memory: the device refuses to load it (the
    fast mode's equivalent does not know it, so its machine code is what runs): BAD_ELF, named."""
    from pydla.kernels.build import kernel_elf

    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    elf = bytearray(kernel_elf("clamp"))
    if damage == "magic":
        elf[1:4] = b"ELX"
    elif damage == "segment_outside_the_windows":
        phoff = int.from_bytes(elf[28:32], "little")
        elf[phoff + 8:phoff + 12] = (0x40000000).to_bytes(4, "little")  # p_vaddr of the first segment
    else:
        elf = elf[:100]
    lb = ListBuilder(kmd, ctx)
    lb.act(0, "broken", b"\0" * ctypes.sizeof(S.ClampParams), image=bytes(elf), kernel_id=3, update=[0])
    message = fail_of(kmd, ctx, lb.addresses(notify=[0]), NvError.BadValue)
    assert "BAD_ELF" in message and "kernel_id 3" in message, message
    assert_usable(dev, kmd, ctx)
