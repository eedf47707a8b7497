"""User templates (`pydla deviceapi generate --template`): the documented example rendered byte for
byte, output naming, bundled outputs next to them, --check, every error with its file and line, and
the filters and `cgh` helpers a template receives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.deviceapi import helpers
from pydla.deviceapi.spec import bundled_specs_dir, load_spec

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
GUIDE = ROOT / "docs" / "guide" / "contracts.md"
DEVICE_API = bundled_specs_dir() / "device_api.yaml"

SMALL = """\
Name: {name}
Version: 1.2.3
Description: Two messages.
Modules:
  - Name: m
    Enums:
      - Name: state_e
        Storage: u8
        Members: [{{Name: IDLE, Value: 0}}, {{Name: BUSY, Value: 1}}]
    Messages:
      - Name: ping_cmd
        Id: 7
        Type: Command
        Fields:
          - {{Name: value, Type: u64}}
      - Name: ping_rsp
        Id: 8
        Type: Response
        Command: ping_cmd
        Fields:
          - {{Name: state, Type: enum, Enum: state_e}}
"""

LIST = "<% for m in spec.messages %><< m.name >>=<< m.msg_id >>\n<% endfor %>"


def docs_template(name: str) -> str:
    """The ```jinja block of the guide that follows ``<!-- template: NAME -->``."""
    text = GUIDE.read_text()
    m = re.search(r"<!-- template: " + re.escape(name) + r" -->\n```jinja\n(.*?\n)```\n", text, re.S)
    assert m is not None, f"{GUIDE}: no template block named {name}"
    return m.group(1)


def small_spec(tmp_path: Path, name: str = "small") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SMALL.format(name=name))
    return path


def generate(*args: str | Path) -> int:
    return main(["deviceapi", "generate", *map(str, args)])


def error_of(capsys: pytest.CaptureFixture[str], *args: str | Path) -> str:
    assert generate(*args) != 0
    return capsys.readouterr().err


# -- the documented example --------------------------------------------------------------------------


REFERENCE = "{spec}_reference.md.jinja"


def render_reference(spec: Path, out: Path) -> Path:
    """The guide's example template rendered for ``spec`` into ``out``; the output's path."""
    template = out / "templates" / REFERENCE
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(docs_template(REFERENCE))
    assert generate("--spec", spec, "--template", template, "--out-dir", out) == 0
    return out / REFERENCE.replace("{spec}", load_spec(spec).name).removesuffix(".jinja")


def test_the_guides_example_renders_a_bundled_spec_byte_for_byte(tmp_path: Path) -> None:
    # headers.yaml: the bundled spec every other builds on, so the one that changes least. The
    # expected file was reviewed by hand; after a deliberate change of headers.yaml or of the
    # template, refresh it with render_reference() and review the difference.
    rendered = render_reference(bundled_specs_dir() / "headers.yaml", tmp_path)
    expected = (DATA / "headers_reference.md").read_bytes()
    assert rendered.read_bytes() == expected
    assert b"| 8 | 16 | `command` | `command_header_t` |  |\n" in expected


def test_the_guides_excerpt_of_the_output_is_the_tested_output() -> None:
    block = r"<!-- output: headers_reference.md -->\n```markdown\n(.*?\n)```\n"
    m = re.search(block, GUIDE.read_text(), re.S)
    assert m is not None and len(m.group(1)) > 200
    assert (DATA / "headers_reference.md").read_text().startswith(m.group(1))


def test_the_guides_example_lists_every_message_of_device_api(tmp_path: Path) -> None:
    spec = load_spec(DEVICE_API)
    text = render_reference(DEVICE_API, tmp_path).read_text()
    for m in spec.messages:
        assert f"| 0x{m.msg_id:04x} | `{m.name}` | {m.msg_type} | {m.command or ''} | {m.size} |\n" in text
        assert f"### {m.name} ({m.msg_type} {m.msg_id}, {m.size} bytes)\n" in text
    for e in spec.enums:
        assert f"### enum {e.name} ({e.storage})\n" in text


def test_the_guides_copy_of_the_design_template_is_the_tested_one() -> None:
    text = GUIDE.read_text()
    body = (DATA / "design_example" / "device_api_types.h.jinja").read_text()
    assert f"```jinja\n{body}```\n" in text


# -- naming and what is written ----------------------------------------------------------------------


def test_template_name_gives_the_output_name_and_nothing_else_is_written(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "{spec}.ids.jinja").write_text(LIST)
    (tmp_path / "t" / "fixed.txt.jinja").write_text("<< spec.name >> << output >> << template >>\n")
    out = tmp_path / "out"
    assert generate("--spec", spec, "--template", tmp_path / "t" / "{spec}.ids.jinja",
                    "--template", tmp_path / "t" / "fixed.txt.jinja", "--out-dir", out) == 0
    assert sorted(p.name for p in out.rglob("*")) == ["fixed.txt", "small.ids"]
    assert (out / "small.ids").read_text() == "ping_cmd=7\nping_rsp=8\n"
    assert (out / "fixed.txt").read_text() == "small fixed.txt fixed.txt.jinja\n"


def test_lang_adds_the_bundled_outputs_next_to_the_templates(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    template = tmp_path / "{spec}.ids.jinja"
    template.write_text(LIST)
    out = tmp_path / "out"
    assert generate("--spec", spec, "--template", template, "--lang", "c", "--out-dir", out) == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.*")) == ["pydla/small.h", "small.ids"]


def test_default_out_dir_is_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = small_spec(tmp_path)
    template = tmp_path / "{spec}.ids.jinja"
    template.write_text(LIST)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert generate("--spec", spec, "--template", template) == 0
    assert [p.name for p in work.iterdir()] == ["small.ids"]


def test_output_names_the_file_for_one_spec_and_one_template(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    template = tmp_path / "ids.jinja"
    template.write_text(LIST + "<< output >>\n")
    target = tmp_path / "deep" / "named.txt"
    assert generate("--spec", spec, "--template", template, "--output", target) == 0
    assert target.read_text() == "ping_cmd=7\nping_rsp=8\nnamed.txt\n"


def test_output_with_two_specs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "ids.jinja"
    template.write_text(LIST)
    err = error_of(capsys, "--spec", small_spec(tmp_path, "a"), "--spec", small_spec(tmp_path, "b"),
                   "--template", template, "--output", tmp_path / "x")
    assert "--output" in err and "2 --spec" in err and not (tmp_path / "x").exists()


def test_a_directory_renders_its_templates_and_partials_are_only_included(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    d = tmp_path / "templates"
    d.mkdir()
    (d / "_banner.jinja").write_text("// << spec.name >> << spec.version_string >>\n")
    (d / "{spec}.h.jinja").write_text('<% include "_banner.jinja" %>#define N << spec.messages|length >>\n')
    (d / "{spec}.txt.jinja").write_text(LIST)
    (d / "notes.md").write_text("not a template")
    out = tmp_path / "out"
    assert generate("--spec", spec, "--template", d, "--out-dir", out) == 0
    assert sorted(p.name for p in out.iterdir()) == ["small.h", "small.txt"]
    assert (out / "small.h").read_text() == "// small 1.2.3\n#define N 2\n"


def test_one_template_for_two_specs_needs_the_spec_placeholder(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "ids.txt.jinja"
    template.write_text(LIST)
    specs = ["--spec", small_spec(tmp_path, "a"), "--spec", small_spec(tmp_path, "b")]
    err = error_of(capsys, *specs, "--template", template, "--out-dir", tmp_path / "out")
    assert "ids.txt: both a" in err and "and b" in err and "{spec}" in err
    assert not (tmp_path / "out").exists()
    placeholder = tmp_path / "{spec}.txt.jinja"
    placeholder.write_text(LIST)
    assert generate(*specs, "--template", placeholder, "--out-dir", tmp_path / "out") == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.txt", "b.txt"]


def test_check_reports_stale_template_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = small_spec(tmp_path)
    template = tmp_path / "{spec}.ids.jinja"
    template.write_text(LIST)
    args = ("--spec", spec, "--template", template, "--out-dir", tmp_path)
    assert generate(*args, "--check") == 1
    assert "stale: " in capsys.readouterr().out and not (tmp_path / "small.ids").exists()
    assert generate(*args) == 0
    assert generate(*args, "--check") == 0
    template.write_text(LIST + "changed\n")
    assert generate(*args, "--check") == 1


def test_without_spec_a_template_renders_every_bundled_spec(tmp_path: Path) -> None:
    template = tmp_path / "{spec}.name.jinja"
    template.write_text("<< spec.name >> << spec.layout_hash64 | hex(16) >>\n")
    out = tmp_path / "out"
    assert generate("--template", template, "--out-dir", out) == 0
    headers = load_spec(bundled_specs_dir() / "headers.yaml")
    assert (out / "headers.name").read_text() == f"headers 0x{headers.layout_hash64:016x}\n"
    assert {"device_api.name", "trace.name", "dla_regs.name"} <= {p.name for p in out.iterdir()}


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "fragment"), [
    ("line one\n<% for m in spec.messages %>\n<< m.name >>\n", ":3: template syntax error: Unexpected end"),
    ("ok\n<< spec.nmae >>\n", ":2: 'pydla.deviceapi.model.Spec object' has no attribute 'nmae'"),
    ("<% for m in spec.messages %>\n<< m.fields[0].offest >>\n<% endfor %>\n", ":2: "),
    ("a\nb\n<< nothing_here >>\n", ":3: 'nothing_here' is undefined"),
    ("<% if spec.description_typo %>x<% endif %>\n", ":1: "),
    ("\n\n\n<< 1 // 0 >>\n", ":4: ZeroDivisionError"),
    ("<< spec.name | hex >>\n", ":1: filter 'hex' takes an integer, not 'small'"),
    ("<< spec | c_type >>\n", ":1: filter 'c_type' takes a field"),
    ("<< spec.name | no_such_filter >>\n", ":1: template syntax error: No filter named 'no_such_filter'"),
    ('<% include "_missing.jinja" %>\n', ":1: template '_missing.jinja' not found"),
])
def test_template_errors_name_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               text: str, fragment: str) -> None:
    template = tmp_path / "bad.txt.jinja"
    template.write_text(text)
    err = error_of(capsys, "--spec", small_spec(tmp_path), "--template", template, "--out-dir", tmp_path)
    assert f"{template}{fragment}" in err, err
    assert "Traceback" not in err and not (tmp_path / "bad.txt").exists()


def test_an_undefined_name_in_an_included_template_names_that_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "_part.jinja").write_text("fine\n<< spec.missing_thing >>\n")
    template = tmp_path / "main.txt.jinja"
    template.write_text('first\n<% include "_part.jinja" %>\n')
    err = error_of(capsys, "--spec", small_spec(tmp_path), "--template", template, "--out-dir", tmp_path)
    assert f"{tmp_path / '_part.jinja'}:2: " in err and "missing_thing" in err


def test_errors_about_the_template_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = small_spec(tmp_path)
    not_jinja = tmp_path / "types.h"
    not_jinja.write_text("x")
    assert "must" not in (err := error_of(capsys, "--spec", spec, "--template", not_jinja))
    assert f"--template {not_jinja}: a template's file name ends in '.jinja'" in err
    err = error_of(capsys, "--spec", spec, "--template", tmp_path / "nope.jinja")
    assert "nope.jinja: no such file or directory" in err
    (tmp_path / "empty").mkdir()
    err = error_of(capsys, "--spec", spec, "--template", tmp_path / "empty")
    assert "the directory holds no *.jinja template" in err
    latin = tmp_path / "latin.txt.jinja"
    latin.write_bytes(b"caf\xe9 << spec.name >>\n")
    err = error_of(capsys, "--spec", spec, "--template", latin, "--out-dir", tmp_path)
    assert f"{latin}: not UTF-8 text" in err
    ok = tmp_path / "ok.txt.jinja"
    ok.write_text(LIST)
    blocker = tmp_path / "file"
    blocker.write_text("")
    err = error_of(capsys, "--spec", spec, "--template", ok, "--out-dir", blocker)
    assert f"{blocker / 'ok.txt'}: cannot write it" in err


def test_an_output_never_overwrites_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = small_spec(tmp_path)
    template = tmp_path / "ids.jinja"
    template.write_text(LIST)
    for target, flag in ((template, "--template"), (spec, "--spec")):
        err = error_of(capsys, "--spec", spec, "--template", template, "--output", target)
        assert f"{target}: is the {flag} file itself" in err
    assert template.read_text() == LIST and spec.read_text() == SMALL.format(name="small")


def test_errors_are_dlaerrors_from_the_api(tmp_path: Path) -> None:
    from pydla.deviceapi.templates_user import render_template

    template = tmp_path / "x.jinja"
    template.write_text("<< spec.nope >>")
    with pytest.raises(DlaError) as e:
        render_template(template, load_spec(small_spec(tmp_path)), "small.yaml", "x")
    assert e.value.code == NvError.BadValue and e.value.message.startswith(f"{template}:1: ")


# -- what a template receives ------------------------------------------------------------------------


def test_filters() -> None:
    spec = load_spec(bundled_specs_dir() / "trace.yaml")
    log = next(s for s in spec.trace_events if s.name == "log")
    text = next(f for f in log.fields if f.kind == "string")
    assert helpers.c_type(text) == "char" and helpers.c_decl(text) == f"char text[{text.length}]"
    task_end = next(s for s in spec.trace_events if s.name == "task_end")
    status = next(f for f in task_end.fields if f.name == "status")
    assert helpers.c_type(status) == "dla_status_e" and helpers.c_type(task_end.fields[0]) == "uint64_t"
    assert helpers.hex_(64, 4) == "0x0040" and helpers.hex_(255) == "0xff"
    assert helpers.pascal("task_submit_cmd") == "TaskSubmitCmd"
    assert helpers.camel("task_submit_cmd") == "taskSubmitCmd"
    assert helpers.macro("device_api_types.h") == "DEVICE_API_TYPES_H"
    assert helpers.comment("Two\n  lines. */ end.") == "Two lines. * / end"
    with pytest.raises(DlaError, match="filter 'hex' takes an integer, not True"):
        helpers.hex_(True)
    with pytest.raises(DlaError, match="filter 'pascal' takes a name"):
        helpers.pascal(3)


def test_cgh_gives_yaml_keyed_items_with_the_layout(tmp_path: Path) -> None:
    spec = load_spec(small_spec(tmp_path))
    cgh = helpers.DesignHelpers(spec)
    cmd, rsp = cgh.messages()
    assert cmd == {"Name": "ping_cmd", "Description": "", "Size": 24, "Align": 8, "Id": 7, "Type": "Command",
                   "Fields": [{"Name": "value", "Type": "u64", "Description": "", "Offset": 16, "Size": 8}]}
    assert rsp["Command"] == "ping_cmd" and rsp["Fields"][0]["Enum"] == "state_e"
    assert cgh.message_field_type(rsp["Fields"][0]) == "state_e"
    assert cgh.message_field_type(cmd["Fields"][0]) == "uint64_t"
    assert cgh.enums() == [{"Name": "state_e", "Description": "", "Storage": "u8", "Members": [
        {"Name": "IDLE", "Value": 0, "Description": ""}, {"Name": "BUSY", "Value": 1, "Description": ""}]}]
    assert cgh.structs() == [] and cgh.trace_events() == []
    with pytest.raises(DlaError, match=r"cgh\.message_field_type takes a field"):
        cgh.message_field_type("u32")


def test_the_documented_attributes_exist() -> None:
    """What the guide says a template receives is there (and the guide names each)."""
    text = GUIDE.read_text()
    table = text[text.index("`spec` (a `pydla.deviceapi.model.Spec`):"):text.index("A `StructDef` (struct")]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    documented = [n for cell in first_cells for n in re.findall(r"`(\w+)(?:\([^`]*\))?`", cell)]
    spec = load_spec(DEVICE_API)
    assert len(documented) >= 17
    for name in documented:
        assert hasattr(spec, name), name
    struct, field = spec.messages[1], spec.messages[1].fields[1]
    objects = {"struct": (struct, "name description module category size align packed fields msg_id msg_type "
                                  "command payload"),
               "field": (field, "name description kind type_name count length is_array offset size align"),
               "g": (__import__("pydla.deviceapi.render", fromlist=["Gen"]).Gen(spec, "x"),
                     "ordered_structs c_type c_decl py_type enum_prefix c_literal macro_prefix doc "
                     "external_names")}
    for what, (obj, attrs) in objects.items():
        for name in attrs.split():
            assert hasattr(obj, name), (what, name)
            assert f"`{name}`" in text or f"`g.{name}(" in text, (what, name)


def test_help_shows_templates_and_schema(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["deviceapi", "generate", "--help"])
    out = capsys.readouterr().out
    for text in ("--template FILE_OR_DIR", "--schema FILE", "--output FILE", "<% statement %>",
                 "{spec}", "in addition to the bundled schema", "c_type", "cgh"):
        assert text in out, text


def test_a_specs_problems_are_listed_by_generate_as_validate_lists_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """generate squashed them into one line with literal \\n, cut at 400 characters."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("Name: bad\nVersion: {Major: 1}\nEnums: 3\n")
    assert main(["deviceapi", "validate", str(bad)]) == 1
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == f"{bad}: {len(listed) - 1} problem(s)" and len(listed) > 2
    assert generate("--spec", bad, "--out-dir", tmp_path / "out") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"pydla: error: {len(listed) - 1} problem(s) in the spec [BadValue]"
    assert err[1:] == listed[1:]  # the same lines, as validate prints them
    assert not (tmp_path / "out").exists()
