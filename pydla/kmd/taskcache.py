"""Validated task graphs, kept for reuse while the descriptors they came from are unchanged.

Validating a task (:func:`pydla.firmware.graph.load_task`) copies and checks every descriptor; an
application that submits the same network again and again would pay for it on every submit. The
cache keys a graph by the submitting context and the resolved address list (buffer handles, device
addresses, offsets and sizes), remembers every byte ``load_task`` read through the port, and hands the
graph out again only when the port reads back exactly those bytes: a descriptor changed in memory is
validated anew, never trusted. Handles are never reused within a context, and a context's entries are
dropped when it closes or one of its buffers is destroyed.

Usage::

    cache = TaskCache()
    graph = cache.get(port, task, handles, info)  # validated once, then checked byte for byte
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydla.firmware.graph import TaskGraph, load_task
from pydla.firmware.interface import CpuAddress, DeviceCaps, FirmwarePortability, TaskDesc

CAPACITY = 64


@dataclass(frozen=True)
class _Read:
    src: CpuAddress
    size: int
    offset: int
    data: bytes


@dataclass(frozen=True)
class _Entry:
    graph: TaskGraph
    reads: tuple[_Read, ...]


class _Recorder(FirmwarePortability):
    """The port as the scheduler's validation sees it, with every descriptor read remembered."""

    def __init__(self, port: FirmwarePortability) -> None:
        self.port = port
        self.reads: list[_Read] = []

    def dla_data_read(self, src: CpuAddress, size: int, offset: int) -> bytes:
        data = self.port.dla_data_read(src, size, offset)
        self.reads.append(_Read(src, size, offset, bytes(data)))
        return data

    def dla_reg_write(self, addr: int, reg: int) -> None:
        self.port.dla_reg_write(addr, reg)

    def dla_reg_read(self, addr: int) -> int:
        return self.port.dla_reg_read(addr)

    def dla_read_dma_address(self, task: TaskDesc, index: int, what: str = "address") -> int:
        return self.port.dla_read_dma_address(task, index, what)

    def dla_read_cpu_address(self, task: TaskDesc, index: int, what: str = "address") -> CpuAddress:
        return self.port.dla_read_cpu_address(task, index, what)

    def dla_data_write(self, src: bytes, dst: CpuAddress, offset: int) -> None:
        self.port.dla_data_write(src, dst, offset)

    def connect_interrupt(self, handler: Callable[[], object]) -> None:
        self.port.connect_interrupt(handler)

    def disconnect_interrupt(self, handler: Callable[[], object]) -> None:
        self.port.disconnect_interrupt(handler)


class TaskCache:
    """See the module docstring. Thread-safe; at most ``capacity`` graphs, least recently used out."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def _key(task: TaskDesc, handles: tuple[int, ...]) -> tuple[Any, ...]:
        return (task.ctx, handles, tuple((e.iova, e.offset, e.length) for e in task.addresses),
                task.nvdla_interface)

    def get(self, port: FirmwarePortability, task: TaskDesc, handles: tuple[int, ...],
            config: DeviceCaps) -> TaskGraph:
        """The validated graph of ``task`` (whose address entries are buffers ``handles``)."""
        key = self._key(task, handles)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and all(port.dla_data_read(r.src, r.size, r.offset) == r.data
                                     for r in entry.reads):
            self.hits += 1
            return entry.graph
        self.misses += 1
        recorder = _Recorder(port)
        graph = load_task(recorder, task, config)
        with self._lock:
            self._entries[key] = _Entry(graph, tuple(recorder.reads))
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return graph

    def forget(self, ctx: int, handle: int | None = None) -> None:
        """Drop the graphs of context ``ctx`` (that use buffer ``handle``, when given)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == ctx and (handle is None or handle in k[1])]:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
