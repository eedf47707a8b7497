"""The engine scheduler on graph shapes: results against numpy references, the enable order against
the dependency rules (replayed from the register trace), and blocks running concurrently.

Every test uses a fresh device and one submit: resubmission is the driver tests' business.
"""

from __future__ import annotations

import time

import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware.program import STATUS
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Job
from tests.kmd.support import (
    COMPLETED,
    ENGINE_INTERNALS,
    PROGRAMMED,
    Case,
    MakeKmd,
    Replay,
    check_dependency_order,
    conv_sdp_pdp,
    copy_add_chain,
    diamond,
    drive,
    fan_in,
    fan_out,
    pdp_chain,
    per_operation_kmd,
    two_conv_pairs,
)

B = dla_block_e



pytestmark = pytest.mark.headless_only(ENGINE_INTERNALS)

@pytest.fixture
def make_kmd(make_kmd: MakeKmd) -> MakeKmd:
    """These tests inspect the per-operation path (its register traffic, the engine's enable order):
    their devices have no command processor (tests/cmdproc compares the two paths)."""
    return per_operation_kmd(make_kmd)


def run_traced(make_kmd: MakeKmd, case: Case, seed: int = 0) -> tuple[Job, Replay]:
    """Run ``case`` once on a fresh deterministic device with the register trace on; check its
    numbers and that the enable order obeys every dependency."""
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed)
    trace = dev.record_trace(True)
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=2000)
    job.wait(5000)
    dev.record_trace(False)
    case.check(kmd, ctx, loaded, expected)
    assert job.run is not None
    return job, check_dependency_order(trace, job.run)


def consumers(job: Job) -> dict[int, list[tuple[str, int, int]]]:
    """Operation -> its consumers as (block, index, event), as loaded."""
    return {op.index: [(c.block.name, c.index, c.event) for c in op.consumers] for op in job.graph.operations}


def test_chain_of_three_pdp(make_kmd: MakeKmd) -> None:
    job, _ = run_traced(make_kmd, pdp_chain(3))
    assert job.graph.chains[B.PDP] == (0, 1, 2)
    assert consumers(job) == {0: [("PDP", 1, PROGRAMMED)], 1: [("PDP", 2, PROGRAMMED)], 2: []}
    assert job.run is not None and job.run.enable_order == [0, 1, 2]
    # Two register groups: operation 2 reuses operation 0's group once 0 has completed.
    assert job.run.group_of == [0, 1, 0]


def test_diamond_with_elementwise_add(make_kmd: MakeKmd) -> None:
    """a (BDMA) -> b (PDP), a -> c (CDP), (b, c) -> d (SDP p + q)."""
    job, rp = run_traced(make_kmd, diamond(), seed=1)
    graph = consumers(job)
    assert ("PDP", 1, COMPLETED) in graph[0] and ("CDP", 2, COMPLETED) in graph[0]
    assert graph[1] == [("SDP", 3, COMPLETED)] and graph[2] == [("SDP", 3, COMPLETED)]
    assert job.graph.operations[3].dependency_count == 2
    assert job.run is not None and job.run.enable_order == [0, 1, 2, 3]
    # d waited for both b and c: it was enabled after the later of the two completions.
    assert rp.enabled[3] > max(rp.completed[1], rp.completed[2])
    # b and c were both enabled before either completed... in deterministic mode b runs inside its
    # enable write, so the concurrency is shown in step mode (test_fan_out_blocks_run_concurrently).
    assert rp.enabled[1] > rp.completed[0] and rp.enabled[2] > rp.completed[0]


def test_fan_out(make_kmd: MakeKmd) -> None:
    job, rp = run_traced(make_kmd, fan_out(), seed=2)
    assert sorted((c[0], c[1]) for c in consumers(job)[0]) == [("CDP", 2), ("PDP", 1), ("RUBIK", 3),
                                                               ("SDP", 4)]
    # The copy's completion releases its consumers in the order of its consumer slots (by block:
    # SDP, PDP, CDP, RUBIK).
    assert job.run is not None and job.run.enable_order == [0, 4, 1, 2, 3]
    assert all(rp.enabled[i] > rp.completed[0] for i in (1, 2, 3, 4))


def test_fan_in(make_kmd: MakeKmd) -> None:
    """Three producers on three blocks write channel slices of one cube; PDP reads the whole cube."""
    job, rp = run_traced(make_kmd, fan_in(), seed=3)
    assert job.graph.operations[3].dependency_count == 3
    for producer in (0, 1, 2):
        assert ("PDP", 3, COMPLETED) in consumers(job)[producer]
    assert job.run is not None and job.run.enable_order[-1] == 3
    assert rp.enabled[3] > max(rp.completed[i] for i in (0, 1, 2))


def test_fused_pairs_in_a_row(make_kmd: MakeKmd) -> None:
    """conv1 + sdp1 -> conv2 + sdp2 -> pdp. SDP 3 only waits for SDP 1 to be programmed (its chain)
    and is enabled before CONV 2, which waits for SDP 1's result; CONV 2 then runs with it."""
    job, rp = run_traced(make_kmd, two_conv_pairs(), seed=4)
    assert job.graph.chains[B.CONV] == (0, 2) and job.graph.chains[B.SDP] == (1, 3)
    assert [op.fused_parent for op in job.graph.operations] == [-1, 0, -1, 2, -1]
    assert ("CONV", 2, COMPLETED) in consumers(job)[1]
    assert ("PDP", 4, COMPLETED) in consumers(job)[3]
    assert job.run is not None and job.run.enable_order == [0, 1, 3, 2, 4]
    assert rp.completed[0] == rp.completed[1] < rp.enabled[2] < rp.completed[2] == rp.completed[3]


def test_conv_sdp_pdp(make_kmd: MakeKmd) -> None:
    job, rp = run_traced(make_kmd, conv_sdp_pdp(), seed=5)
    assert job.run is not None and job.run.enable_order == [0, 1, 2]
    assert rp.completed[0] == rp.completed[1] < rp.enabled[2]


def test_thousand_operation_chain(make_kmd: MakeKmd) -> None:
    """1000 operations alternating BDMA (copy a -> b) and SDP (b + 1 -> a), each waiting for the last."""
    case = copy_add_chain(500)
    dev, kmd = make_kmd()
    ctx = kmd.open_context()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=6)
    trace = dev.record_trace(True)
    start = time.perf_counter()
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=10_000)
    job.wait(20_000)
    elapsed = time.perf_counter() - start
    dev.record_trace(False)
    case.check(kmd, ctx, loaded, expected)
    assert job.run is not None
    assert job.run.enable_order == list(range(1000))
    assert max(op.dependency_count for op in job.graph.operations) == 2
    check_dependency_order(trace, job.run)
    assert elapsed < 10, f"1000 operations took {elapsed:.1f} s"


def _block_states(dev: VirtualDevice, blocks: list[dla_block_e]) -> dict[str, tuple[int, int]]:
    out = {}
    for b in blocks:
        status = dev.reg_read(STATUS[b])
        out[b.name] = (status & 3, status >> 16 & 3)
    return out


def test_fan_out_blocks_run_concurrently(make_kmd: MakeKmd) -> None:
    """Step mode: once the copy completed, the four consumers are enabled on four blocks at once."""
    case = fan_out()
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=7)
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=5000)
    kmd.poll()
    consumers_ = [B.PDP, B.CDP, B.RUBIK, B.SDP]
    enabled = int(R.group_state_e.ENABLED)
    assert _block_states(dev, [B.BDMA])["BDMA"][0] == enabled
    assert all(s == (0, 0) for s in _block_states(dev, consumers_).values()), "enabled before the copy"
    assert dev.step()  # the copy
    kmd.poll()
    states = _block_states(dev, consumers_)
    assert {name for name, (g0, _) in states.items() if g0 == enabled} == {"PDP", "CDP", "RUBIK", "SDP"}
    assert job.run is not None and job.run.enable_order == [0, 4, 1, 2, 3]
    drive(kmd, dev, [job])
    job.wait(1000)
    case.check(kmd, ctx, loaded, expected)


def test_threaded_blocks_overlap(make_kmd: MakeKmd) -> None:
    """Threaded mode: the fan-out completes with correct numbers with every block on its own thread."""
    case = fan_out()
    _, kmd = make_kmd(mode="threaded")
    ctx = kmd.open_context()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=8)
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=5000)
    job.wait(10_000)
    case.check(kmd, ctx, loaded, expected)
    assert job.run is not None and job.run.enable_order[0] == 0


@pytest.mark.parametrize("make_case", [pdp_chain, diamond, fan_in, two_conv_pairs])
def test_step_mode_gives_the_same_results(make_kmd: MakeKmd, make_case: object) -> None:
    """One operation per step: the order the engine enables in does not depend on device timing."""
    case = make_case()  # type: ignore[operator]
    dev, kmd = make_kmd(mode="step")
    ctx = kmd.open_context()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed=9)
    trace = dev.record_trace(True)
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=5000)
    drive(kmd, dev, [job])
    dev.record_trace(False)
    job.wait(1000)
    case.check(kmd, ctx, loaded, expected)
    assert job.run is not None
    check_dependency_order(trace, job.run)
