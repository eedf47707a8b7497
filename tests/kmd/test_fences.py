"""Timeline semaphores and job fences: a job waits for its pre-fences and signals its post-fences;
an application's signal releases a waiting job; a failure reaches every waiter."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import COMPLETED, QUEUED, Kmd
from pydla.kmd.sync import TimelineSemaphore
from pydla.loadable.taskbuilder import TaskBuilder


def test_semaphore_signal_wait_timeout_and_failure() -> None:
    sem = TimelineSemaphore()
    assert sem.value == 0 and not sem.reached(1)
    sem.signal(3)
    sem.signal(2)  # never lowers
    assert sem.value == 3
    sem.wait(3, timeout_ms=1)
    with pytest.raises(DlaError, match="did not reach 4") as e:
        sem.wait(4, timeout_ms=5)
    assert e.value.code == NvError.Timeout
    threading.Timer(0.02, sem.signal, args=(4,)).start()
    sem.wait(4, timeout_ms=2000)
    sem.fail(DlaError(NvError.BadValue, "the producer failed"))
    with pytest.raises(DlaError, match="the producer failed"):
        sem.wait(5, timeout_ms=2000)
    with pytest.raises(DlaError, match=r"0\.\.2\^64-1"):
        sem.signal(-1)


def _relu_task(src: str, dst: str):
    tb = TaskBuilder()
    tb.sdp(tb.cube(src, (1, 2, 4)), tb.cube(dst, (1, 2, 4)), act="relu")
    return tb.build()


@pytest.fixture(params=["deterministic", "threaded"])
def kmd(request):
    dev = VirtualDevice("full", mode=request.param)
    k = Kmd(VirtualDevicePort(dev))
    yield k
    k.close()
    dev.close()


def test_a_job_waits_for_another_jobs_post_fence(kmd) -> None:
    ctx_a, ctx_b = kmd.open_context(), kmd.open_context()
    a = _relu_task("x", "y").load(kmd, ctx_a)
    b = _relu_task("x", "y").load(kmd, ctx_b)
    x = np.linspace(-1, 1, 8).astype(np.float32)
    kmd.bo_array(ctx_a, a.handles["x"])[:] = x.view(np.uint8)
    kmd.bo_array(ctx_b, b.handles["x"])[:] = (-x).view(np.uint8)
    done_a = TimelineSemaphore()
    gate = TimelineSemaphore()
    job_a = kmd.submit(ctx_a, a.addresses, pre_fences=[(gate, 1)], post_fences=[(done_a, 7)])
    job_b = kmd.submit(ctx_b, b.addresses, pre_fences=[(done_a, 7)])
    with pytest.raises(DlaError) as e:
        job_b.wait(30)
    assert e.value.code == NvError.Timeout and job_a.state == QUEUED and job_b.state == QUEUED
    gate.signal(1)  # the application releases A; A's completion releases B
    job_b.wait(5000)
    assert job_a.state == COMPLETED and done_a.value == 7
    assert job_a.finished_at <= job_b.started_at
    np.testing.assert_array_equal(kmd.bo_array(ctx_b, b.handles["y"]).view(np.float32), np.maximum(-x, 0))


def test_a_failed_job_fails_its_fences_and_their_waiters(kmd) -> None:
    ctx = kmd.open_context()
    a = _relu_task("x", "y").load(kmd, ctx)
    b = _relu_task("y", "z").load(kmd, ctx)
    done = TimelineSemaphore()
    kmd.port.device.inject_error("SDP")
    job_a = kmd.submit(ctx, a.addresses, post_fences=[(done, 1)])
    job_b = kmd.submit(ctx, b.addresses, pre_fences=[(done, 1)])
    with pytest.raises(DlaError, match="failed on the device"):
        job_a.wait(5000)
    with pytest.raises(DlaError, match="a pre-fence failed") as e:
        job_b.wait(5000)
    assert e.value.code == NvError.BadValue
    with pytest.raises(DlaError, match="failed on the device"):
        done.wait(1, timeout_ms=100)


def test_the_kmd_stops_listening_to_a_pre_fence_once_the_job_leaves_the_queue(kmd) -> None:
    """One long-lived semaphore gating many jobs: its listeners do not pile up (started, failed or
    aborted, a job leaves no listener behind)."""
    ctx = kmd.open_context()
    task = _relu_task("x", "y").load(kmd, ctx)
    gate = TimelineSemaphore()
    gate.signal(1)
    for _ in range(50):
        kmd.submit(ctx, task.addresses, pre_fences=[(gate, 1)]).wait(5000)
    assert gate.listeners == 0
    closed = TimelineSemaphore()
    queued = [kmd.submit(ctx, task.addresses, pre_fences=[(closed, 1)]) for _ in range(3)]
    assert closed.listeners == 3
    closed.fail(DlaError(NvError.BadValue, "the producer failed"))
    for job in queued:
        with pytest.raises(DlaError, match="a pre-fence failed"):
            job.wait(5000)
    assert closed.listeners == 0
    never = TimelineSemaphore()
    kmd.submit(ctx, task.addresses, pre_fences=[(never, 1)])
    kmd.close_context(ctx)  # aborts the queued job
    assert never.listeners == 0
