"""Under every fault the device's fault-injection API offers (an injected error of each code, a hang,
a wedged block, an MMU fault, a reset while a job runs), the command processor's path reports what
the per-operation path reports: the same DlaError (code and text), the same error events, and the
driver recovers the same way (the next job runs and is right)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError
from tests.cmdproc.rig import Rig, pair
from tests.kmd.support import Case, conv_sdp_pdp, diamond, fan_in

CODES = [e for e in R.dla_hw_error_e if e != R.dla_hw_error_e.NONE]
CASES: dict[str, Callable[[], Case]] = {"conv_sdp_pdp": conv_sdp_pdp, "diamond": diamond, "fan_in": fan_in}


def _blocks(make: Callable[[], Case]) -> list[str]:
    """The blocks the case's task uses (from a clean run's graph)."""
    rig = Rig.make("full")
    try:
        rig.load(make())
        rig.run(0)
        return [b.name for b in rig.kmd.history[-1].graph.blocks]
    finally:
        rig.close()


def _both(fault: Callable[[Rig], None], make: Callable[[], Case], *, tdr_ms: int = 10_000,
          mode: str = "deterministic", headed: bool = False) -> tuple[Rig, Rig]:
    rigs = pair(mode, headed, tdr_ms=tdr_ms)
    for rig in rigs:
        rig.load(make())
        fault(rig)
        rig.run(1)
        rig.failed_events = rig.op_events()
        rig.run(2)  # recovered: the next job runs
    return rigs


def _same_report(cp: Rig, reference: Rig) -> None:
    assert len(cp.errors) == len(reference.errors) == 1, (cp.errors, reference.errors)
    got, want = cp.errors[0], reference.errors[0]
    assert (got.code, got.message) == (want.code, want.message)
    # The failed job's events: the same error events; each block's operation events those of the
    # per-operation path, which may also have run operations of other branches enabled beside the
    # failing one (the command processor stops at the first failure): a prefix of them per block.
    failed, reference_failed = cp.failed_events, reference.failed_events
    assert [e for e in failed if e[0] == "error"] == [e for e in reference_failed if e[0] == "error"]
    mine, theirs = _by_block(failed), _by_block(reference_failed)
    assert mine.keys() <= theirs.keys()
    for block, events in mine.items():
        assert events == theirs[block][:len(events)], f"{block}'s events"
    for key, value in reference.outputs().items():
        np.testing.assert_array_equal(cp.outputs()[key], value, err_msg=f"output '{key}' after recovery")
    assert cp.dev.cp.runs >= 1, "the command processor ran the recovered job"


def _by_block(events: list[tuple[str, dict[str, object]]]) -> dict[object, list[object]]:
    out: dict[object, list[object]] = {}
    for event in events:
        out.setdefault(event[1]["block"], []).append(event)
    return out


@pytest.mark.parametrize("headed", [False, True], ids=["headless", "headed"])
@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
@pytest.mark.parametrize("name", sorted(CASES))
def test_an_injected_error_is_reported_the_same(name: str, code: R.dla_hw_error_e, headed: bool) -> None:
    make = CASES[name]
    for block in _blocks(make):
        cp, reference = _both(lambda rig, b=block: rig.dev.inject_error(b, int(code)), make, headed=headed)
        try:
            _same_report(cp, reference)
            # (an SDP operation fed by CONV fails as its pair: the CONV operation is named, on both paths)
            named = "CONV" if block == "SDP" and name == "conv_sdp_pdp" else block
            assert f"({named}) failed on the device: {code.name}" in cp.errors[0].message
        finally:
            cp.close()
            reference.close()


@pytest.mark.parametrize("headed", [False, True], ids=["headless", "headed"])
@pytest.mark.parametrize("wedge", [False, True], ids=["hang", "wedged"])
def test_a_hang_is_reported_the_same(wedge: bool, headed: bool) -> None:
    def fault(rig: Rig) -> None:
        rig.dev.inject_hang("PDP")
        if wedge:
            rig.dev.inject_wedge("PDP")
    cp, reference = _both(fault, conv_sdp_pdp, tdr_ms=300, headed=headed)
    try:
        _same_report(cp, reference)
        assert "hung: no operation completed for 300 ms" in cp.errors[0].message
        assert "operation 2 (PDP)" in cp.errors[0].message
        assert cp.kmd.stats()["recovery"] == reference.kmd.stats()["recovery"]
    finally:
        cp.close()
        reference.close()


def test_an_mmu_fault_is_reported_the_same() -> None:
    def fault(rig: Rig) -> None:
        assert rig.loaded is not None
        rig.dev.iommu.unmap(rig.ctx, rig.kmd.bo_iova(rig.ctx, rig.loaded.handles["z"]))
    cp, reference = pair()
    try:
        for rig in (cp, reference):
            rig.load(conv_sdp_pdp())
            fault(rig)
            rig.run(1)
        assert len(cp.errors) == len(reference.errors) == 1
        got, want = cp.errors[0], reference.errors[0]
        assert (got.code, got.message) == (want.code, want.message)
        assert "operation 2 (PDP) failed on the device: MMU_FAULT (access to" in cp.errors[0].message
        assert cp.op_events() == reference.op_events()  # a chain: the same operations ran
        assert cp.dev.state.fault == reference.dev.state.fault
    finally:
        cp.close()
        reference.close()


def test_a_reset_while_a_job_runs_abandons_it_threaded() -> None:
    """Threaded: the device resets the blocks under the command processor's job (the driver's abort);
    the job is abandoned (no interrupt), the next one runs from a clean device and is right."""
    cp = Rig.make("full", "threaded", tdr_ms=10_000)
    try:
        cp.load(conv_sdp_pdp())
        assert cp.case is not None and cp.loaded is not None
        cp.dev.inject_hang("PDP")
        cp.case.feed(cp.kmd, cp.ctx, cp.loaded, 1)
        job = cp.kmd.submit(cp.ctx, cp.loaded.addresses)
        for _ in range(1000):  # the command processor reaches PDP and hangs there
            if cp.dev.reg_read(R.GLB_CP_PROGRESS) == 2:
                break
            threading.Event().wait(0.005)
        assert cp.dev.reg_read(R.GLB_CP_PROGRESS) == 2
        assert cp.dev.reg_read(R.GLB_CP_STATUS) & 0xF == R.cp_status_e.RUNNING
        with cp.kmd._lock:
            assert job.run is not None
            cp.kmd.engine.abort(job.run, DlaError(0x4, "aborted by the test"))
        with pytest.raises(DlaError, match="aborted by the test"):
            job.wait(5000)
        expected = cp.case.feed(cp.kmd, cp.ctx, cp.loaded, 2)
        cp.kmd.submit(cp.ctx, cp.loaded.addresses).wait(5000)
        cp.case.check(cp.kmd, cp.ctx, cp.loaded, expected)
        assert cp.dev.reg_read(R.GLB_CP_STATUS) & 0xF == R.cp_status_e.DONE
        assert cp.dev.cp.runs == 1
    finally:
        cp.close()


def test_threaded_mode_runs_on_the_command_processor_thread() -> None:
    cp, reference = pair("threaded")
    try:
        for rig in (cp, reference):
            rig.load(diamond())
            for seed in range(5):
                rig.run(seed)
            assert not rig.errors
        for key, value in reference.outputs().items():
            np.testing.assert_array_equal(cp.outputs()[key], value)
        assert cp.dev.cp.runs == 5
        assert any(t.name.endswith("-CP") for t in cp.dev.state.threads)
    finally:
        cp.close()
        reference.close()
