"""A SHAVE tile as an AP_CTRL_HS compute unit: XRT's HS sequence driven through the unit's control
block, each execution one ActKernelTask on the tile; errors in the unit's error register; the KMD
driving it as any HS unit."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.cu.unit import CTRL
from pydla.hw.device import VirtualDevice
from tests.hw.cu_driver import sequence
from tests.hw.shave.host import Host, cmx
from tests.hw.shave.test_scenario import clamp_args

AP_START, AP_DONE, AP_IDLE, AP_READY = 1, 2, 4, 8
ARGS, CTX, ERROR = 0x10, 0xF00, 0xF04


def base(dev: VirtualDevice, name: str) -> int:
    return dev.config.compute_unit(name).m_base_address


def stage(host: Host, tile: int, x: np.ndarray, lo: float, hi: float, slot: int) -> tuple[int, int]:
    """x in the tile's CMX at a slot of its own, a clamp task (no barriers) writing the next slot;
    the task's address and the output's CMX offset."""
    src, dst = 0x40000 * slot, 0x40000 * slot + 0x20000
    assert host.dev.shave is not None
    host.dev.shave.cmx(tile)[src:src + x.nbytes] = np.frombuffer(x.tobytes(), np.uint8)
    task = host.kernel(tile, "clamp", clamp_args(cmx(src), cmx(dst), x.shape, np.float32, lo, hi), push=False)
    return task, dst


def run_hs(dev: VirtualDevice, name: str, tasks: list[int], ctx: int) -> None:
    """XRT's HS loop over the unit's registers: arguments, ap_start, wait for ap_done."""
    b = base(dev, name)
    dev.reg_write(b + CTX, ctx)
    for task in tasks:
        dev.reg_write(b + ARGS, task & 0xFFFFFFFF)
        dev.reg_write(b + ARGS + 4, task >> 32)
        dev.reg_write(b + CTRL, AP_START)
        for _ in range(10_000):
            if dev.reg_read(b + CTRL) & AP_DONE:
                break
        else:
            raise AssertionError(f"{name}: no ap_done")


def test_a_tile_runs_three_tasks_as_an_hs_unit(host: Host) -> None:
    dev = host.dev
    host.start_tile(0)
    xs = [np.linspace(-3, 3, 256, dtype=np.float32) * (i + 1) for i in range(3)]
    staged = [stage(host, 0, x, -1.0, 2.0, i) for i, x in enumerate(xs)]
    run_hs(dev, "shave:tile0", [t for t, _ in staged], host.ctx)
    assert sequence(dev, "tile0") == "START1=>DONE1=>START2=>DONE2=>START3=>DONE3"
    for x, (_, dst) in zip(xs, staged, strict=True):
        got = np.frombuffer(dev.shave.cmx(0)[dst:dst + x.nbytes].tobytes(), np.float32)  # type: ignore[union-attr]
        np.testing.assert_array_equal(got, np.clip(x, -1.0, 2.0))
    assert dev.reg_read(base(dev, "tile0") + ERROR) == 0
    assert dev.reg_read(R.SHAVE_T0_DONE) == 3  # the same tile the SHAVE registers count


def test_a_tile_not_started_or_a_faulting_kernel_is_the_units_error(host: Host) -> None:
    dev = host.dev
    task, _ = stage(host, 1, np.zeros(16, np.float32), 0.0, 1.0, 0)
    run_hs(dev, "tile1", [task], host.ctx)
    assert dev.reg_read(base(dev, "tile1") + ERROR) == int(R.dla_hw_error_e.BAD_CONFIG)
    assert "tile 1 is not idle in its runtime kernel (state IDLE" in dev.cu_log("tile1")[-1]
    host.start_tile(1)
    bad = host.kernel(1, "clamp", b"\0" * 8, push=False)  # ClampParams is 68 bytes: the kernel asserts
    run_hs(dev, "tile1", [bad], host.ctx)
    assert dev.cu_log("tile1")[-1].startswith("execution 2: tile 1: ")  # the tile's error, named
    assert "kernel 0x1" in dev.cu_log("tile1")[-1], dev.cu_log("tile1")
    assert dev.reg_read(R.SHAVE_T1_ERROR) != 0  # the tile stopped, as the SHAVE registers say


@pytest.fixture
def kmd_dev():  # type: ignore[no-untyped-def]
    from pydla.composition.virtual_port import VirtualDevicePort
    from pydla.kmd.driver import Kmd

    dev = VirtualDevice("full", mode="threaded")
    kmd = Kmd(VirtualDevicePort(dev))
    yield dev, kmd
    kmd.close()
    dev.close()


def test_the_kmd_drives_a_tile_as_any_hs_unit(kmd_dev) -> None:  # type: ignore[no-untyped-def]
    """The tile started through the SHAVE registers, every descriptor in buffers of one KMD context;
    then executions go through cu_submit, as for any HS unit."""
    from pydla.deviceapi.generated import shave as S
    from pydla.kernels.build import kernel_elf
    from pydla.kmd.cu import CuBuffer
    from tests.hw.shave.host import DATA_OFFSET, entry_offset, treg

    dev, kmd = kmd_dev
    ctx = kmd.open_context()

    def put(data: bytes) -> tuple[int, int]:
        handle = kmd.bo_create(ctx, max(len(data), 1))
        kmd.bo_array(ctx, handle)[:len(data)] = np.frombuffer(data, np.uint8)
        return kmd.bo_iova(ctx, handle), handle

    runtime = kernel_elf("runtime")
    rt_addr, _ = put(runtime)
    for reg, value in ((R.SHAVE_CTX, ctx), (treg(0, "rt_addr_lo"), rt_addr & 0xFFFFFFFF),
                       (treg(0, "rt_addr_hi"), rt_addr >> 32), (treg(0, "rt_size"), len(runtime)),
                       (treg(0, "stack_size"), 16384), (treg(0, "ctrl"), 1)):
        dev.reg_write(reg, value)
    elf = kernel_elf("clamp")
    code, _ = put(elf)
    results = []
    for i in range(3):
        x = np.linspace(-4, 4, 64, dtype=np.float32) * (i + 1)
        src, dst = 0x40000 * i, 0x40000 * i + 0x20000
        dev.shave.cmx(0)[src:src + x.nbytes] = np.frombuffer(x.tobytes(), np.uint8)
        args = clamp_args(cmx(src), cmx(dst), x.shape, np.float32, -2.0, 3.0)
        raw, data = bytes(args), bytes(args.data)
        inv = S.ActKernelInvocation(kernel_addr=code, kernel_size=len(elf), entry_offset=entry_offset(elf),
                                    args_addr=put(raw)[0], args_size=len(raw), tile=0, kernel_id=1)
        inv.data_addr, inv.data_size, inv.data_offset = put(data)[0], len(data), DATA_OFFSET
        _, task = put(bytes(S.ActKernelTask(invocation=inv, wait_mask=0, update_mask=0)))
        results.append((kmd.cu_submit(ctx, "tile0", [CuBuffer(task)], timeout_ms=10_000), x, dst))
    for ex, x, dst in results:
        ex.wait(10_000)
        got = np.frombuffer(dev.shave.cmx(0)[dst:dst + x.nbytes].tobytes(), np.float32)
        np.testing.assert_array_equal(got, np.clip(x, -2.0, 3.0))
    assert sequence(dev, "tile0") == "START1=>DONE1=>START2=>DONE2=>START3=>DONE3"
