"""Starting compute units through the KMD daemon (CU_SUBMIT, uAPI 2.6): pydla.ComputeUnit over the
Linux port (vadd numbers, HS / CHAIN executions in flight), the refusals (NONE unit, the engine,
another client's exclusive hold -> Busy, another client's buffer -> ENOENT) and the daemon's checks
of every field."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_uapi as U
from pydla.portability.linux import LinuxPort
from tests.linux.test_cu import daemon  # noqa: F401 (the fixture)

N = 1024


@pytest.fixture
def rts(daemon) -> Iterator[tuple[pydla.IRuntime, pydla.IRuntime]]:  # noqa: F811
    _, mnt = daemon
    with LinuxPort(mnt) as port, pydla.createRuntime(port) as a, pydla.createRuntime(port) as b:
        yield a, b


def test_vadd_and_executions_in_flight(rts) -> None:
    rt, _ = rts
    x, y = np.arange(N, dtype=np.float32), np.full(N, 0.5, np.float32)
    a, b, out = (rt.allocateSystemMemory(4 * N) for _ in range(3))
    a.array(np.float32)[:], b.array(np.float32)[:] = x, y
    pydla.ComputeUnit(rt, "vadd")(a, b, out, N)
    np.testing.assert_array_equal(out.array(np.float32), x + y)
    half = N // 2
    out.array(np.float32)[:] = 0
    pydla.ComputeUnit(rt, "vadd").start((a, 4 * half), (b, 4 * half, 4 * half), (out, 4 * half),
                                        half).wait(5000)
    np.testing.assert_array_equal(out.array(np.float32)[half:], x[half:] + y[half:])
    for unit in ("noop_hs", "noop_chain"):
        cu = pydla.ComputeUnit(rt, unit)
        syncs = [cu.start(i) for i in range(8)]
        for s in syncs:
            s.wait(5000)


def test_refusals(rts) -> None:
    rt, other = rts
    for unit in ("scale", "dla"):
        with pytest.raises(DlaError) as err:
            pydla.ComputeUnit(rt, unit).start()
        assert err.value.code == NvError.NotSupported, err.value.message
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "nope")
    assert err.value.code == NvError.NotSupported and "vadd:vadd" in err.value.message
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "noop_hs").start(2.5)
    assert err.value.code == NvError.BadParameter
    foreign = other.allocateSystemMemory(64)
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "noop_hs").start(foreign)
    assert err.value.code == NvError.BadParameter
    holder = pydla.ComputeUnit(other, "noop_hs").open(exclusive=True)
    with pytest.raises(DlaError) as err:
        pydla.ComputeUnit(rt, "noop_hs").start()
    assert err.value.code == NvError.Busy, err.value.message
    holder.start(1).wait(5000)  # the holder itself may start it
    holder.close()
    pydla.ComputeUnit(rt, "noop_hs").start().wait(5000)


def test_daemon_checks_every_field(daemon) -> None:  # noqa: F811
    """Through the raw ioctl (the client's own checks bypassed): the reason each refusal names."""
    _, mnt = daemon
    with LinuxPort(mnt) as port:
        h, h2 = port.NvDlaOpen(0), port.NvDlaOpen(0)
        mine, _ = port.NvDlaGetMem(h, 64)
        theirs, _ = port.NvDlaGetMem(h2, 64)
        word = U.dla_cu_arg_t(kind=U.dla_cu_arg_kind_e.WORD, value=7)
        buf = lambda m, off=0, size=0: U.dla_cu_arg_t(kind=U.dla_cu_arg_kind_e.BUFFER,  # noqa: E731
                                                     value=m.handle, offset=off, size=size)
        cases = [
            (b"noop_hs", [word], {}, None),
            (b"noop_hs", [buf(mine)], {}, None),
            (b"noop_hs", [buf(theirs)], {}, "is not one of this client's"),
            (b"noop_hs", [buf(mine, 64)], {}, "offset 64 is outside"),
            (b"noop_hs", [buf(mine, 32, 40)], {}, "size 40 at offset 32"),
            (b"noop_hs", [U.dla_cu_arg_t(kind=9)], {}, "kind 9"),
            (b"noop_hs", [U.dla_cu_arg_t(kind=1, offset=4)], {}, "a WORD has offset 4"),
            (b"noop_hs", [word] * 65, {}, "65 arguments (at most 64)"),
            (b"noop_hs", [], {"num_pre_fences": 5}, "at most 4 each"),
            (b"noop_hs", [], {"num_post_fences": 1}, "sync object 0"),
            (b"nope", [], {}, "not a compute unit"),
            (b"scale", [], {}, "AP_CTRL_NONE"),
            (b"dla", [], {}, "DLA engine"),
        ]
        for name, args, kw, reason in cases:
            device = port._device(h)
            array = (U.dla_cu_arg_t * max(1, len(args)))(*args)
            a = U.dla_cu_submit_t(name=name, args=ctypes.addressof(array), num_args=len(args), **kw)
            if reason is None:
                assert device.ioctl(U.dla_ioctl_e.CU_SUBMIT, a).exec_id > 0
                continue
            with pytest.raises(DlaError) as err:
                device.ioctl(U.dla_ioctl_e.CU_SUBMIT, a)
            assert reason in err.value.message, (name, err.value.message)
