"""The generated code: message round trips, decode errors, dispatch, staleness, and the C / C++
headers compiled by the system compilers with every size and offset compared to ctypes."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.deviceapi import generate
from pydla.deviceapi.generated import device_api, headers, trace
from pydla.deviceapi.runtime import Dispatcher, Message, Record, decode
from pydla.deviceapi.spec import load_spec
from pydla.deviceapi.version import ContractVersion, check_compatible

MODULES = [headers, device_api, trace]

FULL_SPEC = """
Name: everything
Version: 0.3.1
Description: Every scalar type, arrays, strings and nesting.
Modules:
  - Name: types
    Enums:
      - Name: small_e
        Storage: i8
        Members: [{Name: NEG, Value: -128}, {Name: POS, Value: 127}]
      - Name: big_e
        Storage: u64
        Members: [{Name: TOP, Value: 18446744073709551615}, {Name: ZERO, Value: 0}]
      - Name: wide_e
        Storage: i64
        Members: [{Name: LOW, Value: -9223372036854775808}, {Name: ONE, Value: 1}]
    Structs:
      - Name: scalars_t
        Fields:
          - {Name: a_u64, Type: u64}
          - {Name: a_i64, Type: i64}
          - {Name: a_f64, Type: f64}
          - {Name: a_big, Type: enum, Enum: big_e}
          - {Name: a_u32, Type: uint32_t}
          - {Name: a_i32, Type: i32}
          - {Name: a_f32, Type: f32}
          - {Name: a_u16, Type: u16}
          - {Name: a_i16, Type: i16}
          - {Name: a_f16, Type: f16}
          - {Name: a_u8, Type: u8}
          - {Name: a_i8, Type: i8}
          - {Name: a_bool, Type: bool}
          - {Name: a_small, Type: enum, Enum: small_e}
          - {Name: pad, Type: u8, Count: 2}
      - Name: descriptor_t
        Description: Not a message, so it may nest and hold arrays and strings anywhere.
        Fields:
          - {Name: name, Type: string, Length: 8}
          - {Name: inner, Type: struct, Struct: scalars_t, Count: 2}
          - {Name: dims, Type: u32, Count: 4}
          - {Name: wide, Type: enum, Enum: wide_e}
    Messages:
      - Name: ping_cmd
        Id: 10
        Type: Command
        Fields:
          - {Name: value, Type: u64}
          - {Name: half, Type: f16}
          - {Name: ok, Type: bool}
      - Name: ping_rsp
        Id: 11
        Type: Response
        Command: ping_cmd
        Fields:
          - {Name: value, Type: u64}
    TraceEvents:
      - Name: note
        Id: 1
        Fields:
          - {Name: code, Type: u32}
          - {Name: text, Type: string, Length: 12}
"""


def _structs(module):
    return [v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Record) and v.__module__ == module.__name__]


def _import_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The FULL_SPEC generated into a temporary directory, and its Python module imported."""
    out = tmp_path_factory.mktemp("gen")
    spec_file = out / "everything.yaml"
    spec_file.write_text(FULL_SPEC)
    outputs = generate.outputs_for(spec_file, out)
    generate.write(outputs)
    module = _import_path("everything", out / "everything.py")
    return out, module


# -- messages ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(device_api.API.messages.values()), ids=lambda c: c.__name__)
def test_every_message_round_trips(cls: type[Message]) -> None:
    values = {}
    for i, entry in enumerate(cls._fields_[1:], start=1):
        name, ctype = entry[0], entry[1]
        if issubclass(ctype, Record):
            continue
        values[name] = (i * 37) % 250 + 1
    if cls.MSG_TYPE.name == "RESPONSE":
        assert cls.COMMAND is not None
        msg = cls.answer(cls.COMMAND.new(tag=0xABCDEF), **values)
        assert msg.header.command.tag == 0xABCDEF
        assert msg.header.command.common.id == cls.COMMAND.MSG_ID
    else:
        msg = cls.new(tag=5, timestamp_ns=99, **values)
    wire = bytes(msg)
    assert len(wire) == ctypes.sizeof(cls) == cls.SIZE
    assert int.from_bytes(wire[0:4], "little") == cls.SIZE
    assert int.from_bytes(wire[4:6], "little") == cls.MSG_ID
    assert wire[6] == int(cls.MSG_TYPE)
    back = decode(device_api.API, wire)
    assert type(back) is cls
    assert bytes(back) == wire
    for name, value in values.items():
        assert getattr(back, name) == value


def test_decode_is_zero_copy_on_writable_buffers() -> None:
    buf = bytearray(bytes(device_api.task_submit_cmd.new(task_id=1)))
    msg = decode(device_api.API, buf)
    buf[24] = 42  # task_id's first byte
    assert msg.task_id == 42
    copied = decode(device_api.API, bytes(buf))
    buf[24] = 7
    assert copied.task_id == 42


def test_to_dict_names_enum_members() -> None:
    evt = device_api.error_evt.new(task_id=3, status=device_api.dla_status_e.MMU_FAULT,
                                   block=device_api.dla_block_e.PDP, fault_address=0x1000)
    payload = evt.payload
    assert payload["status"] == "MMU_FAULT"
    assert payload["block"] == "PDP"
    assert payload["fault_address"] == 0x1000


@pytest.mark.parametrize(
    ("mutate", "code", "fragment"),
    [
        (lambda b: b[:5], NvError.InvalidSize, "shorter than the 8-byte header"),
        (lambda b: b[:20], NvError.InvalidSize, "buffer holds 20"),
        (lambda b: b[:4] + (999).to_bytes(2, "little") + b[6:], NvError.NotSupported,
         "unknown message id 999"),
        (lambda b: b[:6] + bytes([3]) + b[7:], NvError.BadValue, "header type 3"),
        (lambda b: (30).to_bytes(4, "little") + b[4:], NvError.InvalidSize, "defines it as 40"),
        (lambda b: (41).to_bytes(4, "little") + b[4:] + b"\0", NvError.InvalidSize, "defines it as 40"),
    ],
    ids=["short-header", "short-body", "unknown-id", "wrong-type", "size-too-small", "size-too-big"],
)
def test_decode_rejects_bad_bytes(mutate, code, fragment) -> None:
    wire = bytes(device_api.task_submit_cmd.new(task_id=1))
    with pytest.raises(DlaError) as e:
        decode(device_api.API, mutate(wire))
    assert e.value.code == code
    assert fragment in str(e.value)


def test_decode_accepts_longer_message_from_newer_peer_when_asked() -> None:
    wire = bytearray(bytes(device_api.reset_rsp.new(status=1)))
    wire[0:4] = (len(wire) + 8).to_bytes(4, "little")
    wire += b"\x01" * 8
    msg = decode(device_api.API, bytes(wire), allow_longer=True)
    assert msg.status == 1


def test_new_rejects_unknown_field_and_bad_value() -> None:
    with pytest.raises(DlaError, match="has no field 'nope'") as e:
        device_api.reset_cmd.new(nope=1)
    assert e.value.code == NvError.BadParameter
    with pytest.raises(DlaError, match="task_id"):
        device_api.abort_cmd.new(task_id="x" * 100)


def test_answer_checks_the_command_type() -> None:
    with pytest.raises(DlaError, match="answers version_query_cmd"):
        device_api.version_query_rsp.answer(device_api.reset_cmd.new())
    with pytest.raises(DlaError, match="not a Response"):
        device_api.reset_cmd.answer(device_api.reset_cmd.new())


def test_dispatcher_routes_by_id_and_answers() -> None:
    d = Dispatcher(device_api.API)
    seen = []

    @d.on(device_api.version_query_cmd)
    def version(cmd):
        seen.append(cmd.header.tag)
        return device_api.version_query_rsp.answer(
            cmd, api=device_api.api_version_t(layout_hash=device_api.LAYOUT_HASH64, major=1))

    reply = d.dispatch(bytes(device_api.version_query_cmd.new(tag=77)))
    assert seen == [77]
    assert reply.header.command.tag == 77
    peer = ContractVersion("device_api", (reply.api.major, reply.api.minor, reply.api.patch),
                           reply.api.layout_hash)
    check_compatible(ContractVersion.of(device_api.API), peer, local_role="host", peer_role="device")
    with pytest.raises(DlaError, match="no handler for reset_cmd") as e:
        d.dispatch(bytes(device_api.reset_cmd.new()))
    assert e.value.code == NvError.NotSupported
    with pytest.raises(DlaError, match="not a message of device_api"):
        d.register(trace.API.trace_events[1], print)  # type: ignore[arg-type]


def test_generated_versions_match_the_specs() -> None:
    for module in MODULES:
        spec = load_spec(generate.PACKAGE_DIR / "specs" / f"{module.NAME}.yaml")
        assert module.VERSION == spec.version
        assert module.LAYOUT_HASH == spec.layout_hash
        assert module.LAYOUT_HASH64 == int(spec.layout_hash[:16], 16)
        assert len(spec.layout_hash) == 64
        for s in spec.all_structs:
            assert ctypes.sizeof(getattr(module, s.name)) == s.size
            for f in s.fields:
                assert getattr(module, s.name).__dict__[f.name].offset == f.offset


def test_full_scalar_coverage_in_python(full) -> None:
    _, mod = full
    s = mod.scalars_t(a_u64=2**64 - 1, a_i64=-(2**63), a_f64=1.5, a_f16=0x3C00, a_bool=1, a_i8=-5)
    d = s.to_dict()
    assert d["a_f16"] == 1.0
    assert d["a_u64"] == 2**64 - 1
    assert d["a_i64"] == -(2**63)
    desc = mod.descriptor_t(name=b"conv1")
    assert desc.to_dict()["name"] == "conv1"
    assert ctypes.sizeof(mod.descriptor_t) == 8 + 2 * ctypes.sizeof(mod.scalars_t) + 16 + 8
    assert mod.small_e.NEG == -128 and mod.big_e.TOP == 2**64 - 1
    assert mod.ping_rsp.COMMAND is mod.ping_cmd


# -- staleness ------------------------------------------------------------------------------------


def test_committed_generated_files_are_current() -> None:
    stale = generate.stale(generate.bundled_outputs())
    assert not stale, "run `pydla deviceapi generate`: stale " + ", ".join(str(o.path) for o in stale)


def test_generate_check_detects_stale_and_missing(tmp_path: Path, capsys) -> None:
    assert main(["deviceapi", "generate", "--out-dir", str(tmp_path)]) == 0
    assert main(["deviceapi", "generate", "--check", "--out-dir", str(tmp_path)]) == 0
    victim = tmp_path / "pydla" / "device_api.h"
    victim.write_text(victim.read_text().replace("_Static_assert", "/* edited */ _Static_assert", 1))
    (tmp_path / "trace.py").unlink()
    capsys.readouterr()
    assert main(["deviceapi", "generate", "--check", "--out-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "device_api.h" in out and "trace.py" in out and "headers.py" not in out


def test_check_of_the_package_passes_through_the_cli(capsys) -> None:
    assert main(["deviceapi", "generate", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


# -- C and C++ -------------------------------------------------------------------------------------


needs_cc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


def _layout_program(modules, includes: list[str]) -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>"]
    lines += [f'#include "pydla/{name}.h"' for name in includes]
    lines.append("int main(void) {")
    for module in modules:
        for cls in _structs(module):
            lines.append(f'    printf("{cls.__name__} %zu\\n", sizeof({cls.__name__}));')
            for entry in cls._fields_:
                name = entry[0]
                lines.append(f'    printf("{cls.__name__}.{name} %zu\\n", '
                             f"offsetof({cls.__name__}, {name}));")
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def _python_layout(modules) -> dict[str, int]:
    layout = {}
    for module in modules:
        for cls in _structs(module):
            layout[cls.__name__] = ctypes.sizeof(cls)
            for entry in cls._fields_:
                layout[f"{cls.__name__}.{entry[0]}"] = getattr(cls, entry[0]).offset
    return layout


def _compile_and_compare(tmp_path: Path, include_dir: Path, modules, includes: list[str]) -> None:
    src = tmp_path / "layout.c"
    src.write_text(_layout_program(modules, includes))
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", str(include_dir),
                    str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    c_layout = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    assert c_layout == _python_layout(modules)


@needs_cc
def test_c_headers_compile_and_match_ctypes(tmp_path: Path) -> None:
    _compile_and_compare(tmp_path, generate.include_dir(), MODULES, ["headers", "device_api", "trace"])


@needs_cc
def test_c_header_of_full_spec_matches_ctypes(tmp_path: Path, full) -> None:
    out, mod = full
    # headers.h comes from the package; everything.h from the output directory.
    src_dir = tmp_path / "inc" / "pydla"
    src_dir.mkdir(parents=True)
    shutil.copy(out / "pydla" / "everything.h", src_dir)
    shutil.copy(generate.include_dir() / "pydla" / "headers.h", src_dir)
    _compile_and_compare(tmp_path, tmp_path / "inc", [mod], ["everything"])


@needs_cxx
@pytest.mark.parametrize("std", ["c++11", "c++17"])
def test_cpp_headers_compile(tmp_path: Path, full, std: str) -> None:
    out, _ = full
    inc = tmp_path / "inc" / "pydla"
    inc.mkdir(parents=True)
    for name in ("headers", "device_api", "trace"):
        shutil.copy(generate.include_dir() / "pydla" / f"{name}.hpp", inc)
    shutil.copy(out / "pydla" / "everything.hpp", inc)
    src = tmp_path / "use.cpp"
    src.write_text(
        '#include "pydla/device_api.hpp"\n#include "pydla/trace.hpp"\n#include "pydla/everything.hpp"\n'
        "static_assert(pydla::device_api::task_submit_cmd::MSG_ID == 3, \"id\");\n"
        "static_assert(sizeof(pydla::everything::descriptor_t) == "
        f"{ctypes.sizeof(full[1].descriptor_t)}, \"size\");\n"
        "static_assert(static_cast<int8_t>(pydla::everything::small_e::NEG) == -128, \"enum\");\n"
        "int main() { pydla::trace::log l{}; l.level = 1; return l.level - 1; }\n")
    subprocess.run(["g++", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                    "-I", str(tmp_path / "inc"), str(src)], check=True, capture_output=True, text=True)


def test_runtime_fast_header_matches_generated_header() -> None:
    from pydla.deviceapi import runtime

    h = headers.common_header_t
    assert runtime.COMMON_HEADER_SIZE == ctypes.sizeof(h)
    assert (h.size.offset, h.id.offset, h.type.offset) == (0, 4, 6)
    assert (h.size.size, h.id.size, h.type.size) == (4, 2, 1)
    assert runtime._COMMON.size == 7


def test_generate_refuses_a_layout_change_without_a_version_bump(tmp_path: Path) -> None:
    """A spec whose layout changed (here: a field added) at the same version is refused before
    anything is written, and written once its version is bumped."""
    specs = tmp_path / "specs"
    shutil.copytree(generate.bundled_specs_dir(), specs)  # with the specs it imports
    spec = specs / "dla_task.yaml"
    out = tmp_path / "out"
    generate.write(generate.outputs_for(spec, out, ("python",)))
    text = spec.read_text()
    version_line = next(line for line in text.splitlines() if line.startswith("Version: "))
    first_fields = text.index("Fields:\n") + len("Fields:\n")  # a field added to the first struct
    changed = text[:first_fields] + "          - {Name: added_field, Type: u32}\n" + text[first_fields:]
    spec.write_text(changed)
    before = (out / "dla_task.py").read_text()
    with pytest.raises(DlaError) as e:
        generate.write(generate.outputs_for(spec, out, ("python",)))
    assert e.value.code == NvError.VersionMismatch and "bump the spec's Version" in e.value.message
    assert (out / "dla_task.py").read_text() == before
    major, minor, _ = version_line.split()[1].split(".")
    spec.write_text(changed.replace(version_line, f"Version: {major}.{int(minor) + 1}.0"))
    assert generate.write(generate.outputs_for(spec, out, ("python",)))
