"""Writing ELF64 little-endian files: sections, string tables, symbols, relocations and notes.

pyelftools only reads ELF, so pydla writes its own: loadables, control code and kernel ELFs are all
ELF files that ``readelf -a -W`` lists and :mod:`pydla.elf.reader` reads back.

Layout: the ELF header, then each section's data at its alignment, then the section header table.
Section 0 is the null section; ``.symtab`` / ``.strtab`` and ``.rela<section>`` are generated from
what was added; ``.shstrtab`` comes last.

Usage::

    w = ElfWriter()
    w.add_section(".dla.network", data, align=8)
    w.add_note(".note.pydla", "pydla", 1, b"...")
    w.add_symbol("input", ".dla.network", value=16, size=8)
    w.add_relocation(".dla.network", offset=16, symbol="input", rel_type=1)
    blob = w.build()
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from pydla.errors import DlaError, NvError

# ELF constants (the System V gABI).
ET_REL, ET_EXEC = 1, 2
EM_NONE = 0
SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOTE, SHT_NOBITS = 0, 1, 2, 3, 4, 7, 8
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_INFO_LINK = 0x1, 0x2, 0x4, 0x40
STB_LOCAL, STB_GLOBAL = 0, 1
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION = 0, 1, 2, 3
SHN_UNDEF, SHN_ABS = 0, 0xFFF1

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
SYM = struct.Struct("<IBBHQQ")
RELA = struct.Struct("<QQq")
NOTE_HDR = struct.Struct("<III")


@dataclass
class _Section:
    name: str
    data: bytes
    sh_type: int
    flags: int
    align: int
    link: int = 0
    info: int = 0
    entsize: int = 0
    nobits_size: int = 0


@dataclass
class _Symbol:
    name: str
    section: str | None
    value: int
    size: int
    binding: int
    sym_type: int
    absolute: bool = False


@dataclass
class _Reloc:
    offset: int
    symbol: str | None
    rel_type: int
    addend: int


@dataclass
class _StringTable:
    data: bytearray = field(default_factory=lambda: bytearray(b"\0"))
    index: dict[str, int] = field(default_factory=dict)

    def add(self, text: str) -> int:
        if not text:
            return 0
        if text not in self.index:
            self.index[text] = len(self.data)
            self.data += text.encode() + b"\0"
        return self.index[text]


class ElfWriter:
    """Collects sections, symbols, relocations and notes; :meth:`build` lays out the file."""

    def __init__(self, *, elf_type: int = ET_REL, machine: int = EM_NONE, flags: int = 0) -> None:
        self.elf_type = elf_type
        self.machine = machine
        self.flags = flags
        self._sections: list[_Section] = []
        self._symbols: list[_Symbol] = []
        self._relocs: dict[str, list[_Reloc]] = {}

    def _find(self, name: str) -> _Section:
        for s in self._sections:
            if s.name == name:
                return s
        raise DlaError(NvError.BadParameter, f"ELF writer: no section named '{name}'")

    def add_section(self, name: str, data: bytes | bytearray | memoryview, *, sh_type: int = SHT_PROGBITS,
                    flags: int = SHF_ALLOC, align: int = 8, entsize: int = 0) -> None:
        """A section holding ``data``, placed at a multiple of ``align`` (a power of two)."""
        if not name or name in (s.name for s in self._sections) or name.startswith(".rela"):
            raise DlaError(NvError.BadParameter, f"ELF writer: section name '{name}' is empty, taken "
                                                 "or reserved")
        if align < 1 or align & (align - 1):
            raise DlaError(NvError.BadParameter, f"ELF writer: section '{name}': align {align} is not a "
                                                 "power of two")
        self._sections.append(_Section(name, bytes(data), sh_type, flags, align, entsize=entsize))

    def add_nobits(self, name: str, size: int, *, align: int = 8, flags: int = SHF_ALLOC | SHF_WRITE) -> None:
        """A section that occupies no bytes in the file (like .bss)."""
        self.add_section(name, b"", sh_type=SHT_NOBITS, flags=flags, align=align)
        self._sections[-1].nobits_size = size

    def add_note(self, section: str, name: str, note_type: int, desc: bytes) -> None:
        """Append a note (name, type, descriptor) to the SHT_NOTE section ``section``."""
        encoded = name.encode() + b"\0"
        entry = (NOTE_HDR.pack(len(encoded), len(desc), note_type) + _pad(encoded, 4) + _pad(desc, 4))
        for s in self._sections:
            if s.name == section:
                if s.sh_type != SHT_NOTE:
                    raise DlaError(NvError.BadParameter, f"ELF writer: '{section}' is not a note section")
                s.data += entry
                return
        self.add_section(section, entry, sh_type=SHT_NOTE, flags=0, align=4)

    def add_symbol(self, name: str, section: str | None, *, value: int = 0, size: int = 0,
                   binding: int = STB_GLOBAL, sym_type: int = STT_OBJECT, absolute: bool = False) -> None:
        """A symbol in ``section`` (None: undefined), or with ``absolute`` a plain value (SHN_ABS)."""
        if any(s.name == name for s in self._symbols):
            raise DlaError(NvError.BadParameter, f"ELF writer: symbol '{name}' is defined twice")
        self._symbols.append(_Symbol(name, section, value, size, binding, sym_type, absolute))

    def add_relocation(self, section: str, *, offset: int, rel_type: int, symbol: str | None = None,
                       addend: int = 0) -> None:
        """A relocation (SHT_RELA) of ``rel_type`` at ``offset`` of ``section``."""
        target = self._find(section)
        if not 0 <= offset < max(len(target.data), 1):
            raise DlaError(NvError.BadParameter,
                           f"ELF writer: relocation at offset {offset} is outside section '{section}' "
                           f"({len(target.data)} bytes)")
        self._relocs.setdefault(section, []).append(_Reloc(offset, symbol, rel_type, addend))

    # -- layout ---------------------------------------------------------------------------------

    def build(self) -> bytes:
        sections = [_Section("", b"", SHT_NULL, 0, 0), *list(self._sections)]
        index = {s.name: i for i, s in enumerate(sections)}
        for name in self._relocs:
            if name not in index:
                raise DlaError(NvError.BadParameter, f"ELF writer: relocations for unknown section '{name}'")
        strtab = _StringTable()
        symbols = [s for s in self._symbols if s.binding == STB_LOCAL] + \
                  [s for s in self._symbols if s.binding != STB_LOCAL]
        sym_index = {s.name: i + 1 for i, s in enumerate(symbols)}
        symtab = bytearray(SYM.size)  # symbol 0 is the null symbol
        for sym_def in symbols:
            if sym_def.absolute:
                shndx = SHN_ABS
            elif sym_def.section is None:
                shndx = SHN_UNDEF
            elif sym_def.section not in index:
                raise DlaError(NvError.BadParameter, f"ELF writer: symbol '{sym_def.name}' names "
                                                     f"unknown section '{sym_def.section}'")
            else:
                shndx = index[sym_def.section]
            symtab += SYM.pack(strtab.add(sym_def.name), (sym_def.binding << 4) | sym_def.sym_type, 0,
                               shndx, sym_def.value, sym_def.size)
        if symbols or self._relocs:
            symtab_index = len(sections)
            sections.append(_Section(".symtab", bytes(symtab), SHT_SYMTAB, 0, 8,
                                     link=symtab_index + 1,
                                     info=1 + sum(s.binding == STB_LOCAL for s in symbols),
                                     entsize=SYM.size))
            sections.append(_Section(".strtab", bytes(strtab.data), SHT_STRTAB, 0, 1))
            for name, relocs in self._relocs.items():
                data = bytearray()
                for r in sorted(relocs, key=lambda r: r.offset):
                    sym = 0
                    if r.symbol is not None:
                        if r.symbol not in sym_index:
                            raise DlaError(NvError.BadParameter,
                                           f"ELF writer: relocation in '{name}' names unknown symbol "
                                           f"'{r.symbol}'")
                        sym = sym_index[r.symbol]
                    data += RELA.pack(r.offset, (sym << 32) | r.rel_type, r.addend)
                sections.append(_Section(".rela" + name, bytes(data), SHT_RELA, SHF_INFO_LINK, 8,
                                         link=symtab_index, info=index[name], entsize=RELA.size))
        shstrtab = _StringTable()
        names = [shstrtab.add(s.name) for s in sections]
        names.append(shstrtab.add(".shstrtab"))
        sections.append(_Section(".shstrtab", bytes(shstrtab.data), SHT_STRTAB, 0, 1))

        out = bytearray(EHDR.size)
        offsets = [0]
        for sec in sections[1:]:
            if sec.sh_type == SHT_NOBITS:
                offsets.append(len(out))
                continue
            out += b"\0" * (-len(out) % sec.align)
            offsets.append(len(out))
            out += sec.data
        out += b"\0" * (-len(out) % 8)
        shoff = len(out)
        for i, sec in enumerate(sections):
            size = sec.nobits_size if sec.sh_type == SHT_NOBITS else len(sec.data)
            out += SHDR.pack(names[i], sec.sh_type, sec.flags, 0, offsets[i] if i else 0, size, sec.link,
                             sec.info, sec.align, sec.entsize)
        ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, version 1, SysV
        out[:EHDR.size] = EHDR.pack(ident, self.elf_type, self.machine, 1, 0, 0, shoff, self.flags,
                                    EHDR.size, 0, 0, SHDR.size, len(sections), len(sections) - 1)
        return bytes(out)


def _pad(data: bytes, to: int) -> bytes:
    return data + b"\0" * (-len(data) % to)
