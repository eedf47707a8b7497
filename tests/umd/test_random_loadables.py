"""Corrupted loadables: a compiled network with random bytes changed is refused by ``load`` with a
DlaError (almost always: the section digests catch a changed byte of any section), or loads and then
runs or fails with one; nothing else is raised, nothing hangs, nothing warns, and the runtime goes
on loading. (That a corrupted loadable which runs gives the original's outputs is the fuzz
campaign's check: tests/test_fuzz.py.) (A recipe section that is not UTF-8 raised
UnicodeDecodeError before this test.) More mutations: ``PYDLA_RANDOM_LOADABLES=20000 python -m
pytest tests/umd/test_random_loadables.py``.
"""

from __future__ import annotations

import collections
import os
import random
import time
import warnings

import pytest

import pydla
from pydla import DlaError, NvError
from pydla.loadable.recipe import loads

MUTATIONS = int(os.environ.get("PYDLA_RANDOM_LOADABLES", "600"))


@pytest.fixture(scope="module")
def blob() -> bytes:
    from pydla.compiler.api import compile_model
    from pydla.demo import build_demo_model

    return compile_model(build_demo_model()).blob


def _load_and_run(rt: pydla.IRuntime, data: bytes) -> str:
    rt.load(data)
    mems = []
    try:
        for i in range(rt.getNumInputTensors()):
            mems.append(rt.allocateSystemMemory(rt.getInputTensorDesc(i).size))
            rt.bindInputTensor(i, mems[-1])
        for i in range(rt.getNumOutputTensors()):
            mems.append(rt.allocateSystemMemory(rt.getOutputTensorDesc(i).size))
            rt.bindOutputTensor(i, mems[-1])
        rt.submit()
        return "ran"
    except DlaError as e:
        return f"run {e.code.name}"
    finally:
        rt.unload()
        for mem in mems:
            rt.freeSystemMemory(mem)


def test_corrupted_loadables_are_refused_or_run(blob: bytes) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    with pydla.createRuntime(timeout_ms=3000) as rt, warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in range(MUTATIONS):
            rnd = random.Random(seed)
            data = bytearray(blob)
            for _ in range(rnd.choice([1, 1, 2, 4, 16])):
                i = rnd.randrange(len(data))
                data[i] = rnd.randrange(256) if rnd.random() < 0.5 else data[i] ^ 1 << rnd.randrange(8)
            start = time.monotonic()
            try:
                outcomes[_load_and_run(rt, bytes(data))] += 1
            except DlaError as e:
                outcomes[f"load {e.code.name}"] += 1
            assert time.monotonic() - start < 5, f"mutation {seed}"
        assert _load_and_run(rt, blob) == "ran"
    refused = sum(n for k, n in outcomes.items() if k.startswith("load"))
    # What still loads changed only ELF bookkeeping (padding, addresses, flags) the digests leave out.
    assert refused > MUTATIONS * 0.8 and outcomes["ran"] > 0, outcomes


def test_a_recipe_that_is_not_utf8_is_a_dlaerror() -> None:
    with pytest.raises(DlaError, match=r"recipe: not UTF-8 text \(byte 1") as e:
        loads(b'{\xff"header": {}}')
    assert e.value.code == NvError.BadValue
    assert loads(b'{"a": 1}') == {"a": 1}
