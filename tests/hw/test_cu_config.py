"""IP_LAYOUT in device configurations: every field checked, errors naming the entry, the field and
the value; the bundled configurations' units; ``pydla info --config``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pydla import DlaError
from pydla.target.config import load_config, parse_config
from pydla.target.xclbin_json import keep_repeated_keys
from tests.hw.regs import raw_config


def unit(**overrides: Any) -> dict[str, Any]:
    cu: dict[str, Any] = {"m_name": "k:inst", "m_type": "IP_KERNEL", "m_int_enable": 1, "m_interrupt_id": 1,
                          "m_ip_control": "AP_CTRL_HS", "m_base_address": 0x10000, "window": 0x10000,
                          "model": "noop"}
    cu.update(overrides)
    return cu


def test_bundled_configs_have_the_units() -> None:
    for name in ("full", "small"):
        cfg = load_config(name)
        by = {cu.instance: cu for cu in cfg.ip_layout}
        assert by["dla"].name == "dla_engine:dla" and by["dla"].m_ip_control == "AP_CTRL_CHAIN"
        assert by["dla"].is_engine and by["dla"].m_base_address == 0
        assert by["noop_hs"].m_ip_control == "AP_CTRL_HS"
        assert (by["noop_chain"].m_ip_control, by["noop_chain"].pipeline_depth) == ("AP_CTRL_CHAIN", 3)
        assert by["vadd"].kernel == "vadd" and by["scale"].m_ip_control == "AP_CTRL_NONE"
        assert cfg.compute_unit("noop:noop_hs") is by["noop_hs"] and cfg.compute_unit("nosuch") is None


def test_a_config_without_ip_layout_has_no_units() -> None:
    cfg = parse_config(raw_config())
    assert cfg.ip_layout == () and cfg.clock_mhz == 1000.0


def test_model_params_reach_the_entry() -> None:
    cfg = parse_config(raw_config(ip_layout=[unit(gain=3, latency_cycles=7)], clock_mhz=250))
    assert cfg.ip_layout[0].params == (("gain", 3),) and cfg.ip_layout[0].latency_cycles == 7
    assert cfg.clock_mhz == 250.0


@pytest.mark.parametrize(("overrides", "words"), [
    ({"m_name": "noinstance"}, ["'m_name'", "'noinstance'"]),
    ({"m_type": "IP_MEM_DDR4"}, ["'m_type'", "IP_KERNEL"]),
    ({"m_int_enable": 2}, ["'m_int_enable'", "2"]),
    ({"m_interrupt_id": 32}, ["'m_interrupt_id'", "32", "0..31"]),
    ({"m_ip_control": "AP_CTRL_ME"}, ["'m_ip_control'", "AP_CTRL_ME"]),
    ({"window": 0x1800}, ["'window'", "0x1800", "power of two"]),
    ({"m_base_address": 0x11000}, ["'m_base_address'", "0x11000", "multiple"]),
    ({"m_base_address": 0x1000, "window": 0x1000}, ["'m_base_address'", "0x1000", "above the DLA"]),
    ({"m_base_address": 0xFFFF0000, "window": 0x20000}, ["'m_base_address'", "multiple"]),
    ({"pipeline_depth": 2}, ["'pipeline_depth'", "2", "AP_CTRL_CHAIN"]),
    ({"m_ip_control": "AP_CTRL_CHAIN", "pipeline_depth": 65}, ["'pipeline_depth'", "65"]),
    ({"latency_cycles": 0}, ["'latency_cycles'", "0"]),
    ({"latency_cycles": True}, ["'latency_cycles'", "True"]),
    ({"m_base_address": "0x10000"}, ["'m_base_address'", "'0x10000'"]),
    ({"model": "fft"}, ["'model'", "'fft'", "noop"]),
    ({"m_ip_control": "AP_CTRL_NONE"}, ["memory-mapped", "AP_CTRL_NONE"]),
    ({"model": "scale_i16"}, ["stream", "'scale_i16'"]),
    ({"model": "engine", "m_base_address": 0x10000}, ["'m_base_address'", "DLA's own"]),
    ({"fifo_bytes": 4, "m_ip_control": "AP_CTRL_NONE", "model": "scale_i16"}, ["'fifo_bytes'", "4"]),
    ({"model": "python:tests.hw.no_such_module:X"}, ["cannot import", "tests.hw.no_such_module"]),
    ({"model": "python:tests.hw.cu_user_models:NotAModel"}, ["NotAModel", "ComputeUnitModel"]),
    ({"model": "python:tests.hw.cu_user_models"}, ["python:package.module:ClassName"]),
])
def test_bad_entries_are_refused_naming_field_and_value(overrides: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(DlaError) as e:
        parse_config(raw_config(ip_layout=[unit(**overrides)]))
    assert "ip_layout[0] ('" in str(e.value)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize(("second", "words"), [
    (unit(m_base_address=0x20000), ["'k:inst'", "m_name"]),
    (unit(m_name="other:inst", m_base_address=0x20000, m_interrupt_id=2), ["instance", "'inst'"]),
    (unit(m_name="k:b", m_base_address=0x20000), ["m_interrupt_id", "1"]),
    (unit(m_name="k:b", m_interrupt_id=2, m_base_address=0x0, window=0x40000, model="engine"), ["overlap"]),
])
def test_units_together(second: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(DlaError) as e:
        parse_config(raw_config(ip_layout=[unit(), second]))
    for w in words:
        assert w in str(e.value)


def test_missing_field_and_bad_list() -> None:
    entry = unit()
    del entry["window"]
    with pytest.raises(DlaError, match="missing field 'window'"):
        parse_config(raw_config(ip_layout=[entry]))
    with pytest.raises(DlaError, match="'ip_layout' must be a list or dict"):
        parse_config(raw_config(ip_layout="vadd"))
    with pytest.raises(DlaError, match=r"'m_count' 1 but 0 'ip_data' entries"):
        parse_config(raw_config(ip_layout={"m_count": 1}))
    with pytest.raises(DlaError, match="'clock_mhz' = 0"):
        parse_config(raw_config(clock_mhz=0))


def test_a_model_that_fails_to_start_is_a_dla_error() -> None:
    from pydla.hw.device import VirtualDevice

    cfg = parse_config(raw_config(ip_layout=[unit(model="python:tests.hw.cu_user_models:Broken")]))
    with pytest.raises(DlaError, match="no licence"):
        VirtualDevice(cfg)


def _pydla(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pydla.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_info_config_prints_and_dumps_ip_layout(tmp_path: Path) -> None:
    out = _pydla("info", "--config", "full")
    assert out.returncode == 0, out.stderr
    assert "noop:noop_chain" in out.stdout and "AP_CTRL_NONE" in out.stdout
    target = tmp_path / "ip_layout.json"
    out = _pydla("info", "--config", "small", "--dump-section", f"IP_LAYOUT:json:{target}")
    assert out.returncode == 0, out.stderr
    text = target.read_text()
    # xclbinutil's form: boost's property tree writes the array as one repeated key
    assert text.count('"ip_data": {') == len(load_config("small").ip_layout) == 5
    assert text.startswith('{\n    "ip_layout": {\n        "m_count": "5",\n        "m_ip_data": {\n'
                           '            "ip_data": {\n                "m_type": "IP_KERNEL",\n')
    assert ('            "ip_data": {\n                "m_type": "IP_KERNEL",\n'
            '                "m_int_enable": "1",\n'
            '                "m_interrupt_id": "1",\n                "m_ip_control": "AP_CTRL_HS",\n'
            '                "m_base_address": "0x10000",\n                "m_name": "noop:noop_hs"\n'
            '            },\n') in text
    data = json.loads(text, object_pairs_hook=keep_repeated_keys)
    entries = data["ip_layout"]["m_ip_data"]["ip_data"]
    assert [e["m_name"] for e in entries] == [cu.name for cu in load_config("small").ip_layout]
    out = _pydla("info", "--config", "full", "--dump-section", "IP_LAYOUT:json:-")
    assert out.returncode == 0 and json.loads(out.stdout)["ip_layout"]["m_count"] == "7"  # with 2 SHAVE tiles
    bad = _pydla("info", "--config", "full", "--dump-section", "BUILD_METADATA:json:-")
    assert bad.returncode != 0 and "IP_LAYOUT" in bad.stderr


def test_the_targets_built_in_model_kinds_are_the_devices_models() -> None:
    """A configuration is checked against the target's table of the built-in models (it reads no
    device code); the device's classes must be what that table says."""
    from pydla.hw.cu.models import BUILTIN
    from pydla.hw.cu.shave_tile import ShaveTileUnit
    from pydla.target.cu_model import BUILTIN_MODELS

    classes = {**BUILTIN, "shave_tile": ShaveTileUnit}
    assert {name: (cls.memory_mapped, cls.granule) for name, cls in classes.items()} == BUILTIN_MODELS
