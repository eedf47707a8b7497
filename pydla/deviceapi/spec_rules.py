"""The rules a spec keeps once its items are built: unique and never-retired message ids, a Response
answering one Command, the device API's rules for messages and trace events (no arrays, strings
last and only in log events, fields in decreasing size order, one level of nesting), and a register
map of u32 registers whose derived names (Python, C, C++) never clash. :mod:`pydla.deviceapi.spec`
builds the spec and calls them; every problem is collected, reported together in one SpecError.

Usage::

    rules = SpecRules(spec, problems, location_of_the_document)
    rules.check_message_rules()              # appends a Problem per broken rule
"""

from __future__ import annotations

import itertools

from pydla.deviceapi.loader import Location, Problem
from pydla.deviceapi.model import COMMAND, RESPONSE, STRUCT, TRACE_EVENT, Field, Spec, StructDef


def bits_class_name(struct: str, field: str) -> str:
    """The Python class of a register's bit fields: ``nvdla_cdma_t.d_misc_cfg`` ->
    ``nvdla_cdma_d_misc_cfg_bits``."""
    base = struct[:-2] if struct.endswith("_t") else struct
    return f"{base}_{field}_bits"

class SpecRules:
    """The checks on ``spec``'s built items, each appending to ``problems`` (the builder's list);
    ``spec_location`` is where the spec's document starts, for the problems of the whole spec."""

    def __init__(self, spec: Spec, problems: list[Problem], spec_location: Location) -> None:
        self.spec = spec
        self.problems = problems
        self.spec_location = spec_location

    def problem(self, rule: str, location: Location, message: str) -> None:
        self.problems.append(Problem(rule, location, message))

    def check_ids(self, items: list[StructDef], retired: list[int], what: str) -> None:
        seen: dict[int, str] = {}
        for s in items:
            assert s.msg_id is not None
            if s.msg_id in seen:
                self.problem("duplicate-id", s.location,
                             f"{what} id {s.msg_id} is already used by '{seen[s.msg_id]}'")
            elif s.msg_id in retired:
                self.problem("retired-id", s.location,
                             f"{what} id {s.msg_id} is retired and may not be reused; take a new id")
            seen.setdefault(s.msg_id, s.name)

    def check_responses(self) -> None:
        by_name = {m.name: m for m in self.spec.messages}
        answered: dict[str, str] = {}
        for m in self.spec.messages:
            if m.msg_type != RESPONSE:
                if m.command is not None:
                    self.problem("response-command", m.location,
                                 f"only a Response names a Command; this is a {m.msg_type}")
                continue
            if m.command is None:
                continue  # design_problems said what to add
            cmd = by_name.get(m.command)
            if cmd is None:
                self.problem("response-command", m.location,
                             f"answers Command '{m.command}', which this spec does not define")
            elif cmd.msg_type != COMMAND:
                self.problem("response-command", m.location,
                             f"answers '{m.command}', which is a {cmd.msg_type}, not a Command")
            elif m.command in answered:
                self.problem("response-command", m.location,
                             f"Command '{m.command}' is already answered by '{answered[m.command]}'")
            else:
                answered[m.command] = m.name

    # -- register maps ------------------------------------------------------------------------------

    def check_register_map(self) -> None:
        name = self.spec.register_map
        if name is None:
            if self.spec.register_names is not None or self.spec.register_macros is not None:
                self.problem("register-map", self.spec_location,
                             "RegisterNames and RegisterMacros name the registers of a RegisterMap; "
                             "this spec has none")
            return
        top = self.spec.find_struct(name)
        where = self.spec_location
        if top is None or top.category != STRUCT:
            self.problem("register-map", where, f"RegisterMap names '{name}', which is not a struct "
                                                "of this spec")
            return
        seen: set[str] = set()

        def walk(s: StructDef) -> None:
            if s.name in seen:
                return
            seen.add(s.name)
            for f in s.fields:
                if f.is_array and f.name.startswith("reserved"):
                    continue
                if f.kind == "struct" and not f.is_array:
                    inner = self.spec.find_struct(f.type_name)
                    if inner is not None:
                        walk(inner)
                    continue
                storage = f.type_name
                if f.kind == "enum":
                    e = self.spec.find_enum(f.type_name)
                    storage = e.storage if e is not None else ""
                if f.is_array or f.kind not in ("scalar", "enum") or storage != "u32":
                    self.problem("register-width", f.location,
                                 "registers are single u32 values (arrays only as reserved* padding)")

        walk(top)
        if not self.problems:
            self.check_register_names()

    def check_register_names(self) -> None:
        """Every name the targets derive from a register (its address, reset value, each bit field's
        shift, mask and values; in Python and C++, and in C) is distinct, and so are the Python classes
        of the bit fields."""
        for language, attr in (("Python and C++", "name"), ("C", "macro")):
            self.check_derived_names(language, attr)
        classes: dict[str, Location] = {item.name: item.location for item in self.spec.all_items}
        clashes: set[str] = set()
        for r in self.spec.register_defs():
            if r.field.bits:
                cls = bits_class_name(r.struct.name, r.field.name)
                if classes.setdefault(cls, r.field.location) is not r.field.location and cls not in clashes:
                    clashes.add(cls)
                    self.problem("register-names", r.field.location,
                                 f"the Python class of its bit fields, {cls}, is already a name at "
                                 f"{classes[cls]}")

    def check_derived_names(self, language: str, attr: str) -> None:
        seen: dict[str, str] = {}
        for r in self.spec.register_defs():
            base = getattr(r, attr)
            names = [base]
            if r.field.bits:
                names.append(f"{base}_RESET_VAL")
            for b in r.field.bits:
                names += [f"{base}_{b.name}_SHIFT", f"{base}_{b.name}_FIELD"]
                names += [f"{base}_{b.name}_{m.name}" for m in b.values]
            for name in names:
                if name in seen:
                    self.problem("register-names", r.field.location,
                                 f"{name} would name both {seen[name]} and register {r.name} in {language}; "
                                 "rename a register, bit field or value")
                seen.setdefault(name, f"register {r.name}")

    # -- the device API's rules for messages and trace events ------------------------------------------

    def check_message_rules(self) -> None:
        checked_structs: set[str] = set()
        for s in (*self.spec.messages, *self.spec.trace_events):
            self.check_fields_of_wire_item(s, s.payload, is_log=s.category == TRACE_EVENT)
            for f in s.payload:
                if f.kind != "struct":
                    continue
                inner = self.spec.find_struct(f.type_name)
                if inner is None or inner.name in checked_structs or inner.spec != self.spec.name:
                    continue
                checked_structs.add(inner.name)
                for g in inner.fields:
                    if g.kind == "struct" or g.is_array:
                        self.problem(
                            "struct-nesting", g.location,
                            f"struct '{inner.name}' is used by {s.category} '{s.name}', so it may "
                            "hold only scalars and enums (one level of nesting, no arrays)")
                    elif g.kind == "string":
                        self.problem("string-position", g.location,
                                     f"struct '{inner.name}' is used by {s.category} '{s.name}'; "
                                     "strings may only be the last field of a trace (log) event")
                self.check_order(inner, inner.fields)

    def check_fields_of_wire_item(self, s: StructDef, payload: list[Field], is_log: bool) -> None:
        for i, f in enumerate(payload):
            if f.is_array:
                self.problem("message-array", f.location,
                             f"arrays are not allowed in a {s.category}; use a struct outside "
                             "messages (a descriptor) and pass its address")
            if f.kind == "string":
                if not is_log:
                    self.problem("string-position", f.location,
                                 "strings may only be the last field of a trace (log) event, "
                                 f"not part of a {s.category}")
                elif i != len(payload) - 1:
                    self.problem("string-position", f.location,
                                 "a string must be the last field of a trace (log) event")
        self.check_order(s, [f for f in payload if f.kind != "string"])

    def check_order(self, s: StructDef, fields: list[Field]) -> None:
        for prev, f in itertools.pairwise(fields):
            if f.align > prev.align:
                self.problem(
                    "field-order", f.location,
                    f"fields of a {s.category} go in decreasing size order: '{f.name}' "
                    f"({f.align} bytes) follows '{prev.name}' ({prev.align} bytes)")
