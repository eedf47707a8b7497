"""The virtual device as parts it owns: the host's register accesses are the register file's own
methods (one call each, also through the in-process KMD port), the parts share one state, and a
device reset reaches every part that a reset concerns."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from pydla.hw.faults import DEVICE_RESET_BIT
from pydla.hw.regfile import RegisterFile

HW = Path(__file__).resolve().parents[2] / "pydla" / "hw"
PARTS = ("regfile", "execution", "irq", "faults", "compute_units", "trace_out", "state")


@pytest.fixture
def dev() -> VirtualDevice:
    return VirtualDevice("full")


def test_register_access_is_the_register_files_own_methods(dev: VirtualDevice) -> None:
    for name in ("reg_read", "reg_write", "reg_write_many", "reg_write_words"):
        bound = getattr(dev, name)
        assert bound.__self__ is dev.regs and bound.__func__ is getattr(RegisterFile, name), name
    port = VirtualDevicePort(dev)
    assert port.dla_reg_write.__self__ is dev.regs  # type: ignore[attr-defined]
    assert port.dla_reg_read.__func__ is RegisterFile.reg_read  # type: ignore[attr-defined]


def test_the_parts_share_one_state(dev: VirtualDevice) -> None:
    state = dev.state
    for part in (dev.regs, dev.execution, dev.irq, dev.faults, dev.units, dev.tiles, dev.trace_out):
        assert part._state is state, type(part).__name__  # type: ignore[attr-defined]
    dev.reg_write(R.GLB_INTR_MASK, 0x5)
    assert state.intr_mask == dev.intr_mask == dev.reg_read(R.GLB_INTR_MASK) == 0x5
    dev.reg_read(0x7FFFC)  # no register there
    assert state.bus_errors == dev.bus_errors == 1
    assert dev.log is state.log and dev.glb_extra is dev.regs.glb_extra


def test_a_device_reset_reaches_the_parts(dev: VirtualDevice) -> None:
    dev.inject_hang("PDP", 2)
    dev.reg_write(R.GLB_INTR_SET, 0x3)
    assert dev.faults.block("PDP").hangs == 2 and dev.intr_status == 0x3
    dev.reg_write(R.GLB_RESET, 1 << DEVICE_RESET_BIT)
    assert dev.faults.block("PDP").hangs == 0 and dev.intr_status == 0
    assert dev.units.intr_status == 0 and dev.trace_mask == 0
    assert dev.log[-1].startswith("reset of BDMA")


def test_no_part_imports_the_device() -> None:
    """The parts are given what they call; none reaches up for the device that owns them."""
    for name in (*PARTS, "shave/part"):
        tree = ast.parse((HW / f"{name}.py").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "pydla.hw.device" not in imported, name
