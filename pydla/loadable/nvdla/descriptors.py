"""A DLA task's firmware descriptors, decoded and checked: what the engine scheduler and the device read.

:func:`decode_dla_task` reads, through the task's address list, the network descriptor (index 0), the
dependency graph (``num_operations`` dla_common_op_desc), each operation's descriptor and surface
descriptor (fixed slots of DLA_OPERATION_CONTAINER_SIZE and DLA_SURFACE_CONTAINER_SIZE bytes, read as
its block's struct: the firmware interface version of the network descriptor's blob says which layout,
with data-cube offsets from 0.12 on, without before) and the LUTs, into the generated ``dla_interface``
records, and checks every index and enum the scheduler or the device will use (opcheck.py has the
per-block rules):

- the network's address indices (operation, surface, dependency graph; LUTs when num_luts > 0; ROI
  array and surface when dynamic_roi; statistics unless -1) name entries of the task's address list,
  num_addresses is at most that list's length, num_rois >= 1;
- op_head[b] is -1 or an operation of block b; each operation's op_type is a block, its roi_index
  below num_rois; consumers[b] is -1 or an operation of block b, with a known event; fused_parent is
  -1 or an operation; dependency_count equals the events the graph sends it (its producers' consumer
  entries plus the operations whose fused parent it is), else it would never start or start early.

The operation's own ``index`` field is not checked: NVDLA's firmware sets it (NVIDIA's compiler leaves
other values there).

Usage::

    net = decode_dla_task(lo, lo.task_list[0])
    for op in net.operations: print(op.block.name, op.precision, op.consumers)
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.memory import read_task_memory, task_address
from pydla.loadable.nvdla.opcheck import check_operation, precision_of

OP_DESC = {I.dla_op_e.BDMA: I.dla_bdma_op_desc, I.dla_op_e.CONV: I.dla_conv_op_desc,
           I.dla_op_e.SDP: I.dla_sdp_op_desc, I.dla_op_e.PDP: I.dla_pdp_op_desc,
           I.dla_op_e.CDP: I.dla_cdp_op_desc, I.dla_op_e.RUBIK: I.dla_rubik_op_desc}
SURFACE_DESC = {I.dla_op_e.BDMA: I.dla_bdma_surface_desc, I.dla_op_e.CONV: I.dla_conv_surface_desc,
                I.dla_op_e.SDP: I.dla_sdp_surface_desc, I.dla_op_e.PDP: I.dla_pdp_surface_desc,
                I.dla_op_e.CDP: I.dla_cdp_surface_desc, I.dla_op_e.RUBIK: I.dla_rubik_surface_desc}
# Firmware interfaces before 0.12: data cubes without an offset (dla_interface.yaml's _v0_11 structs).
SURFACE_DESC_V0_11 = {I.dla_op_e.BDMA: I.dla_bdma_surface_desc,
                      I.dla_op_e.CONV: I.dla_conv_surface_desc_v0_11,
                      I.dla_op_e.SDP: I.dla_sdp_surface_desc_v0_11,
                      I.dla_op_e.PDP: I.dla_pdp_surface_desc_v0_11,
                      I.dla_op_e.CDP: I.dla_cdp_surface_desc_v0_11,
                      I.dla_op_e.RUBIK: I.dla_rubik_surface_desc_v0_11}
CUBE_OFFSET_SINCE = M.Version(0, 12, 0)  # the firmware interface that gave dla_data_cube its offset
NEWEST_INTERFACE = M.Version(0, 12, 5)
COMMON_SIZE = ctypes.sizeof(I.dla_common_op_desc)
LUT_SIZE = ctypes.sizeof(I.dla_lut_param)
NETWORK_SIZE = ctypes.sizeof(I.dla_network_desc)


@dataclass(frozen=True)
class Edge:
    """The graph sends ``event`` from one operation to operation ``index`` (a consumer)."""

    index: int
    event: I.dla_op_event_e


@dataclass(frozen=True)
class Operation:
    """One operation: its block, its place in the graph and its descriptors (generated records)."""

    index: int
    block: I.dla_op_e
    roi_index: int
    common: Any  # dla_common_op_desc
    op_desc: Any  # dla_<block>_op_desc
    surface_desc: Any  # dla_<block>_surface_desc
    consumers: tuple[Edge, ...]
    fused_parent: Edge | None

    @property
    def precision(self) -> str:
        """The input precision (and the output's when it differs), e.g. ``INT8`` or ``INT16->INT8``."""
        return precision_of(self.block, self.op_desc)


@dataclass(frozen=True)
class DlaNetwork:
    """A DLA task's network: its descriptor, operations in graph order and LUTs."""

    task_id: int
    interface_version: M.Version  # of the firmware interface, from the network descriptor's blob
    network: Any  # dla_network_desc
    operations: tuple[Operation, ...]
    luts: tuple[Any, ...]  # dla_lut_param

    def heads(self) -> dict[str, int]:
        """The first operation of each block that has one."""
        return {I.dla_op_e(b).name: int(h) for b, h in enumerate(self.network.op_head) if h != -1}


def _bad(where: str, message: str, code: NvError = NvError.BadValue) -> DlaError:
    return DlaError(code, f"NVDLA Loadable: {where}: {message}")


def _address_index(value: int, task: M.TaskListEntry, where: str) -> None:
    if not 0 <= value < len(task.address_list):
        raise _bad(where, f"{value} is not an index of task {task.id}'s address list "
                          f"({len(task.address_list)} entries)")


def _check_network(net: Any, task: M.TaskListEntry, where: str) -> None:
    if net.num_operations == 0:
        return  # the firmware runs nothing and reads nothing more
    for name in ("operation_desc_index", "surface_desc_index", "dependency_graph_index"):
        _address_index(getattr(net, name), task, f"{where}.{name}")
    if net.num_luts:
        _address_index(net.lut_data_index, task, f"{where}.lut_data_index")
    if net.dynamic_roi:
        _address_index(net.roi_array_index, task, f"{where}.roi_array_index")
        _address_index(net.surface_index, task, f"{where}.surface_index")
    if net.stat_list_index != -1:
        _address_index(net.stat_list_index, task, f"{where}.stat_list_index")
    if net.num_addresses > len(task.address_list):
        raise _bad(f"{where}.num_addresses", f"{net.num_addresses}, more than task {task.id}'s "
                                             f"{len(task.address_list)} address-list entries")
    if net.num_rois < 1:
        raise _bad(f"{where}.num_rois", f"{net.num_rois}: at least one")


def _edge(c: Any, net: Any, blocks: list[int], block: int | None, where: str) -> Edge | None:
    """A consumer (or fused parent) entry: None for index -1, else checked."""
    if c.index == -1:
        return None
    if not 0 <= c.index < net.num_operations:
        raise _bad(f"{where}.index", f"{c.index} is not an operation (num_operations {net.num_operations})")
    if block is not None and blocks[c.index] != block:
        raise _bad(f"{where}.index", f"operation {c.index} is a {I.dla_op_e(blocks[c.index]).name} "
                                     f"operation, "
                                     f"not {I.dla_op_e(block).name}")
    if c.event not in I.dla_op_event_e._value2member_map_:
        raise _bad(f"{where}.event", f"{c.event} is not an event (1..5: OP_COMPLETED .. CDMA_DT_DONE)")
    return Edge(int(c.index), I.dla_op_event_e(c.event))


def _graph(lo: M.NvdlaLoadable, task: M.TaskListEntry, net: Any, where: str) -> list[Any]:
    n = net.num_operations
    raw = read_task_memory(lo, task, net.dependency_graph_index, 0, n * COMMON_SIZE, f"{where} dependency "
                                                                                     f"graph")
    commons = [I.dla_common_op_desc.from_buffer_copy(raw, i * COMMON_SIZE) for i in range(n)]
    for i, c in enumerate(commons):
        if c.op_type not in I.dla_op_e._value2member_map_:
            raise _bad(f"{where}.operations[{i}].op_type", f"{c.op_type} is not a block (0..5: BDMA .. "
                                                           f"RUBIK)")
        if not 0 <= c.roi_index < net.num_rois:
            raise _bad(f"{where}.operations[{i}].roi_index", f"{c.roi_index}: num_rois is {net.num_rois}")
    for b, head in enumerate(net.op_head):
        if head == -1:
            continue
        if not 0 <= head < n or commons[head].op_type != b:
            raise _bad(f"{where}.op_head[{b}]", f"{head} is not a {I.dla_op_e(b).name} operation "
                                                f"(num_operations {n})")
    return commons


def interface_version(lo: M.NvdlaLoadable, task: M.TaskListEntry) -> M.Version:
    """The firmware interface a DLA task's descriptors follow: the version of the blob that fills its
    network descriptor (0.0.0 when none says). DlaError for one newer than NEWEST_INTERFACE."""
    address = task_address(lo, task, 0, f"task_list[{task.id}] network descriptor")
    mem = lo.memory_list[address.mem_id]
    version = M.Version(0, 0, 0)
    for name, at in zip(mem.contents, mem.offsets, strict=True):
        blob = lo.blob(name)
        if blob is not None and at <= address.offset < at + blob.size:
            version = blob.version
    newest = NEWEST_INTERFACE
    if (version.major, version.minor) > (newest.major, newest.minor):
        raise _bad(f"task_list[{task.id}]", f"firmware interface {version} (its network descriptor's blob): "
                                            f"this reader knows up to {newest.major}.{newest.minor}.x (the "
                                            f"loadable "
                                            "is newer)", NvError.VersionMismatch)
    return version


def _operations(lo: M.NvdlaLoadable, task: M.TaskListEntry, net: Any, commons: list[Any],
                version: M.Version, where: str) -> tuple[Operation, ...]:
    n = net.num_operations
    blocks = [int(c.op_type) for c in commons]
    ops_raw = read_task_memory(lo, task, net.operation_desc_index, 0, n * I.DLA_OPERATION_CONTAINER_SIZE,
                               f"{where} operation descriptors")
    surf_raw = read_task_memory(lo, task, net.surface_desc_index, 0, n * I.DLA_SURFACE_CONTAINER_SIZE,
                                f"{where} surface descriptors")
    with_offset = (version.major, version.minor) >= (CUBE_OFFSET_SINCE.major, CUBE_OFFSET_SINCE.minor)
    surface_desc = SURFACE_DESC if with_offset else SURFACE_DESC_V0_11
    incoming = [0] * n
    operations = []
    for i, c in enumerate(commons):
        at = f"{where}.operations[{i}]"
        consumers = []
        for b in range(I.DLA_OP_NUM):
            edge = _edge(c.consumers[b], net, blocks, b, f"{at}.consumers[{b}]")
            if edge is not None:
                consumers.append(edge)
                incoming[edge.index] += 1
        parent = _edge(c.fused_parent, net, blocks, None, f"{at}.fused_parent")
        if parent is not None:
            incoming[parent.index] += 1  # a fused child enables its parent
        block = I.dla_op_e(c.op_type)
        op_desc = OP_DESC[block].from_buffer_copy(ops_raw, i * I.DLA_OPERATION_CONTAINER_SIZE)
        surface = surface_desc[block].from_buffer_copy(surf_raw, i * I.DLA_SURFACE_CONTAINER_SIZE)
        check_operation(lo, task, net, block, op_desc, surface, at)
        operations.append(Operation(i, block, int(c.roi_index), c, op_desc, surface, tuple(consumers),
                                    parent))
    for i, c in enumerate(commons):
        if c.dependency_count != incoming[i]:
            raise _bad(f"{where}.operations[{i}].dependency_count",
                       f"{c.dependency_count}, but the graph sends it {incoming[i]} event(s): it would "
                       + ("never start" if c.dependency_count > incoming[i] else "start too early"))
    return tuple(operations)


def _luts(lo: M.NvdlaLoadable, task: M.TaskListEntry, net: Any, where: str) -> tuple[Any, ...]:
    if net.num_operations == 0 or net.num_luts == 0:
        return ()
    raw = read_task_memory(lo, task, net.lut_data_index, 0, net.num_luts * LUT_SIZE, f"{where} LUTs")
    luts = tuple(I.dla_lut_param.from_buffer_copy(raw, i * LUT_SIZE) for i in range(net.num_luts))
    for i, lut in enumerate(luts):
        for name, enum in (("method", I.lut_method_e), ("hybrid_priority", I.lut_pri_e),
                           ("underflow_priority", I.lut_pri_e), ("overflow_priority", I.lut_pri_e)):
            if getattr(lut, name) not in enum._value2member_map_:
                raise _bad(f"{where}.luts[{i}].{name}", f"{getattr(lut, name)} is not a {enum.__name__}")
    return luts


def decode_dla_task(lo: M.NvdlaLoadable, task: M.TaskListEntry) -> DlaNetwork:
    """The checked descriptors of DLA task ``task``; DlaError naming the first bad field."""
    where = f"task_list[{task.id}]"
    if task.interface != M.Interface.DLA1:
        raise _bad(f"{where}.interface", f"{task.interface.name}: only DLA1 tasks carry dla_interface "
                                         "descriptors", NvError.NotSupported)
    net = I.dla_network_desc.from_buffer_copy(
        read_task_memory(lo, task, 0, 0, NETWORK_SIZE, f"{where} network descriptor"))
    version = interface_version(lo, task)
    _check_network(net, task, f"{where}.network")
    if net.num_operations == 0:
        return DlaNetwork(task.id, version, net, (), ())
    commons = _graph(lo, task, net, where)
    luts = _luts(lo, task, net, where)
    operations = _operations(lo, task, net, commons, version, where)
    for op in operations:
        lut_index = getattr(op.op_desc, "lut_index", -1)
        uses_lut = op.block == I.dla_op_e.CDP or (op.block == I.dla_op_e.SDP and any(
            getattr(op.op_desc, u).act == I.activation_e.LUT for u in ("x1_op", "x2_op", "y_op")))
        if uses_lut and not 0 <= lut_index < len(luts):
            raise _bad(f"{where}.operations[{op.index}].op_desc.lut_index",
                       f"{lut_index} is not a LUT (num_luts {len(luts)})")
    return DlaNetwork(task.id, version, net, operations, luts)
