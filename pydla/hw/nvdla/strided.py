"""Strided blocks of bytes: lines of ``line_bytes`` repeated along several strides, read and written.

Every NVDLA DMA moves such blocks (BDMA transfers, feature-data surfaces, RUBIK planes): lines at
``address + Σ index[k]·strides[k]``. A dense block (one whose span is not much larger than its
bytes) is moved with one memory access (a write reads the span, fills the lines and writes it
back); a sparse one line by line, so that a huge stride never makes the device copy memory it
does not use.

Usage::

    lines = read_block(mem, 0x1000, (2, 8), (2048, 256), 64)   # uint8 array (2, 8, 64)
    write_block(mem, 0x8000, (2048, 256), lines)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError
from pydla.hw.nvdla.memory import NvdlaMemory

U8 = npt.NDArray[np.uint8]
_SPARSE_SLACK = 64 * 1024


def span(counts: tuple[int, ...], strides: tuple[int, ...], line_bytes: int) -> int:
    """Bytes from the first byte of the block to its last, plus one."""
    return sum((n - 1) * s for n, s in zip(counts, strides, strict=True)) + line_bytes


def _dense(counts: tuple[int, ...], strides: tuple[int, ...], line_bytes: int) -> bool:
    need = line_bytes
    for n in counts:
        need *= n
    return all(s >= 0 for s in strides) and span(counts, strides, line_bytes) <= 2 * need + _SPARSE_SLACK


def _merged(counts: tuple[int, ...], strides: tuple[int, ...], line_bytes: int
            ) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Fold trailing dimensions whose lines follow each other into longer lines."""
    c, s, lb = list(counts), list(strides), line_bytes
    while c and (c[-1] == 1 or s[-1] == lb):
        lb *= c.pop()
        s.pop()
    return tuple(c), tuple(s), lb


def _offsets(counts: tuple[int, ...], strides: tuple[int, ...]) -> Iterator[int]:
    """The lines' offsets, lazily: a block of millions of lines that leaves the memory fails at its
    first line outside, not after the offsets of all of them were listed."""
    for idx in itertools.product(*(range(n) for n in counts)):
        yield sum(i * st for i, st in zip(idx, strides, strict=True))


def read_block(memory: NvdlaMemory, address: int, counts: tuple[int, ...], strides: tuple[int, ...],
               line_bytes: int) -> U8:
    """The lines of the block as a new uint8 array of shape ``counts + (line_bytes,)``."""
    shape = (*counts, line_bytes)
    mc, ms, mlb = _merged(counts, strides, line_bytes)
    if not mc:  # one contiguous run: the memory's copy is the result
        whole: U8 = memory.read(address, mlb).reshape(shape)
        return whole
    if _dense(counts, strides, line_bytes):
        buf = memory.read(address, span(counts, strides, line_bytes))
        view = np.lib.stride_tricks.as_strided(buf, shape=shape, strides=(*strides, 1), writeable=False)
        out: U8 = np.array(view, dtype=np.uint8)
        return out
    if all(st >= 0 for st in ms):  # the last line first: a block past the memory fails before any copy
        memory.read(address + span(mc, ms, mlb) - mlb, mlb)
    parts = [memory.read(address + off, mlb) for off in _offsets(mc, ms)]
    joined: U8 = np.concatenate(parts).reshape(shape)
    return joined


def write_block(memory: NvdlaMemory, address: int, strides: tuple[int, ...], lines: U8) -> None:
    """Write an array of shape ``counts + (line_bytes,)`` as :func:`read_block` reads it. Bytes
    between the lines keep their value."""
    counts, line_bytes = tuple(lines.shape[:-1]), int(lines.shape[-1])
    if len(strides) != len(counts):
        raise ValueError("write_block: one stride per dimension")
    mc, ms, mlb = _merged(counts, strides, line_bytes)
    if mc and _dense(counts, strides, line_bytes):
        # Read, fill, write back: one access each way instead of one per line. Where the span cannot
        # be read, the line-by-line path below writes what it can and reports the first bad line.
        try:
            buf = memory.read(address, span(counts, strides, line_bytes))
        except DlaError:
            pass
        else:
            view = np.lib.stride_tricks.as_strided(buf, shape=lines.shape, strides=(*strides, 1))
            view[...] = lines
            memory.write(address, buf)
            return
    flat = np.ascontiguousarray(lines, dtype=np.uint8).reshape(-1)
    for i, off in enumerate(_offsets(mc, ms)):
        memory.write(address + off, flat[i * mlb:(i + 1) * mlb])
