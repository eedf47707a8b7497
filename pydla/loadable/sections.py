"""A loadable's sections by the names the command line uses (as ``xclbinutil --dump-section``).

A pydla section ``.pydla.X`` is named ``X`` (``recipe``, ``tensors``, ``memory``, ``weights``,
``ctrl.<kernel>`` for a task's control code), ``.note.pydla`` is ``note``, and any section can also
be named as ``readelf -S`` shows it (``.pydla.recipe``, ``.shstrtab``). Only the ELF structure is
checked here, not the loadable's contents, so that the sections of a loadable that fails its
checks (a recipe to mend, say) can still be read.

The file-type hints say what a file is when it is not a loadable (an ONNX model, a JSON recipe),
so that ``pydla info model.onnx`` says to compile it rather than "not an ELF file".

Usage::

    elf = read_elf("model.dla")
    data = section_bytes(elf, "recipe", "model.dla")      # memoryview of .pydla.recipe
"""

from __future__ import annotations

import mmap
from pathlib import Path

from pydla.elf.reader import ELF_MAGIC, ElfReader
from pydla.errors import DlaError, NvError, file_error
from pydla.loadable.container import NOTE_SECTION

PREFIX = ".pydla."
# Field tags (field number << 3 | wire type) a serialized onnx.ModelProto starts with after its
# ir_version (field 1, varint: 0x08): producer_name, producer_version, domain, model_version,
# doc_string, graph, opset_import, metadata_props, training_info, functions.
_ONNX_NEXT_TAGS = {0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0x7A, 0x82}


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
    if path.suffix.lower() == ".onnx":
        return True
    return len(head) >= 3 and head[0] == 0x08 and 0 < head[1] < 0x80 and head[2] in _ONNX_NEXT_TAGS


def not_a_loadable(path: Path, head: bytes) -> DlaError | None:
    """An error saying what the file is and what to do with it, when it is not an ELF file and is
    something pydla recognizes; None otherwise (the ELF reader's own message then applies)."""
    if head[:4] == ELF_MAGIC:
        return None
    if is_onnx(path, head):
        return DlaError(NvError.BadParameter,
                        f"{path} is an ONNX model, not a loadable: compile it first with "
                        f"`pydla compile {path} -o {path.with_suffix('.dla')}` (and --input-shape "
                        "NAME=D0,D1,... for each input with symbolic dimensions)")
    if head.lstrip()[:1] == b"{":
        return DlaError(NvError.BadParameter,
                        f"{path} is JSON (a run recipe?), not a loadable: check a recipe with "
                        f"`pydla validate {path}`")
    return None


def read_head(path: Path, size: int = 64) -> bytes:
    """The first ``size`` bytes of ``path``; DlaError FileReadFailed when it cannot be read."""
    try:
        with path.open("rb") as f:
            return f.read(size)
    except OSError as e:
        raise file_error(path, e) from e


def check_is_loadable(path: Path) -> None:
    """DlaError when ``path`` cannot be read or is an ONNX model or a JSON file, saying what to do."""
    error = not_a_loadable(path, read_head(path))
    if error is not None:
        raise error


def read_elf(path: Path) -> ElfReader:
    """The loadable's ELF structure (mapped, checked), without the loadable's content checks."""
    check_is_loadable(path)
    try:
        with path.open("rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:  # ValueError: an empty file cannot be mapped
        raise DlaError(NvError.FileReadFailed, f"{path}: cannot map the loadable: {e}") from e
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
