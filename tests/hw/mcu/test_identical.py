"""Headed and headless give bit-identical results: on the example model through pydla.Session, and on
random task graphs (mutated descriptors of a network using every block) through the KMD, where the
outcome (ran, or the error code) and every buffer's bytes must agree."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import pydla
from pydla import DlaError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from tests.kmd.test_random_descriptors import _mutate, _network

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_the_example_model_gives_the_same_bits_headed() -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    outputs = []
    for config in ("full", "full-headed"):
        with pydla.Session(EXAMPLES / "demo_model.onnx", config=config) as sess:
            outputs.append(sess.run({"input": x}))
    assert outputs[0].keys() == outputs[1].keys()
    for name, value in outputs[0].items():
        assert value.tobytes() == outputs[1][name].tobytes(), name


def _outcomes(config: str, blobs: list[bytes], mode: str) -> list[tuple[str, bytes]]:
    built = _network()
    dev = VirtualDevice(config, mode=mode)
    kmd = Kmd(VirtualDevicePort(dev))
    out = []
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(size).astype(np.float32)
              for name, size in (("x", 4 * 8 * 8), ("w", 8 * 4 * 9), ("b", 8))}
    try:
        for blob in blobs:
            built.descriptors = blob
            ctx = kmd.open_context()
            loaded = built.load(kmd, ctx)
            for name, values in inputs.items():
                kmd.bo_array(ctx, loaded.handles[name])[:] = values.view(np.uint8)
            try:
                kmd.submit(ctx, loaded.addresses, timeout_ms=2000).wait(10_000)
                outcome = "ran"
            except DlaError as e:
                outcome = e.code.name
            memory = b"".join(kmd.bo_array(ctx, loaded.handles[name]).tobytes()
                              for name in sorted(loaded.handles))
            out.append((outcome, memory))
            kmd.close_context(ctx)
    finally:
        kmd.close()
        dev.close()
    return out


@pytest.mark.parametrize(("mode", "count"), [("deterministic", 800), ("threaded", 80)])
def test_random_graphs_give_the_same_outcomes_and_bits_headed(mode: str, count: int) -> None:
    good = _network().descriptors
    blobs = [good]
    for seed in range(count):
        blob = bytearray(good)
        _mutate(blob, random.Random(seed))
        blobs.append(bytes(blob))
    headless = _outcomes("full", blobs, mode)
    headed = _outcomes("full-headed", blobs, mode)
    ran = 0
    for i, (a, b) in enumerate(zip(headless, headed, strict=True)):
        assert a[0] == b[0], f"graph {i}: headless {a[0]}, headed {b[0]}"
        assert a[1] == b[1], f"graph {i} ({a[0]}): the buffers differ"
        ran += a[0] == "ran"
    assert 0 < ran < len(blobs)  # both kinds of outcome were compared


def test_random_onnx_graphs_give_the_same_bits_headed() -> None:
    """Random ONNX graphs of the compiler's tests (convolutions, pooling, data movement), compiled once
    and run through pydla.Session on both kinds of device."""
    pytest.importorskip("onnxruntime")
    from pydla.compiler.api import compile_model
    from tests.compiler.test_random_graphs import random_model

    compared = 0
    for seed in range(30):
        model, x = random_model(seed)
        if not model.graph.node:
            continue
        try:
            blob = compile_model(model).blob
        except DlaError:
            continue  # a graph the compiler refuses is its tests' business
        outputs = []
        for config in ("full", "full-headed"):
            with pydla.Session(bytes(blob), config=config) as sess:
                outputs.append(sess.run({"x": x}))
        for name, value in outputs[0].items():
            assert value.tobytes() == outputs[1][name].tobytes(), f"seed {seed}: output {name}"
        compared += 1
    assert compared >= 20
