"""NVDLA's element types and how one element lies in memory.

The numeric values are the register encoding every block uses (``IN_PRECISION``, ``INPUT_DATA``,
``PROC_PRECISION`` ...): INT8 0, INT16 1, FP16 2. Elements are little-endian two's complement
integers; FP16 elements are IEEE half bit patterns, kept as raw ``uint16`` because NVDLA computes
with its own float rules (pydla.hw.nvdla.nvfloat), not with numpy's.

Usage::

    p = Precision(1)            # INT16
    p.bpe, p.dtype              # 2, dtype('int16')
"""

from __future__ import annotations

import enum

import numpy as np

from pydla.errors import DlaError, NvError


class Precision(enum.IntEnum):
    """An element type, with NVDLA's register encoding."""

    INT8 = 0
    INT16 = 1
    FP16 = 2

    @property
    def bpe(self) -> int:
        """Bytes per element."""
        return 1 if self is Precision.INT8 else 2

    @property
    def dtype(self) -> np.dtype[np.int8 | np.int16 | np.uint16]:
        """The numpy dtype of one element in memory: int8, little-endian int16, or the raw FP16 bits
        as little-endian uint16."""
        if self is Precision.INT8:
            return np.dtype(np.int8)
        if self is Precision.INT16:
            return np.dtype("<i2")
        return np.dtype("<u2")

    @property
    def is_int(self) -> bool:
        return self is not Precision.FP16


def precision(value: int, field: str) -> Precision:
    """The precision a register field encodes, or a DlaError naming the field (3 is reserved)."""
    try:
        return Precision(value)
    except ValueError:
        raise DlaError(NvError.BadValue, f"{field}: precision code {value} is not INT8 (0), INT16 (1) "
                                         "or FP16 (2)") from None
