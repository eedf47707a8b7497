"""What every template receives besides the spec: filters, and ``cgh``, the design's helper.

Bundled and user templates see the same names (documented in the contract authors' guide):

- filters ``c_type``, ``c_decl``, ``hex``, ``pascal``, ``camel``, ``macro``,
  ``comment`` (below);
- ``cgh``, a :class:`DesignHelpers`: the items of the spec as plain mappings keyed as the YAML is
  (``struct["Name"]``, ``struct.get("Fields", [])``), which is how the Device API code generation
  design's example template reads them, so that such a template renders unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydla.deviceapi.model import Field, Spec, StructDef
from pydla.deviceapi.types import SCALARS
from pydla.errors import DlaError, NvError


def _field(value: Any, filter_name: str) -> Field:
    if not isinstance(value, Field):
        raise DlaError(NvError.BadParameter,
                       f"filter '{filter_name}' takes a field (an item of s.fields), not "
                       f"{type(value).__name__} {value!r}")
    return value


def c_type(value: Any) -> str:
    """A field's C type without array brackets: ``uint32_t``, an enum or struct name, ``char``."""
    f = _field(value, "c_type")
    if f.kind == "scalar":
        return SCALARS[f.type_name].c_type
    return "char" if f.kind == "string" else f.type_name


def c_decl(value: Any) -> str:
    """A field's C declaration: ``uint32_t dims[4]``, ``char text[63]``."""
    f = _field(value, "c_decl")
    n = f.length if f.kind == "string" else f.count
    return f"{c_type(f)} {f.name}" + (f"[{n}]" if n else "")


def hex_(value: Any, width: int = 0) -> str:
    """``0x`` and lower-case hex digits, zero-padded to ``width`` digits."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise DlaError(NvError.BadParameter, f"filter 'hex' takes an integer, not {value!r}")
    return f"0x{value:0{width}x}"


def _words(value: Any, filter_name: str) -> list[str]:
    if not isinstance(value, str):
        raise DlaError(NvError.BadParameter, f"filter '{filter_name}' takes a name, not {value!r}")
    return [w for w in re.split(r"[^A-Za-z0-9]+", value) if w]


def pascal(value: Any) -> str:
    """``kernel_launch_cmd`` -> ``KernelLaunchCmd`` (type names of Rust, Go, C#...)."""
    return "".join(w[:1].upper() + w[1:] for w in _words(value, "pascal"))


def camel(value: Any) -> str:
    """``kernel_launch_cmd`` -> ``kernelLaunchCmd``."""
    text = pascal(value)
    return text[:1].lower() + text[1:]


def macro(value: Any) -> str:
    """``device_api_types.h`` -> ``DEVICE_API_TYPES_H`` (include guards, macro names)."""
    return "_".join(w.upper() for w in _words(value, "macro"))


def comment(value: Any) -> str:
    """One line of text, safe inside a C comment or a Python docstring; no final period."""
    text = " ".join(str(value).replace("*/", "* /").replace('"""', "'''").split())
    return text[:-1] if text.endswith(".") else text


FILTERS = {"c_type": c_type, "c_decl": c_decl, "hex": hex_, "pascal": pascal,
           "camel": camel, "macro": macro, "comment": comment}


class DesignHelpers:
    """``cgh``: the spec's items as mappings keyed as in YAML, laid out (offsets and sizes added).

    A struct, message or trace event: ``Name``, ``Description`` (empty when the spec has none),
    ``Fields``, ``Size``, ``Align``; a message also ``Id``, ``Type`` and ``Command`` (Responses), a
    trace event ``Id``. ``Fields`` are the payload, without a message's header. A field: ``Name``,
    ``Type`` (a scalar's canonical name such as ``u64``, or ``enum``, ``struct``, ``string``),
    ``Enum`` / ``Struct`` / ``Length`` / ``Count`` where they apply, ``Description``, ``Offset``
    (from the start of the item, header included) and ``Size``; a register also ``Double`` (when
    double-buffered) and ``Bits`` (``Name``, ``Lsb``, ``Msb``, ``Access``, ``Reset``, ``Values``,
    ``Description``). An enum: ``Name``, ``Description``,
    ``Storage``, ``Members`` (``Name``, ``Value``, ``Description``).
    """

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def structs(self) -> list[dict[str, Any]]:
        return [self._item(s) for s in self.spec.structs]

    def messages(self) -> list[dict[str, Any]]:
        return [self._item(s) for s in self.spec.messages]

    def trace_events(self) -> list[dict[str, Any]]:
        return [self._item(s) for s in self.spec.trace_events]

    def enums(self) -> list[dict[str, Any]]:
        return [{"Name": e.name, "Description": e.description, "Storage": e.storage,
                 "Members": [{"Name": m.name, "Value": m.value, "Description": m.description}
                             for m in e.members]}
                for e in self.spec.enums]

    def message_field_type(self, field: Any) -> str:
        """The C type of a field mapping of :meth:`structs` (or messages, trace events)."""
        if not isinstance(field, Mapping) or not isinstance(field.get("Type"), str):
            raise DlaError(NvError.BadParameter, "cgh.message_field_type takes a field of "
                                                 f"cgh.structs() (a mapping with a Type), not {field!r}")
        t = field["Type"]
        if t in ("enum", "struct"):
            return str(field[t.capitalize()])
        if t == "string":
            return "char"
        return SCALARS[t].c_type

    @staticmethod
    def _item(s: StructDef) -> dict[str, Any]:
        item: dict[str, Any] = {"Name": s.name, "Description": s.description, "Size": s.size,
                                "Align": s.align}
        if s.msg_id is not None:
            item["Id"] = s.msg_id
        if s.msg_type is not None:
            item["Type"] = s.msg_type
        if s.command is not None:
            item["Command"] = s.command
        fields = []
        for f in s.payload:
            d: dict[str, Any] = {"Name": f.name, "Type": f.type_name if f.kind == "scalar" else f.kind,
                                 "Description": f.description, "Offset": f.offset, "Size": f.size}
            if f.kind in ("enum", "struct"):
                d[f.kind.capitalize()] = f.type_name
            if f.length is not None:
                d["Length"] = f.length
            if f.count is not None:
                d["Count"] = f.count
            if f.double:
                d["Double"] = True
            if f.bits:
                d["Bits"] = [{"Name": b.name, "Lsb": b.lsb, "Msb": b.msb, "Access": b.access,
                              "Reset": b.reset, "Values": {m.name: m.value for m in b.values},
                              "Description": b.description} for b in f.bits]
            fields.append(d)
        item["Fields"] = fields
        return item
