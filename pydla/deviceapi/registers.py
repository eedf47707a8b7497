"""What generated register maps with bit fields build on: a register's bit fields, its typed view,
and the table of a map's registers.

Only the standard library: the device and the firmware import generated modules, never the code
generator. A spec's register with ``Bits`` becomes, in Python, a :class:`RegisterBits` subclass (a
32-bit ctypes structure of bit fields named in lower case, used as the register's type in the
block's struct: a snapshot of a block reads ``regs.d_misc_cfg.conv_mode``) and a
:class:`RegisterInfo` in the module's ``REGISTER_INFO``.

Usage::

    from pydla.deviceapi.generated import nvdla_v1_regs as R

    info = R.REGISTER_INFO["NVDLA_CDMA_D_MISC_CFG_0"]
    info.reset, info.write_mask, info.double                 # 0x1100, 0x11113301, True
    word = R.nvdla_v1_cdma_d_misc_cfg_bits(conv_mode=1, in_precision=2)
    int(word)                                                # 0x201
    R.nvdla_v1_cdma_d_misc_cfg_bits.of(0x201).in_precision      # 2
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, TypeVar, cast

from pydla.deviceapi.runtime import Record
from pydla.errors import DlaError, NvError

RW, RO, WO, W1C = "rw", "r", "w", "w1c"
WORD = 0xFFFFFFFF


@dataclass(frozen=True)
class BitField:
    """A register's bits ``lsb .. lsb + width - 1``: how software accesses them, their value at
    reset, their named values."""

    name: str
    lsb: int
    width: int
    access: str = RW
    reset: int = 0
    values: tuple[tuple[str, int], ...] = ()

    @property
    def mask(self) -> int:
        """The field's bits in place (NVIDIA's ``_FIELD``)."""
        return ((1 << self.width) - 1) << self.lsb

    def get(self, word: int) -> int:
        """The field's value in ``word``."""
        return (word >> self.lsb) & ((1 << self.width) - 1)

    def put(self, word: int, value: int) -> int:
        """``word`` with the field set to ``value``; DlaError when the value does not fit."""
        if not 0 <= value < 1 << self.width:
            raise DlaError(NvError.BadValue, f"bit field {self.name}: {value} does not fit "
                                             f"{self.width} bit(s)")
        return (word & ~self.mask) | (value << self.lsb)

    def value(self, name: str) -> int:
        """The named value ``name`` of the field (``IN_PRECISION``'s ``FP16`` is 2)."""
        for n, v in self.values:
            if n == name:
                return v
        raise DlaError(NvError.BadParameter, f"bit field {self.name} has no value {name!r} "
                                             f"(values: {', '.join(n for n, _ in self.values) or 'none'})")


@dataclass(frozen=True)
class RegisterInfo:
    """A register: name, byte address, bit fields, and whether it is double-buffered (one copy per
    register group, written through the block's producer pointer). Its masks are computed once."""

    name: str
    address: int
    bits: tuple[BitField, ...]
    double: bool = False

    def _mask(self, *access: str) -> int:
        mask = 0
        for b in self.bits:
            if b.access in access:
                mask |= b.mask
        return mask

    @cached_property
    def reset(self) -> int:
        value = 0
        for b in self.bits:
            value |= b.reset << b.lsb
        return value

    @cached_property
    def read_mask(self) -> int:
        """The bits a read returns (write-only fields read 0)."""
        return self._mask(RW, RO, W1C)

    @cached_property
    def write_mask(self) -> int:
        """The bits a write stores."""
        return self._mask(RW)

    @cached_property
    def clear_mask(self) -> int:
        """The write-1-to-clear bits."""
        return self._mask(W1C)

    @cached_property
    def write_only_mask(self) -> int:
        """The write-only bits (a write acts, a read returns 0)."""
        return self._mask(WO)

    def field(self, name: str) -> BitField:
        for b in self.bits:
            if b.name == name:
                return b
        raise DlaError(NvError.BadParameter, f"register {self.name} has no bit field {name!r} "
                                             f"(fields: {', '.join(b.name for b in self.bits)})")

    def pack(self, **fields: int) -> int:
        """The register's reset value with the given fields (by name, any case) set."""
        word = self.reset
        by_name = {b.name.lower(): b for b in self.bits}
        for name, value in fields.items():
            b = by_name.get(name.lower())
            if b is None:
                raise DlaError(NvError.BadParameter, f"register {self.name} has no bit field {name!r}")
            word = b.put(word, value)
        return word


B = TypeVar("B", bound="RegisterBits")


class RegisterBits(Record):
    """A register as its bit fields: a 32-bit little-endian ctypes structure whose fields are the
    register's bit fields in lower case (the gaps are ``_rsvd<bit>`` fields). ``int(x)`` is the word."""

    BITS: ClassVar[tuple[BitField, ...]] = ()

    def __int__(self) -> int:
        return int.from_bytes(bytes(self), "little")

    @classmethod
    def of(cls: type[B], word: int) -> B:
        """The register holding ``word``."""
        if not 0 <= word <= WORD:
            raise DlaError(NvError.BadValue, f"{cls.__name__}: {word} is not a 32-bit value")
        return cls.from_buffer_copy(word.to_bytes(4, "little"))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().to_dict().items() if not k.startswith("_rsvd")}


def register_bits(name: str, module: str, bits: tuple[BitField, ...]) -> type[RegisterBits]:
    """The :class:`RegisterBits` class ``name`` of a register with ``bits`` (sorted, not overlapping,
    within 32 bits: the spec's rules)."""
    fields: list[tuple[str, type[ctypes.c_uint32], int]] = []
    at = 0
    for b in sorted(bits, key=lambda b: b.lsb):
        if b.lsb > at:
            fields.append((f"_rsvd{at}", ctypes.c_uint32, b.lsb - at))
        fields.append((b.name.lower(), ctypes.c_uint32, b.width))
        at = b.lsb + b.width
    if at < 32:
        fields.append((f"_rsvd{at}", ctypes.c_uint32, 32 - at))
    namespace = {"_pack_": 1, "_layout_": "ms", "_fields_": fields, "BITS": bits, "__module__": module,
                 "__doc__": f"{name}: the bit fields of one register (4 bytes)."}
    cls = cast(type[RegisterBits], type(name, (RegisterBits,), namespace))
    assert ctypes.sizeof(cls) == 4
    return cls
