"""The runtime prepares each NPU step once per bindings: a new binding, a freed buffer or a new
allocation at the same place is seen on the next submit, never a stale prepared task."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError

onnx = pytest.importorskip("onnx")


def _relu_loadable() -> bytes:
    from onnx import TensorProto, helper

    from pydla.compiler.api import compile_model

    node = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])
    graph = helper.make_graph([node], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    blob: bytes = compile_model(model).blob
    return blob


@pytest.fixture(scope="module")
def blob() -> bytes:
    return _relu_loadable()


@pytest.fixture(params=["deterministic", "threaded"])
def rt(request: pytest.FixtureRequest, blob: bytes) -> Iterator[Any]:
    runtime = pydla.createRuntime(mode=request.param)
    runtime.load(blob)
    yield runtime
    runtime.close()


def _mem(rt: Any, values: np.ndarray | None = None) -> Any:
    mem = rt.allocateSystemMemory(rt.getInputTensorDesc(0).size)
    if values is not None:
        mem.array(np.float32, (1, 4, 2, 2))[...] = values
    return mem


def test_rebinding_is_seen_by_the_next_submit(rt: Any) -> None:
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(1, 4, 2, 2)
    m_in, out_a, out_b = _mem(rt, x), _mem(rt), _mem(rt)
    rt.bindInputTensor(0, m_in)
    rt.bindOutputTensor(0, out_a)
    rt.submit()
    np.testing.assert_array_equal(out_a.array(np.float32, x.shape), np.maximum(x, 0))
    rt.bindOutputTensor(0, out_b)
    m_in.array(np.float32, x.shape)[...] = -x
    rt.submit()
    np.testing.assert_array_equal(out_b.array(np.float32, x.shape), np.maximum(-x, 0))
    np.testing.assert_array_equal(out_a.array(np.float32, x.shape), np.maximum(x, 0))  # untouched
    for _ in range(3):  # the same bindings again: the prepared task, on new data each time
        m_in.array(np.float32, x.shape)[...] += 1
        rt.submit()
        np.testing.assert_array_equal(out_b.array(np.float32, x.shape),
                                      np.maximum(m_in.array(np.float32, x.shape), 0))


def test_a_freed_bound_buffer_is_refused_not_written(rt: Any) -> None:
    x = np.ones((1, 4, 2, 2), np.float32)
    m_in, out = _mem(rt, x), _mem(rt)
    rt.bindInputTensor(0, m_in)
    rt.bindOutputTensor(0, out)
    rt.submit()
    rt.freeSystemMemory(out)
    fresh = _mem(rt)  # new memory, perhaps where the old one was
    fresh.array(np.uint8)[...] = 0x5A
    with pytest.raises(DlaError) as info:
        rt.submit()
    assert info.value.code in (NvError.BadParameter, NvError.InvalidState)
    assert (fresh.array(np.uint8) == 0x5A).all()
    rt.bindOutputTensor(0, fresh)
    rt.submit()
    np.testing.assert_array_equal(fresh.array(np.float32, x.shape), x)


def test_non_blocking_submits_use_the_prepared_tasks(rt: Any) -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2) - 8
    m_in, out = _mem(rt, x), _mem(rt)
    rt.bindInputTensor(0, m_in)
    rt.bindOutputTensor(0, out)
    for i in range(3):
        m_in.array(np.float32, x.shape)[...] = x * (i + 1)
        syncs = rt.submitNonBlocking()
        syncs[0].wait(5000)
        np.testing.assert_array_equal(out.array(np.float32, x.shape), np.maximum(x * (i + 1), 0))
