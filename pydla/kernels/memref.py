"""Where a SHAVE kernel's tensors are: the MemRefData that describes each one (the VPUX software
layers' argument type) and the layout of a tile's CMX slice (page-aligned buffers below the stack
and its guard page).

Usage: ``m = memref((4, 8), np.dtype(np.float32), S.WIN_F + cmx_place(0), data)``
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from pydla.deviceapi.generated import shave as S

DEFAULT_STACK = 8 << 10
PAGE = 4096  # a tile's stack is rounded up to pages, above one unmapped guard page (pydla.hw.shave)
TLB_SPAN = 1 << 20  # CMX buffers a multiple of 1 MiB apart evict each other in unicorn's data TLB
MEMREF_BYTES = ctypes.sizeof(S.MemRefData)
_T = S.shave_data_type_e
MEMREF_TYPES = {np.dtype(np.float32): _T.FP32, np.dtype(np.float16): _T.FP16, np.dtype(np.int32): _T.I32,
                np.dtype(np.int16): _T.I16, np.dtype(np.int8): _T.I8, np.dtype(np.uint8): _T.U8}


def usable_cmx(cmx_bytes: int, stack: int) -> int:
    """Bytes of a tile's CMX slice a task list may use: below its stack and the guard page."""
    return cmx_bytes - -(-stack // PAGE) * PAGE - PAGE


def cmx_place(offset: int) -> int:
    """The CMX offset for a buffer after ``offset``: page aligned, off the emulator's 1 MiB TLB
    stride from the buffers before it (1.5x slower kernels when on it)."""
    at = -(-offset // PAGE) * PAGE
    return at + PAGE if at and at % TLB_SPAN == 0 else at


def memref(dims: tuple[int, ...], dtype: np.dtype[Any], addr: int, data: bytearray,
           base: int = int(S.ARGS_MAX_BYTES)) -> Any:
    """A static dense MemRefData of ``dims`` at ``addr`` (WIN_F); its dims and strides (in bits) are
    appended to ``data``, the invocation's RW data, which the device copies to WIN_E + ``base``.

    Usage: ``m = memref((4, 8), np.dtype(np.float32), S.WIN_F, data)``
    """
    n = len(dims)
    m = S.MemRefData(dataAddr=addr, isStatic=1, numDims=n, dataType=int(MEMREF_TYPES[dtype]))
    m.dimsOrder = sum(i << (4 * (n - 1 - i)) for i in range(n))  # nibble 0: the innermost dimension
    strides = np.empty(dims, dtype=dtype).strides
    data += b"\0" * (-len(data) % 8)
    m.dimsAddr = S.WIN_E + base + len(data)
    data += np.asarray(dims, dtype=np.int32).tobytes()
    data += b"\0" * (-len(data) % 8)
    m.stridesAddr = S.WIN_E + base + len(data)
    data += np.asarray([st * 8 for st in strides], dtype=np.int64).tobytes()
    return m
