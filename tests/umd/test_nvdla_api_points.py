"""Three points of the NVDLA runtime API as its documentation writes them: NvDlaMemWrite's Size,
ILoadable::TensorDescListEntry, ISync::setWaitValue (its wait, its signal, a submit waiting on it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.loadable.container import TensorDesc
from pydla.platform import open_port


@pytest.mark.parametrize("src", [b"abcdefgh", bytearray(b"abcdefgh"), np.frombuffer(b"abcdefgh", np.uint8),
                                 np.frombuffer(b"abcdefgh", np.uint16)])
def test_mem_write_writes_size_bytes_of_src(src: Any) -> None:
    with open_port("inprocess", "small") as port:
        h = port.NvDlaOpen(0)
        mem, _ = port.NvDlaGetMem(h, 16)
        port.NvDlaMemWrite(mem, 0, b"\xff" * 16)
        port.NvDlaMemWrite(mem, 2, src, 5)
        assert port.NvDlaMemRead(mem, 0, 16) == b"\xff\xffabcde" + b"\xff" * 9
        port.NvDlaMemWrite(mem, 0, src, 0)  # nothing
        assert port.NvDlaMemRead(mem, 0, 2) == b"\xff\xff"
        port.NvDlaMemWrite(mem, 8, src)  # without Size: all of src
        assert port.NvDlaMemRead(mem, 8, 8) == b"abcdefgh"


@pytest.mark.parametrize(("size", "code", "text"), [
    (9, NvError.BadParameter, "NvDlaMemWrite: size 9 must be 0..8 (the bytes src holds)"),
    (-1, NvError.BadParameter, "NvDlaMemWrite: size -1 must be 0..8"),
    (True, NvError.BadParameter, "NvDlaMemWrite: size True"),
    ("8", NvError.BadParameter, "NvDlaMemWrite: size '8'"),
])
def test_mem_write_refuses_a_size_src_does_not_hold(size: Any, code: NvError, text: str) -> None:
    with open_port("inprocess", "small") as port:
        h = port.NvDlaOpen(0)
        mem, _ = port.NvDlaGetMem(h, 16)
        with pytest.raises(DlaError) as e:
            port.NvDlaMemWrite(mem, 0, b"abcdefgh", size)
        assert e.value.code == code and text in e.value.message
        assert port.NvDlaMemRead(mem, 0, 8) == bytes(8)  # nothing written


def test_mem_write_size_past_the_memory_is_refused() -> None:
    with open_port("inprocess", "small") as port:
        h = port.NvDlaOpen(0)
        mem, _ = port.NvDlaGetMem(h, 16)
        with pytest.raises(DlaError) as e:
            port.NvDlaMemWrite(mem, 12, b"abcdefgh", 6)
        assert e.value.code == NvError.InvalidSize
        port.NvDlaMemWrite(mem, 12, b"abcdefgh", 4)  # what fits
        assert port.NvDlaMemRead(mem, 12, 4) == b"abcd"


def test_tensor_desc_list_entry_is_the_tensor_desc() -> None:
    from pydla.compiler.api import compile_model
    from pydla.demo import build_demo_model

    assert pydla.ILoadable.TensorDescListEntry is TensorDesc
    with pydla.createRuntime() as rt:
        rt.load(compile_model(build_demo_model()).blob)
        desc = rt.getInputTensorDesc(0)
        assert isinstance(desc, pydla.ILoadable.TensorDescListEntry)


def test_set_wait_value_moves_what_wait_and_signal_mean() -> None:
    with pydla.createRuntime() as rt:
        sync = rt.createSync()
        assert sync.getWaitValue() == 1
        sync.setWaitValue(3)
        assert sync.getWaitValue() == 3
        with pytest.raises(DlaError) as e:
            sync.wait(0)
        assert e.value.code == NvError.Timeout
        sync.signal()  # reaches 3
        sync.wait(0)
        assert sync.getValue() == 3
        later = rt.createSync()
        later.setWaitValue(2)
        for bad in (-1, 1 << 32, True, 1.0, "2", None):
            with pytest.raises(DlaError) as e:
                later.setWaitValue(bad)  # type: ignore[arg-type]
            assert e.value.code == NvError.BadParameter and "ISync.setWaitValue: val" in e.value.message
        assert later.getWaitValue() == 2


def test_a_submit_waits_for_the_wait_value_set() -> None:
    from pydla.compiler.api import compile_model
    from pydla.demo import build_demo_model

    with pydla.createRuntime() as rt:
        rt.load(compile_model(build_demo_model()).blob)
        for i in range(rt.getNumInputTensors()):
            rt.bindInputTensor(i, rt.allocateSystemMemory(rt.getInputTensorDesc(i).size))
        for i in range(rt.getNumOutputTensors()):
            rt.bindOutputTensor(i, rt.allocateSystemMemory(rt.getOutputTensorDesc(i).size))
        gate = rt.createSync()
        gate.setWaitValue(2)
        (done,) = rt.submitNonBlocking(wait_for=[gate])  # waits for the gate to reach 2
        gate.setWaitValue(1)
        gate.signal()  # the gate reaches 1: not yet the 2 the submit waits for
        with pytest.raises(DlaError) as e:
            done.wait(100)
        assert e.value.code == NvError.Timeout and gate.getValue() == 1
        gate.setWaitValue(2)
        gate.signal()
        done.wait(10_000)
        assert done.getValue() == done.getWaitValue()
