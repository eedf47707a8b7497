"""The example spec of the Device API code generation design (tests/deviceapi/data/design_example/):
as written it is accepted with the design's defaults (ids in declaration order, the Response paired
with its Command by name: warnings saying what to write) and its three undefined types reported, the
rest generated; with the warnings' text applied (mechanically, here) and the types defined, it
generates Python that imports and C and C++ that compile, and the design's example template renders it.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pydla.cli import main
from pydla.deviceapi import generate
from pydla.deviceapi.loader import Problem, SpecError
from pydla.deviceapi.runtime import decode
from pydla.deviceapi.spec import load_spec
from tests.deviceapi.test_generated import _compile_and_compare, _import_path, needs_cc, needs_cxx

DATA = Path(__file__).resolve().parent / "data"
EXAMPLE = DATA / "design_example"

# The definitions the example uses but does not show; the unknown-type problems ask for them.
TYPES = """\
  - Name: types
    Enums:
      - Name: kernel_launch_error_e
        Storage: u32
        Members: [{Name: OK, Value: 0}, {Name: BAD_KERNEL, Value: 1}]
    Structs:
      - Name: kernel_params_t
        Description: Where the kernel's arguments are
        Fields: [{Name: args_address, Type: u64}, {Name: args_size, Type: u32}, {Name: flags, Type: u32}]
      - Name: kernel_info_t
        Description: Which kernel
        Fields: [{Name: kernel_id, Type: u64}]
"""

ADD = re.compile(r"(?:add|write) `(\w+): (\w+)`")


def problems_of(spec: Path) -> list[Problem]:
    """Every problem of ``spec``, its warnings included (whether or not it loads)."""
    try:
        return list(load_spec(spec).warnings)
    except SpecError as e:
        return e.problems


def copy_example(tmp_path: Path) -> Path:
    d = tmp_path / "example"
    shutil.copytree(EXAMPLE, d)
    return d / "device-api.yaml"


def apply_additions(problems: list[Problem]) -> int:
    """Insert each ``add `Key: value``` line after the line the problem names, indented as the
    item's keys; return how many were applied."""
    todo = []
    for p in problems:
        m = ADD.search(p.message)
        if m:
            assert p.location.line is not None, p
            todo.append((p.location.file, p.location.line, len(todo), f"{m[1]}: {m[2]}"))
    # Bottom up, and at one line the last addition first, so that they end up in the problems' order.
    for file, line, _, text in sorted(todo, key=lambda t: (t[0], -t[1], -t[2])):
        path = Path(file)
        lines = path.read_text().splitlines(keepends=True)
        item = lines[line - 1]
        indent = len(item) - len(item.lstrip(" -"))
        lines.insert(line, " " * indent + text + "\n")
        path.write_text("".join(lines))
    return len(todo)


def completed_example(tmp_path: Path) -> Path:
    spec = copy_example(tmp_path)
    assert apply_additions(problems_of(spec)) == 4
    spec.write_text(spec.read_text() + TYPES)
    return spec


# -- as written ---------------------------------------------------------------------------------------


def test_as_written_it_is_read_with_the_designs_defaults(tmp_path: Path) -> None:
    problems = problems_of(copy_example(tmp_path))
    found = [(p.rule, p.severity, Path(p.location.file).name, p.location.line, p.location.item, p.message)
             for p in problems]
    ids = ("no `Id`: {n}, the lowest free one in declaration order, as the design assigns them; write "
           "`Id: {n}` so that the {what}'s identity on the wire stays when items are added or reordered")
    define = "define it under a module's `{}:`, or add the spec that defines it to `Imports:`"
    assert found == [
        ("explicit-id", "warning", "rpc-calls.yaml", 4, "kernel_launch_cmd", ids.format(n=1, what="message")),
        ("explicit-id", "warning", "rpc-calls.yaml", 14, "kernel_launch_rsp",
         ids.format(n=2, what="message")),
        ("explicit-id", "warning", "tracing-events.yaml", 2, "kernel_launch",
         ids.format(n=1, what="trace event")),
        ("response-command", "warning", "rpc-calls.yaml", 14, "kernel_launch_rsp",
         "no `Command`: paired with 'kernel_launch_cmd' by its name, as the design pairs them; write "
         "`Command: kernel_launch_cmd` to say so"),
        ("unknown-type", "error", "rpc-calls.yaml", 8, "kernel_launch_cmd",
         "no struct named 'kernel_params_t': " + define.format("Structs")),
        ("unknown-type", "error", "rpc-calls.yaml", 11, "kernel_launch_cmd",
         "no struct named 'kernel_info_t': " + define.format("Structs")),
        ("unknown-type", "error", "rpc-calls.yaml", 20, "kernel_launch_rsp",
         "no enum named 'kernel_launch_error_e': " + define.format("Enums")),
    ]


def test_validate_prints_them_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deviceapi", "validate", str(EXAMPLE / "device-api.yaml")]) == 1
    out = capsys.readouterr().out
    assert "3 problem(s), 4 warning(s)" in out
    assert ("rpc-calls.yaml:14: module 'rpc', message 'kernel_launch_rsp': warning: no `Command`: paired "
            "with 'kernel_launch_cmd' by its name") in out


def test_generate_writes_what_it_can_of_the_example_as_written(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The two messages need the undefined types and are left out (exit 1, named); the trace event is
    generated, with the id the design's order gives it."""
    out = tmp_path / "out"
    assert main(["deviceapi", "generate", "--spec", str(EXAMPLE / "device-api.yaml"), "--out-dir", str(out),
                 "--lang", "python"]) == 1
    text = capsys.readouterr().out
    assert "device-api.yaml: 2 item(s) left out (kernel_launch_cmd, kernel_launch_rsp), 3 problem(s):" in text
    api = _import_path("kernel_api_as_written", out / "kernel_api.py")
    assert api.kernel_launch.TRACE_ID == 1 and ctypes.sizeof(api.kernel_launch) == 64
    assert api.API.trace_events == {1: api.kernel_launch}
    assert not hasattr(api, "kernel_launch_cmd")


def test_a_file_of_bare_items_says_how_to_include_it(tmp_path: Path) -> None:
    for name, key in (("rpc-calls.yaml", "Messages"), ("tracing-events.yaml", "TraceEvents")):
        (problem,) = problems_of(EXAMPLE / name)
        assert problem.rule == "spec-shape" and "a spec is a mapping with Name, Version and Modules" in \
            problem.message
        snippet = problem.message.split("e.g.:\n", 1)[1]
        assert f"{key}: !include {name}" in snippet
        # The snippet is a spec that includes the file: what is left are the ids to add.
        shutil.copy(EXAMPLE / name, tmp_path / name)
        (tmp_path / "spec.yaml").write_text("\n".join(line[4:] for line in snippet.splitlines()) + "\n")
        assert {p.rule for p in problems_of(tmp_path / "spec.yaml")} <= {"explicit-id", "response-command",
                                                                         "unknown-type"}


# -- with the additions ---------------------------------------------------------------------------------


def test_with_the_additions_it_loads(tmp_path: Path) -> None:
    spec = load_spec(completed_example(tmp_path))
    assert [(m.name, m.msg_id, m.msg_type, m.command) for m in spec.messages] == [
        ("kernel_launch_cmd", 1, "Command", None), ("kernel_launch_rsp", 2, "Response", "kernel_launch_cmd")]
    assert [(t.name, t.msg_id, t.size) for t in spec.trace_events] == [("kernel_launch", 1, 64)]
    rpc = (tmp_path / "example" / "rpc-calls.yaml").read_text()
    assert "- Name: kernel_launch_rsp\n  Id: 2\n  Command: kernel_launch_cmd\n" in rpc


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    tmp = tmp_path_factory.mktemp("design")
    spec = completed_example(tmp)
    out = tmp / "out"
    generate.write(generate.outputs_for(spec, out))
    return out, _import_path("kernel_api", out / "kernel_api.py")


def test_the_python_imports_and_round_trips(generated: tuple[Path, Any]) -> None:
    _, api = generated
    params = api.kernel_params_t(args_address=0x1000, args_size=64)
    cmd = api.kernel_launch_cmd.new(tag=3, kernel_params=params)
    decoded = decode(api.API, bytes(cmd))
    assert decoded.kernel_params.args_address == 0x1000 and ctypes.sizeof(decoded) == 40
    reply = api.kernel_launch_rsp.answer(decoded, kernel_id=9, error=api.kernel_launch_error_e.BAD_KERNEL)
    assert reply.kernel_id == 9 and api.API.trace_events[1] is api.kernel_launch


@needs_cc
def test_the_c_header_compiles_and_matches_ctypes(tmp_path: Path, generated: tuple[Path, Any]) -> None:
    out, api = generated
    inc = tmp_path / "inc" / "pydla"
    inc.mkdir(parents=True)
    shutil.copy(out / "pydla" / "kernel_api.h", inc)
    shutil.copy(generate.include_dir() / "pydla" / "headers.h", inc)
    _compile_and_compare(tmp_path, tmp_path / "inc", [api], ["kernel_api"])


@needs_cxx
def test_the_cpp_header_compiles(tmp_path: Path, generated: tuple[Path, Any]) -> None:
    out, _ = generated
    src = tmp_path / "use.cpp"
    src.write_text('#include "pydla/kernel_api.hpp"\n'
                   "static_assert(pydla::kernel_api::kernel_launch_rsp::MSG_ID == 2, \"id\");\n"
                   "static_assert(sizeof(pydla::kernel_api::kernel_launch) == 64, \"size\");\n"
                   "int main() { pydla::kernel_api::kernel_launch_cmd c{};\n"
                   "             return (int)c.kernel_info.kernel_id; }\n")
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                    "-I", str(out), "-I", str(generate.include_dir()), str(src)],
                   check=True, capture_output=True, text=True)


@needs_cc
def test_the_designs_template_and_build_rule_work_as_written(tmp_path: Path) -> None:
    """The design's build rule (--spec --schema --template --output) with its example template."""
    spec = completed_example(tmp_path)
    header = tmp_path / "build" / "device_api_types.h"
    assert main(["deviceapi", "generate", "--spec", str(spec),
                 "--schema", str(Path(generate.__file__).parent / "schema" / "deviceapi.schema.json"),
                 "--template", str(EXAMPLE / "device_api_types.h.jinja"), "--output", str(header)]) == 0
    text = header.read_text()
    assert "/// @brief Where the kernel's arguments are\nstruct kernel_params_t {\n" in text
    assert "uint64_t  kernel_id;\n} __attribute__ ((packed));\n" in text
    src = tmp_path / "use.c"
    src.write_text('#include <stdint.h>\n#include "device_api_types.h"\n'
                   "_Static_assert(sizeof(struct kernel_params_t) == 16, \"size\");\n"
                   "int main(void) { struct kernel_info_t i = {7}; return (int)i.kernel_id - 7; }\n")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", str(header.parent), str(src),
                    "-o", str(tmp_path / "use")], check=True, capture_output=True, text=True)
    assert subprocess.run([str(tmp_path / "use")]).returncode == 0


def test_the_guides_reference_template_renders_it_byte_for_byte(tmp_path: Path) -> None:
    from tests.deviceapi.test_user_templates import render_reference

    spec = completed_example(tmp_path)
    rendered = render_reference(spec, tmp_path / "out")
    assert rendered.read_bytes() == (DATA / "kernel_api_reference.md").read_bytes()


# -- the pieces of the additions ------------------------------------------------------------------------


def test_suggested_ids_skip_taken_and_retired_ones(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("""\
Name: s
Version: 1.0.0
RetiredMessageIds: [2]
Modules:
  - Name: m
    Messages:
      - {Name: a_cmd, Type: Command}
      - {Name: b_cmd, Id: 1, Type: Command}
      - {Name: c_cmd, Type: Command}
""")
    assert [(p.location.item, p.severity, ADD.search(p.message)[0]) for p in problems_of(path)] == [
        ("a_cmd", "warning", "write `Id: 3`"), ("c_cmd", "warning", "write `Id: 4`")]


@pytest.mark.parametrize(("messages", "expected"), [
    ("[{Name: go, Id: 1, Type: Command}, {Name: go_response, Id: 2, Type: Response}]",
     "paired with 'go' by its name, as the design pairs them; write `Command: go` to say so"),
    ("[{Name: a_cmd, Id: 1, Type: Command}, {Name: b_cmd, Id: 2, Type: Command}, "
     "{Name: a_rsp, Id: 3, Type: Response, Command: a_cmd}, {Name: reply, Id: 4, Type: Response}]",
     "add `Command: <the Command it answers>`; unanswered Commands: b_cmd"),
    ("[{Name: lone_rsp, Id: 1, Type: Response}]",
     "add `Command: <the Command it answers>`; this spec defines no unanswered Command"),
])
def test_the_command_is_suggested_only_when_the_names_pair_up(tmp_path: Path, messages: str,
                                                              expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"Name: s\nVersion: 1.0.0\nModules:\n  - Name: m\n    Messages: {messages}\n")
    (problem,) = [p for p in problems_of(path) if p.rule == "response-command"]
    assert expected in problem.message


@pytest.mark.parametrize(("field", "hint"), [
    ("{Name: text, Type: string}", "'Length' is a required property: add `Length: <bytes>`"),
    ("{Name: kind, Type: enum}", "'Enum' is a required property: add `Enum: <the enum's name>`"),
])
def test_missing_keys_say_what_to_add(tmp_path: Path, field: str, hint: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("Name: s\nVersion: 1.0.0\nModules:\n  - Name: m\n    Enums: [{Name: k_e, Members: "
                    f"[{{Name: A, Value: 0}}]}}]\n    TraceEvents: [{{Name: t, Id: 1, Fields: [{field}]}}]\n")
    messages = [p.message for p in problems_of(path)]
    assert "Modules/0/Enums/0: 'Storage' is a required property: add `Storage: <u8, u16, u32, ...>` (an " \
           "enum is stored as the integer type it names)" in messages
    assert any(hint in m for m in messages), messages
