"""Kernel ELFs (as in the VPUX software layers): a compute kernel's code for a SHAVE-style vector core.

A kernel ELF holds ``.text`` (the code), optionally ``.rodata`` (its constants) and ``.data``, and a
global function symbol that is its entry point. The loadable carries kernels in sections named
``.pydla.kernel.<name>``; the device side that runs them (SHAVE tiles, MemRefData argument
buffers, window addressing) is a later issue's. This reader is the place the design keeps for them:
it checks what a kernel ELF must contain before anything would be loaded.

Usage::

    k = KernelElf(blob, entry="conv3x3")
    k.text, k.entry_offset
"""

from __future__ import annotations

from pydla.elf.reader import ElfReader
from pydla.errors import DlaError, NvError

LOADABLE_PREFIX = ".pydla.kernel."


class KernelElf:
    """A checked kernel ELF: its code, constants and entry point."""

    def __init__(self, data: bytes | bytearray | memoryview, *, entry: str | None = None,
                 what: str = "kernel ELF") -> None:
        self.elf = ElfReader(data, what=what)
        if not self.elf.has_section(".text") or not len(self.elf.section(".text")):
            raise DlaError(NvError.BadValue, f"{what}: no code (an empty or missing '.text')")
        self.text = self.elf.section(".text")
        self.rodata = self.elf.section(".rodata") if self.elf.has_section(".rodata") else memoryview(b"")
        functions = [s for s in self.elf.symbols()
                     if s.sym_type == "STT_FUNC" and s.binding == "STB_GLOBAL" and s.section == ".text"]
        if entry is not None:
            functions = [s for s in functions if s.name == entry]
        if len(functions) != 1:
            names = ", ".join(s.name for s in functions) or "none"
            raise DlaError(NvError.BadValue,
                           f"{what}: needs exactly one global function in '.text'"
                           f"{f' named {entry!r}' if entry else ''} as its entry point (found: {names})")
        sym = functions[0]
        if sym.value >= len(self.text) or sym.value + max(sym.size, 1) > len(self.text):
            raise DlaError(NvError.BadValue, f"{what}: entry '{sym.name}' at {sym.value} (+{sym.size}) is "
                                             f"outside '.text' ({len(self.text)} bytes)")
        self.entry = sym.name
        self.entry_offset = sym.value
