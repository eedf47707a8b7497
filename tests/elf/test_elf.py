"""The ELF writer and reader: readelf accepts what we write, it reads back, and malformed files are
DlaErrors (never another exception)."""

from __future__ import annotations

import contextlib
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pydla import DlaError, NvError
from pydla.elf.reader import ElfReader
from pydla.elf.writer import (
    SHDR,
    SHT_NOBITS,
    SHT_NOTE,
    STB_LOCAL,
    STT_FUNC,
    ElfWriter,
)


def sample() -> bytes:
    w = ElfWriter()
    w.add_section(".dla.network", bytes(range(64)), align=64)
    w.add_section(".dla.weights", b"\x01" * 100, align=4096)
    w.add_section(".text", b"\x90" * 16, align=16)
    w.add_note(".note.pydla", "pydla", 1, b"1.2.3")
    w.add_note(".note.pydla", "pydla", 2, b"\xaa" * 8)
    w.add_symbol("input", ".dla.network", value=16, size=8)
    w.add_symbol("local1", ".dla.network", value=0, size=8, binding=STB_LOCAL)
    w.add_symbol("entry", ".text", value=0, size=16, sym_type=STT_FUNC)
    w.add_relocation(".dla.network", offset=16, rel_type=1, symbol="input", addend=4)
    w.add_relocation(".dla.network", offset=8, rel_type=2, addend=-3)
    w.add_nobits(".bss", 4096)
    return w.build()


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils' readelf is not installed")
def test_readelf_accepts_the_output_without_warnings(tmp_path: Path) -> None:
    path = tmp_path / "t.elf"
    path.write_bytes(sample())
    result = subprocess.run(["readelf", "-a", "-W", str(path)], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stderr == "", result.stderr
    for fragment in (".dla.network", ".rela.dla.network", "input + 4", "pydla", "NOBITS", "local1"):
        assert fragment in result.stdout


def test_round_trip() -> None:
    blob = sample()
    r = ElfReader(blob)
    assert bytes(r.section(".dla.network")) == bytes(range(64))
    assert r.section_offset(".dla.network") % 64 == 0
    assert r.section_offset(".dla.weights") % 4096 == 0
    assert bytes(r.section(".bss", "SHT_NOBITS")) == b""
    assert r.section_info(".bss")["sh_size"] == 4096
    notes = list(r.notes(".note.pydla"))
    assert [(n.owner, n.note_type, n.desc) for n in notes] == [
        ("pydla", 1, b"1.2.3"), ("pydla", 2, b"\xaa" * 8)]
    syms = {s.name: s for s in r.symbols() if s.name}
    assert syms["input"].section == ".dla.network" and syms["input"].value == 16
    assert syms["entry"].sym_type == "STT_FUNC"
    assert syms["local1"].binding == "STB_LOCAL"
    rel = r.relocations(".dla.network")
    assert [(x.offset, x.rel_type, x.symbol.name if x.symbol else None, x.addend) for x in rel] == [
        (8, 2, None, -3), (16, 1, "input", 4)]
    assert r.relocations(".text") == []


def test_section_data_is_zero_copy() -> None:
    blob = bytearray(sample())
    r = ElfReader(blob)
    view = r.section(".dla.network")
    blob[r.section_offset(".dla.network")] = 0xEE
    assert view[0] == 0xEE


def test_writer_rejects_misuse() -> None:
    w = ElfWriter()
    w.add_section(".a", b"x")
    with pytest.raises(DlaError, match="taken"):
        w.add_section(".a", b"y")
    with pytest.raises(DlaError, match="power of two"):
        w.add_section(".b", b"y", align=3)
    with pytest.raises(DlaError, match="outside section"):
        w.add_relocation(".a", offset=5, rel_type=1)
    with pytest.raises(DlaError, match="no section"):
        w.add_relocation(".zz", offset=0, rel_type=1)
    w.add_symbol("s", ".a")
    with pytest.raises(DlaError, match="twice"):
        w.add_symbol("s", ".a")
    w.add_symbol("bad", ".nope")
    with pytest.raises(DlaError, match="unknown section"):
        w.build()


def _shdr_offset(blob: bytes, index: int) -> int:
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    return shoff + index * SHDR.size


def _patch_section(blob: bytes, index: int, field: str, value: int) -> bytes:
    fields = ["name", "type", "flags", "addr", "offset", "size", "link", "info", "align", "entsize"]
    values = list(SHDR.unpack_from(blob, _shdr_offset(blob, index)))
    values[fields.index(field)] = value
    out = bytearray(blob)
    SHDR.pack_into(out, _shdr_offset(blob, index), *values)
    return bytes(out)


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda b: b[:40], "not an ELF file"),
        (lambda b: b"\x7fELX" + b[4:], "not an ELF file"),
        (lambda b: b[:4] + b"\x01" + b[5:], "64-bit little-endian"),
        (lambda b: b[:4] + b"\x02\x02" + b[6:], "64-bit little-endian"),
        (lambda b: b[:-10], "section header table"),
        (lambda b: _patch_section(b, 1, "offset", len(b) - 10), "runs past"),
        (lambda b: _patch_section(b, 1, "size", 1 << 40), "runs past"),
        (lambda b: _patch_section(b, 2, "offset", _read_off(b, 1) + 8), "overlaps"),
        (lambda b: b[:0x3E] + struct.pack("<H", 99) + b[0x40:], "e_shstrndx"),
    ],
    ids=["truncated-header", "magic", "32-bit", "big-endian", "truncated-table", "offset-past-end",
         "size-past-end", "overlap", "shstrndx"],
)
def test_malformed_files_are_dlaerrors(mutate, fragment) -> None:
    with pytest.raises(DlaError) as e:
        ElfReader(mutate(sample()))
    assert fragment in str(e.value)
    assert e.value.code in (NvError.BadValue, NvError.NotSupported)


def _read_off(blob: bytes, index: int) -> int:
    return int(SHDR.unpack_from(blob, _shdr_offset(blob, index))[4])


def _index_of(blob: bytes, name: str) -> int:
    return ElfReader(blob).section_names.index(name) + 1


def test_truncated_note_and_wrong_section_kinds() -> None:
    blob = sample()
    i = _index_of(blob, ".note.pydla")
    short = _patch_section(blob, i, "size", 20)
    with pytest.raises(DlaError, match=r"runs past|truncated"):
        list(ElfReader(short).notes(".note.pydla"))
    with pytest.raises(DlaError, match=r"section '\.text' has type SHT_PROGBITS, expected SHT_NOTE"):
        list(ElfReader(blob).notes(".text"))
    with pytest.raises(DlaError, match=r"no section '\.nope'"):
        ElfReader(blob).section(".nope")
    assert ElfReader(blob).section_info(".note.pydla")["sh_type"] == "SHT_NOTE"
    assert SHT_NOTE == 7 and SHT_NOBITS == 8


def test_relocation_outside_its_section() -> None:
    w = ElfWriter()
    w.add_section(".a", b"\0" * 32)
    w.add_relocation(".a", offset=24, rel_type=1)
    blob = w.build()
    shrunk = _patch_section(blob, 1, "size", 16)
    with pytest.raises(DlaError, match=r"outside section '\.a'"):
        ElfReader(shrunk).relocations(".a")


@pytest.mark.parametrize("sh_type", [2, 4, 9, 11, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF])
@pytest.mark.parametrize("name", [".dla.network", ".dla.weights", ".text", ".note.pydla"])
def test_a_changed_section_type_is_a_dla_error_naming_the_section(name: str, sh_type: int) -> None:
    # pyelftools builds a typed object per sh_type (a symbol table, REL entries...) and raises its own
    # ELFError when that type's rules fail; reading a data section must never go through that.
    changed = _patch_section(sample(), _index_of(sample(), name), "type", sh_type)
    reader = ElfReader(changed)
    expected = rf"section '{re.escape(name)}' has type \S+, expected SHT_(PROGBITS|NOTE)"
    with pytest.raises(DlaError, match=expected):
        if name == ".note.pydla":
            list(reader.notes(name))
        else:
            reader.section(name)


def test_section_zero_and_the_name_table_are_checked() -> None:
    blob = sample()
    with pytest.raises(DlaError, match="section 0 is not the null section"):
        ElfReader(_patch_section(blob, 0, "type", 1))
    shstrndx = struct.unpack_from("<H", blob, 0x3E)[0]
    with pytest.raises(DlaError, match=r"section-name table .* has type SHT_PROGBITS, expected SHT_STRTAB"):
        ElfReader(_patch_section(blob, shstrndx, "type", 1))


def _touch_everything(r: ElfReader) -> None:
    for name in r.section_names:
        r.section(name)
        r.section_info(name)
        if r.section_info(name)["sh_type"] == "SHT_NOTE":
            list(r.notes(name))
        r.relocations(name)
    r.symbols()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8))
def test_random_corruption_raises_only_dlaerror(patches) -> None:
    blob = bytearray(sample())
    for pos, value in patches:
        blob[pos % len(blob)] = value
    with contextlib.suppress(DlaError):
        _touch_everything(ElfReader(bytes(blob)))
