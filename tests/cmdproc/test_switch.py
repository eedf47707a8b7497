"""Which devices and tasks use the command processor: pydla's own ``full`` and ``full-headed`` (there
the microcontroller's firmware submits to it); not ``small``, not a configuration with ``"engine":
{"command_processor": false}``, never an NVDLA one, not a step device; a task with a SHAVE list beside
its operations takes the per-operation path (explicitly: no command buffer is made for it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.target.config import load_config
from tests.kmd.support import single_pdp
from tests.kmd.test_shave_barriers import _relu_then_clamp, _run, _x

CONFIGS = Path(__file__).resolve().parents[2] / "pydla" / "target" / "configs"


def _run_single_pdp(config: object, mode: str = "deterministic") -> tuple[VirtualDevice, Kmd]:
    dev = VirtualDevice(load_config(config), mode=mode)  # type: ignore[arg-type]
    kmd = Kmd(VirtualDevicePort(dev))
    ctx = kmd.open_context()
    case = single_pdp()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, 3)
    job = kmd.submit(ctx, loaded.addresses)
    if mode == "step":
        while not job.done:
            dev.step()
            kmd.poll()
    job.wait(5000)
    case.check(kmd, ctx, loaded, expected)
    return dev, kmd


@pytest.mark.parametrize(("config", "mode", "used"), [
    ("full", "deterministic", True), ("full", "threaded", True), ("full", "step", False),
    ("small", "deterministic", False), ("full-headed", "deterministic", True),
    ("full-headed", "threaded", True)])
def test_who_uses_it(config: str, mode: str, used: bool) -> None:
    dev, kmd = _run_single_pdp(config, mode)
    try:
        present = config != "small" and mode != "step"
        assert bool(dev.reg_read(R.GLB_CP_STATUS) & R.cp_status_e.PRESENT) == present
        assert dev.cp.runs == (1 if used else 0)
        headed = dev.mcu is not None
        # headless, the host KMD writes the command buffer; headed, the microcontroller's firmware
        assert kmd.cmdbufs.present == (used and not headed)
        assert len(kmd.cmdbufs) == (1 if used and not headed else 0)
        if headed:
            assert dev.mcu.firmware.cmdbufs.built == 1
    finally:
        kmd.close()
        dev.close()


def test_the_configuration_switch(tmp_path: Path) -> None:
    raw = json.loads((CONFIGS / "full.json").read_text())
    assert raw["engine"] == {"command_processor": True}
    raw["engine"] = {"command_processor": False}
    path = tmp_path / "full_per_op.json"
    path.write_text(json.dumps(raw))
    assert load_config(path).command_processor is False
    dev, kmd = _run_single_pdp(path)
    try:
        assert dev.reg_read(R.GLB_CP_STATUS) == 0 and dev.cp.runs == 0 and not kmd.cmdbufs.present
    finally:
        kmd.close()
        dev.close()
    for bad, said in (({"command_processor": 1}, "must be true or false, not 1"),
                      ({"processor": True}, "'engine' has unknown field(s) processor")):
        raw["engine"] = bad
        path.write_text(json.dumps(raw))
        with pytest.raises(DlaError) as info:
            load_config(path)
        assert info.value.code == NvError.BadValue and said in info.value.message


def test_never_on_an_nvdla_configuration(tmp_path: Path) -> None:
    for name in ("nv_small", "nv_full", "nv_full-headed"):
        assert load_config(name).command_processor is False
    raw = json.loads((CONFIGS / "nv_small.json").read_text())
    raw["engine"] = {"command_processor": True}
    path = tmp_path / "nv_cp.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(DlaError) as info:
        load_config(path)
    assert info.value.code == NvError.BadValue and "an NVDLA configuration" in info.value.message


def test_a_task_with_a_shave_list_runs_per_operation() -> None:
    """Issue #33's mixed tasks (DLA operations and SHAVE tasks synchronised by barriers): the host
    engine consumes and produces the barriers per operation, so no command buffer is made."""
    dev = VirtualDevice("full")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        out = _run(kmd, _relu_then_clamp(), {"x": _x()})
        np.testing.assert_array_equal(out["z"], np.clip(_x(), 0, 2).astype(out["z"].dtype))
        assert kmd.cmdbufs.present and len(kmd.cmdbufs) == 0 and kmd.cmdbufs.built == 0
        assert dev.cp.runs == 0
        assert kmd.stats()["shave"]["jobs"] == 1
    finally:
        kmd.close()
        dev.close()
