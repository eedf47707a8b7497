"""SHAVE task lists at load: copy a task's list descriptors and check them before anything runs.

A task whose network descriptor has ``shave_list_index`` != 0 is a SHAVE task list (dla_task.yaml,
module ``shave_list``): its runtime kernel and per-tile stacks, its kernel tasks, its DMA tasks and
the barriers they use, each buffer a ``dla_mem_ref_t`` into the task's address list. As for a DLA
task, the KMD copies the descriptors (the UMD cannot change them after the checks), checks every
index, offset and size against the real buffers and the device's SHAVE capabilities
(:class:`~pydla.firmware.interface.ShaveCaps`), and then checks the list as a whole
(:mod:`pydla.firmware.shave_check`: barrier counts, notify barriers, no deadlock, FIFO depth). A
failure is a DlaError naming the task, the field and the value.

The result, a :class:`ShaveList` on the :class:`~pydla.firmware.graph.TaskGraph`, is immutable and
holds the device's own descriptors (shave ``ActKernelTask`` / ``DmaTask``) with the addresses
resolved, ready to be copied into the KMD's buffer and pushed (:mod:`pydla.kmd.shave_run`).

Usage::

    graph = load_task(port, task, caps)      # dispatches here when shave_list_index != 0
    graph.shave.acts[0].tile
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import DeviceCaps, FirmwarePortability, ShaveCaps, ShaveCapsLike, TaskDesc

FIFO_DEPTH = int(S.FIFO_DEPTH)
MAX_TILES = int(S.MAX_TILES)
MIN_STACK = 256
STACK_ALIGN = 16
PAGE = 4096
ACT_SIZE = ctypes.sizeof(T.shave_act_task_desc_t)
DMA_SIZE = ctypes.sizeof(T.shave_dma_task_desc_t)
LIST_SIZE = ctypes.sizeof(T.shave_list_desc_t)
LEGACY_LIST_SIZE = T.shave_list_desc_t.op_barrier_index.offset  # a list written before dla_task 1.9.0
OP_BARRIER_SIZE = ctypes.sizeof(T.dla_op_barrier_desc_t)
DEVICE_ACT_SIZE = ctypes.sizeof(S.ActKernelTask)
DEVICE_DMA_SIZE = ctypes.sizeof(S.DmaTask)
TO_CMX = int(T.shave_dma_direction_e.TO_CMX)
FROM_CMX = int(T.shave_dma_direction_e.FROM_CMX)


@dataclass(frozen=True)
class ActTask:
    """A validated kernel task: where its bytes are (IOVAs) and its barriers."""

    index: int
    tile: int
    kernel_id: int
    wait_mask: int
    update_mask: int

    @property
    def name(self) -> str:
        return f"kernel task {self.index} (tile {self.tile}, kernel_id {self.kernel_id})"


@dataclass(frozen=True)
class DmaTask:
    """A validated DMA task."""

    index: int
    tile: int
    to_cmx: bool
    cmx_offset: int
    cmx_extent: int
    wait_mask: int
    update_mask: int

    @property
    def name(self) -> str:
        way = "to" if self.to_cmx else "from"
        return f"DMA task {self.index} ({way} tile {self.tile})"


@dataclass(frozen=True)
class ShaveList:
    """A validated SHAVE task list, in the form the KMD runs it.

    ``runtime`` is (buffer handle, IOVA, size) of the runtime kernel's ELF; ``stacks`` the stack
    size of each tile (0: unused); ``barriers`` maps each barrier the list uses to its (producers,
    consumers); ``image`` the device descriptors, the ActKernelTasks in list order then the DmaTasks,
    to be written into KMD-owned device memory and pushed."""

    runtime: tuple[int, int, int]
    stacks: tuple[int, ...]
    acts: tuple[ActTask, ...]
    dmas: tuple[DmaTask, ...]
    barriers: dict[int, tuple[int, int]]
    notify_mask: int
    image: bytes
    # A task with DLA operations beside its list (op_barrier_index != -1): each operation's wait and
    # update barriers, by operation index (empty for a list alone).
    op_waits: tuple[int, ...] = ()
    op_updates: tuple[int, ...] = ()

    @property
    def dla_waits(self) -> int:
        """The barriers DLA operations wait on: their firing must wake the engine scheduler."""
        mask = 0
        for w in self.op_waits:
            mask |= w
        return mask

    @property
    def tiles(self) -> tuple[int, ...]:
        """The tiles that run kernel tasks (their runtime is started)."""
        return tuple(t for t, s in enumerate(self.stacks) if s)

    def act_offset(self, i: int) -> int:
        return i * DEVICE_ACT_SIZE

    def dma_offset(self, i: int) -> int:
        return len(self.acts) * DEVICE_ACT_SIZE + i * DEVICE_DMA_SIZE

    def tile_acts(self, tile: int) -> list[ActTask]:
        """Tile ``tile``'s kernel tasks, in its FIFO's order."""
        return [a for a in self.acts if a.tile == tile]


class _Checker:
    """Field checks of one task's list, naming the task in every error."""

    def __init__(self, port: FirmwarePortability, task: TaskDesc, caps: ShaveCapsLike,
                 max_bytes: int) -> None:
        self.port = port
        self.task = task
        self.caps = caps
        self.max_bytes = max_bytes
        self.where = f"task {task.task_id}: SHAVE list"

    def fail(self, code: NvError, what: str, message: str) -> DlaError:
        return DlaError(code, f"{self.where}: {what}: {message}")

    def ref(self, ref: Any, what: str, *, optional: bool = False, max_size: int | None = None,
            need: int = 1) -> tuple[int, int]:
        """A dla_mem_ref_t inside its address-list entry: (device address, size); (0, 0) for an
        optional one whose address is -1."""
        if optional and ref.address == -1:
            return 0, 0
        entry = self.task.entry(ref.address, f"SHAVE list: {what}.address")
        if max_size is not None and ref.size > max_size:
            raise self.fail(NvError.InvalidSize, f"{what}.size", f"{ref.size} exceeds {max_size}")
        if ref.size < need:
            raise self.fail(NvError.InvalidSize, f"{what}.size",
                            f"{ref.size} is less than the {need} byte(s) it must hold")
        if ref.offset + ref.size > entry.size:
            raise self.fail(NvError.InvalidSize, f"{what}",
                            f"offset {ref.offset} + size {ref.size} exceeds address-list entry "
                            f"{ref.address} ({entry.size} bytes from its offset)")
        iova = self.port.dla_read_dma_address(self.task, ref.address, f"SHAVE list: {what}")
        return iova + ref.offset, int(ref.size)

    def tile(self, tile: int, what: str) -> None:
        if not 0 <= tile < self.caps.tiles:
            raise self.fail(NvError.BadValue, f"{what}.tile",
                            f"{tile} is not one of the device's tiles 0..{self.caps.tiles - 1}")

    def read_array(self, index: int, count: int, size: int, what: str) -> bytes:
        if not count:
            return b""  # the index may be -1 (none)
        cpu = self.port.dla_read_cpu_address(self.task, index, f"SHAVE list: {what}")
        need = count * size
        if need > cpu.size:
            raise self.fail(NvError.InvalidSize, what,
                            f"{count} descriptors need {need} bytes, address-list entry {index} holds "
                            f"{cpu.size}")
        return self.port.dla_data_read(cpu, need, 0)


def load_shave_list(port: FirmwarePortability, task: TaskDesc, config: DeviceCaps, net: Any,
                    dla: DlaPart | None = None) -> ShaveList:
    """Copy and validate the SHAVE task list of ``task`` (whose network descriptor is ``net``);
    raise DlaError on the first problem. Called by :func:`pydla.firmware.graph.load_task`, with
    ``dla`` the task's validated DLA operations when it has some beside the list."""
    from pydla.firmware.graph import check_num_addresses
    from pydla.firmware.shave_check import check_list

    where = f"task {task.task_id}"
    caps = getattr(config, "shave", None)
    if caps is None and dla is not None:  # the firmware on the microcontroller: asked of the device
        tiles = port.dla_reg_read(R.SHAVE_TILES)
        if tiles:
            caps = ShaveCaps(tiles, port.dla_reg_read(R.SHAVE_BARRIERS), port.dla_reg_read(R.SHAVE_CMX_BYTES))
    if caps is None or caps.tiles <= 0:
        raise DlaError(NvError.NotSupported,
                       f"{where}: network shave_list_index = {net.shave_list_index}: a SHAVE task list, but "
                       f"device config '{config.name}' has no SHAVE tiles")
    if dla is None and (net.num_operations != 0 or net.num_luts != 0):
        raise DlaError(NvError.BadValue,
                       f"{where}: a SHAVE task list (shave_list_index {net.shave_list_index}) has no DLA "
                       f"operations or LUTs: num_operations = {net.num_operations}, "
                       f"num_luts = {net.num_luts}")
    check_num_addresses(net, task)
    cpu = port.dla_read_cpu_address(task, net.shave_list_index, "SHAVE list (shave_list_index)")
    # A list written before op_barrier_index (dla_task 1.9.0) is LEGACY_LIST_SIZE bytes: it reads as -1.
    size = min(LIST_SIZE, cpu.size)
    if size < LEGACY_LIST_SIZE:
        raise DlaError(NvError.InvalidSize,
                       f"{where}: SHAVE list (shave_list_index {net.shave_list_index}) needs {LIST_SIZE} "
                       f"bytes, address-list entry {net.shave_list_index} holds {cpu.size}")
    lst = T.shave_list_desc_t.from_buffer_copy(port.dla_data_read(cpu, size, 0).ljust(LIST_SIZE, b"\0"))
    if size < LIST_SIZE:
        lst.op_barrier_index = -1
    c = _Checker(port, task, caps, config.max_bytes_per_op)
    op_waits, op_updates = _op_barriers(c, net, lst, dla)
    if caps.barriers < 32 and lst.barrier_mask >> caps.barriers:
        raise c.fail(NvError.BadValue, "barrier_mask",
                     f"{lst.barrier_mask:#x} names barriers beyond the device's {caps.barriers} "
                     f"(0..{caps.barriers - 1})")
    n_act, n_dma = lst.num_act_tasks, lst.num_dma_tasks
    if n_act + n_dma == 0:
        raise c.fail(NvError.BadValue, "num_act_tasks, num_dma_tasks", "0 and 0: the list has no tasks")
    # Every task is pushed at once: a FIFO holds FIFO_DEPTH (checked per tile in check_list).
    if n_act > FIFO_DEPTH * caps.tiles:
        raise c.fail(NvError.BadValue, "num_act_tasks",
                     f"{n_act} exceeds the {FIFO_DEPTH * caps.tiles} the device's {caps.tiles} tile FIFOs "
                     f"of {FIFO_DEPTH} hold")
    if n_dma > FIFO_DEPTH:
        raise c.fail(NvError.BadValue, "num_dma_tasks", f"{n_dma} exceeds the DMA FIFO's {FIFO_DEPTH}")
    runtime = c.ref(lst.runtime, "runtime")
    runtime_entry = task.addresses[lst.runtime.address]
    stacks = tuple(int(s) for s in lst.stack_size)
    act_raw = c.read_array(lst.act_task_index, n_act, ACT_SIZE, "kernel tasks (act_task_index)")
    dma_raw = c.read_array(lst.dma_task_index, n_dma, DMA_SIZE, "DMA tasks (dma_task_index)")
    acts, act_image = [], bytearray()
    for i in range(n_act):
        d = T.shave_act_task_desc_t.from_buffer_copy(act_raw, i * ACT_SIZE)
        act, device = _act(c, i, d, lst.barrier_mask)
        acts.append(act)
        act_image += bytes(device)
    used = {a.tile for a in acts}
    _check_stacks(c, stacks, used)
    dmas, dma_image = [], bytearray()
    for i in range(n_dma):
        e = T.shave_dma_task_desc_t.from_buffer_copy(dma_raw, i * DMA_SIZE)
        dma, device = _dma(c, i, e, lst.barrier_mask, stacks)
        dmas.append(dma)
        dma_image += bytes(device)
    if dla is not None:
        dla = DlaPart(dla.ops, dla.chains, dla.deps, op_waits, op_updates)
    barriers = check_list(c.where, acts, dmas, lst.barrier_mask, lst.notify_mask, dla)
    return ShaveList((runtime_entry.bo.handle, *runtime), stacks, tuple(acts), tuple(dmas), barriers,
                     int(lst.notify_mask), bytes(act_image + dma_image), op_waits, op_updates)


def _op_barriers(c: _Checker, net: Any, lst: Any,
                 dla: DlaPart | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The wait and update masks of the task's DLA operations (op_barrier_index), each inside the
    list's barrier_mask; () and () for a SHAVE task list alone."""
    index = int(lst.op_barrier_index)
    if index == 0:  # entry 0 is the network descriptor: never the barriers (a list that left it 0)
        index = -1
    if dla is None:
        if index != -1:
            raise c.fail(NvError.BadValue, "op_barrier_index",
                         f"{index}: a SHAVE task list without DLA operations (num_operations 0) has "
                         "none (-1)")
        return (), ()
    if index == -1:
        raise c.fail(NvError.BadValue, "op_barrier_index",
                     f"-1, but the task has {net.num_operations} DLA operations beside its list: name the "
                     "address-list entry of their barriers")
    raw = c.read_array(index, len(dla.ops), OP_BARRIER_SIZE, "DLA operation barriers (op_barrier_index)")
    waits, updates = [], []
    for op in dla.ops:
        d = T.dla_op_barrier_desc_t.from_buffer_copy(raw, op.index * OP_BARRIER_SIZE)
        _masks(c, op.name, d.wait_mask, d.update_mask, lst.barrier_mask)
        waits.append(int(d.wait_mask))
        updates.append(int(d.update_mask))
    return tuple(waits), tuple(updates)


@dataclass(frozen=True)
class DlaPart:
    """A task's DLA operations as the list checks see them (pydla.firmware.shave_check): each with a
    name; each block's chain (an operation completes after the one before it in its chain); the
    dependency edges (producer, consumer; a fused CONV before its SDP); their barriers."""

    ops: tuple[Any, ...]  # pydla.firmware.graph.Operation
    chains: tuple[tuple[int, ...], ...]
    deps: tuple[tuple[int, int], ...]
    waits: tuple[int, ...] = ()
    updates: tuple[int, ...] = ()


def _masks(c: _Checker, what: str, wait: int, update: int, barrier_mask: int) -> None:
    for name, mask in (("wait_mask", wait), ("update_mask", update)):
        if mask & ~barrier_mask:
            raise c.fail(NvError.BadValue, f"{what}.{name}",
                         f"{mask:#x} names barrier(s) {_bits(mask & ~barrier_mask)} outside the list's "
                         f"barrier_mask {barrier_mask:#x}")


def _act(c: _Checker, i: int, d: Any, barrier_mask: int) -> tuple[ActTask, Any]:
    what = f"kernel task {i}"
    c.tile(d.tile, what)
    kernel = c.ref(d.kernel, f"{what}: kernel")
    args = c.ref(d.args, f"{what}: args", optional=True, max_size=int(S.ARGS_MAX_BYTES), need=0)
    data = c.ref(d.data, f"{what}: data", optional=True, need=0)
    if d.entry_offset >= S.WIN_D_BYTES:
        raise c.fail(NvError.BadValue, f"{what}.entry_offset",
                     f"{d.entry_offset:#x} is outside WIN_D ({S.WIN_D_BYTES:#x} bytes)")
    if data[1] and not (S.ARGS_MAX_BYTES <= d.data_offset and d.data_offset + data[1] <= S.WIN_E_BYTES):
        raise c.fail(NvError.BadValue, f"{what}.data_offset",
                     f"{d.data_offset:#x} with data size {data[1]} must lie in WIN_E from ARGS_MAX_BYTES "
                     f"({S.ARGS_MAX_BYTES:#x}) to {S.WIN_E_BYTES:#x}")
    _masks(c, what, d.wait_mask, d.update_mask, barrier_mask)
    inv = S.ActKernelInvocation(kernel_addr=kernel[0], kernel_size=kernel[1], args_addr=args[0],
                                args_size=args[1], data_addr=data[0], data_size=data[1],
                                data_offset=d.data_offset if data[1] else 0, entry_offset=d.entry_offset,
                                tile=d.tile, kernel_id=d.kernel_id)
    device = S.ActKernelTask(invocation=inv, wait_mask=d.wait_mask, update_mask=d.update_mask)
    return ActTask(i, int(d.tile), int(d.kernel_id), int(d.wait_mask), int(d.update_mask)), device


def usable_cmx(cmx_bytes: int, stack: int) -> int:
    """Bytes of a tile's CMX slice below its stack and the stack's guard page (all of it without one)."""
    if not stack:
        return cmx_bytes
    return cmx_bytes - -(-stack // PAGE) * PAGE - PAGE


def _dma(c: _Checker, i: int, d: Any, barrier_mask: int, stacks: tuple[int, ...]) -> tuple[DmaTask, Any]:
    what = f"DMA task {i}"
    if d.direction not in (TO_CMX, FROM_CMX):
        raise c.fail(NvError.BadValue, f"{what}.direction",
                     f"{d.direction} is neither TO_CMX (0) nor FROM_CMX (1)")
    c.tile(d.tile, what)
    shape = (d.surf_repeat, d.line_repeat, d.line_size)
    if min(shape) < 1 or shape[0] * shape[1] * shape[2] > c.max_bytes:
        raise c.fail(NvError.BadValue, f"{what}: surf_repeat, line_repeat, line_size",
                     f"{shape}: each at least 1, at most {c.max_bytes} bytes in all")
    ddr_extent = _extent(d, d.ddr_line_stride, d.ddr_surf_stride)
    cmx_extent = _extent(d, d.cmx_line_stride, d.cmx_surf_stride)
    ddr = c.ref(d.ddr, f"{what}: ddr", need=ddr_extent)
    # Below the tile's stack and its guard page: the DMA would overwrite the runtime kernel's frames.
    room = usable_cmx(c.caps.cmx_bytes, stacks[d.tile] if d.tile < len(stacks) else 0)
    if d.cmx_offset + cmx_extent > room:
        below = " (below its stack and guard page)" if room < c.caps.cmx_bytes else ""
        raise c.fail(NvError.InvalidSize, f"{what}.cmx_offset",
                     f"{d.cmx_offset:#x} + the {cmx_extent} bytes its strides span exceeds the {room} "
                     f"bytes of tile {d.tile}'s CMX slice{below}")
    _masks(c, what, d.wait_mask, d.update_mask, barrier_mask)
    cmx = int(S.WIN_F) + d.cmx_offset
    to_cmx = d.direction == TO_CMX
    device = S.DmaTask(src_addr=ddr[0] if to_cmx else cmx, dst_addr=cmx if to_cmx else ddr[0],
                       src_tile=S.DDR if to_cmx else d.tile, dst_tile=d.tile if to_cmx else S.DDR,
                       line_size=d.line_size, line_repeat=d.line_repeat, surf_repeat=d.surf_repeat,
                       src_line_stride=d.ddr_line_stride if to_cmx else d.cmx_line_stride,
                       dst_line_stride=d.cmx_line_stride if to_cmx else d.ddr_line_stride,
                       src_surf_stride=d.ddr_surf_stride if to_cmx else d.cmx_surf_stride,
                       dst_surf_stride=d.cmx_surf_stride if to_cmx else d.ddr_surf_stride,
                       wait_mask=d.wait_mask, update_mask=d.update_mask)
    return DmaTask(i, int(d.tile), to_cmx, int(d.cmx_offset), cmx_extent, int(d.wait_mask),
                   int(d.update_mask)), device


def _extent(d: Any, line_stride: int, surf_stride: int) -> int:
    """Bytes from the first to past the last one a DMA task's side touches."""
    return int((d.surf_repeat - 1) * surf_stride + (d.line_repeat - 1) * line_stride + d.line_size)


def _check_stacks(c: _Checker, stacks: tuple[int, ...], used: set[int]) -> None:
    top = c.caps.cmx_bytes // 2
    for t, s in enumerate(stacks):
        what = f"stack_size[{t}]"
        if t not in used:
            if s:
                raise c.fail(NvError.BadValue, what, f"{s}: tile {t} runs no kernel task of the list, so 0")
            continue
        if s % STACK_ALIGN or not MIN_STACK <= s <= top:
            raise c.fail(NvError.BadValue, what,
                         f"{s} must be a multiple of {STACK_ALIGN} in {MIN_STACK}..{top} (cmx_bytes / 2) "
                         f"for tile {t}, which runs kernel tasks")


def _bits(mask: int) -> list[int]:
    return [b for b in range(mask.bit_length()) if mask >> b & 1]
