"""Fuzzing the NVDLA Loadable reader: byte mutations and structured mutations of its tables.

Seeds: NVIDIA's regression loadables when the folder is there (``PYDLA_NVDLA_REGRESSION`` or
``../shared/nvdla-regression`` beside the repository), else loadables pydla's own writer builds
(:func:`sample_loadable`: a BDMA task and a CONV+SDP task with their firmware descriptors). A case is
one of:

- byte edits (pydla.testing.fuzz.mutate);
- a structural edit of the FlatBuffer: a root offset, a vtable entry, a table's vtable offset or a
  vector length (the places the verifier records) set to a boundary value, pointed back at the root
  (a cycle), or past the end;
- a semantic edit: one field of one table entry of the parsed loadable (an id, an index into another
  list, an offset, a size, an enum, a blob's length, a descriptor byte) set to a hostile value, and
  the loadable written again without its checks.

The check reads the input, decodes every DLA task's descriptors and describes it (``pydla info``);
when all of that is accepted, writing it again must read back the same (else ``SilentDifference``).

Usage::

    target = nvdla_loadable_target()
    report = run_campaign([target], cases=100_000, seed=1)
"""

from __future__ import annotations

import dataclasses
import enum
import os
import random
import struct
from pathlib import Path
from typing import Any

from pydla.errors import DlaError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.describe import describe
from pydla.loadable.nvdla.reader import parse, read_nvdla_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable
from pydla.testing.fuzz import INTERESTING_32, SilentDifference, Target, mutate

REGRESSION_ENV = "PYDLA_NVDLA_REGRESSION"


def regression_dir() -> Path | None:
    """NVIDIA's regression folder: $PYDLA_NVDLA_REGRESSION, else ../shared/nvdla-regression beside the
    repository; None when neither exists."""
    env = os.environ.get(REGRESSION_ENV)
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2].parent / "shared" / "nvdla-regression")
    return next((c for c in candidates if c.is_dir()), None)


def regression_loadables() -> dict[str, bytes]:
    """``{test name: loadable bytes}`` of the regression folder ({} without one)."""
    folder = regression_dir()
    if folder is None:
        return {}
    return {p.parent.name: p.read_bytes() for p in sorted(folder.glob("*/*_fbuf"))}


def sample_loadable() -> M.NvdlaLoadable:
    """A small valid loadable from pydla's own writer (see pydla.loadable.nvdla.samples)."""
    from pydla.loadable.nvdla.samples import conv_sdp_loadable

    return conv_sdp_loadable()


def check(data: bytes) -> None:
    """Read, decode and describe ``data``; accepted inputs must survive a write and read unchanged."""
    lo = read_nvdla_loadable(data)
    describe(lo)
    again = read_nvdla_loadable(write_nvdla_loadable(lo))
    if again != lo:
        raise SilentDifference("the loadable read back differently after writing it")


# -- structural mutations ------------------------------------------------------------------------


def _positions(data: bytes) -> list[tuple[int, int]]:
    """(position, width) of the FlatBuffer's structural words: the root offset, each table's vtable
    offset, each vtable's entries, each vector's length (found by walking the buffer as it is)."""
    out: list[tuple[int, int]] = [(0, 4)]
    size = len(data)

    def u32(p: int) -> int | None:
        return struct.unpack_from("<I", data, p)[0] if 0 <= p <= size - 4 else None

    root = u32(0)
    if root is None or root >= size - 4:
        return out
    out.append((root, 4))
    soff = struct.unpack_from("<i", data, root)[0]
    vt = root - soff
    if not 0 <= vt <= size - 4:
        return out
    vsize = struct.unpack_from("<H", data, vt)[0]
    out += [(vt + i, 2) for i in range(0, min(vsize, size - vt - 1), 2)]
    for slot in range((vsize - 4) // 2):
        entry = vt + 4 + 2 * slot
        if entry > size - 2:
            break
        field = struct.unpack_from("<H", data, entry)[0]
        target = u32(root + field) if field else None
        if target is None:
            continue
        vec = root + field + target
        n = u32(vec)
        if n is None:
            continue
        out.append((root + field, 4))
        out.append((vec, 4))
        for i in range(min(n, 64)):
            el = u32(vec + 4 + 4 * i)
            if el is not None:
                out.append((vec + 4 + 4 * i, 4))
                out.append((vec + 4 + 4 * i + el, 4))
    return [(p, w) for p, w in out if p + w <= size]


def _structural(rng: random.Random, data: bytes) -> bytes:
    spots = _positions(data)
    pos, width = rng.choice(spots)
    out = bytearray(data)
    choice = rng.random()
    if choice < 0.4:
        value = rng.choice(INTERESTING_32) & ((1 << (8 * width)) - 1)
    elif choice < 0.6:
        value = (-pos) & ((1 << (8 * width)) - 1)  # back to the start: a cycle through the root
    elif choice < 0.8:
        value = (len(data) - pos + rng.randint(-8, 8)) & ((1 << (8 * width)) - 1)  # at or past the end
    else:
        value = (int.from_bytes(data[pos:pos + width], "little") + rng.choice((-4, -2, -1, 1, 2, 4))) \
            & ((1 << (8 * width)) - 1)
    out[pos:pos + width] = value.to_bytes(width, "little")
    return bytes(out)


# -- semantic mutations --------------------------------------------------------------------------

_HOSTILE = (0, 1, 2, 3, 5, 6, 7, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x1_0000_0000, (1 << 64) - 1, 4096, 40)
_LISTS = ("task_list", "memory_list", "address_list", "event_list", "blobs", "tensor_desc_list", "reloc_list",
          "submit_list")


def _limit(value: Any, rng: random.Random) -> Any:
    """A hostile value of the same shape as ``value`` that the writer can still write."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (enum.IntEnum, enum.IntFlag)):
        members: list[Any] = list(type(value))
        return rng.choice(members) if rng.random() < 0.5 else rng.choice((3, 7, 37, 64, 255))
    if isinstance(value, int):
        return rng.choice(_HOSTILE) if value >= 0 else rng.choice((-2, -1, 0, 1, 0x7FFF))
    if isinstance(value, str):
        return rng.choice(("", "x", value + "_", "m0_NetworkDesc_i0"))
    if isinstance(value, bytes):
        return value[:rng.randrange(len(value) + 1)] if value and rng.random() < 0.5 else bytes(
            rng.randrange(256) for _ in range(min(len(value), 64) or 8)) + value[64:]
    if isinstance(value, tuple) and value and isinstance(value[0], int):
        items = list(value)
        items[rng.randrange(len(items))] = rng.choice(_HOSTILE[:12])
        return tuple(items)
    if isinstance(value, tuple):
        return value[:-1] if value and rng.random() < 0.5 else value + value[-1:]
    return value


def _semantic(rng: random.Random, data: bytes) -> bytes | None:
    try:
        lo = parse(data)
    except DlaError:
        return None
    names = [n for n in _LISTS if getattr(lo, n)]
    if not names:
        return None
    name = rng.choice(names)
    items = list(getattr(lo, name))
    i = rng.randrange(len(items))
    item = items[i]
    fields = [f.name for f in dataclasses.fields(item)]
    field = rng.choice(fields)
    value = _limit(getattr(item, field), rng)
    if name == "blobs" and field == "data" and rng.random() < 0.5:
        value = _descriptor_edit(rng, item.data)
    try:
        items[i] = dataclasses.replace(item, **{field: value})
        changes: dict[str, Any] = {name: tuple(items)}
        return write_nvdla_loadable(dataclasses.replace(lo, **changes), check=False)
    except (OverflowError, struct.error, TypeError, ValueError):
        return None  # the builder cannot write it at all: not an input a file can hold


def _descriptor_edit(rng: random.Random, data: bytes) -> bytes:
    """A firmware descriptor with one byte, halfword or word set to a boundary value."""
    if not data:
        return data
    out = bytearray(data)
    width = rng.choice((1, 2, 4))
    pos = rng.randrange(len(out))
    value = rng.choice((0, 1, 0x7F, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0xFFFF_FFFF, 6, 20, 21))
    out[pos:pos + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")[:len(out) - pos]
    return bytes(out)


def nvdla_mutate(rng: random.Random, data: bytes) -> bytes:
    """One case: a byte, structural or semantic mutation of ``data``."""
    choice = rng.random()
    if choice < 0.35:
        return mutate(rng, data)
    if choice < 0.65:
        return _structural(rng, data)
    edited = _semantic(rng, data)
    return edited if edited is not None else mutate(rng, data)


def nvdla_loadable_target() -> Target:
    """The fuzz target: seeds as the module says, mutations by :func:`nvdla_mutate`."""
    seeds = list(regression_loadables().values())
    if not seeds:
        seeds = [write_nvdla_loadable(sample_loadable())]
    return Target("nvdla-loadable", seeds, check, mutator=nvdla_mutate)
