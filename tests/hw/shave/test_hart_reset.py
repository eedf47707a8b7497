"""Every task starts from the same hart, whatever the task before it did: privilege mode, CSRs,
the rounding mode and flags, integer and FP registers, the emulator's translations. A kernel that
dirties all of it and drops to user mode (mret), in one context, is followed by an observer kernel
in another context that stores what it finds: the same bytes as on a freshly started tile. The
same after a fault and the host's reset (SHAVE_RESET, START); in both emulation modes and both
budget kinds. ``wfi`` is refused with its own fault (a tile has no interrupt for a kernel to wait
for)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.device import VirtualDevice
from pydla.testing.fuzz_shave import (
    CSRRC,
    CSRRS,
    CSRRW,
    LOOP,
    MEPC,
    MRET,
    MSTATUS,
    MSTATUS_MPRV,
    RA,
    RET,
    SATP,
    T0,
    T1,
    WFI,
    ZERO,
    addi,
    csr,
    fsw,
    kernel_image,
    li,
    lw,
    sw,
)
from tests.hw.shave.conftest import config
from tests.hw.shave.host import Host, treg
from tests.hw.shave.test_scenario import run_clamp

E = R.shave_error_e
OBS = 0x1000  # where the observer stores what it sees (CMX offset)
# CSRs a kernel can write (machine, supervisor, PMP, FP): the observer reads each.
CSRS = (0x300, 0x301, 0x302, 0x303, 0x304, 0x305, 0x306, 0x340, 0x341, 0x342, 0x343, 0x344, 0x100, 0x104,
        0x105, 0x106, 0x140, 0x141, 0x142, 0x143, 0x180, 0x3A0, 0x3B0, 0x001, 0x002, 0x003)
# Registers the runtime kernel's call leaves to the kernel (not a0/a1, its arguments; not sp/ra).
REGS = (3, 4, 7, 8, 9, 12, 13, 14, 15, 16, 17, *range(18, 32))
# Legal values of the CSRs above for the dirtying kernel (mstatus: MPRV off, MPP user, FS dirty).
DIRTY = {0x300: 0x6008 | 1 << 19 | 1 << 18 | 1 << 20 | 1 << 21 | 1 << 22, 0x302: 0xB1FF, 0x303: 0x222,
         0x304: 0xAAA, 0x305: S.WIN_D + 0x100, 0x306: 7, 0x340: 0x5CA7C4, 0x341: 0x1234, 0x342: 13,
         0x343: 0xBAD, 0x104: 0x222, 0x105: S.WIN_D + 0x200, 0x106: 7, 0x140: 0x5C5C, 0x141: 0x88,
         0x142: 5, 0x143: 0x99, 0x180: 0x7FFFFFFF, 0x3B0: 0xFFFFFFFF, 0x3A0: 0x0F, 0x002: 1, 0x001: 0x1F}


def observer() -> bytes:
    """Stores each CSR of CSRS, each register of REGS and f0..f31 at CMX offset OBS; returns."""
    words = li(T0, S.WIN_F + OBS)
    for i, number in enumerate(CSRS):
        words += [csr(CSRRS, T1, number, ZERO), sw(T1, T0, 4 * i)]
    base = 4 * len(CSRS)
    words += [sw(r, T0, base + 4 * i) for i, r in enumerate(REGS)]
    base += 4 * len(REGS)
    words += [fsw(f, T0, base + 4 * f) for f in range(32)]
    return kernel_image([*words, RET])


OBS_BYTES = 4 * (len(CSRS) + len(REGS) + 32)


def dirtying(leave: str) -> bytes:
    """Writes every CSR of DIRTY, every FP register and the caller-saved integer registers, then
    leaves: ``user`` returns to the runtime kernel in user mode (mret to ra), ``fault`` jumps to 0 in
    user mode (mret with mepc 0: FETCH_FAULT)."""
    words: list[int] = []
    for number, value in DIRTY.items():
        words += [*li(T0, value), csr(CSRRW, ZERO, number, T0)]
    words += li(T1, 0x7FC00001)  # a NaN's bits
    words += [0xF0000053 | T1 << 15 | f << 7 for f in range(32)]  # fmv.w.x f, t1
    words += [addi(r, ZERO, -1) for r in (7, *range(12, 18), *range(28, 32))]
    words += [*li(T0, 0x1800), csr(CSRRC, ZERO, MSTATUS, T0)]  # MPP: user
    words += [csr(CSRRW, ZERO, MEPC, RA if leave == "user" else ZERO), MRET]
    return kernel_image(words)


def observe(host: Host, tile: int = 0) -> bytes:
    before = host.r(treg(tile, "done"))
    host.kernel(tile, "observer", b"\0" * 4, image=observer())
    status = host.tile_error(tile)
    assert status["error"] == E.NONE and status["done"] == before + 1, (status, list(host.dev.log)[-2:])
    assert host.dev.shave is not None
    return host.dev.shave.cmx(tile)[OBS:OBS + OBS_BYTES].tobytes()


@pytest.fixture(params=["exact-time", "exact-instructions", "fast-time"])
def device(request: pytest.FixtureRequest) -> Iterator[VirtualDevice]:
    emulation, budget = request.param.split("-")
    cfg = config(emulation)
    assert cfg.shave is not None
    if budget == "instructions":
        cfg = dataclasses.replace(cfg, shave=dataclasses.replace(cfg.shave, instruction_budget=1_000_000))
    dev = VirtualDevice(cfg, mode="deterministic")
    yield dev
    dev.close()


def fresh_view(dev: VirtualDevice) -> bytes:
    """What the observer sees as the first task of a freshly started tile 1."""
    host = Host(dev)
    host.start_tile(1)
    return observe(host, 1)


def test_a_kernel_in_user_mode_leaving_dirty_state_does_not_reach_the_next_task(
        device: VirtualDevice) -> None:
    fresh = fresh_view(device)
    mine = Host(device)
    mine.start_tile(0)
    assert observe(mine, 0) == fresh  # tile 0 sees what tile 1 saw
    mine.kernel(0, "dirty", b"\0" * 4, image=dirtying("user"))
    assert mine.tile_error(0)["error"] == E.NONE  # it ran: back in the runtime kernel, in user mode
    x = np.linspace(-3, 3, 64).astype(np.float16)  # a shipped kernel between (fast: numpy, no hart)
    assert np.array_equal(run_clamp(mine, x, -1, 1), np.clip(x, np.float16(-1), np.float16(1)))
    mine.kernel(0, "dirty", b"\0" * 4, image=dirtying("user"))
    other = Host(device)  # another context on the same device: its task runs next on tile 0
    assert observe(other, 0) == fresh


def test_the_reset_after_a_fault_restores_the_hart(device: VirtualDevice) -> None:
    fresh = fresh_view(device)
    host = Host(device)
    host.start_tile(0)
    host.kernel(0, "dirty", b"\0" * 4, image=dirtying("fault"))
    status = host.tile_error(0)
    assert status["error"] == E.FETCH_FAULT and status["error_pc"] == 0, status
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
    host.w(R.SHAVE_CTX, host.ctx)
    host.start_tile(0)
    assert observe(host, 0) == fresh


def page_tables_leaving_a_translation() -> bytes:
    """Turns on Sv32 with MPRV (data accesses translated as user mode): WIN_E is mapped onto the
    start of WIN_F, the rest (code, runtime, control page, CMX) onto itself; reads WIN_E through
    the mapping (the emulator caches that translation), and returns with paging still on."""
    root = S.WIN_F + 0x10000
    words = li(T0, root)
    for window, target in ((S.WIN_D, S.WIN_D), (S.WIN_E, S.WIN_F), (S.RT_WIN, S.RT_WIN),
                           (S.RT_CTRL, S.RT_CTRL), (S.WIN_F, S.WIN_F)):
        pte = (target >> 12) << 10 | 0xDF  # a megapage: V R W X U A D
        words += [*li(T1, pte), sw(T1, T0, 4 * (window >> 22))]
    words += [*li(T1, 1 << 31 | root >> 12), csr(CSRRW, ZERO, SATP, T1)]
    words += [*li(T1, MSTATUS_MPRV), csr(CSRRS, ZERO, MSTATUS, T1)]
    words += [*li(T0, S.WIN_E), lw(T1, T0, 0), RET]
    return kernel_image(words)


def reads_its_arguments() -> bytes:
    """Copies the first word of its argument buffer (WIN_E) to CMX offset OBS."""
    return kernel_image([*li(T0, S.WIN_E), lw(T1, T0, 0), *li(T0, S.WIN_F + OBS), sw(T1, T0, 0), RET])


def test_translations_a_kernel_made_with_paging_on_do_not_outlive_it(host: Host) -> None:
    assert host.dev.shave is not None
    cmx0 = host.dev.shave.cmx(0)
    cmx0[0:4] = np.frombuffer((0xBAD0BAD0).to_bytes(4, "little"), np.uint8)
    host.start_tile(0)
    host.kernel(0, "paging", b"\0" * 4, image=page_tables_leaving_a_translation())
    assert host.tile_error(0)["error"] == E.NONE
    host.kernel(0, "reader", (0x600DCAFE).to_bytes(4, "little"), image=reads_its_arguments())
    assert host.tile_error(0)["error"] == E.NONE
    assert int.from_bytes(cmx0[OBS:OBS + 4].tobytes(), "little") == 0x600DCAFE


def test_every_task_restores_the_state_saved_at_start(host: Host) -> None:
    """The reset per task copies back the state saved at START (it is not built again per task)."""
    host.start_tile(0)
    tile = host.dev.shave.tiles[0]  # type: ignore[union-attr]
    saved = tile._entry_state
    for _ in range(3):
        host.kernel(0, "dirty", b"\0" * 4, image=dirtying("user"))
    assert tile._entry_state is saved and host.r(treg(0, "done")) == 3


@pytest.fixture(params=[{"time_budget_ms": 50}, {"instruction_budget": 100_000}],
                ids=["time", "instructions"])
def small_budget(request: pytest.FixtureRequest) -> Iterator[Host]:
    cfg = config("exact")
    assert cfg.shave is not None
    dev = VirtualDevice(dataclasses.replace(cfg, shave=dataclasses.replace(cfg.shave, **request.param)))
    yield Host(dev)
    dev.close()


def test_wfi_is_refused_with_its_own_fault(small_budget: Host) -> None:
    host = small_budget
    host.start_tile(0)
    host.kernel(0, "waits", b"\0" * 4, image=kernel_image([*li(T0, 1), WFI, RET]))
    s = host.tile_error(0)
    at = S.WIN_D + 4
    assert (s["error"], s["error_pc"], s["error_addr"]) == (E.ILLEGAL_INSTRUCTION, at, WFI), s
    assert s["error_kernel"] == host.kernel_ids["waits"] and s["error_task"] == 1
    line = list(host.dev.log)[-1]
    assert f"SHAVE tile 0: ILLEGAL_INSTRUCTION: wfi at pc {at:#x}: a tile has no interrupt" in line, line


def test_a_runaway_loop_is_still_a_budget_and_a_wfi_jumped_over_no_wfi(small_budget: Host) -> None:
    host = small_budget
    host.start_tile(0)
    host.kernel(0, "spins", b"\0" * 4, image=kernel_image([LOOP]))
    assert host.tile_error(0)["error"] == E.BUDGET
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_CTX, host.ctx)
    host.start_tile(0)
    # j +8; wfi; j .: the word before the PC where the loop stops is a wfi that never ran.
    host.kernel(0, "jumps", b"\0" * 4, image=kernel_image([0x0080006F, WFI, LOOP]))
    assert host.tile_error(0)["error"] == E.BUDGET


def test_a_wfi_in_the_runtime_kernel_names_the_runtime(host: Host) -> None:
    runtime = bytearray(kernel_image([WFI]))
    runtime[24:28] = S.RT_WIN.to_bytes(4, "little")  # e_entry
    runtime[52 + 8:52 + 16] = S.RT_WIN.to_bytes(4, "little") * 2  # p_vaddr, p_paddr
    host.start_tile(0, runtime=bytes(runtime))
    s = host.tile_error(0)
    assert (s["error"], s["error_pc"], s["error_addr"]) == (E.ILLEGAL_INSTRUCTION, S.RT_WIN, WFI)
    assert s["error_kernel"] == 0xFFFFFFFF
