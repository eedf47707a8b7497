"""Kernel ELFs: the code, constants and a single entry point are required and bounds-checked."""

from __future__ import annotations

import pytest

from pydla import DlaError
from pydla.elf.kernel import KernelElf
from pydla.elf.writer import SHF_ALLOC, SHF_EXECINSTR, STT_FUNC, ElfWriter


def kernel(entries=(("conv3x3", 0, 16),), text: bytes = b"\x13" * 32) -> bytes:
    w = ElfWriter()
    w.add_section(".text", text, flags=SHF_ALLOC | SHF_EXECINSTR, align=16)
    w.add_section(".rodata", b"\x01\x02", align=8)
    for name, value, size in entries:
        w.add_symbol(name, ".text", value=value, size=size, sym_type=STT_FUNC)
    return w.build()


def test_a_kernel_with_one_entry() -> None:
    k = KernelElf(kernel())
    assert k.entry == "conv3x3" and k.entry_offset == 0
    assert bytes(k.text) == b"\x13" * 32 and bytes(k.rodata) == b"\x01\x02"


def test_entry_chosen_by_name_among_several() -> None:
    k = KernelElf(kernel((("a", 0, 8), ("b", 16, 8))), entry="b")
    assert k.entry_offset == 16


@pytest.mark.parametrize(("blob", "entry", "fragment"), [
    (kernel(()), None, "found: none"),
    (kernel((("a", 0, 8), ("b", 16, 8))), None, "found: a, b"),
    (kernel((("a", 30, 8),)), None, "outside '.text'"),
    (kernel(text=b""), None, "no code"),
    (kernel(), "other", "named 'other'"),
])
def test_malformed_kernels(blob: bytes, entry, fragment: str) -> None:
    with pytest.raises(DlaError, match=fragment):
        KernelElf(blob, entry=entry)
