"""The loadable: one ELF file that holds a compiled network.

Sections (``readelf -S model.dla`` lists them):

- ``.note.pydla``: note 1, the loadable format's semver; note 2, JSON naming the version and
  64-bit layout hash of each binary contract the file was written with (``dla_task``,
  ``dla_regs``, ``loadable``); note 3, the device configuration it was compiled for; note 4, the
  SHA-256 of every other section and of notes 1-3 (JSON), checked at load, so that a corrupted file
  is refused naming the section instead of running with changed weights or descriptors;
- ``.pydla.recipe``: the run recipe (JSON, :mod:`pydla.loadable.recipe`);
- ``.pydla.tensors``: ``dla_tensor_desc_t`` per network input and output;
- ``.pydla.memory``: ``dla_memory_entry_t`` per recipe buffer, in the recipe's order;
- ``.pydla.ctrl.<kernel>``: the control-code ELF of each recipe kernel;
- ``.pydla.weights``: every weight buffer, each at its alignment, the section itself page-aligned
  so a mapped file serves weights without a copy.

The reader maps the file (or takes the caller's buffer) and checks everything before anything is
used: ELF structure and section bounds, the versions, the recipe, and every reference between the
recipe, the memory list, the tensors, the control code and the weights. A failure is a DlaError
naming what is wrong.

Usage::

    blob = LoadableWriter(...).build()
    lo = Loadable.open("model.dla")        # or bytes / memoryview
    lo.tensors("input"); lo.weights("conv1.w"); lo.control_code("task0")
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pydla.deviceapi.generated import dla_regs, dla_task
from pydla.deviceapi.generated import loadable as L
from pydla.deviceapi.version import ContractVersion, check_compatible, parse_semver
from pydla.elf.controlcode import ControlCode
from pydla.elf.reader import ElfReader
from pydla.elf.writer import ElfWriter
from pydla.errors import DlaError, NvError, file_error
from pydla.loadable.recipe import EXTERNAL_TYPES, Recipe, loads, parse_recipe

# 1.1: the section digests (note 4), which this pydla requires.
FORMAT_VERSION = (1, 1, 0)
NOTE_SECTION, NOTE_OWNER = ".note.pydla", "pydla"
NT_FORMAT, NT_CONTRACTS, NT_DEVICE, NT_DIGESTS = 1, 2, 3, 4
# The ELF's own bookkeeping: the digests cannot cover the section-name table (written by the ELF
# writer) and the note that holds them; a changed section name makes a section go missing instead.
UNDIGESTED = ("", ".shstrtab", NOTE_SECTION)
RECIPE, TENSORS, MEMORY, WEIGHTS, CTRL = (".pydla.recipe", ".pydla.tensors", ".pydla.memory",
                                          ".pydla.weights", ".pydla.ctrl.")
PAGE = 4096
CONTRACTS = {api.NAME: api for api in (dla_task, dla_regs, L)}
KINDS = {"input": L.dla_buffer_kind_e.INPUT, "output": L.dla_buffer_kind_e.OUTPUT,
         "inout": L.dla_buffer_kind_e.INOUT, "internal": L.dla_buffer_kind_e.INTERNAL,
         "weight": L.dla_buffer_kind_e.WEIGHT, "spill": L.dla_buffer_kind_e.SPILL,
         "unknown": L.dla_buffer_kind_e.UNKNOWN}
#: The numpy type of each tensor element type (the one table the compiler, Session and UMD use).
NUMPY_TYPES: dict[L.dla_data_type_e, np.dtype[Any]] = {
    L.dla_data_type_e[name]: np.dtype(t) for name, t in (
        ("FLOAT32", np.float32), ("FLOAT16", np.float16), ("FLOAT64", np.float64), ("INT64", np.int64),
        ("INT32", np.int32), ("INT16", np.int16), ("INT8", np.int8), ("UINT64", np.uint64),
        ("UINT32", np.uint32), ("UINT16", np.uint16), ("UINT8", np.uint8), ("BOOL", np.bool_))}
ELEMENT_SIZE = {t: d.itemsize for t, d in NUMPY_TYPES.items()}


def tensor_span(dims: tuple[int, ...], strides: tuple[int, ...], element: int) -> int:
    """Bytes from a tensor's first element to the end of its last; 0 for an empty tensor (a
    dimension of 0, since contract 1.3.0)."""
    if 0 in dims:
        return 0
    return element + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))


@dataclass(frozen=True)
class TensorDesc:
    """A network input or output: what ``getInputTensorDesc`` returns."""

    name: str
    dims: tuple[int, ...]
    data_type: L.dla_data_type_e
    layout: L.dla_tensor_layout_e
    strides: tuple[int, ...]
    size: int
    offset: int
    direction: L.dla_tensor_direction_e
    bind_id: int
    buffer: str


@dataclass(frozen=True)
class MemoryEntry:
    name: str
    kind: str
    size: int
    alignment: int
    weights_offset: int


class LoadableWriter:
    """Assembles a loadable. Usage: add the pieces, then :meth:`build`."""

    def __init__(self, device: str = "full") -> None:
        self.device = device
        self.recipe: dict[str, Any] | None = None
        self.tensors: list[Any] = []
        self.memory: list[Any] = []
        self.ctrl: dict[str, bytes] = {}
        self._weights = bytearray()
        self._weight_at: dict[str, tuple[int, int]] = {}

    def set_recipe(self, recipe: dict[str, Any]) -> None:
        self.recipe = recipe

    def add_weights(self, name: str, data: bytes | bytearray | memoryview, alignment: int = 64) -> int:
        """Place weight bytes in the weights section; returns their offset there."""
        self._weights += b"\0" * (-len(self._weights) % alignment)
        offset = len(self._weights)
        self._weights += bytes(data)
        self._weight_at[name] = (offset, len(data))
        return offset

    def add_memory(self, name: str, kind: str, size: int, alignment: int = 64) -> None:
        e = L.dla_memory_entry_t(name=name.encode(), size=size, alignment=alignment, kind=int(KINDS[kind]))
        if kind == "weight":
            if name not in self._weight_at:
                raise DlaError(NvError.BadParameter, f"loadable writer: weights of '{name}' were not added")
            e.weights_offset = self._weight_at[name][0]
        self.memory.append(e)

    def add_tensor(self, name: str, buffer_index: int, dims: tuple[int, ...], data_type: int,
                   direction: str, bind_id: int, *, offset: int = 0, layout: int = 0,
                   strides: tuple[int, ...] | None = None) -> None:
        el = ELEMENT_SIZE[L.dla_data_type_e(data_type)]
        if strides is None:
            dense: list[int] = []
            step = el
            for d in reversed(dims):
                dense.insert(0, step)
                step *= d
            strides = tuple(dense)
        size = tensor_span(dims, strides, el)
        t = L.dla_tensor_desc_t(name=name.encode(), size=size, offset=offset, ndims=len(dims),
                                data_type=data_type, layout=layout, bind_id=bind_id, buffer=buffer_index,
                                direction=int(L.dla_tensor_direction_e[direction.upper()]))
        for i, (d, s) in enumerate(zip(dims, strides, strict=True)):
            t.dims[i], t.strides[i] = d, s
        self.tensors.append(t)

    def add_control_code(self, kernel: str, elf: bytes) -> None:
        self.ctrl[kernel] = elf

    def build(self) -> bytes:
        if self.recipe is None:
            raise DlaError(NvError.InvalidState, "loadable writer: no recipe")
        w = ElfWriter()
        contracts = {name: {"version": ".".join(map(str, api.VERSION)),
                            "layout_hash64": f"{api.LAYOUT_HASH64:016x}"} for name, api in CONTRACTS.items()}
        notes = {NT_FORMAT: ".".join(map(str, FORMAT_VERSION)).encode(),
                 NT_CONTRACTS: json.dumps(contracts, sort_keys=True).encode(),
                 NT_DEVICE: self.device.encode()}
        sections: list[tuple[str, bytes, int]] = [
            (RECIPE, json.dumps(self.recipe, indent=1).encode(), 1),
            (TENSORS, b"".join(bytes(t) for t in self.tensors), 8),
            (MEMORY, b"".join(bytes(m) for m in self.memory), 8),
            *((CTRL + kernel, elf, 64) for kernel, elf in self.ctrl.items()),
            (WEIGHTS, bytes(self._weights), PAGE)]
        digests = {"notes": _notes_digest(notes),
                   "sections": {name: hashlib.sha256(data).hexdigest() for name, data, _ in sections}}
        notes[NT_DIGESTS] = json.dumps(digests, sort_keys=True).encode()
        for kind, desc in notes.items():
            w.add_note(NOTE_SECTION, NOTE_OWNER, kind, desc)
        for name, data, align in sections:
            w.add_section(name, data, align=align)
        return w.build()


def _refuse_other_kinds(data: bytes | bytearray | memoryview | mmap.mmap, source: str) -> None:
    """A file of another kind given where a loadable goes (``rt.load("model.onnx")``, a SHAVE
    kernel's ELF, a .npy array): say what it is and what to do with it, where the ELF reader would
    say "not an ELF file". Known by its first bytes, whatever the file is called."""
    from pydla.files import HEAD_BYTES, LOADABLE, wrong_kind

    head = bytes(memoryview(data)[:HEAD_BYTES])
    path = None if source == "loadable" else source  # bytes without a name
    error = wrong_kind(head, "a loadable", path=path, accept=(LOADABLE,))
    if error is not None:
        raise error


class Loadable:
    """A checked, read-only loadable; weights are views of the mapped file.

    ``Loadable.TensorDescListEntry`` is :class:`TensorDesc` under the NVDLA runtime API's name
    (``nvdla::ILoadable::TensorDescListEntry``): ``pydla.ILoadable.TensorDescListEntry``.
    """

    TensorDescListEntry: ClassVar[type[TensorDesc]] = TensorDesc

    def __init__(self, data: bytes | bytearray | memoryview | mmap.mmap, source: str = "loadable") -> None:
        self.source = source
        self._data = data
        _refuse_other_kinds(data, source)
        self.elf = ElfReader(memoryview(data), what=source)
        self._read_notes()
        for name in (RECIPE, TENSORS, MEMORY, WEIGHTS):
            if not self.elf.has_section(name):
                raise DlaError(NvError.BadValue, f"{source}: section '{name}' is missing")
        self.recipe: Recipe = parse_recipe(loads(bytes(self.elf.section(RECIPE)), f"{source} {RECIPE}"),
                                           f"{source} {RECIPE}")
        self.memory = self._read_memory()
        self._tensors = self._read_tensors()
        self._ctrl = self._read_control_code()

    @classmethod
    def open(cls, source: str | Path | bytes | bytearray | memoryview, name: str | None = None) -> Loadable:
        """A loadable from a path (memory-mapped, never copied) or from the caller's buffer; ``name``
        is what its errors call it (default: the path, or "loadable")."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            return cls(source, name or "loadable")
        if not isinstance(source, (str, os.PathLike)):
            raise DlaError(NvError.BadParameter,
                           f"a loadable is a path, bytes or a memoryview, not {type(source).__name__}"
                           + (" (its .blob is the loadable)" if hasattr(source, "blob") else ""))
        path = Path(source)
        try:
            with path.open("rb") as f:
                if not f.read(1):  # mmap refuses an empty file: said as every reader says it
                    _refuse_other_kinds(b"", name or str(path))
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise file_error(path, e) from e
        return cls(mapped, name or str(path))

    # -- checks --------------------------------------------------------------------------------------

    def _read_notes(self) -> None:
        if not self.elf.has_section(NOTE_SECTION):
            raise DlaError(NvError.BadValue, f"{self.source}: no '{NOTE_SECTION}': not a pydla loadable")
        notes = {n.note_type: n.desc for n in self.elf.notes(NOTE_SECTION) if n.owner == NOTE_OWNER}
        for kind in (NT_FORMAT, NT_CONTRACTS, NT_DEVICE):
            if kind not in notes:
                raise DlaError(NvError.BadValue, f"{self.source}: note {kind} is missing from {NOTE_SECTION}")
        try:
            self.format_version = parse_semver(notes[NT_FORMAT].decode(errors="replace"))
        except DlaError as e:  # the message names the value: say where it is
            raise DlaError(e.code, f"{self.source}: {NOTE_SECTION} note {NT_FORMAT} (the loadable format): "
                                   f"{e.message}") from None
        if self.format_version[0] != FORMAT_VERSION[0]:
            mine = ".".join(map(str, FORMAT_VERSION))
            theirs = ".".join(map(str, self.format_version))
            newer = "the loadable" if self.format_version > FORMAT_VERSION else "this pydla"
            fix = ("upgrade pydla" if newer == "the loadable" else "recompile the model with this pydla")
            raise DlaError(NvError.VersionMismatch,
                           f"{self.source}: loadable format {theirs}, this pydla reads {mine}.x; "
                           f"{newer} is newer: {fix}")
        self._check_digests(notes)  # before the notes' contents are believed
        try:
            contracts = loads(notes[NT_CONTRACTS], f"{self.source} contract note")
            self.contracts = {name: ContractVersion(name, parse_semver(c["version"]),
                                                    int(c["layout_hash64"], 16))
                              for name, c in contracts.items()}
        except (ValueError, KeyError, TypeError, AttributeError, DlaError) as e:
            detail = e.message if isinstance(e, DlaError) else e  # a version that is not MAJOR.MINOR.PATCH
            raise DlaError(NvError.BadValue, f"{self.source}: contract note is malformed: {detail}") from e
        for name, api in CONTRACTS.items():
            if name not in self.contracts:
                raise DlaError(NvError.BadValue, f"{self.source}: contract note does not name '{name}'")
            check_compatible(ContractVersion.of(api.API), self.contracts[name], local_role="runtime",
                             peer_role="loadable")
        self.device = notes[NT_DEVICE].decode(errors="replace")

    def _check_digests(self, notes: dict[int, bytes]) -> None:
        """Every section and the other notes against the SHA-256 the writer recorded (note 4)."""
        where = f"{self.source}: {NOTE_SECTION} note {NT_DIGESTS} (section digests)"
        if NT_DIGESTS not in notes:
            raise DlaError(NvError.BadValue, f"{where} is missing: the loadable was written by an older "
                                             "pydla; compile the model again")
        digests = loads(notes[NT_DIGESTS], where)
        sections = digests.get("sections") if isinstance(digests, dict) else None
        if not isinstance(sections, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in sections.items()):
            raise DlaError(NvError.BadValue, f"{where} is malformed")
        if digests.get("notes") != _notes_digest({k: notes[k] for k in (NT_FORMAT, NT_CONTRACTS, NT_DEVICE)}):
            raise DlaError(NvError.BadValue, f"{self.source}: the notes of {NOTE_SECTION} (format, "
                                             "contracts, device) do not match their digest: the file is "
                                             "corrupt")
        present = [n for n in self.elf.section_names if n not in UNDIGESTED]
        unlisted = sorted(set(present) - set(sections))
        if unlisted:
            raise DlaError(NvError.BadValue, f"{self.source}: section '{unlisted[0]}' has no digest: it was "
                                             "added after the loadable was written")
        for name, want in sections.items():
            if name not in present:
                raise DlaError(NvError.BadValue, f"{self.source}: section '{name}' is missing (it has a "
                                                 "digest)")
            got = hashlib.sha256(self.elf.section(name)).hexdigest()
            if got != want:
                raise DlaError(NvError.BadValue,
                               f"{self.source}: section '{name}' is corrupt: its SHA-256 is {got[:16]}..., "
                               f"the loadable records {want[:16]}...")

    def _read_memory(self) -> dict[str, MemoryEntry]:
        raw = self._table(MEMORY, L.dla_memory_entry_t)
        weights = len(self.elf.section(WEIGHTS))
        out: dict[str, MemoryEntry] = {}
        kinds = {int(v): k for k, v in KINDS.items()}
        for i, e in enumerate(raw):
            name = e.name.decode(errors="replace")
            at = f"{self.source}: memory entry {i} ('{name}')"
            if e.kind not in kinds:
                raise DlaError(NvError.BadValue, f"{at}: kind {e.kind} is unknown")
            if e.alignment == 0 or e.alignment & (e.alignment - 1) or e.alignment > PAGE:
                raise DlaError(NvError.BadValue,
                               f"{at}: alignment {e.alignment} is not a power of two <= {PAGE}")
            outside = e.weights_offset + e.size > weights or e.weights_offset % e.alignment
            if kinds[e.kind] == "weight" and outside:
                raise DlaError(NvError.InvalidSize,
                               f"{at}: weights at offset {e.weights_offset} + {e.size} bytes are outside "
                               f"'{WEIGHTS}' ({weights} bytes) or not aligned to {e.alignment}")
            if name in out:
                raise DlaError(NvError.BadValue, f"{at}: defined twice")
            out[name] = MemoryEntry(name, kinds[e.kind], e.size, e.alignment, e.weights_offset)
        for bname, b in self.recipe.buffers.items():
            m = out.get(bname)
            if m is None:
                raise DlaError(NvError.BadValue,
                               f"{self.source}: recipe buffer '{bname}' has no memory entry")
            if m.kind != b.type or (b.size is not None and b.size != m.size):
                raise DlaError(NvError.CountMismatch,
                               f"{self.source}: recipe buffer '{bname}' ({b.type}, {b.size} bytes) and its "
                               f"memory entry ({m.kind}, {m.size} bytes) disagree")
        extra = sorted(set(out) - set(self.recipe.buffers))
        if extra:
            raise DlaError(NvError.BadValue, f"{self.source}: memory entries {extra} are not recipe buffers")
        return out

    def _read_tensors(self) -> list[TensorDesc]:
        names = list(self.memory)
        out: list[TensorDesc] = []
        for i, t in enumerate(self._table(TENSORS, L.dla_tensor_desc_t)):
            name = t.name.decode(errors="replace")
            at = f"{self.source}: tensor {i} ('{name}')"
            try:
                data_type = L.dla_data_type_e(t.data_type)
                layout = L.dla_tensor_layout_e(t.layout)
                direction = L.dla_tensor_direction_e(t.direction)
            except ValueError:
                raise DlaError(NvError.BadValue, f"{at}: data type {t.data_type}, layout {t.layout} or "
                                                 f"direction {t.direction} is unknown") from None
            if not 0 <= t.ndims <= 8 or not t.buffer < len(names):
                raise DlaError(NvError.BadValue, f"{at}: ndims {t.ndims} (0..8) or buffer {t.buffer} "
                                                 f"(of {len(names)}) out of range")
            dims = tuple(int(d) for d in t.dims[:t.ndims])
            strides = tuple(int(s) for s in t.strides[:t.ndims])
            el = ELEMENT_SIZE[data_type]
            span = tensor_span(dims, strides, el)
            buf = self.memory[names[t.buffer]]
            if t.size < span:
                raise DlaError(NvError.InvalidSize, f"{at}: size {t.size} is less than its dims {dims} "
                                                    f"and strides {strides} span ({span})")
            if t.offset + t.size > buf.size:
                raise DlaError(NvError.InvalidSize, f"{at}: offset {t.offset} + size {t.size} exceeds "
                                                    f"buffer '{buf.name}' ({buf.size} bytes)")
            out.append(TensorDesc(name, dims, data_type, layout, strides, int(t.size), int(t.offset),
                                  direction, int(t.bind_id), buf.name))
        for direction in L.dla_tensor_direction_e:
            ids = sorted(t.bind_id for t in out if t.direction == direction)
            if ids != list(range(len(ids))):
                raise DlaError(NvError.BadValue, f"{self.source}: {direction.name.lower()} bind ids {ids} "
                                                 f"must be 0..{len(ids) - 1}")
        return out

    def _read_control_code(self) -> dict[str, ControlCode]:
        out = {}
        for kernel in self.recipe.kernels.values():
            section = CTRL + kernel.ctrlcode
            if not self.elf.has_section(section):
                raise DlaError(NvError.BadValue, f"{self.source}: kernel '{kernel.name}' names control code "
                                                 f"'{kernel.ctrlcode}', but there is no section '{section}'")
            out[kernel.name] = ControlCode(self.elf.section(section), f"{self.source} {section}")
        return out

    def _table(self, section: str, cls: Any) -> list[Any]:
        data = self.elf.section(section)
        size = ctypes.sizeof(cls)
        if len(data) % size:
            raise DlaError(NvError.InvalidSize, f"{self.source}: '{section}' holds {len(data)} bytes, not a "
                                                f"multiple of the {size}-byte entry")
        return [cls.from_buffer_copy(data[i:i + size]) for i in range(0, len(data), size)]

    # -- access ----------------------------------------------------------------------------------------

    def tensors(self, direction: str | None = None) -> list[TensorDesc]:
        """Inputs and outputs in bind-id order; ``direction`` "input" or "output" selects."""
        chosen = [t for t in self._tensors if direction is None or t.direction.name == direction.upper()]
        return sorted(chosen, key=lambda t: (t.direction, t.bind_id))

    def control_code(self, kernel: str) -> ControlCode:
        if kernel not in self._ctrl:
            raise DlaError(NvError.BadParameter, f"{self.source}: no kernel '{kernel}'")
        return self._ctrl[kernel]

    def weights(self, name: str) -> memoryview:
        """The bytes of weight buffer ``name``: a view of the file, not a copy."""
        m = self.memory.get(name)
        if m is None or m.kind != "weight":
            raise DlaError(NvError.BadParameter, f"{self.source}: '{name}' is not a weight buffer")
        return self.elf.section(WEIGHTS)[m.weights_offset:m.weights_offset + m.size]

    def blocks_needed(self) -> set[str]:
        """The functional blocks the control code uses (to check against a device configuration)."""
        return blocks_needed(self._ctrl.values())

    def check_device(self, config: Any) -> None:
        """NvError NotSupported naming the block when the configuration lacks one this network uses,
        or the kernel instance that is no compute unit of it."""
        check_blocks(self._ctrl.values(), config, self.source)
        check_instances(self.recipe.kernels.values(), config, self.source)

    # -- what the runner asks of a recipe source (see also pydla.loadable.recipe_file) ----------------

    def created_size(self, name: str) -> int | None:
        """Bytes of a buffer the runner creates (internal, weights), or None for a bound one."""
        buf = self.recipe.buffers[name]
        return None if buf.type in EXTERNAL_TYPES else buf.size

    def initial_contents(self, name: str) -> bytes | memoryview | None:
        buf = self.recipe.buffers[name]
        return self.weights(name) if buf.type == "weight" else None

    def external_size(self, name: str) -> int | None:
        """Bytes the memory bound to input/output buffer ``name`` must have at least."""
        entry = self.memory.get(name)
        return entry.size if entry is not None else None

    def section_sizes(self) -> dict[str, int]:
        return {name: int(self.elf.section_info(name)["sh_size"]) for name in self.elf.section_names}



def _notes_digest(notes: dict[int, bytes]) -> str:
    h = hashlib.sha256()
    for kind in sorted(notes):
        h.update(kind.to_bytes(4, "little") + len(notes[kind]).to_bytes(8, "little") + notes[kind])
    return h.hexdigest()


def blocks_needed(controls: Iterable[ControlCode]) -> set[str]:
    """The functional blocks (dla_block_e names) the operations of ``controls`` use."""
    from pydla.deviceapi.generated.device_api import dla_block_e

    needed = set()
    for code in controls:
        for op_type in code.op_types():
            known = op_type in dla_block_e._value2member_map_
            needed.add(dla_block_e(op_type).name if known else f"unknown block {op_type}")
    return needed


def check_instances(kernels: Iterable[Any], config: Any, source: str) -> None:
    """NvError NotSupported naming a kernel whose instance is no compute unit of device ``config``
    (its ``compute_units``, as a port's device information reports them; nothing to check against
    when it reports none)."""
    units: tuple[str, ...] = tuple(getattr(config, "compute_units", ()))
    if not units:
        return
    for kernel in kernels:
        if not config.has_compute_unit(kernel.instance):
            raise DlaError(NvError.NotSupported,
                           f"{source}: kernel '{kernel.name}' runs on instance '{kernel.instance}', which "
                           f"is no compute unit of device config '{config.name}' (its units: "
                           f"{', '.join(units)})")


def check_blocks(controls: Iterable[ControlCode], config: Any, source: str) -> None:
    """NvError NotSupported naming the blocks ``controls`` use that device ``config`` lacks, or
    its SHAVE tiles when it has none (known from its compute units, when it reports them)."""
    controls = list(controls)
    units = tuple(getattr(config, "compute_units", ()))
    if units and any(c.is_shave for c in controls) and not config.has_compute_unit("shave"):
        raise DlaError(NvError.NotSupported,
                       f"{source}: runs SHAVE task lists, and device config '{config.name}' has no SHAVE "
                       "tiles: compile the model for this configuration")
    missing = sorted(b for b in blocks_needed(controls) if not config.has_block(b))
    if missing:
        raise DlaError(NvError.NotSupported,
                       f"{source}: needs the {', '.join(missing)} block(s), which device config "
                       f"'{config.name}' does not have")
