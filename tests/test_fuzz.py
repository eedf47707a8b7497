"""A short fuzz campaign over every reader of untrusted input (pydla.testing.fuzz): no exception but
DlaError, no hang, and no corrupted loadable that runs and answers differently from the original.
The long campaign: ``python bench/bench_fuzz.py --cases 1000000``. More here:
``PYDLA_FUZZ_CASES=20000 python -m pytest tests/test_fuzz.py``."""

from __future__ import annotations

import os
import random
import sys

import pytest

from pydla.testing.fuzz import SilentDifference, Target, mutate, run_campaign, standard_targets

CASES = int(os.environ.get("PYDLA_FUZZ_CASES", "0"))
# Inputs per target in the suite: the slow readers (a loadable is loaded and run) get fewer.
DEFAULT_CASES = {"loadable": 1500, "control-code": 1500, "recipe": 4000, "kernel-elf": 1500,
                 "device-api": 20_000, "trace-ring": 8000, "device-config": 8000, "ioctl": 30_000,
                 "ring": 400}
SEED = 20261125


@pytest.fixture(scope="module")
def loadable() -> bytes:
    from pydla.compiler.api import compile_model
    from pydla.demo import build_demo_model

    return bytes(compile_model(build_demo_model()).blob)


@pytest.mark.parametrize("name", list(DEFAULT_CASES))
def test_readers_raise_only_dla_errors_and_never_answer_wrongly(loadable: bytes, name: str) -> None:
    if name in ("ioctl", "ring") and not sys.platform.startswith("linux"):
        pytest.skip("the KMD daemon is Linux's")
    (target,) = standard_targets(loadable, only=[name])
    report = run_campaign([target], cases=CASES or DEFAULT_CASES[name], seed=SEED, case_timeout_s=20)
    assert not report.findings, report.summary()
    assert report.refused[name] > 0, "no mutation was refused: the mutator is not reaching the reader"
    if name == "loadable":
        # the digests refuse almost every change; what loads changed only ELF bookkeeping
        assert report.refused[name] > 0.8 * report.cases[name], report.summary()


def test_the_campaign_reports_what_it_is_looking_for() -> None:
    """The campaign itself: an exception other than DlaError, a silent difference and a hang are
    each a finding with the input that caused it, reproducible from the seed."""
    def check(data: bytes) -> None:
        kind = sum(data) % 5
        if kind == 1:
            raise IndexError("boom")
        if kind == 2:
            raise SilentDifference("answered 2")
        if kind == 3:
            while True:
                pass

    target = Target("toy", [bytes([0] * 8)], check)
    report = run_campaign([target], cases=60, seed=1, case_timeout_s=0.05)
    kinds = {f.kind for f in report.findings}
    assert kinds == {"exception", "silent", "hang"}, report.summary()
    boom = next(f for f in report.findings if f.kind == "exception")
    assert sum(boom.data) % 5 == 1 and "IndexError" in boom.detail and "boom" in boom.detail
    again = run_campaign([target], cases=60, seed=1, case_timeout_s=0.05)
    assert [(f.case, f.kind) for f in again.findings] == [(f.case, f.kind) for f in report.findings]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the KMD daemon is Linux's")
def test_the_ring_target_reports_a_daemon_that_fails_on_a_hostile_ring(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ring target can fail: a daemon whose ring thread raises on the hostile client's second
    entry is a finding (the error it logged), and the other client is still served."""
    import os

    from pydla.linux.ring_server import ServedRing
    from pydla.testing.fuzz_ring import ring_target

    real_take = ServedRing.take

    def take(ring: ServedRing) -> object:
        sqe = real_take(ring)
        if sqe is not None and ring.client.pid != os.getpid() and sqe.user_data == 11:
            raise ValueError("a bug on the hostile ring")
        return sqe

    monkeypatch.setattr(ServedRing, "take", take)
    target = ring_target()
    report = run_campaign([target], cases=20, seed=SEED, case_timeout_s=20)
    found = [f for f in report.findings if "a bug on the hostile ring" in f.detail]
    assert found and all(f.kind == "exception" for f in found), report.summary()
    assert not [f for f in report.findings if "another client" in f.detail], report.summary()


def test_mutations_are_seeded_and_change_the_input() -> None:
    data = bytes(range(256)) * 4
    a = [mutate(random.Random(f"s{i}"), data, elf=True) for i in range(50)]
    b = [mutate(random.Random(f"s{i}"), data, elf=True) for i in range(50)]
    assert a == b
    assert sum(m != data for m in a) >= 45
