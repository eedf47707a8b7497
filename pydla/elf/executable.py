"""Reading untrusted ELF32 RISC-V executables (SHAVE kernel and runtime images) as they are loaded
into a tile's windows.

A kernel (or runtime) image must be a little-endian ELF32 RISC-V executable whose loadable segments
all lie inside the windows allowed for them; every header offset and size is checked against the
image before it is used. Anything else is a :class:`BadElfImage` naming the field and value
(``addr``: the offending file offset or address), which the device turns into its BAD_ELF error and
a kernel's builder into a DlaError. :func:`parse_elf` reads only program headers: sections and
symbols are not needed to run, and a stripped image is the normal case; :func:`function_address`
reads the symbol table of an image that has one.

Usage::

    image = parse_elf(data, "kernel 3", [(WIN_D, WIN_D_BYTES, False), (WIN_E + ..., ..., True)])
    image.entry, image.segments
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pydla.errors import DlaError, NvError

EM_RISCV = 243
ET_EXEC = 2
PT_LOAD = 1
PF_X, PF_W = 1, 2
MAX_SEGMENTS = 16
_EHDR = struct.Struct("<16sHHIIIIIHHHHHH")  # Elf32_Ehdr, 52 bytes
_PHDR = struct.Struct("<IIIIIIII")  # Elf32_Phdr, 32 bytes


class BadElfImage(Exception):
    """An image that cannot be loaded: ``message`` names what is wrong (it starts with what the image
    is), ``addr`` the offending file offset or address."""

    def __init__(self, message: str, addr: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.addr = addr


@dataclass(frozen=True)
class Segment:
    vaddr: int
    data: bytes  # filesz bytes; the rest of memsz is zero
    memsz: int
    executable: bool
    writable: bool


@dataclass(frozen=True)
class ElfImage:
    entry: int
    segments: tuple[Segment, ...]


def parse_elf(data: bytes, what: str, windows: list[tuple[int, int, bool]]) -> ElfImage:
    """The image's loadable segments. ``windows``: (start, size, writable) where segments may go: a
    writable segment only in a writable window, a read-only one only in a read-only window."""

    def bad(message: str, addr: int = 0) -> BadElfImage:
        return BadElfImage(f"{what}: {message}", addr)

    if len(data) < _EHDR.size:
        raise bad(f"{len(data)} bytes is shorter than an ELF header ({_EHDR.size})")
    (ident, e_type, e_machine, _version, e_entry, e_phoff, _shoff, _flags, _ehsize, e_phentsize,
     e_phnum, _shentsize, _shnum, _shstrndx) = _EHDR.unpack_from(data, 0)
    if ident[:4] != b"\x7fELF":
        raise bad(f"magic {ident[:4]!r} is not ELF")
    if ident[4] != 1 or ident[5] != 1:
        raise bad(f"class {ident[4]} / data {ident[5]}: not ELF32 little-endian", 4)
    if e_machine != EM_RISCV:
        raise bad(f"e_machine {e_machine} is not RISC-V ({EM_RISCV})", 18)
    if e_type != ET_EXEC:
        raise bad(f"e_type {e_type} is not an executable ({ET_EXEC})", 16)
    if e_phentsize != _PHDR.size or not 1 <= e_phnum <= MAX_SEGMENTS:
        raise bad(f"e_phentsize {e_phentsize} / e_phnum {e_phnum}: want {_PHDR.size} and "
                  f"1..{MAX_SEGMENTS}", 42)
    if e_phoff + e_phnum * _PHDR.size > len(data):
        raise bad(f"program headers at e_phoff {e_phoff} run past the {len(data)}-byte image", e_phoff)
    segments = []
    for i in range(e_phnum):
        at = e_phoff + i * _PHDR.size
        p_type, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, p_flags, _align = _PHDR.unpack_from(data, at)
        if p_type != PT_LOAD or p_memsz == 0:
            continue
        if p_filesz > p_memsz or p_offset + p_filesz > len(data):
            raise bad(f"segment {i}: p_offset {p_offset} + p_filesz {p_filesz} (p_memsz {p_memsz}) is "
                      f"outside the {len(data)}-byte image", at)
        writable = bool(p_flags & PF_W)
        if not any(start <= p_vaddr and p_vaddr + p_memsz <= start + size and w == writable
                   for start, size, w in windows):
            kind = "writable" if writable else "read-only"
            allowed = ", ".join(f"{s:#x}+{n:#x}" for s, n, w in windows if w == writable) or "none"
            raise bad(f"segment {i}: {kind} p_vaddr {p_vaddr:#x} + p_memsz {p_memsz:#x} is outside "
                      f"its windows ({allowed})", p_vaddr)
        segments.append(Segment(p_vaddr, bytes(data[p_offset:p_offset + p_filesz]), p_memsz,
                                bool(p_flags & PF_X), writable))
    if not segments:
        raise bad("no loadable segment")
    return ElfImage(e_entry, tuple(segments))


def check_entry(image: ElfImage, entry: int, what: str) -> None:
    """``entry`` must be an instruction address inside an executable segment."""
    if entry % 2 or not any(s.executable and s.vaddr <= entry < s.vaddr + s.memsz for s in image.segments):
        raise BadElfImage(f"{what}: entry {entry:#x} is not inside an executable segment", entry)


def function_address(data: bytes, name: str, what: str) -> int | None:
    """The address of function ``name`` in the image's symbol table; None when the image has no
    symbol table (it is stripped). DlaError BadValue when the table cannot be read, BadParameter
    when ``name`` is not a function of it.

    Usage: ``address = function_address(elf, "scale_add", "kernel 'scale_add'")``"""
    import io

    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        table = ELFFile(io.BytesIO(data)).get_section_by_name(".symtab")
        found = table.get_symbol_by_name(name) if isinstance(table, SymbolTableSection) else None
    except (ELFError, ValueError, OSError) as e:
        raise DlaError(NvError.BadValue, f"{what}: cannot read its symbol table: {e}") from None
    if table is None:
        return None
    if not found or found[0]["st_info"]["type"] != "STT_FUNC":
        raise DlaError(NvError.BadParameter, f"{what}: entry '{name}' is not a function of the ELF")
    return int(found[0]["st_value"])
