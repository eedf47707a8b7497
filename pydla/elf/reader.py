"""Reading ELF files with pyelftools, trusting nothing in them.

pyelftools parses lazily and assumes a well-formed file; before any section is handed out this
reader checks the header (64-bit, little-endian, the expected type and machine), that every section
lies inside the file, that no two sections overlap, and that symbol and relocation tables point at
real sections and symbols. Section data is returned as a memoryview of the caller's buffer: no copy.

Usage::

    elf = ElfReader(blob)
    net = elf.section(".dla.network")          # memoryview
    for note in elf.notes(".note.pydla"): ...
    for rel in elf.relocations(".dla.network"): ...
"""

from __future__ import annotations

import contextlib
import io
import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import Section, SymbolTableSection

from pydla.errors import DlaError, NvError

ELF_MAGIC = b"\x7fELF"  # e_ident[0:4] of every ELF file
MAX_SECTIONS = 65280


@dataclass(frozen=True)
class Symbol:
    name: str
    section: str | None
    value: int
    size: int
    binding: str
    sym_type: str


@dataclass(frozen=True)
class Relocation:
    offset: int
    rel_type: int
    symbol: Symbol | None
    addend: int


@dataclass(frozen=True)
class Note:
    owner: str
    note_type: int
    desc: bytes


class ElfReader:
    """A checked view of an ELF file held in ``data`` (bytes, bytearray, memoryview or mmap)."""

    def __init__(self, data: bytes | bytearray | memoryview, *, what: str = "ELF file",
                 elf_type: str | None = None) -> None:
        self.what = what
        self.data = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
        if len(self.data) < 64 or bytes(self.data[:4]) != ELF_MAGIC:
            raise DlaError(NvError.BadValue, f"{what}: not an ELF file ({len(self.data)} bytes, "
                                             f"magic {bytes(self.data[:4])!r})")
        if self.data[4] != 2 or self.data[5] != 1:
            raise DlaError(NvError.NotSupported,
                           f"{what}: only 64-bit little-endian ELF is supported (class {self.data[4]}, "
                           f"data {self.data[5]})")
        try:
            self.elf = ELFFile(_MemoryStream(self.data))  # type: ignore[arg-type]
            self._check(elf_type)
        except ELFError as e:
            raise DlaError(NvError.BadValue, f"{what}: malformed ELF: {e}") from e
        except (ValueError, KeyError, IndexError, struct.error, UnicodeDecodeError) as e:
            raise DlaError(NvError.BadValue, f"{what}: malformed ELF: {type(e).__name__}: {e}") from e

    def _check(self, elf_type: str | None) -> None:
        h = self.elf.header
        if elf_type is not None and h.e_type != elf_type:
            raise DlaError(NvError.BadValue, f"{self.what}: ELF type {h.e_type}, expected {elf_type}")
        n = self.elf.num_sections()
        end = h.e_shoff + n * h.e_shentsize
        if h.e_shentsize != 64 or n > MAX_SECTIONS or h.e_shoff < 64 or end > len(self.data):
            raise DlaError(NvError.BadValue,
                           f"{self.what}: section header table ({n} entries of {h.e_shentsize} bytes at "
                           f"{h.e_shoff}) does not fit the {len(self.data)}-byte file")
        if not 0 < h.e_shstrndx < n:
            raise DlaError(NvError.BadValue, f"{self.what}: e_shstrndx {h.e_shstrndx} is not a section")
        null = self.elf._get_section_header(0)
        if null.sh_type != "SHT_NULL" or null.sh_offset or null.sh_size:
            raise DlaError(NvError.BadValue, f"{self.what}: section 0 is not the null section (type "
                                             f"{null.sh_type}, offset {null.sh_offset}, size {null.sh_size})")
        strtab = self.elf._get_section_header(h.e_shstrndx)
        if strtab.sh_type != "SHT_STRTAB":
            raise DlaError(NvError.BadValue, f"{self.what}: the section-name table (section {h.e_shstrndx}) "
                                             f"has type {strtab.sh_type}, expected SHT_STRTAB")
        spans = []
        self._by_name: dict[str, int] = {}
        for i in range(1, n):
            sh = self.elf._get_section_header(i)
            name = self.elf._get_section_name(sh)
            if sh.sh_type != "SHT_NOBITS":
                if sh.sh_offset + sh.sh_size > len(self.data) or (sh.sh_offset < 64 and sh.sh_size):
                    raise DlaError(NvError.BadValue,
                                   f"{self.what}: section '{name}' at offset {sh.sh_offset} with "
                                   f"{sh.sh_size} bytes runs past the {len(self.data)}-byte file")
                if sh.sh_size:
                    spans.append((sh.sh_offset, sh.sh_offset + sh.sh_size, name))
            if name in self._by_name:
                raise DlaError(NvError.BadValue, f"{self.what}: two sections are named '{name}'")
            self._by_name[name] = i
        spans.append((h.e_shoff, end, "section header table"))
        spans.sort()
        for (_s0, e0, n0), (s1, _, n1) in itertools.pairwise(spans):
            if s1 < e0:
                raise DlaError(NvError.BadValue, f"{self.what}: section '{n1}' overlaps '{n0}' "
                                                 f"(offsets {s1} < {e0})")

    # -- access -------------------------------------------------------------------------------------

    @property
    def section_names(self) -> list[str]:
        return list(self._by_name)

    def has_section(self, name: str) -> bool:
        return name in self._by_name

    def _header(self, name: str) -> Any:
        """Section ``name``'s header as parsed (and bounds-checked) at open; pyelftools builds no typed
        section object for it, so a changed ``sh_type`` cannot make pyelftools itself fail here."""
        i = self._by_name.get(name)
        if i is None:
            raise DlaError(NvError.BadValue, f"{self.what}: no section '{name}'")
        return self.elf._get_section_header(i)

    def _section(self, name: str) -> Section:
        """The typed pyelftools section (symbol and relocation tables), its exceptions made DlaError."""
        self._header(name)
        with _malformed(self.what, name):
            return self.elf.get_section(self._by_name[name])

    def section(self, name: str, sh_type: str = "SHT_PROGBITS") -> memoryview:
        """The bytes of section ``name``, a zero-copy slice of the file. The section must have type
        ``sh_type``: a data section whose type was changed is corrupt, not something to read anyway."""
        sh = self._header(name)
        if sh.sh_type != sh_type:
            raise DlaError(NvError.BadValue, f"{self.what}: section '{name}' has type {sh.sh_type}, "
                                             f"expected {sh_type}")
        if sh_type == "SHT_NOBITS":
            return memoryview(b"")
        return self.data[sh.sh_offset:sh.sh_offset + sh.sh_size]

    def section_offset(self, name: str) -> int:
        """Where section ``name`` starts in the file."""
        return int(self._header(name).sh_offset)

    def section_info(self, name: str) -> dict[str, int | str]:
        sh = self._header(name)
        return {k: sh[k] for k in ("sh_type", "sh_flags", "sh_offset", "sh_size", "sh_addralign")}

    def notes(self, name: str) -> Iterator[Note]:
        """The notes of SHT_NOTE section ``name``, parsed with every size checked."""
        data = self.section(name, "SHT_NOTE")
        pos = 0
        while pos < len(data):
            if pos + 12 > len(data):
                raise DlaError(NvError.BadValue, f"{self.what}: note at {pos} of '{name}' is truncated")
            namesz, descsz, note_type = (int.from_bytes(data[pos + i:pos + i + 4], "little")
                                         for i in (0, 4, 8))
            name_end = pos + 12 + namesz
            desc_start = name_end + (-namesz % 4)
            desc_end = desc_start + descsz
            if desc_end > len(data):
                raise DlaError(NvError.BadValue,
                               f"{self.what}: note at {pos} of '{name}' (name {namesz}, desc {descsz} "
                               f"bytes) runs past the section's {len(data)} bytes")
            owner = bytes(data[pos + 12:name_end]).rstrip(b"\0").decode("utf-8", errors="replace")
            yield Note(owner, note_type, bytes(data[desc_start:desc_end]))
            pos = desc_end + (-descsz % 4)

    def symbols(self) -> list[Symbol]:
        with _malformed(self.what, ".symtab"):
            return self._symbols()

    def _symbols(self) -> list[Symbol]:
        tab = self.elf.get_section_by_name(".symtab")
        if tab is None:
            return []
        if not isinstance(tab, SymbolTableSection):
            raise DlaError(NvError.BadValue, f"{self.what}: '.symtab' is not a symbol table")
        out = []
        n = self.elf.num_sections()
        for sym in tab.iter_symbols():
            shndx = sym["st_shndx"]
            section = None
            if isinstance(shndx, int):
                if not 0 < shndx < n:
                    raise DlaError(NvError.BadValue,
                                   f"{self.what}: symbol '{sym.name}' names section {shndx} of {n}")
                section = self.elf.get_section(shndx).name
            out.append(Symbol(sym.name, section, sym["st_value"], sym["st_size"],
                              sym["st_info"]["bind"], sym["st_info"]["type"]))
        return out

    def relocations(self, name: str) -> list[Relocation]:
        """The relocations that apply to section ``name`` (from ``.rela<name>``), bounds-checked."""
        with _malformed(self.what, ".rela" + name):
            return self._relocations(name)

    def _relocations(self, name: str) -> list[Relocation]:
        rel_name = ".rela" + name
        if rel_name not in self._by_name:
            return []
        sec = self._section(rel_name)
        if not isinstance(sec, RelocationSection) or not sec.is_RELA():
            raise DlaError(NvError.BadValue, f"{self.what}: '{rel_name}' is not a RELA section")
        target_size = self._section(name)["sh_size"]
        symbols = self.symbols()
        out = []
        for r in sec.iter_relocations():
            sym_index = r["r_info_sym"]
            if sym_index and sym_index >= len(symbols):
                raise DlaError(NvError.BadValue,
                               f"{self.what}: relocation at {r['r_offset']} in '{name}' names symbol "
                               f"{sym_index} of {len(symbols)}")
            if r["r_offset"] >= target_size:
                raise DlaError(NvError.BadValue,
                               f"{self.what}: relocation offset {r['r_offset']} is outside section "
                               f"'{name}' ({target_size} bytes)")
            symbol = symbols[sym_index] if sym_index else None
            out.append(Relocation(r["r_offset"], r["r_info_type"], symbol, r["r_addend"]))
        return out


@contextlib.contextmanager
def _malformed(what: str, section: str) -> Iterator[None]:
    """pyelftools reports bad tables with assorted exceptions: make each a DlaError."""
    try:
        yield
    except DlaError:
        raise
    except (ELFError, ValueError, KeyError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise DlaError(NvError.BadValue, f"{what}: malformed '{section}': {type(e).__name__}: {e}") from e


class _MemoryStream:
    """The file-like object pyelftools reads from, over a memoryview: no copy of the file."""

    def __init__(self, data: memoryview) -> None:
        self._data = data
        self._pos = 0

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._data)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else min(len(self._data), self._pos + n)
        chunk = bytes(self._data[self._pos:end])
        self._pos = max(self._pos, end)
        return chunk
