"""The driver: timeouts and recovery, MMU faults isolated per context, the queue policy, resubmission,
threads, closing contexts and the driver, and what submit copies."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import COMPLETED, FAILED, MAX_EXTENSIONS, Job, Kmd
from pydla.loadable.taskbuilder import LoadedTask
from tests.kmd.support import (
    ENGINE_INTERNALS,
    HOST_COPY,
    Case,
    Descriptors,
    MakeKmd,
    conv_sdp_pdp,
    copy_add_chain,
    diamond,
    drive,
    pdp_and_sdp,
    pdp_chain,
    single_pdp,
    wait_all,
)

# Short job timeouts keep a hang (a bug) from eating the time budget; waits are always bounded.
JOB_MS = 500
WAIT_MS = 5000


def submit_case(kmd: Kmd, ctx: int, case: Case, loaded: LoadedTask, seed: int, *, priority: int = 0,
                timeout_ms: int = JOB_MS) -> tuple[Job, dict[str, np.ndarray]]:
    expected = case.feed(kmd, ctx, loaded, seed)
    return kmd.submit(ctx, loaded.addresses, priority=priority, timeout_ms=timeout_ms), expected


# -- timeouts and device errors --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_hung_operation_times_out_then_the_next_job_runs(make_kmd: MakeKmd, mode: str) -> None:
    dev, kmd = make_kmd(mode=mode)
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    dev.inject_hang("PDP")
    job, _ = submit_case(kmd, ctx, case, loaded, seed=0, timeout_ms=100)
    start = time.monotonic()
    with pytest.raises(DlaError) as info:
        job.wait(WAIT_MS)
    err = info.value
    assert err.code == NvError.Timeout
    # the job's error, not the wait's
    assert "hung: no operation completed for 100 ms" in err.message, err.message
    assert "operation 2 (PDP)" in err.message and "reset" in err.message
    assert time.monotonic() - start < 3
    assert job.state == FAILED and job.error is err
    assert dev.idle(), "the hung block was not reset"
    assert kmd.stats()["running"] is None

    again, expected = submit_case(kmd, ctx, case, loaded, seed=1)
    again.wait(WAIT_MS)
    assert again.state == COMPLETED
    case.check(kmd, ctx, loaded, expected)


def test_device_error_fails_the_job_then_the_next_job_runs(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    dev.inject_error("PDP")
    job, _ = submit_case(kmd, ctx, case, loaded, seed=0)
    with pytest.raises(DlaError) as info:
        job.wait(WAIT_MS)
    assert info.value.code == NvError.BadValue
    assert "operation 2 (PDP) failed on the device: BAD_CONFIG" in info.value.message
    again, expected = submit_case(kmd, ctx, case, loaded, seed=1)
    again.wait(WAIT_MS)
    case.check(kmd, ctx, loaded, expected)


def test_wait_timeout_leaves_the_job_running(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    job, expected = submit_case(kmd, ctx, case, loaded, seed=0, timeout_ms=60_000)
    with pytest.raises(DlaError) as info:
        job.wait(20)
    assert info.value.code == NvError.Timeout
    assert f"job {job.job_id} did not finish within 20 ms" in info.value.message
    assert not job.done and job.error is None
    drive(kmd, dev, [job])
    job.wait(WAIT_MS)
    case.check(kmd, ctx, loaded, expected)


def _step_late(kmd: Kmd, dev: VirtualDevice, job: Job, pause: float) -> int:
    """Step mode: one operation per step, each after the job's deadline has passed; the steps."""
    kmd.poll()
    steps = 0
    while not job.done:
        time.sleep(pause)
        assert dev.step(), "nothing runnable"
        steps += 1
        kmd.poll()
    return steps


def test_progress_extends_the_deadline(make_kmd: MakeKmd) -> None:
    """Each operation finishes after the job's 50 ms deadline, but each brings progress: the
    deadline is extended and the job completes."""
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = pdp_chain(4)
    loaded = case.load(kmd, ctx)
    job, expected = submit_case(kmd, ctx, case, loaded, seed=0, timeout_ms=50)
    _step_late(kmd, dev, job, pause=0.06)
    job.wait(WAIT_MS)
    assert job.extensions == 3
    case.check(kmd, ctx, loaded, expected)


def test_a_progressing_job_is_stopped_at_its_time_budget(make_kmd: MakeKmd) -> None:
    """Progress extends the hang window, but a job runs at most (MAX_EXTENSIONS + 1) * timeout_ms in
    all; then it fails with Timeout (a budget, not a hang: its context is not guilty)."""
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = copy_add_chain(MAX_EXTENSIONS)  # 2 * MAX_EXTENSIONS operations, one at a time
    loaded = case.load(kmd, ctx)
    job, _ = submit_case(kmd, ctx, case, loaded, seed=0, timeout_ms=50)
    steps = _step_late(kmd, dev, job, pause=0.06)
    with pytest.raises(DlaError) as info:
        job.wait(WAIT_MS)
    assert info.value.code == NvError.Timeout
    budget = 50 * (MAX_EXTENSIONS + 1)
    assert f"ran past its time budget of {budget} ms" in info.value.message
    assert "reset" in info.value.message
    assert job.finished_at - job.started_at >= budget / 1000  # not stopped early
    # Stopped at the first look past the budget, counting the operation completed just before: as
    # many as were stepped (about 550 ms / 60 ms; fewer when the sleeps ran long on a busy machine,
    # which a fixed lower bound on the count took for a failure).
    assert job.run is not None and job.run.completed == steps < 2 * MAX_EXTENSIONS
    recovery = kmd.stats()["recovery"]
    assert recovery["budget_timeouts"] == 1 and recovery["hangs"] == 0
    assert kmd.stats()["banned_contexts"] == []


# -- MMU faults ----------------------------------------------------------------------------------------------


def test_mmu_fault_fails_its_context_only(make_kmd: MakeKmd) -> None:
    """A's first job faults (its output buffer was unmapped behind the driver's back after submit
    validated it); A's queued job is aborted; B's job, at the very same IOVAs in its own address
    space, completes with correct numbers."""
    dev, kmd = make_kmd(mode="step")
    a, b = kmd.open_context(), kmd.open_context()
    case_a1, case_a2, case_b = single_pdp(), single_pdp(), single_pdp()
    la1, la2, lb = case_a1.load(kmd, a), case_a2.load(kmd, a), case_b.load(kmd, b)
    ja1, _ = submit_case(kmd, a, case_a1, la1, seed=1)
    ja2, _ = submit_case(kmd, a, case_a2, la2, seed=2)
    jb, expected_b = submit_case(kmd, b, case_b, lb, seed=3)
    y_iova = kmd.bo_iova(a, la1.handles["y"])
    assert kmd.bo_iova(b, lb.handles["y"]) == y_iova  # separate address spaces, same layout
    dev.iommu.unmap(a, y_iova)

    drive(kmd, dev, [ja1, ja2, jb])
    with pytest.raises(DlaError) as fault:
        ja1.wait(WAIT_MS)
    assert fault.value.code == NvError.InvalidAddress
    assert "operation 0 (PDP) failed on the device: MMU_FAULT" in fault.value.message
    assert f"context {a}" in fault.value.message
    with pytest.raises(DlaError) as aborted:
        ja2.wait(WAIT_MS)
    assert aborted.value.code == NvError.InvalidState
    assert f"job {ja1.job_id} of context {a} caused an MMU fault" in aborted.value.message
    assert ja2.run is None, "the aborted job never reached the device"
    jb.wait(WAIT_MS)
    case_b.check(kmd, b, lb, expected_b)
    assert [j.job_id for j in kmd.history] == [ja1.job_id, jb.job_id]


# -- the queue -----------------------------------------------------------------------------------------------


def test_two_contexts_interleaved(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    a, b = kmd.open_context(), kmd.open_context()
    case_a, case_b = single_pdp(3, 8), conv_sdp_pdp()
    la, lb = case_a.load(kmd, a), case_b.load(kmd, b)
    for i in range(6):
        ctx, case, loaded = (a, case_a, la) if i % 2 == 0 else (b, case_b, lb)
        job, expected = submit_case(kmd, ctx, case, loaded, seed=i)
        job.wait(WAIT_MS)
        case.check(kmd, ctx, loaded, expected)
        assert job.context.ctx == ctx


def test_two_contexts_queued_together(make_kmd: MakeKmd) -> None:
    """Jobs of A and B queued before any runs, each on its own buffers: all correct."""
    dev, kmd = make_kmd(mode="step")
    a, b = kmd.open_context(), kmd.open_context()
    runs = []
    for i in range(4):
        ctx = (a, b)[i % 2]
        case = (single_pdp(), pdp_and_sdp())[i % 2]
        loaded = case.load(kmd, ctx)
        job, expected = submit_case(kmd, ctx, case, loaded, seed=10 + i)
        runs.append((job, ctx, case, loaded, expected))
    drive(kmd, dev, [r[0] for r in runs])
    for job, ctx, case, loaded, expected in runs:
        job.wait(WAIT_MS)
        case.check(kmd, ctx, loaded, expected)


def test_priority_then_round_robin_then_submission_order(make_kmd: MakeKmd) -> None:
    """A first job of A is held (step mode, not stepped) while seven more are queued from A, B and C.
    Policy: highest priority first; among equals the context after the one served last; within a
    context submission order. Priorities within each context do not increase, so the order is:
    b1 (5), c1 (5), b2 (5), c2 (1), a1 (0), b3 (0), a2 (0)."""
    dev, kmd = make_kmd(mode="step")
    a, b, c = kmd.open_context(), kmd.open_context(), kmd.open_context()
    assert a < b < c
    jobs: dict[str, Job] = {}
    checks = []

    def queue(name: str, ctx: int, priority: int) -> None:
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        job, expected = submit_case(kmd, ctx, case, loaded, seed=len(jobs), priority=priority)
        jobs[name] = job
        checks.append((ctx, case, loaded, expected))

    queue("a0", a, 0)
    kmd.poll()
    assert jobs["a0"].state == "running"
    for name, ctx, priority in (("a1", a, 0), ("b1", b, 5), ("c1", c, 5), ("a2", a, 0), ("b2", b, 5),
                                ("c2", c, 1), ("b3", b, 0)):
        queue(name, ctx, priority)
    assert kmd.stats()["queued"] == 7
    drive(kmd, dev, jobs.values())
    wait_all(jobs.values())
    names = {j.job_id: n for n, j in jobs.items()}
    order = [names[j.job_id] for j in kmd.history]
    assert order == ["a0", "b1", "c1", "b2", "c2", "a1", "b3", "a2"]
    started = sorted(jobs, key=lambda n: jobs[n].started_at)
    assert started == order
    for ctx, case, loaded, expected in checks:
        case.check(kmd, ctx, loaded, expected)


@pytest.mark.headless_only(ENGINE_INTERNALS)
def test_same_task_twenty_times(make_kmd: MakeKmd) -> None:
    """The loaded task is submitted again and again without re-uploading anything: correct numbers
    every time, the descriptors unchanged, no buffer allocated."""
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    desc = kmd.bo_array(ctx, loaded.handles["descriptors"])
    before = desc.copy()
    buffers = len(dev.memory.buffers)
    for i in range(20):
        job, expected = submit_case(kmd, ctx, case, loaded, seed=100 + i)
        try:
            job.wait(WAIT_MS)
        except DlaError as e:
            raise AssertionError(f"submit {i + 1} of the same task failed: {e}") from e
        case.check(kmd, ctx, loaded, expected)
        assert job.run is not None
        on_cp = dev.cp.runs > 0  # run by the command processor from one doorbell
        if i == 0:
            buffers += 1 if on_cp else 0  # the task's command buffer (the driver's, or headed the firmware's)
        if not on_cp:
            assert job.run.enable_order == [0, 1, 2]  # type: ignore[attr-defined]
    assert np.array_equal(desc, before)
    assert bytes(desc[:len(case.built.descriptors)]) == case.built.descriptors
    assert len(dev.memory.buffers) == buffers


def test_second_submit_of_a_one_operation_task(make_kmd: MakeKmd) -> None:
    """The smallest form of resubmission: one PDP operation, twice, on a fresh device."""
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    for i in range(2):
        job, expected = submit_case(kmd, ctx, case, loaded, seed=i, timeout_ms=200)
        try:
            job.wait(WAIT_MS)
        except DlaError as e:
            raise AssertionError(f"submit {i + 1}: {e}") from e
        case.check(kmd, ctx, loaded, expected)


def test_threaded_stress(make_kmd: MakeKmd) -> None:
    """4 threads x 25 submits of small tasks on one driver over a threaded device, each thread in its
    own context; every wait is bounded; all results correct; no thread left behind."""
    _, kmd = make_kmd(mode="threaded")
    makers = [single_pdp, conv_sdp_pdp, pdp_and_sdp, diamond]
    errors: list[str] = []
    done = [0] * len(makers)
    stop = threading.Event()  # the first failure ends the test quickly

    def worker(t: int) -> None:
        try:
            ctx = kmd.open_context()
            case = makers[t]()
            loaded = case.load(kmd, ctx)
            for i in range(25):
                if stop.is_set():
                    return
                job, expected = submit_case(kmd, ctx, case, loaded, seed=1000 * t + i)
                job.wait(WAIT_MS)
                case.check(kmd, ctx, loaded, expected)
                done[t] += 1
        except (DlaError, AssertionError) as e:
            errors.append(f"thread {t} ({makers[t].__name__}), submit {done[t] + 1}: {e}")
            stop.set()

    threads = [threading.Thread(target=worker, args=(t,), name=f"stress-{t}") for t in range(len(makers))]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 30
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    assert not [th.name for th in threads if th.is_alive()], "deadlock: threads still running"
    assert errors == []
    assert done == [25] * len(makers)
    assert kmd.stats()["queued"] == 0 and kmd.stats()["running"] is None


# -- closing ------------------------------------------------------------------------------------------------


def test_close_context_fails_its_jobs_and_spares_others(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(mode="step")
    a, b = kmd.open_context(), kmd.open_context()
    case_a, case_b = single_pdp(), single_pdp()
    la, lb = case_a.load(kmd, a), case_b.load(kmd, b)
    ja = [submit_case(kmd, a, case_a, la, seed=i)[0] for i in range(3)]
    jb, expected_b = submit_case(kmd, b, case_b, lb, seed=9)
    kmd.poll()
    assert ja[0].state == "running" and ja[1].state == ja[2].state == "queued"
    kmd.close_context(a)
    for job in ja:
        with pytest.raises(DlaError) as info:
            job.wait(WAIT_MS)
        assert info.value.code == NvError.InvalidState
        assert f"context {a} was closed" in info.value.message
    assert kmd.contexts == [b]
    with pytest.raises(DlaError) as gone:
        kmd.bo_array(a, la.handles["x"])
    assert gone.value.code == NvError.BadParameter
    drive(kmd, dev, [jb])
    jb.wait(WAIT_MS)
    case_b.check(kmd, b, lb, expected_b)


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_closing_the_driver_fails_a_running_job(make_kmd: MakeKmd, mode: str) -> None:
    dev, kmd = make_kmd(mode=mode)
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    dev.inject_hang("PDP")
    job, _ = submit_case(kmd, ctx, case, loaded, seed=0, timeout_ms=60_000)
    kmd.close()
    with pytest.raises(DlaError) as info:
        job.wait(WAIT_MS)
    assert info.value.code == NvError.InvalidState
    assert f"context {ctx} was closed" in info.value.message
    assert kmd.contexts == [] and dev.memory.buffers == []
    assert dev.idle()


def test_submit_to_a_closed_context(kmd_full: tuple[VirtualDevice, Kmd]) -> None:
    _, kmd = kmd_full
    ctx = kmd.open_context()
    loaded = single_pdp().load(kmd, ctx)
    kmd.close_context(ctx)
    with pytest.raises(DlaError) as info:
        kmd.submit(ctx, loaded.addresses, timeout_ms=JOB_MS)
    assert info.value.code == NvError.BadParameter
    assert f"context {ctx} is not open" in info.value.message


def test_submit_after_the_driver_was_closed(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    loaded = single_pdp().load(kmd, ctx)
    kmd.close()
    trace = dev.record_trace(True)
    with pytest.raises(DlaError) as info:
        kmd.submit(ctx, loaded.addresses, timeout_ms=JOB_MS)
    assert info.value.code == NvError.InvalidState
    assert "the driver was closed" in info.value.message
    with pytest.raises(DlaError) as again:
        kmd.open_context()
    assert again.value.code == NvError.InvalidState
    dev.record_trace(False)
    assert trace == []
    kmd.close()  # closing twice is harmless


# -- what submit copies and holds -----------------------------------------------------------------------


@pytest.mark.headless_only(HOST_COPY)
def test_descriptors_are_copied_at_submit(make_kmd: MakeKmd) -> None:
    """Corrupting the descriptor buffer after submit validated it changes nothing: the engine runs
    from its copy."""
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    job, expected = submit_case(kmd, ctx, case, loaded, seed=4)
    d = Descriptors.loaded(case.built, kmd, ctx, loaded)
    d.surface(2).dst.offset = 1 << 30
    d.surface(0).src.address = 77
    d.network().num_operations = 1
    drive(kmd, dev, [job])
    job.wait(WAIT_MS)
    case.check(kmd, ctx, loaded, expected)


def test_buffers_of_a_queued_job_cannot_be_destroyed(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    job, expected = submit_case(kmd, ctx, case, loaded, seed=5)
    with pytest.raises(DlaError) as info:
        kmd.bo_destroy(ctx, loaded.handles["y"])
    assert info.value.code == NvError.Busy
    assert f"buffer {loaded.handles['y']}" in info.value.message
    drive(kmd, dev, [job])
    job.wait(WAIT_MS)
    case.check(kmd, ctx, loaded, expected)
    kmd.bo_destroy(ctx, loaded.handles["y"])
