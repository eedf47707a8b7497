"""Registers with bit fields: the spec language (Bits, Double, RegisterNames), its rules, the diff, and
what the three targets make of it (Python bit-field views and RegisterInfo, C and C++ constants)."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pydla import DlaError, NvError
from pydla.deviceapi import generate
from pydla.deviceapi.diff import diff_specs
from pydla.deviceapi.loader import SpecError
from pydla.deviceapi.registers import BitField, RegisterBits, RegisterInfo
from pydla.deviceapi.spec import load_spec

SPEC = """\
Name: blk_regs
Version: 1.0.0
RegisterMap: map_t
RegisterNames: "NVDLA_{}_0"
RegisterMacros: "BLK_{}_0"
Modules:
  - Name: m
    Structs:
      - Name: unit_t
        Fields:
          - Name: s_status
            Type: u32
            Bits:
              - {Name: STATUS_0, Msb: 1, Lsb: 0, Access: r, Values: {IDLE: 0, RUNNING: 1, PENDING: 2}}
              - {Name: STATUS_1, Msb: 17, Lsb: 16, Access: r}
          - Name: s_intr
            Type: u32
            Bits:
              - {Name: DONE0, Lsb: 0, Access: w1c}
              - {Name: KICK, Lsb: 4, Access: w}
          - Name: d_misc_cfg
            Type: u32
            Double: true
            Bits:
              - {Name: CONV_MODE, Lsb: 0, Values: {DIRECT: 0, WINOGRAD: 1}}
              - {Name: IN_PRECISION, Msb: 9, Lsb: 8, Reset: 1, Values: {INT8: 0, INT16: 1, FP16: 2}}
              - {Name: ADDR, Msb: 31, Lsb: 27}
          - {Name: plain, Type: u32}
          - {Name: reserved, Type: u32, Count: 4}
      - Name: map_t
        Fields:
          - {Name: a, Type: struct, Struct: unit_t}
          - {Name: reserved_x, Type: u32, Count: 8}
          - {Name: b, Type: struct, Struct: unit_t}
"""


def _load(tmp_path: Path, text: str = SPEC):
    path = tmp_path / "blk_regs.yaml"
    path.write_text(text)
    return load_spec(path)


def _rules(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        _load(tmp_path, text)
    return e.value.rules


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("bits")
    spec = out / "blk_regs.yaml"
    spec.write_text(SPEC)
    generate.write(generate.outputs_for(spec, out))
    loaded = importlib.util.spec_from_file_location("blk_regs", out / "blk_regs.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules["blk_regs"] = module
    loaded.loader.exec_module(module)
    return out, module


def test_register_names_and_addresses(tmp_path: Path) -> None:
    spec = _load(tmp_path)
    assert [r.macro for r in spec.register_defs()][:2] == ["BLK_A_S_STATUS_0", "BLK_A_S_INTR_0"]
    default = _load(tmp_path, SPEC.replace('RegisterMacros: "BLK_{}_0"\n', ""))
    assert default.register_defs()[0].macro == "BLK_REGS_NVDLA_A_S_STATUS_0"  # behind the spec's prefix
    names = ("S_STATUS", "S_INTR", "D_MISC_CFG", "PLAIN")
    assert spec.registers() == [(f"NVDLA_{block}_{name}_0", base + 4 * i)
                                for block, base in (("A", 0), ("B", 64)) for i, name in enumerate(names)]
    misc = spec.register_defs()[2].field
    assert misc.double and misc.reset == 0x100
    assert [(b.name, b.lsb, b.width, b.mask) for b in misc.bits] == [
        ("CONV_MODE", 0, 1, 0x1), ("IN_PRECISION", 8, 2, 0x300), ("ADDR", 27, 5, 0xF8000000)]


def test_python_view_and_register_info(generated) -> None:
    _, mod = generated
    view = mod.map_t()
    assert ctypes.sizeof(view) == 96 and mod.map_t.b.offset == 64
    view.b.d_misc_cfg.in_precision = 2
    view.b.d_misc_cfg.addr = 0x1F
    assert int(view.b.d_misc_cfg) == 0xF8000200
    assert bytes(view)[72:76] == (0xF8000200).to_bytes(4, "little")
    word = mod.unit_d_misc_cfg_bits.of(0x301)
    assert (word.conv_mode, word.in_precision, word.addr) == (1, 3, 0)
    assert word.to_dict() == {"conv_mode": 1, "in_precision": 3, "addr": 0}
    assert isinstance(word, RegisterBits) and mod.unit_t.s_status.size == 4
    with pytest.raises(DlaError) as e:
        mod.unit_d_misc_cfg_bits.of(1 << 32)
    assert e.value.code == NvError.BadValue
    info = mod.REGISTER_INFO["NVDLA_B_D_MISC_CFG_0"]
    assert isinstance(info, RegisterInfo)
    assert (info.address, info.double, info.reset, info.write_mask) == (72, True, 0x100, 0xF8000301)
    assert info.pack(conv_mode=1, ADDR=2) == 0x10000101
    assert info.field("IN_PRECISION").value("FP16") == 2
    intr = mod.REGISTER_INFO["NVDLA_A_S_INTR_0"]
    assert (intr.read_mask, intr.write_mask, intr.clear_mask, intr.write_only_mask) == (1, 0, 1, 0x10)
    status = mod.REGISTER_INFO["NVDLA_A_S_STATUS_0"]
    assert (status.read_mask, status.write_mask, status.double) == (0x30003, 0, False)
    assert "NVDLA_A_PLAIN_0" not in mod.REGISTER_INFO and mod.NVDLA_A_PLAIN_0 == 12
    for bad, code in ((lambda: info.pack(nope=1), NvError.BadParameter),
                      (lambda: info.pack(in_precision=4), NvError.BadValue),
                      (lambda: info.field("X"), NvError.BadParameter),
                      (lambda: info.field("CONV_MODE").value("FP16"), NvError.BadParameter)):
        with pytest.raises(DlaError) as e:
            bad()
        assert e.value.code == code


def test_bit_field_get_and_put() -> None:
    b = BitField("X", 4, 3)
    assert b.mask == 0x70 and b.get(0xFFFF) == 7 and b.put(0xFFFF, 2) == 0xFFAF
    with pytest.raises(DlaError):
        b.put(0, 8)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_c_constants_match_python(generated, tmp_path: Path) -> None:
    out, mod = generated
    names = []
    for info in mod.REGISTER_INFO.values():
        name = "BLK_" + info.name[len("NVDLA_"):]  # RegisterMacros: C's names
        names += [name, f"{name}_RESET_VAL"]
        for b in info.bits:
            names += [f"{name}_{b.name}_SHIFT", f"{name}_{b.name}_FIELD"]
            names += [f"{name}_{b.name}_{v}" for v, _ in b.values]
    src = tmp_path / "c.c"
    src.write_text('#include <stdio.h>\n#include "pydla/blk_regs.h"\nint main(void) {\n'
                   + "".join(f'    printf("{n} %u\\n", (unsigned){n});\n' for n in names)
                   + '    printf("sizeof %zu\\n", sizeof(map_t));\n'
                   + '    printf("offsetof_b %zu\\n", offsetof(map_t, b));\n    return 0;\n}\n')
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(out), "-I", str(generate.include_dir()),
                    str(src), "-o", str(tmp_path / "c")], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run(
        [str(tmp_path / "c")], check=True, capture_output=True, text=True).stdout.splitlines())
    assert (got.pop("sizeof"), got.pop("offsetof_b")) == ("96", "64")
    misc = mod.REGISTER_INFO["NVDLA_A_D_MISC_CFG_0"]
    assert int(got["BLK_A_D_MISC_CFG_0_IN_PRECISION_FIELD"]) == 0x300
    assert int(got["BLK_A_D_MISC_CFG_0_RESET_VAL"]) == misc.reset
    assert int(got["BLK_A_D_MISC_CFG_0_IN_PRECISION_FP16"]) == 2
    assert int(got["BLK_B_D_MISC_CFG_0"]) == 72
    assert len(got) == len(names)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_cpp_constants(generated, tmp_path: Path) -> None:
    out, _ = generated
    src = tmp_path / "u.cpp"
    src.write_text('#include "pydla/blk_regs.hpp"\nusing namespace pydla::blk_regs::reg;\n'
                   "static_assert(NVDLA_B_D_MISC_CFG_0 == 72, \"address\");\n"
                   "static_assert(NVDLA_A_D_MISC_CFG_0_ADDR_FIELD == 0xf8000000u, \"mask\");\n"
                   "static_assert(NVDLA_A_S_STATUS_0_STATUS_0_PENDING == 2, \"value\");\n"
                   "int main() { return 0; }\n")
    subprocess.run(["g++", "-std=c++11", "-Wall", "-Werror", "-fsyntax-only", "-I", str(out), "-I",
                    str(generate.include_dir()), str(src)], check=True)


ADDR = "{Name: ADDR, Msb: 31, Lsb: 27}"


@pytest.mark.parametrize(("new", "rule"), [
    ("{Name: ADDR, Msb: 31, Lsb: 9}", "overlap another field"),
    ("{Name: ADDR, Msb: 26, Lsb: 27}", "Msb 26 is below Lsb 27"),
    ("{Name: ADDR, Msb: 31, Lsb: 27, Reset: 32}", "Reset 0x20 does not fit"),
    ("{Name: ADDR, Lsb: 27, Values: {BIG: 2}}", "BIG = 2 does not fit"),
    ("{Name: conv_mode, Lsb: 27}", "the name is taken"),
    ("{Name: _X, Lsb: 27}", "the name is taken"),
    ("{Name: CLASS, Lsb: 27}", "keyword or type name"),
    ("{Name: ADDR, Lsb: 27, Values: {SHIFT: 1}}", "would name both"),
])
def test_bit_field_rules(tmp_path: Path, new: str, rule: str) -> None:
    with pytest.raises(SpecError) as e:
        _load(tmp_path, SPEC.replace(ADDR, new))
    assert rule in str(e.value)


def test_bits_belong_to_u32_registers(tmp_path: Path) -> None:
    text = SPEC.replace("- {Name: plain, Type: u32}", "- {Name: plain, Type: u64, Double: true}")
    assert "register-bits" in _rules(tmp_path, text)
    no_map = SPEC.replace("RegisterMap: map_t\n", "")
    assert _rules(tmp_path, no_map) == ["register-map"]
    clash_in_c = SPEC.replace('RegisterMacros: "BLK_{}_0"', 'RegisterMacros: "BLK_0"')
    with pytest.raises(SpecError):  # not a pattern
        _load(tmp_path, clash_in_c)
    clash = SPEC + "      - Name: unit_d_misc_cfg_bits\n        Fields:\n          - {Name: x, Type: u32}\n"
    assert _rules(tmp_path, clash) == ["register-names"]
    with pytest.raises(SpecError):
        _load(tmp_path, SPEC.replace('"NVDLA_{}_0"', '"NVDLA_0"'))


def test_layout_hash_covers_bits_and_double(tmp_path: Path) -> None:
    base = _load(tmp_path).layout_hash
    assert _load(tmp_path, SPEC.replace("Reset: 1,", "Reset: 2,")).layout_hash != base
    assert _load(tmp_path, SPEC.replace("Double: true", "Double: false")).layout_hash != base
    assert _load(tmp_path, SPEC.replace("{Name: STATUS_1, Msb: 17, Lsb: 16, Access: r}",
                                        "{Name: STATUS_1, Msb: 17, Lsb: 16, Access: r, Description: x}")
                 ).layout_hash == base


@pytest.mark.parametrize(("new", "level", "what"), [
    ("{Name: ADDR, Msb: 31, Lsb: 26}", "major", "bit field 'ADDR' 31:27 rw"),
    ("{Name: ADDR, Msb: 31, Lsb: 27}\n              - {Name: MORE, Lsb: 20}", "minor", "'MORE' added"),
    ("{Name: ADDR, Msb: 31, Lsb: 27, Values: {ONE: 1}}", "minor", "value ADDR.ONE added"),
    ("{Name: ADDR, Msb: 31, Lsb: 27, Access: r}", "major", "31:27 r reset"),
])
def test_diff_of_bit_fields(tmp_path: Path, new: str, level: str, what: str) -> None:
    old = _load(tmp_path)
    (tmp_path / "new").mkdir()
    changed = _load(tmp_path / "new", SPEC.replace("{Name: ADDR, Msb: 31, Lsb: 27}", new))
    report = diff_specs(old, changed)
    assert [c.level for c in report.changes if what in c.what] == [level]  # unit_t, once for a and b
    assert report.required == level


def test_bundled_outputs_without_bits_are_unchanged() -> None:
    """dla_regs has no bit fields: its outputs keep their names (DLA_REGS_<NAME>) and no new constants."""
    out = {o.language: o.text for o in generate.outputs_for(generate.bundled_specs_dir() / "dla_regs.yaml")}
    assert "#define DLA_REGS_GLB_INTR_STATUS " in out["c"] and "_RESET_VAL" not in out["c"]
    assert "RegisterInfo" not in out["python"]


def test_value_names_yaml_reads_as_booleans_must_be_quoted(tmp_path: Path) -> None:
    bare = SPEC.replace("Values: {DIRECT: 0, WINOGRAD: 1}", "Values: {FALSE: 0, TRUE: 1}")
    with pytest.raises(SpecError) as e:
        _load(tmp_path, bare)
    assert e.value.rules == ["register-bits"] * 2 and 'write it in quotes ("False")' in str(e.value)
    quoted = _load(tmp_path, SPEC.replace("{DIRECT: 0, WINOGRAD: 1}", '{"FALSE": 0, "TRUE": 1}'))
    misc = quoted.register_defs()[2].field
    assert [m.name for m in misc.bits[0].values] == ["FALSE", "TRUE"]
