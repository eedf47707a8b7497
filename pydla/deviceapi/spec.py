"""Turning a loaded YAML document into a checked, laid-out :class:`Spec`.

The schema says what may be written; this module enforces what the schema cannot: the device API's rules
for messages and trace events, unique names and ids, type references, alignment. Every problem is
collected with its location and reported together in one :class:`SpecError`.

Usage::

    spec = load_spec("pydla/deviceapi/specs/device_api.yaml")
    print(spec.version_string, spec.layout_hash)
"""

from __future__ import annotations

import keyword
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydla.deviceapi.design import design_problems
from pydla.deviceapi.loader import (
    Location,
    Problem,
    SourceMap,
    SpecError,
    UserSchema,
    load_yaml,
    schema_problems,
)
from pydla.deviceapi.model import (
    HEADER_OF,
    MESSAGE,
    STRUCT,
    TRACE_EVENT,
    BitField,
    ConstDef,
    EnumDef,
    EnumMember,
    Field,
    Spec,
    StructDef,
)
from pydla.deviceapi.spec_rules import SpecRules, bits_class_name
from pydla.deviceapi.types import SCALARS, canonical_scalar

# bits_class_name: the generator (render.py) names the bit-field classes with it, as the rules check them
__all__ = ["HEADERS_SPEC", "Spec", "SpecError", "bits_class_name", "bundled_specs_dir", "headers_spec",
           "load_spec"]

HEADERS_SPEC = "headers"

# Names that would not compile in one of the targets.
_RESERVED = frozenset(keyword.kwlist) | frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while bool true false class namespace template typename public private
    protected virtual operator new delete this friend using try catch throw export mutable explicit
    nullptr constexpr decltype noexcept alignas alignof static_assert thread_local char16_t char32_t
    uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t int64_t size_t""".split()  # noqa: SIM905
)


def bundled_specs_dir() -> Path:
    """The directory of the specs that ship with pydla."""
    return Path(str(resources.files("pydla.deviceapi").joinpath("specs")))


@cache
def headers_spec() -> Spec:
    """The message and trace-ring headers every other spec builds on."""
    return load_spec(bundled_specs_dir() / f"{HEADERS_SPEC}.yaml")


def load_spec(path: str | Path, user_schema: UserSchema | None = None, *, partial: bool = False) -> Spec:
    """Load, validate and lay out the spec in ``path``; raise SpecError listing every problem.

    ``user_schema`` (``--schema``) is a JSON schema the spec must satisfy as well as the bundled
    one; the specs it imports are not checked against it. What pydla fills in as the design's defaults
    is in ``spec.warnings``. With ``partial``, items that fail only because a type they use is not
    defined are left out instead (their problems in ``spec.omitted``), so the rest can be generated.
    """
    doc, source_map = load_yaml(path)
    file = str(Path(path))
    # What the design's way of writing a spec leaves implicit comes first, and is filled in so that
    # the other checks still run: the author sees every problem at once.
    design = design_problems(doc, source_map, file)
    warnings = [p for p in design if p.severity == "warning"]
    errors = [p for p in design if p.severity != "warning"]
    if not isinstance(doc, dict):
        raise SpecError(design or schema_problems(doc, source_map, file))
    if user_schema is None:
        problems = schema_problems(doc, source_map, file)
    else:  # the user's schema decides, as the design's generator takes it; pydla's own needs remain
        problems = user_schema.problems(doc, source_map, file) or [
            Problem("generator-needs", p.location, f"the user's schema accepts this, but pydla's generator "
                    f"needs what its bundled schema says: {p.message}")
            for p in schema_problems(doc, source_map, file)]
    if problems or errors:
        raise SpecError(design + problems)
    imports = [] if doc["Name"] == HEADERS_SPEC else [headers_spec()]
    for name in doc.get("Imports", []):
        imports.append(_import_spec(Path(path).resolve().parent, name, file))
    try:
        spec = _Builder(doc, source_map, file, imports).build(partial=partial)
    except SpecError as e:
        raise SpecError(design + e.problems) from None
    spec.warnings = warnings
    return spec


def _import_spec(directory: Path, name: str, file: str) -> Spec:
    """An imported spec: ``<name>.yaml`` beside the importing spec, else a bundled one."""
    for candidate in (directory / f"{name}.yaml", bundled_specs_dir() / f"{name}.yaml"):
        if candidate.is_file():
            return _load_cached(str(candidate.resolve()))
    problem = Problem("unknown-import", Location(file), f"no spec '{name}' to import: looked for "
                      f"{name}.yaml in {directory} and in the bundled specs")
    raise SpecError([problem])


@cache
def _load_cached(path: str) -> Spec:
    return load_spec(path)


class _Builder:
    def __init__(self, doc: dict[str, Any], source_map: SourceMap, file: str, imports: list[Spec]):
        self.doc = doc
        self.source_map = source_map
        self.file = file
        major, minor, patch = (int(p) for p in doc["Version"].split("."))
        self.spec = Spec(
            name=doc["Name"],
            version=(major, minor, patch),
            description=doc.get("Description", ""),
            file=file,
            imports=imports,
            retired_message_ids=list(doc.get("RetiredMessageIds", [])),
            retired_trace_event_ids=list(doc.get("RetiredTraceEventIds", [])),
            register_map=doc.get("RegisterMap"),
            register_names=doc.get("RegisterNames"),
            register_macros=doc.get("RegisterMacros"),
        )
        self.problems: list[Problem] = []
        self._laid_out: set[str] = set()
        self._failed: set[str] = set()

    # -- helpers ----------------------------------------------------------------------------------

    def where(self, obj: Any, module: str | None = None, kind: str | None = None,
              item: str | None = None, field: str | None = None) -> Location:
        file, line = self.source_map.of(obj) or (self.file, None)
        return Location(file, line, module, kind, item, field)

    def problem(self, rule: str, location: Location, message: str) -> None:
        self.problems.append(Problem(rule, location, message))

    def check_identifier(self, name: str, location: Location, what: str) -> None:
        if name in _RESERVED:
            self.problem("reserved-name", location,
                         f"{what} '{name}' is a keyword or type name in C, C++ or Python; rename it")

    # -- building ---------------------------------------------------------------------------------

    def build(self, partial: bool = False) -> Spec:
        names: dict[str, Location] = {}
        for spec in self.spec.imports:
            for item in spec.all_items:
                names[item.name] = item.location
        for module in self.doc["Modules"]:
            mname = module["Name"]
            for raw in module.get("Constants", []):
                self.add_constant(raw, mname, names)
            for raw in module.get("Enums", []):
                self.add_enum(raw, mname, names)
            for key, category in (("Structs", STRUCT), ("Messages", MESSAGE),
                                  ("TraceEvents", TRACE_EVENT)):
                for raw in module.get(key, []):
                    self.add_struct(raw, mname, category, names)
        rules = SpecRules(self.spec, self.problems, self.where(self.doc))
        rules.check_ids(self.spec.messages, self.spec.retired_message_ids, "message")
        rules.check_ids(self.spec.trace_events, self.spec.retired_trace_event_ids, "trace event")
        rules.check_responses()
        for s in self.spec.all_structs:
            self.layout(s, ())
        rules.check_message_rules()
        rules.check_register_map()
        if self.problems and partial and all(p.rule == "unknown-type" for p in self.problems):
            # the items that could not be laid out (and those that hold them) are left out
            keep = [s for s in self.spec.all_structs if s.name not in self._failed]
            if keep:
                self.spec.structs = [s for s in self.spec.structs if s in keep]
                self.spec.messages = [s for s in self.spec.messages if s in keep]
                self.spec.trace_events = [s for s in self.spec.trace_events if s in keep]
                self.spec.omitted = list(self.problems)
                return self.spec
        if self.problems:
            raise SpecError(self.problems)
        return self.spec

    def claim_name(self, name: str, where: Location, names: dict[str, Location], what: str) -> None:
        self.check_identifier(name, where, what)
        if name in names:
            self.problem("duplicate-name", where,
                         f"{what} name '{name}' is already used at {names[name]}")
        else:
            names[name] = where

    def add_constant(self, raw: dict[str, Any], module: str, names: dict[str, Location]) -> None:
        name = raw["Name"]
        where = self.where(raw, module, "constant", name)
        self.claim_name(name, where, names, "constant")
        storage = canonical_scalar(raw["Type"])
        assert storage is not None  # the schema allows integer types only
        scalar = SCALARS[storage]
        if not scalar.min_value <= raw["Value"] <= scalar.max_value:
            self.problem("constant-range", where,
                         f"value {raw['Value']} does not fit the type {storage} "
                         f"({scalar.min_value}..{scalar.max_value})")
        self.spec.constants.append(ConstDef(name, storage, raw["Value"], raw.get("Description", ""),
                                            module, where))

    def add_enum(self, raw: dict[str, Any], module: str, names: dict[str, Location]) -> None:
        name = raw["Name"]
        where = self.where(raw, module, "enum", name)
        self.claim_name(name, where, names, "enum")
        storage = canonical_scalar(raw["Storage"])
        assert storage is not None  # the schema allows integer storage types only
        scalar = SCALARS[storage]
        members: list[EnumMember] = []
        seen_names: set[str] = set()
        seen_values: dict[int, str] = {}
        for m in raw["Members"]:
            at = self.where(m, module, "enum", name, m["Name"])
            value = m["Value"]
            self.check_identifier(m["Name"], at, "enum member")
            if m["Name"] in seen_names:
                self.problem("duplicate-member", at, f"member '{m['Name']}' appears twice")
            if value in seen_values:
                self.problem("duplicate-value", at,
                             f"value {value} is already taken by member '{seen_values[value]}'")
            if not scalar.signed and value < 0:
                self.problem("enum-negative", at,
                             f"value {value} is negative but the storage type {storage} is unsigned")
            elif not scalar.min_value <= value <= scalar.max_value:
                self.problem("enum-range", at,
                             f"value {value} does not fit the storage type {storage} "
                             f"({scalar.min_value}..{scalar.max_value})")
            seen_names.add(m["Name"])
            seen_values.setdefault(value, m["Name"])
            members.append(EnumMember(m["Name"], value, m.get("Description", "")))
        self.spec.enums.append(EnumDef(name, storage, members, raw.get("Description", ""), module,
                                       where, self.spec.name))

    def add_struct(self, raw: dict[str, Any], module: str, category: str,
                   names: dict[str, Location]) -> None:
        name = raw["Name"]
        where = self.where(raw, module, category, name)
        self.claim_name(name, where, names, category)
        fields: list[Field] = []
        msg_type = raw.get("Type") if category == MESSAGE else None
        if msg_type is not None:
            fields.append(Field("header", "struct", HEADER_OF[msg_type], None, None,
                                "message header", where))
        seen: set[str] = set()
        for f in raw.get("Fields", []):
            at = self.where(f, module, category, name, f["Name"])
            self.check_identifier(f["Name"], at, "field")
            if f["Name"] in seen or (msg_type is not None and f["Name"] == "header"):
                self.problem("duplicate-field", at, f"field '{f['Name']}' appears twice"
                             + (" ('header' is the message header)" if f["Name"] == "header" else ""))
            seen.add(f["Name"])
            fields.append(self.make_field(f, at))
        struct = StructDef(name, category, fields, raw.get("Description", ""), module, where,
                           raw.get("Id"), msg_type, raw.get("Command"), self.spec.name,
                           packed=bool(raw.get("Packed", False)))
        {STRUCT: self.spec.structs, MESSAGE: self.spec.messages,
         TRACE_EVENT: self.spec.trace_events}[category].append(struct)

    def make_field(self, f: dict[str, Any], at: Location) -> Field:
        type_ = f["Type"]
        if type_ == "enum":
            kind, type_name = "enum", f["Enum"]
        elif type_ == "struct":
            kind, type_name = "struct", f["Struct"]
        elif type_ == "string":
            kind, type_name = "string", "char"
        else:
            kind, type_name = "scalar", canonical_scalar(type_) or type_
        if "Storage" in f and canonical_scalar(f["Storage"]) != "u8":
            self.problem("bool-storage", at,
                         f"bools are stored as u8, not {f['Storage']}; drop 'Storage' or use u8")
        out = Field(f["Name"], kind, type_name, f.get("Count"), f.get("Length"), f.get("Description", ""), at)
        out.double = bool(f.get("Double", False))
        out.bits = [self.make_bit_field(b, at) for b in f.get("Bits", [])]
        if (out.bits or out.double) and (kind != "scalar" or type_name != "u32" or out.is_array):
            self.problem("register-bits", at, "Bits and Double describe a register: a single u32 field")
        self.check_bits(out, at)
        return out

    def make_bit_field(self, b: dict[str, Any], at: Location) -> BitField:
        lsb = b["Lsb"]
        msb = b.get("Msb", lsb)
        if msb < lsb:
            self.problem("register-bits", at, f"bit field '{b['Name']}': Msb {msb} is below Lsb {lsb}")
            msb = lsb
        values = []
        for name, value in b.get("Values", {}).items():
            if not isinstance(name, str):  # YAML reads TRUE and FALSE as booleans, keys too
                self.problem("register-bits", at, f"bit field '{b['Name']}': the value name {name} is "
                                                  f"not a string; write it in quotes (\"{name!s}\")")
                name = str(name).upper()
            values.append(EnumMember(name, value, ""))
        return BitField(b["Name"], lsb, msb - lsb + 1, b.get("Access", "rw"), b.get("Reset", 0), values,
                        b.get("Description", ""))

    def check_bits(self, f: Field, at: Location) -> None:
        """Bit fields that do not overlap, with unique names (also in lower case, as Python names them),
        and values and reset values that fit their width."""
        taken = 0
        names: set[str] = set()
        for b in f.bits:
            what = f"bit field '{b.name}'"
            self.check_identifier(b.name.lower(), at, "bit field (in lower case)")
            if b.name.lower() in names or b.name.lower().startswith("_"):
                self.problem("register-bits", at, f"{what}: the name is taken (names are unique in "
                                                  "lower case, without a leading _)")
            names.add(b.name.lower())
            if taken & b.mask:
                self.problem("register-bits", at, f"{what}: bits {b.msb}:{b.lsb} overlap another field")
            taken |= b.mask
            top = (1 << b.width) - 1
            if b.reset > top:
                self.problem("register-bits", at, f"{what}: Reset {b.reset:#x} does not fit {b.width} bit(s)")
            seen: set[str] = set()
            for m in b.values:
                if m.value > top:
                    self.problem("register-bits", at,
                                 f"{what}: value {m.name} = {m.value} does not fit {b.width} bit(s)")
                if m.name in seen:
                    self.problem("register-bits", at, f"{what}: value {m.name} appears twice")
                seen.add(m.name)

    # -- ids and responses --------------------------------------------------------------------------

    # -- layout -------------------------------------------------------------------------------------

    def layout(self, s: StructDef, chain: tuple[str, ...]) -> bool:
        """Compute offsets and sizes; return False when the struct could not be laid out."""
        if s.name in self._laid_out:
            return True
        if s.name in self._failed:
            return False
        if s.name in chain:
            self.problem("recursive-struct", s.location,
                         "struct contains itself: " + " -> ".join((*chain, s.name)))
            return False
        offset, align, ok = 0, 1, True
        for f in s.fields:
            if f.kind == "scalar":
                size = f.align = SCALARS[f.type_name].size
            elif f.kind == "string":
                assert f.length is not None
                size, f.align = f.length, 1
            elif f.kind == "enum":
                e = self.spec.find_enum(f.type_name)
                if e is None:
                    self.unknown(f, "enum")
                    ok = False
                    continue
                size = f.align = e.size
            else:
                inner = self.spec.find_struct(f.type_name)
                if inner is None or inner.category != STRUCT:
                    self.unknown(f, "struct", inner)
                    ok = False
                    continue
                if not self.layout(inner, (*chain, s.name)):
                    ok = False
                    continue
                size, f.align = inner.size, inner.align
            f.size = size * (f.count or 1)
            if s.packed:
                f.align = 1  # a packed struct holds its fields where they fall
            if offset % f.align:
                self.problem("alignment", f.location,
                             f"offset {offset} is not a multiple of the field's alignment {f.align}; "
                             "reorder the fields or add a reserved field before it")
            f.offset = offset
            offset += f.size
            align = max(align, f.align)
        s.size, s.align = offset, align
        if ok and s.category == STRUCT and offset % align:
            self.problem("struct-size", s.location,
                         f"size {offset} is not a multiple of the struct's alignment {align}; add "
                         f"{align - offset % align} reserved byte(s) at the end so arrays stay aligned")
        (self._laid_out if ok else self._failed).add(s.name)
        return ok

    def unknown(self, f: Field, what: str, found: StructDef | None = None) -> None:
        if found is not None:
            self.problem("unknown-type", f.location,
                         f"'{f.type_name}' is a {found.category}, not a struct a field can hold")
        else:
            key = "Enums" if what == "enum" else "Structs"
            self.problem("unknown-type", f.location,
                         f"no {what} named '{f.type_name}': define it under a module's `{key}:`, or "
                         "add the spec that defines it to `Imports:`")
