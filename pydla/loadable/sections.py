"""A loadable's sections by the names the command line uses (as ``xclbinutil --dump-section``).

A pydla section ``.pydla.X`` is named ``X`` (``recipe``, ``tensors``, ``memory``, ``weights``,
``ctrl.<kernel>`` for a task's control code), ``.note.pydla`` is ``note``, and any section can also
be named as ``readelf -S`` shows it (``.pydla.recipe``, ``.shstrtab``). Only the ELF structure is
checked here, not the loadable's contents, so that the sections of a loadable that fails its
checks (a recipe to mend, say) can still be read.

The file-type hints say what a file is when it is not a loadable (an ONNX model, a JSON recipe, a
.npy array, a SHAVE kernel: :mod:`pydla.files`), so that ``pydla info model.onnx`` says to compile it
rather than "not an ELF file".

Usage::

    elf = read_elf("model.dla")
    data = section_bytes(elf, "recipe", "model.dla")      # memoryview of .pydla.recipe
"""

from __future__ import annotations

import mmap
from pathlib import Path

from pydla.elf.reader import ELF_MAGIC, ElfReader
from pydla.errors import DlaError, NvError, file_error
from pydla.files import LOADABLE, kind_of, looks_like_onnx, wrong_kind
from pydla.files import read_head as files_read_head
from pydla.loadable.container import NOTE_SECTION

PREFIX = ".pydla."


def short_name(elf_name: str) -> str:
    """The command line's name of ELF section ``elf_name``."""
    if elf_name == NOTE_SECTION:
        return "note"
    return elf_name[len(PREFIX):] if elf_name.startswith(PREFIX) else elf_name


def section_names(elf: ElfReader) -> dict[str, str]:
    """Short name -> ELF name of every section, in file order."""
    return {short_name(n): n for n in elf.section_names if n}


def is_onnx(path: Path, head: bytes) -> bool:
    """Whether the file looks like an ONNX model: its name, or a ModelProto's first bytes."""
    return path.suffix.lower() == ".onnx" or looks_like_onnx(head)


def not_a_loadable(path: Path, head: bytes, wanted: str = "a loadable") -> DlaError | None:
    """An error saying what the file is and what to do with it, when it is not an ELF file and is
    something pydla recognizes (:func:`pydla.files.wrong_kind`); None otherwise (the ELF reader's
    own message then applies). ``wanted``: what the command takes."""
    if head[:4] == ELF_MAGIC and kind_of(head) == LOADABLE:
        return None
    return wrong_kind(head, wanted, path=path, accept=(LOADABLE,))


def read_head(path: Path, size: int = 64) -> bytes:
    """The first ``size`` bytes of ``path``; DlaError (:func:`pydla.errors.file_error`) when it
    cannot be read."""
    return files_read_head(path, size)


def check_is_loadable(path: Path, wanted: str = "a loadable") -> None:
    """DlaError when ``path`` cannot be read or is a file of another kind (an ONNX model, JSON, a
    .npy array, a SHAVE kernel...), saying what to do with it."""
    error = not_a_loadable(path, read_head(path), wanted)
    if error is not None:
        raise error


def read_elf(path: Path) -> ElfReader:
    """The loadable's ELF structure (mapped, checked), without the loadable's content checks."""
    check_is_loadable(path)  # an empty file too: mmap would refuse it
    try:
        with path.open("rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise file_error(path, e) from e
    return ElfReader(memoryview(data), what=str(path))


def section_bytes(elf: ElfReader, name: str, source: str) -> memoryview:
    """The bytes of the section called ``name`` (short or ELF name); DlaError BadParameter listing
    the sections when there is none."""
    names = section_names(elf)
    elf_name = names.get(name, name if elf.has_section(name) else None)
    if elf_name is None:
        raise DlaError(NvError.BadParameter,
                       f"--dump-section {name!r}: {source} has no such section; its sections: "
                       f"{', '.join(names)}")
    # Dumped as it is, whatever its type (a note, a string table); a NOBITS section has no bytes.
    return elf.section(elf_name, str(elf.section_info(elf_name)["sh_type"]))
