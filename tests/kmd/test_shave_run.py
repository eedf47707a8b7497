"""SHAVE task lists through the KMD's job queue: the seed scenario bit-exact, two tiles at once, tiles
kept running between jobs, prepared jobs, fences and ordering with DLA jobs, a context closed under a
running list. Every test runs headless and headed (the SHAVE tiles are the host's in both)."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.kmd.driver import COMPLETED, FAILED, RUNNING
from pydla.kmd.sync import TimelineSemaphore
from pydla.loadable.taskbuilder import TaskBuilder
from tests.kmd.shave_lists import F16, ListBuilder, clamp_args, seed_list
from tests.kmd.support import MakeKmd, drive

T0_STATE = R.SHAVE_T0_STATE
State = R.shave_tile_state_e


def clip16(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.clip(x, F16(lo), F16(hi))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_the_seed_scenario_is_bit_exact(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    x = (np.random.default_rng(1).standard_normal((16, 250)) * 8).astype(F16)
    x[0, :4] = [np.inf, -np.inf, np.nan, 6.0]
    lb, out, addresses = seed_list(kmd, ctx, x, 0.0, 6.0)
    job = kmd.submit(ctx, addresses, timeout_ms=5000)
    job.wait(5000)
    assert job.state == COMPLETED
    assert same_bits(lb.read(out, F16, x.shape), clip16(x, 0, 6))
    # The tile keeps running its runtime kernel: the next job of the same list does not restart it.
    assert dev.reg_read(T0_STATE) == State.WAIT_FIFO
    y = x[::-1].copy()
    lb.write(4, y)  # entry 4: the input
    kmd.submit(ctx, addresses, timeout_ms=5000).wait(5000)
    assert same_bits(lb.read(out, F16, x.shape), clip16(y, 0, 6))
    stats = kmd.stats()["shave"]
    assert stats["jobs"] == 2 and stats["tile_starts"] == 1 and stats["tile_reuses"] == 1
    assert kmd.tasks.hits == 1  # validated once: the descriptors did not change


def test_two_tiles_run_one_list_in_parallel(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    lb = ListBuilder(kmd, ctx)
    xs = [np.arange(300, dtype=F16) - 150, np.arange(300, dtype=F16) * F16(0.1)]
    outs = []
    for t, x in enumerate(xs):
        src, out = lb.put(x), lb.alloc(x.nbytes)
        lb.dma(src, tile=t, cmx_offset=0, size=x.nbytes, to_cmx=True, update=[2 * t])
        lb.act(t, "clamp", clamp_args(0, 0x800, x.shape, F16, -7, 7), wait=[2 * t], update=[2 * t + 1])
        lb.dma(out, tile=t, cmx_offset=0x800, size=x.nbytes, to_cmx=False, wait=[2 * t + 1], update=[4])
        outs.append(out)
    kmd.submit(ctx, lb.addresses(notify=[4]), timeout_ms=5000).wait(5000)
    for x, out in zip(xs, outs, strict=True):
        assert same_bits(lb.read(out, F16, x.shape), clip16(x, -7, 7))
    assert kmd.stats()["shave"]["tile_starts"] == 2


def test_a_prepared_shave_job_runs_again_and_again(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    x = np.linspace(-4, 9, 512).astype(F16)
    lb, out, addresses = seed_list(kmd, ctx, x, -1.0, 5.0)
    prep = kmd.prepare(ctx, addresses)
    rng = np.random.default_rng(3)
    for _ in range(5):
        y = (rng.standard_normal(512) * 6).astype(F16)
        lb.write(4, y)
        lb.array(out)[:] = 0xFF
        kmd.submit_prepared(ctx, prep, timeout_ms=5000).wait(5000)
        assert same_bits(lb.read(out, F16, x.shape), clip16(y, -1, 5))
    assert kmd.stats()["shave"]["tile_starts"] == 1


def test_a_dla_job_waits_on_a_shave_jobs_fence_and_reads_its_result(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd(mode="threaded")
    ctx = kmd.open_context()
    tb = TaskBuilder("fp16")
    tb.sdp(tb.cube("x", (1, 16, 32)), tb.cube("y", (1, 16, 32)), act="relu")
    dla = tb.build().load(kmd, ctx)
    x = (np.random.default_rng(5).standard_normal((16, 32)) * 9).astype(F16)
    lb = ListBuilder(kmd, ctx)
    src, into = lb.put(x), lb.existing(dla.handles["x"])
    lb.dma(src, tile=1, cmx_offset=0, size=x.nbytes, to_cmx=True, update=[0])
    lb.act(1, "clamp", clamp_args(0, 0x2000, x.shape, F16, -3, 4), wait=[0], update=[1])
    lb.dma(into, tile=1, cmx_offset=0x2000, size=x.nbytes, to_cmx=False, wait=[1], update=[2])
    shave_done, gate = TimelineSemaphore(), TimelineSemaphore()
    shave = kmd.submit(ctx, lb.addresses(notify=[2]), pre_fences=[(gate, 1)],
                       post_fences=[(shave_done, 1)], timeout_ms=5000)
    relu = kmd.submit(ctx, dla.addresses, pre_fences=[(shave_done, 1)], timeout_ms=5000)
    # Another context's DLA job waits on the same fence, and a SHAVE job there on the DLA job's.
    other = kmd.open_context()
    dla2 = tb.build().load(kmd, other)
    relu_done = TimelineSemaphore()
    relu2 = kmd.submit(other, dla2.addresses, pre_fences=[(shave_done, 1)], post_fences=[(relu_done, 3)],
                       timeout_ms=5000)
    z = np.linspace(-8, 8, 100).astype(F16)
    lb2, out2, addresses = seed_list(kmd, other, z, -1, 1)
    shave2 = kmd.submit(other, addresses, pre_fences=[(relu_done, 3)], timeout_ms=5000)
    with pytest.raises(DlaError) as e:
        relu.wait(30)
    assert e.value.code == NvError.Timeout and not shave.done and not relu2.done and not shave2.done
    gate.signal(1)
    for j in (relu, relu2, shave2):
        j.wait(5000)
    assert shave.state == COMPLETED and shave.finished_at <= min(relu.started_at, relu2.started_at)
    assert relu2.finished_at <= shave2.started_at
    y = kmd.bo_array(ctx, dla.handles["y"])[:x.nbytes].view(F16).reshape(x.shape)
    assert same_bits(y, np.maximum(clip16(x, -3, 4), F16(0)))
    assert same_bits(lb2.read(out2, F16, z.shape), clip16(z, -1, 1))


def test_a_shave_job_waits_for_the_dla_tasks_in_flight_and_runs_alone(make_kmd: MakeKmd) -> None:
    """Step mode: DLA jobs of one context (the engine takes two at once, CHAIN depth 2) and a SHAVE job
    of another: the SHAVE job starts once the DLA job in flight ended, and no DLA job runs beside it."""
    dev, kmd = make_kmd(mode="step")
    ctx_a, ctx_b = kmd.open_context(), kmd.open_context()
    tb = TaskBuilder()
    tb.sdp(tb.cube("x", (2, 8, 8)), tb.cube("y", (2, 8, 8)), act="relu")
    built = tb.build()
    tasks = [built.load(kmd, ctx_a) for _ in range(3)]
    x = np.linspace(-2, 2, 300).astype(F16)
    lb, out, addresses = seed_list(kmd, ctx_b, x, 0, 1)
    first = [kmd.submit(ctx_a, t.addresses, timeout_ms=5000) for t in tasks[:2]]
    shave = kmd.submit(ctx_b, addresses, timeout_ms=5000)
    last = kmd.submit(ctx_a, tasks[2].addresses, timeout_ms=5000)
    kmd.poll()
    # The first DLA job runs; the SHAVE job has its turn next (round-robin across contexts): it is
    # held, and nothing starts before it.
    assert first[0].state == RUNNING and not shave.done and kmd.stats()["queued"] == 3
    drive(kmd, dev, [*first, shave, last])
    assert all(j.state == COMPLETED for j in [*first, shave, last])
    assert first[0].finished_at <= shave.started_at
    assert shave.finished_at <= min(first[1].started_at, last.started_at)
    assert same_bits(lb.read(out, F16, x.shape), clip16(x, 0, 1))


def test_closing_a_context_aborts_its_running_shave_job(make_kmd: MakeKmd) -> None:
    from tests.kmd.test_shave_faults import hanging_runtime

    dev, kmd = make_kmd()
    ctx, other = kmd.open_context(), kmd.open_context()
    x = np.arange(64, dtype=F16)
    lb = ListBuilder(kmd, ctx)
    src, out = lb.put(x), lb.alloc(x.nbytes)
    lb.dma(src, tile=0, cmx_offset=0, size=x.nbytes, to_cmx=True, update=[0])
    lb.act(0, "clamp", clamp_args(0, 0x400, x.shape, F16, 0, 9), wait=[0], update=[1])
    lb.dma(out, tile=0, cmx_offset=0x400, size=x.nbytes, to_cmx=False, wait=[1], update=[2])
    job = kmd.submit(ctx, lb.addresses(notify=[2], runtime=hanging_runtime()), timeout_ms=60_000)
    kmd.poll()
    assert not job.done and dev.reg_read(T0_STATE) == State.WAIT_BARRIER
    queued = kmd.submit(ctx, lb.addresses(notify=[2]), timeout_ms=60_000)
    kmd.close_context(ctx)
    assert job.state == FAILED and queued.state == FAILED
    with pytest.raises(DlaError, match=r"context .* was closed") as e:
        job.wait(0)
    assert e.value.code == NvError.InvalidState
    assert dev.reg_read(T0_STATE) == State.IDLE  # SHAVE_RESET
    # Another context's list runs at once.
    y = np.linspace(-5, 5, 128).astype(F16)
    lb2, out2, addresses = seed_list(kmd, other, y, -1, 1)
    kmd.submit(other, addresses, timeout_ms=5000).wait(5000)
    assert same_bits(lb2.read(out2, F16, y.shape), clip16(y, -1, 1))


def test_threaded_device_runs_many_shave_and_dla_jobs(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd(mode="threaded")
    ctx_a, ctx_b = kmd.open_context(), kmd.open_context()
    tb = TaskBuilder()
    tb.sdp(tb.cube("x", (1, 4, 8)), tb.cube("y", (1, 4, 8)), act="relu")
    dla = tb.build().load(kmd, ctx_a)
    x = np.linspace(-9, 9, 1000).astype(F16)
    lb, out, addresses = seed_list(kmd, ctx_b, x, -2, 2)
    jobs = []
    for _ in range(10):
        jobs.append(kmd.submit(ctx_a, dla.addresses, timeout_ms=5000))
        jobs.append(kmd.submit(ctx_b, addresses, timeout_ms=5000))
    for j in jobs:
        j.wait(10_000)
    assert same_bits(lb.read(out, F16, x.shape), clip16(x, -2, 2))


def test_a_list_from_the_loadable_sides_encoder_runs(make_kmd: MakeKmd) -> None:
    """pydla.loadable.shave_task.ShaveTaskBuilder's lists (the compiler's) pass the KMD's checks and run."""
    from pydla.kernels.build import kernel_elf
    from pydla.loadable.shave_task import ShaveTaskBuilder
    from tests.hw.shave.host import entry_offset

    _, kmd = make_kmd()
    ctx = kmd.open_context()
    x = np.linspace(-5, 5, 300).astype(F16)
    rt, clamp = kernel_elf("runtime"), kernel_elf("clamp")
    sb = ShaveTaskBuilder(tiles=2, cmx_bytes=2 << 20)
    sb.runtime(sb.ref("rt", len(rt)))
    b0, b1 = sb.barrier(), sb.barrier()
    sb.dma(sb.ref("x", x.nbytes), tile=1, cmx_offset=0, to_cmx=True, line_size=x.nbytes, update=[b0])
    args = clamp_args(0, 0x1000, x.shape, F16, -1, 2)
    sb.invoke(sb.ref("clamp", len(clamp)), entry_offset=entry_offset(clamp), args=bytes(args),
              data=bytes(args.data), tile=1, kernel_id=3, wait=[b0], update=[b1])
    sb.dma(sb.ref("y", x.nbytes), tile=1, cmx_offset=0x1000, to_cmx=False, line_size=x.nbytes, wait=[b1])
    loaded = sb.build().load(kmd, ctx)
    for name, data in (("rt", rt), ("clamp", clamp), ("x", x.tobytes())):
        kmd.bo_array(ctx, loaded.handles[name])[:len(data)] = np.frombuffer(data, np.uint8)
    kmd.submit(ctx, loaded.addresses, timeout_ms=5000).wait(5000)
    y = kmd.bo_array(ctx, loaded.handles["y"])[:x.nbytes].view(F16)
    assert same_bits(y, clip16(x, -1, 2))
