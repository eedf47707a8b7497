"""pydla info / validate on NVDLA files built here, and the generated FlatBuffers code's staleness."""

from __future__ import annotations

from pathlib import Path

import pytest

from pydla.cli import main
from pydla.loadable.nvdla import codegen
from pydla.loadable.nvdla.samples import conv_sdp_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable


def test_info_recognises_an_nvdla_loadable_by_content(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.bin"  # not named like one
    path.write_bytes(write_nvdla_loadable(conv_sdp_loadable()))
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "NVDLA Loadable 0.7.0" in out and "firmware interface 0.12.5: 2 operation(s)" in out
    assert "op 1 SDP   INT8         8x8x32 (on the fly) -> 8x8x32 @6" in out
    assert "6 SYSTEM ALLOC|OUTPUT" in out
    assert main(["validate", str(path)]) == 0
    assert "valid NVDLA Loadable" in capsys.readouterr().out


def test_validate_names_the_broken_field(tmp_path: Path, capsys) -> None:
    raw = bytearray(write_nvdla_loadable(conv_sdp_loadable()))
    path = tmp_path / "broken_fbuf"
    path.write_bytes(bytes(raw[: len(raw) // 2]))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "NVDLA Loadable: root" in err and "past the end of the" in err and "[InvalidSize]" in err


def test_generated_code_is_current() -> None:
    assert codegen.stale() == [], "run tools/regenerate"


def test_stale_check_sees_a_changed_schema(tmp_path: Path, monkeypatch) -> None:
    schema = tmp_path / "loadable.fbs"
    schema.write_text(codegen.SCHEMA.read_text() + "\n// a change\n")
    monkeypatch.setattr(codegen, "SCHEMA", schema)
    assert codegen.stale() == [f"loadable_generated.py was not generated from the current {schema.name}"]


@pytest.mark.skipif(codegen.find_flatc() is None, reason="flatc (the codegen extra) not installed")
def test_flatc_generates_the_committed_text() -> None:
    assert codegen.render(codegen.find_flatc() or "") == codegen.GENERATED.read_text()
