"""Device memory and the IOMMU.

Buffer objects are anonymous shared memory maps (what a kernel would hand out as GEM objects); the
host reaches them through numpy views. The device reaches them only through an address space: each
context has its own, in which buffers are mapped at I/O virtual addresses (IOVAs). Every access the
device makes is translated and bounds-checked against one mapping; anything else is an
:class:`MmuFault`, which the device turns into an interrupt, never into a host exception.

Mappings are placed on page boundaries with an unmapped guard page after each, so an access that
runs off the end of a buffer faults instead of reaching the next buffer.

Usage::

    mem = DeviceMemory(config)
    bo = mem.allocate(4096)
    ctx = mem.iommu.create_context()
    iova = mem.iommu.map(ctx, bo)
    view = mem.iommu.view(ctx, iova, (4, 4), (16, 4), np.float32)
"""

from __future__ import annotations

import bisect
import mmap
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.target.config import PAGE, DeviceConfig


class MmuFault(Exception):
    """An access outside the context's mappings. Raised inside the device, never out of it."""

    def __init__(self, ctx: int, address: int, size: int, reason: str) -> None:
        super().__init__(f"MMU fault: context {ctx}, address {address:#x}, {size} bytes: {reason}")
        self.ctx = ctx
        self.address = address
        self.size = size
        self.block: int | None = None  # set when the faulting block is not the one that ran


class BufferObject:
    """A piece of device memory: ``array`` is its bytes as a numpy uint8 array."""

    def __init__(self, handle: int, size: int, *, fd: int | None = None) -> None:
        self.handle = handle
        self.size = size
        # With ``fd`` the buffer is that shared memory (a memfd a Linux-port client created, which
        # the daemon took and checked; see pydla.uapi.shm), and the buffer owns the descriptor.
        # Otherwise it is anonymous memory.
        self.fd = -1 if fd is None else fd
        if fd is not None:
            self._map: mmap.mmap | None = mmap.mmap(fd, size, mmap.MAP_SHARED)
        else:
            # Zero-size maps are not allowed; a buffer always owns at least one page of backing.
            self._map = mmap.mmap(-1, max(size, 1))
        self.array: npt.NDArray[np.uint8] = np.frombuffer(self._map, dtype=np.uint8, count=size)

    @property
    def closed(self) -> bool:
        return self._map is None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._map is not None:
            # numpy views keep the map's buffer exported; drop ours and let the GC close it when
            # the last view dies (mmap.close would raise BufferError while views exist).
            self.array = np.zeros(0, dtype=np.uint8)
            self._map = None

    def __repr__(self) -> str:
        return f"BufferObject(handle={self.handle}, size={self.size})"


@dataclass(frozen=True)
class Mapping:
    iova: int
    size: int
    bo: BufferObject
    offset: int


MAX_CACHED_VIEWS = 4096  # per context


class AddressSpace:
    """One context's mappings, sorted by IOVA."""

    def __init__(self, ctx: int, base: int, limit: int) -> None:
        self.ctx = ctx
        self.starts: list[int] = []
        self.mappings: list[Mapping] = []
        self._next = base
        self._limit = limit
        # Views the device made, by (address, shape, strides, dtype): a task runs again and again
        # over the same cubes. Dropped whenever a mapping goes.
        self.views: dict[tuple[Any, ...], tuple[npt.NDArray[Any], BufferObject]] = {}
        # Changes with every map, unmap and free in this space, unique across spaces (the Iommu's
        # counter): what was derived from the mappings under another generation is stale.
        self.generation = 0

    def find(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0:
            return None
        m = self.mappings[i]
        return m if address < m.iova + m.size else None

    def place(self, size: int) -> int:
        iova = self._next
        end = iova + _round_up(max(size, 1), PAGE) + PAGE  # one guard page
        if end > self._limit:
            raise DlaError(NvError.InsufficientMemory,
                           f"context {self.ctx}: I/O address space exhausted ({size} bytes requested)")
        self._next = end
        return iova


class Iommu:
    """Per-context address spaces and the translation every device access goes through."""

    def __init__(self, config: DeviceConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._spaces: dict[int, AddressSpace] = {}
        self._next_ctx = 1
        self._generations = 0
        self.listeners: list[Callable[[int], None]] = []

    def _bump(self, space: AddressSpace) -> None:
        """Under the lock: a new generation for ``space`` (see AddressSpace.generation); listeners
        (the device's decoded operations) drop what they derived from its mappings."""
        self._generations += 1
        space.generation = self._generations
        for listener in self.listeners:
            listener(space.ctx)

    def add_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(ctx)`` (under the IOMMU's lock: it must not call back) whenever the
        mappings of context ``ctx`` change or the context goes."""
        with self._lock:
            self.listeners.append(listener)

    def generation(self, ctx: int) -> int | None:
        """The mapping generation of context ``ctx`` (None: no such context). Anything derived from
        its mappings under another generation must be derived again."""
        space = self._spaces.get(ctx)
        return None if space is None else space.generation

    def buffer_freed(self, bo: BufferObject) -> None:
        """``bo`` was freed: every space that maps it starts a new generation."""
        with self._lock:
            for space in self._spaces.values():
                if any(m.bo is bo for m in space.mappings):
                    space.views.clear()
                    self._bump(space)

    def create_context(self) -> int:
        with self._lock:
            if len(self._spaces) >= self.config.contexts:
                raise DlaError(NvError.ResourceError,
                               f"all {self.config.contexts} device contexts are in use")
            while self._next_ctx in self._spaces or self._next_ctx == 0:
                self._next_ctx = (self._next_ctx + 1) & 0xFFFF
            ctx = self._next_ctx
            self._next_ctx = (ctx + 1) & 0xFFFF
            space = self._spaces[ctx] = AddressSpace(ctx, self.config.iova_base,
                                                     self.config.iova_base + self.config.iova_size)
            self._bump(space)
            return ctx

    def destroy_context(self, ctx: int) -> None:
        with self._lock:
            if self._spaces.pop(ctx, None) is None:
                raise DlaError(NvError.BadParameter, f"context {ctx} does not exist")
            for listener in self.listeners:
                listener(ctx)

    @property
    def contexts(self) -> list[int]:
        with self._lock:
            return list(self._spaces)

    def _space(self, ctx: int) -> AddressSpace:
        space = self._spaces.get(ctx)
        if space is None:
            raise DlaError(NvError.BadParameter, f"context {ctx} does not exist")
        return space

    def map(self, ctx: int, bo: BufferObject, offset: int = 0, size: int | None = None) -> int:
        """Map ``size`` bytes of ``bo`` from ``offset`` into context ``ctx``; return the IOVA."""
        size = bo.size - offset if size is None else size
        if offset < 0 or size <= 0 or offset + size > bo.size:
            raise DlaError(NvError.BadParameter,
                           f"map of buffer {bo.handle}: offset {offset} + size {size} is outside "
                           f"its {bo.size} bytes")
        with self._lock:
            space = self._space(ctx)
            iova = space.place(size)
            i = bisect.bisect_right(space.starts, iova)
            space.starts.insert(i, iova)
            space.mappings.insert(i, Mapping(iova, size, bo, offset))
            self._bump(space)
            return iova

    def unmap(self, ctx: int, iova: int) -> None:
        with self._lock:
            space = self._space(ctx)
            i = bisect.bisect_left(space.starts, iova)
            if i >= len(space.starts) or space.starts[i] != iova:
                raise DlaError(NvError.BadParameter, f"context {ctx}: nothing is mapped at {iova:#x}")
            del space.starts[i]
            del space.mappings[i]
            space.views.clear()
            self._bump(space)

    def mappings(self, ctx: int) -> list[Mapping]:
        with self._lock:
            return list(self._space(ctx).mappings)

    # -- device side: these raise MmuFault ----------------------------------------------------

    def translate(self, ctx: int, address: int, size: int) -> tuple[BufferObject, int]:
        """The buffer and offset holding ``[address, address + size)``, all in one mapping."""
        with self._lock:
            space = self._spaces.get(ctx)
            if space is None:
                raise MmuFault(ctx, address, size, "no such context")
            m = space.find(address)
        if m is None:
            raise MmuFault(ctx, address, size, "address not mapped")
        if size < 0 or address + size > m.iova + m.size:
            raise MmuFault(ctx, address, size,
                           f"access runs past the end of the mapping at {m.iova:#x} "
                           f"({m.size} bytes)")
        if m.bo.closed:
            raise MmuFault(ctx, address, size, "the mapped buffer was freed")
        return m.bo, m.offset + (address - m.iova)

    def view(self, ctx: int, address: int, shape: tuple[int, ...], strides: tuple[int, ...],
             dtype: Any) -> npt.NDArray[Any]:
        """A numpy view of device memory; shape and byte strides (non-negative) say what it spans.
        The same request gets the same view object while the mapping lasts (callers never change a
        view's shape or flags, only the memory it shows)."""
        key = (address, shape, strides, dtype)
        with self._lock:
            space = self._spaces.get(ctx)
            hit = space.views.get(key) if space is not None else None
            generation = space.generation if space is not None else 0
        if hit is not None and not hit[1].closed:
            return hit[0]
        itemsize = np.dtype(dtype).itemsize
        if any(n <= 0 for n in shape):
            raise MmuFault(ctx, address, 0, f"empty view shape {shape}")
        extent = itemsize + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        bo, offset = self.translate(ctx, address, extent)
        base = bo.array[offset:offset + extent]
        view: npt.NDArray[Any] = np.ndarray(shape, dtype=dtype, buffer=base, offset=0, strides=strides)
        with self._lock:
            if space is not None and self._spaces.get(ctx) is space and space.generation == generation:
                if len(space.views) >= MAX_CACHED_VIEWS:
                    space.views.clear()
                space.views[key] = (view, bo)
        return view


class DeviceMemory:
    """Buffer objects of one device, within its configured memory size."""

    def __init__(self, config: DeviceConfig) -> None:
        self.config = config
        self.iommu = Iommu(config)
        self._lock = threading.Lock()
        self._buffers: dict[int, BufferObject] = {}
        self._next_handle = 1
        self.used = 0

    def allocate(self, size: int, *, fd: int | None = None) -> BufferObject:
        """A buffer of ``size`` bytes: anonymous memory, or the shared memory ``fd`` (whose
        descriptor the buffer then owns, also on failure)."""
        try:
            return self._allocate(size, fd)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise

    def _allocate(self, size: int, fd: int | None) -> BufferObject:
        if not isinstance(size, int) or size <= 0 or size > 1 << 40:
            raise DlaError(NvError.BadParameter, f"buffer size {size!r} must be 1..2^40 bytes")
        with self._lock:
            if self.used + size > self.config.memory_bytes:
                raise DlaError(NvError.InsufficientMemory,
                               f"cannot allocate {size} bytes: {self.used} of "
                               f"{self.config.memory_bytes} in use")
            try:
                bo = BufferObject(self._next_handle, size, fd=fd)
            except OSError as e:
                raise DlaError(NvError.InsufficientMemory,
                               f"cannot allocate {size} bytes: {e.strerror}") from e
            self._buffers[bo.handle] = bo
            self._next_handle += 1
            self.used += size
            return bo

    def free(self, bo: BufferObject) -> None:
        with self._lock:
            if self._buffers.pop(bo.handle, None) is None:
                raise DlaError(NvError.BadParameter, f"buffer {bo.handle} is not allocated")
            self.used -= bo.size
        self.iommu.buffer_freed(bo)
        bo.close()

    def get(self, handle: int) -> BufferObject:
        with self._lock:
            bo = self._buffers.get(handle)
        if bo is None:
            raise DlaError(NvError.BadParameter, f"no buffer with handle {handle}")
        return bo

    @property
    def buffers(self) -> list[BufferObject]:
        with self._lock:
            return list(self._buffers.values())


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to
