"""Mutated task descriptors: whatever bytes a UMD hands the KMD, a submit is refused with a DlaError,
or the job completes or fails with one; nothing else is raised, nothing hangs, nothing warns, and the
driver keeps serving. More mutations: ``PYDLA_RANDOM_DESCRIPTORS=50000 python -m pytest
tests/kmd/test_random_descriptors.py``.
"""

from __future__ import annotations

import collections
import os
import random
import time
import warnings

import numpy as np
import pytest

from pydla import DlaError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.loadable.taskbuilder import BuiltTask, TaskBuilder

MUTATIONS = int(os.environ.get("PYDLA_RANDOM_DESCRIPTORS", "3000"))
WORDS = (0, 1, 2, 3, 7, 255, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF)


def _network() -> BuiltTask:
    """CONV+SDP (bias, ReLU) -> PDP -> CDP -> SDP (element-wise add) -> BDMA: every kind of
    descriptor, dependencies and a fused pair."""
    tb = TaskBuilder()
    conv = tb.conv(tb.cube("x", (4, 8, 8)), tb.weights("w", (8, 4, 3, 3)), weight_shape=(8, 4, 3, 3),
                   pads=(1, 1, 1, 1))
    y = tb.cube("y", (8, 8, 8))
    p, q, r = (tb.cube(name, (8, 4, 4)) for name in "pqr")
    tb.sdp(conv, y, bias=tb.weights("b", (8,)), act="relu")
    tb.pdp(y, p, kernel=(2, 2), stride=(2, 2))
    tb.cdp(p, q, size=3)
    tb.sdp(q, r, ew=p, ew_op="add")
    tb.bdma(tb.ref("r", 8 * 16 * 4), tb.ref("z", 8 * 16 * 4), line_size=8 * 16 * 4)
    return tb.build()


def _mutate(blob: bytearray, rnd: random.Random) -> None:
    for _ in range(rnd.choice([1, 1, 2, 3, 8])):
        i = rnd.randrange(len(blob))
        kind = rnd.random()
        if kind < 0.4:
            blob[i] = rnd.randrange(256)
        elif kind < 0.7:
            blob[i] ^= 1 << rnd.randrange(8)
        elif i - i % 4 + 4 <= len(blob):
            j = i - i % 4
            blob[j:j + 4] = rnd.choice([*WORDS, rnd.getrandbits(32)]).to_bytes(4, "little")


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_mutated_descriptors_are_refused_or_run_and_the_driver_keeps_serving(mode: str) -> None:
    built = _network()
    good = built.descriptors
    dev = VirtualDevice("full", mode=mode)
    kmd = Kmd(VirtualDevicePort(dev))
    outcomes: collections.Counter[str] = collections.Counter()
    count = MUTATIONS if mode == "deterministic" else MUTATIONS // 10
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for seed in range(count):
                blob = bytearray(good)
                _mutate(blob, random.Random(seed))
                built.descriptors = bytes(blob)
                ctx = kmd.open_context()
                start = time.monotonic()
                try:
                    job = kmd.submit(ctx, built.load(kmd, ctx).addresses, timeout_ms=2000)
                    job.wait(10_000)
                    outcomes["ran"] += 1
                except DlaError as e:  # refused at submit, or the job failed on the device
                    outcomes[e.code.name] += 1
                assert time.monotonic() - start < 5, f"mutation {seed} took {time.monotonic() - start:.1f} s"
                kmd.close_context(ctx)
        built.descriptors = good
        ctx = kmd.open_context()
        loaded = built.load(kmd, ctx)
        rng = np.random.default_rng(0)
        for name, size in (("x", 4 * 8 * 8), ("w", 8 * 4 * 9), ("b", 8)):
            values = rng.standard_normal(size).astype(np.float32)
            kmd.bo_array(ctx, loaded.handles[name])[:] = values.view(np.uint8)
        kmd.submit(ctx, loaded.addresses, timeout_ms=2000).wait(10_000)
        z = kmd.bo_array(ctx, loaded.handles["z"]).view(np.float32)
        r = kmd.bo_array(ctx, loaded.handles["r"]).view(np.float32)
        assert np.isfinite(z).all() and np.array_equal(z, r) and np.count_nonzero(z) > z.size // 2
    finally:
        kmd.close()
        dev.close()
    # Both outcomes are reached: the mutations are neither all harmless nor all caught at once.
    assert outcomes["ran"] > count // 10 and sum(outcomes.values()) - outcomes["ran"] > count // 10, outcomes
