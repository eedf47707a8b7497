"""The per-block rules of NVDLA's operation and surface descriptors (dla_interface).

Every enum a block's registers take from its descriptor (precisions, modes, formats, SDP units, pool
sizes, LUT use), every address index of a data cube or BDMA transfer (an entry of the task's address
list, or -1 for a cube not in memory), and each cube's ``offset + size`` within the memory behind
its address-list entry. BDMA: at most NUM_MAX_BDMA_OPS transfers, the same count in both descriptors.
A DlaError names the field: ``task_list[0].operations[1].surface_desc.dst_data.address: 9 is not an
index of task 0's address list (7 entries)``.

Usage::

    check_operation(lo, task, net, I.dla_op_e.CONV, op_desc, surface_desc, "task_list[0].operations[0]")
"""

from __future__ import annotations

import enum
from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.memory import task_address

# Per block: (field of its op desc, enum it holds).
_OP_ENUMS: dict[I.dla_op_e, tuple[tuple[str, type[enum.IntEnum]], ...]] = {
    I.dla_op_e.BDMA: (),
    I.dla_op_e.CONV: (("conv_mode", I.dla_conv_mode), ("data_format", I.format_e), ("pixel_mapping", I.map_e),
                      ("weight_format", I.weight_format_e), ("mean_format", I.mean_format_e),
                      ("pixel_override", I.pixel_override_e), ("in_precision", I.precision_e),
                      ("out_precision", I.precision_e)),
    I.dla_op_e.SDP: (("src_precision", I.precision_e), ("dst_precision", I.precision_e),
                     ("conv_mode", I.dla_conv_mode)),
    I.dla_op_e.PDP: (("pool_mode", I.pool_mode_e), ("pool_width", I.pool_e), ("pool_height", I.pool_e),
                     ("precision", I.precision_e)),
    I.dla_op_e.CDP: (("in_precision", I.precision_e), ("out_precision", I.precision_e)),
    I.dla_op_e.RUBIK: (("mode", I.dla_rubik_mode), ("precision", I.precision_e)),
}
_SDP_UNIT_ENUMS = (("alu_type", I.sdp_alu_op_e), ("type", I.sdp_op_e), ("mode", I.sdp_op_mode_e),
                   ("act", I.activation_e), ("precision", I.precision_e))
# Per block: the data cubes of its surface descriptor that must be in memory (the rest may be -1).
_REQUIRED_CUBES = {I.dla_op_e.CONV: ("weight_data",), I.dla_op_e.SDP: ("dst_data",),
                   I.dla_op_e.PDP: ("src_data", "dst_data"), I.dla_op_e.CDP: ("src_data", "dst_data"),
                   I.dla_op_e.RUBIK: ("src_data", "dst_data")}


def _bad(where: str, message: str, code: NvError = NvError.BadValue) -> DlaError:
    return DlaError(code, f"NVDLA Loadable: {where}: {message}")


def _enum(record: Any, name: str, cls: type[enum.IntEnum], where: str) -> None:
    value = getattr(record, name)
    if value not in cls._value2member_map_:
        names = ", ".join(f"{m.name} {m.value}" for m in cls)
        raise _bad(f"{where}.{name}", f"{value} is not one of {names}")


def _in_memory(lo: M.NvdlaLoadable, task: M.TaskListEntry, index: int, offset: int, size: int,
               where: str) -> None:
    """Address index ``index`` of the task names an entry, and ``offset + size`` lies in its memory."""
    if not 0 <= index < len(task.address_list):
        raise _bad(f"{where}.address", f"{index} is not an index of task {task.id}'s address list "
                                       f"({len(task.address_list)} entries)")
    address = task_address(lo, task, index, where)
    mem = lo.memory_list[address.mem_id]
    if address.offset + offset + size > mem.size:
        raise _bad(where, f"offset {offset} + size {size} from address index {index} (memory "
                          f"{address.mem_id} "
                          f"at {address.offset}) runs past the end of its {mem.size} "
                          f"bytes", NvError.InvalidSize)


def _cube(lo: M.NvdlaLoadable, task: M.TaskListEntry, cube: Any, required: bool, where: str) -> None:
    _enum(cube, "type", I.dla_mem_e, where)
    if cube.type == I.dla_mem_e.HW or (cube.address == -1 and not required):
        return  # on the fly from or to another block, or not used
    _in_memory(lo, task, cube.address, getattr(cube, "offset", 0), cube.size, where)


def _bdma(lo: M.NvdlaLoadable, task: M.TaskListEntry, op: Any, surface: Any, where: str) -> None:
    if op.num_transfers > I.NUM_MAX_BDMA_OPS:
        raise _bad(f"{where}.op_desc.num_transfers", f"{op.num_transfers}, more than NUM_MAX_BDMA_OPS "
                                                     f"{I.NUM_MAX_BDMA_OPS}", NvError.InvalidSize)
    if surface.num_transfers != op.num_transfers:
        raise _bad(f"{where}.surface_desc.num_transfers", f"{surface.num_transfers}, but the operation "
                                                          f"descriptor says "
                                                          f"{op.num_transfers}", NvError.CountMismatch)
    for name in ("source_type", "destination_type"):
        if getattr(surface, name) not in I.dla_mem_e._value2member_map_:
            raise _bad(f"{where}.surface_desc.{name}", f"{getattr(surface, name)} is not a dla_mem_e")
    for i in range(op.num_transfers):
        t = surface.transfers[i]
        for name in ("source_address", "destination_address"):
            index = getattr(t, name)
            if not 0 <= index < len(task.address_list):
                raise _bad(f"{where}.surface_desc.transfers[{i}].{name}",
                           f"{index} is not an index of task {task.id}'s address list "
                           f"({len(task.address_list)} entries)")


def check_operation(lo: M.NvdlaLoadable, task: M.TaskListEntry, net: Any, block: I.dla_op_e, op: Any,
                    surface: Any, where: str) -> None:
    """DlaError unless the operation's descriptors follow the rules of the module's list."""
    for name, cls in _OP_ENUMS[block]:
        _enum(op, name, cls, f"{where}.op_desc")
    if block == I.dla_op_e.BDMA:
        _bdma(lo, task, op, surface, where)
        return
    if block == I.dla_op_e.SDP:
        for unit in ("x1_op", "x2_op", "y_op"):
            sdp_op = getattr(op, unit)
            if sdp_op.enable:
                for name, cls in _SDP_UNIT_ENUMS:
                    _enum(sdp_op, name, cls, f"{where}.op_desc.{unit}")
    required: tuple[str, ...]
    if block == I.dla_op_e.CONV and op.weight_format == I.weight_format_e.COMPRESSED:
        required = ("weight_data", "wmb_data", "wgs_data")
    else:
        required = _REQUIRED_CUBES[block]
    for field_name, _ in surface._fields_:
        cube = getattr(surface, field_name)
        if isinstance(cube, (I.dla_data_cube, I.dla_data_cube_v0_11)):
            _cube(lo, task, cube, field_name in required, f"{where}.surface_desc.{field_name}")


def precision_of(block: I.dla_op_e, op: Any) -> str:
    """A block's input precision, and ``->`` its output's when that differs (``-`` for BDMA)."""
    pairs = {I.dla_op_e.CONV: ("in_precision", "out_precision"),
             I.dla_op_e.SDP: ("src_precision", "dst_precision"),
             I.dla_op_e.CDP: ("in_precision", "out_precision"), I.dla_op_e.PDP: ("precision", "precision"),
             I.dla_op_e.RUBIK: ("precision", "precision")}
    if block not in pairs:
        return "-"

    def name(value: int) -> str:
        return I.precision_e(value).name if value in I.precision_e._value2member_map_ else str(value)

    src, dst = (name(getattr(op, f)) for f in pairs[block])
    return src if src == dst else f"{src}->{dst}"
