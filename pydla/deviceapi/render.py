"""Rendering a checked spec into Python ctypes, a C header and a C++ header with Jinja2.

The templates use the delimiters of the Device API code generation design (``<% %>`` statements,
``<< >>`` expressions) so that the braces of C stay readable. A template, bundled or a user's
(:mod:`pydla.deviceapi.templates_user`), receives :func:`context`: the spec as ``spec``, the helper
:class:`Gen` as ``g``, the design's helper as ``cgh``, and the filters of
:mod:`pydla.deviceapi.helpers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jinja2

from pydla.deviceapi.helpers import FILTERS, DesignHelpers
from pydla.deviceapi.model import MESSAGE, EnumDef, Field, Spec, StructDef
from pydla.deviceapi.render_bits import RegisterBitHelpers
from pydla.deviceapi.spec import bits_class_name
from pydla.deviceapi.types import SCALARS

LANGUAGES = {"python": ".py", "c": ".h", "cpp": ".hpp"}
_TEMPLATES = {"python": "python.py.jinja", "c": "c.h.jinja", "cpp": "cpp.hpp.jinja"}


def environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    """The Jinja environment of bundled and user templates alike: the design's delimiters, an
    undefined name is an error (never silently empty), blocks do not leave blank lines."""
    env = jinja2.Environment(
        loader=loader or jinja2.PackageLoader("pydla.deviceapi", "templates"),
        block_start_string="<%",
        block_end_string="%>",
        variable_start_string="<<",
        variable_end_string=">>",
        comment_start_string="<#",
        comment_end_string="#>",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    return env


def context(spec: Spec, source: str, template: str, output: str) -> dict[str, Any]:
    """The names a template receives (documented in the contract authors' guide)."""
    return {"spec": spec, "g": Gen(spec, source), "cgh": DesignHelpers(spec), "source": source,
            "template": template, "output": output}


def render(spec: Spec, language: str, source: str) -> str:
    """The text of ``spec`` in ``language`` (python, c or cpp); ``source`` names the spec file."""
    name = _TEMPLATES[language]
    template = environment().get_template(name)
    return template.render(context(spec, source, name, spec.name + LANGUAGES[language]))


@dataclass
class Gen:
    """Helpers the templates call: type spellings, ordering, imports, literals; those of the registers
    with bit fields as ``g.bits`` (:class:`~pydla.deviceapi.render_bits.RegisterBitHelpers`)."""

    spec: Spec
    source: str
    bits: RegisterBitHelpers = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.bits = RegisterBitHelpers(self.spec)

    # -- ordering and ownership ----------------------------------------------------------------

    def ordered_structs(self) -> list[StructDef]:
        """This spec's structs, messages and trace events, each after the structs it contains."""
        own = {s.name: s for s in self.spec.all_structs}
        done: dict[str, StructDef] = {}

        def visit(s: StructDef) -> None:
            if s.name in done:
                return
            for f in s.fields:
                if f.kind == "struct" and f.type_name in own:
                    visit(own[f.type_name])
            done[s.name] = s

        for s in self.spec.all_structs:
            visit(s)
        return list(done.values())

    def owner(self, name: str) -> Spec | None:
        """The imported spec that defines ``name``; None when this spec does."""
        for spec in self.spec.imports:
            if any(x.name == name for x in spec.all_items):
                return spec
        return None

    def external_names(self) -> dict[str, list[str]]:
        """Imported spec name -> the names this spec's fields use from it."""
        used: dict[str, list[str]] = {}
        for s in self.spec.all_structs:
            for f in s.fields:
                if f.kind in ("enum", "struct"):
                    spec = self.owner(f.type_name)
                    if spec is not None and f.type_name not in used.setdefault(spec.name, []):
                        used[spec.name].append(f.type_name)
        return {k: sorted(v) for k, v in sorted(used.items())}

    @staticmethod
    def py_import(module: str, names: list[str]) -> str:
        """An import statement formatted as isort (and ruff) want it at 110 columns."""
        line = f"from pydla.deviceapi.generated.{module} import {', '.join(names)}"
        if len(line) <= 110:
            return line
        body = "".join(f"    {n},\n" for n in names)
        return f"from pydla.deviceapi.generated.{module} import (\n{body})"

    def used_imports(self) -> list[str]:
        return list(self.external_names())

    # -- Python ------------------------------------------------------------------------------------

    def py_type(self, f: Field, s: StructDef | None = None) -> str:
        if f.bits and s is not None:
            return bits_class_name(s.name, f.name)
        if f.kind == "scalar":
            base = "ctypes." + SCALARS[f.type_name].ctypes_name
        elif f.kind == "enum":
            enum_def = self.spec.find_enum(f.type_name)
            assert enum_def is not None
            base = "ctypes." + SCALARS[enum_def.storage].ctypes_name
        elif f.kind == "string":
            return f"ctypes.c_char * {f.length}"
        else:
            base = f.type_name
        return f"{base} * {f.count}" if f.is_array else base

    def py_annotation(self, f: Field, s: StructDef) -> str:
        """The type the field reads as (its attribute's annotation in a register map's structs): what
        ctypes returns for it, so that code reading registers is type-checked field by field. Only
        there: a record's fields are also read from the class (``t.field.offset``), which an
        annotation would type as the value."""
        if f.bits:
            return "RegisterBits"
        if f.kind == "string":
            return "bytes"
        if f.is_array:
            element = self.py_type(f, s).rsplit(" * ", 1)[0]
            return f"ctypes.Array[{element}]"
        if f.kind == "enum":
            return "int"
        if f.kind == "scalar":
            return "float" if SCALARS[f.type_name].ctypes_name in ("c_float", "c_double") else "int"
        return f.type_name

    @staticmethod
    def py_constant(value: int) -> str:
        """Addresses and masks read best in hex."""
        return f"{value:#x}" if value >= 0x1000 else str(value)

    def py_enums(self, s: StructDef) -> list[tuple[str, str]]:
        return [(f.name, f.type_name) for f in s.fields if f.kind == "enum"]

    def py_f16(self, s: StructDef) -> list[str]:
        return [f.name for f in s.fields if f.kind == "scalar" and f.type_name == "f16"]

    def uses_enums(self) -> bool:
        return bool(self.spec.enums) or any(self.py_enums(s) for s in self.spec.all_structs)

    def py_base(self, s: StructDef) -> str:
        return "Message" if s.category == MESSAGE else "Record"

    # -- C and C++ ------------------------------------------------------------------------------------

    def macro_prefix(self) -> str:
        return self.spec.name.upper()

    def c_type(self, f: Field, cpp: bool = False) -> str:
        if f.kind == "scalar":
            return SCALARS[f.type_name].c_type
        if f.kind == "string":
            return "char"
        owner = self.owner(f.type_name)
        if cpp and owner is not None:
            return f"::pydla::{owner.name}::{f.type_name}"
        return f.type_name

    def c_decl(self, f: Field, cpp: bool = False) -> str:
        suffix = f"[{f.length}]" if f.kind == "string" else (f"[{f.count}]" if f.is_array else "")
        return f"{self.c_type(f, cpp)} {f.name}{suffix}"

    @staticmethod
    def c_type_of_storage(storage: str) -> str:
        return SCALARS[storage].c_type

    @staticmethod
    def enum_prefix(e: EnumDef) -> str:
        base = e.name[:-2] if e.name.endswith(("_e", "_t")) else e.name
        return base.upper()

    @staticmethod
    def c_literal(storage: str, value: int) -> str:
        scalar = SCALARS[storage]
        if scalar.signed:
            if scalar.size == 8:
                if value == scalar.min_value:
                    return f"(INT64_C({value + 1}) - 1)"
                return f"INT64_C({value})"
            return f"({value})"
        return f"UINT64_C({value})" if scalar.size == 8 else f"{value}u"

    @classmethod
    def c_constant(cls, storage: str, value: int) -> str:
        """A constant's literal: unsigned ones in hex (they are addresses and masks)."""
        scalar = SCALARS[storage]
        if scalar.signed:
            return cls.c_literal(storage, value)
        return f"UINT64_C({value:#x})" if scalar.size == 8 else f"{value:#x}u"

    @staticmethod
    def comment(text: str) -> str:
        """One line of description, safe inside a C comment or a Python docstring."""
        text = " ".join(text.replace("*/", "* /").replace('"""', "'''").split())
        return text[:-1] if text.endswith(".") else text

    def doc(self, f: Field) -> str:
        parts = [f"offset {f.offset}, {f.size} byte{'s' if f.size != 1 else ''}"]
        if f.double:
            parts.append("one per register group")
        if f.bits:
            parts.append(f"reset {f.reset:#x}")
        if f.kind == "enum":
            parts.append(f.type_name)
        if f.kind == "scalar" and f.type_name == "f16":
            parts.append("IEEE-754 binary16 bits")
        if f.kind == "scalar" and f.type_name == "bool":
            parts.append("bool")
        if f.description:
            parts.append(self.comment(f.description))
        return "; ".join(parts)
