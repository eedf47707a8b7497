"""The KMD's buffer object: what a GEM object is to a Linux driver.

A buffer object is made by the driver's port (:meth:`pydla.kmd.port.KmdPortability.dla_alloc`) and
freed through it; the driver keeps it in a context, maps it there through the port, and hands the
scheduler its memory (:class:`pydla.firmware.interface.CpuAddress`). It carries what the driver and
the scheduler use: a handle (named in messages), its size, the host's mapping of its bytes
(``array``), and ``memory``, the port's own object behind it, which only the port that made it
looks into (the device's allocation, for the in-process port over the virtual device).

Usage::

    bo = port.dla_alloc(4096)            # a BufferObject
    bo.array[:4] = [1, 2, 3, 4]          # the host's mapping
    iova = port.dla_map(ctx, bo)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

EMPTY = np.zeros(0, dtype=np.uint8)  # the mapping of a freed buffer object: nothing left to reach


class BufferObject:
    """A buffer object of the driver: ``handle``, ``size`` bytes, the host's mapping ``array`` (a
    numpy uint8 array; empty once the port freed it) and the port's ``memory`` behind it."""

    __slots__ = ("array", "handle", "memory", "size")

    def __init__(self, handle: int, size: int, array: npt.NDArray[np.uint8], memory: object) -> None:
        self.handle = handle
        self.size = size
        self.array = array
        self.memory = memory

    def __repr__(self) -> str:
        return f"BufferObject(handle={self.handle}, size={self.size})"
