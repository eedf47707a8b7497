"""A loadable taken apart, edited with knowledge of its layout, and built again with its section
digests rewritten to match (the mutations of :mod:`pydla.testing.fuzz_rehashed`).

:func:`split_loadable` gives the notes and sections; :func:`mutate_parts` edits a copy: a field of a
descriptor of a control code (network, dependency graph, operations, surfaces, LUTs, a SHAVE task
list, symbols, relocations), of a tensor descriptor or a memory entry (a boundary value, a neighbour
of the old value, another entry's value or name), a JSON value of the recipe (hostile, or another
value of the recipe itself), a weight (a float that is not a number, a flipped bit), a note (format,
contracts, device), whole entries of a table, a section dropped, swapped, copied or renamed, or raw
bytes; :func:`build_loadable` writes the digests as the loadable writer does.

Usage::

    parts = split_loadable(blob)
    layouts = Layouts.of(parts)
    case = build_loadable(mutate_parts(random.Random(1), parts, layouts))
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import random
from typing import Any

import numpy as np

from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated import loadable as L
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.task_layout import OP_DESC, SURFACE_DESC
from pydla.elf.reader import ElfReader
from pydla.elf.writer import ElfWriter
from pydla.loadable.container import (
    CTRL,
    MEMORY,
    NOTE_OWNER,
    NOTE_SECTION,
    NT_CONTRACTS,
    NT_DEVICE,
    NT_DIGESTS,
    NT_FORMAT,
    RECIPE,
    TENSORS,
    WEIGHTS,
    _notes_digest,  # the one definition of the notes' digest (the writer's and the checker's)
)
from pydla.testing.fuzz import mutate, mutate_json

Span = tuple[int, int]  # (offset, width) of one field


# -- taking a loadable apart and building it again -------------------------------------------------

@dataclasses.dataclass
class LoadableParts:
    """A loadable's notes (format, contracts, device: the digest note is written by
    :func:`build_loadable`) and its sections (name, bytes, alignment) in file order."""

    notes: dict[int, bytes]
    sections: list[tuple[str, bytes, int]]

    def copy(self) -> LoadableParts:
        return LoadableParts(dict(self.notes), list(self.sections))

    def index(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.sections) if s[0] == name), None)


def split_loadable(blob: bytes) -> LoadableParts:
    """The pieces of a loadable (its ELF structure must be sound; its contents are not checked)."""
    elf = ElfReader(blob, what="loadable")
    notes = {n.note_type: n.desc for n in elf.notes(NOTE_SECTION) if n.owner == NOTE_OWNER}
    notes.pop(NT_DIGESTS, None)
    sections = [(name, bytes(elf.section(name)), int(elf.section_info(name)["sh_addralign"]))
                for name in elf.section_names if name not in ("", ".shstrtab", NOTE_SECTION)]
    return LoadableParts(notes, sections)


def build_loadable(parts: LoadableParts) -> bytes:
    """The loadable of ``parts`` with the digests of its sections and notes rewritten to match, as
    :class:`~pydla.loadable.container.LoadableWriter` writes them."""
    w = ElfWriter()
    digests = {"notes": _notes_digest({k: v for k, v in parts.notes.items() if k != NT_DIGESTS}),
               "sections": {name: hashlib.sha256(data).hexdigest() for name, data, _ in parts.sections}}
    notes = dict(parts.notes)
    notes[NT_DIGESTS] = json.dumps(digests, sort_keys=True).encode()
    for kind in sorted(notes):
        w.add_note(NOTE_SECTION, NOTE_OWNER, kind, notes[kind])
    for name, data, align in parts.sections:
        w.add_section(name, data, align=align)
    return w.build()


def rehash(blob: bytes) -> bytes:
    """``blob`` with every digest rewritten to match its sections and notes."""
    return build_loadable(split_loadable(blob))


# -- where the fields are ------------------------------------------------------------------------------

def field_spans(cls: Any, base: int = 0) -> list[Span]:
    """(offset, width) of every scalar field of ctypes structure ``cls`` (arrays element by element,
    a char array as one field)."""
    spans: list[Span] = []
    for name, ftype, *_ in cls._fields_:
        spans += _type_spans(ftype, base + getattr(cls, name).offset)
    return spans


def _type_spans(ftype: Any, offset: int) -> list[Span]:
    if issubclass(ftype, ctypes.Structure | ctypes.Union):
        return field_spans(ftype, offset)
    if issubclass(ftype, ctypes.Array):
        if ftype._type_ is ctypes.c_char:
            return [(offset, ctypes.sizeof(ftype))]
        step = ctypes.sizeof(ftype._type_)
        return [s for i in range(ftype._length_) for s in _type_spans(ftype._type_, offset + i * step)]
    return [(offset, ctypes.sizeof(ftype))]


_SYM = [(0, 4), (4, 1), (5, 1), (6, 2), (8, 8), (16, 8)]  # Elf64_Sym: name, info, other, shndx, value, size
_RELA = [(0, 8), (8, 4), (12, 4), (16, 8)]  # Elf64_Rela: offset, type, symbol, addend


def _table(spans: list[Span], entry: int, size: int) -> list[Span]:
    return [(i + o, w) for i in range(0, size - entry + 1, entry) for o, w in spans]


def descriptor_fields(ctrl: bytes) -> dict[str, list[Span]]:
    """Per section of control-code ELF ``ctrl``: its fields, offsets from the start of the ELF (the
    network, graph, operation, surface and LUT descriptors, or a SHAVE task list's; the symbols and
    relocations). Read from a valid control code: the layout the mutations aim at."""
    elf = ElfReader(ctrl, what="control code")
    size = {n: int(elf.section_info(n)["sh_size"]) for n in elf.section_names if n}
    at = {n: elf.section_offset(n) for n in size}
    raw: dict[str, list[Span]] = {}
    net = T.dla_network_desc_t.from_buffer_copy(bytes(elf.section(".dla.network")).ljust(32, b"\0"))
    raw[".dla.network"] = field_spans(T.dla_network_desc_t)
    if ".shave.list" in size:
        raw[".shave.list"] = field_spans(T.shave_list_desc_t)
        for name, cls in ((".shave.act", T.shave_act_task_desc_t), (".shave.dma", T.shave_dma_task_desc_t)):
            raw[name] = _table(field_spans(cls), ctypes.sizeof(cls), size[name])
    else:
        common = ctypes.sizeof(T.dla_common_op_desc_t)
        graph = bytes(elf.section(".dla.graph"))
        raw[".dla.graph"] = _table(field_spans(T.dla_common_op_desc_t), common, len(graph))
        raw[".dla.ops"], raw[".dla.surfaces"] = [], []
        for i in range(len(graph) // common):
            block = dla_block_e(T.dla_common_op_desc_t.from_buffer_copy(graph, i * common).op_type)
            raw[".dla.ops"] += field_spans(OP_DESC[block], i * net.op_desc_size)
            raw[".dla.surfaces"] += field_spans(SURFACE_DESC[block], i * net.surface_desc_size)
        raw[".dla.luts"] = _table(field_spans(T.dla_lut_param_t), ctypes.sizeof(T.dla_lut_param_t),
                                  size[".dla.luts"])
    for name in (".dla.luts", ".shave.args"):
        if name in size and not raw.get(name):  # no whole entry: its words
            raw[name] = [(i, 4) for i in range(0, size[name] - 3, 4)]
    raw[".symtab"] = _table(_SYM, 24, size.get(".symtab", 0))
    for name in size:
        if name.startswith(".rela"):
            raw[name] = _table(_RELA, 24, size[name])
    return {name: [(at[name] + o, w) for o, w in spans] for name, spans in raw.items() if spans}


# -- the mutations -----------------------------------------------------------------------------------

SMALL = (2, 3, 4, 5, 7, 8, 15, 16, 31, 32, 63, 64, 255, 256, 1023, 1024, 4095, 4096, 65535, 65536)
NAMES = (b"", b"A" * 64, b"\xff\xfe", b"../../etc/passwd", b"in0", b"out0", b"weights", b"scratch")
FLOATS = (float("nan"), float("inf"), -float("inf"), 3.4e38, -0.0, 1e-45, 65504.0, 1e30)
EDITS = (("recipe", 22), ("descriptor", 30), ("tensors", 10), ("memory", 10), ("ctrl-bytes", 5),
         ("weights", 10), ("notes", 5), ("structure", 8))
DEVICES = (b"small", b"", b"full\0", b"nonexistent", b"full" * 100, b"\xff")
FORMATS = (b"1.0.0", b"1.2.0", b"2.0.0", b"0.9.9", b"1.1", b"1.1.0-rc1", b"", b"\xff")


def field_value(rng: random.Random, old: int, width: int) -> int:
    """A new value for an integer field of ``width`` bytes that holds ``old``: a boundary, a
    neighbour of the old value, a bit of it flipped, a small count or random bits."""
    bits = 8 * width
    top = 1 << bits
    choice = rng.randrange(10)
    if choice == 0:
        value = rng.choice((0, 1, top - 1, top >> 1, (top >> 1) - 1, top - 2))
    elif choice <= 2:
        value = old + rng.choice((1, -1, 2, -2, 8, -8, 64, -64))
    elif choice == 3:
        value = old ^ (1 << rng.randrange(bits))
    elif choice == 4:
        value = old * rng.choice((2, 4, 256)) if rng.random() < 0.5 else old // rng.choice((2, 4))
    elif choice <= 7:
        value = rng.choice(SMALL) * rng.choice((1, 1, -1))
    else:
        value = rng.getrandbits(bits)
    return value % top


def edit_field(rng: random.Random, data: bytearray, spans: list[Span], names: list[bytes]) -> None:
    """Set one field of ``spans`` in ``data``: an integer by :func:`field_value`, a char array to a
    name of ``names`` (a cross-reference) or a hostile one; or copy another field of the same width."""
    if not spans:
        return
    offset, width = rng.choice(spans)
    if offset + width > len(data):
        return
    if width > 8:  # a name
        name = rng.choice(names) if names and rng.random() < 0.6 else rng.choice(NAMES)
        data[offset:offset + width] = name[:width].ljust(width, b"\0")
        return
    if rng.random() < 0.15:
        others = [s for s in spans if s[1] == width and s[0] + width <= len(data)]
        src = rng.choice(others)[0]
        data[offset:offset + width] = data[src:src + width]
        return
    old = int.from_bytes(data[offset:offset + width], "little")
    if width == 4 and rng.random() < 0.05:
        data[offset:offset + 4] = np.float32(rng.choice(FLOATS)).tobytes()
        return
    data[offset:offset + width] = field_value(rng, old, width).to_bytes(width, "little")


@dataclasses.dataclass
class Layouts:
    """What the mutations know of a seed loadable: the fields of each control code, of a tensor
    descriptor and of a memory entry, and the names its tables use."""

    ctrl: dict[str, dict[str, list[Span]]]
    names: list[bytes]

    @classmethod
    def of(cls, parts: LoadableParts) -> Layouts:
        ctrl = {name: descriptor_fields(data) for name, data, _ in parts.sections if name.startswith(CTRL)}
        names: list[bytes] = []
        for section, entry in ((TENSORS, L.dla_tensor_desc_t), (MEMORY, L.dla_memory_entry_t)):
            i = parts.index(section)
            data = parts.sections[i][1] if i is not None else b""
            size = ctypes.sizeof(entry)
            names += [entry.from_buffer_copy(data, o).name for o in range(0, len(data) - size + 1, size)]
        return cls(ctrl, names)


TENSOR_FIELDS = field_spans(L.dla_tensor_desc_t)
MEMORY_FIELDS = field_spans(L.dla_memory_entry_t)


def mutate_parts(rng: random.Random, parts: LoadableParts, layouts: Layouts) -> LoadableParts:
    """One to four edits of a copy of ``parts`` (see the module's docstring)."""
    out = parts.copy()
    kinds, weights = zip(*EDITS, strict=True)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        kind = rng.choices(kinds, weights)[0]
        if kind == "notes":
            _edit_notes(rng, out)
        elif kind == "structure":
            _edit_structure(rng, out)
        else:
            _edit_section(rng, out, kind, layouts)
    return out


def _edit_section(rng: random.Random, parts: LoadableParts, kind: str, layouts: Layouts) -> None:
    if kind in ("descriptor", "ctrl-bytes"):
        names = [s[0] for s in parts.sections if s[0].startswith(CTRL)]
        if not names:
            return
        name = rng.choice(names)
    else:
        name = {"recipe": RECIPE, "tensors": TENSORS, "memory": MEMORY, "weights": WEIGHTS}[kind]
    i = parts.index(name)
    if i is None:
        return
    _, old, align = parts.sections[i]
    data = bytearray(old)
    if kind == "recipe":
        edited = mutate_json(rng, old, own_values=rng.random() < 0.5) if rng.random() < 0.75 else None
        data = bytearray(edited if edited is not None else mutate(rng, old))
    elif kind == "descriptor" and name in layouts.ctrl and rng.random() < 0.9:
        fields = layouts.ctrl[name]
        edit_field(rng, data, fields[rng.choice(list(fields))], [])
    elif kind in ("tensors", "memory") and rng.random() < 0.8:
        spans = TENSOR_FIELDS if kind == "tensors" else MEMORY_FIELDS
        entry = ctypes.sizeof(L.dla_tensor_desc_t if kind == "tensors" else L.dla_memory_entry_t)
        if rng.random() < 0.85 or len(data) < entry:
            edit_field(rng, data, _table(spans, entry, len(data)), layouts.names)
        else:
            _edit_table(rng, data, entry)
    elif kind == "weights" and rng.random() < 0.6 and len(data) >= 8:
        pos = rng.randrange(len(data) - 3)
        if rng.random() < 0.5:
            data[pos:pos + 4] = np.float32(rng.choice(FLOATS)).tobytes()
        else:
            data[pos] ^= 1 << rng.randrange(8)
    else:
        data = bytearray(mutate(rng, old, elf=kind in ("descriptor", "ctrl-bytes")))
    parts.sections[i] = (name, bytes(data), align)


def _edit_table(rng: random.Random, data: bytearray, entry: int) -> None:
    """Drop, duplicate or swap whole entries of a table."""
    n = len(data) // entry
    i, j = rng.randrange(n), rng.randrange(n)
    a, b = bytes(data[i * entry:(i + 1) * entry]), bytes(data[j * entry:(j + 1) * entry])
    op = rng.randrange(3)
    if op == 0:
        del data[i * entry:(i + 1) * entry]
    elif op == 1:
        data[i * entry:i * entry] = a
    else:
        data[i * entry:(i + 1) * entry], data[j * entry:(j + 1) * entry] = b, a


def _edit_notes(rng: random.Random, parts: LoadableParts) -> None:
    kind = rng.choice((NT_FORMAT, NT_CONTRACTS, NT_DEVICE))
    old = parts.notes.get(kind, b"")
    if kind == NT_FORMAT:
        parts.notes[kind] = rng.choice(FORMATS)
    elif kind == NT_DEVICE:
        parts.notes[kind] = rng.choice(DEVICES)
    else:
        edited = mutate_json(rng, old) if rng.random() < 0.8 else None
        parts.notes[kind] = edited if edited is not None else mutate(rng, old)
    if rng.random() < 0.05:
        del parts.notes[kind]


def _edit_structure(rng: random.Random, parts: LoadableParts) -> None:
    """A section dropped, two sections' contents swapped, a control code copied under another
    kernel's name, or a section renamed."""
    n = len(parts.sections)
    if n < 2:
        return
    i, j = rng.randrange(n), rng.randrange(n)
    op = rng.randrange(4)
    if op == 0:
        del parts.sections[i]
    elif op == 1:
        (a, da, aa), (b, db, ab) = parts.sections[i], parts.sections[j]
        parts.sections[i], parts.sections[j] = (a, db, aa), (b, da, ab)
    else:
        taken = {s[0] for s in parts.sections}
        name = rng.choice((f"{CTRL}task{rng.randrange(4)}", f"{CTRL}", ".pydla.extra", RECIPE + "2",
                           WEIGHTS, f"{CTRL}task0\0x"))
        if name in taken or "\0" in name:
            return
        if op == 2:
            parts.sections.insert(j, (name, parts.sections[i][1], parts.sections[i][2]))
        else:
            parts.sections[i] = (name, *parts.sections[i][1:])


__all__ = ["Layouts", "LoadableParts", "build_loadable", "descriptor_fields", "field_spans", "field_value",
           "mutate_parts", "rehash", "split_loadable"]
