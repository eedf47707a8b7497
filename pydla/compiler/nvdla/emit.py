"""An INT8 NVDLA program (:mod:`pydla.compiler.nvdla.plan`) as an NVDLA Loadable: one DLA task whose
address list names, in order, the network descriptor, the operation, surface and dependency-graph
lists, then one memory per buffer (inputs and outputs bindable, with their tensor descriptors), per
convolution's weights and per SDP stage's per-kernel operands. Each CONV hands its sums to its SDP on
the fly (the SDP's fused parent); the dependency graph follows the buffers each operation reads and
writes, encoded as NVIDIA's firmware runs it (each block's operations in a chain, OP_COMPLETED; a
consumer per other block on OP_COMPLETED, the earliest one that needs the data).

Usage::

    lo = emit_loadable(plan, facts, metadata_json)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.compiler.nvdla.emit_graph import HwOp as _HwOp
from pydla.compiler.nvdla.emit_graph import dependency_graph as _graph
from pydla.compiler.nvdla.layout import Facts, cube_strides, pack_weights, surfaces
from pydla.compiler.nvdla.plan import ConvOp, PdpOp, Plan, Ref, SdpOp, SoftmaxOp, Stage
from pydla.deviceapi.generated import dla_interface as I
from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.quantization import METADATA_BLOB

INTERFACE = M.Version(0, 12, 5)  # data cubes with an offset field
INT8 = int(I.precision_e.INT8)
_ALGO = {"max": I.sdp_alu_op_e.MAX, "min": I.sdp_alu_op_e.MIN, "sum": I.sdp_alu_op_e.SUM}


class _Memories:
    """The memory list as it grows: descriptors first, then buffers and constant blobs."""

    def __init__(self) -> None:
        self.entries: list[M.MemoryListEntry] = []
        self.blobs: list[M.Blob] = []
        self.tensors: list[M.TensorDescListEntry] = []

    def constant(
        self, name: str, data: bytes, sub: int = 0, interface: M.Interface = M.Interface.NONE
    ) -> int:
        i = len(self.entries)
        name = f"m{i}_{name}_i{i}"
        version = INTERFACE if interface == M.Interface.NONE else M.Version(0, 0, 1)  # the emulator's
        self.blobs.append(M.Blob(name, len(data), interface, sub, version, data))
        self.entries.append(
            M.MemoryListEntry(
                i,
                len(data),
                flags=M.MemoryFlags.ALLOC | M.MemoryFlags.SET,
                contents=(name,),
                offsets=(0,),
                alignment=4096,
            )
        )
        return i

    def buffer(self, size: int, flags: M.MemoryFlags, bind_id: int = 0) -> int:
        i = len(self.entries)
        self.entries.append(
            M.MemoryListEntry(
                i,
                size,
                flags=flags,
                bind_id=bind_id,
                alignment=4096,
                tensor_desc_id=len(self.tensors) if flags != M.MemoryFlags.ALLOC else 0,
            )
        )
        return i


class _Emitter:
    def __init__(self, plan: Plan, facts: Facts) -> None:
        self.plan, self.facts = plan, facts
        self.mem = _Memories()
        self.hw: list[_HwOp] = []
        self.address: dict[str, int] = {}

    # -- cubes -------------------------------------------------------------------------------------

    def cube(self, ref: Ref) -> Any:
        atom = self.facts.atom
        c_all, h, w = self.plan.buffers[ref.buffer].shape
        c = self.plan.shape(ref)[0]
        if ref.c0 % atom:
            raise DlaError(
                NvError.NotSupported,
                f"buffer '{ref.buffer}': channel {ref.c0} does not start a {atom}-channel surface",
            )
        line, surf, _ = cube_strides(c_all, h, w, atom)
        return I.dla_data_cube(
            type=I.dla_mem_e.MC,
            address=self.address[ref.buffer],
            offset=(ref.c0 // atom) * surf,
            size=surfaces(c, atom) * surf,
            width=w,
            height=h,
            channel=c,
            line_stride=line,
            surf_stride=surf,
        )

    def _span(self, ref: Ref) -> tuple[str, int, int]:
        return ref.buffer, ref.c0, ref.c0 + self.plan.shape(ref)[0]

    # -- operations --------------------------------------------------------------------------------

    def conv(self, op: ConvOp) -> None:
        f = self.facts
        k, c, r, s = op.weights.shape
        sc, sh, sw = self.plan.shape(op.src)
        if c != sc:
            raise DlaError(NvError.BadValue, f"{op.name}: weights for {c} channels, input has {sc}")
        dst_c, oh, ow = self.plan.shape(op.sdp.dst)
        raw = pack_weights(op.weights, f.atomic_k, f.atomic_c)
        wmem = self.mem.constant("CONVWgt", raw)
        entries = -(-sw * surfaces(sc, f.atom) * f.atom // f.cbuf_entry_bytes)
        data_bank = min(f.cbuf_banks - 1, max(1, -(-entries * sh * f.cbuf_entry_bytes // f.cbuf_bank_bytes)))
        weight_bank = max(1, min(f.cbuf_banks - data_bank, -(-len(raw) // f.cbuf_bank_bytes)))
        (sx, sy), (dx, dy), (left, right, top, bottom) = op.stride, op.dilation, op.pads
        desc = I.dla_conv_op_desc(
            conv_mode=I.dla_conv_mode.DIRECT,
            entry_per_slice=entries,
            data_format=I.format_e.FEATURE,
            fetch_grain=1,
            batch=1,
            weight_format=I.weight_format_e.UNCOMPRESSED,
            data_bank=data_bank,
            weight_bank=weight_bank,
            release=sh,
            input_width_csc=sw,
            input_height_csc=sh,
            input_channel_csc=sc,
            kernel_width_csc=s,
            kernel_height_csc=r,
            kernel_channel_csc=c,
            input_width_cmac=ow,
            input_height_cmac=oh,
            bytes_per_kernel=r * s * c,
            conv_stride_x=sx,
            conv_stride_y=sy,
            pad_x_left=left,
            pad_x_right=right,
            pad_y_top=top,
            pad_y_bottom=bottom,
            dilation_x=dx,
            dilation_y=dy,
            in_precision=INT8,
            out_precision=INT8,
            pad_val=op.pad_value,
        )
        desc.out_cvt = I.dla_cvt_param(scale=1, truncate=0, enable=0, offset=0)
        surf = I.dla_conv_surface_desc(src_data=self.cube(op.src))
        surf.weight_data = I.dla_data_cube(
            type=I.dla_mem_e.MC, address=wmem, size=len(raw), width=s, height=r, channel=c
        )
        surf.dst_data = I.dla_data_cube(
            type=I.dla_mem_e.HW,
            address=-1,
            size=surfaces(k, f.atom) * ow * oh * f.atom,
            width=ow,
            height=oh,
            channel=k,
        )
        for cube in (surf.wmb_data, surf.wgs_data):
            cube.address = -1
        if dst_c != k:
            raise DlaError(NvError.BadValue, f"{op.name}: {k} kernels write {dst_c} channels")
        self.hw.append(_HwOp(I.dla_op_e.CONV, desc, surf, [self._span(op.src)], []))
        self.sdp(op.sdp, fused_parent=len(self.hw) - 1, conv_shape=(k, oh, ow))

    def _stage(
        self, st: Stage | None, name: str, surf_cube: Any, channels: int, reads: list[tuple[str, int, int]]
    ) -> Any:
        x = I.dla_sdp_op(enable=0, precision=INT8)
        if st is None:
            return x
        # The firmware writes MUL_SHIFT_VALUE only for a stage that multiplies, and an ALU-only stage
        # truncates by what its register group holds (requant.X2_TRUNCATE)
        if st.mul is None and (name.endswith("X1") or st.truncate):
            raise DlaError(NvError.NotSupported, f"{name}: an X1 stage, or one that truncates, must multiply")
        if name.endswith("X2") and st.mul is not None and st.truncate:
            raise DlaError(
                NvError.NotSupported,
                f"{name}: an X2 stage multiplies with truncate 0 (a later "
                "ALU-only X2 stage would truncate by it)",
            )
        x.enable, x.truncate, x.act = 1, st.truncate, I.activation_e.RELU if st.relu else I.activation_e.NONE
        alu, mul = st.alu, st.mul
        kinds = {
            type(v) for v in (alu.operand if alu else None, mul) if v is not None and not isinstance(v, int)
        }
        if len(kinds) > 1 or (isinstance(mul, Ref)):
            raise DlaError(
                NvError.NotSupported,
                f"{name}: a stage's memory operands are all per kernel or "
                "all per element (and a multiplier is not per element)",
            )
        x.type = I.sdp_op_e.BOTH if alu and mul is not None else I.sdp_op_e.ADD if alu else I.sdp_op_e.MUL
        if alu is not None:
            x.alu_type, x.shift_value = _ALGO[alu.algo], alu.shift
        per_kernel = isinstance(mul, np.ndarray) or (alu is not None and isinstance(alu.operand, np.ndarray))
        per_element = alu is not None and isinstance(alu.operand, Ref)
        if per_element:
            assert alu is not None and isinstance(alu.operand, Ref)
            x.mode = I.sdp_op_mode_e.PER_POINT
            if mul is not None:
                raise DlaError(NvError.NotSupported, f"{name}: a per-element ALU operand with a multiplier")
            cube = self.cube(alu.operand)
            for field in (
                "type",
                "address",
                "offset",
                "size",
                "width",
                "height",
                "channel",
                "line_stride",
                "surf_stride",
            ):
                setattr(surf_cube, field, getattr(cube, field))
            reads.append(self._span(alu.operand))
        elif per_kernel:
            x.mode = I.sdp_op_mode_e.PER_KERNEL
            values = []
            if alu is not None:
                values.append(_per_kernel(alu.operand, channels, f"{name} ALU"))
            if mul is not None:
                values.append(_per_kernel(mul, channels, f"{name} MUL"))
            raw = np.stack(values, axis=1).astype(np.int8).tobytes()
            raw += bytes(-len(raw) % 32)
            surf_cube.type, surf_cube.address = I.dla_mem_e.MC, self.mem.constant("SDPOperand", raw)
            surf_cube.size, surf_cube.width, surf_cube.height, surf_cube.channel = len(raw), 1, 1, channels
        else:
            x.mode = I.sdp_op_mode_e.PER_LAYER
            surf_cube.address = -1
        if alu is not None and isinstance(alu.operand, int):
            x.alu_operand = _fits(alu.operand, 16, f"{name} ALU operand")
        if isinstance(mul, int):
            x.mul_operand = _fits(mul, 16, f"{name} MUL operand")
        return x

    def sdp(self, op: SdpOp, fused_parent: int = -1, conv_shape: tuple[int, int, int] | None = None) -> None:
        shape = conv_shape if op.src is None else self.plan.shape(op.src)
        assert shape is not None
        dst_shape = self.plan.shape(op.dst)
        if dst_shape != shape:
            raise DlaError(NvError.BadValue, f"{op.name}: SDP input {shape} and output {dst_shape} differ")
        surf = I.dla_sdp_surface_desc()
        reads: list[tuple[str, int, int]] = []
        if op.src is None:
            c, h, w = shape
            surf.src_data = I.dla_data_cube(
                type=I.dla_mem_e.HW,
                address=-1,
                width=w,
                height=h,
                channel=c,
                size=surfaces(c, self.facts.atom) * w * h * self.facts.atom,
            )
        else:
            surf.src_data = self.cube(op.src)
            reads.append(self._span(op.src))
        surf.dst_data = self.cube(op.dst)
        for cube in (surf.x1_data, surf.x2_data, surf.y_data):
            cube.address = -1
        desc = I.dla_sdp_op_desc(
            src_precision=INT8,
            dst_precision=INT8,
            lut_index=-1,
            batch_num=1,
            conv_mode=I.dla_conv_mode.DIRECT,
        )
        desc.out_cvt = I.dla_cvt_param(
            scale=_fits(op.cvt.scale, 16, f"{op.name} output scale"),
            truncate=op.cvt.shift,
            enable=1,
            offset=_fits(op.cvt.offset, 32, f"{op.name} output offset"),
        )
        desc.x1_op = self._stage(op.x1, f"{op.name} X1", surf.x1_data, shape[0], reads)
        desc.x2_op = self._stage(op.x2, f"{op.name} X2", surf.x2_data, shape[0], reads)
        desc.y_op = I.dla_sdp_op(enable=0, precision=INT8)
        self.hw.append(_HwOp(I.dla_op_e.SDP, desc, surf, reads, [self._span(op.dst)], fused_parent))

    def pdp(self, op: PdpOp) -> None:
        _c, _h, w = self.plan.shape(op.src)
        _, _oh, ow = self.plan.shape(op.dst)
        kw, kh = op.kernel
        (sx, sy), (left, right, top, bottom) = op.stride, op.pads
        desc = I.dla_pdp_op_desc(
            partial_in_width_first=w,
            partial_width_first=ow,
            split_num=1,
            pool_mode=I.pool_mode_e.MAX if op.mode == "max" else I.pool_mode_e.AVG,
            pool_width=kw - 1,
            pool_height=kh - 1,
            stride_x=sx,
            stride_y=sy,
            pad_left=left,
            pad_right=right,
            pad_top=top,
            pad_bottom=bottom,
            precision=INT8,
        )
        for i in range(I.PDP_PAD_VAL_NUM):
            desc.padding_value[i] = (i + 1) * op.pad_value
        surf = I.dla_pdp_surface_desc(src_data=self.cube(op.src), dst_data=self.cube(op.dst))
        self.hw.append(_HwOp(I.dla_op_e.PDP, desc, surf, [self._span(op.src)], [self._span(op.dst)]))


def _per_kernel(v: Any, channels: int, name: str) -> np.ndarray:
    if isinstance(v, int):
        return np.full(channels, v, np.int64)
    a = np.asarray(v, np.int64)
    if a.shape != (channels,) or a.min(initial=0) < -128 or a.max(initial=0) > 127:
        raise DlaError(NvError.BadValue, f"{name}: per-kernel operands are {channels} int8 values")
    return a


def _fits(v: int, bits: int, name: str) -> int:
    if not -(1 << (bits - 1)) <= int(v) < (1 << (bits - 1)):
        raise DlaError(NvError.BadValue, f"{name} {v} does not fit {bits} bits")
    return int(v)


def _slots(records: list[Any], slot: int) -> bytes:
    return b"".join(bytes(r).ljust(slot, b"\0") for r in records)


def emit_loadable(plan: Plan, facts: Facts, metadata: bytes) -> M.NvdlaLoadable:
    """The NVDLA Loadable of ``plan`` (``metadata``: a blob kept beside it, see METADATA_BLOB)."""
    e = _Emitter(plan, facts)
    mem = e.mem
    for i in range(4):  # the descriptors, filled in at the end
        mem.entries.append(M.MemoryListEntry(i, 0))
    for b in plan.buffers.values():
        size = cube_strides(*b.shape, facts.atom)[2]
        if b.role == "scratch":
            e.address[b.name] = mem.buffer(size, M.MemoryFlags.ALLOC)
            continue
        flags = M.MemoryFlags.ALLOC | (M.MemoryFlags.INPUT if b.role == "input" else M.MemoryFlags.OUTPUT)
        i = mem.buffer(size, flags, b.bind_id)
        e.address[b.name] = i
        c, h, w = b.shape
        line, surf, _ = cube_strides(c, h, w, facts.atom)
        mem.tensors.append(
            M.TensorDescListEntry(
                b.name,
                len(mem.tensors),
                i,
                size,
                n=1,
                c=c,
                h=h,
                w=w,
                data_format=M.DataFormat.NCxHWx,
                data_type=M.DataType.INT8,
                strides=(1, line, surf, 0, 0, 0, 0, 0),
            )
        )
    emu: list[SoftmaxOp] = []
    for op in plan.ops:
        if isinstance(op, SoftmaxOp):
            emu.append(op)
        elif emu:
            raise DlaError(
                NvError.NotSupported,
                f"{op.name}: a device operation after the emulator's "
                f"{emu[0].name} (the EMU task runs after the DLA task)",
            )
        elif isinstance(op, ConvOp):
            e.conv(op)
        elif isinstance(op, SdpOp):
            e.sdp(op)
        else:
            e.pdp(op)
    commons, heads = _graph(e.hw)
    n = len(e.hw)
    net = I.dla_network_desc(
        operation_desc_index=1,
        surface_desc_index=2,
        dependency_graph_index=3,
        lut_data_index=-1,
        roi_array_index=-1,
        surface_index=-1,
        stat_list_index=-1,
        reserved1=-1,
        num_rois=1,
        num_operations=n,
        num_luts=0,
        num_addresses=len(mem.entries),
        input_layer=0,
        dynamic_roi=0,
    )
    for block in range(I.DLA_OP_NUM):
        net.op_head[block] = heads.get(block, -1)
    described = [
        ("NetworkDesc", bytes(net), M.SubInterfaceDLA1.ADDR0),
        ("OpList", _slots([h.op for h in e.hw], I.DLA_OPERATION_CONTAINER_SIZE), M.SubInterfaceDLA1.OPS),
        (
            "SurfList",
            _slots([h.surface for h in e.hw], I.DLA_SURFACE_CONTAINER_SIZE),
            M.SubInterfaceDLA1.SURFS,
        ),
        ("dep_graph", b"".join(bytes(c) for c in commons), M.SubInterfaceDLA1.DEPS),
    ]
    for i, (name, raw, sub) in enumerate(described):
        blob_name = f"m{i}_{name}_i{i}"
        mem.blobs.append(M.Blob(blob_name, len(raw), M.Interface.NONE, int(sub), INTERFACE, raw))
        mem.entries[i] = M.MemoryListEntry(
            i,
            len(raw),
            flags=M.MemoryFlags.ALLOC | M.MemoryFlags.SET,
            contents=(blob_name,),
            offsets=(0,),
            alignment=4096,
        )
    mem.blobs.append(M.Blob(METADATA_BLOB, len(metadata), M.Interface.NONE, 0, M.Version(1, 0, 0), metadata))
    tasks = [M.TaskListEntry(0, M.Interface.DLA1, -1, tuple(range(len(mem.entries))), (), (0,))]
    events = [M.EventListEntry(0, op=M.EventOp.SIGNAL, val=1)]
    if emu:
        from pydla.compiler.nvdla.emit_emu import emu_task

        tasks.append(emu_task(e, emu))
        events.append(M.EventListEntry(1, op=M.EventOp.WAIT, val=1))  # the DLA task's signal
    addresses = tuple(M.AddressListEntry(i, i, 0, m.size) for i, m in enumerate(mem.entries))
    return M.NvdlaLoadable(
        task_list=tuple(tasks),
        memory_list=tuple(mem.entries),
        address_list=addresses,
        event_list=tuple(events),
        blobs=tuple(mem.blobs),
        tensor_desc_list=tuple(mem.tensors),
        submit_list=tuple(M.SubmitListEntry(i, (i,)) for i in range(len(tasks))),
    )


def hardware_operations(lo: M.NvdlaLoadable) -> dict[str, int]:
    """How many operations of each block the loadable's DLA task runs."""
    net_blob = next(b for b in lo.blobs if "NetworkDesc" in b.name).data
    net = I.dla_network_desc.from_buffer_copy(net_blob)
    deps = next(b for b in lo.blobs if "dep_graph" in b.name).data
    size = len(bytes(I.dla_common_op_desc()))
    out: dict[str, int] = {}
    for i in range(net.num_operations):
        c = I.dla_common_op_desc.from_buffer_copy(deps[i * size : (i + 1) * size])
        name = I.dla_op_e(c.op_type).name
        out[name] = out.get(name, 0) + 1
    return out
