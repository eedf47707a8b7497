"""What every block function uses: its error, register values as numbers, and the device memory one
context sees (:class:`ContextMemory`, every view translated and bounds-checked by the IOMMU).

Usage::

    mem = ContextMemory(iommu, ctx, precisions)
    x = mem.cube(regs.d_src, mem.dtype(regs.d_precision, "PDP"), "PDP source")
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.memory import Iommu

Array = npt.NDArray[Any]

F32 = np.dtype(np.float32)
DTYPES: dict[int, np.dtype[Any]] = {
    int(R.dla_precision_e.FP32): np.dtype(np.float32),
    int(R.dla_precision_e.FP16): np.dtype(np.float16),
}
MAX_DIM = 1 << 16


class HwError(Exception):
    """An operation the block refuses: the code goes to ``s_error``, the detail to the device log."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def f32(bits: int) -> float:
    """A register holding IEEE-754 single-precision bits, as a float."""
    value: float = struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    return value


def f32_bits(value: float) -> int:
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return bits


def addr(lo: int, hi: int) -> int:
    return (hi << 32) | lo


class ContextMemory:
    """Device memory as one context sees it: every view is translated and bounds-checked."""

    def __init__(self, iommu: Iommu, ctx: int, precisions: tuple[int, ...]) -> None:
        self.iommu = iommu
        self.ctx = ctx
        self.precisions = precisions

    def dtype(self, precision: int, what: str) -> np.dtype[Any]:
        if precision not in DTYPES:
            raise HwError(R.dla_hw_error_e.BAD_CONFIG, f"{what}: precision {precision} is unknown")
        if precision not in self.precisions:
            raise HwError(R.dla_hw_error_e.UNSUPPORTED,
                          f"{what}: precision {R.dla_precision_e(precision).name} is not supported here")
        return DTYPES[precision]

    def cube(self, c: R.cube_regs_t, dtype: np.dtype[Any], what: str) -> Array:
        """The (C, H, W) view a ``cube_regs_t`` describes."""
        dims = (c.channels, c.height, c.width)
        if not all(0 < d <= MAX_DIM for d in dims):
            raise HwError(R.dla_hw_error_e.BAD_CONFIG, f"{what}: dimensions C,H,W = {dims} out of range")
        return self.strided(addr(c.addr_lo, c.addr_hi), dims,
                            (c.surf_stride, c.line_stride, dtype.itemsize), dtype)

    def strided(self, address: int, shape: tuple[int, ...], strides: tuple[int, ...],
                dtype: np.dtype[Any]) -> Array:
        size = dtype.itemsize
        if address % size or any(s % size for s in strides):
            # Data paths move whole elements: an unaligned address or stride is a bad configuration.
            raise HwError(R.dla_hw_error_e.BAD_CONFIG,
                          f"address {address:#x} or strides {strides} not aligned to {size}-byte elements")
        return self.iommu.view(self.ctx, address, shape, strides, dtype)

    def vector(self, address: int, n: int, dtype: np.dtype[Any]) -> Array:
        return self.strided(address, (n,), (dtype.itemsize,), dtype)


def bad_config(condition: bool, detail: str) -> None:
    """Raise HwError BAD_CONFIG with ``detail`` when ``condition`` holds."""
    if condition:
        raise HwError(R.dla_hw_error_e.BAD_CONFIG, detail)
