"""The portability interface as a contract: what every NvDlaPort must do, method by method, with the
NVDLA portability layer's meaning (NvDlaOpen .. NvDlaGetTimeMS) and pydla's fences. Run against
your own port with ``pytest tests/conformance --port mypackage.myport:MyPort`` (see conftest.py)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.loadable.taskbuilder import DESCRIPTORS, TaskBuilder
from pydla.portability.interface import NvDlaFence, NvDlaHeap, NvDlaMemHandle, NvDlaPort, NvDlaTask


def relu_task(port: NvDlaPort, h: Any, x: np.ndarray) -> tuple[list[Any], dict[str, Any]]:
    """y = relu(x), x and y (1, 2, 4) float32: descriptors and buffers made through the port."""
    tb = TaskBuilder()
    tb.sdp(tb.cube("x", (1, 2, 4)), tb.cube("y", (1, 2, 4)), act="relu")
    built = tb.build()
    mems = {name: port.NvDlaGetMem(h, size)[0] for name, size in built.buffers.items()}
    port.NvDlaMemWrite(mems[DESCRIPTORS], 0, built.descriptors)
    port.NvDlaMemWrite(mems["x"], 0, x)
    return [(mems[name], off) for name, off in built.addresses], mems


def run(port: NvDlaPort, h: Any, addresses: list[Any], pre: list[NvDlaFence] | None = None,
        timeout_ms: int = 10_000) -> NvDlaFence:
    done = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
    task = NvDlaTask(addresses, pre_fences=pre or [], post_fences=[done], timeout_ms=timeout_ms)
    port.NvDlaSubmit(h, [task])
    return done


def x_values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 2, 4)).astype(np.float32)


def test_devices_open_and_close(port: NvDlaPort) -> None:
    n = port.NvDlaGetMaxDevices()
    assert n >= 1
    with pytest.raises(DlaError) as e:
        port.NvDlaOpen(n)
    assert e.value.code == NvError.DeviceNotFound
    h = port.NvDlaOpen(0)
    port.NvDlaClose(h)
    with pytest.raises(DlaError):
        port.NvDlaGetMem(h, 16)  # a closed handle is refused, never crashes


def test_device_information_if_the_port_reports_it(port: NvDlaPort) -> None:
    """NvDlaGetDeviceInfo is optional (NvError NotSupported); a port that answers describes each
    instance consistently with NvDlaGetMaxDevices, and refuses instances it does not have."""
    n = port.NvDlaGetMaxDevices()
    try:
        info = port.NvDlaGetDeviceInfo(0)
    except DlaError as e:
        assert e.code == NvError.NotSupported
        return
    assert (info.instance, info.instances) == (0, n)
    assert info.has_block("SDP") and info.has_block("pdp")  # what this suite's tasks use
    assert info.precisions and info.memory_bytes > 0 and info.name
    assert [port.NvDlaGetDeviceInfo(i).instance for i in range(n)] == list(range(n))
    with pytest.raises(DlaError) as e:
        port.NvDlaGetDeviceInfo(n)
    assert e.value.code == NvError.DeviceNotFound


def test_memory(port: NvDlaPort) -> None:
    h = port.NvDlaOpen(0)
    mem, data = port.NvDlaGetMem(h, 64)
    assert port.NvDlaMemGetSize(mem) == mem.size == data.size == 64
    port.NvDlaMemWrite(mem, 8, b"\x01\x02\x03")
    assert port.NvDlaMemRead(mem, 8, 3) == b"\x01\x02\x03" and data[9] == 2  # one memory, two views
    data[20] = 7
    assert port.NvDlaMemRead(mem, 20, 1) == b"\x07"
    port.NvDlaMemWrite(mem, 12, b"abcdef", 2)  # the NVDLA runtime API's Size: the first 2 bytes
    assert port.NvDlaMemRead(mem, 12, 3) == b"ab\x00"
    port.NvDlaMemWrite(mem, 32, np.arange(4, dtype=np.float32))
    assert mem.array(np.float32, (4,), offset=32).tolist() == [0.0, 1.0, 2.0, 3.0]
    view = port.NvDlaMemMap(mem, 8, 4)
    assert bytes(view[:3]) == b"\x01\x02\x03"
    port.NvDlaMemUnmap(mem, view, 4)
    for call, code in ((lambda: port.NvDlaMemRead(mem, 60, 8), NvError.InvalidSize),
                       (lambda: port.NvDlaMemWrite(mem, -1, b"x"), NvError.InvalidSize),
                       (lambda: port.NvDlaMemWrite(mem, 65, b""), NvError.InvalidSize),
                       (lambda: port.NvDlaMemWrite(mem, 65, np.zeros(0, np.uint8)), NvError.InvalidSize),
                       (lambda: port.NvDlaMemWrite(mem, 0, object()), NvError.BadParameter),
                       (lambda: port.NvDlaMemWrite(mem, 0, b"ab", 3), NvError.BadParameter),
                       (lambda: port.NvDlaGetMem(h, 0), NvError.BadParameter),
                       (lambda: port.NvDlaGetMem(h, 16, NvDlaHeap.SRAM), NvError.NotSupported)):
        with pytest.raises(DlaError) as e:
            call()
        assert e.value.code == code
    other = port.NvDlaOpen(0)
    with pytest.raises(DlaError) as e:
        port.NvDlaFreeMem(other, mem)  # another session's memory
    assert e.value.code == NvError.BadParameter
    port.NvDlaFreeMem(h, mem)
    with pytest.raises(DlaError) as e:
        port.NvDlaMemRead(mem, 0, 1)
    assert e.value.code == NvError.InvalidState


class StrangerMem(NvDlaMemHandle):
    """A memory handle no port made: 64 bytes of a plain array."""

    def __init__(self) -> None:
        self._bytes = np.zeros(64, np.uint8)

    @property
    def size(self) -> int:
        return 64

    @property
    def device_address(self) -> int:
        return 0x1000

    def bytes_view(self) -> np.ndarray:
        return self._bytes


def test_mem_get_size_is_0_for_what_is_not_a_live_memory_handle(port: NvDlaPort) -> None:
    """NvDlaMemGetSize, the NVDLA runtime API's ``NvU64 NvDlaMemGetSize(NvDlaMemHandle hMem)``: the
    size of a live handle of this port; 0, never an error, for anything else (not a handle, freed,
    of a closed handle, another's)."""
    h = port.NvDlaOpen(0)
    mem, _ = port.NvDlaGetMem(h, 4096)
    kept, _ = port.NvDlaGetMem(h, 100)
    assert (port.NvDlaMemGetSize(mem), port.NvDlaMemGetSize(kept)) == (4096, 100)
    for junk in (None, 0, 12345, "mem", b"\0" * 8, object(), h, StrangerMem()):
        assert port.NvDlaMemGetSize(junk) == 0, junk
    port.NvDlaFreeMem(h, mem)
    assert (port.NvDlaMemGetSize(mem), port.NvDlaMemGetSize(kept)) == (0, 100)
    port.NvDlaClose(h)
    assert port.NvDlaMemGetSize(kept) == 0


def test_free_mem_takes_the_nvdla_arguments(port: NvDlaPort) -> None:
    """NvDlaFreeMem(h, mem, pData, size) as in the NVDLA portability layer: pData and size must be
    the allocation's (BadParameter otherwise, and the memory stays usable); the short form works."""
    h = port.NvDlaOpen(0)
    mem, data = port.NvDlaGetMem(h, 64)
    other, other_data = port.NvDlaGetMem(h, 64)
    port.NvDlaMemWrite(mem, 0, b"kept")
    not_this = r"NvDlaFreeMem: pData at 0x[0-9a-f]+ is not the host view NvDlaGetMem returned for this memory"
    for p_data, size, message in ((data, 32, r"NvDlaFreeMem: size 32 is not the 64 bytes allocated"),
                                  (data, 64.0, r"NvDlaFreeMem: size 64.0 is not the 64 bytes allocated"),
                                  (other_data, 64, not_this + r" \(at 0x[0-9a-f]+\)"),
                                  (data[8:], 64, not_this),
                                  (12345, None, r"NvDlaFreeMem: pData int is not the host view")):
        with pytest.raises(DlaError, match=message) as e:
            port.NvDlaFreeMem(h, mem, p_data, size)
        assert e.value.code == NvError.BadParameter
    assert port.NvDlaMemRead(mem, 0, 4) == b"kept"  # refused: nothing was freed
    view = port.NvDlaMemMap(mem, 0, 64)  # a view of the same bytes is the same pData
    port.NvDlaMemUnmap(mem, view, 64)
    port.NvDlaFreeMem(h, mem, data, 64)
    with pytest.raises(DlaError) as e:
        port.NvDlaMemRead(mem, 0, 1)
    assert e.value.code == NvError.InvalidState
    port.NvDlaFreeMem(h, other)  # the short form
    port.NvDlaClose(h)


def test_submit_runs_a_task_with_the_right_numbers(port: NvDlaPort) -> None:
    h = port.NvDlaOpen(0)
    x = x_values(0)
    addresses, mems = relu_task(port, h, x)
    for seed in range(3):
        x = x_values(seed)
        port.NvDlaMemWrite(mems["x"], 0, x)
        port.NvDlaWaitFence(run(port, h, addresses), 10_000)
        np.testing.assert_array_equal(mems["y"].array(np.float32, (1, 2, 4)), np.maximum(x, 0))


def test_sub_buffer_entries(port: NvDlaPort) -> None:
    """(mem, offset, size): the task sees only those bytes; a size beyond the buffer is refused."""
    h = port.NvDlaOpen(0)
    x = x_values(1)
    addresses, mems = relu_task(port, h, x)
    big, _ = port.NvDlaGetMem(h, 256)
    port.NvDlaMemWrite(big, 64, x)
    moved = [e if e[0] is not mems["x"] else (big, 64, 32) for e in addresses]
    port.NvDlaWaitFence(run(port, h, moved), 10_000)
    np.testing.assert_array_equal(mems["y"].array(np.float32, (1, 2, 4)), np.maximum(x, 0))
    with pytest.raises(DlaError) as e:
        run(port, h, [e if e[0] is not mems["x"] else (big, 64, 0) for e in addresses])  # explicit 0
    assert e.value.code in (NvError.InvalidSize, NvError.BadParameter)
    too_small = [e if e[0] is not mems["x"] else (big, 64, 16) for e in addresses]
    with pytest.raises(DlaError) as e:
        run(port, h, too_small)
    assert e.value.code in (NvError.InvalidSize, NvError.BadParameter)
    with pytest.raises(DlaError):
        run(port, h, [e if e[0] is not mems["x"] else (big, 250, 32) for e in addresses])


def test_destroyed_semaphore_releases_its_handle_not_the_work_using_it(port: NvDlaPort) -> None:
    """A semaphore destroyed after the tasks using it were submitted: they still run in order; any
    later use of the semaphore is BadParameter; destroying again is no error."""
    h = port.NvDlaOpen(0)
    x = x_values(5)
    addresses, mems = relu_task(port, h, x)
    gate = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
    middle = run(port, h, addresses, pre=[gate])
    done = run(port, h, addresses, pre=[middle])
    port.NvDlaDestroySemaphore(middle.semaphore)
    port.NvDlaDestroySemaphore(middle.semaphore)
    port.NvDlaSignalFence(gate)
    port.NvDlaWaitFence(done, 10_000)
    np.testing.assert_array_equal(mems["y"].array(np.float32, (1, 2, 4)), np.maximum(x, 0))
    for use in (lambda: port.NvDlaSignalFence(middle), lambda: port.NvDlaWaitFence(middle, 10),
                lambda: port.NvDlaGetSemaphoreValue(middle.semaphore),
                lambda: run(port, h, addresses, pre=[middle])):
        with pytest.raises(DlaError) as e:
            use()
        assert e.value.code == NvError.BadParameter and "destroyed" in e.value.message
    with pytest.raises(DlaError) as e:
        port.NvDlaDestroySemaphore(object())
    assert e.value.code == NvError.BadParameter
    port.NvDlaClose(h)
    port.NvDlaDestroySemaphore(gate.semaphore)  # after close: nothing left to release, no error


def test_memory_a_queued_task_uses_cannot_be_freed(port: NvDlaPort) -> None:
    """NvDlaFreeMem of a buffer a queued task uses: Busy, and the memory stays usable."""
    h = port.NvDlaOpen(0)
    x = x_values(6)
    addresses, mems = relu_task(port, h, x)
    gate = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
    done = run(port, h, addresses, pre=[gate])
    with pytest.raises(DlaError) as e:
        port.NvDlaFreeMem(h, mems["x"])
    assert e.value.code == NvError.Busy
    assert port.NvDlaMemRead(mems["x"], 0, 32) == x.tobytes()
    port.NvDlaSignalFence(gate)
    port.NvDlaWaitFence(done, 10_000)
    np.testing.assert_array_equal(mems["y"].array(np.float32, (1, 2, 4)), np.maximum(x, 0))
    port.NvDlaFreeMem(h, mems["x"])


def test_fences_order_work_and_carry_failures(port: NvDlaPort) -> None:
    h = port.NvDlaOpen(0)
    x = x_values(2)
    addresses, mems = relu_task(port, h, x)
    gate = NvDlaFence(port.NvDlaCreateSemaphore(h), 5)
    done = run(port, h, addresses, pre=[gate])
    with pytest.raises(DlaError) as e:
        port.NvDlaWaitFence(done, 200)  # the gate is closed
    assert e.value.code == NvError.Timeout
    assert port.NvDlaGetSemaphoreValue(gate.semaphore) == 0
    port.NvDlaSignalFence(gate)
    assert port.NvDlaGetSemaphoreValue(gate.semaphore) == 5
    port.NvDlaWaitFence(done, 10_000)
    np.testing.assert_array_equal(mems["y"].array(np.float32, (1, 2, 4)), np.maximum(x, 0))
    failed = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
    port.NvDlaFailFence(failed, DlaError(NvError.BadValue, "the host step failed"))
    with pytest.raises(DlaError, match="the host step failed") as e:
        port.NvDlaWaitFence(failed, 1000)
    assert e.value.code == NvError.BadValue
    blocked = run(port, h, addresses, pre=[failed])  # work waiting on a failed fence fails too
    with pytest.raises(DlaError):
        port.NvDlaWaitFence(blocked, 10_000)


def test_a_bad_task_is_refused_before_the_device(port: NvDlaPort) -> None:
    h = port.NvDlaOpen(0)
    addresses, mems = relu_task(port, h, x_values(3))
    port.NvDlaMemWrite(mems[DESCRIPTORS], 0, b"\xff" * 16)  # the network descriptor, garbage
    with pytest.raises(DlaError) as e:
        run(port, h, addresses)
    refusals = (NvError.BadValue, NvError.CountMismatch, NvError.BadParameter, NvError.InvalidSize)
    assert e.value.code in refusals


def test_sessions_are_isolated(port: NvDlaPort) -> None:
    a, b = port.NvDlaOpen(0), port.NvDlaOpen(0)
    addresses, _ = relu_task(port, a, x_values(4))
    with pytest.raises(DlaError) as e:
        run(port, b, addresses)  # b submits a's memory
    assert e.value.code == NvError.BadParameter
    sem_a = port.NvDlaCreateSemaphore(a)
    own, _ = relu_task(port, b, x_values(4))
    with pytest.raises(DlaError):
        run(port, b, own, pre=[NvDlaFence(sem_a, 1)])  # nor a's fences


def test_closing_aborts_pending_work(port: NvDlaPort) -> None:
    h = port.NvDlaOpen(0)
    addresses, _ = relu_task(port, h, x_values(5))
    gate = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
    run(port, h, addresses, pre=[gate])
    port.NvDlaClose(h)  # must not hang on the queued task
    h2 = port.NvDlaOpen(0)
    again, mems = relu_task(port, h2, x_values(6))
    port.NvDlaWaitFence(run(port, h2, again), 10_000)
    np.testing.assert_array_equal(mems["y"].array(np.float32, (1, 2, 4)), np.maximum(x_values(6), 0))


def test_system_services(port: NvDlaPort) -> None:
    buf = port.NvDlaAlloc(10)
    assert len(buf) == 10
    port.NvDlaFree(buf)
    port.NvDlaFree(None)
    t0 = port.NvDlaGetTimeMS()
    time0 = time.monotonic()
    port.NvDlaSleepMS(5)
    assert time.monotonic() - time0 >= 0.004
    assert (port.NvDlaGetTimeMS() - t0) & 0xFFFFFFFF >= 4
    port.NvDlaDebugPrintf("conformance %d", 1)


def test_prepared_tasks_run_again_and_again(port: NvDlaPort) -> None:
    """NvDlaPrepareTask / NvDlaSubmitPrepared / NvDlaReleaseTask (the interface's defaults submit
    the kept task with NvDlaSubmit; a port may keep a prepared form): each submit computes on the
    data of its time, with its own fences; a task whose memory was freed is refused, not run."""
    h = port.NvDlaOpen(0)
    try:
        addresses, mems = relu_task(port, h, x_values(0))
        prepared = port.NvDlaPrepareTask(h, NvDlaTask(addresses))
        for seed in range(3):
            x = x_values(seed)
            port.NvDlaMemWrite(mems["x"], 0, x)
            done = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
            port.NvDlaSubmitPrepared(h, prepared, [], [done], timeout_ms=10_000)
            port.NvDlaWaitFence(done, 10_000)
            y = np.frombuffer(port.NvDlaMemRead(mems["y"], 0, 32), np.float32).reshape(1, 2, 4)
            np.testing.assert_array_equal(y, np.maximum(x, 0))
        port.NvDlaFreeMem(h, mems["x"])
        with pytest.raises(DlaError) as e:
            done = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
            port.NvDlaSubmitPrepared(h, prepared, [], [done], timeout_ms=10_000)
            port.NvDlaWaitFence(done, 10_000)
        assert e.value.code in (NvError.BadParameter, NvError.InvalidState)
        port.NvDlaReleaseTask(h, prepared)
        port.NvDlaReleaseTask(h, prepared)  # idempotent
    finally:
        port.NvDlaClose(h)


def test_prepared_task_calls_refuse_bad_arguments(port: NvDlaPort) -> None:
    """Every wrong argument of the prepared-task calls is a DlaError BadParameter, never a Python
    TypeError or AttributeError."""
    h = port.NvDlaOpen(0)
    try:
        addresses, _ = relu_task(port, h, x_values(0))
        prepared = port.NvDlaPrepareTask(h, NvDlaTask(addresses))
        done = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
        calls = {
            "task not an NvDlaTask": lambda: port.NvDlaPrepareTask(h, "task"),
            "address entry": lambda: port.NvDlaPrepareTask(h, NvDlaTask([("mem", 0)])),
            "not prepared": lambda: port.NvDlaSubmitPrepared(h, "task", [], [done]),
            "pre_fences not a list": lambda: port.NvDlaSubmitPrepared(h, prepared, 5, [done]),  # type: ignore[arg-type]
            "a fence not a fence": lambda: port.NvDlaSubmitPrepared(h, prepared, [], ["fence"]),  # type: ignore[list-item]
            "priority": lambda: port.NvDlaSubmitPrepared(h, prepared, [], [done], priority="high"),  # type: ignore[arg-type]
            "timeout": lambda: port.NvDlaSubmitPrepared(h, prepared, [], [done], timeout_ms="1s"),  # type: ignore[arg-type]
            "release junk": lambda: port.NvDlaReleaseTask(h, "task"),  # type: ignore[arg-type]
        }
        for name, call in calls.items():
            with pytest.raises(DlaError) as e:
                call()
            assert e.value.code == NvError.BadParameter, name
    finally:
        port.NvDlaClose(h)
