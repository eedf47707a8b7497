"""The scalar types a binary contract may use, and how each target language spells them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scalar:
    """One scalar type: its canonical spec name, byte size and spellings per target."""

    name: str
    size: int
    signed: bool
    is_float: bool
    c_type: str
    ctypes_name: str
    struct_format: str

    @property
    def min_value(self) -> int:
        return -(1 << (8 * self.size - 1)) if self.signed else 0

    @property
    def max_value(self) -> int:
        bits = 8 * self.size - (1 if self.signed else 0)
        return (1 << bits) - 1


SCALARS: dict[str, Scalar] = {
    s.name: s
    for s in (
        Scalar("u8", 1, False, False, "uint8_t", "c_uint8", "B"),
        Scalar("u16", 2, False, False, "uint16_t", "c_uint16", "H"),
        Scalar("u32", 4, False, False, "uint32_t", "c_uint32", "I"),
        Scalar("u64", 8, False, False, "uint64_t", "c_uint64", "Q"),
        Scalar("i8", 1, True, False, "int8_t", "c_int8", "b"),
        Scalar("i16", 2, True, False, "int16_t", "c_int16", "h"),
        Scalar("i32", 4, True, False, "int32_t", "c_int32", "i"),
        Scalar("i64", 8, True, False, "int64_t", "c_int64", "q"),
        # bool is stored as one byte (a device-API rule); C and C++ see uint8_t so the layout never depends
        # on a compiler's idea of bool.
        Scalar("bool", 1, False, False, "uint8_t", "c_uint8", "B"),
        # f16 travels as its IEEE-754 binary16 bits: neither C nor ctypes has a portable half type.
        Scalar("f16", 2, True, True, "uint16_t", "c_uint16", "e"),
        Scalar("f32", 4, True, True, "float", "c_float", "f"),
        Scalar("f64", 8, True, True, "double", "c_double", "d"),
    )
}

# Specs write C spellings (``uint64_t``); both are accepted and mean the same type.
ALIASES: dict[str, str] = {
    "uint8_t": "u8",
    "uint16_t": "u16",
    "uint32_t": "u32",
    "uint64_t": "u64",
    "int8_t": "i8",
    "int16_t": "i16",
    "int32_t": "i32",
    "int64_t": "i64",
    "float": "f32",
    "double": "f64",
}

INTEGER_STORAGE = ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64")


def canonical_scalar(name: str) -> str | None:
    """Return the canonical scalar name for ``name`` (an alias or a canonical name), else None."""
    name = ALIASES.get(name, name)
    return name if name in SCALARS else None
