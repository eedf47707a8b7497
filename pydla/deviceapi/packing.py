"""Generated records as ``struct`` formats: a whole message or trace event packed or unpacked in one call.

Building a generated ctypes record costs a Python call per field (``Message.new``, ``setattr``), and
decoding one a call per field read; on the hot paths (the headed mailbox's per-task messages, the
device's trace events) that is most of the cost. :func:`record_struct` derives a precompiled
``struct.Struct`` from the generated layout itself (every field's offset, size and type), so it
follows the contract and cannot drift from the ctypes class; nested records are flattened, their
fields named with dots (``header.common.size``). A layout this cannot express exactly (bit fields,
arrays other than byte strings) raises ValueError at import time, never packs wrongly.

Usage::

    st, names = record_struct(api.task_done_evt)      # names: ("header.common.size", ..., "context_id")
    st.pack_into(buf, offset, *values)                # the same bytes as bytes(api.task_done_evt(...))
    values = st.unpack_from(buf, offset)
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

_FLOATS = {4: "f", 8: "d"}
_UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}
_SIGNED = {1: "b", 2: "h", 4: "i", 8: "q"}


def _code(ctype: Any, size: int, where: str) -> str:
    kind = getattr(ctype, "_type_", None)
    if not isinstance(kind, str):
        raise ValueError(f"{where}: {ctype!r} is not a simple ctypes type")
    if kind in "fd":
        return _FLOATS[size]
    if kind == "?":
        return "?"
    table = _UNSIGNED if kind in "BHILQ" else _SIGNED if kind in "bhilq" else None
    if table is None or size not in table:
        raise ValueError(f"{where}: ctypes type code {kind!r} of {size} bytes has no struct code")
    return table[size]


def flat_fields(cls: type[ctypes.Structure], prefix: str = "", base: int = 0) -> list[tuple[str, int, str]]:
    """``(name, offset, struct code)`` of every leaf field of ``cls``, nested records flattened."""
    out: list[tuple[str, int, str]] = []
    for entry in cls._fields_:
        name, ctype = entry[0], entry[1]
        where = f"{cls.__name__}.{name}"
        if len(entry) > 2:
            raise ValueError(f"{where}: bit fields have no struct code")
        desc = getattr(cls, name)
        offset = base + desc.offset
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
            out += flat_fields(ctype, f"{prefix}{name}.", offset)
        elif isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
            if getattr(ctype, "_type_", None) is not ctypes.c_char:
                raise ValueError(f"{where}: arrays other than byte strings have no flat struct code")
            out.append((prefix + name, offset, f"{ctype._length_}s"))
        else:
            out.append((prefix + name, offset, _code(ctype, desc.size, where)))
    return out


def record_struct(cls: type[ctypes.Structure]) -> tuple[struct.Struct, tuple[str, ...]]:
    """A little-endian ``struct.Struct`` with the layout of ``cls`` (gaps as pad bytes, the same
    total size) and the flattened names of its values, in order."""
    fmt, at, names = ["<"], 0, []
    for name, offset, code in sorted(flat_fields(cls), key=lambda f: f[1]):
        if offset < at:
            raise ValueError(f"{cls.__name__}.{name}: overlaps the field before it (a union?)")
        if offset > at:
            fmt.append(f"{offset - at}x")
        fmt.append(code)
        at = offset + struct.calcsize("<" + code)
        names.append(name)
    size = ctypes.sizeof(cls)
    if size > at:
        fmt.append(f"{size - at}x")
    st = struct.Struct("".join(fmt))
    if st.size != size:
        raise ValueError(f"{cls.__name__}: the struct format {st.format!r} is {st.size} bytes, "
                         f"the record {size}")
    return st, tuple(names)
