"""The memory the NVDLA blocks read and write: an interface, and a plain implementation for tests.

The blocks reach memory only through :class:`NvdlaMemory`, so the device can hand them its
IOMMU-translated, bounds-checked memory, and tests a :class:`ByteMemory`. An implementation must
refuse (with a DlaError naming the address and size) any access it cannot serve in whole; the
blocks add which of their fields the address came from.

Usage::

    mem = ByteMemory(4096, base=0x10000)
    mem.write(0x10000, np.arange(4, dtype=np.uint8))
    mem.read(0x10000, 4)        # array([0, 1, 2, 3], dtype=uint8)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError


class NvdlaMemory(Protocol):
    """Byte-addressed memory as a block's DMA sees it."""

    def read(self, address: int, size: int) -> npt.NDArray[np.uint8]:
        """``size`` bytes from ``address`` as a new uint8 array (the caller may modify it)."""
        ...

    def write(self, address: int, data: npt.NDArray[np.uint8]) -> None:
        """Store the bytes of ``data`` (a 1-D uint8 array) at ``address``."""
        ...


class ByteMemory:
    """A bytearray-backed memory of ``size`` bytes at device addresses ``base`` … ``base+size-1``."""

    def __init__(self, size: int, base: int = 0) -> None:
        if size < 0 or base < 0:
            raise DlaError(NvError.BadParameter, f"ByteMemory: size {size} and base {base} must be >= 0")
        self.base = base
        self.size = size
        self.data: npt.NDArray[np.uint8] = np.zeros(size, dtype=np.uint8)

    def _offset(self, address: int, size: int, what: str) -> int:
        off = address - self.base
        if size < 0 or off < 0 or off + size > self.size:
            raise DlaError(NvError.InvalidAddress,
                           f"{what} of {size} bytes at {address:#x} is outside memory "
                           f"{self.base:#x}..{self.base + self.size:#x}")
        return off

    def read(self, address: int, size: int) -> npt.NDArray[np.uint8]:
        off = self._offset(address, size, "read")
        out: npt.NDArray[np.uint8] = self.data[off:off + size].copy()
        return out

    def write(self, address: int, data: npt.NDArray[np.uint8]) -> None:
        flat = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
        off = self._offset(address, flat.size, "write")
        self.data[off:off + flat.size] = flat


@contextmanager
def access(what: str) -> Iterator[None]:
    """Prefix a memory error with the field it came from: ``with access("PDP src"): mem.read(...)``."""
    try:
        yield
    except DlaError as e:
        raise DlaError(e.code, f"{what}: {e.message}") from e


RAM_MC = 1  # every block's *_RAM_TYPE field: 1 = main memory (MCIF), 0 = the secondary SRAM (CVIF)
RAM_CV = 0


def select(memory: NvdlaMemory, sram: NvdlaMemory | None, ram_type: int, what: str) -> NvdlaMemory:
    """The memory a ``*_RAM_TYPE`` field picks: main memory (1) or the secondary SRAM (0)."""
    if ram_type == RAM_MC:
        return memory
    if ram_type == RAM_CV:
        if sram is None:
            raise DlaError(NvError.NotSupported, f"{what}: RAM type 0 (SRAM, CVIF) but this device has no "
                                                 "secondary memory")
        return sram
    raise DlaError(NvError.BadValue, f"{what}: RAM type {ram_type} is neither 0 (SRAM) nor 1 (MC)")
