"""The VPUX software layers' scenario at register level: DMA DDR->CMX updates b0; clamp on tile 0
waits b0 and updates b1; DMA CMX->DDR waits b1. Plus the barrier, FIFO and reset protocol."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.device import VirtualDevice
from tests.hw.shave.host import Args, Host, cmx, treg

State = R.shave_tile_state_e
F16 = np.float16


def h16(x: float) -> int:
    return int(np.array(x, F16).view(np.uint16))


def clamp_args(src: int, dst: int, shape: tuple[int, ...], dtype: type, lo: float, hi: float,
               dynamic_at: int | None = None) -> Args:
    a = Args(S.ClampParams)
    a.memref("input", src, shape, dtype)
    a.memref("output", dst, shape, dtype, dynamic_at=dynamic_at)
    a.params.minVal, a.params.maxVal = h16(lo), h16(hi)
    return a


def run_clamp(host: Host, x: np.ndarray, lo: float, hi: float, tile: int = 0) -> np.ndarray:
    """The scenario: b0 (DMA in -> clamp), b1 (clamp -> DMA out), b2 (DMA out -> the host)."""
    src, out = host.put(x), host.alloc(x.nbytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    host.barrier(2, 1, 0)
    host.w(R.SHAVE_BAR_NOTIFY, 1 << 2)
    host.dma(src, cmx(0), x.nbytes, dst_tile=tile, update=1 << 0)
    host.kernel(tile, "clamp", clamp_args(cmx(0), cmx(0x40000), x.shape, x.dtype.type, lo, hi),
                wait=1 << 0, update=1 << 1)
    host.dma(cmx(0x40000), out, x.nbytes, src_tile=tile, wait=1 << 1, update=1 << 2)
    return np.frombuffer(host.read(out, x.nbytes), x.dtype).reshape(x.shape)


def test_the_seed_scenario_is_bit_exact(host: Host) -> None:
    host.start_tile(0)
    assert host.r(treg(0, "state")) == State.WAIT_FIFO
    x = (np.random.default_rng(1).standard_normal((16, 250)) * 8).astype(F16)
    x[0, :4] = [np.inf, -np.inf, np.nan, 6.0]
    got = run_clamp(host, x, 0.0, 6.0)
    ref = np.clip(x, F16(0.0), F16(6.0))
    assert np.array_equal(got.view(np.uint16), ref.view(np.uint16))
    assert host.r(R.SHAVE_INTR_STATUS) == 1 << 17 and host.r(R.SHAVE_BAR_FIRED) & 0b111 == 0b111
    assert host.r(R.GLB_INTR_STATUS) & 1 << 29 and host.irqs == 1
    assert host.r(treg(0, "done")) == 1 and host.r(R.SHAVE_DMA_DONE) == 2
    assert host.r(treg(0, "state")) == State.WAIT_FIFO and host.r(treg(0, "error")) == 0
    # The barriers reset for reuse: the same configuration runs the list again.
    host.w(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
    again = run_clamp(host, x[:, ::-1].copy(), -1.0, 1.0)
    assert np.array_equal(again.view(np.uint16), np.clip(x[:, ::-1], F16(-1), F16(1)).view(np.uint16))
    assert host.r(treg(0, "done")) == 2


def test_clamp_fp32_and_strided_input(host: Host) -> None:
    host.start_tile(1)
    base = (np.random.default_rng(2).standard_normal((8, 64)) * 3).astype(np.float32)
    src, out = host.put(base), host.alloc(base.nbytes // 2)
    host.barrier(3, 1, 1)
    host.barrier(4, 1, 1)
    host.dma(src, cmx(0), base.nbytes, dst_tile=1, update=1 << 3)
    a = Args(S.ClampParams)  # every other column: a strided input, a dense output
    a.memref("input", cmx(0), (8, 32), np.float32, strides=(256, 8))
    a.memref("output", cmx(0x8000), (8, 32), np.float32)
    a.params.minVal, a.params.maxVal = h16(-0.5), h16(0.75)
    host.kernel(1, "clamp", a, wait=1 << 3, update=1 << 4)
    host.dma(cmx(0x8000), out, base.nbytes // 2, src_tile=1, wait=1 << 4)
    got = np.frombuffer(host.read(out, base.nbytes // 2), np.float32).reshape(8, 32)
    assert np.array_equal(got, np.clip(base[:, ::2], np.float32(-0.5), np.float32(0.75)))


def test_tasks_pushed_before_start_and_barriers_configured_late(host: Host) -> None:
    """Order does not matter to the result: a tile started last takes its queued tasks, and a task
    waits for a barrier the DMA produces after it was pushed."""
    x = np.linspace(-10, 10, 512).astype(F16)
    src, out = host.put(x), host.alloc(x.nbytes)
    host.barrier(0, 1, 1)
    host.barrier(1, 1, 1)
    host.kernel(0, "clamp", clamp_args(cmx(0), cmx(0x1000), x.shape, F16, -2, 3), wait=1, update=2)
    host.dma(cmx(0x1000), out, x.nbytes, src_tile=0, wait=2)
    assert host.r(treg(0, "level")) == 1 and host.r(R.SHAVE_DMA_LEVEL) == 1
    host.start_tile(0)
    assert host.r(treg(0, "state")) == State.WAIT_BARRIER
    assert host.r(treg(0, "done")) == 0
    host.dma(src, cmx(0), x.nbytes, dst_tile=0, update=1)  # behind the waiting DMA task: in order
    assert host.r(treg(0, "state")) == State.WAIT_BARRIER
    host.w(R.SHAVE_RESET, 1)
    assert host.r(treg(0, "state")) == State.IDLE and host.r(R.SHAVE_DMA_LEVEL) == 0


def test_two_tiles_one_list_each_deterministic(dev: VirtualDevice) -> None:
    traces = []
    for _ in range(2):
        device = VirtualDevice("full")
        h = Host(device)
        h.start_tile(0)
        h.start_tile(1)
        xs = [np.arange(300, dtype=F16) - 150, np.arange(300, dtype=F16) * F16(0.1)]
        outs = [h.alloc(600), h.alloc(600)]
        trace = device.record_trace()
        for t, x in enumerate(xs):
            h.barrier(2 * t, 1, 1)
            h.barrier(2 * t + 1, 1, 1)
            h.dma(h.put(x), cmx(0), 600, dst_tile=t, update=1 << 2 * t)
            h.kernel(t, "clamp", clamp_args(cmx(0), cmx(0x800), (300,), F16, -7, 7), wait=1 << 2 * t,
                     update=1 << 2 * t + 1)
            h.dma(cmx(0x800), outs[t], 600, src_tile=t, wait=1 << 2 * t + 1)
        for t, x in enumerate(xs):
            got = np.frombuffer(h.read(outs[t], 600), F16)
            assert np.array_equal(got, np.clip(x, F16(-7), F16(7)))
        traces.append([str(e) for e in trace if "PUSH" not in e.name])
        device.close()
    assert traces[0] == traces[1]


def test_registers_on_a_config_without_tiles_are_bus_errors() -> None:
    dev = VirtualDevice("small")
    errors = dev.bus_errors
    assert dev.reg_read(R.SHAVE_TILES) == 0
    dev.reg_write(R.SHAVE_T0_CTRL, 1)
    assert dev.bus_errors == errors + 2
    dev.close()


def test_reserved_and_unaligned_shave_addresses_are_bus_errors(dev: VirtualDevice) -> None:
    for address in (R.SHAVE_TILES + 2, R.SHAVE_T0_CTRL + 0x3C, R.SHAVE_T3_CTRL, 0x7FFC):
        errors = dev.bus_errors
        assert dev.reg_read(address) == 0
        dev.reg_write(address, 1)
        assert dev.bus_errors == errors + 2, hex(address)


def test_device_reset_resets_the_tiles(host: Host, dev: VirtualDevice) -> None:
    host.start_tile(0)
    host.barrier(5, 2, 1)
    dev.reg_write(R.GLB_RESET, 1 << 31)
    assert host.r(treg(0, "state")) == State.IDLE
    host.w(R.SHAVE_BAR_SELECT, 5)
    assert host.r(R.SHAVE_BAR_STATE) == 0 and host.r(R.SHAVE_CTX) == 0


@pytest.mark.parametrize("mode", ["threaded", "step"])
def test_other_device_modes_run_the_scenario(mode: str) -> None:
    """Threaded: a worker thread runs the tiles; the host waits for the notify barrier's interrupt
    (with a timeout, as a KMD does)."""
    dev = VirtualDevice("full", mode=mode)
    host = Host(dev)
    fired = threading.Event()
    dev.connect_irq(lambda: fired.set() if dev.reg_read(R.SHAVE_INTR_STATUS) & 1 << 17 else None)
    host.start_tile(0)
    x = np.linspace(-4, 9, 100).astype(F16)
    for _ in range(3):
        fired.clear()
        host.w(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
        got = run_clamp(host, x, 0, 6)
        assert fired.wait(10.0), "no interrupt from the notify barrier"
        assert host.r(R.SHAVE_DMA_DONE) % 2 == 0
        got = np.frombuffer(host.read(host_last_out(host), x.nbytes), F16) if mode == "threaded" else got
        assert np.array_equal(got, np.clip(x, F16(0), F16(6)))
    dev.close()


def host_last_out(host: Host) -> int:
    """The output buffer of the last run_clamp: its last DMA task's destination."""
    return host.last_dma_dst
