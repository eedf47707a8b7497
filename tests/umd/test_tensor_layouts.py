"""setInputTensorDesc / setOutputTensorDesc: the application keeps its data in its own arrangement
of the same tensor (NHWC strides, padded rows, an offset), the runtime converts around each run; what
may not change is refused with the reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

import pydla
from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from tests.compiler.support import model, reference

RNG = np.random.default_rng(11)
X_DIMS, Y_DIMS = (1, 3, 6, 5), (1, 4, 6, 5)


@pytest.fixture(scope="module")
def net():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["y"])], {"x": X_DIMS}, ["y"], {"W": w})
    return m, compile_model(m).blob


def nhwc(dims: tuple[int, ...], el: int = 4) -> tuple[int, ...]:
    _, c, h, w = dims
    return (h * w * c * el, el, w * c * el, c * el)


def padded(dims: tuple[int, ...], row: int, el: int = 4) -> tuple[int, ...]:
    """Rows of ``row`` elements (W padded), dense otherwise."""
    _, c, h, _ = dims
    return (c * h * row * el, h * row * el, row * el, el)


def place(mem, desc, x: np.ndarray) -> None:
    view = np.ndarray(desc.dims, np.float32, buffer=mem.bytes_view()[desc.offset:desc.offset + desc.size],
                      strides=desc.strides)
    view[...] = x


def take(mem, desc) -> np.ndarray:
    return np.ndarray(desc.dims, np.float32, buffer=mem.bytes_view()[desc.offset:desc.offset + desc.size],
                      strides=desc.strides).copy()


def test_nhwc_input_and_padded_output_at_an_offset(net) -> None:
    m, blob = net
    with pydla.createRuntime() as rt:
        rt.load(blob)
        d_in = dataclasses.replace(rt.getInputTensorDesc(0), strides=nhwc(X_DIMS))
        y_strides = padded(Y_DIMS, row=8)
        y_size = 4 + sum((d - 1) * s for d, s in zip(Y_DIMS, y_strides, strict=True))
        d_out = dataclasses.replace(rt.getOutputTensorDesc(0), strides=y_strides, offset=64, size=y_size)
        rt.setInputTensorDesc(0, d_in)
        rt.setOutputTensorDesc(0, d_out)
        assert rt.getInputTensorDesc(0) == d_in and rt.getOutputTensorDesc(0) == d_out
        mem_in = rt.allocateSystemMemory(d_in.size)
        mem_out = rt.allocateSystemMemory(64 + y_size)
        mem_out.bytes_view()[...] = 0xEE
        rt.bindInputTensor(0, mem_in)
        rt.bindOutputTensor(0, mem_out)
        for _ in range(2):
            x = RNG.standard_normal(X_DIMS).astype(np.float32)
            place(mem_in, d_in, x)
            assert not np.array_equal(mem_in.array(np.float32, X_DIMS), x)  # really not NCHW in memory
            rt.submit()
            np.testing.assert_allclose(take(mem_out, d_out), reference(m, {"x": x})["y"],
                                       rtol=1e-5, atol=1e-6)
        raw = mem_out.bytes_view()
        assert (raw[:64] == 0xEE).all()  # before the offset: untouched
        pad = np.ndarray((3, 6, 3), np.float32, buffer=raw[64:], strides=(6 * 8 * 4, 8 * 4, 4), offset=20)
        assert (pad.view(np.uint32) == 0xEEEEEEEE).all()  # row padding: untouched


        # Non-blocking, released by the application's signal.
        x = RNG.standard_normal(X_DIMS).astype(np.float32)
        gate = rt.createSync()
        (done,) = rt.submitNonBlocking(wait_for=[gate])
        place(mem_in, d_in, x)  # written before the signal, read after it
        gate.signal()
        done.wait(10_000)
        np.testing.assert_allclose(take(mem_out, d_out), reference(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)

        # Back to the network's own layout: the dense path again (bind anew).
        rt.setInputTensorDesc(0, dataclasses.replace(d_in, strides=(X_DIMS[1] * 30 * 4, 30 * 4, 5 * 4, 4)))
        with pytest.raises(DlaError, match="not bound"):
            rt.submit()
        dense_in = rt.allocateSystemMemory(rt.getInputTensorDesc(0).size)
        dense_in.array(np.float32, X_DIMS)[...] = x
        rt.bindInputTensor(0, dense_in)
        rt.submit()
        np.testing.assert_allclose(take(mem_out, d_out), reference(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("change", "code", "message"), [
    (dict(dims=(1, 3, 5, 6)), NvError.NotSupported, r"cannot change dims \(the network was compiled"),
    (dict(name="other"), NvError.NotSupported, "cannot change name"),
    (dict(strides=(4, 4, 4, 4)), NvError.BadParameter, "make elements overlap"),
    (dict(strides=(360, 120, 20, 2)), NvError.BadParameter, "stride 3 = 2: a positive multiple"),
    (dict(strides=(360, 120, 20)), NvError.BadParameter, "3 strides for 4 dims"),
    (dict(strides=nhwc(X_DIMS), size=100), NvError.InvalidSize, "size 100 is less than the 360 bytes"),
    (dict(offset=-4), NvError.BadParameter, "offset -4"),
    (dict(strides=None), NvError.BadParameter, "strides None: a tuple"),
    (dict(size=None), NvError.BadParameter, "size None: a number of bytes"),
    (dict(size=400.0), NvError.BadParameter, "size 400.0"),
])
def test_what_may_not_change(net, change: dict, code: NvError, message: str) -> None:
    _, blob = net
    with pydla.createRuntime() as rt:
        rt.load(blob)
        d = rt.getInputTensorDesc(0)
        if "data_type" in change:
            change["data_type"] = type(d.data_type)(change["data_type"])
        with pytest.raises(DlaError, match=message) as e:
            rt.setInputTensorDesc(0, dataclasses.replace(d, **change))
        assert e.value.code == code
        assert rt.getInputTensorDesc(0) == d  # unchanged


def test_data_type_is_refused_and_a_small_memory_is_too(net) -> None:
    _, blob = net
    with pydla.createRuntime() as rt:
        rt.load(blob)
        d = rt.getInputTensorDesc(0)
        other = next(t for t in type(d.data_type) if t != d.data_type)
        with pytest.raises(DlaError, match=r"cannot change data_type \(the network was compiled for"):
            rt.setInputTensorDesc(0, dataclasses.replace(d, data_type=other))
        d2 = dataclasses.replace(d, strides=nhwc(X_DIMS), offset=16)
        rt.setInputTensorDesc(0, d2)
        with pytest.raises(DlaError, match=r"needs 376 bytes \(offset 16 \+ size 360\)") as e:
            rt.bindInputTensor(0, rt.allocateSystemMemory(360))
        assert e.value.code == NvError.InvalidSize
