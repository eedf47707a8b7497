"""record_struct: the struct formats derived from the generated layouts pack the same bytes as ctypes."""

from __future__ import annotations

import ctypes
import random

import pytest

from pydla.deviceapi.generated import device_api, trace
from pydla.deviceapi.generated.headers import trace_entry_header_t, trace_ring_header_t
from pydla.deviceapi.packing import record_struct
from pydla.deviceapi.runtime import Record

RECORDS = ([*device_api.API.messages.values(), *trace.API.trace_events.values(), trace_entry_header_t,
            trace_ring_header_t])


def _set(record: ctypes.Structure, name: str, value: object) -> None:
    *path, leaf = name.split(".")
    for part in path:
        record = getattr(record, part)
    setattr(record, leaf, value)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_the_struct_packs_what_ctypes_packs(cls: type[Record]) -> None:
    st, names = record_struct(cls)
    assert st.size == ctypes.sizeof(cls)
    rng = random.Random(cls.__name__)
    for _ in range(20):
        values = []
        record = cls()
        for name, value in zip(names, st.unpack_from(bytes(rng.randbytes(st.size))), strict=True):
            if isinstance(value, bytes):  # a string field: ctypes reads it up to its first NUL
                value = value.replace(b"\0", b"a")
            _set(record, name, value)
            values.append(value)
        assert st.pack(*values) == bytes(record)
        assert st.unpack_from(bytes(record)) == tuple(values)


def test_a_layout_it_cannot_express_is_refused() -> None:
    class WithBits(ctypes.LittleEndianStructure):
        _pack_ = 1
        _fields_ = [("a", ctypes.c_uint32, 3)]

    class WithArray(ctypes.LittleEndianStructure):
        _pack_ = 1
        _fields_ = [("a", ctypes.c_uint32 * 2)]

    for cls in (WithBits, WithArray):
        with pytest.raises(ValueError):
            record_struct(cls)
