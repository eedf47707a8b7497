"""Where each field of the ``nvdla.loadable`` tables lies: what the verifier walks.

A FlatBuffers table finds its field number ``i`` through slot ``i`` of its vtable; the number is the
field's position in the schema. This is that schema (schema/loadable.fbs) as data: per table, its
fields in order with their kind. A test checks it against the flatc-generated code (which slot each
generated ``...Add<Field>`` writes, and with which width), so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

SCALAR_SIZES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i16": 2, "i32": 4}


@dataclass(frozen=True)
class FieldLayout:
    """One field: ``kind`` is a scalar name (SCALAR_SIZES), ``struct`` (inline, ``size`` bytes,
    ``align``), ``string``, ``vector`` (of ``size``-byte scalars), ``strings`` (a vector of strings) or
    ``tables`` (a vector of ``table``)."""

    name: str
    kind: str
    size: int = 0
    align: int = 1
    table: str = ""
    required: bool = False

    @property
    def inline_size(self) -> int:
        """Bytes the field takes inside its table."""
        if self.kind in SCALAR_SIZES:
            return SCALAR_SIZES[self.kind]
        return self.size if self.kind == "struct" else 4  # everything else is a 32-bit offset


def _s(name: str, kind: str) -> FieldLayout:
    return FieldLayout(name, kind)


def _vec(name: str, elem: str) -> FieldLayout:
    return FieldLayout(name, "vector", size=SCALAR_SIZES[elem])


def _tables(name: str, table: str) -> FieldLayout:
    return FieldLayout(name, "tables", table=table)


VERSION = FieldLayout("version", "struct", size=3, align=1)

TABLES: dict[str, tuple[FieldLayout, ...]] = {
    "Blob": (_s("name", "string"), _s("size", "u64"), _s("interface", "u32"), _s("sub_interface", "u32"),
             VERSION, _vec("data", "u8")),
    "MemoryListEntry": (_s("id", "u16"), _s("domain", "u8"), _s("flags", "u16"), _s("size", "u64"),
                        _s("alignment", "u32"), _s("contents", "strings"), _vec("offsets", "u64"),
                        _s("bind_id", "u16"), _s("tensor_desc_id", "u16")),
    "EventListEntry": (_s("id", "u16"), _s("type", "u8"), _s("target", "u16"), _s("val", "u32"),
                       _s("op", "u8")),
    "TaskListEntry": (_s("id", "u16"), _s("interface", "u32"), _s("instance", "i16"),
                      _vec("address_list", "u16"), _vec("pre_actions", "u16"), _vec("post_actions", "u16")),
    "AddressListEntry": (_s("id", "u16"), _s("mem_id", "u16"), _s("offset", "u64"), _s("size", "u64")),
    "SubmitListEntry": (_s("id", "u16"), _vec("task_id", "u16")),
    "TensorDescListEntry": (
        _s("name", "string"), _s("id", "u16"), _s("mem_id", "u16"), _s("size", "u64"), _s("offset", "u64"),
        _s("data_format", "u8"), _s("data_type", "u8"), _s("data_category", "u8"), _s("pixel_format", "u8"),
        _s("pixel_mapping", "u8"), _s("n", "i32"), _s("c", "i32"), _s("h", "i32"), _s("w", "i32"),
        *(_s(f"stride_{i}", "u32") for i in range(8))),
    "RelocListEntry": (_s("address_id", "u16"), _s("write_id", "u16"), _s("offset", "u64"),
                       _s("interface", "u32"), _s("sub_interface", "u32"), _s("reloc_type", "u8")),
    "Loadable": (
        FieldLayout("version", "struct", size=3, align=1, required=True),
        _tables("task_list", "TaskListEntry"), _tables("memory_list", "MemoryListEntry"),
        _tables("address_list", "AddressListEntry"), _tables("event_list", "EventListEntry"),
        _tables("blobs", "Blob"), _tables("tensor_desc_list", "TensorDescListEntry"),
        _tables("reloc_list", "RelocListEntry"), _tables("submit_list", "SubmitListEntry")),
}
ROOT = "Loadable"
