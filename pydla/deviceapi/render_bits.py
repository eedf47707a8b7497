"""The template helpers of the registers with bit fields (a register map's spec): which registers
have them, the names and literals of their bit-field classes, their documentation line. A template
reaches them as ``g.bits`` (:class:`pydla.deviceapi.render.Gen` owns one).

Usage (in a template): ``<% for r in g.bits.register_bit_defs() %>`` ... ``<< g.bits.hex(b.mask) >>``
"""

from __future__ import annotations

from pydla.deviceapi.model import BitField, Field, RegisterDef, Spec, StructDef
from pydla.deviceapi.spec import bits_class_name


class RegisterBitHelpers:
    """The bit-field helpers of one spec's templates."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def has_bits(self) -> bool:
        return any(f.bits for s in self.spec.all_structs for f in s.fields)

    @staticmethod
    def bit_registers(s: StructDef) -> list[Field]:
        """The fields of ``s`` that are registers with bit fields."""
        return [f for f in s.fields if f.bits]

    @staticmethod
    def bits_class(s: StructDef, f: Field) -> str:
        return bits_class_name(s.name, f.name)

    @staticmethod
    def py_bit_field(b: BitField) -> str:
        """A ``pydla.deviceapi.registers.BitField(...)`` literal, defaults left out."""
        parts = [f'"{b.name}"', str(b.lsb), str(b.width)]
        if b.access != "rw":
            parts.append(f'access="{b.access}"')
        if b.reset:
            parts.append(f"reset={RegisterBitHelpers.hex(b.reset)}")
        if b.values:
            values = ", ".join(f'("{m.name}", {m.value})' for m in b.values)
            parts.append(f"values=({values}{',' if len(b.values) == 1 else ''})")
        return f"BitField({', '.join(parts)})"

    def register_bit_defs(self) -> list[RegisterDef]:
        """The registers of the register map that have bit fields, in address order."""
        return [r for r in self.spec.register_defs() if r.field.bits]

    @staticmethod
    def hex(value: int) -> str:
        return f"{value:#x}"

    @staticmethod
    def bits_doc(b: BitField) -> str:
        where = f"bit {b.lsb}" if b.width == 1 else f"bits {b.msb}:{b.lsb}"
        access = {"rw": "", "r": ", read only", "w": ", write only", "w1c": ", write 1 to clear"}[b.access]
        reset = f", reset {b.reset:#x}" if b.reset else ""
        return f"{where}{access}{reset}"
