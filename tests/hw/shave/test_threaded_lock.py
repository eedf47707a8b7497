"""A threaded device's SHAVE worker computes a kernel without the device lock: the host (and the
engine's DLA side) reach the device meanwhile; a reset, HALT or device reset of a tile that
computes abandons the kernel, returns once it stopped, and leaves no trace of it."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from tests.hw.shave.conftest import config
from tests.hw.shave.host import LOOP, Host, cmx, tiny_elf, treg
from tests.hw.shave.test_scenario import clamp_args, run_clamp

State = R.shave_tile_state_e
F16 = np.float16
WAIT_S = 10.0  # a test's waits (never reached when it passes)


def in_thread(call: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=call, daemon=True)
    t.start()
    return t


@pytest.fixture
def gated() -> Iterator[tuple[VirtualDevice, Host, threading.Event, threading.Event]]:
    """A threaded device (fast emulation) whose tile 0 computes a kernel's equivalent only once
    ``gate`` is set; ``entered`` is set when it starts computing."""
    dev = VirtualDevice(config("fast"), mode="threaded")
    host = Host(dev)
    gate, entered = threading.Event(), threading.Event()
    tile = dev.shave.tiles[0]  # type: ignore[union-attr]
    compute = tile._run_fast

    def run_fast() -> None:
        entered.set()
        assert gate.wait(WAIT_S)
        compute()

    tile._run_fast = run_fast  # type: ignore[method-assign]
    yield dev, host, gate, entered
    gate.set()
    dev.close()


def test_a_computing_tile_leaves_the_device_to_the_host(
        gated: tuple[VirtualDevice, Host, threading.Event, threading.Event]) -> None:
    dev, host, gate, entered = gated
    fired = threading.Event()
    dev.connect_irq(lambda: fired.set() if dev.reg_read(R.SHAVE_INTR_STATUS) & 1 << 17 else None)
    host.start_tile(0)
    x = np.linspace(-4, 9, 1000).astype(F16)
    run_clamp(host, x, 0, 6)
    assert entered.wait(WAIT_S)
    # The kernel computes: registers answer at once (before, they waited for the kernel's end).
    seen: dict[str, int] = {}
    reader = in_thread(lambda: seen.update(state=host.r(treg(0, "state")), dma=host.r(R.SHAVE_DMA_DONE),
                                           glb=host.r(R.GLB_INTR_STATUS)))
    reader.join(WAIT_S / 2)
    assert not reader.is_alive(), "a register read waited for the kernel"
    assert seen == {"state": State.RUNNING, "dma": 1, "glb": 0}
    assert not fired.is_set()
    gate.set()
    assert fired.wait(WAIT_S), "no interrupt from the notify barrier"
    got = np.frombuffer(host.read(host.last_dma_dst, x.nbytes), F16)
    assert np.array_equal(got, np.clip(x, F16(0), F16(6)))
    assert host.r(treg(0, "done")) == 1 and host.r(R.SHAVE_DMA_DONE) == 2


@pytest.mark.parametrize("how", ["shave_reset", "halt", "device_reset"])
def test_a_reset_waits_for_the_kernel_and_discards_it(
        gated: tuple[VirtualDevice, Host, threading.Event, threading.Event], how: str) -> None:
    _, host, gate, entered = gated
    host.start_tile(0)
    x = np.linspace(-4, 9, 1000).astype(F16)
    run_clamp(host, x, 0, 6)
    out = host.last_dma_dst
    assert entered.wait(WAIT_S)
    address, value = {"shave_reset": (R.SHAVE_RESET, 1), "halt": (treg(0, "ctrl"), 2),
                      "device_reset": (R.GLB_RESET, 1 << 31)}[how]
    resetter = in_thread(lambda: host.w(address, value))
    resetter.join(0.3)
    assert resetter.is_alive(), "the reset returned while the abandoned kernel still computed"
    gate.set()
    resetter.join(WAIT_S)
    assert not resetter.is_alive()
    # The task's end never happened: no count, no barrier, no DMA out, no interrupt.
    assert host.r(treg(0, "state")) == State.IDLE and host.r(treg(0, "done")) == 0
    assert host.r(treg(0, "error")) == 0
    assert host.r(R.SHAVE_INTR_STATUS) & 1 << 17 == 0
    time.sleep(0.05)  # (the worker had nothing left to run: nothing comes later either)
    assert host.read(out, x.nbytes) == bytes(x.nbytes)
    # The tile runs the next list.
    host.w(R.SHAVE_RESET, 1)
    host.w(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
    host.w(R.SHAVE_CTX, host.ctx)
    host.start_tile(0)
    run_clamp(host, x, -1, 1)
    deadline = time.monotonic() + WAIT_S
    while host.r(R.SHAVE_DMA_DONE) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    got = np.frombuffer(host.read(host.last_dma_dst, x.nbytes), F16)
    assert np.array_equal(got, np.clip(x, F16(-1), F16(1)))


@pytest.mark.parametrize("how", ["shave_reset", "device_reset"])
def test_a_reset_stops_a_runaway_emulation_at_once(how: str) -> None:
    """Machine code that loops forever, with a 20 s budget: the reset stops the emulation (before,
    the host's register write waited for the device lock until the budget ran out)."""
    cfg = config("exact")
    assert cfg.shave is not None
    dev = VirtualDevice(dataclasses.replace(cfg, shave=dataclasses.replace(cfg.shave, time_budget_ms=20_000)),
                        mode="threaded")
    try:
        host = Host(dev)
        host.start_tile(0)
        host.kernel(0, "loop", b"", image=tiny_elf([LOOP]))
        time.sleep(0.2)  # the worker emulates the loop by now
        assert host.r(treg(0, "state")) == State.RUNNING
        t0 = time.monotonic()
        host.w(*{"shave_reset": (R.SHAVE_RESET, 1), "device_reset": (R.GLB_RESET, 1 << 31)}[how])
        assert time.monotonic() - t0 < 5.0
        assert host.r(treg(0, "state")) == State.IDLE and host.r(treg(0, "error")) == 0
        assert not any("BUDGET" in line or "budget" in line for line in dev.log)
        # The tile is whole: a list runs on it again, its machine code included.
        host.w(R.SHAVE_CTX, host.ctx)
        host.start_tile(0)
        x = np.linspace(-3, 3, 64).astype(F16)
        host.barrier(0, 1, 1)
        host.barrier(1, 1, 1)
        host.dma(host.put(x), cmx(0), x.nbytes, dst_tile=0, update=1)
        host.kernel(0, "clamp", clamp_args(cmx(0), cmx(0x1000), x.shape, F16, -1, 2), wait=1, update=2)
        out = host.alloc(x.nbytes)
        host.dma(cmx(0x1000), out, x.nbytes, src_tile=0, wait=2)
        deadline = time.monotonic() + WAIT_S
        while host.r(R.SHAVE_DMA_DONE) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert np.array_equal(np.frombuffer(host.read(out, x.nbytes), F16), np.clip(x, F16(-1), F16(2)))
    finally:
        dev.close()


def test_a_bit_the_host_clears_while_a_kernel_computes_interrupts_again(
        gated: tuple[VirtualDevice, Host, threading.Event, threading.Event]) -> None:
    """The notify bit is still set from the list before when the worker starts; the host clears it
    while the next list's kernel computes; the next notify sets it again: a new bit, an interrupt."""
    dev, host, gate, entered = gated
    irqs: list[int] = []
    dev.connect_irq(lambda: irqs.append(dev.reg_read(R.SHAVE_INTR_STATUS)))
    host.start_tile(0)
    x = np.linspace(-4, 9, 1000).astype(F16)
    gate.set()
    run_clamp(host, x, 0, 6)
    deadline = time.monotonic() + WAIT_S
    while not irqs and time.monotonic() < deadline:
        time.sleep(0.002)
    assert irqs and host.r(R.SHAVE_INTR_STATUS) & 1 << 17  # not cleared: the line stays up
    gate.clear()
    entered.clear()
    run_clamp(host, x, -1, 1)
    assert entered.wait(WAIT_S)
    host.w(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
    host.w(R.GLB_INTR_STATUS, 1 << 29)
    count = len(irqs)
    gate.set()
    deadline = time.monotonic() + WAIT_S
    while len(irqs) == count and time.monotonic() < deadline:
        time.sleep(0.002)
    assert len(irqs) > count and irqs[-1] & 1 << 17, "the second list's notify raised no interrupt"
    assert host.r(R.GLB_INTR_STATUS) & 1 << 29
