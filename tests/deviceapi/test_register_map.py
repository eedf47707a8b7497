"""Register maps: a struct of u32 registers whose leaves become address constants in every target."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pydla.deviceapi import generate
from pydla.deviceapi.generated import device_api, dla_regs
from pydla.deviceapi.loader import SpecError
from pydla.deviceapi.spec import load_spec

BLOCKS = {"BDMA": "bdma", "CONV": "conv", "SDP": "sdp", "PDP": "pdp", "CDP": "cdp", "RUBIK": "rubik"}


def test_each_block_window_is_at_its_dla_block_e_slot() -> None:
    assert dla_regs.GLB_HW_VERSION == 0
    for member in device_api.dla_block_e:
        prefix = BLOCKS[member.name].upper()
        base = 0x1000 * (member.value + 1)
        assert getattr(dla_regs, f"{prefix}_S_STATUS") == base
        assert getattr(dla_regs, f"{prefix}_S_POINTER") == base + 4
        assert getattr(dla_regs, f"{prefix}_D_OP_ENABLE") == base + 0x40
        window = [a for n, a in dla_regs.REGISTERS.items() if n.startswith(prefix + "_")]
        assert min(window) == base and max(window) < base + 0x1000


def test_registers_are_unique_aligned_and_not_reserved() -> None:
    addresses = list(dla_regs.REGISTERS.values())
    assert len(set(addresses)) == len(addresses)
    assert all(a % 4 == 0 for a in addresses)
    assert not any("RESERVED" in n for n in dla_regs.REGISTERS)
    assert dla_regs.SDP_D_SRC_ADDR_LO + 4 == dla_regs.SDP_D_SRC_ADDR_HI
    assert dla_regs.dla_regs_t.SIZE == 0x8000  # the SHAVE registers end the space (0x7800)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_c_register_macros_match_python(tmp_path: Path) -> None:
    lines = ['#include <stdio.h>', '#include "pydla/dla_regs.h"', "int main(void) {"]
    lines += [f'    printf("{n} %u\\n", (unsigned)DLA_REGS_{n});' for n in dla_regs.REGISTERS]
    lines += ["    return 0;", "}"]
    (tmp_path / "regs.c").write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(generate.include_dir()),
                    str(tmp_path / "regs.c"), "-o", str(tmp_path / "regs")], check=True)
    out = subprocess.run([str(tmp_path / "regs")], check=True, capture_output=True, text=True).stdout
    assert {k: int(v) for k, v in (line.split() for line in out.splitlines())} == dla_regs.REGISTERS


SPEC = """
Name: regs
Version: 1.0.0
RegisterMap: {top}
Modules:
  - Name: m
    Enums:
      - Name: mode_e
        Storage: {storage}
        Members: [{{Name: A, Value: 0}}]
    Structs:
      - Name: blk_t
        Fields:
          - {{Name: ctrl, Type: u32}}
          - {{Name: mode, Type: enum, Enum: mode_e}}
          - {{Name: {extra_name}, Type: {extra_type}, Count: 2}}
      - Name: top_t
        Fields:
          - {{Name: a, Type: struct, Struct: blk_t}}
          - {{Name: b, Type: struct, Struct: blk_t}}
    Messages:
      - Name: ping_cmd
        Id: 1
        Type: Command
"""


def _load(tmp_path: Path, **kw: str):
    values = {"top": "top_t", "storage": "u32", "extra_name": "reserved", "extra_type": "u32"}
    values.update(kw)
    path = tmp_path / "regs.yaml"
    path.write_text(SPEC.format(**values))
    return load_spec(path)


def test_registers_flatten_nested_structs(tmp_path: Path) -> None:
    spec = _load(tmp_path)
    assert spec.registers() == [("A_CTRL", 0), ("A_MODE", 4), ("B_CTRL", 16), ("B_MODE", 20)]


@pytest.mark.parametrize(
    ("kw", "rule"),
    [
        ({"storage": "u8"}, "register-width"),
        ({"extra_name": "table", "extra_type": "u32"}, "register-width"),
        ({"extra_name": "reserved", "extra_type": "u64"}, None),
        ({"top": "mode_e"}, "register-map"),
        ({"top": "ping_cmd"}, "register-map"),
    ],
)
def test_register_map_rules(tmp_path: Path, kw, rule) -> None:
    if rule is None:
        _load(tmp_path, **kw)
        return
    with pytest.raises(SpecError) as e:
        _load(tmp_path, **kw)
    assert rule in e.value.rules
