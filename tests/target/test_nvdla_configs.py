"""NVDLA's hardware configurations as bundled device configurations: every one loads, states the facts
nvdla/hw's spec/defs give it (the same as the block kernels' NvdlaTarget and the register file's map and
configuration ROM), and a malformed 'nvdla' section is refused with a message naming the field."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import pytest

from pydla import DlaError, NvError
from pydla.hw.nvdla.regfile_config import NAMES, regfile_config
from pydla.hw.nvdla.target import TARGETS
from pydla.hw.nvdla_device import NvdlaDevice, nvdla_target
from pydla.target.config import bundled_configs, load_config, parse_config

NVDLA = sorted(TARGETS)


def _raw(name: str) -> dict[str, Any]:
    text = resources.files("pydla.target").joinpath(f"configs/{name}.json").read_text()
    raw: dict[str, Any] = json.loads(text)
    return raw


def test_every_nvdla_configuration_is_bundled_and_the_others_are_not() -> None:
    assert set(NVDLA) == set(NAMES) <= set(bundled_configs())
    assert {"full", "small", "full-headed"} <= set(bundled_configs())
    nvdla = [n for n in bundled_configs() if load_config(n).nvdla is not None]
    assert [n for n in nvdla if not load_config(n).headed] == NVDLA
    assert all(load_config(n).nvdla is None for n in ("full", "small", "full-headed"))
    # the headed variants of the three named ones: the same hardware with a microcontroller
    headed = [n for n in bundled_configs() if load_config(n).nvdla is not None and load_config(n).headed]
    assert headed == ["nv_full-headed", "nv_large-headed", "nv_small-headed"]
    for name in headed:
        plain, cfg = _raw(name.removesuffix("-headed")), _raw(name)
        assert {k: v for k, v in cfg.items() if k not in ("name", "description", "headed")} == \
            {k: v for k, v in plain.items() if k not in ("name", "description")}


@pytest.mark.parametrize("name", NVDLA)
def test_the_facts_agree_with_the_block_kernels_and_the_register_file(name: str) -> None:
    cfg = load_config(name)
    nv = cfg.nvdla
    assert nv is not None and nv.hw == name == cfg.name and not cfg.headed
    target = nvdla_target(cfg)  # refuses any fact that differs from NvdlaTarget's
    assert target.name == name
    rf = regfile_config(name)
    assert rf.regmap.NAME == f"{nv.register_map}_regs"
    assert ("BDMA" in rf.blocks, "RBK" in rf.blocks) == (cfg.has_block("BDMA"), cfg.has_block("RUBIK"))
    assert ("CVIF" in rf.blocks) == (nv.sram_bytes > 0)
    assert cfg.precision_names == nv.precisions and cfg.instances == 1
    assert cfg.iova_base + cfg.iova_size <= 1 << nv.address_bits
    if rf.rom:  # the newer map's configuration ROM describes the same hardware
        rom = {k[len("NVDLA_CFGROM_CFGROM_"):-2]: v for k, v in rf.rom.items()}
        assert (rom["CDMA_BASE_ATOMIC_C"], rom["CDMA_BASE_ATOMIC_K"], rom["CDMA_BASE_ATOMIC_M"]) == \
            (nv.mac_atomic_c, nv.mac_atomic_k, nv.atom_bytes)
        assert (rom["CBUF_BASE_CBUF_BANK_NUM"], rom["CBUF_BASE_CBUF_BANK_WIDTH"],
                rom["CBUF_BASE_CBUF_BANK_DEPTH"]) == (nv.cbuf_banks, nv.cbuf_bank_width, nv.cbuf_bank_depth)
        assert bool(rom["SDP_CAP_COMPAT"] & 4) == nv.sdp_lut and bool(rom["SDP_CAP_COMPAT"] & 32) == nv.sdp_y
        assert nv.precisions == ("INT8",) and rom["CDMA_BASE_FEATURE_TYPES"] == 0x10
    dev = NvdlaDevice(name)
    assert dev.reg_read(rf.regmap.NVDLA_GLB_S_NVDLA_HW_VERSION_0) == cfg.hw_version == 0x303031
    dev.close()


def test_the_figures_of_the_three_named_configurations() -> None:
    full, small, large = (load_config(n).nvdla for n in ("nv_full", "nv_small", "nv_large"))
    assert full is not None and small is not None and large is not None
    assert (full.macs, full.cbuf_bytes, full.atom_bytes, full.max_batch) == (2048, 512 << 10, 32, 32)
    assert (small.macs, small.cbuf_bytes, small.atom_bytes, small.address_bits) == (64, 128 << 10, 8, 32)
    assert (large.macs, large.cbuf_bytes, large.precisions, large.register_map) == \
        (2048, 512 << 10, ("INT8",), "nvdla_v2")
    assert full.winograd and full.weight_compression and not large.winograd and not small.sdp_y
    assert load_config("nv_full").precision_names == ("INT8", "INT16", "FP16")
    assert load_config("full").precision_names == ("FP32", "FP16")


@pytest.mark.parametrize(("change", "words"), [
    ({"nvdla": "nv_full"}, ["'nvdla' must be a dict"]),
    ({"nvdla.register_map": "nvdla_v3"}, ["register_map", "nvdla_v3", "nvdla_v1, nvdla_v2"]),
    ({"nvdla.precisions": ["INT4"]}, ["precisions", "INT4"]),
    ({"nvdla.precisions": ["INT8", "INT8"]}, ["precisions", "distinct"]),
    ({"nvdla.precisions": [["INT8"]]}, ["precisions"]),
    ({"nvdla.atom_bytes": 12}, ["atom_bytes = 12", "8, 16, 32 or 64"]),
    ({"nvdla.mac_atomic_c": 4}, ["mac_atomic_c = 4", "at least atom_bytes"]),
    ({"nvdla.cbuf_banks": True}, ["cbuf_banks = True"]),
    ({"nvdla.sram_bytes": 1000}, ["sram_bytes = 1000", "multiple of 4096"]),
    ({"nvdla.winograd": 1}, ["winograd must be true or false"]),
    ({"nvdla.sdp_y": False}, ["sdp_lut", "sdp_y true"]),
    ({"nvdla.hw": "nv full"}, ["hw = 'nv full'"]),
    ({"nvdla.extra": 1}, ["unknown field(s) extra"]),
    ({"nvdla.-max_batch": None}, ["lacks field(s) max_batch"]),
    ({"precisions": []}, ["'precisions' = []", "['FP16']"]),
    ({"shave": {"tiles": 1}}, ["no SHAVE tiles"]),
    ({"nvdla.address_bits": 32}, ["iova_size", "past the 32-bit addresses"]),
])
def test_a_malformed_nvdla_section_is_refused_naming_the_field(change: dict[str, Any],
                                                               words: list[str]) -> None:
    raw = copy.deepcopy(_raw("nv_full"))
    for key, value in change.items():
        if key.startswith("nvdla."):
            field = key[len("nvdla."):]
            if field.startswith("-"):
                del raw["nvdla"][field[1:]]
            else:
                raw["nvdla"][field] = value
        else:
            raw[key] = value
    with pytest.raises(DlaError) as e:
        parse_config(raw, "my.json")
    assert e.value.code == NvError.BadValue and all(w in e.value.message for w in words), e.value.message
    assert e.value.message.startswith("my.json")


def test_a_configuration_whose_facts_differ_from_the_hardware_is_refused_by_the_device() -> None:
    raw = _raw("nv_small")
    raw["nvdla"]["mac_atomic_k"] = 16
    with pytest.raises(DlaError) as e:
        NvdlaDevice(parse_config(raw, "mine.json"))
    assert e.value.code == NvError.BadValue
    assert e.value.message == "device config 'nv_small': nvdla mac_atomic_k = 16, but NVDLA's nv_small has 8"
    raw = _raw("nv_small")
    raw["nvdla"]["hw"] = "nv_tiny"
    with pytest.raises(DlaError) as e:
        NvdlaDevice(parse_config(raw, "mine.json"))
    assert e.value.code == NvError.BadParameter and "'nv_tiny' is unknown" in e.value.message


def test_pydla_devices_lists_them_with_nvdla_s_precisions_and_map() -> None:
    from pydla.devices import configurations, format_all

    found = {c["name"]: c for c in configurations()}
    assert (found["nv_small"]["precisions"], found["nv_small"]["register_map"]) == (["INT8"], "nvdla_v2")
    assert (found["nv_full"]["precisions"], found["nv_full"]["register_map"]) == (["INT8", "INT16", "FP16"],
                                                                                 "nvdla_v1")
    assert (found["full"]["precisions"], found["full"]["register_map"]) == (["FP32", "FP16"], None)
    text = format_all({"configurations": list(found.values()), "daemons": []})
    assert "  nv_small: 1 instance(s), hw version 0x00303031, blocks CONV SDP PDP CDP, precisions INT8, " \
           "1.0 GiB memory, 8 contexts, NVDLA register map nvdla_v2" in text
