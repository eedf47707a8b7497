"""Running an NVDLA Loadable (FlatBuffers, ``nvdla.loadable`` 0.7) as NVIDIA's runtime does, through
pydla's portability layer.

What :class:`NvdlaRunner` does, in the NVIDIA runtime's order:

- load: every memory-list entry with ALLOC that is not bindable (INPUT/OUTPUT) is allocated with
  NvDlaGetMem (its size; an allocation that does not meet the entry's alignment is refused) and its
  SET contents are copied in, blob after blob at their offsets (the reader has checked that each
  fits). Bindable memories are the application's: their tensor descriptors come from the
  loadable's tensor_desc_list (:class:`NvdlaTensorDesc`, the NVDLA runtime API's NvDlaTensor), by
  bind id per direction.
- bind: the application's memory for an input or output (at least the memory entry's size).
- submit: memories whose content names contain ``dep_graph`` are loaded again (the firmware writes
  dependency counts back); then for each submit-list entry in order, each of its tasks in order: a
  DLA1 task goes to the KMD as one NvDlaTask whose address list is the task's (entry ``i`` is the
  memory of address-list entry ``task.address_list[i]`` at that entry's offset, with its size when it
  has one; entry 0 is the network descriptor), and is waited for; an EMU1 task runs on the CPU
  (:mod:`pydla.umd.nvdla_emu`). NVIDIA's runtime submits synchronously, so a task's pre-action WAITs
  (a sync point, the event's type and target, reaching a value) must have been met by an earlier
  task's SIGNALs; one that would wait for ever is refused before it starts.
- prepared: a DLA1 task is prepared once (NvDlaPrepareTask: the KMD copies and checks its descriptors
  once and keeps them, as for pydla's own loadables) and submitted prepared; a binding made since
  prepares it again, with the new address list.

Usage::

    rt = pydla.createRuntime()
    rt.load("BDMA_L0_0_fbuf")             # an NVDLA Loadable: IRuntime uses this runner
    out = rt.allocateSystemMemory(rt.getOutputTensorDesc(0).size)
    rt.bindOutputTensor(0, out); rt.submit()
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.portability.interface import NvDlaFence, NvDlaMemHandle, NvDlaPort, NvDlaPreparedTask, NvDlaTask
from pydla.umd.nvdla_emu import EmuAddress, run_emu_task

DEP_GRAPH_MARK = "dep_graph"  # NVIDIA's runtime reloads the memories whose content names hold this


class Device(Protocol):
    port: NvDlaPort
    device: int
    handle: Any


@dataclass(frozen=True)
class NvdlaTensorDesc:
    """An input or output of an NVDLA Loadable as the NVDLA runtime API describes it (NvDlaTensor):
    name, buffer size, dims (n, c, h, w), data format, type, category, pixel format and mapping, and
    the eight strides (stride 0 the element, 1 the line, 2 the surface, in bytes)."""

    name: str
    size: int
    dims: tuple[int, int, int, int]
    data_format: M.DataFormat
    data_type: M.DataType
    data_category: M.DataCategory
    pixel_format: M.PixelFormat
    pixel_mapping: M.PixelMapping
    strides: tuple[int, ...]
    bind_id: int
    direction: str  # "input" or "output"
    mem_id: int

    @property
    def bufferSize(self) -> int:
        return self.size


def _tensor(lo: M.NvdlaLoadable, mem: M.MemoryListEntry, direction: str) -> NvdlaTensorDesc:
    if not 0 <= mem.tensor_desc_id < len(lo.tensor_desc_list):
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: memory_list[{mem.id}].tensor_desc_id "
                                         f"{mem.tensor_desc_id}: the {direction} with bind id {mem.bind_id} "
                                         f"needs a tensor descriptor ({len(lo.tensor_desc_list)} in "
                                         f"the list)")
    t = lo.tensor_desc_list[mem.tensor_desc_id]
    return NvdlaTensorDesc(t.name, t.size, (t.n, t.c, t.h, t.w), t.data_format, t.data_type, t.data_category,
                           t.pixel_format, t.pixel_mapping, t.strides, mem.bind_id, direction, mem.id)


class NvdlaRunner:
    """See the module docstring. Runs are serialised (one at a time)."""

    def __init__(self, device: Device, lo: M.NvdlaLoadable, *, timeout_ms: int = 10_000,
                 source: str = "NVDLA Loadable") -> None:
        self.port, self.handle, self.lo, self.source = device.port, device.handle, lo, source
        self.timeout_ms = timeout_ms
        self.owned: dict[int, NvDlaMemHandle] = {}  # memory id -> what load allocated
        self.bound: dict[int, NvDlaMemHandle] = {}  # memory id -> the application's memory
        self._lock = threading.Lock()
        self._timeline: Any = None
        self._tick = 0
        # task-list index -> (the bindings' epoch it was prepared with, the prepared task)
        self._prepared: dict[int, tuple[int, NvDlaPreparedTask]] = {}
        self._epoch = 0  # bumped by every binding: a prepared task of an older epoch is prepared anew
        self._tasks: list[tuple[int, M.TaskListEntry, bool]] | None = None  # the checked submit order
        self._dep_graphs: list[tuple[Any, int, memoryview]] | None = None  # what each submit reloads
        self._bindable = [m.id for m in lo.memory_list if m.bindable]
        self.inputs = [_tensor(lo, m, "input") for m in lo.inputs()]
        self.outputs = [_tensor(lo, m, "output") for m in lo.outputs()]
        try:
            for mem in lo.memory_list:
                self._allocate(mem)
            self.reload(lambda m: True)
        except BaseException:
            self.close()
            raise

    # -- memory ------------------------------------------------------------------------------------

    def _allocate(self, mem: M.MemoryListEntry) -> None:
        if not mem.flags & M.MemoryFlags.ALLOC or mem.bindable:
            return
        where = f"{self.source}: memory_list[{mem.id}]"
        if mem.domain != M.MemoryDomain.SYSTEM:
            raise DlaError(NvError.NotSupported, f"{where}: domain {mem.domain.name}: pydla's devices have "
                                                 f"system memory only (no SRAM)")
        if mem.size <= 0:
            raise DlaError(NvError.BadValue, f"{where}.size {mem.size}: an allocated memory has at "
                                             f"least 1 byte")
        handle, _ = self.port.NvDlaGetMem(self.handle, mem.size)
        self.owned[mem.id] = handle
        if mem.alignment and handle.device_address % mem.alignment:
            raise DlaError(NvError.NotSupported, f"{where}.alignment {mem.alignment}: the port "
                                                 f"allocated it at "
                                                 f"{handle.device_address:#x}, not so aligned")

    def reload(self, which: Any) -> None:
        """Fill the SET contents again of the loaded memories ``which(entry)`` accepts."""
        for mem in self.lo.memory_list:
            handle = self.owned.get(mem.id)
            if handle is None or not mem.flags & M.MemoryFlags.SET or not which(mem):
                continue
            view = handle.bytes_view()
            for name, offset in zip(mem.contents, mem.offsets, strict=True):
                blob = self.lo.blob(name)
                if blob is None or offset + blob.size > view.size or len(blob.data) < blob.size:
                    raise DlaError(NvError.BadValue, f"{self.source}: memory_list[{mem.id}]: "
                                                     f"content {name!r} "
                                                     f"at offset {offset} does not fit its {view.size} bytes")
                view[offset:offset + blob.size] = memoryview(blob.data)[:blob.size]

    def memory(self, mem_id: int) -> NvDlaMemHandle | None:
        """The memory behind memory-list entry ``mem_id``: bound, allocated by load, or None."""
        return self.bound.get(mem_id, self.owned.get(mem_id))

    # -- binding -----------------------------------------------------------------------------------

    def _bind(self, tensors: list[NvdlaTensorDesc], index: int, mem: NvDlaMemHandle, what: str) -> None:
        if not isinstance(index, int) or not 0 <= index < len(tensors):
            raise DlaError(NvError.BadParameter, f"bind{what.capitalize()}Tensor({index!r}): the "
                                                 f"loadable has "
                                                 f"{len(tensors)} {what}s")
        if not isinstance(mem, NvDlaMemHandle):
            raise DlaError(NvError.BadParameter, f"bind{what.capitalize()}Tensor({index}): a memory from "
                                                 f"allocateSystemMemory is expected, not "
                                                 f"{type(mem).__name__}")
        t = tensors[index]
        need = max(self.lo.memory_list[t.mem_id].size, t.size)
        if mem.size < need:
            raise DlaError(NvError.InvalidSize, f"bind{what.capitalize()}Tensor({index}): '{t.name}' needs "
                                                f"{need} bytes (memory_list[{t.mem_id}]), the memory has "
                                                f"{mem.size}")
        self.bound[t.mem_id] = mem
        self._epoch += 1

    def bind_input(self, index: int, mem: NvDlaMemHandle) -> None:
        self._bind(self.inputs, index, mem, "input")

    def bind_output(self, index: int, mem: NvDlaMemHandle) -> None:
        self._bind(self.outputs, index, mem, "output")

    # -- running -----------------------------------------------------------------------------------

    def _handle(self, mem_id: int, what: str) -> NvDlaMemHandle:
        mem = self.memory(mem_id)
        if mem is not None:
            return mem
        entry = self.lo.memory_list[mem_id]
        if entry.bindable:
            t = next(t for t in (*self.inputs, *self.outputs) if t.mem_id == mem_id)
            raise DlaError(NvError.NotInitialized, f"{what}: {t.direction} {t.bind_id} '{t.name}' "
                                                   f"is not bound "
                                                   f"(bind{t.direction.capitalize()}Tensor)")
        raise DlaError(NvError.BadValue, f"{what}: memory_list[{mem_id}] has no memory (flags "
                                         f"{int(entry.flags):#x} without ALLOC)")

    def task_addresses(self, task: M.TaskListEntry) -> list[tuple[NvDlaMemHandle, int, int]]:
        """A task's address list as the KMD gets it: ``(memory, offset, size)`` per entry, in the task's
        order; size is the address entry's, or what the memory has from the offset when it says 0."""
        out = []
        for i, entry_id in enumerate(task.address_list):
            where = f"{self.source}: task {task.id} address {i}"
            if not 0 <= entry_id < len(self.lo.address_list):
                raise DlaError(NvError.BadValue, f"{where}: address-list entry {entry_id} does not exist")
            a = self.lo.address_list[entry_id]
            if not 0 <= a.mem_id < len(self.lo.memory_list):
                raise DlaError(NvError.BadValue, f"{where}: memory {a.mem_id} does not exist")
            mem = self._handle(a.mem_id, where)
            size = a.size or mem.size - a.offset
            if a.offset < 0 or size < 0 or a.offset + size > mem.size:
                raise DlaError(NvError.InvalidSize, f"{where}: offset {a.offset} + size {size} runs past the "
                                                    f"{mem.size}-byte memory of memory_list[{a.mem_id}]")
            out.append((mem, a.offset, size))
        return out

    def nvdla_task(self, task: M.TaskListEntry) -> NvDlaTask:
        """The NvDlaTask a DLA1 task is submitted as (no fences yet)."""
        entries: list[tuple[NvDlaMemHandle, int] | tuple[NvDlaMemHandle, int, int]]
        entries = [(mem, offset, size) for mem, offset, size in self.task_addresses(task)]
        v = self.interface_version(task)
        return NvDlaTask(entries, timeout_ms=self.timeout_ms, nvdla_interface=(v.major, v.minor, v.sub_minor))

    def interface_version(self, task: M.TaskListEntry) -> M.Version:
        """The firmware interface version of a DLA task: its network-descriptor blob's (the blob at
        offset 0 of the memory its address entry 0 names, the ADDR0 one when there are several)."""
        where = f"{self.source}: task {task.id}"
        if not task.address_list or not 0 <= task.address_list[0] < len(self.lo.address_list):
            raise DlaError(NvError.BadValue, f"{where}: address_list {list(task.address_list)[:4]}: entry 0 "
                                             f"must name the network descriptor's address entry")
        mem = self.lo.memory_list[self.lo.address_list[task.address_list[0]].mem_id]
        blobs = [b for b in (self.lo.blob(name) for name in mem.contents) if b is not None]
        chosen = [b for b in blobs if b.sub_interface == M.SubInterfaceDLA1.ADDR0] or blobs
        if not chosen:
            raise DlaError(NvError.BadValue, f"{where}: memory_list[{mem.id}] (its network "
                                             f"descriptor) has no "
                                             f"content blob, so no firmware interface version")
        return chosen[0].version

    def _emu_addresses(self, task: M.TaskListEntry) -> list[EmuAddress]:
        return [(mem, offset) for mem, offset, _ in self.task_addresses(task)]

    def _event(self, task: M.TaskListEntry, e: int, kind: str) -> M.EventListEntry:
        if not 0 <= e < len(self.lo.event_list):
            raise DlaError(NvError.BadValue, f"{self.source}: task {task.id} {kind} action {e}: no such "
                                             f"event ({len(self.lo.event_list)} in the event list)")
        return self.lo.event_list[e]

    def _actions(self, task: M.TaskListEntry, actions: tuple[int, ...], kind: str,
                 values: dict[tuple[int, int], int]) -> None:
        """A task's pre or post actions: event-list entries, each a WAIT for a sync point (its type and
        target) to reach ``val`` or a SIGNAL setting it to ``val``. The tasks run one after the other
        in the submit list's order, so a WAIT must already be met."""
        for e in actions:
            event = self._event(task, e, kind)
            point = (int(event.type), event.target)
            if event.op == M.EventOp.SIGNAL:
                values[point] = max(values.get(point, 0), event.val)
            elif values.get(point, 0) < event.val:
                raise DlaError(NvError.InvalidState, f"{self.source}: task {task.id} waits (event "
                                                     f"{event.id}) for sync point {event.target} to reach "
                                                     f"{event.val}; no task submitted before it signals that "
                                                     f"(it would wait for ever)")

    def _sequence(self) -> list[tuple[int, M.TaskListEntry, bool]]:
        """The tasks of the submit list in order (task-list index, task, whether it is a DLA1 task, else
        EMU1): task ids, interfaces and events checked before anything runs, once (the loadable does
        not change)."""
        if self._tasks is not None:
            return self._tasks
        values: dict[tuple[int, int], int] = {}
        tasks = []
        for s in self.lo.submit_list:
            for task_id in s.task_id:
                if not 0 <= task_id < len(self.lo.task_list):
                    raise DlaError(NvError.BadValue, f"{self.source}: submit_list[{s.id}]: task {task_id} "
                                                     f"does not exist")
                task = self.lo.task_list[task_id]
                self._actions(task, task.pre_actions, "pre", values)
                if task.interface not in (M.Interface.DLA1, M.Interface.EMU1):
                    raise DlaError(NvError.BadValue, f"{self.source}: task {task.id}: interface "
                                                     f"{task.interface.name} runs nowhere")
                tasks.append((task_id, task, task.interface == M.Interface.DLA1))
                self._actions(task, task.post_actions, "post", values)
        self._tasks = tasks
        return tasks

    def _reload_dep_graphs(self) -> None:
        """The dependency-graph memories' contents again (what load wrote there, checked then)."""
        if self._dep_graphs is None:
            self._dep_graphs = []
            for mem in self.lo.memory_list:
                handle = self.owned.get(mem.id)
                if handle is None or not mem.flags & M.MemoryFlags.SET or \
                        not any(DEP_GRAPH_MARK in name for name in mem.contents):
                    continue
                for name, offset in zip(mem.contents, mem.offsets, strict=True):
                    blob = self.lo.blob(name)
                    assert blob is not None  # load's reload checked every content
                    self._dep_graphs.append((handle.bytes_view(), offset, memoryview(blob.data)[:blob.size]))
        for view, offset, data in self._dep_graphs:
            view[offset:offset + len(data)] = data

    def run(self, timeout_ms: float | None = None) -> None:
        """Submit the loadable's submit list, in order, to completion (see the module docstring)."""
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        with self._lock:
            for mem_id in self._bindable:  # every bound memory is there before anything starts
                if mem_id not in self.bound:
                    self._handle(mem_id, f"{self.source}: submit")
            tasks = self._sequence()
            self._reload_dep_graphs()
            for index, task, dla in tasks:
                if dla:
                    self._submit_dla(index, task, timeout)
                else:
                    run_emu_task(self._emu_addresses(task), f"{self.source}: task {task.id}")

    def _prepared_task(self, index: int, task: M.TaskListEntry) -> NvDlaPreparedTask:
        """Task-list entry ``index`` prepared for the current bindings (prepared again after a binding)."""
        kept = self._prepared.get(index)
        if kept is not None and kept[0] == self._epoch:
            return kept[1]
        prepared = self.port.NvDlaPrepareTask(self.handle, self.nvdla_task(task))
        if kept is not None:
            self.port.NvDlaReleaseTask(self.handle, kept[1])
        self._prepared[index] = (self._epoch, prepared)
        return prepared

    def _submit_dla(self, index: int, task: M.TaskListEntry, timeout: float) -> None:
        prepared = self._prepared_task(index, task)
        if self._timeline is None:
            self._timeline, self._tick = self.port.NvDlaCreateSemaphore(self.handle), 0
        self._tick += 1
        fence = NvDlaFence(self._timeline, self._tick)
        try:
            self.port.NvDlaSubmitPrepared(self.handle, prepared, [], [fence], timeout_ms=self.timeout_ms)
            self.port.NvDlaWaitFence(fence, timeout)
        except BaseException:
            timeline, self._timeline = self._timeline, None  # a failed semaphore stays failed: a fresh one
            self.port.NvDlaDestroySemaphore(timeline)
            raise

    def close(self) -> None:
        """Free what load allocated (resumable after Busy, never twice)."""
        timeline, self._timeline = self._timeline, None
        if timeline is not None:
            self.port.NvDlaDestroySemaphore(timeline)
        while self._prepared:
            self.port.NvDlaReleaseTask(self.handle, self._prepared.popitem()[1][1])
        while self.owned:
            mem_id = next(iter(self.owned))
            self.port.NvDlaFreeMem(self.handle, self.owned[mem_id])
            del self.owned[mem_id]
        self.bound.clear()


def open_nvdla_loadable(buf: Any, name: str | None = None) -> tuple[M.NvdlaLoadable, str] | None:
    """``(loadable, its name)`` when ``buf`` (bytes, a memoryview or a path) is an NVDLA Loadable, by
    its FlatBuffers shape; None when it is something else (pydla's own loadable: an ELF file)."""
    from pathlib import Path

    from pydla.errors import file_error
    from pydla.loadable.nvdla.reader import looks_like_nvdla_loadable, read_nvdla_loadable

    if isinstance(buf, (str, Path)):
        path = Path(buf)
        try:
            with path.open("rb") as f:
                if not looks_like_nvdla_loadable(f.read(8)):
                    return None
            data = path.read_bytes()
        except OSError as e:
            raise file_error(path, e) from e
        return read_nvdla_loadable(data), name or str(path)
    if isinstance(buf, (bytes, bytearray, memoryview)):
        data = bytes(buf)
        if not looks_like_nvdla_loadable(data[:8]):
            return None
        return read_nvdla_loadable(data), name or "NVDLA Loadable"
    return None
