"""Checking an NVDLA Loadable's FlatBuffer before anything reads it (as flatc's C++ Verifier does).

The FlatBuffers Python runtime reads wherever an offset points: a bad offset gives an IndexError, a
struct.error or silently another field. :func:`verify` walks the buffer along the schema (layout.py)
and checks every offset, vtable, vector length and string before the generated code touches it:

- the root offset, each table's vtable (inside the buffer, its size even and >= 4) and its inline
  size; each field inside the buffer;
- each offset non-zero and inside the buffer; vectors with their elements inside the buffer; strings
  NUL-terminated;
- not alignment: NVIDIA's compiler wrote 8-byte fields at 4-byte offsets, and Python reads any;
- the schema's required fields (the Loadable's version);
- a bound on the work: the tables and strings reached are at most one per 4 bytes of buffer plus a
  little (a buffer that points a vector's entries at one big table again and again is refused before it
  costs more than its size). The schema has no recursive type, so no chain of offsets can loop.

A failure is a DlaError naming the field path and the value: ``task_list[2].address_list: vector of
40000 2-byte elements at 812 runs past the end of the 4248-byte buffer [InvalidSize]``.

Usage::

    verify(buf)          # raises DlaError, or returns None: the generated code may read buf
"""

from __future__ import annotations

import struct

from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla.layout import ROOT, SCALAR_SIZES, TABLES, FieldLayout

MAX_BUFFER = (1 << 31) - 1  # FlatBuffers' offsets are signed 32-bit
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


def _fail(code: NvError, where: str, message: str) -> DlaError:
    return DlaError(code, f"NVDLA Loadable: {where}: {message}")


class _Walk:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.size = len(buf)
        self.budget = self.size // 4 + 64

    def _read(self, st: struct.Struct, pos: int, where: str, what: str) -> int:
        if pos < 0 or pos + st.size > self.size:
            raise _fail(NvError.InvalidSize, where,
                        f"{what} at {pos} lies outside the {self.size}-byte buffer")
        value: int = st.unpack_from(self.buf, pos)[0]
        return value

    def _spend(self, where: str) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise _fail(NvError.InvalidSize, where,
                        f"more tables and strings than a {self.size}-byte buffer "
                        "holds: offsets point at the same data again and again")

    def _follow(self, pos: int, where: str) -> int:
        """The target of the 32-bit offset stored at ``pos``."""
        value = self._read(_U32, pos, where, "offset")
        if value == 0:
            raise _fail(NvError.BadValue, where, f"offset at {pos} is 0")
        target = pos + value
        if target >= self.size:
            raise _fail(NvError.InvalidSize, where,
                        f"offset {value} at {pos} points to {target}, past the end "
                        f"of the {self.size}-byte buffer")
        return target

    def _vector(self, pos: int, elem: int, where: str) -> tuple[int, int]:
        """(first element, count) of the vector at ``pos``, every element inside the buffer."""
        count = self._read(_U32, pos, where, "vector length")
        start = pos + 4
        if count * elem > self.size - start:
            raise _fail(NvError.InvalidSize, where,
                        f"vector of {count} {elem}-byte elements at {pos} runs past "
                        f"the end of the {self.size}-byte buffer")
        return start, count

    def string(self, pos: int, where: str) -> None:
        self._spend(where)
        start, count = self._vector(pos, 1, where)
        if start + count >= self.size or self.buf[start + count] != 0:
            raise _fail(NvError.BadValue, where, f"string of {count} bytes at {pos} has no terminating NUL")

    def table(self, pos: int, name: str, where: str) -> None:
        self._spend(where)
        vtable = pos - self._read(_I32, pos, where, f"table {name}")
        if vtable < 0 or vtable + 4 > self.size:
            raise _fail(NvError.InvalidSize, where,
                        f"table {name} at {pos}: vtable at {vtable} lies outside "
                        f"the {self.size}-byte buffer")
        vsize = self._read(_U16, vtable, where, "vtable size")
        tsize = self._read(_U16, vtable + 2, where, "table size")
        if vsize < 4 or vsize % 2 or vtable + vsize > self.size:
            raise _fail(NvError.InvalidSize, where,
                        f"table {name} at {pos}: vtable size {vsize} at {vtable}")
        if tsize < 4 or pos + tsize > self.size:
            raise _fail(NvError.InvalidSize, where,
                        f"table {name} at {pos}: size {tsize} runs past the end of "
                        f"the {self.size}-byte buffer")
        for slot, f in enumerate(TABLES[name]):
            entry = 4 + 2 * slot
            offset = _U16.unpack_from(self.buf, vtable + entry)[0] if entry < vsize else 0
            if offset == 0:
                if f.required:
                    raise _fail(NvError.BadValue, f"{where}.{f.name}", "required field is missing")
                continue
            self.field(pos, offset, f, f"{where}.{f.name}")

    def field(self, table: int, offset: int, f: FieldLayout, where: str) -> None:
        # Checked against the buffer, not the table's declared size, as flatc's Verifier does: NVIDIA's
        # compiler wrote tables whose declared size ends before their last inline struct.
        pos = table + offset
        if pos + f.inline_size > self.size:
            raise _fail(NvError.InvalidSize, where,
                        f"field at {pos} ({f.inline_size} bytes) runs past the end "
                        f"of the {self.size}-byte buffer")
        if f.kind in SCALAR_SIZES or f.kind == "struct":
            return
        target = self._follow(pos, where)
        if f.kind == "string":
            self.string(target, where)
        elif f.kind == "vector":
            self._vector(target, f.size, where)
        else:
            start, count = self._vector(target, 4, where)
            for i in range(count):
                element = self._follow(start + 4 * i, f"{where}[{i}]")
                if f.kind == "strings":
                    self.string(element, f"{where}[{i}]")
                else:
                    self.table(element, f.table, f"{where}[{i}]")


def verify(buf: bytes) -> None:
    """DlaError unless ``buf`` is a well-formed ``nvdla.loadable`` FlatBuffer (see the module)."""
    if len(buf) < 8:
        raise _fail(NvError.InvalidSize, "buffer", f"{len(buf)} bytes is too short for a FlatBuffer")
    if len(buf) > MAX_BUFFER:
        raise _fail(NvError.InvalidSize, "buffer", f"{len(buf)} bytes is more than a FlatBuffer can address")
    walk = _Walk(buf)
    walk.table(walk._follow(0, "root"), ROOT, "root")
