"""The KMD schedules compute units by XRT's execution models: the sequences of XRT's documentation
read back from the device's control event trace, interrupts and the polling fallback, arguments,
fences, refusals, a driver developer's own model, and recovery of a unit that never finishes."""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.kmd.cu import CuBuffer
from pydla.kmd.sync import TimelineSemaphore
from pydla.target.config import DeviceConfig, parse_config
from tests.hw.cu_driver import GIE, sequence
from tests.hw.regs import raw_config
from tests.kmd.support import MakeKmd, conv_sdp_pdp

HS_SEQUENCE = "START1=>DONE1=>START2=>DONE2=>START3=>DONE3"
CHAIN_SEQUENCE = "START1=>START2=>START3=>DONE1=>START4=>DONE2=>START5=>DONE3=>DONE4=>DONE5"
MODEL = "python:tests.hw.cu_user_models:"


def cu_config(int_enable: int = 1, latency: int = 3000, **extra: Any) -> DeviceConfig:
    common = {"m_type": "IP_KERNEL", "m_int_enable": int_enable, "window": 0x10000, "latency_cycles": latency}
    return parse_config(raw_config(ip_layout=[
        {**common, "m_name": "noop:noop_hs", "m_interrupt_id": 0, "m_ip_control": "AP_CTRL_HS",
         "m_base_address": 0x10000, "model": "noop"},
        {**common, "m_name": "noop:noop_chain", "m_interrupt_id": 1, "m_ip_control": "AP_CTRL_CHAIN",
         "m_base_address": 0x20000, "model": "noop", "pipeline_depth": 3},
        {**common, "m_name": "saxpy:saxpy_hs", "m_interrupt_id": 2, "m_ip_control": "AP_CTRL_HS",
         "m_base_address": 0x30000, "model": MODEL + "Saxpy", "max_n": 4096},
        {**common, "m_name": "saxpy:saxpy_chain", "m_interrupt_id": 3, "m_ip_control": "AP_CTRL_CHAIN",
         "m_base_address": 0x40000, "model": MODEL + "Saxpy", "pipeline_depth": 3},
        {**common, "m_name": "xor:xor", "m_interrupt_id": 4, "m_ip_control": "AP_CTRL_NONE",
         "m_base_address": 0x50000, "m_int_enable": 0, "model": MODEL + "XorStream", "fifo_bytes": 256,
         "chunk_bytes": 64},
        {**common, "m_name": "slow:slow", "m_interrupt_id": 5, "m_ip_control": "AP_CTRL_HS",
         "m_base_address": 0x60000, "model": "noop", "latency_cycles": 1 << 40},
    ], **extra))


def test_hs_three_requests_run_one_at_a_time(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    executions = [kmd.cu_submit(ctx, "noop_hs", []) for _ in range(3)]
    for ex in executions:
        ex.wait(5000)
    assert sequence(dev, "noop_hs") == HS_SEQUENCE
    assert [ex.state for ex in executions] == ["completed"] * 3


def test_chain_depth_three_five_requests_overlap_and_finish_in_order(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    executions = [kmd.cu_submit(ctx, "noop:noop_chain", []) for _ in range(5)]
    executions[-1].wait(5000)
    assert all(ex.done and ex.error is None for ex in executions)
    assert sequence(dev, "noop_chain") == CHAIN_SEQUENCE
    assert [str(e) for e in dev.cu_events("noop_chain") if e.kind == "CONTINUE"] == \
        [f"CONTINUE{i}" for i in range(1, 6)]
    assert [ex.finished_at for ex in executions] == sorted(ex.finished_at for ex in executions)


@pytest.mark.parametrize("int_enable", [1, 0], ids=["interrupts", "polling"])
def test_threaded_device_keeps_the_models(make_kmd: MakeKmd, int_enable: int) -> None:
    # The six CHAIN executions are all queued before the first may start (a pre-fence the test
    # reaches afterwards): submitting them while the unit already ran raced its 2 ms executions, and
    # on a loaded machine the pipeline then reached depth 2 only (1 run in 8 at a load of 7 on 2 cores).
    dev, kmd = make_kmd(cu_config(int_enable, latency=2_000_000), mode="threaded")
    ctx = kmd.open_context()
    hs = [kmd.cu_submit(ctx, "noop_hs", []) for _ in range(3)]
    gate = TimelineSemaphore()
    chain = [kmd.cu_submit(ctx, "noop_chain", [], pre_fences=[(gate, 1)] if i == 0 else None)
             for i in range(6)]
    gate.signal(1)
    for ex in hs + chain:
        ex.wait(5000)
    assert sequence(dev, "noop_hs") == HS_SEQUENCE
    events = [e for e in dev.cu_events("noop_chain") if e.kind in ("START", "DONE")]
    assert [e.n for e in events if e.kind == "DONE"] == [1, 2, 3, 4, 5, 6]
    in_flight = peak = 0
    for e in events:
        in_flight += 1 if e.kind == "START" else -1
        peak = max(peak, in_flight)
    assert peak == 3  # pipelined, never deeper than the unit
    assert dev.reg_read(kmd.cus.unit("noop_hs").desc.base + GIE) == int_enable  # polled units: no GIE


def test_vadd_arguments_are_device_addresses_of_the_context(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    n = 100
    a, b, out = (kmd.bo_create(ctx, 4 * n) for _ in range(3))
    kmd.bo_array(ctx, a).view(np.float32)[:] = np.arange(n)
    kmd.bo_array(ctx, b).view(np.float32)[:] = 10
    kmd.cu_submit(ctx, "vadd", [CuBuffer(a), CuBuffer(b), CuBuffer(out, size=4 * n), n]).wait(5000)
    np.testing.assert_array_equal(kmd.bo_array(ctx, out).view(np.float32), np.arange(n) + 10)
    # The unit's own accesses are checked by the IOMMU: beyond the buffer is the execution's error.
    ex = kmd.cu_submit(ctx, "vadd", [CuBuffer(a), CuBuffer(b), CuBuffer(out), 1 << 20])
    with pytest.raises(DlaError) as err:
        ex.wait(5000)
    assert err.value.code == NvError.InvalidAddress and "'vadd:vadd'" in err.value.message
    kmd.cu_submit(ctx, "vadd", [CuBuffer(a), CuBuffer(b), CuBuffer(out), n]).wait(5000)  # the unit goes on


def test_bad_arguments_and_units_are_refused(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx, other = kmd.open_context(), kmd.open_context()
    h = kmd.bo_create(ctx, 64)
    kmd.bo_create(other, 64)
    theirs = kmd.bo_create(other, 64)  # handle 2: ctx has no buffer 2 (handles are per context)
    cases: list[tuple[str, list[Any], NvError, str]] = [
        ("scale", [], NvError.NotSupported, "AP_CTRL_NONE"),
        ("dla", [], NvError.NotSupported, "DLA engine"),
        ("nope", [], NvError.BadParameter, "noop:noop_hs"),
        ("vadd", [CuBuffer(theirs)], NvError.BadParameter,
         f"handle {theirs} is not a buffer of context {ctx}"),
        ("vadd", [CuBuffer(h, 64)], NvError.BadParameter, "offset 64"),
        ("vadd", [CuBuffer(h, 8, 57)], NvError.InvalidSize, "size 57 at offset 8"),
        ("vadd", [1 << 32], NvError.BadParameter, "argument 0: 4294967296"),
        ("vadd", [1.5], NvError.BadParameter, "1.5"),
        ("vadd", [0] * 957, NvError.BadParameter, "957 argument words"),
    ]
    for cu, args, code, text in cases:
        with pytest.raises(DlaError) as err:
            kmd.cu_submit(ctx, cu, args)
        assert err.value.code == code and text in err.value.message, (cu, err.value.message)
    with pytest.raises(DlaError) as err:
        kmd.cu_submit(ctx, "noop_hs", [], timeout_ms=0)
    assert err.value.code == NvError.BadParameter


def test_fences_order_executions(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    pre, post, bad = TimelineSemaphore(), TimelineSemaphore(), TimelineSemaphore()
    ex = kmd.cu_submit(ctx, "noop_hs", [], pre_fences=[(pre, 1)], post_fences=[(post, 7)])
    with pytest.raises(DlaError) as err:
        ex.wait(20)
    assert err.value.code == NvError.Timeout and ex.state == "queued" and dev.cu_events("noop_hs") == []
    pre.signal(1)
    ex.wait(5000)
    assert post.value == 7
    bad.fail(DlaError(NvError.BadValue, "upstream broke"))
    failed = kmd.cu_submit(ctx, "noop_hs", [], pre_fences=[(bad, 1)])
    with pytest.raises(DlaError, match="pre-fence failed: upstream broke"):
        failed.wait(5000)


def test_closing_the_context_fails_its_executions_and_buffers_in_use_stay(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    h = kmd.bo_create(ctx, 64)
    pre = TimelineSemaphore()
    ex = kmd.cu_submit(ctx, "vadd", [CuBuffer(h)], pre_fences=[(pre, 1)])
    with pytest.raises(DlaError) as err:
        kmd.bo_destroy(ctx, h)
    assert err.value.code == NvError.Busy
    kmd.close_context(ctx)
    with pytest.raises(DlaError, match=f"context {ctx} was closed"):
        ex.wait(100)


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_user_model_driven_by_the_kmd_in_all_three_execution_models(make_kmd: MakeKmd, mode: str) -> None:
    dev, kmd = make_kmd(cu_config(), mode=mode)
    ctx = kmd.open_context()
    n = 256
    x, y = kmd.bo_create(ctx, 4 * n), kmd.bo_create(ctx, 4 * n)
    kmd.bo_array(ctx, x).view(np.float32)[:] = np.arange(n)
    for name, count in (("saxpy_hs", 3), ("saxpy_chain", 5)):
        kmd.bo_array(ctx, y)[:] = 0
        runs = [kmd.cu_submit(ctx, name, [CuBuffer(x), CuBuffer(y), n, f32(i + 1)]) for i in range(count)]
        for ex in runs:
            ex.wait(5000)
        np.testing.assert_array_equal(kmd.bo_array(ctx, y).view(np.float32),
                                      np.arange(n, dtype=np.float32) * sum(range(1, count + 1)))
    if mode == "deterministic":
        assert sequence(dev, "saxpy_hs") == HS_SEQUENCE
        assert sequence(dev, "saxpy_chain") == CHAIN_SEQUENCE
    # The NONE unit is never started: the host talks to it through its streams.
    with pytest.raises(DlaError, match="AP_CTRL_NONE"):
        kmd.cu_submit(ctx, "xor", [])
    data = bytes(range(200))
    kmd.cu_stream_write(ctx, "xor", data, timeout_ms=5000)
    assert kmd.cu_stream_read(ctx, "xor", len(data), timeout_ms=5000) == data  # key 0 after reset


def test_streams_refuse_and_time_out(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd(cu_config())
    ctx = kmd.open_context()
    with pytest.raises(DlaError, match="only AP_CTRL_NONE"):
        kmd.cu_stream_write(ctx, "noop_hs", b"ab", timeout_ms=10)
    with pytest.raises(DlaError) as err:
        kmd.cu_stream_read(ctx, "xor", 4, timeout_ms=10)
    assert err.value.code == NvError.Timeout
    with pytest.raises(DlaError, match="timeout_ms 0"):
        kmd.cu_stream_read(ctx, "xor", 4, timeout_ms=0)


def test_a_unit_that_never_finishes_is_recovered(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd(cu_config(), mode="threaded", tdr_ms=100, ban_after=2)
    ctx, innocent = kmd.open_context(), kmd.open_context()
    hung = kmd.cu_submit(ctx, "slow", [])
    behind = kmd.cu_submit(ctx, "slow", [])
    with pytest.raises(DlaError) as err:
        hung.wait(5000)
    assert err.value.code == NvError.Timeout
    assert "compute unit 'slow:slow'" in err.value.message and "hung" in err.value.message
    with pytest.raises(DlaError, match="aborted"):
        behind.wait(5000)
    kmd.cu_submit(innocent, "noop_chain", []).wait(5000)  # after the device reset, others run
    assert kmd.stats()["compute_units"]["device_resets"] == 1
    with pytest.raises(DlaError, match="now banned after 2 hangs"):
        kmd.cu_submit(ctx, "slow", []).wait(5000)
    with pytest.raises(DlaError, match="banned"):
        kmd.cu_submit(ctx, "noop_hs", [])
    assert isinstance(dev, VirtualDevice)


def f32(v: float) -> int:
    word: int = struct.unpack("<I", struct.pack("<f", v))[0]
    return word


def test_an_exclusive_cu_context_owns_the_unit(make_kmd: MakeKmd) -> None:
    dev, kmd = make_kmd()
    ctx, other = kmd.open_context(), kmd.open_context()
    kmd.cu_open_context(ctx, "noop_hs", exclusive=True)
    with pytest.raises(DlaError) as err:
        kmd.cu_submit(other, "noop_hs", [])
    assert err.value.code == NvError.Busy and f"held exclusively by context {ctx}" in err.value.message
    kmd.cu_submit(ctx, "noop_hs", []).wait(5000)  # the holder still runs it through the driver
    base = kmd.cus.unit("noop_hs").desc.base
    kmd.cu_reg_write(ctx, "noop_hs", 0x10, 0x1234)
    assert dev.reg_read(base + 0x10) == 0x1234 == kmd.cu_reg_read(ctx, "noop_hs", 0x10)
    kmd.cu_open_context(ctx, "dla", exclusive=True)  # the engine's unit: its control block reads
    with pytest.raises(DlaError, match="it is the DLA engine"):
        kmd.cu_reg_write(ctx, "dla", 0x10, 1)  # ... and the driver's scheduler alone drives it
    kmd.close_context(ctx)  # its CU contexts go with it
    kmd.cu_open_context(other, "noop_hs", exclusive=True)


def test_the_drivers_poll_drives_compute_units_on_a_deterministic_device(make_kmd: MakeKmd) -> None:
    """Nobody waits on the executions: polling the driver (what a port's wait loop or the daemon's
    WAIT does on a device that is not threaded) is enough to run them to the end."""
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    executions = [kmd.cu_submit(ctx, "noop_chain", []) for _ in range(5)]
    for _ in range(10_000):
        if all(ex.done for ex in executions):
            break
        kmd.poll()
    assert all(ex.done and ex.error is None for ex in executions)
    assert sequence(dev, "noop_chain") == CHAIN_SEQUENCE


def test_a_device_reset_of_the_dla_ladder_fails_the_units_executions_at_once(make_kmd: MakeKmd) -> None:
    """A DLA job hangs in a wedged block: the driver's ladder resets the whole device, which clears the
    compute units' pipelines too. An execution in flight then fails at once, naming the reset, instead
    of waiting out its own hang timeout; the units work again afterwards."""
    # The job's own timeout shortens its hang window to 200 ms; the unit's stays the driver's 3 s. (A
    # sleep between the two submits used to give the unit's window a 100 ms lead: a service thread
    # that late under load let the unit time out on its own first.)
    dev, kmd = make_kmd(cu_config(), mode="threaded", tdr_ms=3000)
    ctx, other = kmd.open_context(), kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    case.feed(kmd, ctx, loaded, seed=0)
    dev.inject_wedge("CONV")
    dev.inject_hang("CONV")
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=200)
    slow = kmd.cu_submit(other, "slow", [], timeout_ms=60_000)
    with pytest.raises(DlaError) as lost:
        slow.wait(5000)
    assert lost.value.code == NvError.ResourceError
    assert f"execution {slow.exec_id} of compute unit 'slow:slow' was lost: the device was reset (task " \
           f"{job.job_id} hung and CONV stayed busy)" == lost.value.message
    with pytest.raises(DlaError, match="the device was reset"):
        job.wait(5000)
    # Lost in the ladder's device reset, before the job's abort, never at the unit's own deadline.
    assert job.deadline <= slow.finished_at <= job.finished_at and slow.finished_at < slow.deadline
    kmd.cu_submit(other, "noop_hs", []).wait(5000)
    assert kmd.stats()["recovery"]["device_resets"] == 1
    assert kmd.stats()["compute_units"]["device_resets"] == 0  # the units' own recovery never ran


def test_a_unit_hang_is_declared_for_whoever_frees_its_buffer_after_a_wait_gave_up(make_kmd: MakeKmd) -> None:
    """As for DLA jobs (tests/kmd/test_recovery.py): the execution's waiter gives up before the TDR
    and nothing waits any more; the first free of its buffer once the TDR has passed declares the
    hang, instead of Busy for good. Step mode: the unit never finishes unless its owner steps the
    device (a deterministic device's clock jumps to the unit's end when the waiter polls)."""
    dev, kmd = make_kmd(cu_config(), mode="step", tdr_ms=400)  # far past the wait below
    ctx = kmd.open_context()
    buf = kmd.bo_create(ctx, 64)
    hung = kmd.cu_submit(ctx, "slow", [CuBuffer(buf)])
    with pytest.raises(DlaError) as gave_up:
        hung.wait(50)
    assert "did not finish within 50 ms" in gave_up.value.message
    with pytest.raises(DlaError) as busy:
        kmd.bo_destroy(ctx, buf)
    assert busy.value.code == NvError.Busy
    time.sleep(max(0.0, hung.deadline - time.monotonic()) + 0.01)  # nobody calls in meanwhile
    assert not hung.done
    kmd.bo_destroy(ctx, buf)  # the first call after the TDR: not Busy
    assert hung.done
    with pytest.raises(DlaError) as why:
        hung.wait(0)
    assert why.value.code == NvError.Timeout and "compute unit 'slow:slow' (context" in why.value.message
    assert kmd.stats()["compute_units"]["device_resets"] == 1
    again = kmd.cu_submit(ctx, "noop_hs", [])  # the units work again
    kmd.poll()
    while dev.step():
        kmd.poll()
    again.wait(5000)
