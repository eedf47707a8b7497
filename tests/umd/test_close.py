"""Closing with work in flight, the NVDLA runtime API's submitNonBlocking(outputSyncs) and names: close()
waits for runs in flight, cancels what cannot finish, frees everything; an exception that ends a
``with`` block is never replaced by one from closing."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
from onnx import helper

import pydla
from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from tests.compiler.support import model, reference

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def net() -> tuple[object, bytes]:
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, {"x": (1, 4, 8, 8)}, ["y"], {"W": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)})
    return m, compile_model(m).blob


def bound(rt: pydla.IRuntime, blob: bytes) -> tuple[np.ndarray, pydla.NvDlaMemHandle]:
    rt.load(blob)
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    a, b = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
    x = RNG.standard_normal(d_in.dims).astype(np.float32)
    a.array(np.float32, d_in.dims)[...] = x
    rt.bindInputTensor(0, a)
    rt.bindOutputTensor(0, b)
    return x, b


def test_submit_non_blocking_appends_to_output_syncs(net) -> None:
    m, blob = net
    with pydla.createRuntime(mode="threaded") as rt:
        x, out = bound(rt, blob)
        syncs: list[pydla.ISync] = []
        returned = rt.submitNonBlocking(syncs)
        assert len(syncs) == 1 and returned == syncs
        syncs[0].wait(10_000)
        d = rt.getOutputTensorDesc(0)
        want = reference(m, {"x": x})["y"]
        np.testing.assert_allclose(out.array(np.float32, d.dims), want, rtol=1e-5, atol=1e-5)
        # wait_for: the second run starts after the application's gate
        gate = rt.createSync()
        (second,) = rt.submitNonBlocking(wait_for=[gate])
        with pytest.raises(DlaError) as e:
            second.wait(50)
        assert e.value.code == NvError.Timeout
        gate.signal()
        second.wait(10_000)
        with pytest.raises(DlaError) as e:
            rt.submitNonBlocking(syncs[0])  # type: ignore[arg-type]
        assert e.value.code == NvError.BadParameter and "outputSyncs must be a list" in e.value.message
        with pytest.raises(DlaError) as e:
            rt.submitNonBlocking(wait_for=[object()])  # type: ignore[list-item]
        assert e.value.code == NvError.BadParameter


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_close_waits_for_a_run_in_flight(net, mode: str) -> None:
    m, blob = net
    rt = pydla.createRuntime(mode=mode)
    x, out = bound(rt, blob)
    d = rt.getOutputTensorDesc(0)
    view = out.array(np.float32, d.dims)  # in-process memory: the view outlives the handle
    (done,) = rt.submitNonBlocking()
    rt.close()  # no Busy: it waited
    done.wait(1000)  # it ended well (a cancelled run's sync fails)
    np.testing.assert_allclose(view, reference(m, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    rt.close()  # idempotent


def test_close_cancels_a_run_that_cannot_finish(net, caplog: pytest.LogCaptureFixture) -> None:
    _, blob = net
    rt = pydla.createRuntime(mode="threaded", timeout_ms=300)
    bound(rt, blob)
    gate = rt.createSync()  # never signaled
    (stuck,) = rt.submitNonBlocking(wait_for=[gate])
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pydla"):
        rt.close()
    assert 0.25 < time.monotonic() - t0 < 5.0
    assert "cancelled" in caplog.text
    with pytest.raises(DlaError) as e:  # the cancelled run's sync fails: nobody waits forever
        stuck.wait(2000)
    assert e.value.code == NvError.InvalidState and "closed" in e.value.message


def test_an_exception_in_a_with_block_is_not_replaced_by_closing(net) -> None:
    _, blob = net
    with pytest.raises(KeyboardInterrupt), pydla.createRuntime(mode="threaded", timeout_ms=200) as rt:
        bound(rt, blob)
        gate = rt.createSync()
        rt.submitNonBlocking(wait_for=[gate])
        raise KeyboardInterrupt


def test_the_package_lists_what_it_offers() -> None:
    """dir(pydla) shows the public names (not typing's); the NVDLA runtime API's class names work."""
    names = dir(pydla)
    for name in ("Session", "createRuntime", "IRuntime", "ISync", "ILoadable", "DlaError", "NvError"):
        assert name in names and getattr(pydla, name) is not None
    assert "Any" not in names
    from pydla.loadable.container import Loadable

    assert pydla.ILoadable is Loadable
    with pytest.raises(AttributeError):
        pydla.NoSuchThing  # noqa: B018


@pytest.mark.parametrize("mode", ["threaded", "deterministic"])
def test_memory_of_a_run_waiting_for_its_syncs_cannot_be_freed(net, mode: str) -> None:
    """A non-blocking run that waits for other syncs has not reached the driver yet: freeing its
    memory is Busy all the same, until the run has ended; then it frees."""
    _, blob = net
    with pydla.createRuntime(mode=mode, timeout_ms=5000) as rt:
        _, out = bound(rt, blob)
        gate = rt.createSync()
        (done,) = rt.submitNonBlocking(wait_for=[gate])
        with pytest.raises(DlaError) as e:
            rt.freeSystemMemory(out)
        assert e.value.code == NvError.Busy and "bound to a run still in flight" in e.value.message
        spare = rt.allocateSystemMemory(64)
        rt.freeSystemMemory(spare)  # memory no run uses frees at once
        gate.signal()
        done.wait(5000)
        rt.unload()
        rt.freeSystemMemory(out)
