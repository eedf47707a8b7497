"""The command processor's path and the per-operation path (the reference) give the same outputs,
the same per-operation trace events (times aside), the same register state after the job."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from pydla.firmware.cmdbuf import units
from pydla.loadable.taskbuilder import TaskBuilder
from tests.cmdproc.rig import Rig, pair
from tests.kmd.support import (
    Case,
    conv_sdp_pdp,
    copy_add_chain,
    diamond,
    fan_in,
    fan_out,
    pdp_and_sdp,
    pdp_chain,
    single_pdp,
    two_conv_pairs,
)


def lut_case() -> Case:
    """SDP with a LUT activation (tanh), fed by a flying CONV, then a plain SDP."""
    tb = TaskBuilder()
    x, y, z = tb.cube("x", (3, 4, 5)), tb.cube("y", (4, 4, 5)), tb.cube("z", (4, 4, 5))
    grid = np.linspace(-4.0, 4.0, 33)
    conv = tb.conv(x, tb.weights("w", (4, 3, 1, 1)), weight_shape=(4, 3, 1, 1))
    tb.sdp(conv, y, act="lut", lut=tb.lut(np.tanh(grid), -4.0, 4.0))
    tb.sdp(y, z, act="relu")

    def reference(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        w = v["w"].reshape(4, 3)
        pre = np.einsum("kc,chw->khw", w.astype(np.float64), v["x"].astype(np.float64))
        table = np.interp(np.clip(pre, -4, 4), grid, np.tanh(grid))
        return {"z": np.maximum(table, 0).astype(np.float32)}
    return Case(tb.build(), {"x": (3, 4, 5), "w": (4, 3)}, {"z": (4, 4, 5)}, reference)


CASES: dict[str, Callable[[], Case]] = {
    "conv_sdp_pdp": conv_sdp_pdp, "pdp_chain": lambda: pdp_chain(5), "single_pdp": single_pdp,
    "pdp_and_sdp": pdp_and_sdp, "two_conv_pairs": two_conv_pairs, "diamond": diamond, "fan_out": fan_out,
    "fan_in": fan_in, "copy_add_chain": lambda: copy_add_chain(12), "lut": lut_case,
}


@pytest.fixture(params=["headless", "headed"])
def rigs(request: pytest.FixtureRequest) -> Iterator[tuple[Rig, Rig]]:
    cp, reference = pair(headed=request.param == "headed")
    yield cp, reference
    cp.close()
    reference.close()


Event = tuple[str, dict[str, object]]


def _by_block(events: list[Event]) -> dict[object, list[Event]]:
    out: dict[object, list[Event]] = {}
    for name, record in events:
        out.setdefault(record["block"], []).append((name, record))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_two_paths_agree(rigs: tuple[Rig, Rig], name: str) -> None:
    cp, reference = rigs
    for rig in rigs:
        rig.load(CASES[name]())
    for seed in (1, 2, 3):  # the first run decodes, the others reuse the decoded job
        for rig in rigs:
            job = rig.run(seed)
            assert not rig.errors, rig.errors
            assert job.run is not None
        got, want = cp.outputs(), reference.outputs()
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name}: output '{key}', run {seed}")
        assert cp.registers() == reference.registers(), f"{name}: register state after run {seed}"
    # Every operation's events, in each block's order, the same (the blocks may interleave otherwise)
    events, reference_events = cp.op_events(), reference.op_events()
    assert len(events) == len(reference_events) > 0
    assert _by_block(events) == _by_block(reference_events)
    graph = cp.kmd.history[-1].graph
    assert cp.dev.cp.runs == 3 and cp.dev.cp.decodes == len(units(graph)), "decoded once, then reused"
    assert reference.dev.cp.runs == 0


def test_numbers_are_right(rigs: tuple[Rig, Rig]) -> None:
    """Not only the same: right (the reference computes them in numpy)."""
    cp, _ = rigs
    for make in CASES.values():
        case = make()
        cp.load(case)
        assert cp.case is not None and cp.loaded is not None
        expected = case.feed(cp.kmd, cp.ctx, cp.loaded, 7)
        cp.kmd.submit(cp.ctx, cp.loaded.addresses).wait(10_000)
        case.check(cp.kmd, cp.ctx, cp.loaded, expected)
    assert cp.dev.cp.runs == len(CASES)


def test_prepared_jobs_and_one_doorbell_per_submit(rigs: tuple[Rig, Rig]) -> None:
    """A prepared job's command buffer is written at prepare; each submit writes the doorbell once and
    the device interrupts once."""
    cp, reference = rigs
    for rig in rigs:
        rig.load(conv_sdp_pdp())
    prepared = [rig.kmd.prepare(rig.ctx, rig.loaded.addresses) for rig in rigs]  # type: ignore[union-attr]
    if cp.dev.mcu is not None:
        pytest.skip("headed: the firmware writes its command buffer at the task's start, unseen by the host")
    assert cp.kmd.cmdbufs.built == 1 and len(cp.kmd.cmdbufs) == 1
    trace = cp.dev.record_trace(True)
    cp.run(4, prepared=prepared[0])
    reference.run(4, prepared=prepared[1])
    cp.dev.record_trace(False)
    writes = [a for a in trace if a.op == "W"]
    assert [a.name for a in writes if a.name.startswith("GLB_CP_DOORBELL")] == ["GLB_CP_DOORBELL"]
    assert not [a for a in writes if "_D_" in a.name], "no block register written by the host"
    assert len([a for a in trace if a.op == "R" and a.name == "GLB_INTR_STATUS"]) == 1
    for key, value in reference.outputs().items():
        np.testing.assert_array_equal(cp.outputs()[key], value)
    assert cp.kmd.cmdbufs.built == 1


def test_a_new_binding_gets_a_new_command_buffer_and_the_old_one_is_freed(rigs: tuple[Rig, Rig]) -> None:
    cp, _ = rigs
    if cp.dev.mcu is not None:
        pytest.skip("headed: the firmware's command buffers (tests/cmdproc/test_switch.py)")
    cp.load(single_pdp())
    assert cp.loaded is not None
    first = cp.kmd.prepare(cp.ctx, cp.loaded.addresses)
    buffers = len(cp.dev.memory.buffers)
    cp.kmd.release_prepared(cp.ctx, first)
    other = single_pdp().load(cp.kmd, cp.ctx)  # other buffers: another binding
    second = cp.kmd.prepare(cp.ctx, other.addresses)
    assert cp.kmd.cmdbufs.built == 2
    # the first one's graph is gone: its buffer freed when the second was made (one more for the
    # second task's own buffers, none for its command buffer on top of the first's)
    assert len(cp.dev.memory.buffers) == buffers + len(other.handles)
    cp.kmd.submit_prepared(cp.ctx, second).wait(5000)
    cp.kmd.close_context(cp.ctx)
    assert len(cp.kmd.cmdbufs) == 0
