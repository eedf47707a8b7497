"""The spec language's rules: schema rejections, semantic rules, locations, !include, imports, hashes.

Every spec here is written into ``tmp_path`` and loaded with :func:`load_spec`; a spec that breaks a
rule must raise :class:`SpecError` naming the rule, saying what is wrong and pointing at the module,
item, field and line to fix.
"""

from __future__ import annotations

import textwrap

import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.loader import Location, Problem, SpecError
from pydla.deviceapi.spec import bundled_specs_dir, load_spec

# -- helpers ------------------------------------------------------------------------------------------


def norm(text):
    """The YAML exactly as written to disk: dedented, without the leading blank line."""
    return textwrap.dedent(text).lstrip("\n")


def write(directory, text, name="spec.yaml"):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(norm(text), encoding="utf-8")
    return path


def load(directory, text, name="spec.yaml"):
    return load_spec(write(directory, text, name))


def line_of(text, needle):
    """The 1-based line of the one line of ``text`` (as written) containing ``needle``."""
    lines = [n for n, line in enumerate(norm(text).splitlines(), 1) if needle in line]
    assert len(lines) == 1, f"{needle!r} is on lines {lines}"
    return lines[0]


def spec_error(directory, text, name="spec.yaml"):
    with pytest.raises(SpecError) as info:
        load(directory, text, name)
    err = info.value
    assert isinstance(err, DlaError)
    assert err.code == NvError.BadValue
    assert err.rules == [p.rule for p in err.problems]
    return err


def problem(err, rule, fragment, *, module=None, kind=None, item=None, field=None, line=None,
            file=None, only=True):
    """The one problem of ``rule`` in ``err``; check its message and location.

    ``only``: ``rule`` must be the only rule broken.
    """
    assert rule in err.rules, str(err)
    if only:
        assert err.rules == [rule], str(err)
    matching = [p for p in err.problems if p.rule == rule]
    assert len(matching) == 1, f"expected one {rule!r} problem:\n{err}"
    p = matching[0]
    assert isinstance(p, Problem)
    assert fragment in p.message, str(p)
    loc = p.location
    assert isinstance(loc, Location)
    assert (loc.module, loc.item_kind, loc.item, loc.field) == (module, kind, item, field), str(p)
    if line is not None:
        assert loc.line == line, str(p)
    if file is not None:
        assert loc.file == str(file), str(p)
    if item is not None:
        assert f"{kind} '{item}'" in str(loc)
    if field is not None:
        assert f"field '{field}'" in str(loc)
    return p


def spec(modules, extra=""):
    """A spec named ``s``: ``extra`` top-level YAML, then ``modules`` (the Modules list, any indent)."""
    head = "Name: s\nVersion: 1.0.0\n"
    if extra:
        head += norm(extra).rstrip("\n") + "\n"
    return head + "Modules:\n" + textwrap.indent(norm(modules), "  ")


def layout(item):
    return [(f.name, f.offset, f.size) for f in item.fields]


# -- a valid spec and its layout ----------------------------------------------------------------------

MINIMAL = spec(
    """
    - Name: m
      Enums:
        - Name: mode_e
          Storage: u16
          Members:
            - {Name: IDLE, Value: 0}
            - {Name: FAST, Value: 1}
      Structs:
        - Name: desc_t
          Fields:
            - {Name: address, Type: u64}
            - {Name: length, Type: u32}
            - {Name: mode, Type: enum, Enum: mode_e}
            - {Name: flags, Type: u8}
            - {Name: valid, Type: bool}
      Messages:
        - Name: go_cmd
          Id: 1
          Type: Command
          Fields:
            - {Name: address, Type: u64}
            - {Name: length, Type: u32}
            - {Name: mode, Type: enum, Enum: mode_e}
            - {Name: flag, Type: u8}
        - Name: go_rsp
          Id: 2
          Type: Response
          Command: go_cmd
          Fields:
            - {Name: value, Type: u64}
            - {Name: status, Type: u32}
        - Name: done_evt
          Id: 3
          Type: Event
          Fields:
            - {Name: count, Type: u32}
            - {Name: ready, Type: bool, Storage: u8}
    """
)


def test_minimal_spec_loads(tmp_path):
    s = load(tmp_path, MINIMAL)
    assert s.name == "s"
    assert s.version == (1, 0, 0)
    assert s.version_string == "1.0.0"
    assert [e.name for e in s.enums] == ["mode_e"]
    assert [x.name for x in s.structs] == ["desc_t"]
    assert [m.name for m in s.messages] == ["go_cmd", "go_rsp", "done_evt"]
    assert [m.msg_id for m in s.messages] == [1, 2, 3]
    assert s.messages[1].command == "go_cmd"
    assert len(s.layout_hash) == 64


def test_message_layout_header_first(tmp_path):
    s = load(tmp_path, MINIMAL)
    cmd, rsp, evt = s.messages
    for m, header, header_size in ((cmd, "command_header_t", 16), (rsp, "response_header_t", 24),
                                   (evt, "event_header_t", 16)):
        first = m.fields[0]
        assert (first.name, first.kind, first.type_name) == ("header", "struct", header)
        assert (first.offset, first.size) == (0, header_size)
        assert m.payload == m.fields[1:]
    assert layout(cmd) == [("header", 0, 16), ("address", 16, 8), ("length", 24, 4), ("mode", 28, 2),
                           ("flag", 30, 1)]
    assert cmd.size == 31
    assert layout(rsp) == [("header", 0, 24), ("value", 24, 8), ("status", 32, 4)]
    assert rsp.size == 36
    assert layout(evt) == [("header", 0, 16), ("count", 16, 4), ("ready", 20, 1)]
    assert evt.size == 21


def test_struct_layout(tmp_path):
    s = load(tmp_path, MINIMAL)
    desc = s.find_struct("desc_t")
    assert desc is not None
    # 8 + 4 + 2 + 1 + 1 = 16, aligned to its largest member (8).
    assert layout(desc) == [("address", 0, 8), ("length", 8, 4), ("mode", 12, 2), ("flags", 14, 1),
                            ("valid", 15, 1)]
    assert (desc.size, desc.align) == (16, 8)
    assert s.find_enum("mode_e").size == 2


def test_struct_layout_with_arrays_and_nesting(tmp_path):
    s = load(tmp_path, spec(
        """
        - Name: m
          Structs:
            - Name: inner_t
              Fields:
                - {Name: a, Type: u32}
                - {Name: b, Type: u16}
                - {Name: c, Type: u16}
            - Name: outer_t
              Fields:
                - {Name: items, Type: struct, Struct: inner_t, Count: 3}
                - {Name: words, Type: u16, Count: 5}
                - {Name: name, Type: string, Length: 6}
        """
    ))
    outer = s.find_struct("outer_t")
    assert layout(outer) == [("items", 0, 24), ("words", 24, 10), ("name", 34, 6)]
    assert (outer.size, outer.align) == (40, 4)


def test_trace_event_layout_has_no_header(tmp_path):
    s = load(tmp_path, spec(
        """
        - Name: m
          TraceEvents:
            - Name: ev
              Id: 1
              Fields:
                - {Name: a, Type: u64}
                - {Name: b, Type: u16}
                - {Name: text, Type: string, Length: 5}
        """
    ))
    (ev,) = s.trace_events
    assert layout(ev) == [("a", 0, 8), ("b", 8, 2), ("text", 10, 5)]
    assert ev.size == 15


# -- schema rejections --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "text", "needle", "loc"),
    [
        ("top level", spec("- Name: m", extra="Bogus: 1"), "Bogus: 1", (None, None, None, None)),
        ("module", spec("- Name: m\n  Bogus: 1"), "- Name: m", ("m", None, None, None)),
        ("enum", spec(
            """
            - Name: m
              Enums:
                - Name: e
                  Storage: u8
                  Bogus: 1
                  Members: [{Name: A, Value: 1}]
            """), "- Name: e", ("m", "enum", "e", None)),
        ("enum member", spec(
            """
            - Name: m
              Enums:
                - Name: e
                  Storage: u8
                  Members: [{Name: A, Value: 1, Bogus: 1}]
            """), "Members:", ("m", "enum", "e", "A")),
        ("struct", spec(
            """
            - Name: m
              Structs:
                - Name: st
                  Bogus: 1
                  Fields: [{Name: a, Type: u8}]
            """), "- Name: st", ("m", "struct", "st", None)),
        ("message", spec(
            """
            - Name: m
              Messages:
                - Name: c
                  Id: 1
                  Type: Command
                  Bogus: 1
            """), "- Name: c", ("m", "message", "c", None)),
        ("field", spec(
            """
            - Name: m
              Messages:
                - Name: c
                  Id: 1
                  Type: Command
                  Fields:
                    - {Name: a, Type: u8, Bogus: 1}
            """), "Bogus", ("m", "message", "c", "a")),
        ("trace event", spec(
            """
            - Name: m
              TraceEvents:
                - Name: t
                  Id: 1
                  Bogus: 1
                  Fields: [{Name: a, Type: u8}]
            """), "- Name: t", ("m", "trace event", "t", None)),
    ],
)
def test_schema_unknown_key(tmp_path, where, text, needle, loc):
    err = spec_error(tmp_path, text)
    module, kind, item, field = loc
    p = problem(err, "schema", "'Bogus' was unexpected", module=module, kind=kind, item=item,
                field=field)
    assert "allowed:" in p.message
    if where != "top level":
        assert p.location.line == line_of(text, needle)


def test_schema_missing_version(tmp_path):
    err = spec_error(tmp_path, "Name: s\nModules:\n  - Name: m\n")
    p = problem(err, "schema", "'Version' is a required property")
    assert p.location.line == 1


def test_schema_bad_semver(tmp_path):
    text = 'Name: s\nVersion: "1.0"\nModules:\n  - Name: m\n'
    err = spec_error(tmp_path, text)
    p = problem(err, "schema", "Version: '1.0' does not match")
    assert p.location.file == str(tmp_path / "spec.yaml")


@pytest.mark.parametrize(("msg_id", "fragment"), [(0, "less than the minimum of 1"),
                                                  (65535, "greater than the maximum of 65534")])
def test_schema_message_id_out_of_range(tmp_path, msg_id, fragment):
    text = spec(
        f"""
        - Name: m
          Messages:
            - Name: c
              Id: {msg_id}
              Type: Command
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "schema", f"Id: {msg_id} is {fragment}", module="m", kind="message", item="c",
            line=line_of(text, "- Name: c"))


def test_schema_enum_without_storage(tmp_path):
    text = spec(
        """
        - Name: m
          Enums:
            - Name: e
              Members: [{Name: A, Value: 1}]
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "schema", "'Storage' is a required property", module="m", kind="enum", item="e",
            line=line_of(text, "- Name: e"))


def test_schema_enum_field_without_enum(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: mode, Type: enum}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "schema", "'Enum' is a required property", module="m", kind="struct", item="st",
            field="mode", line=line_of(text, "Name: mode"))


def test_schema_string_without_length(tmp_path):
    text = spec(
        """
        - Name: m
          TraceEvents:
            - Name: t
              Id: 1
              Fields:
                - {Name: text, Type: string}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "schema", "'Length' is a required property", module="m", kind="trace event",
            item="t", field="text", line=line_of(text, "Name: text"))


def test_schema_storage_on_non_bool(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: count, Type: u32, Storage: u8}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "schema", "'Storage' is not allowed with this Type", module="m", kind="struct",
            item="st", field="count", line=line_of(text, "Name: count"))


@pytest.mark.parametrize("bad", ["2fast", "my-field", "a b", "x" * 65])
def test_schema_bad_identifier(tmp_path, bad):
    text = spec(
        f"""
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {{Name: "{bad}", Type: u8}}
        """
    )
    err = spec_error(tmp_path, text)
    p = problem(err, "schema", "Modules/0/Structs/0/Fields/0/Name", module="m", kind="struct",
                item="st", field=bad, line=line_of(text, "Type: u8"))
    assert bad in p.message


def test_schema_bad_item_name(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: bad.name
              Id: 1
              Type: Event
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "schema", "'bad.name' does not match", module="m", kind="message", item="bad.name",
            line=line_of(text, "bad.name"))


def test_schema_problems_are_all_reported(tmp_path):
    text = spec(
        """
        - Name: m
          Enums:
            - Name: e
              Members: [{Name: A, Value: 1}]
          Messages:
            - Name: c
              Id: 0
              Type: Command
              Fields:
                - {Name: z, Type: string}
        """,
        extra="Bogus: 1",
    )
    err = spec_error(tmp_path, text)
    assert err.rules == ["schema"] * 4
    assert "4 problem(s)" in str(err)


# -- enums --------------------------------------------------------------------------------------------


def enum_spec(storage, *members):
    lines = "\n".join(f"      - {{Name: {name}, Value: {value}}}" for name, value in members)
    return spec(f"- Name: m\n  Enums:\n    - Name: e\n      Storage: {storage}\n      Members:\n{lines}\n")


@pytest.mark.parametrize(
    ("storage", "value", "fragment"),
    [
        ("u8", 256, "value 256 does not fit the storage type u8 (0..255)"),
        ("i8", -129, "value -129 does not fit the storage type i8 (-128..127)"),
        ("i8", 128, "value 128 does not fit the storage type i8 (-128..127)"),
        ("uint16_t", 65536, "value 65536 does not fit the storage type u16 (0..65535)"),
        ("u64", 1 << 64, f"value {1 << 64} does not fit the storage type u64"),
    ],
)
def test_enum_range(tmp_path, storage, value, fragment):
    text = enum_spec(storage, ("A", 0), ("BIG", value))
    err = spec_error(tmp_path, text)
    problem(err, "enum-range", fragment, module="m", kind="enum", item="e", field="BIG",
            line=line_of(text, "Name: BIG"))


def test_enum_limits_fit(tmp_path):
    s = load(tmp_path, enum_spec("i8", ("LO", -128), ("HI", 127), ("ZERO", 0)))
    assert [(m.name, m.value) for m in s.enums[0].members] == [("LO", -128), ("HI", 127), ("ZERO", 0)]


def test_enum_negative(tmp_path):
    text = enum_spec("u32", ("A", 0), ("NEG", -1))
    err = spec_error(tmp_path, text)
    problem(err, "enum-negative", "value -1 is negative but the storage type u32 is unsigned",
            module="m", kind="enum", item="e", field="NEG", line=line_of(text, "Name: NEG"))


def test_enum_duplicate_member(tmp_path):
    text = enum_spec("u8", ("A", 0), ("B", 1), ("A", 2))
    err = spec_error(tmp_path, text)
    problem(err, "duplicate-member", "member 'A' appears twice", module="m", kind="enum", item="e",
            field="A", line=line_of(text, "Value: 2"))


def test_enum_duplicate_value(tmp_path):
    text = enum_spec("u8", ("A", 0), ("B", 1), ("C", 1))
    err = spec_error(tmp_path, text)
    problem(err, "duplicate-value", "value 1 is already taken by member 'B'", module="m", kind="enum",
            item="e", field="C", line=line_of(text, "Name: C"))


# -- fields -------------------------------------------------------------------------------------------


def test_bool_storage(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: ok, Type: bool, Storage: u32}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "bool-storage", "bools are stored as u8, not u32", module="m", kind="struct",
            item="st", field="ok", line=line_of(text, "Name: ok"))


def test_bool_storage_u8_is_fine(tmp_path):
    s = load(tmp_path, spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: a, Type: bool, Storage: uint8_t}
                - {Name: b, Type: bool, Storage: u8}
        """
    ))
    assert layout(s.structs[0]) == [("a", 0, 1), ("b", 1, 1)]


def test_struct_nesting_nested_struct(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: inner_t
              Fields:
                - {Name: x, Type: u32}
            - Name: outer_t
              Fields:
                - {Name: inner, Type: struct, Struct: inner_t}
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: outer, Type: struct, Struct: outer_t}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "struct-nesting", "struct 'outer_t' is used by message 'c'", module="m", kind="struct",
            item="outer_t", field="inner", line=line_of(text, "Name: inner,"))


def test_struct_nesting_array(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: arr_t
              Fields:
                - {Name: values, Type: u32, Count: 4}
          TraceEvents:
            - Name: t
              Id: 1
              Fields:
                - {Name: arr, Type: struct, Struct: arr_t}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "struct-nesting", "struct 'arr_t' is used by trace event 't'", module="m",
            kind="struct", item="arr_t", field="values", line=line_of(text, "Name: values"))


def test_struct_used_by_message_may_hold_scalars_and_enums(tmp_path):
    s = load(tmp_path, spec(
        """
        - Name: m
          Enums:
            - {Name: e, Storage: u16, Members: [{Name: A, Value: 1}]}
          Structs:
            - Name: flat_t
              Fields:
                - {Name: x, Type: u32}
                - {Name: kind, Type: enum, Enum: e}
                - {Name: pad, Type: u16}
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: flat, Type: struct, Struct: flat_t}
        """
    ))
    assert layout(s.messages[0]) == [("header", 0, 16), ("flat", 16, 8)]


def test_message_array_in_message(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: values, Type: u32, Count: 2}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "message-array", "arrays are not allowed in a message", module="m", kind="message",
            item="c", field="values", line=line_of(text, "Name: values"))


def test_message_array_in_trace_event(tmp_path):
    text = spec(
        """
        - Name: m
          TraceEvents:
            - Name: t
              Id: 1
              Fields:
                - {Name: values, Type: u64, Count: 2}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "message-array", "arrays are not allowed in a trace event", module="m",
            kind="trace event", item="t", field="values", line=line_of(text, "Name: values"))


def test_field_order_in_message(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: c
              Id: 1
              Type: Event
              Fields:
                - {Name: small, Type: u8}
                - {Name: big, Type: u32}
        """
    )
    err = spec_error(tmp_path, text)
    # big also lands at offset 17: misaligned as well as out of order.
    assert sorted(err.rules) == ["alignment", "field-order"]
    problem(err, "field-order", "'big' (4 bytes) follows 'small' (1 bytes)", module="m", kind="message",
            item="c", field="big", line=line_of(text, "Name: big"), only=False)
    problem(err, "alignment", "offset 17 is not a multiple of the field's alignment 4", module="m",
            kind="message", item="c", field="big", only=False)


def test_field_order_in_message_even_when_aligned(tmp_path):
    text = spec(
        """
        - Name: m
          TraceEvents:
            - Name: t
              Id: 1
              Fields:
                - {Name: a, Type: u8}
                - {Name: b, Type: u8}
                - {Name: c, Type: u16}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "field-order", "fields of a trace event go in decreasing size order", module="m",
            kind="trace event", item="t", field="c", line=line_of(text, "Name: c"))


def test_field_order_in_struct_used_by_message(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: a, Type: u8}
                - {Name: b, Type: u8}
                - {Name: c, Type: u16}
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: s, Type: struct, Struct: st}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "field-order", "fields of a struct go in decreasing size order: 'c' (2 bytes) follows "
            "'b' (1 bytes)", module="m", kind="struct", item="st", field="c",
            line=line_of(text, "Name: c, Type"))


def test_struct_not_used_by_message_may_have_any_aligned_order(tmp_path):
    s = load(tmp_path, spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: a, Type: u8}
                - {Name: b, Type: u8}
                - {Name: c, Type: u16}
                - {Name: d, Type: u32}
        """
    ))
    assert layout(s.structs[0]) == [("a", 0, 1), ("b", 1, 1), ("c", 2, 2), ("d", 4, 4)]


def test_alignment_in_plain_struct(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: a, Type: u8}
                - {Name: b, Type: u32}
        """
    )
    err = spec_error(tmp_path, text)
    assert "field-order" not in err.rules
    # 5 bytes is also not a multiple of the struct's alignment 4.
    assert sorted(err.rules) == ["alignment", "struct-size"]
    problem(err, "alignment", "offset 1 is not a multiple of the field's alignment 4", module="m",
            kind="struct", item="st", field="b", line=line_of(text, "Name: b"), only=False)


def test_struct_size(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: a, Type: u64}
                - {Name: b, Type: u8}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "struct-size", "size 9 is not a multiple of the struct's alignment 8; add 7 reserved",
            module="m", kind="struct", item="st", line=line_of(text, "- Name: st"))


def test_string_in_command(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: n, Type: u32}
                - {Name: text, Type: string, Length: 8}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "string-position", "strings may only be the last field of a trace (log) event",
            module="m", kind="message", item="c", field="text", line=line_of(text, "Name: text"))


def test_string_not_last_in_trace_event(tmp_path):
    text = spec(
        """
        - Name: m
          TraceEvents:
            - Name: t
              Id: 1
              Fields:
                - {Name: text, Type: string, Length: 8}
                - {Name: n, Type: u32}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "string-position", "a string must be the last field of a trace (log) event",
            module="m", kind="trace event", item="t", field="text", line=line_of(text, "Name: text"))


def test_string_last_in_trace_event_is_fine(tmp_path):
    s = load(tmp_path, spec(
        """
        - Name: m
          TraceEvents:
            - Name: log
              Id: 1
              Fields:
                - {Name: level, Type: u32}
                - {Name: text, Type: string, Length: 7}
        """
    ))
    (t,) = s.trace_events
    assert layout(t) == [("level", 0, 4), ("text", 4, 7)]
    assert (t.fields[1].kind, t.fields[1].length) == ("string", 7)


# -- names and ids ------------------------------------------------------------------------------------


def test_duplicate_name_in_module(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields: [{Name: a, Type: u8}]
            - Name: st
              Fields: [{Name: b, Type: u8}]
        """
    )
    err = spec_error(tmp_path, text)
    lines = [n for n, line in enumerate(norm(text).splitlines(), 1) if "- Name: st" in line]
    p = problem(err, "duplicate-name", "struct name 'st' is already used at", module="m", kind="struct",
                item="st", line=lines[1])
    assert f"spec.yaml:{lines[0]}" in p.message


def test_duplicate_name_across_modules(tmp_path):
    text = spec(
        """
        - Name: m1
          Enums:
            - {Name: thing, Storage: u8, Members: [{Name: A, Value: 1}]}
        - Name: m2
          Messages:
            - Name: thing
              Id: 1
              Type: Event
        """
    )
    err = spec_error(tmp_path, text)
    p = problem(err, "duplicate-name", "message name 'thing' is already used at", module="m2",
                kind="message", item="thing", line=line_of(text, "- Name: thing"))
    assert "module 'm1', enum 'thing'" in p.message


def test_duplicate_name_with_imported_header(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: command_header_t
              Fields: [{Name: x, Type: u64}]
        """
    )
    err = spec_error(tmp_path, text)
    p = problem(err, "duplicate-name", "struct name 'command_header_t' is already used at", module="m",
                kind="struct", item="command_header_t", line=line_of(text, "command_header_t"))
    assert "headers.yaml" in p.message


def test_duplicate_field(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: x, Type: u32}
                - {Name: x, Type: u32, Description: again}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "duplicate-field", "field 'x' appears twice", module="m", kind="struct", item="st",
            field="x", line=line_of(text, "again"))


def test_duplicate_field_header_in_message(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: header, Type: u64}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "duplicate-field", "'header' is the message header", module="m", kind="message",
            item="c", field="header", line=line_of(text, "Name: header"))


def test_duplicate_message_id(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: a_cmd
              Id: 7
              Type: Command
            - Name: b_evt
              Id: 7
              Type: Event
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "duplicate-id", "message id 7 is already used by 'a_cmd'", module="m", kind="message",
            item="b_evt", line=line_of(text, "- Name: b_evt"))


def test_duplicate_trace_event_id(tmp_path):
    text = spec(
        """
        - Name: m1
          TraceEvents:
            - Name: t1
              Id: 3
              Fields: [{Name: a, Type: u32}]
        - Name: m2
          TraceEvents:
            - Name: t2
              Id: 3
              Fields: [{Name: a, Type: u32}]
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "duplicate-id", "trace event id 3 is already used by 't1'", module="m2",
            kind="trace event", item="t2", line=line_of(text, "- Name: t2"))


def test_messages_and_trace_events_have_separate_ids(tmp_path):
    s = load(tmp_path, spec(
        """
        - Name: m
          Messages:
            - {Name: c, Id: 1, Type: Event}
          TraceEvents:
            - {Name: t, Id: 1, Fields: [{Name: a, Type: u32}]}
        """
    ))
    assert (s.messages[0].msg_id, s.trace_events[0].msg_id) == (1, 1)


def test_retired_message_id(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: c
              Id: 5
              Type: Event
        """,
        extra="RetiredMessageIds: [4, 5]",
    )
    err = spec_error(tmp_path, text)
    problem(err, "retired-id", "message id 5 is retired and may not be reused", module="m",
            kind="message", item="c", line=line_of(text, "- Name: c"))


def test_retired_trace_event_id(tmp_path):
    text = spec(
        """
        - Name: m
          TraceEvents:
            - Name: t
              Id: 9
              Fields: [{Name: a, Type: u32}]
        """,
        extra="RetiredTraceEventIds: [9]",
    )
    err = spec_error(tmp_path, text)
    problem(err, "retired-id", "trace event id 9 is retired", module="m", kind="trace event", item="t",
            line=line_of(text, "- Name: t"))


# -- responses ----------------------------------------------------------------------------------------


def test_response_without_command(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - {Name: c, Id: 1, Type: Command}
            - {Name: r, Id: 2, Type: Response}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "response-command", "a Response must name the Command it answers", module="m",
            kind="message", item="r", line=line_of(text, "Name: r,"))


def test_response_names_unknown_command(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - {Name: r, Id: 2, Type: Response, Command: nope_cmd}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "response-command", "answers Command 'nope_cmd', which this spec does not define",
            module="m", kind="message", item="r", line=line_of(text, "Name: r,"))


def test_response_names_an_event(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - {Name: e, Id: 1, Type: Event}
            - {Name: r, Id: 2, Type: Response, Command: e}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "response-command", "answers 'e', which is a Event, not a Command", module="m",
            kind="message", item="r", line=line_of(text, "Name: r,"))


@pytest.mark.parametrize("msg_type", ["Command", "Event"])
def test_non_response_with_command_key(tmp_path, msg_type):
    text = spec(
        f"""
        - Name: m
          Messages:
            - {{Name: a, Id: 1, Type: Command}}
            - {{Name: b, Id: 2, Type: {msg_type}, Command: a}}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "response-command", f"only a Response names a Command; this is a {msg_type}",
            module="m", kind="message", item="b", line=line_of(text, "Name: b,"))


def test_two_responses_for_one_command(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - {Name: c, Id: 1, Type: Command}
            - {Name: r1, Id: 2, Type: Response, Command: c}
            - {Name: r2, Id: 3, Type: Response, Command: c}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "response-command", "Command 'c' is already answered by 'r1'", module="m",
            kind="message", item="r2", line=line_of(text, "Name: r2,"))


# -- types --------------------------------------------------------------------------------------------


def test_unknown_enum(tmp_path):
    text = spec(
        """
        - Name: m
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: mode, Type: enum, Enum: nope_e}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "unknown-type", "no enum named 'nope_e'", module="m", kind="message", item="c",
            field="mode", line=line_of(text, "Name: mode"))


def test_unknown_struct(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: inner, Type: struct, Struct: nope_t}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "unknown-type", "no struct named 'nope_t'", module="m", kind="struct", item="st",
            field="inner", line=line_of(text, "Name: inner"))


def test_enum_used_as_struct(tmp_path):
    text = spec(
        """
        - Name: m
          Enums:
            - {Name: e, Storage: u8, Members: [{Name: A, Value: 1}]}
          Structs:
            - Name: st
              Fields:
                - {Name: inner, Type: struct, Struct: e}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "unknown-type", "no struct named 'e'", module="m", kind="struct", item="st",
            field="inner", line=line_of(text, "Name: inner"))


def test_message_used_as_struct(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: inner, Type: struct, Struct: c}
          Messages:
            - {Name: c, Id: 1, Type: Command}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "unknown-type", "'c' is a message, not a struct a field can hold", module="m",
            kind="struct", item="st", field="inner", line=line_of(text, "Name: inner"))


def test_unknown_type_in_struct_used_by_message_reported_once(tmp_path):
    # The struct is laid out on its own and again for the message that holds it; the problem with its
    # field is one problem and should be reported once.
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: mode, Type: enum, Enum: nope_e}
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: s, Type: struct, Struct: st}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "unknown-type", "no enum named 'nope_e'", module="m", kind="struct", item="st",
            field="mode", line=line_of(text, "Name: mode"))


def test_recursive_struct(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: node_t
              Fields:
                - {Name: value, Type: u32}
                - {Name: next, Type: struct, Struct: node_t}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "recursive-struct", "struct contains itself: node_t -> node_t", module="m",
            kind="struct", item="node_t", line=line_of(text, "- Name: node_t"))


def test_mutually_recursive_structs(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: a_t
              Fields: [{Name: b, Type: struct, Struct: b_t}]
            - Name: b_t
              Fields: [{Name: a, Type: struct, Struct: a_t}]
        """
    )
    err = spec_error(tmp_path, text)
    assert set(err.rules) == {"recursive-struct"}
    messages = [p.message for p in err.problems]
    assert "struct contains itself: a_t -> b_t -> a_t" in messages
    assert all(p.location.item in ("a_t", "b_t") for p in err.problems)


@pytest.mark.parametrize("name", ["int", "class"])
def test_reserved_field_name(tmp_path, name):
    text = spec(
        f"""
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {{Name: {name}, Type: u32}}
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "reserved-name", f"field '{name}' is a keyword or type name in C, C++ or Python",
            module="m", kind="struct", item="st", field=name, line=line_of(text, f"Name: {name},"))


def test_reserved_item_name(tmp_path):
    text = spec(
        """
        - Name: m
          Structs:
            - Name: struct
              Fields: [{Name: a, Type: u32}]
        """
    )
    err = spec_error(tmp_path, text)
    problem(err, "reserved-name", "struct 'struct' is a keyword", module="m", kind="struct",
            item="struct", line=line_of(text, "- Name: struct"))


# -- imports ------------------------------------------------------------------------------------------


def test_unknown_import(tmp_path):
    text = spec("- Name: m", extra="Imports: [no_such_spec]")
    err = spec_error(tmp_path, text)
    p = problem(err, "unknown-import", "no spec 'no_such_spec' to import")
    assert "no_such_spec.yaml" in p.message
    assert p.location.file == str(tmp_path / "spec.yaml")


def test_import_sibling_spec(tmp_path):
    write(tmp_path, """
        Name: lib
        Version: 2.1.0
        Modules:
          - Name: lm
            Enums:
              - Name: mode_e
                Storage: u16
                Members: [{Name: SLOW, Value: 1}, {Name: FAST, Value: 2}]
        """, "lib.yaml")
    s = load(tmp_path, spec(
        """
        - Name: m
          Messages:
            - Name: c
              Id: 1
              Type: Command
              Fields:
                - {Name: mode, Type: enum, Enum: mode_e}
        """,
        extra="Imports: [lib]",
    ))
    assert [i.name for i in s.imports] == ["headers", "lib"]
    assert s.find_enum("mode_e").spec == "lib"
    assert layout(s.messages[0]) == [("header", 0, 16), ("mode", 16, 2)]
    assert s.canonical()["imports"]["lib"] == s.imports[1].layout_hash


def test_imported_name_clash(tmp_path):
    write(tmp_path, """
        Name: lib
        Version: 1.0.0
        Modules:
          - Name: lm
            Enums:
              - {Name: mode_e, Storage: u8, Members: [{Name: A, Value: 1}]}
        """, "lib.yaml")
    text = spec(
        """
        - Name: m
          Enums:
            - {Name: mode_e, Storage: u8, Members: [{Name: A, Value: 1}]}
        """,
        extra="Imports: [lib]",
    )
    err = spec_error(tmp_path, text)
    p = problem(err, "duplicate-name", "enum name 'mode_e' is already used at", module="m", kind="enum",
                item="mode_e", line=line_of(text, "mode_e"))
    assert "lib.yaml" in p.message


# -- every problem at once ----------------------------------------------------------------------------


def test_all_problems_reported_at_once(tmp_path):
    text = spec(
        """
        - Name: m
          Enums:
            - Name: e
              Storage: u8
              Members: [{Name: A, Value: 300}]
          Structs:
            - Name: st
              Fields:
                - {Name: int, Type: u32}
          Messages:
            - {Name: a, Id: 4, Type: Event}
            - {Name: b, Id: 4, Type: Event}
        """
    )
    err = spec_error(tmp_path, text)
    assert sorted(err.rules) == ["duplicate-id", "enum-range", "reserved-name"]
    problem(err, "enum-range", "value 300", module="m", kind="enum", item="e", field="A",
            line=line_of(text, "Value: 300"), only=False)
    problem(err, "reserved-name", "field 'int'", module="m", kind="struct", item="st", field="int",
            line=line_of(text, "Name: int"), only=False)
    problem(err, "duplicate-id", "message id 4 is already used by 'a'", module="m", kind="message",
            item="b", line=line_of(text, "Name: b,"), only=False)
    text_of_error = str(err)
    assert "3 problem(s)" in text_of_error
    for rule in ("[enum-range]", "[reserved-name]", "[duplicate-id]"):
        assert rule in text_of_error


# -- !include and YAML errors -------------------------------------------------------------------------

INCLUDING = spec("- !include parts/mod.yaml")


def test_include_module(tmp_path):
    write(tmp_path, """
        Name: m
        Structs:
          - Name: st
            Fields: [{Name: a, Type: u64}]
        Messages:
          - {Name: c, Id: 1, Type: Command, Fields: [{Name: s, Type: struct, Struct: st}]}
        """, "parts/mod.yaml")
    s = load(tmp_path, INCLUDING)
    assert [x.name for x in s.all_structs] == ["st", "c"]
    assert s.structs[0].module == "m"
    assert s.structs[0].location.file == str(tmp_path / "parts" / "mod.yaml")
    assert s.structs[0].location.line == 3


def test_include_problem_location(tmp_path):
    included = """
        Name: m
        Description: an included module
        Enums:
          - Name: e
            Storage: i8
            Members:
              - {Name: A, Value: 1}
              - {Name: B, Value: -129}
        """
    write(tmp_path, included, "parts/mod.yaml")
    err = spec_error(tmp_path, INCLUDING)
    p = problem(err, "enum-range", "value -129", module="m", kind="enum", item="e", field="B",
                line=line_of(included, "Name: B"), file=tmp_path / "parts" / "mod.yaml")
    assert str(p.location).startswith(f"{tmp_path / 'parts' / 'mod.yaml'}:{line_of(included, 'Name: B')}:")


def test_include_list_problem_location(tmp_path):
    included = """
        - Name: c
          Id: 1
          Type: Command
          Fields:
            - {Name: a, Type: u8}
            - {Name: b, Type: u32}
        """
    write(tmp_path, included, "msgs.yaml")
    err = spec_error(tmp_path, spec("- Name: m\n  Messages: !include msgs.yaml"))
    problem(err, "field-order", "'b' (4 bytes) follows 'a'", module="m", kind="message", item="c",
            field="b", line=line_of(included, "Name: b"), file=tmp_path / "msgs.yaml", only=False)


def test_include_schema_problem_location(tmp_path):
    included = """
        Name: m
        Messages:
          - Name: c
            Id: 70000
            Type: Command
        """
    write(tmp_path, included, "parts/mod.yaml")
    err = spec_error(tmp_path, INCLUDING)
    problem(err, "schema", "70000 is greater than the maximum", module="m", kind="message", item="c",
            line=line_of(included, "- Name: c"), file=tmp_path / "parts" / "mod.yaml")


def test_include_cycle(tmp_path):
    write(tmp_path, "Name: m\nStructs: !include b.yaml\n", "a.yaml")
    write(tmp_path, "- !include a.yaml\n", "b.yaml")
    with pytest.raises(DlaError) as info:
        load(tmp_path, spec("- !include a.yaml"))
    err = info.value
    assert not isinstance(err, SpecError)
    assert err.code == NvError.BadValue
    assert "!include cycle" in err.message
    assert f"{tmp_path / 'b.yaml'}:1" in err.message
    assert f"{tmp_path / 'a.yaml'} -> {tmp_path / 'b.yaml'} -> {tmp_path / 'a.yaml'}" in err.message


def test_include_self(tmp_path):
    with pytest.raises(DlaError, match="!include cycle"):
        load(tmp_path, spec("- !include spec.yaml"))


def test_include_missing_file(tmp_path):
    text = spec("- !include nowhere.yaml")
    with pytest.raises(DlaError) as info:
        load(tmp_path, text)
    err = info.value
    assert not isinstance(err, SpecError)
    assert err.code == NvError.FileNotFound
    where = f"{tmp_path / 'spec.yaml'}:{line_of(text, 'nowhere')}"
    assert err.message == f"{where}: {tmp_path / 'nowhere.yaml'}: no such file"


def test_include_takes_a_file_name(tmp_path):
    with pytest.raises(DlaError, match="!include takes a file name"):
        load(tmp_path, spec("- !include [a.yaml, b.yaml]"))


def test_unreadable_spec(tmp_path):
    with pytest.raises(DlaError) as info:
        load_spec(tmp_path / "absent.yaml")
    assert info.value.code == NvError.FileNotFound
    assert info.value.message == f"{tmp_path / 'absent.yaml'}: no such file"


def test_yaml_syntax_error(tmp_path):
    text = spec(
        """
        - Name: m
          Enums: [unclosed
        """
    )
    with pytest.raises(DlaError) as info:
        load(tmp_path, text)
    err = info.value
    assert not isinstance(err, SpecError)
    assert err.code == NvError.BadValue
    assert str(tmp_path / "spec.yaml") in err.message
    assert "not valid YAML" in err.message
    assert f"line {line_of(text, 'unclosed')}" in err.message


def test_yaml_syntax_error_in_included_file(tmp_path):
    write(tmp_path, "Name: m\nDescription: [oops\n", "parts/mod.yaml")
    with pytest.raises(DlaError) as info:
        load(tmp_path, INCLUDING)
    assert str(tmp_path / "parts" / "mod.yaml") in info.value.message
    assert "line 2" in info.value.message


def test_duplicate_mapping_key(tmp_path):
    text = spec(
        """
        - Name: m
          Description: one
          Description: two
        """
    )
    with pytest.raises(DlaError) as info:
        load(tmp_path, text)
    err = info.value
    assert not isinstance(err, SpecError)
    assert err.code == NvError.BadValue
    assert err.message.startswith(f"{tmp_path / 'spec.yaml'}:{line_of(text, 'two')}:")
    assert f"key 'Description' appears twice in one mapping (first at line {line_of(text, 'one')})" \
        in err.message


def test_duplicate_mapping_key_in_flow_mapping_of_included_file(tmp_path):
    write(tmp_path, """
        Name: m
        Structs:
          - Name: st
            Fields:
              - {Name: a, Type: u8, Type: u16}
        """, "parts/mod.yaml")
    with pytest.raises(DlaError) as info:
        load(tmp_path, INCLUDING)
    assert info.value.message.startswith(f"{tmp_path / 'parts' / 'mod.yaml'}:5:")
    assert "key 'Type' appears twice" in info.value.message


# -- layout hash --------------------------------------------------------------------------------------

HASHED = """
    - Name: m
      Enums:
        - Name: e
          Storage: {storage}
          Description: {description}
          Members: [{{Name: A, Value: 1, Description: {description}}}]
      Structs:
        - Name: st
          Description: {description}
          Fields:
            - {{Name: x, Type: u32, Description: {description}}}
            - {{Name: y, Type: u32}}
      Messages:
        - Name: c
          Id: 1
          Type: Command
          Description: {description}
          Fields:
            - {{Name: s, Type: struct, Struct: st}}
            - {{Name: a, Type: {a_type}, Description: {description}}}
            - {{Name: k, Type: enum, Enum: e}}
            - {{Name: b, Type: {b_type}}}
    """


def hashed(tmp_path, sub, *, storage="u16", a_type="u32", b_type="u16", description="hello"):
    text = spec(HASHED.format(storage=storage, a_type=a_type, b_type=b_type, description=description))
    return load(tmp_path / sub, text)


def test_hash_aliases_are_the_same_type(tmp_path):
    canonical = hashed(tmp_path, "a", storage="u16", a_type="u32", b_type="u16")
    aliased = hashed(tmp_path, "b", storage="uint16_t", a_type="uint32_t", b_type="uint16_t")
    assert [f.type_name for f in aliased.messages[0].fields[2:]] == ["u32", "e", "u16"]
    assert aliased.enums[0].storage == "u16"
    assert aliased.canonical() == canonical.canonical()
    assert aliased.layout_hash == canonical.layout_hash
    assert aliased.layout_hash64 == canonical.layout_hash64


def test_hash_float_aliases(tmp_path):
    canonical = hashed(tmp_path, "a", a_type="f32", b_type="u16")
    aliased = hashed(tmp_path, "b", a_type="float", b_type="u16")
    assert aliased.layout_hash == canonical.layout_hash


def test_hash_ignores_descriptions(tmp_path):
    one = hashed(tmp_path, "a", description="hello")
    other = hashed(tmp_path, "b", description="something else entirely")
    assert one.structs[0].description != other.structs[0].description
    assert one.layout_hash == other.layout_hash


def test_hash_changes_with_field_type(tmp_path):
    before = hashed(tmp_path, "a", a_type="u32")
    after = hashed(tmp_path, "b", a_type="i32")
    assert before.messages[0].size == after.messages[0].size
    assert before.layout_hash != after.layout_hash


def test_hash_changes_with_field_size(tmp_path):
    before = hashed(tmp_path, "a", b_type="u16")
    after = hashed(tmp_path, "b", b_type="u8")
    assert before.messages[0].size == after.messages[0].size + 1
    assert before.layout_hash != after.layout_hash


# -- values YAML reads as floats --------------------------------------------------------------------------


def test_integer_valued_floats_are_rejected_or_made_ints(tmp_path):
    # JSON schema's "integer" accepts 2.0; the spec must then not carry floats into ids and layouts.
    text = spec(
        """
        - Name: m
          Structs:
            - Name: st
              Fields:
                - {Name: v, Type: u32, Count: 2.0}
                - {Name: text, Type: string, Length: 8.0}
          Messages:
            - {Name: c, Id: 3.0, Type: Event}
        """
    )
    try:
        s = load(tmp_path, text)
    except SpecError as e:
        assert set(e.rules) == {"schema"}
        return
    st = s.structs[0]
    numbers = [st.size, *(n for f in st.fields for n in (f.offset, f.size, f.count, f.length)),
               s.messages[0].msg_id]
    assert all(n is None or type(n) is int for n in numbers), numbers


# -- the bundled specs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["headers", "device_api", "trace"])
def test_bundled_specs_load(name):
    import importlib

    s = load_spec(bundled_specs_dir() / f"{name}.yaml")
    assert s.name == name
    generated = importlib.import_module(f"pydla.deviceapi.generated.{name}")
    assert s.version_string == ".".join(map(str, generated.VERSION))  # what the committed code says
    assert len(s.layout_hash) == 64


def test_bundled_headers_layout():
    s = load_spec(bundled_specs_dir() / "headers.yaml")
    sizes = {x.name: x.size for x in s.structs}
    assert sizes == {
        "common_header_t": 8,
        "command_header_t": 16,
        "response_header_t": 24,
        "event_header_t": 16,
        "trace_ring_header_t": 56,
        "trace_entry_header_t": 16,
    }


def test_bundled_device_api_contents():
    s = load_spec(bundled_specs_dir() / "device_api.yaml")
    assert {e.name for e in s.enums} == {"dla_status_e", "dla_block_e", "reset_scope_e"}
    modules = {m.module for m in s.messages}
    assert modules == {"control", "events"}
    responses = {m.name: m.command for m in s.messages if m.msg_type == "Response"}
    assert responses["task_submit_rsp"] == "task_submit_cmd"
    rsp = next(m for m in s.messages if m.name == "version_query_rsp")
    assert layout(rsp)[:2] == [("header", 0, 24), ("api", 24, 16)]


def test_bundled_trace_imports_device_api():
    s = load_spec(bundled_specs_dir() / "trace.yaml")
    assert [i.name for i in s.imports] == ["headers", "device_api"]
    log = next(t for t in s.trace_events if t.name == "log")
    assert layout(log) == [("level", 0, 1), ("text", 1, 63)]
