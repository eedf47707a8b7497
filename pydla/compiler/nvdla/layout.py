"""NVDLA's in-memory layouts as the compiler writes them (docs/development/nvdla/formats.md): INT8
feature surfaces (``epa = atom`` channels per atom, surfaces of ``H`` lines of ``W`` atoms) and the
direct convolution's weights (kernel groups of atomic K kernels, channel groups of atomic C channels,
then row, column, kernel, channel).

Usage::

    facts = Facts.of(cfg.nvdla)
    raw = pack_feature(x, facts.atom)                  # (C, H, W) int8 -> bytes
    weights = pack_weights(w, facts.atomic_k, facts.atomic_c)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

WEIGHT_ALIGN = 128  # the firmware's debug check: weight_data.size % 128 == 0


@dataclass(frozen=True)
class Facts:
    """What the compiler needs of an NVDLA hardware configuration."""

    name: str
    atom: int  # bytes of a memory atom = INT8 channels per atom
    atomic_c: int
    atomic_k: int
    cbuf_banks: int
    cbuf_bank_bytes: int
    cbuf_entry_bytes: int
    sdp_y: bool

    @classmethod
    def of(cls, nvdla: Any) -> Facts:
        return cls(
            nvdla.hw,
            nvdla.atom_bytes,
            nvdla.mac_atomic_c,
            nvdla.mac_atomic_k,
            nvdla.cbuf_banks,
            nvdla.cbuf_bank_width * nvdla.cbuf_bank_depth,
            nvdla.cbuf_bank_width,
            nvdla.sdp_y,
        )


def surfaces(channels: int, atom: int) -> int:
    return -(-channels // atom)


def cube_strides(c: int, h: int, w: int, atom: int) -> tuple[int, int, int]:
    """(line stride, surface stride, size in bytes) of a packed INT8 cube."""
    line = w * atom
    surf = h * line
    return line, surf, surfaces(c, atom) * surf


def feature_offsets(c: int, h: int, w: int, atom: int) -> npt.NDArray[np.int64]:
    """The byte offset of each element (c, y, x) of a packed INT8 cube."""
    line, surf, _ = cube_strides(c, h, w, atom)
    cc = np.arange(c, dtype=np.int64)[:, None, None]
    yy = np.arange(h, dtype=np.int64)[None, :, None]
    xx = np.arange(w, dtype=np.int64)[None, None, :]
    return (cc // atom) * surf + yy * line + xx * atom + (cc % atom)


def pack_feature(x: npt.NDArray[Any], atom: int) -> bytes:
    """A (C, H, W) int8 array as a packed feature surface (unused lanes 0)."""
    c, h, w = x.shape
    out = np.zeros(cube_strides(c, h, w, atom)[2], np.int8)
    out[feature_offsets(c, h, w, atom)] = x.astype(np.int8)
    return out.tobytes()


def unpack_feature(
    raw: bytes | npt.NDArray[Any], shape: tuple[int, int, int], atom: int
) -> npt.NDArray[np.int8]:
    """The (C, H, W) int8 array a packed feature surface holds."""
    data = np.frombuffer(bytes(raw), np.int8)
    out: npt.NDArray[np.int8] = data[feature_offsets(*shape, atom)].copy()
    return out


def pack_weights(w: npt.NDArray[Any], atomic_k: int, atomic_c: int) -> bytes:
    """K x C x R x S int8 kernels in the direct convolution's order, padded to 128 bytes."""
    k_total, c_total, rows, cols = w.shape
    parts = []
    for k0 in range(0, k_total, atomic_k):
        group = w[k0 : k0 + atomic_k]
        for c0 in range(0, c_total, atomic_c):
            block = group[:, c0 : c0 + atomic_c]  # (k, c, r, s) -> r, s, k, c
            parts.append(np.ascontiguousarray(block.transpose(2, 3, 0, 1)).astype(np.int8).tobytes())
    raw = b"".join(parts)
    assert len(raw) == k_total * c_total * rows * cols
    return raw + bytes(-len(raw) % WEIGHT_ALIGN)


def unpack_weights(
    raw: bytes, shape: tuple[int, int, int, int], atomic_k: int, atomic_c: int
) -> npt.NDArray[np.int8]:
    """The inverse of :func:`pack_weights` (for tests)."""
    k_total, c_total, rows, cols = shape
    data = np.frombuffer(raw, np.int8)
    out = np.zeros(shape, np.int8)
    at = 0
    for k0 in range(0, k_total, atomic_k):
        kn = min(atomic_k, k_total - k0)
        for c0 in range(0, c_total, atomic_c):
            cn = min(atomic_c, c_total - c0)
            n = kn * cn * rows * cols
            out[k0 : k0 + kn, c0 : c0 + cn] = (
                data[at : at + n].reshape(rows, cols, kn, cn).transpose(2, 3, 0, 1)
            )
            at += n
    return out
