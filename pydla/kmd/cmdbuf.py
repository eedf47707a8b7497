"""The command buffers of the device's command processor (:class:`CommandBuffers`, a part of
:class:`~pydla.kmd.driver.Kmd`): a validated task written once as one command.

On a device with a command processor (GLB ``cp_status`` has PRESENT: pydla's own configurations with
``"engine": {"command_processor": true}``; never an NVDLA one, never headed, where the firmware on the
microcontroller programs each operation), the driver writes each validated task graph's command
buffer (:func:`pydla.firmware.cmdbuf.build`: every operation's register image with its addresses
resolved, its dependencies and consumers) into a buffer object of its own, mapped into the task's
context, and checks it as the device will (:func:`pydla.firmware.cmdbuf.parse`). It is made when a
task is prepared (:meth:`pydla.kmd.driver.Kmd.prepare`), or at the first submit of a graph the task
cache keeps, and reused by every submit of that graph: a graph belongs to one resolved address list,
so a changed binding is a new graph and a new buffer. The engine then submits the task with one
doorbell write (:mod:`pydla.firmware.engine`).

A task the command processor does not take runs on the per-operation path, as on a device without
one: a task with a SHAVE list beside its operations (the barriers between DLA operations and SHAVE
tasks are the host engine's), one of no operation, and one whose addresses do not resolve (its
programming then fails as on the per-operation path, with the same error).

A buffer lives as long as its graph (a prepared job, the task cache, a job in flight hold it): the
buffers of graphs gone are freed at the next build, those of a closed context with it.

Usage::

    buffers = CommandBuffers(port, present=True)
    task.command_buffer = buffers.get(task, graph)   # (ctx, iova, size), or None: per operation
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError
from pydla.firmware.cmdbuf import CmdBufError, build, parse
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import TaskDesc
from pydla.kmd.bo import BufferObject
from pydla.kmd.port import KmdPortability

CommandBufferRef = tuple[int, int, int]  # (context, device address, size): TaskDesc.command_buffer


@dataclass
class _Buffer:
    graph: weakref.ref[TaskGraph]
    ref: CommandBufferRef | None  # None: the task runs per operation
    bo: BufferObject | None


def device_has_command_processor(port: KmdPortability) -> bool:
    """Whether the device has a command processor (GLB cp_status bit 31; 0 on a device without)."""
    return bool(port.dla_reg_read(R.GLB_CP_STATUS) & int(R.cp_status_e.PRESENT))


class CommandBuffers:
    """See the module docstring. Used under the driver's lock."""

    def __init__(self, port: KmdPortability, *, present: bool) -> None:
        self.port = port
        self.present = present
        self.blocks = {int(b) for b in port.dla_get_device_info().blocks} if present else set()
        self._by_graph: dict[int, _Buffer] = {}  # by id(graph), while the graph lives
        self.built = 0

    def get(self, task: TaskDesc, graph: TaskGraph) -> CommandBufferRef | None:
        """The command buffer of ``task`` (validated as ``graph``), made at the first call for the
        graph; None when the task runs per operation (see the module docstring)."""
        if not self.present:
            return None
        entry = self._by_graph.get(id(graph))
        if entry is not None and entry.graph() is graph:
            return entry.ref if entry.ref is None or entry.ref[0] == task.ctx else None
        self._sweep()
        ref, bo = self._make(task, graph)
        self._by_graph[id(graph)] = _Buffer(weakref.ref(graph), ref, bo)
        return ref

    def _make(self, task: TaskDesc, graph: TaskGraph) -> tuple[CommandBufferRef | None, BufferObject | None]:
        if graph.shave is not None or not graph.operations:
            return None, None
        try:
            data = build(self.port, task, graph)
        except DlaError:
            return None, None  # programming reports it, as on the per-operation path
        try:
            parse(data, self.blocks)  # what the device checks, checked once here
        except CmdBufError as e:  # a bug of build(): never the device's to find
            raise AssertionError(f"task {task.task_id}: the command buffer built is malformed: {e}") from e
        bo = self.port.dla_alloc(len(data))
        bo.array[:len(data)] = memoryview(data)
        iova = self.port.dla_map(task.ctx, bo)
        self.built += 1
        return (task.ctx, iova, len(data)), bo

    def _sweep(self) -> None:
        """Free the buffers of graphs no one holds any more."""
        for key in [k for k, e in self._by_graph.items() if e.graph() is None]:
            self._release(self._by_graph.pop(key), mapped=True)

    def _release(self, entry: _Buffer, *, mapped: bool) -> None:
        if entry.bo is None or entry.ref is None:
            return
        if mapped:
            with contextlib.suppress(DlaError):  # (its context is gone, and its mappings with it)
                self.port.dla_unmap(entry.ref[0], entry.ref[1])
        self.port.dla_free(entry.bo)

    def forget(self, ctx: int) -> None:
        """Context ``ctx`` was closed: free its buffers (their mappings went with it)."""
        for key in [k for k, e in self._by_graph.items() if e.ref is not None and e.ref[0] == ctx]:
            self._release(self._by_graph.pop(key), mapped=False)

    def __len__(self) -> int:
        return sum(e.bo is not None for e in self._by_graph.values())
