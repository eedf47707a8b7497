"""A DLA task's NVDLA descriptors read and checked into the engine scheduler's own graph.

As ``dla_execute_task`` reads them: the network descriptor at address-list index 0; the dependency
graph (``num_operations`` dla_common_op_desc), the operation and surface containers (116 and 644
bytes a slot) and the LUTs (700 bytes each) from the entries the network names. The surface
layout follows the task's firmware interface version (data cubes of 28 bytes before 0.12, of 32
with an ``offset`` from 0.12). Everything is copied, then checked before any register is written:
indices against their lists, op types against the blocks the device has, consumer events,
dependency counts against the events the graph sends, the per-block chains (op_head, then
consumers[own block]), the fused CONV->SDP pairs, no cycle, and each operation's fields
(:mod:`pydla.firmware.nvdla.checks`).

NVDLA's fused_parent is an edge like a consumer (the SDP's OP_ENABLED decrements its CONV): it
becomes one of the SDP's consumers, so the scheduler's event logic needs nothing NVDLA-specific.
"""

from __future__ import annotations

import ctypes
from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.firmware.graph import (
    Consumer,
    Operation,
    TaskGraph,
    _chains,
    _check_acyclic,
    _check_consumers,
    _read_array,
    _read_struct,
)
from pydla.firmware.interface import DeviceCaps, FirmwarePortability, NvdlaFacts, TaskDesc
from pydla.firmware.nvdla.checks import check_operation

OP_DESC = {dla_block_e.BDMA: I.dla_bdma_op_desc, dla_block_e.CONV: I.dla_conv_op_desc,
           dla_block_e.SDP: I.dla_sdp_op_desc, dla_block_e.PDP: I.dla_pdp_op_desc,
           dla_block_e.CDP: I.dla_cdp_op_desc, dla_block_e.RUBIK: I.dla_rubik_op_desc}
SURFACE_DESC = {dla_block_e.BDMA: I.dla_bdma_surface_desc, dla_block_e.CONV: I.dla_conv_surface_desc,
                dla_block_e.SDP: I.dla_sdp_surface_desc, dla_block_e.PDP: I.dla_pdp_surface_desc,
                dla_block_e.CDP: I.dla_cdp_surface_desc, dla_block_e.RUBIK: I.dla_rubik_surface_desc}
SURFACE_DESC_V0_11 = {dla_block_e.BDMA: I.dla_bdma_surface_desc,
                      dla_block_e.CONV: I.dla_conv_surface_desc_v0_11,
                      dla_block_e.SDP: I.dla_sdp_surface_desc_v0_11,
                      dla_block_e.PDP: I.dla_pdp_surface_desc_v0_11,
                      dla_block_e.CDP: I.dla_cdp_surface_desc_v0_11,
                      dla_block_e.RUBIK: I.dla_rubik_surface_desc_v0_11}
CUBE_OFFSET_SINCE = (0, 12)  # the interface that gave dla_data_cube its offset
OP_SLOT, SURFACE_SLOT = I.DLA_OPERATION_CONTAINER_SIZE, I.DLA_SURFACE_CONTAINER_SIZE
COMMON_SIZE = ctypes.sizeof(I.dla_common_op_desc)
LUT_SIZE = ctypes.sizeof(I.dla_lut_param)
EVENTS = frozenset(int(e) for e in I.dla_op_event_e)
MAX_LUTS = 1024
PROGRAMMED, ENABLED = int(I.dla_op_event_e.OP_PROGRAMMED), int(I.dla_op_event_e.OP_ENABLED)


def facts_of(config: DeviceCaps) -> NvdlaFacts:
    facts = getattr(config, "nvdla", None)
    if not isinstance(facts, NvdlaFacts):
        raise DlaError(NvError.NotSupported, f"device '{config.name}' is not an NVDLA configuration: it "
                                             "cannot run NVDLA firmware descriptors (a task with an "
                                             "nvdla_interface)")
    return facts


def has_cube_offset(version: tuple[int, int, int]) -> bool:
    """Whether interface ``version``'s data cubes carry an ``offset`` (0.12 on)."""
    return (version[0], version[1]) >= CUBE_OFFSET_SINCE


def load_nvdla_task(port: FirmwarePortability, task: TaskDesc, config: DeviceCaps) -> TaskGraph:
    """Copy and check the NVDLA descriptors of ``task``; raise DlaError naming the first bad field."""
    facts = facts_of(config)
    where = f"task {task.task_id}"
    version = task.nvdla_interface
    if version is None:
        raise DlaError(NvError.BadParameter,
                       f"{where}: an NVDLA task needs its firmware interface version (nvdla_interface, "
                       "the network descriptor blob's version): its descriptors' layout depends on it")
    if version[0] != 0 or not 10 <= version[1] <= 12:
        raise DlaError(NvError.NotSupported, f"{where}: firmware interface {'.'.join(map(str, version))}: "
                                             "pydla reads 0.10 to 0.12")
    net = _read_struct(port, task, 0, 0, I.dla_network_desc, "network descriptor")
    n = net.num_operations
    if n == 0:  # dla_execute_task: nothing to do, the task is complete
        return TaskGraph(net, (), {b: () for b in dla_block_e})
    if net.num_addresses > len(task.addresses):
        raise DlaError(NvError.CountMismatch, f"{where}: network num_addresses = {net.num_addresses}, the "
                                              f"task's address list has {len(task.addresses)} entries")
    if net.dynamic_roi or net.num_rois != 1:
        raise DlaError(NvError.NotSupported, f"{where}: network dynamic_roi = {net.dynamic_roi}, num_rois = "
                                             f"{net.num_rois}: pydla runs one static ROI")
    for name in ("operation_desc_index", "surface_desc_index", "dependency_graph_index"):
        task.entry(getattr(net, name), f"{where}: network {name}")
    graph = _read_array(port, task, net.dependency_graph_index, n * COMMON_SIZE,
                        "dependency graph (dependency_graph_index)")
    op_bytes = _read_array(port, task, net.operation_desc_index, n * OP_SLOT,
                           "operation descriptors (operation_desc_index)")
    surf_bytes = _read_array(port, task, net.surface_desc_index, n * SURFACE_SLOT,
                             "surface descriptors (surface_desc_index)")
    luts = _luts(port, task, net, where)
    surfaces = SURFACE_DESC if has_cube_offset(version) else SURFACE_DESC_V0_11
    commons = [I.dla_common_op_desc.from_buffer_copy(graph, i * COMMON_SIZE) for i in range(n)]
    blocks = [_block(i, c, config, where) for i, c in enumerate(commons)]
    ops = []
    for i, common in enumerate(commons):
        block = blocks[i]
        desc = OP_DESC[block].from_buffer_copy(op_bytes, i * OP_SLOT)
        surface = surfaces[block].from_buffer_copy(surf_bytes, i * SURFACE_SLOT)
        consumers, fused = _edges(i, common, blocks, where)
        lut, lut_address = None, (-1, 0)
        lut_index = getattr(desc, "lut_index", -1)
        if block in (dla_block_e.SDP, dla_block_e.CDP) and lut_index != -1:
            if not 0 <= lut_index < len(luts):
                raise DlaError(NvError.BadValue, f"{where}: operation {i} ({block.name}): lut_index "
                                                 f"{lut_index} is outside the {len(luts)} LUTs (num_luts)")
            lut, lut_address = luts[lut_index], (net.lut_data_index, lut_index * LUT_SIZE)
        ops.append(Operation(i, block, common.dependency_count, consumers, fused, desc, surface, lut,
                             lut_address))
    _check_consumers(ops, where)
    chains = _chains(net, ops, where)
    _check_fused(ops, where)
    _check_acyclic(ops, chains, where)
    for op in ops:
        check_operation(op, task, facts, where)
    return TaskGraph(net, tuple(ops), chains)


def _luts(port: FirmwarePortability, task: TaskDesc, net: Any, where: str) -> list[Any]:
    if net.num_luts == 0:
        return []
    if net.num_luts > MAX_LUTS:
        raise DlaError(NvError.BadValue, f"{where}: network num_luts = {net.num_luts}, at most {MAX_LUTS}")
    task.entry(net.lut_data_index, f"{where}: network lut_data_index")
    data = _read_array(port, task, net.lut_data_index, net.num_luts * LUT_SIZE, "LUTs (lut_data_index)")
    luts = []
    for i in range(net.num_luts):
        lut = I.dla_lut_param.from_buffer_copy(data, i * LUT_SIZE)
        for name in ("hybrid_priority", "underflow_priority", "overflow_priority", "method"):
            if getattr(lut, name) > 1:
                raise DlaError(NvError.BadValue, f"{where}: LUT {i}: {name} = {getattr(lut, name)} (0 or 1)")
        luts.append(lut)
    return luts


def _block(i: int, common: Any, config: DeviceCaps, where: str) -> dla_block_e:
    if common.op_type not in dla_block_e._value2member_map_:
        raise DlaError(NvError.BadValue, f"{where}: operation {i}: op_type {common.op_type} is not a "
                                         "processor (BDMA 0 .. RUBIK 5)")
    block = dla_block_e(common.op_type)
    if block not in config.blocks:
        raise DlaError(NvError.NotSupported, f"{where}: operation {i} needs the {block.name} block, which "
                                             f"device '{config.name}' does not have")
    return block


def _edges(i: int, common: Any, blocks: list[dla_block_e], where: str
           ) -> tuple[tuple[Consumer, ...], int]:
    """The operation's consumers and, as one more consumer, its fused parent (index, or -1)."""
    at = f"{where}: operation {i} ({blocks[i].name})"
    out = []
    for b in range(I.DLA_OP_NUM):
        c = common.consumers[b]
        if c.index == -1:
            continue
        name = f"consumers[{dla_block_e(b).name}]"
        if not 0 <= c.index < len(blocks):
            raise DlaError(NvError.BadValue, f"{at}: {name}.index {c.index} is outside the {len(blocks)} "
                                             "operations")
        if c.event not in EVENTS:
            raise DlaError(NvError.BadValue, f"{at}: {name}.event {c.event} is not an event (1..5)")
        out.append(Consumer(dla_block_e(b), int(c.index), int(c.event)))
    fused = common.fused_parent
    if fused.index == -1:
        return tuple(out), -1
    if not 0 <= fused.index < len(blocks):
        raise DlaError(NvError.BadValue, f"{at}: fused_parent.index {fused.index} is outside the "
                                         f"{len(blocks)} operations")
    if fused.event not in EVENTS:
        raise DlaError(NvError.BadValue, f"{at}: fused_parent.event {fused.event} is not an event (1..5)")
    out.append(Consumer(blocks[fused.index], int(fused.index), int(fused.event)))
    return tuple(out), int(fused.index)


def _check_fused(ops: list[Operation], where: str) -> None:
    """CACC hands every CONV result to the SDP on the fly: each CONV is the fused parent of exactly one
    SDP reading from HW, and only an SDP has a fused parent."""
    parent_of: dict[int, int] = {}
    for op in ops:
        if op.fused_parent == -1:
            if op.block == dla_block_e.SDP and op.surface.src_data.type == I.dla_mem_e.HW:
                raise DlaError(NvError.BadValue, f"{where}: {op.name}: src_data.type HW (on the fly) needs a "
                                                 "fused_parent CONV operation")
            continue
        parent = ops[op.fused_parent]
        if op.block != dla_block_e.SDP or parent.block != dla_block_e.CONV:
            raise DlaError(NvError.BadValue, f"{where}: {op.name}: fused_parent {op.fused_parent} "
                                             f"({parent.block.name}): only an SDP has one, a CONV")
        if op.surface.src_data.type != I.dla_mem_e.HW:
            raise DlaError(NvError.BadValue, f"{where}: {op.name}: has fused_parent {op.fused_parent} but "
                                             f"src_data.type {op.surface.src_data.type} is not HW (2)")
        if op.fused_parent in parent_of:
            raise DlaError(NvError.BadValue, f"{where}: CONV operation {op.fused_parent} is the fused_parent "
                                             f"of SDP operations {parent_of[op.fused_parent]} and {op.index}")
        parent_of[op.fused_parent] = op.index
    for conv, sdp in parent_of.items():
        # The pair runs as one: the SDP is enabled first, the CONV after it. The SDP may wait for the
        # CONV's programming only, the CONV for the SDP's programming or enabling; anything else waits
        # for what cannot happen before it (NVIDIA's firmware would hang).
        for a, b, allowed in ((conv, sdp, (PROGRAMMED,)), (sdp, conv, (PROGRAMMED, ENABLED))):
            for c in ops[a].consumers:
                if c.index == b and c.event not in allowed:
                    raise DlaError(NvError.BadValue,
                                   f"{where}: {ops[b].name} waits for event {I.dla_op_event_e(c.event).name} "
                                   f"of {ops[a].name}, its fused pair: it would wait forever")
    orphans = [op.index for op in ops if op.block == dla_block_e.CONV and op.index not in parent_of]
    if orphans:
        raise DlaError(NvError.BadValue, f"{where}: CONV operation(s) {orphans} feed no SDP (no SDP names "
                                         "them as fused_parent): CACC's output would go nowhere")
