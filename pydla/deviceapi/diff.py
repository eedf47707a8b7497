"""What changed between two versions of a spec, and the semver bump the device API's versioning rules require.

Major (breaks the binary format): deleting, moving (reordering) or retyping a field, inserting a
field in the middle, shrinking a struct, growing a struct that sits in the middle of something (or
in an array),
deleting a message, struct or enum, deleting or renumbering an enum member, changing a message's id
or type. Minor: a new message, struct, enum or enum member, a field appended at the end or placed in space
that was ``reserved*`` (every other field keeping its offset). Patch: descriptions only.

Usage::

    report = diff_specs(load_spec("old.yaml"), load_spec("new.yaml"))
    print(report.required, report.actual, report.ok)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydla.deviceapi.model import EnumDef, Field, Spec, StructDef

LEVELS = ("none", "patch", "minor", "major")


@dataclass(frozen=True)
class Change:
    level: str
    what: str

    def __str__(self) -> str:
        return f"{self.level:5}  {self.what}"


@dataclass
class DiffReport:
    old: Spec
    new: Spec
    changes: list[Change] = field(default_factory=list)

    @property
    def required(self) -> str:
        """The smallest bump that covers every change."""
        return max((c.level for c in self.changes), key=LEVELS.index, default="none")

    @property
    def actual(self) -> str:
        """The bump from the old version to the new: none, patch, minor, major or downgrade."""
        o, n = self.old.version, self.new.version
        if n < o:
            return "downgrade"
        for i, level in enumerate(("major", "minor", "patch")):
            if n[i] != o[i]:
                return level
        return "none"

    @property
    def ok(self) -> bool:
        actual = self.actual
        return actual != "downgrade" and LEVELS.index(actual) >= LEVELS.index(self.required)

    def summary(self) -> str:
        lines = [str(c) for c in self.changes] or ["no changes"]
        verdict = "ok" if self.ok else "NOT ENOUGH"
        lines.append(f"required bump: {self.required}; {self.old.version_string} -> "
                     f"{self.new.version_string} is a {self.actual} bump: {verdict}")
        return "\n".join(lines)


def diff_specs(old: Spec, new: Spec) -> DiffReport:
    report = DiffReport(old, new)
    add = report.changes.append
    if old.name != new.name:
        add(Change("major", f"spec renamed from '{old.name}' to '{new.name}'"))
    if old.description != new.description:
        add(Change("patch", "spec description changed"))
    old_imports = {s.name: s.layout_hash for s in old.imports}
    new_imports = {s.name: s.layout_hash for s in new.imports}
    for name in sorted(old_imports.keys() | new_imports.keys()):
        if old_imports.get(name) != new_imports.get(name):
            add(Change("major", f"imported spec '{name}' changed or was added or removed"))
    if old.register_map != new.register_map:
        add(Change("major", f"register map '{old.register_map}' -> '{new.register_map}'"))
    for what, o, n in (("message", old.retired_message_ids, new.retired_message_ids),
                       ("trace event", old.retired_trace_event_ids, new.retired_trace_event_ids)):
        if sorted(o) != sorted(n):
            add(Change("patch", f"retired {what} ids {sorted(o)} -> {sorted(n)}"))

    old_consts = {c.name: c for c in old.constants}
    new_consts = {c.name: c for c in new.constants}
    for name in sorted(old_consts.keys() - new_consts.keys()):
        add(Change("major", f"constant '{name}' deleted"))
    for name in sorted(new_consts.keys() - old_consts.keys()):
        add(Change("minor", f"constant '{name}' added"))
    for name in sorted(old_consts.keys() & new_consts.keys()):
        oc, nc = old_consts[name], new_consts[name]
        if (oc.storage, oc.value) != (nc.storage, nc.value):
            add(Change("major", f"constant '{name}': {oc.storage} {oc.value:#x} -> "
                                f"{nc.storage} {nc.value:#x}"))
        elif oc.description != nc.description:
            add(Change("patch", f"constant '{name}': description changed"))

    old_enums = {e.name: e for e in old.enums}
    new_enums = {e.name: e for e in new.enums}
    for name in old_enums.keys() - new_enums.keys():
        add(Change("major", f"enum '{name}' deleted"))
    for name in sorted(new_enums.keys() - old_enums.keys()):
        add(Change("minor", f"enum '{name}' added"))
    for name in sorted(old_enums.keys() & new_enums.keys()):
        report.changes += _diff_enum(old_enums[name], new_enums[name])

    old_items = {s.name: s for s in old.all_structs}
    new_items = {s.name: s for s in new.all_structs}
    for name in sorted(old_items.keys() - new_items.keys()):
        add(Change("major", f"{old_items[name].category} '{name}' deleted"))
    for name in sorted(new_items.keys() - old_items.keys()):
        add(Change("minor", f"{new_items[name].category} '{name}' added"))
    for name in sorted(old_items.keys() & new_items.keys()):
        report.changes += _diff_struct(old_items[name], new_items[name], new)
    return report


def _diff_enum(old: EnumDef, new: EnumDef) -> list[Change]:
    changes = []
    if old.storage != new.storage:
        changes.append(Change("major", f"enum '{old.name}': storage {old.storage} -> {new.storage}"))
    old_members = {m.name: m for m in old.members}
    new_members = {m.name: m for m in new.members}
    for name in sorted(old_members.keys() - new_members.keys()):
        changes.append(Change("major", f"enum '{old.name}': member '{name}' deleted"))
    for name in sorted(new_members.keys() - old_members.keys()):
        changes.append(Change("minor", f"enum '{old.name}': member '{name}' added"))
    for name in sorted(old_members.keys() & new_members.keys()):
        o, n = old_members[name], new_members[name]
        if o.value != n.value:
            changes.append(Change("major", f"enum '{old.name}': member '{name}' value "
                                           f"{o.value} -> {n.value}"))
        elif o.description != n.description:
            changes.append(Change("patch", f"enum '{old.name}': member '{name}' description changed"))
    if old.description != new.description:
        changes.append(Change("patch", f"enum '{old.name}': description changed"))
    return changes


def _shape(f: Field) -> tuple[object, ...]:
    return (f.kind, f.type_name, f.count, f.length, f.offset)


def _reserved(f: Field) -> bool:
    return f.name.startswith("reserved")


def _diff_struct(old: StructDef, new: StructDef, new_spec: Spec) -> list[Change]:
    """Compatible (minor) when every field keeps its offset and type, and new fields take only
    reserved space or come after the old end; anything else breaks the binary format (major)."""
    what = f"{new.category} '{new.name}'"
    if old.category != new.category:
        return [Change("major", f"'{old.name}' changed from a {old.category} to a {new.category}")]
    changes = []
    if old.msg_id != new.msg_id:
        changes.append(Change("major", f"{what}: id {old.msg_id} -> {new.msg_id}"))
    if old.packed != new.packed:
        changes.append(Change("major", f"{what}: packed {old.packed} -> {new.packed}"))
    if old.msg_type != new.msg_type or old.command != new.command:
        changes.append(Change("major", f"{what}: type or command changed"))
    new_fields = {f.name: f for f in new.fields}
    old_names = {f.name for f in old.fields}
    kept_old = [f.name for f in old.fields if f.name in new_fields and not _reserved(f)]
    kept_new = [f.name for f in new.fields if f.name in old_names and not _reserved(f)]
    if kept_old != kept_new:
        changes.append(Change("major", f"{what}: fields reordered"))
    for o in old.fields:
        if _reserved(o):
            continue
        f = new_fields.get(o.name)
        if f is None:
            changes.append(Change("major", f"{what}: field '{o.name}' deleted"))
        elif _shape(o) != _shape(f) or (o.size != f.size and f is not new.fields[-1]):
            moved = "moved" if o.offset != f.offset else "changed"
            changes.append(Change("major", f"{what}: field '{o.name}' {moved} "
                                           f"({_describe(o)} -> {_describe(f)})"))
        else:
            changes += _diff_register(what, o, f)
            if o.description != f.description:
                changes.append(Change("patch", f"{what}: field '{o.name}' description changed"))
    spare = [(o.offset, o.offset + o.size) for o in old.fields if _reserved(o)]
    for f in new.fields:
        if f.name in old_names or _reserved(f):
            continue
        end = f.offset + f.size
        if f.offset >= old.size:
            changes.append(Change("minor", f"{what}: field '{f.name}' appended"))
        elif any(lo <= f.offset and end <= hi for lo, hi in spare):
            changes.append(Change("minor", f"{what}: field '{f.name}' added in reserved space"))
        else:
            changes.append(Change("major", f"{what}: field '{f.name}' inserted in the middle"))
    if new.size < old.size:
        changes.append(Change("major", f"{what}: size {old.size} -> {new.size}"))
    elif old.size != new.size and new.category == "struct":
        changes += _containment(new, new_spec)
    if old.description != new.description:
        changes.append(Change("patch", f"{what}: description changed"))
    return changes


def _diff_register(what: str, old: Field, new: Field) -> list[Change]:
    """A register's bit fields: a field deleted, moved, resized or given another access or reset
    value, a value renumbered or deleted, the register made single or double: major. A field in bits
    no field used, a new value: minor."""
    where = f"{what}: register '{old.name}'"
    changes = []
    if old.double != new.double:
        changes.append(Change("major", f"{where}: double-buffered {old.double} -> {new.double}"))
    new_bits = {b.name: b for b in new.bits}
    used = 0
    for o in old.bits:
        used |= o.mask
        b = new_bits.get(o.name)
        if b is None:
            changes.append(Change("major", f"{where}: bit field '{o.name}' deleted"))
            continue
        if (o.lsb, o.width, o.access, o.reset) != (b.lsb, b.width, b.access, b.reset):
            changes.append(Change("major", f"{where}: bit field '{o.name}' {o.msb}:{o.lsb} {o.access} reset "
                                           f"{o.reset:#x} -> {b.msb}:{b.lsb} {b.access} reset {b.reset:#x}"))
        old_values = {m.name: m.value for m in o.values}
        new_values = {m.name: m.value for m in b.values}
        for name, value in old_values.items():
            if new_values.get(name) != value:
                changes.append(Change("major", f"{where}: value {o.name}.{name} deleted or renumbered"))
        for name in new_values.keys() - old_values.keys():
            changes.append(Change("minor", f"{where}: value {o.name}.{name} added"))
        if o.description != b.description:
            changes.append(Change("patch", f"{where}: bit field '{o.name}' description changed"))
    old_names = {o.name for o in old.bits}
    for b in new.bits:
        if b.name not in old_names:
            level = "major" if b.mask & used else "minor"
            changes.append(Change(level, f"{where}: bit field '{b.name}' added"))
    return changes


def _containment(struct: StructDef, spec: Spec) -> list[Change]:
    """A struct that grew breaks everything that holds it anywhere but at its very end."""
    changes = []
    for holder in spec.all_structs:
        for i, f in enumerate(holder.fields):
            if f.kind != "struct" or f.type_name != struct.name:
                continue
            if f.is_array:
                changes.append(Change("major", f"struct '{struct.name}' changed size and is an "
                                               f"array element in {holder.category} '{holder.name}'"))
            elif i != len(holder.fields) - 1:
                changes.append(Change("major", f"struct '{struct.name}' changed size and sits in the "
                                               f"middle of {holder.category} '{holder.name}'"))
    return changes


def _describe(f: Field) -> str:
    text = f.type_name + (f"[{f.count}]" if f.is_array else "") + (f"[{f.length}]" if f.length else "")
    return f"{text} at offset {f.offset}"
