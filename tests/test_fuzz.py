"""A short fuzz campaign over every reader of untrusted input (pydla.testing.fuzz): no exception but
DlaError, no hang, and no corrupted loadable that runs and answers differently from the original.
The long campaign: ``python bench/bench_fuzz.py --cases 1000000``. More here:
``PYDLA_FUZZ_CASES=20000 python -m pytest tests/test_fuzz.py``."""

from __future__ import annotations

import os
import random
import re
import sys

import pytest

from pydla.testing.fuzz import SilentDifference, Target, mutate, run_campaign, standard_targets

CASES = int(os.environ.get("PYDLA_FUZZ_CASES", "0"))
# Inputs per target in the suite: the slow readers (a loadable is loaded and run) get fewer.
DEFAULT_CASES = {"loadable": 1500, "control-code": 1500, "recipe": 4000, "kernel-elf": 1500,
                 "device-api": 20_000, "trace-ring": 8000, "device-config": 8000, "ioctl": 30_000,
                 "nvdla-loadable": 1000,
                 "shave-kernel": 200,
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


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_hostile_shave_kernels_end_in_a_named_fault_or_run(mode: str) -> None:
    """Each hand-written payload (privilege changes, CSR writes of every class, wfi, ecall, accesses
    and jumps outside the windows, endless loops) is a one-line DlaError naming the tile's error, or
    runs; after each, the canary kernel gives the right bits on the same tile."""
    from pydla.deviceapi.generated.dla_regs import shave_error_e
    from pydla.testing.fuzz_shave import HOSTILE, ShaveBench

    names = {e.name for e in shave_error_e} - {"NONE"}
    outcomes: dict[str, str | None] = {}
    with ShaveBench(mode=mode) as bench:
        bench.check_canary("nothing")
        for name in HOSTILE:
            error = bench.run_payload(name)
            bench.check_canary(name)  # RuntimeError if the device is not usable
            outcomes[name] = None
            if error is not None:
                found = re.search(r"SHAVE tile 0 stopped with (\w+)", error.message)
                assert found and found.group(1) in names and "\n" not in error.message, (name, error)
                outcomes[name] = found.group(1)
    expected = {"mret": "FETCH_FAULT", "mret_to_user": None, "uret": "ILLEGAL_INSTRUCTION",
                "wfi": "ILLEGAL_INSTRUCTION", "ecall": "TRAP", "ebreak": "TRAP", "frm_towards_zero": None,
                "fp_off": None, "paging_and_mprv": "READ_FAULT", "load_null": "READ_FAULT",
                "store_code": "WRITE_FAULT", "store_runtime": "WRITE_FAULT", "pop_from_kernel": "BAD_ACCESS",
                "jump_args": "FETCH_FAULT", "jump_cmx": "FETCH_FAULT", "jump_runtime": "BAD_ACCESS",
                "loop": "BUDGET", "stack_forever": "WRITE_FAULT", "csr_machine_mstatus_ones": None,
                "csr_machine_ro_mvendorid_ones": "ILLEGAL_INSTRUCTION", "csr_user_counter_ro_zero":
                "ILLEGAL_INSTRUCTION"}
    assert {k: outcomes[k] for k in expected} == expected
    assert sum(v is None for v in outcomes.values()) >= 10  # some ran (and changed the hart's state)


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


# -- ONNX graphs (pydla.testing.fuzz_onnx) ----------------------------------------------------------

ONNX_CASES = 1000


def test_onnx_graphs_are_refused_in_one_line_or_compiled_as_onnxruntime_runs_them(loadable: bytes) -> None:
    from pydla.testing.fuzz_onnx import KINDS, case_model

    (target,) = standard_targets(loadable, only=["onnx"])
    report = run_campaign([target], cases=CASES or ONNX_CASES, seed=SEED, case_timeout_s=20)
    assert not report.findings, report.summary()
    # every kind of case reached the compiler; some were refused, some compiled and compared
    assert report.refused["onnx"] > 0.5 * report.cases["onnx"], report.summary()
    assert report.accepted["onnx"] >= 0.03 * report.cases["onnx"], report.summary()
    kinds = {KINDS[seed[0] % len(KINDS)] for seed in target.seeds}
    assert kinds == set(KINDS) and len({case_model(s)[0] for s in target.seeds}) == len(target.seeds)


def test_the_onnx_target_finds_an_invalid_model_compiled_and_a_message_of_two_lines(
        loadable: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle works: with the graph rules switched off, invalid models compile (silent findings);
    with a message of two lines, a finding names it."""
    import pydla.compiler.graph as graph
    from pydla.errors import DlaError, NvError
    from pydla.testing.fuzz_onnx import onnx_target

    monkeypatch.setattr(graph, "check_model_rules", lambda model: None)
    monkeypatch.setattr(graph, "check_names", lambda g, ios: None)
    report = run_campaign([onnx_target()], cases=300, seed=SEED, case_timeout_s=20)
    assert any(f.kind == "silent" and "an invalid model was compiled" in f.detail for f in report.findings)
    monkeypatch.undo()

    def two_lines(*args: object, **kwargs: object) -> None:
        raise DlaError(NvError.BadValue, "first line\nsecond line")

    import pydla.compiler.onnx_model as onnx_model

    monkeypatch.setattr(onnx_model, "check_model_bytes", two_lines)
    report = run_campaign([onnx_target()], cases=30, seed=SEED, case_timeout_s=20)
    assert any(f.kind == "exception" and "MessageNotOneLine" in f.detail for f in report.findings)


def test_onnx_cases_are_reproduced_from_their_descriptor() -> None:
    import onnx
    import onnxruntime as ort

    from pydla.testing.fuzz_onnx import BASES, breaks_rules, case_model, seeds

    for data in seeds():
        assert case_model(data) == case_model(data)
    for m in BASES:
        assert not breaks_rules(m)
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    broken = onnx.ModelProto()
    broken.CopyFrom(BASES[0])
    broken.graph.node[1].output[0] = broken.graph.node[0].output[0]
    assert breaks_rules(broken)
