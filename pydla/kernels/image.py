"""A custom kernel's ELF, checked as the device will load it: where it enters (an offset in WIN_D)
and where its writable data ends in WIN_E (the ELF read by :mod:`pydla.elf.executable`).

Usage: ``image = check_elf(Path("scale_add.elf").read_bytes(), "kernel 'scale_add'")``
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydla.deviceapi.generated import shave as S
from pydla.elf.executable import BadElfImage, check_entry, function_address, parse_elf
from pydla.errors import DlaError, NvError

MAX_ELF_BYTES = 16 << 20


@dataclass(frozen=True)
class KernelImage:
    """A checked kernel ELF: where it enters (an offset in WIN_D) and where its RW data ends in WIN_E."""

    elf: bytes
    entry_offset: int
    rw_end: int  # offset in WIN_E after the kernel's writable segments (ARGS_MAX_BYTES when none)


def check_elf(elf: bytes, what: str, entry: str | None = None) -> KernelImage:
    """``elf`` checked as the device will load it (DlaError BadValue naming ``what`` otherwise);
    ``entry``: a function to enter instead of the ELF's entry point (needs its symbol table).

    Usage: ``image = check_elf(Path("scale_add.elf").read_bytes(), "kernel 'scale_add'")``"""
    if len(elf) > MAX_ELF_BYTES:
        raise DlaError(NvError.InvalidSize, f"{what}: {len(elf)} bytes, more than a kernel ELF may have "
                                            f"({MAX_ELF_BYTES})")
    rw_window = (S.WIN_E + S.ARGS_MAX_BYTES, S.WIN_E_BYTES - S.ARGS_MAX_BYTES, True)
    try:
        image = parse_elf(elf, what, [(S.WIN_D, S.WIN_D_BYTES, False), rw_window])
        address = image.entry if entry is None else _symbol(elf, entry, what)
        check_entry(image, address, what)
    except BadElfImage as e:
        detail = e.message.removeprefix(f"{what}: ")
        raise DlaError(NvError.BadValue, f"{what}: not a SHAVE kernel ELF: {detail} (build kernels with "
                                         "`pydla kernel build`)") from None
    rw_end = max([S.ARGS_MAX_BYTES] + [s.vaddr + s.memsz - S.WIN_E for s in image.segments if s.writable])
    return KernelImage(bytes(elf), address - S.WIN_D, rw_end)


def _symbol(elf: bytes, name: str, what: str) -> int:
    """The address of function ``name`` in the ELF's symbol table."""
    address = function_address(elf, name, what)
    if address is None:
        raise DlaError(NvError.BadParameter, f"{what}: entry '{name}': the ELF has no symbol table (it is "
                                             f"stripped, as `pydla kernel build` makes it: build it with "
                                             f"--entry {name} instead)")
    return address


def read_elf(elf: str | os.PathLike[str] | bytes, what: str = "kernel") -> tuple[bytes, str]:
    """A kernel ELF's bytes and a name for it (the file's stem), from a path or the bytes.

    Usage: ``data, name = read_elf("scale_add.elf")``  # name "scale_add"
    """
    if isinstance(elf, (bytes, bytearray, memoryview)):
        return bytes(elf), "kernel"
    if not isinstance(elf, (str, os.PathLike)):
        raise DlaError(NvError.BadParameter, f"{what}: a path or the ELF's bytes, not {type(elf).__name__}")
    path = Path(elf)
    try:
        if path.stat().st_size > MAX_ELF_BYTES:
            raise DlaError(NvError.InvalidSize, f"{what} '{path}': {path.stat().st_size} bytes, more than a "
                                                f"kernel ELF may have ({MAX_ELF_BYTES})")
        return path.read_bytes(), path.stem
    except FileNotFoundError:
        raise DlaError(NvError.FileNotFound, f"{what} '{path}': no such file") from None
    except OSError as e:
        raise DlaError(NvError.FileReadFailed, f"{what} '{path}': {e.strerror or e}") from None
