"""The in-process port: the NVDLA portability layer's NvDla* functions over a KMD in this process."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.loadable.taskbuilder import DESCRIPTORS, TaskBuilder
from pydla.platform import open_port
from pydla.portability.interface import NvDlaFence, NvDlaHeap, NvDlaTask


@pytest.fixture(params=["deterministic", "threaded"])
def port(request):
    with open_port("inprocess", "full", mode=request.param) as p:
        yield p


def test_open_close_and_device_selection(port) -> None:
    assert port.NvDlaGetMaxDevices() == 2
    h0, h1 = port.NvDlaOpen(0), port.NvDlaOpen(1)
    assert h0.kmd is not h1.kmd
    with pytest.raises(DlaError) as e:
        port.NvDlaOpen(2)
    assert e.value.code == NvError.DeviceNotFound and "0..1" in str(e.value)
    port.NvDlaClose(h0)
    with pytest.raises(DlaError, match="closed"):
        port.NvDlaGetMem(h0, 16)


def test_memory_functions(port) -> None:
    h = port.NvDlaOpen(0)
    mem, data = port.NvDlaGetMem(h, 64)
    assert port.NvDlaMemGetSize(mem) == 64 and data.size == 64 and mem.device_address > 0
    port.NvDlaMemWrite(mem, 8, b"\x01\x02\x03")
    assert port.NvDlaMemRead(mem, 8, 3) == b"\x01\x02\x03" and data[9] == 2
    port.NvDlaMemWrite(mem, 16, np.arange(4, dtype=np.float32))
    assert mem.array(np.float32, (4,), offset=16).tolist() == [0.0, 1.0, 2.0, 3.0]
    view = port.NvDlaMemMap(mem, 8, 4)
    assert bytes(view[:3]) == b"\x01\x02\x03"
    port.NvDlaMemUnmap(mem, view, 4)
    for call, fragment in ((lambda: port.NvDlaMemRead(mem, 60, 8), "outside the 64-byte"),
                           (lambda: port.NvDlaMemWrite(mem, -1, b"x"), "outside"),
                           (lambda: port.NvDlaMemMap(mem, 0, 0), "greater than 0"),
                           (lambda: port.NvDlaGetMem(h, 16, NvDlaHeap.SRAM), "only DRAM"),
                           (lambda: port.NvDlaGetMem(h, 0), "size 0")):
        with pytest.raises(DlaError, match=fragment):
            call()
    other = port.NvDlaOpen(1)
    with pytest.raises(DlaError, match="not one of this session's"):
        port.NvDlaFreeMem(other, mem)
    port.NvDlaFreeMem(h, mem)
    with pytest.raises(DlaError, match="freed"):
        port.NvDlaMemRead(mem, 0, 1)


def test_mem_get_size_of_another_ports_or_a_closed_ports_memory_is_0(port) -> None:
    h = port.NvDlaOpen(0)
    mem, _ = port.NvDlaGetMem(h, 256)
    with open_port("inprocess", "full") as other:
        assert other.NvDlaMemGetSize(mem) == 0  # not its memory
        assert port.NvDlaMemGetSize(mem) == 256
    theirs = open_port("inprocess", "full")
    h2 = theirs.NvDlaOpen(0)
    mem2, _ = theirs.NvDlaGetMem(h2, 64)
    assert (theirs.NvDlaMemGetSize(mem2), port.NvDlaMemGetSize(mem2)) == (64, 0)
    theirs.close()  # closes its sessions
    assert theirs.NvDlaMemGetSize(mem2) == 0


def test_system_services(port) -> None:
    buf = port.NvDlaAlloc(10)
    assert len(buf) == 10
    port.NvDlaFree(buf)
    port.NvDlaFree(None)
    t0 = port.NvDlaGetTimeMS()
    port.NvDlaSleepMS(5)
    assert (port.NvDlaGetTimeMS() - t0) & 0xFFFFFFFF >= 4


def _task(port, h, x: np.ndarray):
    """A relu task written through the port: descriptors and buffers from NvDlaGetMem."""
    tb = TaskBuilder()
    tb.sdp(tb.cube("x", (1, 2, 4)), tb.cube("y", (1, 2, 4)), act="relu")
    built = tb.build()
    mems = {}
    for name, size in built.buffers.items():
        mems[name], _ = port.NvDlaGetMem(h, size)
    port.NvDlaMemWrite(mems[DESCRIPTORS], 0, built.descriptors)
    port.NvDlaMemWrite(mems["x"], 0, x)
    return [(mems[name], off) for name, off in built.addresses], mems


def test_submit_with_fences(port) -> None:
    h = port.NvDlaOpen(0)
    x = np.linspace(-1, 1, 8).astype(np.float32)
    addresses, mems = _task(port, h, x)
    gate = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
    done = NvDlaFence(port.NvDlaCreateSemaphore(h), 1)
    (status,) = port.NvDlaSubmit(h, [NvDlaTask(addresses, pre_fences=[gate], post_fences=[done])])
    with pytest.raises(DlaError) as e:
        port.NvDlaWaitFence(done, 30)
    assert e.value.code == NvError.Timeout
    port.NvDlaSignalFence(gate)
    port.NvDlaWaitFence(done, 5000)
    port.wait_task(status, 1000)
    assert mems["y"].array(np.float32, (8,)).tolist() == np.maximum(x, 0).tolist()


def test_submit_rejects_foreign_memory_and_fences(port) -> None:
    h, other = port.NvDlaOpen(0), port.NvDlaOpen(0)
    addresses, _ = _task(port, h, np.zeros(8, np.float32))
    with pytest.raises(DlaError, match="not one of this session's"):
        port.NvDlaSubmit(other, [NvDlaTask(addresses)])
    with pytest.raises(DlaError, match="not from NvDlaCreateSemaphore"):
        port.NvDlaSubmit(h, [NvDlaTask(addresses, pre_fences=[NvDlaFence(object(), 1)])])


def test_wait_fence_times_out_promptly(port) -> None:
    h = port.NvDlaOpen(0)
    fence = NvDlaFence(port.NvDlaCreateSemaphore(h), 3)
    t0 = time.monotonic()
    with pytest.raises(DlaError, match="not reached within 20 ms"):
        port.NvDlaWaitFence(fence, 20)
    assert time.monotonic() - t0 < 1.0


def test_mem_read_write_sources_and_errors() -> None:
    """Every kind of source NvDlaMemWrite takes lands byte for byte; what is not bytes is refused."""
    port = open_port("inprocess")
    h = port.NvDlaOpen(0)
    mem, _ = port.NvDlaGetMem(h, 64)
    a = np.arange(8, dtype=np.float32)
    for src, expect in [(b"abcd", b"abcd"), (bytearray(b"wxyz"), b"wxyz"), (a, a.tobytes()),
                        (a[::2], a[::2].tobytes()), (memoryview(bytearray(b"0123456789"))[::2], b"02468"),
                        (a.reshape(2, 4).T, a.reshape(2, 4).T.tobytes()),
                        (np.arange(20, dtype=np.uint8)[::3], bytes(range(0, 20, 3))),
                        (np.arange(12, dtype=np.uint8).reshape(3, 4), bytes(range(12))),
                        (np.arange(12, dtype=np.uint8).reshape(3, 4).T, np.arange(12, dtype=np.uint8)
                         .reshape(3, 4).T.tobytes())]:
        port.NvDlaMemWrite(mem, 8, src)
        assert port.NvDlaMemRead(mem, 8, len(expect)) == expect
    for bad in (object(), np.array([object()]), "text"):
        with pytest.raises(DlaError, match="src is not bytes-like") as e:
            port.NvDlaMemWrite(mem, 0, bad)
        assert e.value.code == NvError.BadParameter
    for call in (lambda: port.NvDlaMemWrite(mem, 62, b"abcd"), lambda: port.NvDlaMemRead(mem, 62, 4),
                 lambda: port.NvDlaMemRead(mem, -1, 4)):
        with pytest.raises(DlaError, match="outside the 64-byte buffer") as e:
            call()
        assert e.value.code == NvError.InvalidSize
    port.NvDlaFreeMem(h, mem)
    with pytest.raises(DlaError, match="was freed") as e:
        port.NvDlaMemRead(mem, 0, 4)
    assert e.value.code == NvError.InvalidState
