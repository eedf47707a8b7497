"""What the block tests need from NVIDIA's KMD regression tests, read without pydla's loadable reader.

A small stand-in, to be replaced by pydla.loadable.nvdla once it lands: it reads an NVDLA Loadable
(FlatBuffers, schema nvdla.loadable 0.7) with the ``flatbuffers`` runtime, places every memory list
entry in one :class:`ByteMemory` (4 KiB apart, SET contents copied in), decodes the 2018 firmware
descriptors (``dla_interface`` before 0.12: 28-byte data cubes) of the single DLA task, and writes
the output image as NVIDIA's runtime application did (``.dimg``: the 2018 pixel-format numbers and
its fixed x32 / x16 gather). Facts: docs/development/nvdla/overview.md and firmware.md.

The folder is ``$PYDLA_NVDLA_REGRESSION`` or ``../shared/nvdla-regression`` from the repository root.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from pydla.hw.nvdla.memory import ByteMemory

ROOT = Path(__file__).resolve().parents[3]


def folder() -> Path | None:
    env = os.environ.get("PYDLA_NVDLA_REGRESSION")
    if env:
        return Path(env) if Path(env).is_dir() else None
    # ../shared from the repository root (a git worktree one level further down also finds it)
    for up in (ROOT.parent, ROOT.parent.parent):
        path = up / "shared" / "nvdla-regression"
        if path.is_dir():
            return path
    return None


def case_dir(name: str) -> Path:
    """The folder of one regression test, or skip the calling test with the reason."""
    base = folder()
    if base is None:
        pytest.skip("NVIDIA's regression tests are not here (set PYDLA_NVDLA_REGRESSION or put them in "
                    "../shared/nvdla-regression)")
    path = base / name
    if not (path / f"{name}_fbuf").is_file():
        pytest.skip(f"{path} has no {name}_fbuf")
    pytest.importorskip("flatbuffers", reason="reading NVDLA Loadables needs the flatbuffers package")
    return path


# --- FlatBuffers, by field index (vtable slot 4 + 2*i) -------------------------------------------

class _T:
    def __init__(self, buf: bytearray, pos: int) -> None:
        from flatbuffers.table import Table
        self.t = Table(buf, pos)

    def _o(self, i: int) -> int:
        return int(self.t.Offset(4 + 2 * i))

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        o = self._o(i)
        if not o:
            return default
        return int(struct.unpack_from("<" + fmt, self.t.Bytes, self.t.Pos + o)[0])

    def string(self, i: int) -> str:
        o = self._o(i)
        return self.t.String(self.t.Pos + o).decode() if o else ""

    def tables(self, i: int) -> list[_T]:
        o = self._o(i)
        if not o:
            return []
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        return [_T(self.t.Bytes, self.t.Indirect(start + 4 * k)) for k in range(n)]

    def strings(self, i: int) -> list[str]:
        o = self._o(i)
        if not o:
            return []
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        return [self.t.String(start + 4 * k).decode() for k in range(n)]

    def vector(self, i: int, fmt: str) -> list[int]:
        o = self._o(i)
        if not o:
            return []
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        size = struct.calcsize(fmt)
        return [int(struct.unpack_from("<" + fmt, self.t.Bytes, start + size * k)[0]) for k in range(n)]

    def data(self, i: int) -> bytes:
        o = self._o(i)
        if not o:
            return b""
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        return bytes(self.t.Bytes[start:start + n])


@dataclass(frozen=True)
class TensorDesc:
    data_type: int  # 1 FLOAT, 2 HALF, 3 INT16, 4 INT8
    size: int
    c: int
    h: int
    w: int
    line_stride: int
    surf_stride: int


@dataclass(frozen=True)
class Cube2018:
    """``dla_data_cube`` of firmware interface 0.10/0.11 (28 bytes)."""

    type: int  # 0 MC, 1 CV, 2 HW
    address: int  # index into the task's address list
    size: int
    width: int
    height: int
    channel: int
    line_stride: int
    surf_stride: int
    plane_stride: int

    @staticmethod
    def at(raw: bytes, off: int) -> Cube2018:
        t, a, size, w, h, c, _, ls, ss, ps = struct.unpack_from("<HhIHHHHIII", raw, off)
        return Cube2018(t, a, size, w, h, c, ls, ss, ps)


CUBE = 28
OP_SLOT = 116
SURFACE_SLOT = 644


class Regression:
    """One regression test: its memory laid out as NVIDIA's runtime would bind it, its descriptors."""

    def __init__(self, name: str) -> None:
        self.dir = case_dir(name)
        self.name = name
        raw = bytearray((self.dir / f"{name}_fbuf").read_bytes())
        from flatbuffers import encode, packer
        root = _T(raw, encode.Get(packer.uoffset, raw, 0))
        blobs = {b.string(0): b.data(5) for b in root.tables(5)}
        self.mem_base: dict[int, int] = {}
        self.mem_size: dict[int, int] = {}
        self.output_mem = -1
        top = 0x10000
        entries = root.tables(2)
        for m in entries:
            mid, size = m.scalar(0, "H"), m.scalar(3, "Q")
            self.mem_base[mid], self.mem_size[mid] = top, size
            top += (size + 0xFFF) & ~0xFFF
            if m.scalar(2, "H") & 8:  # OUTPUT
                self.output_mem = mid
        self.memory = ByteMemory(top)
        for m in entries:
            if not m.scalar(2, "H") & 2:  # SET: contents to copy in
                continue
            for content, off in zip(m.strings(5), m.vector(6, "Q"), strict=True):
                data = np.frombuffer(blobs[content], dtype=np.uint8)
                self.memory.write(self.mem_base[m.scalar(0, "H")] + off, data)
        self.address_entries = {a.scalar(0, "H"): (a.scalar(1, "H"), a.scalar(2, "Q"))
                                for a in root.tables(3)}
        task = root.tables(1)[0]
        self.task_addresses = task.vector(3, "H")
        t = root.tables(6)[0]
        self.tensor = TensorDesc(t.scalar(6, "B"), t.scalar(3, "Q"), t.scalar(11, "i"), t.scalar(12, "i"),
                                 t.scalar(13, "i"), t.scalar(15, "I"), t.scalar(16, "I"))
        net = self.blob(0, 40)
        self.op_index, self.surface_index, self.dep_index, self.lut_index = struct.unpack_from("<hhhh", net)
        self.num_operations = struct.unpack_from("<H", net, 30)[0]

    def address(self, index: int) -> int:
        """DMA address of the task's address-list entry ``index``: memory base + entry offset."""
        mem_id, offset = self.address_entries[self.task_addresses[index]]
        return self.mem_base[mem_id] + offset

    def blob(self, index: int, size: int, offset: int = 0) -> bytes:
        """Descriptor bytes as the firmware reads them: the entry's memory, without the entry offset."""
        mem_id, _ = self.address_entries[self.task_addresses[index]]
        return bytes(self.memory.read(self.mem_base[mem_id] + offset, size))

    def operation(self, i: int) -> bytes:
        return self.blob(self.op_index, OP_SLOT, i * OP_SLOT)

    def surface(self, i: int) -> bytes:
        return self.blob(self.surface_index, SURFACE_SLOT, i * SURFACE_SLOT)

    def output(self) -> bytes:
        return bytes(self.memory.read(self.mem_base[self.output_mem], self.mem_size[self.output_mem]))

    def golden(self) -> bytes:
        return (self.dir / "o_000000.dimg").read_bytes()


def dimg(tensor: TensorDesc, buffer: bytes) -> bytes:
    """The ``.dimg`` NVIDIA's 2018 runtime application writes for an INT8 or INT16 feature output."""
    fmt, x, bpe = {4: (40, 32, 1), 3: (41, 16, 2)}[tensor.data_type]
    head = struct.pack("<4s8I", b"DIMG", 0, fmt, tensor.w, tensor.h, tensor.c, tensor.line_stride,
                       tensor.surf_stride, tensor.size)
    out = bytearray()
    for c in range(tensor.c):
        for y in range(tensor.h):
            for xx in range(tensor.w):
                off = (c // x) * tensor.surf_stride + y * tensor.line_stride + xx * x * bpe + (c % x) * bpe
                out += buffer[off:off + bpe]
    return head + bytes(out)
