"""pydla.ComputeUnit on the in-process port: XRT's xrt::kernel / xrt::run (start, wait, call),
registers under an exclusive context, streams of the AP_CTRL_NONE unit, and every refusal."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.portability.interface import NvDlaFence
from pydla.umd.runtime import IRuntime

N = 1024


@pytest.fixture
def rt() -> Iterator[IRuntime]:
    with pydla.createRuntime() as runtime:
        yield runtime


def _vectors(rt: IRuntime, seed: int = 0) -> tuple[object, object, object, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    a, b, out = (rt.allocateSystemMemory(4 * N) for _ in range(3))
    a.array(np.float32)[:] = x
    b.array(np.float32)[:] = y
    return a, b, out, x, y


def test_vadd_call_and_start_against_numpy(rt: IRuntime) -> None:
    vadd = pydla.ComputeUnit(rt, "vadd")
    a, b, out, x, y = _vectors(rt)
    vadd(a, b, out, N)
    np.testing.assert_array_equal(out.array(np.float32), x + y)
    out.array(np.float32)[:] = 0
    sync = vadd.start(a, b, out, np.int32(N))
    assert isinstance(sync, pydla.ISync)
    sync.wait(5000)
    np.testing.assert_array_equal(out.array(np.float32), x + y)


def test_vadd_sub_buffers(rt: IRuntime) -> None:
    """(mem, offset) and (mem, offset, size) arguments: the second half of each buffer."""
    vadd = pydla.ComputeUnit(rt, "vadd:vadd")
    a, b, out, x, y = _vectors(rt, 1)
    half = N // 2
    vadd((a, 4 * half), (b, 4 * half, 4 * half), (out, 4 * half), half)
    got = out.array(np.float32)
    np.testing.assert_array_equal(got[half:], x[half:] + y[half:])
    assert not got[:half].any()


@pytest.mark.parametrize("unit", ["noop_hs", "noop_chain"])
def test_several_starts_in_flight_then_all_waited(rt: IRuntime, unit: str) -> None:
    cu = pydla.ComputeUnit(rt, unit)
    syncs = [cu.start(i) for i in range(12)]
    for s in syncs:
        s.wait(5000)
    assert all(s.getValue() >= 1 for s in syncs)


def test_start_waits_for_an_isync(rt: IRuntime) -> None:
    """wait_for: the execution starts once the application's sync is signaled."""
    gate = rt.createSync()
    cu = pydla.ComputeUnit(rt, "noop_hs")
    sync = cu.start(wait_for=[gate])
    with pytest.raises(DlaError) as err:
        sync.wait(20)
    assert err.value.code == NvError.Timeout
    gate.signal()
    sync.wait(5000)


def test_unknown_unit_lists_the_units(rt: IRuntime) -> None:
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "vmul")
    assert err.value.code == NvError.NotSupported
    assert "'vmul'" in err.value.message and "vadd:vadd" in err.value.message
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "")
    assert err.value.code == NvError.BadParameter


@pytest.mark.parametrize("unit", ["scale", "dla"])
def test_none_unit_and_the_engine_are_never_started(rt: IRuntime, unit: str) -> None:
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, unit).start()
    assert err.value.code == NvError.NotSupported


@pytest.mark.parametrize("arg", [1.5, "4", True, None, [1], 1 << 32, -(1 << 31) - 1, (b"x", 0)])
def test_bad_argument_types(rt: IRuntime, arg: object) -> None:
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "noop_hs").start(arg)
    assert err.value.code == NvError.BadParameter
    assert "argument 0" in err.value.message


def test_another_runtimes_memory_is_refused(rt: IRuntime) -> None:
    a, _b, out, _, _ = _vectors(rt)
    with pydla.createRuntime() as other:
        foreign = other.allocateSystemMemory(4 * N)
        with pytest.raises(DlaError) as err:
            pydla.ComputeUnit(rt, "vadd").start(a, foreign, out, N)
        assert err.value.code == NvError.BadParameter
        assert "argument 1" in err.value.message


def test_buffer_bounds_are_checked(rt: IRuntime) -> None:
    a, b, out, _, _ = _vectors(rt)
    vadd = pydla.ComputeUnit(rt, "vadd")
    for bad in ((a, 4 * N), (a, 0, 4 * N + 4), (a, -4)):
        with pytest.raises(DlaError) as err:
            vadd.start(bad, b, out, N)
        assert err.value.code in (NvError.BadParameter, NvError.InvalidSize)


def test_a_failed_execution_raises_from_wait(rt: IRuntime) -> None:
    """vadd over more elements than its buffers hold: the device's MMU faults; wait raises it."""
    a, b, out, _, _ = _vectors(rt)
    sync = pydla.ComputeUnit(rt, "vadd").start(a, b, out, 1 << 24)
    with pytest.raises(DlaError) as err:
        sync.wait(5000)
    assert err.value.code != NvError.Timeout


def test_registers_and_exclusive_hold(rt: IRuntime) -> None:
    """Register access under an exclusive context; meanwhile another runtime's starts are Busy."""
    with pydla.createRuntime(rt.port) as other:
        mine, theirs = pydla.ComputeUnit(rt, "noop_hs"), pydla.ComputeUnit(other, "noop_hs")
        with pytest.raises(DlaError) as err:
            mine.read_register(0x10)
        assert err.value.code == NvError.InvalidState
        with mine.open(exclusive=True):
            mine.write_register(0x10, 0x1234)
            assert mine.read_register(0x10) == 0x1234
            with pytest.raises(DlaError) as err:
                theirs.start()
            assert err.value.code == NvError.Busy
            mine.start(7).wait(5000)  # the holder may still start it
        theirs.start().wait(5000)


def test_streams_of_the_none_unit(rt: IRuntime) -> None:
    scale = pydla.ComputeUnit(rt, "scale")
    x = np.array([1, -2, 300, 4], dtype="<i2")
    with scale.open(exclusive=True):
        scale.write_register(0x10, struct.unpack("<I", struct.pack("<f", 2.0))[0])
    scale.write_stream(x.tobytes(), 1000)
    got = np.frombuffer(scale.read_stream(x.nbytes, 1000), "<i2")
    np.testing.assert_array_equal(got, 2 * x)
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "vadd").write_stream(b"ab", 100)
    assert err.value.code == NvError.NotSupported


def test_port_method_directly(rt: IRuntime) -> None:
    """NvDlaSubmitCu with a post-fence; the interface's default says NotSupported."""
    port, h = rt.port, rt.handle
    sem = port.NvDlaCreateSemaphore(h, 0)
    status = port.NvDlaSubmitCu(h, "noop_chain", [1, 2], [], [NvDlaFence(sem, 1)], timeout_ms=1000)
    port.NvDlaWaitFence(NvDlaFence(sem, 1), 5000)
    assert status.task_id > 0
    from pydla.portability.interface import NvDlaPort

    with pytest.raises(DlaError) as err:
        NvDlaPort.NvDlaSubmitCu(port, h, "noop_hs", [], [], [])
    assert err.value.code == NvError.NotSupported
