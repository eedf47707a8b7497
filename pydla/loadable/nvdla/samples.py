"""Small, valid NVDLA Loadables built with pydla's own writer: for tests, fuzz seeds and examples.

:func:`conv_sdp_loadable` is a loadable as NVIDIA's KMD regression tests lay one out: one DLA task
whose address list names the network descriptor, the operation, surface and dependency-graph
descriptors, the weights, the input and the output (an OUTPUT memory with its tensor descriptor); two
operations, a CONV feeding an SDP on the fly (the SDP's fused parent), 8x8x32 INT8 (or INT16) output.
:func:`bdma_loadable` copies 2 KiB with one BDMA transfer.

Usage::

    lo = conv_sdp_loadable(interface=Version(0, 12, 0))
    blob = write_nvdla_loadable(lo)
"""

from __future__ import annotations

from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.loadable.nvdla import model as M

CURRENT_INTERFACE = M.Version(0, 12, 5)
REGRESSION_INTERFACE = M.Version(0, 10, 0)
_OP_SLOT, _SURF_SLOT = I.DLA_OPERATION_CONTAINER_SIZE, I.DLA_SURFACE_CONTAINER_SIZE


def _slots(records: list[Any], slot: int) -> bytes:
    return b"".join(bytes(r).ljust(slot, b"\0") for r in records)


def _cube(cls: Any, address: int, w: int, h: int, c: int, bpe: int, on_the_fly: bool = False) -> Any:
    atom = 32 // bpe  # channels per 32-byte atom of NVDLA's feature layout
    line = w * 32
    surf = line * h
    return cls(type=I.dla_mem_e.HW if on_the_fly else I.dla_mem_e.MC, address=-1 if on_the_fly else address,
               size=surf * -(-c // atom), width=w, height=h, channel=c, line_stride=line, surf_stride=surf)


def _task_loadable(ops: list[Any], surfaces: list[Any], commons: list[Any], heads: dict[int, int],
                   data: list[tuple[str, bytes, M.MemoryFlags]], interface: M.Version,
                   output: tuple[int, int, int, M.DataType]) -> M.NvdlaLoadable:
    n = len(ops)
    net = I.dla_network_desc(operation_desc_index=1, surface_desc_index=2, dependency_graph_index=3,
                             lut_data_index=-1, roi_array_index=-1, surface_index=-1, stat_list_index=-1,
                             reserved1=-1, num_rois=1, num_operations=n, num_luts=0,
                             num_addresses=4 + len(data))
    for b in range(I.DLA_OP_NUM):
        net.op_head[b] = heads.get(b, -1)
    descriptor_blobs = [("m0_NetworkDesc_i0", bytes(net), 1), ("m1_OpList_i1", _slots(ops, _OP_SLOT), 3),
                        ("m2_SurfList_i2", _slots(surfaces, _SURF_SLOT), 4),
                        ("m3_DEPGraph_i3", b"".join(bytes(c) for c in commons), 2)]
    blobs, memory = [], []
    for i, (name, raw, sub) in enumerate(descriptor_blobs):
        blobs.append(M.Blob(name, len(raw), M.Interface.NONE, sub, interface, raw))
        memory.append(M.MemoryListEntry(i, len(raw), flags=M.MemoryFlags.ALLOC | M.MemoryFlags.SET,
                                        contents=(name,), offsets=(0,)))
    tensors: list[M.TensorDescListEntry] = []
    for name, raw, flags in data:
        i = len(memory)
        if flags & M.MemoryFlags.SET:
            blobs.append(M.Blob(name, len(raw), M.Interface.NONE, 0, interface, raw))
            memory.append(M.MemoryListEntry(i, len(raw), flags=flags, contents=(name,), offsets=(0,)))
        else:
            memory.append(M.MemoryListEntry(i, len(raw), flags=flags, tensor_desc_id=len(tensors)))
            w, h, c, dtype = output
            bpe = 2 if dtype == M.DataType.INT16 else 1
            tensors.append(M.TensorDescListEntry(name, len(tensors), i, len(raw), w=w, h=h, c=c,
                                                 data_type=dtype,
                                                 strides=(bpe, w * 32, w * 32 * h, 0, 0, 0, 0, 0)))
    addresses = tuple(M.AddressListEntry(i, i, 0, m.size) for i, m in enumerate(memory))
    task = M.TaskListEntry(0, M.Interface.DLA1, -1, tuple(range(len(memory))), (), (0,))
    return M.NvdlaLoadable(task_list=(task,), memory_list=tuple(memory), address_list=addresses,
                           event_list=(M.EventListEntry(0, op=M.EventOp.SIGNAL, val=1),), blobs=tuple(blobs),
                           tensor_desc_list=tuple(tensors), submit_list=(M.SubmitListEntry(0, (0,)),))


def _common(op_type: int, dependency_count: int, consumers: dict[int, tuple[int, int]] | None = None,
            fused_parent: tuple[int, int] | None = None) -> Any:
    c = I.dla_common_op_desc(op_type=op_type, dependency_count=dependency_count)
    for b in range(I.DLA_OP_NUM):
        index, event = (consumers or {}).get(b, (-1, 0))
        c.consumers[b] = I.dla_consumer(index=index, event=event)
    index, event = fused_parent or (-1, 0)
    c.fused_parent = I.dla_consumer(index=index, event=event)
    return c


def conv_sdp_loadable(interface: M.Version = CURRENT_INTERFACE, int16: bool = False) -> M.NvdlaLoadable:
    """A CONV (3x3, 16 -> 32 channels, 8x8) feeding an SDP on the fly, in one DLA task."""
    precision = I.precision_e.INT16 if int16 else I.precision_e.INT8
    bpe = 2 if int16 else 1
    cube = I.dla_data_cube if (interface.major, interface.minor) >= (0, 12) else I.dla_data_cube_v0_11
    surface_cls = I.dla_conv_surface_desc if cube is I.dla_data_cube else I.dla_conv_surface_desc_v0_11
    sdp_cls = I.dla_sdp_surface_desc if cube is I.dla_data_cube else I.dla_sdp_surface_desc_v0_11
    conv = I.dla_conv_op_desc(conv_mode=I.dla_conv_mode.DIRECT, data_format=I.format_e.FEATURE, batch=1,
                              in_precision=precision, out_precision=precision, conv_stride_x=1,
                              conv_stride_y=1, pad_x_left=1, pad_x_right=1, pad_y_top=1, pad_y_bottom=1,
                              dilation_x=1, dilation_y=1,
                              input_width_csc=8, input_height_csc=8, input_channel_csc=16, kernel_width_csc=3,
                              kernel_height_csc=3, kernel_channel_csc=16, bytes_per_kernel=3 * 3 * 16 * bpe)
    sdp = I.dla_sdp_op_desc(src_precision=precision, dst_precision=precision, lut_index=-1, batch_num=1)
    weights = bytes((i * 7) & 0xFF for i in range(32 * 3 * 3 * 16 * bpe))
    src = bytes((i * 13) & 0xFF for i in range(8 * 8 * 32 * -(-16 // (32 // bpe))))
    out_size = 8 * 8 * 32 * -(-32 // (32 // bpe))
    conv_surface = surface_cls(src_data=_cube(cube, 5, 8, 8, 16, bpe), dst_data=_cube(cube, 0, 8, 8, 32, bpe,
                                                                                      True))
    conv_surface.weight_data = cube(type=I.dla_mem_e.MC, address=4, size=len(weights), width=3, height=3,
                                    channel=16)
    sdp_surface = sdp_cls(src_data=_cube(cube, 0, 8, 8, 32, bpe, True), dst_data=_cube(cube, 6, 8, 8, 32,
                                                                                       bpe))
    for c in (conv_surface.wmb_data, conv_surface.wgs_data, sdp_surface.x1_data, sdp_surface.x2_data,
              sdp_surface.y_data):
        c.address = -1
    commons = [_common(I.dla_op_e.CONV, 1, {I.dla_op_e.SDP: (1, I.dla_op_event_e.OP_PROGRAMMED)}),
               _common(I.dla_op_e.SDP, 1, fused_parent=(0, I.dla_op_event_e.OP_ENABLED))]
    set_flags = M.MemoryFlags.ALLOC | M.MemoryFlags.SET
    data = [("m4_CONVWgt_i4", weights, set_flags), ("m5_CONVSrc_i5", src, set_flags),
            ("m6_SDPDst_i6", bytes(out_size), M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT)]
    dtype = M.DataType.INT16 if int16 else M.DataType.INT8
    return _task_loadable([conv, sdp], [conv_surface, sdp_surface], commons,
                          {I.dla_op_e.CONV: 0, I.dla_op_e.SDP: 1}, data, interface, (8, 8, 32, dtype))


def bdma_loadable(interface: M.Version = CURRENT_INTERFACE) -> M.NvdlaLoadable:
    """One BDMA operation copying 8 lines of 256 bytes from the input memory to the output."""
    op = I.dla_bdma_op_desc(num_transfers=1)
    surface = I.dla_bdma_surface_desc(num_transfers=1)
    surface.transfers[0] = I.dla_bdma_transfer_desc(source_address=4, destination_address=5, line_size=256,
                                                    line_repeat=8, source_line=256, destination_line=256,
                                                    surface_repeat=1, source_surface=2048,
                                                    destination_surface=2048)
    data = [("m4_BDMASrc_i4", bytes(range(256)) * 8, M.MemoryFlags.ALLOC | M.MemoryFlags.SET),
            ("m5_BDMADst_i5", bytes(2048), M.MemoryFlags.ALLOC | M.MemoryFlags.OUTPUT)]
    return _task_loadable([op], [surface], [_common(I.dla_op_e.BDMA, 0)], {I.dla_op_e.BDMA: 0}, data,
                          interface,
                          (1, 1, 1, M.DataType.INT8))

