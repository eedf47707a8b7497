"""IRuntime used as the NVDLA runtime API lists it, method by method, on compiled networks against
onnxruntime; non-blocking chains; errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import pydla
from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from tests.compiler.support import model, reference

RNG = np.random.default_rng(5)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def net():
    """conv + relu + pool + gemm + softmax (a CPU run between two NPU tasks)."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "F", "FB"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["p"]),
             helper.make_node("Mul", ["p", "k"], ["y"])]
    m = model(nodes, {"x": (1, 3, 8, 8)}, ["y"], {"W": r(6, 3, 3, 3), "B": r(6), "F": r(5, 6), "FB": r(5),
                                                   "k": np.array(3.0, np.float32)})
    return m, compile_model(m).blob


def run_once(rt, x: np.ndarray) -> np.ndarray:
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    mem_in = rt.allocateSystemMemory(d_in.size)
    mem_out = rt.allocateSystemMemory(d_out.size)
    mem_in.array(np.float32, d_in.dims)[...] = x
    rt.bindInputTensor(0, mem_in)
    rt.bindOutputTensor(0, mem_out)
    rt.submit()
    return mem_out.array(np.float32, d_out.dims).copy()


def test_the_nvdla_runtime_api_method_by_method(net) -> None:
    m, blob = net
    with pydla.createRuntime() as rt:
        assert rt.getMaxDevices() == 2 and rt.getNumDevices() == 2
        rt.load(blob)
        assert rt.getNumInputTensors() == 1 and rt.getNumOutputTensors() == 1
        d = rt.getInputTensorDesc(0)
        assert d.name == "x" and d.dims == (1, 3, 8, 8) and d.size == 3 * 8 * 8 * 4
        rt.setInputTensorDesc(0, d)  # identical: accepted
        rt.setOutputTensorDesc(0, rt.getOutputTensorDesc(0))
        x = r(1, 3, 8, 8)
        got = run_once(rt, x)
        np.testing.assert_allclose(got, reference(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)
        # The same loaded network again, with other data, without reloading.
        x2 = r(1, 3, 8, 8)
        np.testing.assert_allclose(run_once(rt, x2), reference(m, {"x": x2})["y"], rtol=1e-5, atol=1e-6)


def test_get_num_devices_counts_the_devices_that_open(monkeypatch) -> None:
    """getMaxDevices is what the configuration has; getNumDevices, as the NVDLA runtime counts it,
    those that open (this runtime's own among them)."""
    with pydla.createRuntime() as rt, pydla.createRuntime(config="small") as small:
        assert (rt.getMaxDevices(), rt.getNumDevices()) == (2, 2)
        assert (small.getMaxDevices(), small.getNumDevices()) == (1, 1)
        opened = []
        real_open = rt.port.NvDlaOpen

        def open_all_but_1(select):
            opened.append(select)
            if select == 1:
                raise DlaError(NvError.DeviceNotFound, "device 1 is gone")
            return real_open(select)

        monkeypatch.setattr(rt.port, "NvDlaOpen", open_all_but_1)
        assert (rt.getMaxDevices(), rt.getNumDevices()) == (2, 1)
        assert opened == [1]  # its own device 0 is open already: not opened again
    with pytest.raises(DlaError) as e:
        rt.getNumDevices()
    assert e.value.code == NvError.InvalidState


def test_load_from_a_path_and_a_memoryview(net, tmp_path) -> None:
    _, blob = net
    path = tmp_path / "net.dla"
    path.write_bytes(blob)
    for source in (path, str(path), memoryview(blob)):
        with pydla.createRuntime() as rt:
            rt.load(source)
            assert rt.getNumInputTensors() == 1


def test_non_blocking_chain_and_application_signal(net) -> None:
    m, blob = net
    with pydla.createRuntime() as a, pydla.createRuntime(device=1) as b:
        results = []
        for rt in (a, b):
            rt.load(blob)
            d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
            mi, mo = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
            rt.bindInputTensor(0, mi)
            rt.bindOutputTensor(0, mo)
            results.append((mi, mo, d_in, d_out))
        x = r(1, 3, 8, 8)
        results[0][0].array(np.float32, results[0][2].dims)[...] = x
        results[1][0].array(np.float32, results[1][2].dims)[...] = x
        gate = a.createSync()
        (done_a,) = a.submitNonBlocking(wait_for=[gate])
        (done_b,) = b.submitNonBlocking(wait_for=[done_a])  # B waits for A
        with pytest.raises(DlaError) as e:
            done_b.wait(50)
        assert e.value.code == NvError.Timeout
        assert done_a.getValue() == 0 and done_a.getWaitValue() == 1
        gate.signal()
        done_b.wait(10_000)
        done_a.wait(10)
        assert done_a.getValue() >= 1
        want = reference(m, {"x": x})["y"]
        for _, mo, _, d_out in results:
            np.testing.assert_allclose(mo.array(np.float32, d_out.dims), want, rtol=1e-5, atol=1e-6)


def test_a_failing_task_raises_on_wait(net) -> None:
    _, blob = net
    with pydla.createRuntime() as rt:
        rt.load(blob)
        d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
        rt.bindInputTensor(0, rt.allocateSystemMemory(d_in.size))
        rt.bindOutputTensor(0, rt.allocateSystemMemory(d_out.size))
        device = rt.port.platform.probe(0).device
        device.inject_error("SDP")
        (sync,) = rt.submitNonBlocking()
        with pytest.raises(DlaError, match="failed on the device"):
            sync.wait(5000)
        device.inject_error("SDP")
        with pytest.raises(DlaError, match="failed on the device"):
            rt.submit()


def test_errors(net) -> None:
    _, blob = net
    with pydla.createRuntime() as rt:
        with pytest.raises(DlaError) as e:
            rt.getNumInputTensors()
        assert e.value.code == NvError.NotInitialized
        with pytest.raises(DlaError) as e:
            rt.load(b"garbage, not a loadable")
        assert e.value.code == NvError.BadValue
        for wrong in (3, None, ["a.dla"]):
            with pytest.raises(DlaError, match=f"not {type(wrong).__name__}") as e:
                rt.load(wrong)  # type: ignore[arg-type]
            assert e.value.code == NvError.BadParameter
        rt.load(blob)
        with pytest.raises(DlaError, match="not bound") as e:
            rt.submit()
        assert e.value.code == NvError.InvalidState
        small = rt.allocateSystemMemory(8)
        with pytest.raises(DlaError, match="needs 768 bytes") as e:
            rt.bindInputTensor(0, small)
        assert e.value.code == NvError.InvalidSize
        with pytest.raises(DlaError, match="input tensor 3"):
            rt.getInputTensorDesc(3)
        d = rt.getInputTensorDesc(0)
        import dataclasses

        with pytest.raises(DlaError, match="cannot change dims"):
            rt.setInputTensorDesc(0, dataclasses.replace(d, dims=(1, 3, 4, 16)))
        with pytest.raises(DlaError, match="timeout"):
            rt.createSync().wait(-1)
    with pytest.raises(DlaError, match="closed") as e:
        rt.load(blob)
    assert e.value.code == NvError.InvalidState
    with pytest.raises(DlaError, match="port 'linux'"):
        pydla.createRuntime(port="linux")
