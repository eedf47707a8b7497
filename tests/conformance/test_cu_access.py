"""The port contract for compute units: CU contexts exclusive or shared (XRT's xclOpenContext),
register access only under an exclusive one and inside the unit's window (xclRegRead /
xclRegWrite), and the streams of an AP_CTRL_NONE unit with timeouts. Needs a device with the "full"
configuration's units (``scale``: AP_CTRL_NONE, int16 samples scaled by the float32 in word 0); a port
without compute units (NotSupported) skips."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.portability.interface import NvDlaPort

SCALE_ARG = 0x10  # argument word 0 of the scale unit: its float32 factor


def _cu_port(port: NvDlaPort) -> tuple[object, object]:
    h1, h2 = port.NvDlaOpen(0), port.NvDlaOpen(0)
    try:
        port.NvDlaOpenCuContext(h1, "scale", exclusive=False)
    except DlaError as e:
        if e.code == NvError.NotSupported:
            pytest.skip(f"{type(port).__name__}: {e.message}")
        raise
    port.NvDlaCloseCuContext(h1, "scale")
    return h1, h2


def _code(call: object, *args: object) -> NvError:
    with pytest.raises(DlaError) as err:
        call(*args)  # type: ignore[operator]
    return err.value.code


def test_register_access_needs_an_exclusive_cu_context(port: NvDlaPort) -> None:
    h1, h2 = _cu_port(port)
    assert _code(port.NvDlaRegRead, h1, "scale", SCALE_ARG) == NvError.InvalidState  # no context
    port.NvDlaOpenCuContext(h1, "scale", exclusive=True)
    assert _code(port.NvDlaOpenCuContext, h2, "scale", True) == NvError.Busy
    assert _code(port.NvDlaOpenCuContext, h2, "scale", False) == NvError.Busy
    assert _code(port.NvDlaRegRead, h2, "scale", SCALE_ARG) == NvError.InvalidState  # not the holder
    two = struct.unpack("<I", struct.pack("<f", 2.0))[0]
    port.NvDlaRegWrite(h1, "scale", SCALE_ARG, two)
    assert port.NvDlaRegRead(h1, "scale", SCALE_ARG) == two
    for offset in (0x1000, 2, -4):
        assert _code(port.NvDlaRegRead, h1, "scale", offset) == NvError.BadParameter, offset
    assert _code(port.NvDlaRegWrite, h1, "scale", SCALE_ARG, 1 << 32) == NvError.BadParameter
    assert _code(port.NvDlaRegRead, h1, "no_such_unit", 0) == NvError.BadParameter
    port.NvDlaCloseCuContext(h1, "scale")
    assert _code(port.NvDlaCloseCuContext, h1, "scale") == NvError.InvalidState
    # Shared contexts: several at once, none may touch registers, none lets an exclusive one in.
    port.NvDlaOpenCuContext(h1, "scale", exclusive=False)
    port.NvDlaOpenCuContext(h2, "scale", exclusive=False)
    assert _code(port.NvDlaRegWrite, h2, "scale", SCALE_ARG, 0) == NvError.InvalidState
    port.NvDlaCloseCuContext(h2, "scale")
    assert _code(port.NvDlaOpenCuContext, h2, "scale", True) == NvError.Busy
    port.NvDlaClose(h1)  # closing the handle releases its CU contexts
    port.NvDlaOpenCuContext(h2, "scale", exclusive=True)
    port.NvDlaClose(h2)


def test_streams_of_a_none_unit(port: NvDlaPort) -> None:
    h1, h2 = _cu_port(port)
    port.NvDlaOpenCuContext(h1, "scale", exclusive=True)
    port.NvDlaRegWrite(h1, "scale", SCALE_ARG, struct.unpack("<I", struct.pack("<f", 3.0))[0])
    x = np.arange(-500, 500, dtype="<i2")
    port.NvDlaStreamWrite(h1, "scale", x.tobytes(), 5000)
    y = np.frombuffer(port.NvDlaStreamRead(h1, "scale", x.nbytes, 5000), dtype="<i2")
    np.testing.assert_array_equal(y, x * 3)
    assert _code(port.NvDlaStreamRead, h2, "scale", 2, 20) == NvError.Timeout  # nothing comes
    assert _code(port.NvDlaStreamWrite, h2, "noop_hs", b"ab", 20) == NvError.NotSupported  # not NONE
    port.NvDlaClose(h1)
    port.NvDlaClose(h2)


def test_a_cu_execution_computes_and_signals_its_fence(port: NvDlaPort) -> None:
    """NvDlaSubmitCu: the vadd unit (out = a + b over n float32, XRT's HS model) with buffer
    arguments of the handle's own memory and a scalar; its post-fence is reached with the sum."""
    from pydla.portability.interface import NvDlaFence

    h, _ = _cu_port(port)
    n = 64
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    mems = []
    for values in (a, b, np.zeros(n, np.float32)):
        mem, data = port.NvDlaGetMem(h, n * 4)
        data.view(np.float32)[:n] = values
        mems.append(mem)
    sem = port.NvDlaCreateSemaphore(h, 0)
    try:
        port.NvDlaSubmitCu(h, "vadd", [(mems[0], 0), (mems[1], 0), (mems[2], 0), n], [], [NvDlaFence(sem, 1)])
    except DlaError as e:
        if e.code == NvError.NotSupported:
            pytest.skip(f"{type(port).__name__}: {e.message}")
        raise
    port.NvDlaWaitFence(NvDlaFence(sem, 1), 10_000)
    np.testing.assert_array_equal(mems[2].bytes_view().view(np.float32)[:n], a + b)
    assert _code(port.NvDlaSubmitCu, h, "scale", [], [], []) == NvError.NotSupported  # AP_CTRL_NONE
    port.NvDlaDestroySemaphore(sem)
    port.NvDlaClose(h)


def test_a_unit_is_named_by_its_ip_layout_index_too(port: NvDlaPort) -> None:
    """XRT's cu_index: the unit's place in the IP_LAYOUT the port reports."""
    h1, h2 = _cu_port(port)
    index = port.NvDlaGetDeviceInfo(0).compute_units.index("scale_i16:scale")
    port.NvDlaOpenCuContext(h1, index, exclusive=True)  # type: ignore[arg-type]
    assert _code(port.NvDlaOpenCuContext, h2, "scale", True) == NvError.Busy  # the same unit
    three = struct.unpack("<I", struct.pack("<f", 3.0))[0]
    port.NvDlaRegWrite(h1, index, SCALE_ARG, three)  # type: ignore[arg-type]
    assert port.NvDlaRegRead(h1, "scale", SCALE_ARG) == three
    assert _code(port.NvDlaOpenCuContext, h2, 99, False) in (NvError.BadParameter,)
    port.NvDlaClose(h1)  # releases the context opened by index (with names and indices mixed)
    port.NvDlaOpenCuContext(h2, "scale", exclusive=True)
    port.NvDlaClose(h2)
