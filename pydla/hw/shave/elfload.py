"""Loading untrusted kernel ELF images into a tile's windows: :mod:`pydla.elf.executable` reads and
checks them; here a bad image is the tile's BAD_ELF fault (:class:`ShaveFault`, ``addr`` the
offending file offset or address).

Usage::

    image = parse_elf(data, "kernel 3", [(WIN_D, WIN_D_BYTES, False), (WIN_E + ..., ..., True)])
    image.entry, image.segments
"""

from __future__ import annotations

from pydla.elf import executable
from pydla.elf.executable import BadElfImage, ElfImage
from pydla.hw.shave.faults import E, ShaveFault


def parse_elf(data: bytes, what: str, windows: list[tuple[int, int, bool]]) -> ElfImage:
    """The image's loadable segments (:func:`pydla.elf.executable.parse_elf`); ShaveFault BAD_ELF."""
    try:
        return executable.parse_elf(data, what, windows)
    except BadElfImage as e:
        raise ShaveFault(E.BAD_ELF, e.message, addr=e.addr) from None


def check_entry(image: ElfImage, entry: int, what: str) -> None:
    """``entry`` must be an instruction address inside an executable segment; ShaveFault BAD_ELF."""
    try:
        executable.check_entry(image, entry, what)
    except BadElfImage as e:
        raise ShaveFault(E.BAD_ELF, e.message, addr=e.addr) from None
