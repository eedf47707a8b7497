"""Writing an NVDLA Loadable: :class:`~pydla.loadable.nvdla.model.NvdlaLoadable` -> FlatBuffer bytes.

The flatc-generated builder functions write each table, driven by the same field list the verifier
walks (layout.py), so every field of the schema is written and in its own slot. Fields equal to their
default are left out, as FlatBuffers builders (NVIDIA's too) do. The loadable is checked first
(checks.py): what this writes, the reader and NVIDIA's runtime read. ``read_nvdla_loadable(
write_nvdla_loadable(lo)) == lo``.

Usage::

    blob = write_nvdla_loadable(lo)
    Path("model_fbuf").write_bytes(blob)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flatbuffers  # type: ignore[import-untyped]

from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.checks import check_loadable
from pydla.loadable.nvdla.generated import loadable_generated as _generated
from pydla.loadable.nvdla.layout import ROOT, TABLES, FieldLayout

G: Any = _generated  # flatc's code is untyped
_PREPEND = {1: "PrependUint8", 2: "PrependUint16", 8: "PrependUint64"}


def _camel(name: str) -> str:
    """flatc's name for a field's functions: ``sub_interface`` -> ``SubInterface``, ``stride_0`` ->
    ``Stride0``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _values(obj: Any) -> dict[str, Any]:
    """A model object's fields under the schema's names."""
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.compare}
    if isinstance(obj, M.TensorDescListEntry):
        strides = values.pop("strides")
        values.update((f"stride_{i}", s) for i, s in enumerate(strides))
    return values


def _offsets_vector(b: Any, table: str, f: FieldLayout, offsets: list[int]) -> int:
    getattr(G, f"{table}Start{_camel(f.name)}Vector")(b, len(offsets))
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return int(b.EndVector())


def _child(b: Any, table: str, f: FieldLayout, value: Any) -> int:
    """Write what a field points to (before its table starts, as FlatBuffers requires)."""
    if f.kind == "string":
        return int(b.CreateString(value))
    if f.kind == "vector":
        if f.size == 1:
            return int(b.CreateByteVector(bytes(value)))
        getattr(G, f"{table}Start{_camel(f.name)}Vector")(b, len(value))
        prepend = getattr(b, _PREPEND[f.size])
        for v in reversed(value):
            prepend(int(v))
        return int(b.EndVector())
    if f.kind == "strings":
        return _offsets_vector(b, table, f, [int(b.CreateString(s)) for s in value])
    return _offsets_vector(b, table, f, [_table(b, f.table, item) for item in value])


def _table(b: Any, name: str, obj: Any) -> int:
    values = _values(obj)
    fields = TABLES[name]
    children = {f.name: _child(b, name, f, values[f.name]) for f in fields
                if f.kind in ("string", "vector", "strings", "tables")}
    getattr(G, f"{name}Start")(b)
    for f in fields:
        add = getattr(G, f"{name}Add{_camel(f.name)}")
        value = values[f.name]
        if f.kind == "struct":  # a struct is written inline, right before its slot is set
            add(b, G.CreateVersion(b, value.major, value.minor, value.sub_minor))
        elif f.name in children:
            add(b, children[f.name])
        else:
            add(b, int(value))
    return int(getattr(G, f"{name}End")(b))


def write_nvdla_loadable(lo: M.NvdlaLoadable, *, check: bool = True) -> bytes:
    """The FlatBuffer of ``lo``; with ``check`` (the default) DlaError when it breaks a rule the
    reader checks. ``check=False`` writes it as it is (for tests of the reader's checks)."""
    if check:
        check_loadable(lo)
    size = 1024 + sum(len(blob.data) for blob in lo.blobs)
    b = flatbuffers.Builder(size)
    b.Finish(_table(b, ROOT, lo))
    return bytes(b.Output())
