"""The checked, laid-out form of a spec that the generators render and the hash describes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pydla.deviceapi.loader import Location
from pydla.deviceapi.types import SCALARS

# What a struct-like item is: a plain struct (descriptors, headers), a message or a trace event.
STRUCT, MESSAGE, TRACE_EVENT = "struct", "message", "trace event"
COMMAND, RESPONSE, EVENT = "Command", "Response", "Event"
MESSAGE_TYPE_CODES = {COMMAND: 1, RESPONSE: 2, EVENT: 3}
HEADER_OF = {COMMAND: "command_header_t", RESPONSE: "response_header_t", EVENT: "event_header_t"}


@dataclass
class BitField:
    """A bit field of a register: bits ``lsb`` .. ``lsb + width - 1``, how software may access them
    (``rw``, ``r``, ``w``: reads 0, ``w1c``: write 1 to clear), the value at reset and the field's
    named values."""

    name: str
    lsb: int
    width: int
    access: str
    reset: int
    values: list[EnumMember]
    description: str

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        """The field's bits in place (NVIDIA's ``_FIELD``)."""
        return ((1 << self.width) - 1) << self.lsb


@dataclass
class Field:
    """A field: ``kind`` is scalar, enum, struct or string; ``type_name`` names the type. A register
    (a u32 of a register map) may have ``bits`` and be ``double`` (one copy per register group)."""

    name: str
    kind: str
    type_name: str
    count: int | None
    length: int | None
    description: str
    location: Location
    offset: int = 0
    size: int = 0
    align: int = 1
    bits: list[BitField] = field(default_factory=list)
    double: bool = False

    @property
    def is_array(self) -> bool:
        return self.count is not None

    @property
    def reset(self) -> int:
        """The register's value at reset: its bit fields' reset values in place."""
        value = 0
        for b in self.bits:
            value |= b.reset << b.lsb
        return value


@dataclass
class EnumMember:
    name: str
    value: int
    description: str


@dataclass
class EnumDef:
    name: str
    storage: str
    members: list[EnumMember]
    description: str
    module: str
    location: Location
    spec: str = ""

    @property
    def size(self) -> int:
        return SCALARS[self.storage].size


@dataclass(frozen=True)
class RegisterDef:
    """One register of a register map: its name (``RegisterNames`` applied to the field path), byte
    address, the field declaring it and the struct holding that field."""

    name: str
    address: int
    field: Field
    struct: StructDef
    macro: str  # its name in C (RegisterMacros applied, else behind the spec's prefix)


@dataclass
class StructDef:
    """A struct, a message (whose first field is its header) or a trace event payload."""

    name: str
    category: str
    fields: list[Field]
    description: str
    module: str
    location: Location
    msg_id: int | None = None
    msg_type: str | None = None
    command: str | None = None
    spec: str = ""
    size: int = 0
    align: int = 1
    # Packed: no alignment rules and no padding (a kernel ABI's __attribute__((packed)) struct whose
    # fields sit where the other side put them); its alignment is 1 wherever it is held.
    packed: bool = False

    @property
    def payload(self) -> list[Field]:
        """The fields after the header for a message; every field otherwise."""
        return self.fields[1:] if self.category == MESSAGE else self.fields


@dataclass
class ConstDef:
    """A named integer constant of the contract (an address window, a limit)."""

    name: str
    storage: str
    value: int
    description: str
    module: str
    location: Location


@dataclass
class Spec:
    """A whole spec after checking: its own items, plus the items it imports from ``imports``."""

    name: str
    version: tuple[int, int, int]
    description: str
    file: str
    enums: list[EnumDef] = field(default_factory=list)
    structs: list[StructDef] = field(default_factory=list)
    messages: list[StructDef] = field(default_factory=list)
    trace_events: list[StructDef] = field(default_factory=list)
    imports: list[Spec] = field(default_factory=list)
    retired_message_ids: list[int] = field(default_factory=list)
    retired_trace_event_ids: list[int] = field(default_factory=list)
    register_map: str | None = None
    constants: list[ConstDef] = field(default_factory=list)
    register_names: str | None = None  # e.g. "NVDLA_{}_0": the field path's name goes in the braces
    register_macros: str | None = None  # the same for C's macros, e.g. "NVDLA_V1_{}_0"
    # What pydla filled in (the design's defaults: ids in declaration order, responses paired by
    # name), and, in a partial load, the problems of the items left out: loader.Problem each.
    warnings: list[Any] = field(default_factory=list, compare=False)
    omitted: list[Any] = field(default_factory=list, compare=False)

    @property
    def version_string(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def all_structs(self) -> list[StructDef]:
        return [*self.structs, *self.messages, *self.trace_events]

    @property
    def all_items(self) -> list[EnumDef | StructDef]:
        return [*self.enums, *self.all_structs]

    def find_struct(self, name: str) -> StructDef | None:
        for spec in (self, *self.imports):
            for s in spec.all_structs:
                if s.name == name:
                    return s
        return None

    def find_enum(self, name: str) -> EnumDef | None:
        for spec in (self, *self.imports):
            for e in spec.enums:
                if e.name == name:
                    return e
        return None

    def canonical(self) -> dict[str, Any]:
        """Names, types, sizes, offsets and ids: what the layout hash covers (no descriptions)."""

        def fields(s: StructDef) -> list[list[Any]]:
            return [[f.name, f.kind, f.type_name, f.count, f.length, f.offset, f.size, *register(f)]
                    for f in s.fields]

        def register(f: Field) -> list[Any]:
            # A register's bit fields and group copies; nothing for other fields, so that the hashes
            # of specs written before registers had bits do not change.
            if not f.bits and not f.double:
                return []
            bits = [[b.name, b.lsb, b.width, b.access, b.reset, [[m.name, m.value] for m in b.values]]
                    for b in f.bits]
            return [{"bits": bits, "double": f.double}]

        def struct(s: StructDef) -> dict[str, Any]:
            packed = {"packed": True} if s.packed else {}  # absent when false: older hashes stay
            return {
                **packed,
                "name": s.name,
                "category": s.category,
                "size": s.size,
                "align": s.align,
                "id": s.msg_id,
                "type": s.msg_type,
                "command": s.command,
                "fields": fields(s),
            }

        # Constants are part of the contract (a window address is); absent when there are none, so
        # that the hashes of specs written before constants existed do not change.
        constants = {"constants": sorted([c.name, c.storage, c.value] for c in self.constants)} \
            if self.constants else {}
        names = {k: v for k, v in (("register_names", self.register_names),
                                   ("register_macros", self.register_macros)) if v}
        return {
            **constants,
            **names,
            "name": self.name,
            "imports": {spec.name: spec.layout_hash for spec in self.imports},
            "enums": sorted(
                ([e.name, e.storage, [[m.name, m.value] for m in e.members]] for e in self.enums),
                key=lambda e: str(e[0]),
            ),
            "structs": sorted((struct(s) for s in self.all_structs), key=lambda s: str(s["name"])),
            "register_map": self.register_map,
        }

    def registers(self) -> list[tuple[str, int]]:
        """(NAME, byte address) of every register of the register map, in address order.

        A register is a non-array leaf of the register-map struct not named ``reserved*``; its name
        joins the field path with underscores, upper-cased (``conv.d_op_enable`` ->
        ``CONV_D_OP_ENABLE``), put in ``RegisterNames`` when the spec has one (``NVDLA_{}_0``:
        ``cdma.d_misc_cfg`` -> ``NVDLA_CDMA_D_MISC_CFG_0``).
        """
        return [(r.name, r.address) for r in self.register_defs()]

    def register_defs(self) -> list[RegisterDef]:
        """Every register of the register map with the field and struct declaring it, in address order."""
        if self.register_map is None:
            return []
        top = self.find_struct(self.register_map)
        assert top is not None
        out: list[RegisterDef] = []
        pattern = self.register_names or "{}"
        macro = self.register_macros or f"{self.name.upper()}_{pattern}"

        def walk(s: StructDef, prefix: str, base: int) -> None:
            for f in s.fields:
                if f.is_array or f.name.startswith("reserved"):
                    continue
                if f.kind == "struct":
                    inner = self.find_struct(f.type_name)
                    assert inner is not None
                    walk(inner, f"{prefix}{f.name}_", base + f.offset)
                else:
                    path = (prefix + f.name).upper()
                    out.append(RegisterDef(pattern.replace("{}", path), base + f.offset, f, s,
                                           macro.replace("{}", path)))

        walk(top, "", 0)
        return out

    @property
    def layout_hash(self) -> str:
        """sha256 (hex) of the canonical layout description."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def layout_hash64(self) -> int:
        """The first 64 bits of the layout hash, for binary fields (version replies, ring headers)."""
        return int(self.layout_hash[:16], 16)
