"""A DLA task's firmware descriptors decoded and checked (samples from pydla's writer)."""

from __future__ import annotations

import ctypes
import dataclasses

import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_interface as I
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.descriptors import decode_dla_task
from pydla.loadable.nvdla.reader import read_nvdla_loadable
from pydla.loadable.nvdla.samples import REGRESSION_INTERFACE, bdma_loadable, conv_sdp_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable


def test_conv_sdp_decodes() -> None:
    lo = read_nvdla_loadable(write_nvdla_loadable(conv_sdp_loadable()))
    net = decode_dla_task(lo, lo.task_list[0])
    assert net.interface_version == M.Version(0, 12, 5)
    assert [op.block for op in net.operations] == [I.dla_op_e.CONV, I.dla_op_e.SDP]
    conv, sdp = net.operations
    assert conv.precision == "INT8" and conv.consumers[0].index == 1
    assert conv.consumers[0].event == I.dla_op_event_e.OP_PROGRAMMED
    assert sdp.fused_parent is not None and sdp.fused_parent.index == 0
    assert isinstance(conv.surface_desc, I.dla_conv_surface_desc)
    assert conv.surface_desc.src_data.width == 8 and conv.surface_desc.src_data.channel == 16
    assert net.heads() == {"CONV": 0, "SDP": 1}


def test_interface_0_10_reads_cubes_without_offsets() -> None:
    lo = conv_sdp_loadable(REGRESSION_INTERFACE, int16=True)
    net = decode_dla_task(lo, lo.task_list[0])
    conv = net.operations[0]
    assert isinstance(conv.surface_desc, I.dla_conv_surface_desc_v0_11)
    assert conv.precision == "INT16" and conv.surface_desc.dst_data.type == I.dla_mem_e.HW


def _patch(lo: M.NvdlaLoadable, blob_name: str, record_offset: int, cls, field: str,
           value) -> M.NvdlaLoadable:
    """``lo`` with one field of the record at ``record_offset`` of a blob set to ``value``."""
    blobs = list(lo.blobs)
    i = next(k for k, b in enumerate(blobs) if b.name == blob_name)
    data = bytearray(blobs[i].data)
    record = cls.from_buffer(data, record_offset)
    target, _, leaf = field.rpartition(".")
    obj = record
    for part in filter(None, target.split(".")):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    if leaf.isdigit():
        obj[int(leaf)] = value
    else:
        setattr(obj, leaf, value)
    blobs[i] = dataclasses.replace(blobs[i], data=bytes(data))
    return dataclasses.replace(lo, blobs=tuple(blobs))


OPS, SURFS, DEPS, NET = "m1_OpList_i1", "m2_SurfList_i2", "m3_DEPGraph_i3", "m0_NetworkDesc_i0"
COMMON = ctypes.sizeof(I.dla_common_op_desc)


@pytest.mark.parametrize(("blob", "at", "cls", "field", "value", "code", "fragment"), [
    (NET, 0, I.dla_network_desc, "operation_desc_index", 9, NvError.BadValue,
     "network.operation_desc_index: 9 is not an index of task 0's address list (7 entries)"),
    (NET, 0, I.dla_network_desc, "num_operations", 3, NvError.InvalidSize, "run past"),
    (NET, 0, I.dla_network_desc, "num_rois", 0, NvError.BadValue, "num_rois: 0"),
    (NET, 0, I.dla_network_desc, "num_addresses", 8, NvError.BadValue, "num_addresses: 8"),
    (NET, 0, I.dla_network_desc, "op_head.2", 0, NvError.BadValue, "op_head[2]: 0 is not a SDP operation"),
    (DEPS, 0, I.dla_common_op_desc, "op_type", 6, NvError.BadValue,
     "operations[0].op_type: 6 is not a block"),
    (DEPS, 0, I.dla_common_op_desc, "consumers.2.index", 0, NvError.BadValue,
     "consumers[2].index: operation 0 is a CONV operation, not SDP"),
    (DEPS, 0, I.dla_common_op_desc, "consumers.2.event", 9, NvError.BadValue, "consumers[2].event: 9"),
    (DEPS, 0, I.dla_common_op_desc, "dependency_count", 2, NvError.BadValue,
     "operations[0].dependency_count: 2, but the graph sends it 1 event(s): it would never start"),
    (DEPS, COMMON, I.dla_common_op_desc, "fused_parent.index", 7, NvError.BadValue, "fused_parent.index: 7"),
    (OPS, 0, I.dla_conv_op_desc, "in_precision", 3, NvError.BadValue,
     "op_desc.in_precision: 3 is not one of"),
    (OPS, 0, I.dla_conv_op_desc, "weight_format", 2, NvError.BadValue, "op_desc.weight_format: 2"),
    (OPS, 116, I.dla_sdp_op_desc, "src_precision", 4, NvError.BadValue, "op_desc.src_precision: 4"),
    (SURFS, 0, I.dla_conv_surface_desc, "src_data.address", 12, NvError.BadValue,
     "surface_desc.src_data.address: 12 is not an index of task 0's address list"),
    (SURFS, 0, I.dla_conv_surface_desc, "weight_data.size", 1 << 20, NvError.InvalidSize,
     "surface_desc.weight_data: offset 0 + size 1048576"),
    (SURFS, 644, I.dla_sdp_surface_desc, "dst_data.type", 3, NvError.BadValue, "dst_data.type: 3"),
])
def test_descriptor_fields_are_checked(blob, at, cls, field, value, code, fragment) -> None:
    lo = _patch(conv_sdp_loadable(), blob, at, cls, field, value)
    with pytest.raises(DlaError) as e:
        decode_dla_task(lo, lo.task_list[0])
    assert e.value.code == code, str(e.value)
    assert fragment in str(e.value)


def test_sdp_unit_enums_checked_when_enabled_only() -> None:
    lo = _patch(conv_sdp_loadable(), OPS, 116, I.dla_sdp_op_desc, "y_op.act", 7)
    decode_dla_task(lo, lo.task_list[0])  # disabled: not read by the device
    lo = _patch(lo, OPS, 116, I.dla_sdp_op_desc, "y_op.enable", 1)
    with pytest.raises(DlaError, match=r"operations\[1\].op_desc.y_op.act: 7 is not one of"):
        decode_dla_task(lo, lo.task_list[0])


def test_bdma_transfers_checked() -> None:
    lo = bdma_loadable()
    assert decode_dla_task(lo, lo.task_list[0]).operations[0].surface_desc.transfers[0].line_size == 256
    many = _patch(lo, OPS, 0, I.dla_bdma_op_desc, "num_transfers", 21)
    with pytest.raises(DlaError, match="num_transfers: 21, more than NUM_MAX_BDMA_OPS 20"):
        decode_dla_task(many, many.task_list[0])
    bad = _patch(lo, SURFS, 0, I.dla_bdma_surface_desc, "transfers.0.destination_address", 6)
    with pytest.raises(DlaError, match=r"transfers\[0\].destination_address: 6 is not an index"):
        decode_dla_task(bad, bad.task_list[0])


def test_newer_firmware_interface_is_refused() -> None:
    lo = conv_sdp_loadable(M.Version(0, 13, 0))
    with pytest.raises(DlaError, match=r"firmware interface 0\.13\.0") as e:
        decode_dla_task(lo, lo.task_list[0])
    assert e.value.code == NvError.VersionMismatch


def test_descriptors_in_memory_the_loadable_does_not_fill() -> None:
    lo = conv_sdp_loadable()
    memory = list(lo.memory_list)
    memory[0] = dataclasses.replace(memory[0], flags=M.MemoryFlags.ALLOC, contents=(), offsets=())
    lo = dataclasses.replace(lo, memory_list=tuple(memory))
    with pytest.raises(DlaError, match="memory 0 is not filled by the loadable"):
        decode_dla_task(lo, lo.task_list[0])
