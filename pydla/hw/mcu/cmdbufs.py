"""The microcontroller firmware's command buffers: headed, the firmware submits a task to the device's
command processor as the host KMD does headless (:mod:`pydla.kmd.cmdbuf`), with one doorbell write.

The firmware validated the task itself (:mod:`pydla.hw.mcu.prepared`); for each validated graph it
writes the command buffer (:func:`pydla.firmware.cmdbuf.build`, the operations' register images with
the addresses the firmware resolved) once into device memory it allocates, mapped into the mailbox's
context (not the task's: a mapping there would start a new generation of the task's mappings, and
the firmware validates a task again when they change), checks it as the device will
(:func:`pydla.firmware.cmdbuf.parse`) and hands its place to the engine (``TaskDesc.command_buffer``).
A buffer lives as long as its graph (the firmware's prepared tasks hold it, and a run in flight):
those of graphs gone are freed at the next build, all of them when the host detaches or the firmware
reboots. An NVDLA task, a task with a SHAVE list, or one whose addresses do not resolve gets none (the
per-operation path reports the problem).

Usage::

    buffers = FirmwareCommandBuffers(board.memory, board.iommu, blocks)
    task.command_buffer = buffers.get(port, task, graph, mailbox_ctx)
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

from pydla.errors import DlaError
from pydla.firmware.cmdbuf import build, parse
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import FirmwarePortability, TaskDesc
from pydla.hw.memory import BufferObject, DeviceMemory, Iommu

CAPACITY = 256  # command buffers the firmware keeps (as many as prepared tasks, and some in flight)


@dataclass
class _Buffer:
    graph: weakref.ref[TaskGraph]
    task_ctx: int
    ref: tuple[int, int, int] | None  # (the context it is mapped in, its address, size)
    bo: BufferObject | None


class FirmwareCommandBuffers:
    """See the module docstring. Used by the firmware's one thread at a time."""

    def __init__(self, memory: DeviceMemory | None, iommu: Iommu, blocks: set[int]) -> None:
        self.memory = memory
        self.iommu = iommu
        self.blocks = blocks
        self._by_graph: dict[int, _Buffer] = {}
        self.built = 0

    def get(self, port: FirmwarePortability, task: TaskDesc, graph: TaskGraph,
            map_ctx: int) -> tuple[int, int, int] | None:
        """The command buffer of ``task`` (validated as ``graph``), mapped in context ``map_ctx`` (the
        mailbox's); None: the per-operation path."""
        if self.memory is None or task.nvdla_interface is not None:
            return None
        entry = self._by_graph.get(id(graph))
        if (entry is not None and entry.graph() is graph and entry.task_ctx == task.ctx
                and (entry.ref is None or entry.ref[0] == map_ctx)):
            return entry.ref
        self._sweep()
        ref, bo = None, None
        if graph.shave is None and graph.operations:
            try:
                data = build(port, task, graph)
            except DlaError:
                data = b""  # programming reports it, as on the per-operation path
            if data:
                parse(data, self.blocks)  # what the device checks, once (a CmdBufError: a bug of build)
                bo = self.memory.allocate(len(data))
                bo.array[:len(data)] = memoryview(data)
                ref = (map_ctx, self.iommu.map(map_ctx, bo), len(data))
                self.built += 1
        old = self._by_graph.pop(id(graph), None)
        if old is not None:
            self._release(old)
        self._by_graph[id(graph)] = _Buffer(weakref.ref(graph), task.ctx, ref, bo)
        return ref

    def _sweep(self) -> None:
        dead = [k for k, e in self._by_graph.items() if e.graph() is None]
        if len(self._by_graph) - len(dead) >= CAPACITY:
            dead = list(self._by_graph)
        for key in dead:
            self._release(self._by_graph.pop(key))

    def _release(self, entry: _Buffer) -> None:
        if entry.bo is None or entry.ref is None or self.memory is None:
            return
        with contextlib.suppress(DlaError):  # (its context is gone, and its mappings with it)
            self.iommu.unmap(entry.ref[0], entry.ref[1])
        self.memory.free(entry.bo)

    def close(self) -> None:
        """Free every buffer (the firmware stops)."""
        for entry in self._by_graph.values():
            self._release(entry)
        self._by_graph.clear()
