"""The firmware's validated tasks: resolved and checked once per distinct task, then checked for change.

A host submits a prepared job again and again: the same address list, in the same context, over the
same descriptors. The firmware keeps, per (context, the address list's bytes), what it derived the
first time: the list resolved through the IOMMU in the task's context and the task graph
:func:`pydla.firmware.graph.load_task` validated from the firmware's own reads of the descriptors. It
hands them out again only while

- the context's mapping generation is the one they were derived under (any map, unmap or free in
  that context, or its end, starts a new one: the resolved addresses would be stale), and
- every descriptor byte ``load_task`` read is unchanged in memory: the reads are merged into spans
  per buffer (reads up to 4 KiB apart join) and compared whole (a change in a span counts, also
  between two reads: stricter, never looser), so descriptors a client changed after the first check
  are validated again, never trusted.

A task that fails validation is not kept (its next submit is checked again). This does what
:class:`pydla.kmd.taskcache.TaskCache` does for the host, plus the address list's resolution, with
one dictionary lookup and one comparison per span on a repeated task.

Usage::

    tasks = PreparedTasks(device.iommu, info)
    task = tasks.get(port, ctx, raw_list, task_id)   # raw_list: the address list's bytes, its copy
    engine.dla_execute_task(TaskDesc(task_id, ctx, task.addresses), task.graph, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.firmware.graph import TaskGraph, load_task
from pydla.firmware.interface import (
    BufferMemory,
    CpuAddress,
    FirmwarePortability,
    KmdDeviceInfo,
    ResolvedEntry,
    TaskDesc,
)
from pydla.hw.mcu.port import UNMAPPED
from pydla.hw.memory import MmuFault

if TYPE_CHECKING:
    from pydla.hw.memory import Iommu

CAPACITY = 64
MAX_ENTRY_BYTES = 1 << 40
MERGE_GAP = 4096
_ENTRY = np.dtype([("iova", "<u8"), ("size", "<u8")])


@dataclass(frozen=True)
class Span:
    """Bytes ``start .. start + len(data)`` of ``bo`` as they were when the task was validated."""

    bo: BufferMemory
    start: int
    data: bytes


@dataclass(frozen=True)
class PreparedTask:
    generation: int | None
    addresses: list[ResolvedEntry]
    graph: TaskGraph
    spans: tuple[Span, ...]

    def unchanged(self) -> bool:
        for span in self.spans:
            if span.bo.array[span.start:span.start + len(span.data)].tobytes() != span.data:
                return False
        return True


def merge_reads(reads: list[tuple[BufferMemory, int, int]], gap: int = MERGE_GAP) -> tuple[Span, ...]:
    """The spans that cover ``reads`` (buffer, start, size): reads of one buffer less than ``gap``
    bytes apart become one span (one comparison of a few more bytes costs less than two calls),
    holding the buffer's bytes now."""
    spans: list[Span] = []
    by_bo: dict[int, list[tuple[int, int]]] = {}
    bos: dict[int, BufferMemory] = {}
    for bo, start, size in reads:
        by_bo.setdefault(id(bo), []).append((start, start + size))
        bos[id(bo)] = bo
    for key, ranges in by_bo.items():
        ranges.sort()
        lo, hi = ranges[0]
        for a, b in [*ranges[1:], (1 << 62, 1 << 62)]:
            if a > hi + gap:
                bo = bos[key]
                spans.append(Span(bo, lo, bo.array[lo:hi].tobytes()))
                lo, hi = a, b
            else:
                hi = max(hi, b)
    return tuple(spans)


class PreparedTasks:
    """See the module docstring. Used by the firmware's one thread at a time (its serving lock)."""

    def __init__(self, iommu: Iommu, info: KmdDeviceInfo, capacity: int = CAPACITY) -> None:
        self.iommu = iommu
        self.info = info
        self.capacity = capacity
        self._entries: dict[tuple[int, bytes, tuple[int, int, int] | None], PreparedTask] = {}
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, port: FirmwarePortability, ctx: int, raw: bytes, task_id: int = 0,
            generation: int | None = None,
            nvdla_interface: tuple[int, int, int] | None = None) -> PreparedTask:
        """The task whose address list is ``raw`` in context ``ctx`` (whose mapping generation the
        caller may have read already) and whose descriptors follow NVDLA's firmware interface
        ``nvdla_interface`` (None: pydla's own): kept, or resolved and validated now. DlaError when
        an entry's size is impossible or the descriptors are invalid."""
        if generation is None:
            generation = self.iommu.generation(ctx)
        key = (ctx, raw, nvdla_interface)
        task = self._entries.get(key)
        if task is not None and task.generation == generation and task.unchanged():
            self.hits += 1
            return task
        self.misses += 1
        self._entries.pop(key, None)
        addresses = self._resolve(ctx, raw)
        reads: list[tuple[BufferMemory, int, int]] = []
        recording = cast(FirmwarePortability, _Recording(port, reads))  # the port's interface, reads noted
        graph = load_task(recording, TaskDesc(task_id, ctx, addresses, nvdla_interface=nvdla_interface),
                          self.info)
        task = PreparedTask(generation, addresses, graph, merge_reads(reads))
        if len(self._entries) >= self.capacity:
            del self._entries[next(iter(self._entries))]  # the oldest
        self._entries[key] = task
        return task

    def _resolve(self, ctx: int, raw: bytes) -> list[ResolvedEntry]:
        """Each entry translated in the task's context. One that is not mapped is kept as it is:
        reading descriptors from it is refused (FirmwarePort), and a block that accesses it faults
        on the device, as it would for a headless driver."""
        entries = np.frombuffer(raw, dtype=_ENTRY)
        out = []
        for iova, size in zip(entries["iova"].tolist(), entries["size"].tolist(), strict=True):
            if not 0 < size <= MAX_ENTRY_BYTES:
                raise DlaError(NvError.InvalidSize, f"address-list entry at {iova:#x}: size {size} must "
                                                    f"be 1..{MAX_ENTRY_BYTES}")
            try:
                bo, offset = self.iommu.translate(ctx, iova, size)
            except MmuFault:
                out.append(ResolvedEntry(UNMAPPED, iova, 0, size))
                continue
            out.append(ResolvedEntry(bo, iova - offset, offset, size))
        return out


class _Recording:
    """The firmware's port while it validates a task: every descriptor read is noted."""

    def __init__(self, port: FirmwarePortability, reads: list[tuple[BufferMemory, int, int]]) -> None:
        self._port = port
        self._reads = reads

    def dla_data_read(self, src: CpuAddress, size: int, offset: int) -> bytes:
        data = self._port.dla_data_read(src, size, offset)
        self._reads.append((src.bo, src.offset + offset, size))
        return data

    def __getattr__(self, name: str) -> object:
        return getattr(self._port, name)
