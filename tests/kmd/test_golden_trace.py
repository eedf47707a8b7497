"""The register trace of a small CONV + SDP + PDP task in deterministic mode, against a golden file.

Every register access the driver makes for one submit (programming, enabling, the ISR's reads and
clears) is recorded, one ``RegAccess`` per line. The trace must be the same on every run and equal
to ``golden/conv_sdp_pdp_trace.txt``. When a change to the driver is meant to change it, regenerate
the file and review the diff::

    PYDLA_UPDATE_GOLDEN=1 /tmp/dev/bin/python -m pytest tests/kmd/test_golden_trace.py
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import numpy as np

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from tests.kmd.support import conv_sdp_pdp, per_operation

GOLDEN = Path(__file__).parent / "golden" / "conv_sdp_pdp_trace.txt"
UPDATE_ENV = "PYDLA_UPDATE_GOLDEN"
REGENERATE = f"{UPDATE_ENV}=1 python -m pytest tests/kmd/test_golden_trace.py"


def record_conv_sdp_pdp_trace(seed: int = 0) -> tuple[list[str], dict[str, np.ndarray]]:
    """Run conv_sdp_pdp once on a fresh deterministic "full" device; return the trace lines recorded
    from just before submit to completion, and the task's outputs (for checking the numbers)."""
    dev = VirtualDevice(per_operation("full"), mode="deterministic")  # the per-operation path's trace
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        ctx = kmd.open_context()
        case = conv_sdp_pdp()
        loaded = case.load(kmd, ctx)
        expected = case.feed(kmd, ctx, loaded, seed)
        trace = dev.record_trace(True)
        kmd.submit(ctx, loaded.addresses, timeout_ms=5000).wait(10_000)
        dev.record_trace(False)
        case.check(kmd, ctx, loaded, expected)
        return [str(access) for access in trace], case.result(kmd, ctx, loaded)
    finally:
        kmd.close()
        dev.close()


def write_golden_trace(path: Path = GOLDEN) -> list[str]:
    """(Re)generate the golden file from the current driver."""
    lines, _ = record_conv_sdp_pdp_trace()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return lines


def test_trace_is_stable_across_runs() -> None:
    """Same task, other input numbers: the same register accesses (the data never reach a register)."""
    first, out1 = record_conv_sdp_pdp_trace(seed=0)
    second, out2 = record_conv_sdp_pdp_trace(seed=1)
    assert first == second
    assert not np.array_equal(out1["z"], out2["z"])


def test_trace_matches_golden() -> None:
    if os.environ.get(UPDATE_ENV) == "1":
        write_golden_trace()
    assert GOLDEN.is_file(), f"{GOLDEN} is missing; generate it with: {REGENERATE}"
    want = GOLDEN.read_text().splitlines()
    got, _ = record_conv_sdp_pdp_trace()
    if got != want:
        diff = "\n".join(difflib.unified_diff(want, got, "golden", "now", lineterm="", n=2))
        lines = diff.splitlines()
        shown = "\n".join(lines[:80])
        if len(lines) > 80:
            shown += f"\n... ({len(lines) - 80} more diff lines)"
        raise AssertionError(f"the register trace differs from {GOLDEN.name}:\n{shown}\n"
                             f"If the change is intended, regenerate it with: {REGENERATE}")


def test_golden_trace_has_the_expected_shape() -> None:
    """A sanity check of the golden file itself, so a broken regeneration is noticed."""
    lines = GOLDEN.read_text().splitlines()
    enables = [ln for ln in lines if "_D_OP_ENABLE" in ln and ln.startswith("W ")]
    assert [ln.split("_", 1)[0] for ln in enables] == ["W CONV", "W SDP", "W PDP"]
    assert all(ln.endswith("= 0x1") for ln in enables)
    assert any(ln.startswith("R GLB_INTR_STATUS") for ln in lines)
    assert sum(ln.startswith("W CONV_D_CTX_ID") for ln in lines) == 1
