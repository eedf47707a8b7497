"""diff_specs: the change set between two versions of a spec and the semver bump it requires."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pydla.cli import main
from pydla.deviceapi.diff import DiffReport, diff_specs
from pydla.deviceapi.spec import load_spec

Doc = dict[str, Any]


def _base(*, struct_in_middle: bool = False) -> Doc:
    """A small spec: an enum, a struct, a command with three fields and an event holding the struct."""
    pos_fields: list[Doc] = [
        {"Name": "t", "Type": "u64"},
        {"Name": "p", "Type": "struct", "Struct": "point_t"},
    ]
    if struct_in_middle:
        pos_fields.append({"Name": "c", "Type": "u16"})
    return {
        "Name": "demo",
        "Version": "1.0.0",
        "Description": "A contract for diff tests.",
        "Modules": [{
            "Name": "m",
            "Enums": [{
                "Name": "color_e",
                "Storage": "u8",
                "Members": [{"Name": "RED", "Value": 0}, {"Name": "GREEN", "Value": 1}],
            }],
            "Structs": [{
                "Name": "point_t",
                "Description": "A point.",
                "Fields": [{"Name": "x", "Type": "u32"}, {"Name": "y", "Type": "u32"}],
            }],
            "Messages": [
                {
                    "Name": "ping_cmd",
                    "Id": 1,
                    "Type": "Command",
                    "Description": "Ping.",
                    "Fields": [
                        {"Name": "a", "Type": "u32", "Description": "first"},
                        {"Name": "b", "Type": "u32"},
                        {"Name": "c", "Type": "u16"},
                    ],
                },
                {"Name": "pos_evt", "Id": 2, "Type": "Event", "Fields": pos_fields},
            ],
        }],
    }


def _module(doc: Doc) -> Doc:
    module: Doc = doc["Modules"][0]
    return module


def _message(doc: Doc, name: str) -> Doc:
    return next(m for m in _module(doc)["Messages"] if m["Name"] == name)


def _fields(doc: Doc, name: str) -> list[Doc]:
    fields: list[Doc] = _message(doc, name)["Fields"]
    return fields


def _members(doc: Doc) -> list[Doc]:
    members: list[Doc] = _module(doc)["Enums"][0]["Members"]
    return members


def _write(path: Path, doc: Doc) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _diff(tmp_path: Path, change: Callable[[Doc], None], *, new_version: str = "1.0.0",
          old_version: str = "1.0.0", struct_in_middle: bool = False) -> DiffReport:
    old = _base(struct_in_middle=struct_in_middle)
    old["Version"] = old_version
    new = copy.deepcopy(old)
    change(new)
    new["Version"] = new_version
    old_spec = load_spec(_write(tmp_path / "old.yaml", old))
    new_spec = load_spec(_write(tmp_path / "new.yaml", new))
    return diff_specs(old_spec, new_spec)


def _texts(report: DiffReport) -> list[str]:
    return [c.what for c in report.changes]


def _has(report: DiffReport, level: str, *needles: str) -> bool:
    return any(c.level == level and all(n in c.what for n in needles) for c in report.changes)


# -- one test per rule ------------------------------------------------------------------------------


def test_field_appended_is_minor(tmp_path: Path) -> None:
    report = _diff(tmp_path, lambda d: _fields(d, "ping_cmd").append({"Name": "d", "Type": "u16"}))
    assert report.required == "minor"
    assert _has(report, "minor", "ping_cmd", "'d'", "appended"), _texts(report)


def test_field_inserted_in_the_middle_is_major(tmp_path: Path) -> None:
    report = _diff(tmp_path, lambda d: _fields(d, "ping_cmd").insert(1, {"Name": "x", "Type": "u32"}))
    assert report.required == "major"
    assert _has(report, "major", "ping_cmd", "'x'", "inserted in the middle"), _texts(report)


def test_fields_reordered_is_major(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        fields = _fields(d, "ping_cmd")
        fields[0], fields[1] = fields[1], fields[0]

    report = _diff(tmp_path, change)
    assert report.required == "major"
    assert _has(report, "major", "ping_cmd", "fields reordered"), _texts(report)


def test_field_deleted_is_major(tmp_path: Path) -> None:
    report = _diff(tmp_path, lambda d: _fields(d, "ping_cmd").pop(1))
    assert report.required == "major"
    assert _has(report, "major", "ping_cmd", "field 'b' deleted"), _texts(report)


def test_field_type_changed_is_major(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        _fields(d, "ping_cmd")[1]["Type"] = "i32"

    report = _diff(tmp_path, change)
    assert report.required == "major"
    assert _has(report, "major", "ping_cmd", "field 'b' changed", "u32", "i32"), _texts(report)


def test_message_deleted_is_major(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        _module(d)["Messages"] = [m for m in _module(d)["Messages"] if m["Name"] != "ping_cmd"]

    report = _diff(tmp_path, change)
    assert report.required == "major"
    assert _has(report, "major", "message 'ping_cmd' deleted"), _texts(report)


def test_message_added_is_minor(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        _module(d)["Messages"].append({"Name": "pong_cmd", "Id": 3, "Type": "Command",
                                       "Fields": [{"Name": "n", "Type": "u32"}]})

    report = _diff(tmp_path, change)
    assert report.required == "minor"
    assert _has(report, "minor", "message 'pong_cmd' added"), _texts(report)


def test_message_id_changed_is_major(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        _message(d, "ping_cmd")["Id"] = 5

    report = _diff(tmp_path, change)
    assert report.required == "major"
    assert _has(report, "major", "ping_cmd", "id 1 -> 5"), _texts(report)


def test_enum_member_deleted_is_major(tmp_path: Path) -> None:
    report = _diff(tmp_path, lambda d: _members(d).pop())
    assert report.required == "major"
    assert _has(report, "major", "color_e", "member 'GREEN' deleted"), _texts(report)


def test_enum_member_added_is_minor(tmp_path: Path) -> None:
    report = _diff(tmp_path, lambda d: _members(d).append({"Name": "BLUE", "Value": 2}))
    assert report.required == "minor"
    assert _has(report, "minor", "color_e", "member 'BLUE' added"), _texts(report)


def test_enum_member_value_changed_is_major(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        _members(d)[1]["Value"] = 7

    report = _diff(tmp_path, change)
    assert report.required == "major"
    assert _has(report, "major", "color_e", "member 'GREEN'", "1 -> 7"), _texts(report)


def test_enum_added_is_minor(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        _module(d)["Enums"].append({"Name": "shape_e", "Storage": "u16",
                                    "Members": [{"Name": "SQUARE", "Value": 1}]})

    report = _diff(tmp_path, change)
    assert report.required == "minor"
    assert _has(report, "minor", "enum 'shape_e' added"), _texts(report)


def _grow_point(d: Doc) -> None:
    _module(d)["Structs"][0]["Fields"].append({"Name": "z", "Type": "u32"})


def test_struct_grown_as_last_field_of_a_message_is_minor(tmp_path: Path) -> None:
    report = _diff(tmp_path, _grow_point)
    assert report.required == "minor", _texts(report)
    assert _has(report, "minor", "struct 'point_t'", "'z'", "appended"), _texts(report)


def test_struct_grown_in_the_middle_of_a_message_is_major(tmp_path: Path) -> None:
    report = _diff(tmp_path, _grow_point, struct_in_middle=True)
    assert report.required == "major"
    assert _has(report, "major", "point_t", "middle", "pos_evt"), _texts(report)


def test_description_only_change_is_patch(tmp_path: Path) -> None:
    def change(d: Doc) -> None:
        d["Description"] = "Reworded."
        _message(d, "ping_cmd")["Description"] = "Ping, reworded."
        _fields(d, "ping_cmd")[0]["Description"] = "the first field"
        _module(d)["Structs"][0]["Description"] = "A point in 2D."

    report = _diff(tmp_path, change)
    assert report.required == "patch"
    assert report.changes
    assert all(c.level == "patch" for c in report.changes)
    assert _has(report, "patch", "ping_cmd", "'a'", "description"), _texts(report)


def test_no_change_is_none(tmp_path: Path) -> None:
    report = _diff(tmp_path, lambda d: None)
    assert report.changes == []
    assert report.required == "none"
    assert report.actual == "none"
    assert report.ok
    assert "no changes" in report.summary()


def test_retiring_an_id_is_a_patch_change_that_keeps_the_layout_hash(tmp_path: Path) -> None:
    # Retired ids constrain future specs, not today's bytes: the hash (what check_compatible
    # compares) stays, and diff still reports the change so that it is not silent.
    report = _diff(tmp_path, lambda d: d.update(RetiredMessageIds=[9]))
    assert report.old.layout_hash == report.new.layout_hash
    assert report.required == "patch"
    assert any("retired message ids" in c.what for c in report.changes)


def test_a_change_of_the_layout_hash_is_never_none(tmp_path: Path) -> None:
    for mutate in (_append_field, lambda d: _fields(d, "ping_cmd").pop(1)):
        report = _diff(tmp_path, mutate)
        assert report.old.layout_hash != report.new.layout_hash
        assert report.required in ("minor", "major")


# -- the bump actually made ------------------------------------------------------------------------


def _append_field(d: Doc) -> None:
    _fields(d, "ping_cmd").append({"Name": "d", "Type": "u16"})


def test_minor_change_with_minor_bump_is_ok(tmp_path: Path) -> None:
    report = _diff(tmp_path, _append_field, new_version="1.1.0")
    assert (report.required, report.actual, report.ok) == ("minor", "minor", True)
    assert "ok" in report.summary().splitlines()[-1]


def test_minor_change_with_patch_bump_is_not_ok(tmp_path: Path) -> None:
    report = _diff(tmp_path, _append_field, new_version="1.0.1")
    assert (report.required, report.actual, report.ok) == ("minor", "patch", False)
    assert "NOT ENOUGH" in report.summary()


def test_major_change_with_major_bump_is_ok(tmp_path: Path) -> None:
    report = _diff(tmp_path, lambda d: _fields(d, "ping_cmd").pop(1), new_version="2.0.0")
    assert (report.required, report.actual, report.ok) == ("major", "major", True)


@pytest.mark.parametrize(("old_version", "new_version"), [("1.2.0", "1.1.0"), ("2.0.0", "1.9.9"),
                                                          ("1.0.1", "1.0.0")])
@pytest.mark.parametrize("changed", [False, True])
def test_version_downgrade_is_never_ok(tmp_path: Path, old_version: str, new_version: str,
                                       changed: bool) -> None:
    report = _diff(tmp_path, _append_field if changed else (lambda d: None),
                   old_version=old_version, new_version=new_version)
    assert report.actual == "downgrade"
    assert not report.ok


# -- the CLI ---------------------------------------------------------------------------------------


def _write_pair(tmp_path: Path, new_version: str) -> tuple[str, str]:
    old = _base()
    new = copy.deepcopy(old)
    _append_field(new)
    new["Version"] = new_version
    return str(_write(tmp_path / "old.yaml", old)), str(_write(tmp_path / "new.yaml", new))


def test_cli_diff_fails_when_the_bump_is_too_small(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path, "1.0.1")
    assert main(["deviceapi", "diff", old, new]) == 1
    out = capsys.readouterr().out
    assert "required bump: minor" in out
    assert "NOT ENOUGH" in out
    assert "'d' appended" in out


def test_cli_diff_succeeds_when_the_bump_is_enough(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    old, new = _write_pair(tmp_path, "1.1.0")
    assert main(["deviceapi", "diff", old, new]) == 0
    out = capsys.readouterr().out
    assert "required bump: minor" in out
    assert "1.0.0 -> 1.1.0" in out
    assert "NOT ENOUGH" not in out


def _write_regs(path: Path, reserved: int, extra: str) -> Path:
    path.write_text(f"""
Name: regs
Version: 1.0.0
Modules:
  - Name: m
    Structs:
      - Name: blk_t
        Fields:
          - {{Name: ctrl, Type: u32}}
{extra}          - {{Name: reserved, Type: u32, Count: {reserved}}}
          - {{Name: tail, Type: u32}}
""")
    return path


def test_fields_placed_in_reserved_space_are_minor(tmp_path: Path) -> None:
    old = load_spec(_write_regs(tmp_path / "old.yaml", 4, ""))
    new = load_spec(_write_regs(tmp_path / "new.yaml", 2, "          - {Name: a, Type: u32}\n"
                                                     "          - {Name: b, Type: u32}\n"))
    report = diff_specs(old, new)
    assert report.required == "minor", report.summary()
    assert sum("added in reserved space" in c.what for c in report.changes) == 2
    moved = load_spec(_write_regs(tmp_path / "moved.yaml", 4, "          - {Name: a, Type: u32}\n"))
    report = diff_specs(old, moved)
    assert report.required == "major"
    assert any("'tail' moved" in c.what for c in report.changes), report.summary()
