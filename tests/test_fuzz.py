"""A short fuzz campaign over every reader of untrusted input (pydla.testing.fuzz): no exception but
DlaError, no hang, no corrupted loadable that runs and answers differently from the original, and no
loadable mutated behind its section digests (pydla.testing.fuzz_rehashed) that leaves the device
unusable. The long campaign: ``python bench/bench_fuzz.py`` (1,040,000 inputs). More here:
``PYDLA_FUZZ_CASES=20000 python -m pytest tests/test_fuzz.py``."""

from __future__ import annotations

import dataclasses
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
                 "nvdla-loadable": 1000, "nvdla-run": 150,
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


# -- loadables mutated behind their digests (pydla.testing.fuzz_rehashed) ---------------------------

REHASHED_CASES = 150
def _with_messages(target: Target) -> tuple[Target, list[str]]:
    """``target`` recording the message of each DlaError it raises."""
    from pydla.errors import DlaError

    messages: list[str] = []
    check = target.check

    def recording(data: bytes) -> None:
        try:
            check(data)
        except DlaError as e:
            messages.append(e.message)
            raise

    return dataclasses.replace(target, check=recording), messages


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_loadables_mutated_behind_their_digests_are_refused_or_run_and_the_device_stays_usable(
        loadable: bytes, mode: str) -> None:
    """Each case passes the integrity check (no message about a digest) and is refused by a reader
    behind it, or runs; after each, the original loadable runs bit for bit on the same runtime and on
    another context of the same device."""
    from pydla.testing.fuzz_rehashed import rehashed_target

    target, messages = _with_messages(rehashed_target(loadable, mode=mode))
    report = run_campaign([target], cases=CASES or REHASHED_CASES, seed=SEED, case_timeout_s=20)
    assert not report.findings, report.summary()
    assert not [m for m in messages if "SHA-256" in m or "digest" in m], messages
    name = target.name
    assert report.accepted[name] >= 0.1 * report.cases[name], report.summary()
    # The mutations reach every layer: the recipe, the tables, the control code, the KMD's checks
    # of the descriptors (task N: ...), and the device (a SHAVE tile, a block).
    layers = {"recipe": r"\.pydla\.recipe|recipe buffer",
              "tables": r"memory entry|tensor \d|\.pydla\.(memory|tensors)",
              "control code": r"\.pydla\.ctrl\.", "kmd": r"^task \d+: (?!SHAVE tile)",
              "device": r"SHAVE tile \d stopped|failed on the device"}
    reached = {layer for layer, pattern in layers.items() for m in messages if re.search(pattern, m)}
    assert reached == set(layers), (reached, messages)


def _runtime_at_the_conv_weights(blob: bytes) -> bytes:
    """``blob`` with the SHAVE runtime kernel's weights offset set to 0 (the convolution's weights,
    not an ELF file) and the digests rewritten: the tile refuses the START (BAD_ELF)."""
    import ctypes

    from pydla.deviceapi.generated import loadable as L
    from pydla.loadable.container import MEMORY
    from pydla.testing.fuzz_loadable_parts import build_loadable, split_loadable

    parts = split_loadable(blob)
    i = parts.index(MEMORY)
    assert i is not None
    name, data, align = parts.sections[i]
    size = ctypes.sizeof(L.dla_memory_entry_t)
    entries = [L.dla_memory_entry_t.from_buffer_copy(data, o) for o in range(0, len(data), size)]
    (runtime,) = [e for e in entries if e.name == b"shave_runtime"]
    runtime.weights_offset = 0
    parts.sections[i] = (name, b"".join(bytes(e) for e in entries), align)
    return build_loadable(parts)


def test_the_digests_are_rewritten_as_the_writer_writes_them(loadable: bytes) -> None:
    from pydla.errors import DlaError
    from pydla.loadable.container import Loadable
    from pydla.testing.fuzz_loadable_parts import rehash

    assert rehash(loadable) == loadable  # taken apart and built again: the same bytes
    bad = _runtime_at_the_conv_weights(loadable)
    Loadable(bad)  # passes every check of the container (the tile refuses it)
    from pydla.elf.reader import ElfReader
    from pydla.loadable.container import MEMORY

    at = ElfReader(bad).section_offset(MEMORY) + 4 * 96 + 80  # entry 4 (shave_runtime), weights_offset
    corrupt = bytearray(bad)
    corrupt[at] ^= 1  # without rewriting the digests
    with pytest.raises(DlaError, match=r"section '\.pydla\.memory' is corrupt: its SHA-256"):
        Loadable(bytes(corrupt))


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_a_shave_runtime_kernel_that_is_no_elf_is_refused_and_the_next_list_runs(loadable: bytes,
                                                                                  mode: str) -> None:
    """Found by the rehashed-threaded target: a case whose SHAVE runtime kernel the tile refuses at
    START left the device hanging the next list (once), in threaded mode."""
    from pydla.errors import DlaError
    from pydla.testing.fuzz_rehashed import rehashed_target

    target = rehashed_target(loadable, mode=mode)
    with pytest.raises(DlaError, match=r"SHAVE tile 0 stopped with BAD_ELF in the start of its runtime"):
        target.check(_runtime_at_the_conv_weights(loadable))
    target.check(loadable)


def test_the_rehashed_target_reports_a_device_left_unusable(loadable: bytes,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle works: with the SHAVE system's reset doing nothing, a list that fails leaves its
    tiles and barriers behind, the original loadable then hangs, and the case is an "unusable"
    finding; the next case gets a new device."""
    from pydla.hw.shave.system import ShaveSystem
    from pydla.testing.fuzz import DeviceUnusable
    from pydla.testing.fuzz_rehashed import rehashed_target

    target = rehashed_target(loadable, mode="deterministic")
    target.check(loadable)  # the device is built (its reset runs at power-on)
    monkeypatch.setattr(ShaveSystem, "reset", lambda self: None)
    with pytest.raises(DeviceUnusable, match=r"the original loadable fails on the case's runtime: "
                                             r"task \d+ of context \d+ hung"):
        target.check(_runtime_at_the_conv_weights(loadable))
    monkeypatch.undo()
    target.check(loadable)  # on a new device


def test_rehashed_mutations_are_seeded_and_reach_each_piece(loadable: bytes) -> None:
    from pydla.testing.fuzz_loadable_parts import Layouts, build_loadable, mutate_parts, split_loadable

    parts = split_loadable(loadable)
    layouts = Layouts.of(parts)
    cases = [build_loadable(mutate_parts(random.Random(f"r{i}"), parts, layouts)) for i in range(300)]
    assert cases == [build_loadable(mutate_parts(random.Random(f"r{i}"), parts, layouts)) for i in range(300)]
    changed: set[str] = set()
    for case in cases:
        mutated = split_loadable(case)
        if mutated.notes != parts.notes:
            changed.add("notes")
        before = {n: d for n, d, _ in parts.sections}
        after = {n: d for n, d, _ in mutated.sections}
        changed |= {n for n in before if n in after and after[n] != before[n]}
        changed |= {"structure"} if list(before) != list(after) else set()
    assert changed == {"notes", "structure", *(n for n, _, _ in parts.sections)}, changed
    # The descriptors are edited field by field: a control code keeps its ELF structure
    from pydla.elf.controlcode import ControlCode
    from pydla.errors import DlaError

    whole = 0
    original = {n: d for n, d, _ in parts.sections}
    for case in cases:
        for name, data, _ in split_loadable(case).sections:
            if name.startswith(".pydla.ctrl.") and data != original.get(name, data):
                try:
                    ControlCode(data)
                    whole += 1
                except DlaError:
                    pass
    assert whole >= 50, whole
