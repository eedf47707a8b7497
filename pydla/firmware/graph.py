"""Reading and validating a task's descriptors before any register is written.

Everything comes from the UMD's memory and is trusted for nothing: the KMD copies the network,
dependency-graph, operation and surface descriptors (so the UMD cannot change them after the
checks), then checks every index, offset and size against the real buffers, the operation types and
precisions against the device's capabilities, the dependency counts against the consumers, the
per-block chains, the fused CONV+SDP pairs, and that the graph can complete (no cycle). A failure
is a DlaError naming the operation and the field.

The result, a :class:`TaskGraph`, is immutable: the engine keeps per-submit state elsewhere, so the
same task runs again and again, and from several submits.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import gc
import itertools
import math
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.task_layout import OP_DESC, OP_DESC_SIZE, SURFACE_DESC, SURFACE_DESC_SIZE
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import DeviceCaps, FirmwarePortability, TaskDesc
from pydla.firmware.shave import DlaPart, ShaveList, load_shave_list
from pydla.firmware.surfaces import _check_surfaces

NUM_BLOCKS = len(dla_block_e)
EVENTS = (T.dla_event_e.OP_COMPLETED, T.dla_event_e.OP_PROGRAMMED, T.dla_event_e.OP_ENABLED)
MAX_OPERATIONS = 65535
# From this many operations on, the cyclic garbage collector is paused while a task is read (see
# _collector_paused); below it a pause is not worth touching process-wide state.
PAUSE_GC_OPERATIONS = 1000
MAX_LUTS = 1024
LUT_SIZE = ctypes.sizeof(T.dla_lut_param_t)
LUT_TABLE = T.dla_lut_param_t.table.offset



@dataclass(frozen=True)
class Consumer:
    block: dla_block_e
    index: int
    event: int


@dataclass(frozen=True)
class Operation:
    index: int
    block: dla_block_e
    dependency_count: int
    consumers: tuple[Consumer, ...]
    fused_parent: int
    op: Any
    surface: Any
    lut: Any = None  # the validated dla_lut_param_t of an SDP operation with a LUT activation
    lut_address: tuple[int, int] = (-1, 0)  # address-list index and byte offset of its table

    @property
    def name(self) -> str:
        return f"operation {self.index} ({self.block.name})"


@dataclass(frozen=True)
class TaskGraph:
    network: Any
    operations: tuple[Operation, ...]
    chains: dict[dla_block_e, tuple[int, ...]]
    # Register writes per operation index, filled on first programming (pydla.firmware.program): a
    # graph belongs to one context's resolved address list, so they stay valid (see TaskCache).
    programs: dict[int, Any] = field(default_factory=dict, compare=False)  # program.Program by op index
    # A SHAVE task list (network shave_list_index != 0): pydla.firmware.shave, run by
    # pydla.kmd.shave_run; with operations too, they run beside it (their barriers: shave.op_waits).
    shave: ShaveList | None = None

    @functools.cached_property
    def dependency_counts(self) -> tuple[int, ...]:
        """Each operation's dependency count: a run's counters start from these."""
        return tuple(op.dependency_count for op in self.operations)

    @functools.cached_property
    def blocks(self) -> tuple[dla_block_e, ...]:
        """The blocks this task uses (asked at every scheduling step: computed once)."""
        return tuple(b for b, chain in self.chains.items() if chain)


def _fail(code: NvError, where: str, message: str) -> DlaError:
    return DlaError(code, f"{where}: {message}")


def _read_struct(port: FirmwarePortability, task: TaskDesc, index: int, offset: int, cls: Any,
                 what: str) -> Any:
    cpu = port.dla_read_cpu_address(task, index, what)
    size = ctypes.sizeof(cls)
    if offset + size > cpu.size:
        raise _fail(NvError.InvalidSize, f"task {task.task_id}",
                    f"{what} needs {size} bytes at offset {offset} of address-list entry {index}, "
                    f"which holds {cpu.size}")
    return cls.from_buffer_copy(port.dla_data_read(cpu, size, offset))


def check_num_addresses(net: Any, task: TaskDesc) -> None:
    """The network descriptor's num_addresses is the task's address-list length (DLA and SHAVE)."""
    if net.num_addresses != len(task.addresses):
        raise _fail(NvError.CountMismatch, f"task {task.task_id}",
                    f"network num_addresses = {net.num_addresses}, the task's address list has "
                    f"{len(task.addresses)} entries")


def load_task(port: FirmwarePortability, task: TaskDesc, config: DeviceCaps) -> TaskGraph:
    """Copy and validate the descriptors of ``task``; raise DlaError on the first problem. A SHAVE
    task list (network shave_list_index != 0) is loaded by :func:`pydla.firmware.shave.load_shave_list`,
    after the operations when the task has both (they synchronise through barriers)."""
    if getattr(config, "nvdla", None) is not None or task.nvdla_interface is not None:
        from pydla.firmware.nvdla.decode import load_nvdla_task  # NVDLA's (refused on pydla's devices)
        return load_nvdla_task(port, task, config)
    where = f"task {task.task_id}"
    net = _read_struct(port, task, 0, 0, T.dla_network_desc_t, "network descriptor")
    if net.shave_list_index and net.num_operations == 0:
        return TaskGraph(net, (), {b: () for b in dla_block_e},
                         shave=load_shave_list(port, task, config, net))
    n = net.num_operations
    if not 0 < n <= MAX_OPERATIONS:
        raise _fail(NvError.BadValue, where, f"network num_operations = {n}, must be 1..{MAX_OPERATIONS}")
    check_num_addresses(net, task)
    if net.op_desc_size < OP_DESC_SIZE or net.surface_desc_size < SURFACE_DESC_SIZE:
        raise _fail(NvError.BadValue, where,
                    f"network op_desc_size {net.op_desc_size} / surface_desc_size "
                    f"{net.surface_desc_size} are below {OP_DESC_SIZE} / {SURFACE_DESC_SIZE}")
    common_size = ctypes.sizeof(T.dla_common_op_desc_t)
    graph_bytes = _read_array(port, task, net.dependency_graph_index, n * common_size,
                              "dependency graph (dependency_graph_index)")
    op_bytes = _read_array(port, task, net.operation_desc_index, n * net.op_desc_size,
                           "operation descriptors (operation_desc_index)")
    surf_bytes = _read_array(port, task, net.surface_desc_index, n * net.surface_desc_size,
                             "surface descriptors (surface_desc_index)")
    with _collector_paused(n >= PAUSE_GC_OPERATIONS):
        ops = []
        for i in range(n):
            common = T.dla_common_op_desc_t.from_buffer_copy(graph_bytes, i * common_size)
            ops.append(_operation(i, common, op_bytes, surf_bytes, net, config, where))
        ops = _attach_luts(port, task, net, ops, where)
        _check_consumers(ops, where)
        chains = _chains(net, ops, where)
        _check_fused(ops, chains, where)
        _check_acyclic(ops, chains, where)
        for op in ops:
            _check_surfaces(op, task, config, where)
        shave: ShaveList | None = None
        if net.shave_list_index:  # DLA operations beside a SHAVE list, synchronised by barriers
            shave = load_shave_list(port, task, config, net, _dla_part(ops, chains))
        return TaskGraph(net, tuple(ops), chains, shave=shave)


def _dla_part(ops: list[Operation], chains: dict[dla_block_e, tuple[int, ...]]) -> DlaPart:
    """The operations' order as the barrier checks of a task with a SHAVE list need it."""
    deps = [(op.index, c.index) for op in ops for c in op.consumers]
    deps += [(op.fused_parent, op.index) for op in ops if op.fused_parent != -1]
    return DlaPart(tuple(ops), tuple(c for c in chains.values() if c), tuple(deps))


@contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    """Pause Python's cyclic garbage collector (when it is on and ``pause``) for the block.

    Reading a task creates a few objects per operation that all survive (the graph), and nothing
    cyclic that dies. Left running, the collector makes about 75 young and one full collection of
    the whole process heap per 10,000 operations, none of which can free anything: 13% of the
    validation (measured). Paused, those objects are examined once, later. It is process-wide
    state: a thread that turns the collector off meanwhile sees it turned back on at the end."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _read_array(port: FirmwarePortability, task: TaskDesc, index: int, size: int, what: str) -> bytes:
    cpu = port.dla_read_cpu_address(task, index, what)
    if size > cpu.size:
        raise _fail(NvError.InvalidSize, f"task {task.task_id}",
                    f"{what}: {size} bytes needed, address-list entry {index} holds {cpu.size}")
    return port.dla_data_read(cpu, size, 0)


def _operation(i: int, common: Any, op_bytes: bytes, surf_bytes: bytes, net: Any,
               config: DeviceCaps, where: str) -> Operation:
    at = f"{where}: operation {i}"
    if common.index != i:
        raise DlaError(NvError.BadValue, f"{at}: index field says {common.index}")
    try:
        block = dla_block_e(common.op_type)
    except ValueError:
        raise DlaError(NvError.BadValue, f"{at}: op_type {common.op_type} is not a known block") from None
    if block not in config.blocks:
        raise DlaError(NvError.NotSupported,
                       f"{at}: needs the {block.name} block, which device config "
                       f"'{config.name}' does not have")
    consumers = []
    for b in range(NUM_BLOCKS):
        c = common.consumers[b]
        if c.index == -1:
            continue
        if c.event not in EVENTS:
            raise DlaError(NvError.BadValue,
                           f"{at} ({block.name}): consumers[{dla_block_e(b).name}] event {c.event} "
                           "is not OP_COMPLETED, OP_PROGRAMMED or OP_ENABLED")
        consumers.append(Consumer(dla_block_e(b), c.index, c.event))
    op = OP_DESC[block].from_buffer_copy(op_bytes, i * net.op_desc_size)
    surface = SURFACE_DESC[block].from_buffer_copy(surf_bytes, i * net.surface_desc_size)
    return Operation(i, block, common.dependency_count, tuple(consumers), common.fused_parent.index,
                     op, surface)


def _attach_luts(port: FirmwarePortability, task: TaskDesc, net: Any, ops: list[Operation],
                 where: str) -> list[Operation]:
    if net.num_luts > MAX_LUTS:
        raise DlaError(NvError.BadValue, f"{where}: network num_luts = {net.num_luts}, at most {MAX_LUTS}")
    luts = []
    if net.num_luts:
        data = _read_array(port, task, net.lut_data_index, net.num_luts * LUT_SIZE,
                           "LUTs (lut_data_index)")
        for i in range(net.num_luts):
            lut = T.dla_lut_param_t.from_buffer_copy(data, i * LUT_SIZE)
            if not 2 <= lut.entries <= 257:
                raise DlaError(NvError.BadValue, f"{where}: LUT {i}: entries = {lut.entries}, must be 2..257")
            if not (math.isfinite(lut.start) and math.isfinite(lut.end) and lut.start < lut.end):
                raise DlaError(NvError.BadValue,
                               f"{where}: LUT {i}: start {lut.start} must be below end {lut.end}")
            luts.append(lut)
    out = []
    for op in ops:
        if op.block == dla_block_e.SDP and op.op.act == R.sdp_act_e.LUT:
            i = op.op.lut_index
            if not 0 <= i < len(luts):
                raise DlaError(NvError.BadValue,
                               f"{where}: {op.name}: lut_index {i} is outside the {len(luts)} LUTs")
            op = dataclasses.replace(op, lut=luts[i],
                                     lut_address=(net.lut_data_index, i * LUT_SIZE + LUT_TABLE))
        out.append(op)
    return out


def _check_consumers(ops: list[Operation], where: str) -> None:
    incoming = [0] * len(ops)
    for op in ops:
        for c in op.consumers:
            if not 0 <= c.index < len(ops):
                raise DlaError(NvError.BadValue,
                               f"{where}: {op.name}: consumers[{c.block.name}] index {c.index} is "
                               f"outside the {len(ops)} operations")
            if ops[c.index].block != c.block:
                raise DlaError(NvError.BadValue,
                               f"{where}: {op.name}: consumers[{c.block.name}] names "
                               f"{ops[c.index].name}, which is not a {c.block.name} operation")
            if c.index == op.index:
                raise DlaError(NvError.BadValue, f"{where}: {op.name}: consumes its own events")
            incoming[c.index] += 1
    for op in ops:
        if op.dependency_count != incoming[op.index]:
            raise DlaError(NvError.CountMismatch,
                           f"{where}: {op.name}: dependency_count is {op.dependency_count} but "
                           f"{incoming[op.index]} operation(s) name it as a consumer")


def _chains(net: Any, ops: list[Operation], where: str) -> dict[dla_block_e, tuple[int, ...]]:
    """Each block's operations in programming order: op_head, then consumers[own block]."""
    chains: dict[dla_block_e, tuple[int, ...]] = {}
    for block in dla_block_e:
        head = net.op_head[int(block)]
        chain: list[int] = []
        seen: set[int] = set()
        i = head
        while i != -1:
            if not 0 <= i < len(ops) or ops[i].block != block:
                what = "op_head" if not chain else f"{ops[chain[-1]].name}: consumers[{block.name}]"
                raise DlaError(NvError.BadValue,
                               f"{where}: {what} = {i} is not a {block.name} operation")
            if i in seen:
                raise DlaError(NvError.BadValue,
                               f"{where}: the {block.name} chain loops back to operation {i}")
            seen.add(i)
            chain.append(i)
            nxt = [c for c in ops[i].consumers if c.block == block]
            i = nxt[0].index if nxt else -1
        missing = [op.index for op in ops if op.block == block and op.index not in seen]
        if missing:
            raise DlaError(NvError.BadValue,
                           f"{where}: {block.name} operation(s) {missing} are not reachable from "
                           f"op_head[{block.name}] = {head} through consumers[{block.name}]")
        chains[block] = tuple(chain)
    return chains


def _check_fused(ops: list[Operation], chains: dict[dla_block_e, tuple[int, ...]], where: str) -> None:
    parents: dict[int, int] = {}
    for op in ops:
        flying = op.block == dla_block_e.SDP and op.op.src_mode == R.sdp_src_mode_e.FLYING
        if op.fused_parent == -1:
            if flying:
                raise DlaError(NvError.BadValue,
                               f"{where}: {op.name}: src_mode FLYING needs a fused_parent CONV operation")
            continue
        if not flying:
            raise DlaError(NvError.BadValue,
                           f"{where}: {op.name}: only an SDP operation in FLYING mode has a "
                           f"fused_parent (it has {op.fused_parent})")
        if not 0 <= op.fused_parent < len(ops) or ops[op.fused_parent].block != dla_block_e.CONV:
            raise DlaError(NvError.BadValue,
                           f"{where}: {op.name}: fused_parent {op.fused_parent} is not a CONV operation")
        if op.fused_parent in parents:
            raise DlaError(NvError.BadValue,
                           f"{where}: {op.name}: CONV operation {op.fused_parent} already feeds "
                           f"SDP operation {parents[op.fused_parent]}")
        parents[op.fused_parent] = op.index
    convs = chains[dla_block_e.CONV]
    unpaired = [c for c in convs if c not in parents]
    if unpaired:
        raise DlaError(NvError.BadValue,
                       f"{where}: CONV operation(s) {unpaired} feed no SDP operation (fused_parent)")
    flying = [i for i in chains[dla_block_e.SDP] if ops[i].fused_parent != -1]
    if [ops[i].fused_parent for i in flying] != list(convs):
        raise DlaError(NvError.BadValue,
                       f"{where}: the SDP chain takes CONV results in the order "
                       f"{[ops[i].fused_parent for i in flying]}, the CONV chain produces them in "
                       f"the order {list(convs)}")
    for sdp_index, conv_index in ((s, c) for c, s in parents.items()):
        for a, b in ((conv_index, sdp_index), (sdp_index, conv_index)):
            for c in ops[a].consumers:
                if c.index == b and c.event == T.dla_event_e.OP_COMPLETED:
                    raise DlaError(NvError.BadValue,
                                   f"{where}: {ops[b].name} waits for {ops[a].name} to complete, but the "
                                   "two run as one fused pair: that would never happen")


def _check_acyclic(ops: list[Operation], chains: dict[dla_block_e, tuple[int, ...]], where: str) -> None:
    """Every operation can complete: no cycle through consumer edges and chain order."""
    # A CONV operation and its SDP run as one: merge them into the SDP's node.
    node = list(range(len(ops)))
    for op in ops:
        if op.fused_parent != -1:
            node[op.fused_parent] = op.index
    edges: dict[int, set[int]] = {i: set() for i in set(node)}
    for op in ops:
        for c in op.consumers:
            if node[op.index] != node[c.index]:
                edges[node[op.index]].add(node[c.index])
    for chain in chains.values():
        for a, b in itertools.pairwise(chain):
            if node[a] != node[b]:
                edges[node[a]].add(node[b])
    indegree = dict.fromkeys(edges, 0)
    for targets in edges.values():
        for t in targets:
            indegree[t] += 1
    ready = deque(i for i, d in indegree.items() if d == 0)
    seen = 0
    while ready:
        i = ready.popleft()
        seen += 1
        for t in edges[i]:
            indegree[t] -= 1
            if indegree[t] == 0:
                ready.append(t)
    if seen != len(edges):
        stuck = sorted(i for i, d in indegree.items() if d > 0)
        raise DlaError(NvError.BadValue,
                       f"{where}: the dependency graph has a cycle through operation(s) {stuck[:8]}: "
                       "they would wait for each other forever")
