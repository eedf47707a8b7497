"""Packed structs (a kernel ABI's ``__attribute__((packed))``) and named constants in specs: layout,
rules, hashes, diffs and every target (C compiled with gcc, C++ with g++, Python ctypes)."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pydla.deviceapi import generate
from pydla.deviceapi.diff import diff_specs
from pydla.deviceapi.loader import SpecError
from pydla.deviceapi.spec import load_spec

SPEC = """
Name: kabi
Version: 1.0.0
Modules:
  - Name: m
    Constants:
      - {Name: BASE, Type: u32, Value: 0x1F000000, Description: "a window"}
      - {Name: BIG, Type: u64, Value: 0x123456789}
      - {Name: NEG, Type: i32, Value: -5}
    Structs:
      - Name: ref_t
        Packed: true
        Fields:
          - {Name: addr, Type: u32}
          - {Name: wide, Type: u64}
      - Name: params_t
        Packed: true
        Fields:
          - {Name: a, Type: struct, Struct: ref_t}
          - {Name: lo, Type: f16}
          - {Name: count, Type: u32}
          - {Name: b, Type: struct, Struct: ref_t}
      - Name: holder_t
        Fields:
          - {Name: flag, Type: u8}
          - {Name: p, Type: struct, Struct: ref_t}
          - {Name: pad, Type: u8, Count: 3}
"""


def _write(tmp_path: Path, text: str, name: str = "kabi.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_packed_structs_have_no_padding_and_alignment_one(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, SPEC))
    ref, params, holder = (spec.find_struct(n) for n in ("ref_t", "params_t", "holder_t"))
    assert ref is not None and params is not None and holder is not None
    assert (ref.size, ref.align, ref.packed) == (12, 1, True)
    assert [(f.name, f.offset) for f in params.fields] == [("a", 0), ("lo", 12), ("count", 14), ("b", 18)]
    assert params.size == 30
    assert [(f.name, f.offset) for f in holder.fields] == [("flag", 0), ("p", 1), ("pad", 13)]
    assert [(c.name, c.storage, c.value) for c in spec.constants] == [
        ("BASE", "u32", 0x1F000000), ("BIG", "u64", 0x123456789), ("NEG", "i32", -5)]


def test_unpacked_struct_keeps_the_alignment_rules(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as e:
        load_spec(_write(tmp_path, SPEC.replace("        Packed: true\n", "", 1)))
    assert "alignment" in e.value.rules


def test_constant_out_of_range_and_duplicate_name(tmp_path: Path) -> None:
    bad = SPEC.replace("Value: -5}", "Value: -5}\n      - {Name: BASE, Type: u8, Value: 300}")
    with pytest.raises(SpecError) as e:
        load_spec(_write(tmp_path, bad))
    assert "constant-range" in e.value.rules and "duplicate-name" in e.value.rules


def test_constants_and_packing_are_in_the_hash_and_the_diff(tmp_path: Path) -> None:
    old = load_spec(_write(tmp_path, SPEC, "old.yaml"))
    moved = load_spec(_write(tmp_path, SPEC.replace("0x1F000000", "0x1E000000"), "a.yaml"))
    added = load_spec(_write(tmp_path, SPEC.replace(
        "Value: -5}", "Value: -5}\n      - {Name: MORE, Type: u8, Value: 1}"), "b.yaml"))
    assert moved.layout_hash != old.layout_hash != added.layout_hash
    assert diff_specs(old, moved).required == "major"
    assert diff_specs(old, added).required == "minor"
    small = ("Name: k2\nVersion: 1.0.0\nModules:\n  - Name: m\n    Structs:\n      - Name: p_t\n"
             "{packed}        Fields:\n          - {{Name: a, Type: u32}}\n")
    packed = load_spec(_write(tmp_path, small.format(packed="        Packed: true\n"), "p.yaml"))
    report = diff_specs(packed, load_spec(_write(tmp_path, small.format(packed=""), "q.yaml")))
    assert any("packed True -> False" in c.what for c in report.changes)


def test_bundled_specs_without_constants_keep_their_hash() -> None:
    # The canonical form gains "constants"/"packed" keys only when used.
    spec = load_spec(generate.bundled_specs_dir() / "headers.yaml")
    assert "constants" not in spec.canonical()
    assert all("packed" not in s for s in spec.canonical()["structs"])


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("kabi")
    generate.write(generate.outputs_for(_write(out, SPEC), out))
    spec = importlib.util.spec_from_file_location("kabi", out / "kabi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kabi"] = module
    spec.loader.exec_module(module)
    return out, module


def test_python_constants_and_packed_ctypes(generated) -> None:
    _, mod = generated
    assert (mod.BASE, mod.BIG, mod.NEG) == (0x1F000000, 0x123456789, -5)
    assert ctypes.sizeof(mod.params_t) == 30 and mod.params_t.b.offset == 18
    assert ctypes.sizeof(mod.holder_t) == 16 and mod.holder_t.p.offset == 1


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_c_constants_and_packed_layout_compile(generated, tmp_path: Path) -> None:
    out, _ = generated
    inc = tmp_path / "inc" / "pydla"
    inc.mkdir(parents=True)
    shutil.copy(out / "pydla" / "kabi.h", inc)
    src = tmp_path / "t.c"
    src.write_text('#include <stdio.h>\n#include "pydla/kabi.h"\nint main(void) {\n'
                   '  printf("%u %llu %d %zu %zu\\n", KABI_BASE, (unsigned long long)KABI_BIG, KABI_NEG,\n'
                   '         sizeof(params_t), offsetof(params_t, b));\n  return 0;\n}\n')
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(tmp_path / "inc"), str(src), "-o",
                    str(tmp_path / "t")], check=True, capture_output=True, text=True)
    got = subprocess.run([str(tmp_path / "t")], check=True, capture_output=True, text=True).stdout.split()
    assert got == [str(0x1F000000), str(0x123456789), "-5", "30", "18"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_cpp_constants_compile(generated, tmp_path: Path) -> None:
    out, _ = generated
    inc = tmp_path / "inc" / "pydla"
    inc.mkdir(parents=True)
    shutil.copy(out / "pydla" / "kabi.hpp", inc)
    src = tmp_path / "t.cpp"
    src.write_text('#include "pydla/kabi.hpp"\n'
                   "static_assert(pydla::kabi::BASE == 0x1F000000u, \"base\");\n"
                   "static_assert(pydla::kabi::NEG == -5, \"neg\");\n"
                   "static_assert(sizeof(pydla::kabi::params_t) == 30, \"size\");\n"
                   "int main() { return 0; }\n")
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-fsyntax-only", "-I", str(tmp_path / "inc"),
                    str(src)], check=True, capture_output=True, text=True)
