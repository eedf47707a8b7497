"""A device description from xclbinutil's IP_LAYOUT dump (repeated ip_data keys, string values, the older
properties word), the dump pydla writes read back to the same units, and every malformed part refused
with the field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pydla import DlaError, NvError
from pydla.target.config import load_config, parse_config
from pydla.target.xclbin_json import DEFAULT_WINDOW, Repeated, dump_ip_layout, keep_repeated_keys
from tests.hw.regs import raw_config

# Two units as xclbinutil writes them: the newer fields, and an older dump's properties word
# (int_enable 1, interrupt id 2, AP_CTRL_CHAIN: 0x100 | 2 << 1 | 1).
DUMP = """{
    "schema_version": {"major": "1", "minor": "0", "patch": "0"},
    "ip_layout": {
        "m_count": "2",
        "m_ip_data": {
            "ip_data": {
                "m_type": "IP_KERNEL",
                "m_int_enable": "1",
                "m_interrupt_id": "1",
                "m_ip_control": "AP_CTRL_HS",
                "m_base_address": "0x1800000",
                "m_name": "vadd:vadd_1"
            },
            "ip_data": {
                "m_type": "IP_KERNEL",
                "properties": "0x105",
                "m_base_address": "0x1810000",
                "m_name": "noop:pipe"
            }
        }
    }
}"""


def test_a_device_description_from_xclbinutils_dump(tmp_path: Path) -> None:
    path = tmp_path / "device.json"  # the dump's text as it is, inside a configuration
    models = {"vadd": {"model": "vadd"}, "noop:pipe": {"model": "noop", "pipeline_depth": 4}}
    path.write_text(json.dumps(raw_config())[:-1] + ', "ip_layout": ' + DUMP + ', "cu_models": '
                    + json.dumps(models) + "}")
    cfg = load_config(path)
    vadd, pipe = cfg.ip_layout
    assert (vadd.name, vadd.m_ip_control, vadd.m_base_address, vadd.m_int_enable, vadd.m_interrupt_id,
            vadd.window, vadd.model) == ("vadd:vadd_1", "AP_CTRL_HS", 0x1800000, 1, 1, DEFAULT_WINDOW,
                                         "vadd")
    assert (pipe.name, pipe.m_ip_control, pipe.m_int_enable, pipe.m_interrupt_id, pipe.pipeline_depth,
            pipe.model) == ("noop:pipe", "AP_CTRL_CHAIN", 1, 2, 4, "noop")


def test_the_whole_dump_with_its_schema_version_is_accepted_too() -> None:
    raw = raw_config(ip_layout=json.loads(DUMP, object_pairs_hook=keep_repeated_keys),
                     cu_models={"vadd": {"model": "vadd"}, "noop": {"model": "noop"}})
    assert [cu.name for cu in parse_config(raw).ip_layout] == ["vadd:vadd_1", "noop:pipe"]


@pytest.mark.parametrize("name", ["full", "small"])
def test_what_pydla_dumps_reads_back_as_the_same_units(name: str) -> None:
    layout = load_config(name).ip_layout
    dump = json.loads(dump_ip_layout(layout), object_pairs_hook=keep_repeated_keys)
    assert isinstance(dump["ip_layout"]["m_ip_data"]["ip_data"], Repeated)
    models = {cu.name: {"model": cu.model, "window": cu.window, "pipeline_depth": cu.pipeline_depth,
                        "latency_cycles": cu.latency_cycles, "fifo_bytes": cu.fifo_bytes,
                        "chunk_bytes": cu.chunk_bytes, **dict(cu.params)} for cu in layout}
    again = parse_config(raw_config(ip_layout=dump, cu_models=models)).ip_layout
    assert again == layout


def test_a_single_unit_dump_has_one_ip_data_key() -> None:
    one = load_config("small").ip_layout[1:2]
    dump = json.loads(dump_ip_layout(one), object_pairs_hook=keep_repeated_keys)
    assert dump["ip_layout"]["m_ip_data"]["ip_data"]["m_name"] == "noop:noop_hs"
    cfg = parse_config(raw_config(ip_layout=dump, cu_models={"noop": {"model": "noop"}}))
    assert cfg.ip_layout[0].window == DEFAULT_WINDOW
    assert dump_ip_layout(()) == ('{\n    "ip_layout": {\n        "m_count": "0",\n'
                                  '        "m_ip_data": ""\n    }\n}\n')


def _section(*entries: dict[str, Any], count: Any = None) -> dict[str, Any]:
    data: Any = {"ip_data": Repeated(entries)} if len(entries) != 1 else {"ip_data": entries[0]}
    return {"m_count": str(len(entries)) if count is None else count, "m_ip_data": data}


GOOD = {"m_type": "IP_KERNEL", "m_int_enable": "1", "m_interrupt_id": "3", "m_ip_control": "AP_CTRL_HS",
        "m_base_address": "0x20000", "m_name": "vadd:v"}


@pytest.mark.parametrize(("section", "models", "message"), [
    (_section(GOOD, count="2"), {"vadd": {"model": "vadd"}}, "'m_count' 2 but 1 'ip_data' entries"),
    (_section(GOOD, count="two"), {"vadd": {"model": "vadd"}}, "'m_count' = 'two' must be a number"),
    (_section(GOOD), {}, "('vadd:v'): no 'model' computes it"),
    (_section({**GOOD, "m_base_address": "not_used"}), {"vadd": {"model": "vadd"}},
     "'m_base_address' is 'not_used'"),
    (_section({**GOOD, "m_base_address": "0xZZ"}), {"vadd": {"model": "vadd"}},
     "'m_base_address' = '0xZZ' must be a number"),
    (_section({**GOOD, "m_interrupt_id": "99"}), {"vadd": {"model": "vadd"}},
     "'m_interrupt_id' = 99 must be"),
    (_section({"m_type": "IP_KERNEL", "properties": "0x305", "m_base_address": "0x20000",
               "m_name": "vadd:v"}),
     {"vadd": {"model": "vadd"}}, "'properties' 0x305: control 3 is not"),
    (_section({**GOOD, "properties": "0x1"}), {"vadd": {"model": "vadd"}},
     "'properties' and its fields both"),
    (_section(GOOD), {"vadd": "vadd"}, "cu_models['vadd'] must be an object"),
    ({"m_count": "1", "m_ip_data": {"ip_dat": GOOD}}, {}, "'m_ip_data' must hold 'ip_data' entries"),
    ({"m_count": "0", "m_ip_data": "", "m_extra": 1}, {}, "unknown key(s) 'm_extra'"),
    ({"ip_layout": _section(GOOD), "other": 1}, {}, "unknown key(s) 'other' next to 'ip_layout'"),
    (_section("vadd:v"), {}, "must be a JSON object, not 'vadd:v'"),  # type: ignore[arg-type]
])
def test_a_malformed_dump_is_refused_naming_the_field(section: Any, models: Any, message: str) -> None:
    with pytest.raises(DlaError) as e:
        parse_config(raw_config(ip_layout=section, cu_models=models))
    assert e.value.code == NvError.BadValue and message in e.value.message


def test_cu_models_with_a_list_layout_is_refused() -> None:
    with pytest.raises(DlaError, match="'cu_models' is for an 'ip_layout' in xclbinutil's form"):
        parse_config(raw_config(cu_models={"vadd": {"model": "vadd"}}))
