"""A hung run seen through the runtime: the driver's hang detection runs for whoever calls into it,
also after a wait that gave up before the hang timeout (TDR). In deterministic mode only the waiter
polled the driver, so a wait that expired just before the TDR left the hung job running for good
and every later load()/unload() answered Busy (1,532 times in a row in a reliability probe);
threaded mode recovered. Now every mode recovers within the TDR window: the guilty runtime's sync
fails with the hang's error, the other runtime on the device sees none."""

from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import helper

import pydla
from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from pydla.platform import Platform
from pydla.portability.inprocess import InProcessPort
from tests.compiler.support import model, reference

RNG = np.random.default_rng(34)
TDR_MS = 600
GIVE_UP_MS = 100  # far before the TDR: the waiter never sees the hang itself, however busy the machine


@pytest.fixture(scope="module")
def net() -> tuple[object, bytes]:
    """One NPU task (Conv + Relu): no CPU step, whose host thread would wait (and poll) on its own."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, {"x": (1, 4, 8, 8)}, ["y"], {"W": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)})
    return m, compile_model(m).blob


def bind(rt: pydla.IRuntime, blob: bytes) -> tuple[np.ndarray, pydla.NvDlaMemHandle]:
    rt.load(blob)
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    a, b = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
    x = RNG.standard_normal(d_in.dims).astype(np.float32)
    a.array(np.float32, d_in.dims)[...] = x
    rt.bindInputTensor(0, a)
    rt.bindOutputTensor(0, b)
    return x, b


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_load_and_unload_recover_after_a_wait_that_gave_up_before_the_tdr(net, mode: str) -> None:
    m, blob = net
    platform = Platform("full", mode=mode, tdr_ms=TDR_MS)
    with InProcessPort(platform=platform) as port, pydla.createRuntime(port) as guilty, \
            pydla.createRuntime(port) as other:
        kmd = platform.probe(0).kmd
        x, out = bind(other, blob)
        before = kmd.stats()["buffers"]
        bind(guilty, blob)
        buffers = kmd.stats()["buffers"]
        runner_buffers = buffers - before - 2  # the loadable's, without the two bound memories
        platform.probe(0).device.inject_hang("CONV")  # the next CONV operation never finishes
        (hung,) = guilty.submitNonBlocking()
        started_by = time.monotonic()  # the job started within submitNonBlocking (the device was idle)
        (innocent,) = other.submitNonBlocking()  # queued behind the hung job
        with pytest.raises(DlaError) as gave_up:
            hung.wait(GIVE_UP_MS)
        assert gave_up.value.code == NvError.Timeout and "not reached" in gave_up.value.message

        # What the probe did next: load() and unload() in turn. Each is Busy while the hung job holds
        # the buffers. Deterministic: a call that begins once the TDR has passed drives the driver,
        # which declares the hang first, so it is never Busy. Threaded: the service thread declares
        # it at the deadline, beside the caller (a failure here is a wedge, not a slow machine).
        busy_after_tdr: list[float] = []
        calls = 0
        while True:
            calls += 1
            began = time.monotonic()
            try:
                guilty.unload() if calls % 2 else guilty.load(blob)
            except DlaError as e:
                assert e.code == NvError.Busy, e.message
                late = began - (started_by + TDR_MS / 1000)
                if late >= 0:
                    busy_after_tdr.append(late)
                    assert mode == "threaded" and late < 10, \
                        f"still Busy {late * 1000:.0f} ms after the TDR ({calls} calls): {e.message}"
                time.sleep(0.002)
                continue
            if calls % 2:
                break
        assert guilty.runner is None and (mode == "threaded" or not busy_after_tdr)
        # The guilty runtime learns why; the other sees no error; a refused load() leaked nothing.
        with pytest.raises(DlaError) as why:
            hung.wait(1000)
        assert why.value.code == NvError.Timeout
        assert f"hung: no operation completed for {TDR_MS} ms" in why.value.message
        innocent.wait(10_000)
        d = other.getOutputTensorDesc(0)
        np.testing.assert_allclose(out.array(np.float32, d.dims), reference(m, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-5)
        assert kmd.stats()["buffers"] == buffers - runner_buffers, kmd.stats()
        assert kmd.stats()["recovery"]["hangs"] == 1
        # The guilty runtime works again.
        x2, out2 = bind(guilty, blob)
        guilty.submit()
        np.testing.assert_allclose(out2.array(np.float32, d.dims), reference(m, {"x": x2})["y"],
                                   rtol=1e-5, atol=1e-5)


def test_asking_a_sync_its_value_moves_a_deterministic_device(net) -> None:
    """A run released by the application's signal, then only asked about (getValue in a loop, never
    a wait): the asking drives the deterministic device, as a wait does, so the loop ends."""
    m, blob = net
    with pydla.createRuntime() as rt:
        x, out = bind(rt, blob)
        gate = rt.createSync()
        (done,) = rt.submitNonBlocking(wait_for=[gate])
        assert done.getValue() == 0  # held by its pre-fence
        gate.signal()
        assert done.getValue() == 1
        d = rt.getOutputTensorDesc(0)
        np.testing.assert_allclose(out.array(np.float32, d.dims), reference(m, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-5)
