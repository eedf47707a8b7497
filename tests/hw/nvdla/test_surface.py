"""The feature-data format both ways, against the offset formula element by element."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision, precision
from pydla.hw.nvdla.surface import Cube, gather, gather_batches, scatter, scatter_batches
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, by_name


def offset(cube: Cube, atom: int, n: int, c: int, y: int, x: int) -> int:
    bpe = cube.precision.bpe
    epa = atom // bpe
    return (cube.address + n * cube.batch_stride + (c // epa) * cube.surf_stride + y * cube.line_stride
            + x * atom + (c % epa) * bpe)


def element(mem: ByteMemory, prec: Precision, addr: int) -> int:
    raw = bytes(mem.read(addr, prec.bpe))
    if prec is Precision.INT8:
        return int.from_bytes(raw, "little", signed=True)
    return int.from_bytes(raw, "little", signed=prec is Precision.INT16)


CASES = [
    (NV_FULL, Precision.INT8, 5, 3, 40, 0),     # 2 surfaces, last one partial, strides with gaps
    (NV_FULL, Precision.INT16, 4, 2, 16, 0),    # exactly one surface
    (NV_FULL, Precision.FP16, 3, 3, 20, 0),
    (NV_SMALL, Precision.INT8, 6, 4, 19, 0),
    (NV_FULL, Precision.INT16, 2, 3, 17, 2),    # batches
]


@pytest.mark.parametrize(("tgt", "prec", "w", "h", "c", "pad"), CASES)
def test_gather_reads_every_element_at_its_offset(tgt, prec, w, h, c, pad) -> None:
    rng = np.random.default_rng(w * 100 + c)
    atom = tgt.atom
    ls = (w + 1) * atom
    surfs = -(-c // (atom // prec.bpe))
    ss = (h * ls) + 2 * atom
    batch = 2 if pad else 1
    bs = surfs * ss + atom if pad else 0
    cube = Cube(0x100, w, h, c, ls, ss, prec, batch=batch, batch_stride=bs)
    mem = ByteMemory(0x100 + batch * (surfs * ss + atom) + 64)
    mem.data[:] = rng.integers(0, 256, mem.size, dtype=np.uint8)
    got = gather_batches(mem, cube, tgt, "test", lanes=True)
    assert got.shape == (batch, surfs * (atom // prec.bpe), h, w)
    assert got.dtype == prec.dtype
    for n in range(batch):
        for ch in range(got.shape[1]):
            for y in range(h):
                for x in range(w):
                    want = element(mem, prec, offset(cube, atom, n, ch, y, x))
                    assert int(got[n, ch, y, x]) == want, (n, ch, y, x)
    trimmed = gather_batches(mem, cube, tgt, "test")
    assert np.array_equal(trimmed, got[:, :c])


@pytest.mark.parametrize(("tgt", "prec", "w", "h", "c", "pad"), CASES)
def test_scatter_writes_each_element_and_leaves_the_gaps(tgt, prec, w, h, c, pad) -> None:
    rng = np.random.default_rng(7 + c)
    atom = tgt.atom
    ls = (w + 2) * atom
    surfs = -(-c // (atom // prec.bpe))
    ss = (h * ls) + atom
    batch = 2 if pad else 1
    bs = surfs * ss + 3 * atom if pad else 0
    cube = Cube(0x40, w, h, c, ls, ss, prec, batch=batch, batch_stride=bs)
    mem = ByteMemory(0x40 + batch * (surfs * ss + 3 * atom) + 64)
    mem.data[:] = 0xAB
    info = np.iinfo(prec.dtype)
    data = rng.integers(info.min, info.max, (batch, c, h, w), endpoint=True).astype(prec.dtype)
    scatter_batches(mem, cube, tgt, data, "test")
    written = np.zeros(mem.size, dtype=bool)
    epa = atom // prec.bpe
    for n in range(batch):
        for ch in range(surfs * epa):
            for y in range(h):
                for x in range(w):
                    a = offset(cube, atom, n, ch, y, x)
                    want = int(data[n, ch, y, x]) if ch < c else 0  # unused lanes are written as 0
                    assert element(mem, prec, a) == want
                    written[a - mem.base:a - mem.base + prec.bpe] = True
    assert np.all(mem.data[~written] == 0xAB)
    assert np.array_equal(gather_batches(mem, cube, tgt, "test"), data)


def test_scatter_of_whole_surfaces_keeps_the_unused_lanes_given() -> None:
    cube = Cube(0, 2, 1, 3, 64, 64, Precision.INT8)
    mem = ByteMemory(64)
    data = np.arange(32 * 2, dtype=np.int8).reshape(32, 1, 2)
    scatter(mem, cube, NV_FULL, data, "t")
    assert np.array_equal(gather(mem, cube, NV_FULL, "t", lanes=True), data)


def test_huge_sparse_strides_read_line_by_line() -> None:
    class Counting(ByteMemory):
        biggest = 0

        def read(self, address: int, size: int):  # type: ignore[no-untyped-def]
            Counting.biggest = max(Counting.biggest, size)
            return super().read(address, size)

    cube = Cube(0, 1, 3, 8, 1 << 20, 1 << 20, Precision.INT8)
    mem = Counting(3 << 20)
    mem.data[(1 << 20):(1 << 20) + 8] = np.arange(8)
    got = gather(mem, cube, NV_SMALL, "t")
    assert got[:, 1, 0].tolist() == list(range(8))
    assert Counting.biggest == 8


@pytest.mark.parametrize(("field", "value", "words"), [
    ("width", 0, "width 0 is outside 1..8192"),
    ("height", 8193, "height 8193"),
    ("channel", -1, "channel -1"),
    ("address", 0x101, "address 0x101 is not a non-negative multiple of the 32-byte atom"),
    ("line_stride", 16, "line_stride 0x10"),
    ("line_stride", 64, "line_stride 64 is less than a line (4 atoms = 128 bytes)"),
    ("surf_stride", 256, "surf_stride 256 is less than a surface"),
    ("batch", 33, "batch 33"),
])
def test_bad_fields_are_named(field: str, value: int, words: str) -> None:
    good = dict(address=0, width=4, height=3, channel=64, line_stride=128, surf_stride=384,
                precision=Precision.INT8)
    good[field] = value
    cube = Cube(**good)  # type: ignore[arg-type]
    with pytest.raises(DlaError) as e:
        gather_batches(ByteMemory(4096), cube, NV_FULL, "PDP src")
    assert e.value.code == NvError.BadValue
    assert str(e.value).startswith("PDP src: ") and words in str(e.value)


def test_memory_outside_is_refused_with_the_field() -> None:
    cube = Cube(0, 4, 4, 32, 128, 512, Precision.INT8)
    with pytest.raises(DlaError) as e:
        gather(ByteMemory(500), cube, NV_FULL, "SDP src")
    assert e.value.code == NvError.InvalidAddress
    assert str(e.value).startswith("SDP src: read of 512 bytes at 0x0 is outside memory")
    with pytest.raises(DlaError) as e:
        scatter(ByteMemory(500), cube, NV_FULL, np.zeros((32, 4, 4), np.int8), "SDP dst")
    assert e.value.code == NvError.InvalidAddress and "SDP dst: write" in str(e.value)


def test_precision_the_target_lacks_and_bad_codes() -> None:
    cube = Cube(0, 1, 1, 4, 8, 8, Precision.INT16)
    with pytest.raises(DlaError) as e:
        gather(ByteMemory(64), cube, NV_SMALL, "PDP src")
    assert e.value.code == NvError.NotSupported and "INT16 is not supported by nv_small" in str(e.value)
    with pytest.raises(DlaError) as e:
        precision(3, "D_DATA_FORMAT.INPUT_DATA")
    assert "D_DATA_FORMAT.INPUT_DATA: precision code 3" in str(e.value)
    with pytest.raises(DlaError):
        by_name("nv_huge")
    assert by_name("nv_small").atom == 8 and NV_FULL.epa(Precision.FP16) == 16


def test_scatter_shape_mismatch_is_refused() -> None:
    cube = Cube(0, 2, 2, 8, 64, 128, Precision.INT8)
    with pytest.raises(DlaError) as e:
        scatter(ByteMemory(256), cube, NV_FULL, np.zeros((8, 2, 3), np.int8), "x")
    assert e.value.code == NvError.BadParameter
