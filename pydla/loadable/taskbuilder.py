"""The task encoder: task descriptors and address lists, built by the compiler, by tests and by hand.

It lives on the loadable side (it writes the descriptor layouts of ``dla_task.yaml``) and depends on
no driver: :meth:`BuiltTask.load` writes a built task into the buffers of any object with
``bo_create`` / ``bo_array`` (the KMD's driver object has them), and its address list holds
:class:`TaskAddress` entries: the contract's address-list entry
(:class:`pydla.deviceapi.task_layout.AddressEntry`), which the KMD takes as it is.

Buffers are named; cubes and memory references point into them. Each operation records the byte
ranges it reads and writes, and the builder derives the dependency graph from them (read after
write, write after read, write after write), then encodes it the NVDLA way: each block's operations
form a chain (``op_head`` and ``consumers[own block]``, event OP_PROGRAMMED, since a block executes
its operations in order), and an operation signals, per other block, only the earliest dependent
operation of that block (the later ones follow it in their chain).

Usage::

    tb = TaskBuilder()
    x = tb.cube("x", (3, 8, 8))
    y = tb.cube("y", (4, 8, 8))
    conv = tb.conv(x, tb.weights("w", (4, 3, 3, 3)), pads=(1, 1, 1, 1))
    tb.sdp(conv, y, act="relu")
    built = tb.build()
    handles = built.load(kmd, ctx)       # allocates the buffers and writes the descriptors
    kmd.submit(ctx, handles.addresses).wait()
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.task_layout import OP_DESC_SIZE, SURFACE_DESC_SIZE
from pydla.errors import DlaError, NvError
from pydla.loadable.task_deps import dependencies
from pydla.loadable.task_types import (
    DESCRIPTORS,
    DTYPES,
    FIXED_ENTRIES,
    BufferAllocator,
    BuiltTask,
    Cube,
    LoadedTask,
    Op,
    Ref,
    TaskAddress,
)

# What this module's users import from it: the builder's types live in task_types, the dependency
# search in task_deps.
__all__ = ["DESCRIPTORS", "DTYPES", "FIXED_ENTRIES", "OP_DESC_SIZE", "PRECISIONS", "BufferAllocator",
           "BuiltTask", "Cube", "LoadedTask", "Op", "Ref", "TaskAddress", "TaskBuilder", "dependencies"]

PRECISIONS = {"fp32": R.dla_precision_e.FP32, "fp16": R.dla_precision_e.FP16}
EW_OPS = {"add": R.sdp_ew_op_e.ADD, "sub": R.sdp_ew_op_e.SUB, "mul": R.sdp_ew_op_e.MUL,
          "max": R.sdp_ew_op_e.MAX, "min": R.sdp_ew_op_e.MIN, "div": R.sdp_ew_op_e.DIV}
ACTS = {"none": R.sdp_act_e.NONE, "relu": R.sdp_act_e.RELU, "leaky_relu": R.sdp_act_e.LEAKY_RELU,
        "prelu": R.sdp_act_e.PRELU, "clamp": R.sdp_act_e.CLAMP, "sigmoid": R.sdp_act_e.SIGMOID,
        "tanh": R.sdp_act_e.TANH, "lut": R.sdp_act_e.LUT}
POOLS = {"max": R.pdp_method_e.MAX, "avg": R.pdp_method_e.AVG, "min": R.pdp_method_e.MIN}
RUBIK = {"contract": R.rubik_mode_e.CONTRACT, "split": R.rubik_mode_e.SPLIT,
         "merge": R.rubik_mode_e.MERGE, "transpose": R.rubik_mode_e.TRANSPOSE,
         "space_to_depth": R.rubik_mode_e.SPACE_TO_DEPTH}
class TaskBuilder:
    """See the module docstring."""

    def __init__(self, precision: str = "fp32") -> None:
        if precision not in PRECISIONS:
            raise DlaError(NvError.BadParameter, f"precision '{precision}': choose fp32 or fp16")
        self.precision = precision
        self.buffers: dict[str, int] = {}
        self.ops: list[Op] = []
        self.luts: list[Any] = []
        self._unpaired_convs: list[int] = []

    # -- buffers --------------------------------------------------------------------------------

    def buffer(self, name: str, size: int) -> str:
        """Declare (or grow) the buffer ``name`` to at least ``size`` bytes."""
        if name == DESCRIPTORS:
            raise DlaError(NvError.BadParameter, f"buffer name '{DESCRIPTORS}' is reserved")
        self.buffers[name] = max(self.buffers.get(name, 0), size)
        return name

    def cube(self, buffer: str, shape: tuple[int, int, int], *, offset: int = 0,
             precision: str | None = None, line_stride: int | None = None,
             surf_stride: int | None = None) -> Cube:
        """A cube in ``buffer`` (dense unless strides are given); the buffer grows to hold it."""
        precision = precision or self.precision
        el = np.dtype(DTYPES[precision]).itemsize
        c, h, w = shape
        ls = w * el if line_stride is None else line_stride
        ss = h * ls if surf_stride is None else surf_stride
        cube = Cube(buffer, offset, (c, h, w), precision, ls, ss)
        self.buffer(buffer, offset + cube.extent)
        return cube

    def ref(self, buffer: str, size: int, offset: int = 0) -> Ref:
        self.buffer(buffer, offset + size)
        return Ref(buffer, offset, size)

    def weights(self, buffer: str, shape: tuple[int, ...], offset: int = 0) -> Ref:
        """A dense array of ``shape`` elements in the builder's precision."""
        n = int(np.prod(shape)) * np.dtype(DTYPES[self.precision]).itemsize
        return self.ref(buffer, n, offset)

    def lut(self, table: Any, start: float, end: float) -> int:
        """A lookup table for ``sdp(act="lut", lut=...)``: values at evenly spaced points."""
        values = np.asarray(table, dtype=np.float32).ravel()
        if not 2 <= values.size <= 257 or not start < end:
            raise DlaError(NvError.BadParameter,
                           f"lut: {values.size} values over {start}..{end}: need 2..257 and start < end")
        lut = T.dla_lut_param_t(start=start, end=end, entries=values.size)
        lut.table[:values.size] = values.tolist()
        self.luts.append(lut)
        return len(self.luts) - 1

    # -- operations ---------------------------------------------------------------------------------

    def _add(self, block: dla_block_e, op: Any, surface: Any, reads: list[Ref], writes: list[Ref]) -> Op:
        if block != dla_block_e.SDP and self._unpaired_convs and block == dla_block_e.CONV:
            raise DlaError(NvError.InvalidState,
                           f"CONV operation {self._unpaired_convs[0]} has no SDP operation yet: "
                           "add sdp(conv, ...) before the next convolution")
        o = Op(len(self.ops), block, op, surface, reads, writes)
        self.ops.append(o)
        return o

    def _precision(self) -> int:
        return int(PRECISIONS[self.precision])

    def conv(self, src: Cube, weight: Ref, *, kernels: int | None = None,
             kernel: tuple[int, int] | None = None, stride: tuple[int, int] = (1, 1),
             pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
             groups: int = 1, weight_shape: tuple[int, int, int, int] | None = None,
             deconv: bool = False, output_padding: tuple[int, int] = (0, 0),
             weight_format: str = "kcrs") -> Op:
        """A convolution (``pads`` = top, left, bottom, right; stride and dilation = y, x). Its
        result flies to the next ``sdp`` call. ``weight_shape`` = (K, C/groups, kh, kw), or for
        ``deconv`` (C, K/groups, kh, kw). ``weight_format`` "kcrs" (that order in memory) or "rskc"
        (tap-major: a K x C matrix per kernel tap, the device's fastest for 3x3 and larger kernels)."""
        if weight_format not in ("kcrs", "rskc") or (deconv and weight_format != "kcrs"):
            raise DlaError(NvError.BadParameter, f"conv: weight_format '{weight_format}' (kcrs, or rskc "
                                                 "for a direct convolution)")
        c, h, w = src.shape
        if weight_shape is None:
            if kernels is None or kernel is None:
                raise DlaError(NvError.BadParameter, "conv: give weight_shape or kernels and kernel")
            weight_shape = (kernels, c // groups, *kernel)
        k0, k1, kh, kw = weight_shape
        d = T.dla_conv_op_desc_t(precision=self._precision(),
                                 mode=int(R.conv_mode_e.DECONV if deconv else R.conv_mode_e.DIRECT),
                                 kernel_height=kh, kernel_width=kw, stride_y=stride[0],
                                 stride_x=stride[1], pad_top=pads[0], pad_left=pads[1],
                                 pad_bottom=pads[2], pad_right=pads[3], dilation_y=dilation[0],
                                 dilation_x=dilation[1], groups=groups,
                                 weight_format=int(R.conv_weight_format_e[weight_format.upper()]))
        if deconv:
            k = k1 * groups
            d.kernels, d.kernel_channels = k, k1
            ho = stride[0] * (h - 1) + output_padding[0] + (kh - 1) * dilation[0] + 1 - pads[0] - pads[2]
            wo = stride[1] * (w - 1) + output_padding[1] + (kw - 1) * dilation[1] + 1 - pads[1] - pads[3]
            d.out_pad_y, d.out_pad_x = output_padding
        else:
            k = k0
            d.kernels, d.kernel_channels = k0, k1
            ho = (h + pads[0] + pads[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
            wo = (w + pads[1] + pads[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        if ho < 1 or wo < 1:
            raise DlaError(NvError.BadParameter, f"conv: output would be {ho}x{wo}")
        d.out_height, d.out_width = ho, wo
        s = T.dla_conv_surface_desc_t()
        o = self._add(dla_block_e.CONV, d, s, [src.ref, weight], [])
        _set_cube(o, "src", src)
        _set_ref(o, "weight", weight)
        o.out_shape = (k, ho, wo)
        self._unpaired_convs.append(o.index)
        return o

    def sdp(self, src: Op | Cube, dst: Cube, *, bias: Ref | None = None, scale: Ref | None = None,
            shift: Ref | None = None, ew: Cube | Ref | None = None, ew_op: str = "add",
            ew_mode: str = "cube", ew_swap: bool = False, act: str = "none", alpha: float = 0.0,
            clip: tuple[float, float] = (float("-inf"), float("inf")), prelu: Ref | None = None,
            out_precision: str | None = None, lut: int = -1) -> Op:
        """Bias, batch norm (scale, shift), an element-wise operand, an activation; from a CONV
        operation (flying) or from a cube in memory. Operands are in the source's precision (the
        builder's for a flying source); the result is converted to the destination's."""
        if act not in ACTS:
            raise DlaError(NvError.BadParameter, f"sdp: activation '{act}': choose {', '.join(ACTS)}")
        in_precision = src.precision if isinstance(src, Cube) else self.precision
        d = T.dla_sdp_op_desc_t(precision=int(PRECISIONS[in_precision]),
                                out_precision=int(PRECISIONS[out_precision or dst.precision]),
                                act=int(ACTS[act]), act_alpha=alpha, act_min=clip[0], act_max=clip[1],
                                lut_index=lut)
        if act == "lut" and not 0 <= lut < len(self.luts):
            raise DlaError(NvError.BadParameter, f"sdp: act 'lut' needs lut=<index from lut()>, got {lut}")
        s = T.dla_sdp_surface_desc_t()
        for name in ("src", "dst", "ew"):
            getattr(s, name).address = -1
        for name in ("bias", "scale", "shift", "prelu"):
            getattr(s, name).address = -1
        reads: list[Ref] = []
        fused = -1
        if isinstance(src, Op):
            if src.block != dla_block_e.CONV or not self._unpaired_convs or \
                    self._unpaired_convs[0] != src.index:
                raise DlaError(NvError.InvalidState,
                               f"sdp: operation {src.index} is not the next CONV waiting for its SDP")
            self._unpaired_convs.pop(0)
            assert src.out_shape is not None
            d.src_mode = int(R.sdp_src_mode_e.FLYING)
            s.src.width, s.src.height, s.src.channels = src.out_shape[2], src.out_shape[1], src.out_shape[0]
            shape = src.out_shape
            fused = src.index
        else:
            d.src_mode = int(R.sdp_src_mode_e.MEMORY)
            reads.append(src.ref)
            shape = src.shape
        if dst.shape != shape:
            raise DlaError(NvError.BadParameter, f"sdp: destination {dst.shape}, source {shape}")
        o = self._add(dla_block_e.SDP, d, s, reads, [dst.ref])
        if isinstance(src, Cube):
            _set_cube(o, "src", src)
        _set_cube(o, "dst", dst)
        o.fused_parent = fused
        for ref in (bias, scale, shift, prelu):
            if ref is not None:
                o.reads.append(ref)
        if bias is not None:
            d.bias_enable = 1
            _set_ref(o, "bias", bias)
        if scale is not None or shift is not None:
            if scale is None or shift is None:
                raise DlaError(NvError.BadParameter, "sdp: batch norm needs both scale and shift")
            d.bn_enable = 1
            _set_ref(o, "scale", scale)
            _set_ref(o, "shift", shift)
        if ew is not None:
            if ew_op not in EW_OPS:
                raise DlaError(NvError.BadParameter, f"sdp: ew_op '{ew_op}': choose {', '.join(EW_OPS)}")
            d.ew_op = int(EW_OPS[ew_op])
            d.ew_swap = int(ew_swap)
            modes = {"cube": R.sdp_ew_mode_e.CUBE, "per_channel": R.sdp_ew_mode_e.PER_CHANNEL,
                     "scalar": R.sdp_ew_mode_e.SCALAR}
            d.ew_mode = int(modes[ew_mode])
            if isinstance(ew, Cube):
                _set_cube(o, "ew", ew)
                o.reads.append(ew.ref)
            else:
                _set_ref(o, "ew", ew)
                o.reads.append(ew)
        if act == "prelu":
            if prelu is None:
                raise DlaError(NvError.BadParameter, "sdp: prelu needs its per-channel slopes")
            _set_ref(o, "prelu", prelu)
        o.out_shape = shape
        return o

    def pdp(self, src: Cube, dst: Cube, *, kernel: tuple[int, int], stride: tuple[int, int] = (1, 1),
            pads: tuple[int, int, int, int] = (0, 0, 0, 0), method: str = "max",
            count_include_pad: bool = False) -> Op:
        d = T.dla_pdp_op_desc_t(precision=self._precision(), method=int(POOLS[method]),
                                kernel_height=kernel[0], kernel_width=kernel[1], stride_y=stride[0],
                                stride_x=stride[1], pad_top=pads[0], pad_left=pads[1],
                                pad_bottom=pads[2], pad_right=pads[3],
                                count_include_pad=int(count_include_pad))
        return self._src_dst(dla_block_e.PDP, d, src, dst)

    def cdp(self, src: Cube, dst: Cube, *, size: int, alpha: float = 1e-4, beta: float = 0.75,
            bias: float = 1.0) -> Op:
        d = T.dla_cdp_op_desc_t(precision=self._precision(), size=size, alpha=alpha, beta=beta, bias=bias)
        return self._src_dst(dla_block_e.CDP, d, src, dst)

    def rubik(self, src: Cube, dst: Cube, *, mode: str, block: tuple[int, int] = (1, 1),
              dcr: bool = True, perm: tuple[int, int, int] = (0, 1, 2)) -> Op:
        packed = perm[0] | perm[1] << 2 | perm[2] << 4
        d = T.dla_rubik_op_desc_t(precision=self._precision(), mode=int(RUBIK[mode]), block_y=block[0],
                                  block_x=block[1], dcr=int(dcr), perm=packed)
        return self._src_dst(dla_block_e.RUBIK, d, src, dst)

    def bdma(self, src: Ref, dst: Ref, *, line_size: int, line_repeat: int = 1,
             src_line_stride: int | None = None, dst_line_stride: int | None = None, surf_repeat: int = 1,
             src_surf_stride: int | None = None, dst_surf_stride: int | None = None) -> Op:
        """A copy of surf_repeat surfaces of line_repeat lines of line_size bytes (strides default
        to dense; a source stride of 0 repeats the same bytes)."""
        d = T.dla_bdma_op_desc_t(line_size=line_size, line_repeat=line_repeat,
                                 src_line_stride=line_size if src_line_stride is None else src_line_stride,
                                 dst_line_stride=line_size if dst_line_stride is None else dst_line_stride,
                                 surf_repeat=surf_repeat)
        d.src_surf_stride = (d.src_line_stride * line_repeat if src_surf_stride is None
                             else src_surf_stride)
        d.dst_surf_stride = (d.dst_line_stride * line_repeat if dst_surf_stride is None
                             else dst_surf_stride)
        s = T.dla_bdma_surface_desc_t()
        o = self._add(dla_block_e.BDMA, d, s, [src], [dst])
        _set_ref(o, "src", src)
        _set_ref(o, "dst", dst)
        return o

    def _src_dst(self, block: dla_block_e, d: Any, src: Cube, dst: Cube) -> Op:
        s = T.dla_pdp_surface_desc_t()
        o = self._add(block, d, s, [src.ref], [dst.ref])
        _set_cube(o, "src", src)
        _set_cube(o, "dst", dst)
        o.out_shape = dst.shape
        return o

    # -- the graph ----------------------------------------------------------------------------------

    def build(self) -> BuiltTask:
        """Encode the graph and lay out the descriptors. Raises when it cannot be encoded."""
        if not self.ops:
            raise DlaError(NvError.BadParameter, "the task has no operations")
        if self._unpaired_convs:
            raise DlaError(NvError.InvalidState,
                           f"CONV operation(s) {self._unpaired_convs} have no SDP operation")
        for op in self.ops:  # every buffer an operation uses, also through a cube made elsewhere
            for field_name, buffer in op.buffers.items():
                surface = getattr(op.surface, field_name)
                self.buffer(buffer, surface.offset + surface.size)
        names = list(self.buffers)
        index = {name: FIXED_ENTRIES + i for i, name in enumerate(names)}
        n = len(self.ops)
        commons = (T.dla_common_op_desc_t * n)()
        for op in self.ops:
            c = commons[op.index]
            c.index = op.index
            c.op_type = int(op.block)
            for b in range(len(dla_block_e)):
                c.consumers[b].index = -1
            c.fused_parent.index = op.fused_parent
            c.fused_parent.event = int(T.dla_event_e.OP_COMPLETED) if op.fused_parent >= 0 else 0
            _resolve_refs(op, index)
        heads = {b: -1 for b in dla_block_e}
        last: dict[dla_block_e, int] = {}
        counts = [0] * n  # counted here: the descriptor's field is a u8 and would wrap
        for op in self.ops:
            if heads[op.block] == -1:
                heads[op.block] = op.index
            else:
                prev = commons[last[op.block]]
                prev.consumers[int(op.block)].index = op.index
                prev.consumers[int(op.block)].event = int(T.dla_event_e.OP_PROGRAMMED)
                counts[op.index] += 1
            last[op.block] = op.index
        partner = {op.index: op.fused_parent for op in self.ops if op.fused_parent >= 0}
        partner.update({conv: sdp for sdp, conv in list(partner.items())})
        for x_index, y in dependencies(self.ops):
            x = self.ops[x_index]
            if x.block == y.block or partner.get(x.index) == y.index:
                continue  # a block runs its chain in order; a fused pair runs as one
            slot = commons[x.index].consumers[int(y.block)]
            if slot.index == -1:
                slot.index, slot.event = y.index, int(T.dla_event_e.OP_COMPLETED)
                counts[y.index] += 1
            elif slot.index > y.index:
                counts[slot.index] -= 1
                slot.index = y.index
                counts[y.index] += 1
        for i, count in enumerate(counts):
            if count > 255:
                raise DlaError(NvError.OverFlow, f"operation {i} waits for {count} events; at most 255")
            commons[i].dependency_count = count
        net = T.dla_network_desc_t(operation_desc_index=2, surface_desc_index=3,
                                   dependency_graph_index=1, lut_data_index=4,
                                   num_luts=len(self.luts), num_operations=n,
                                   num_addresses=FIXED_ENTRIES + len(names), op_desc_size=OP_DESC_SIZE,
                                   surface_desc_size=SURFACE_DESC_SIZE)
        for b in dla_block_e:
            net.op_head[int(b)] = heads[b]
        op_bytes = bytearray(n * OP_DESC_SIZE)
        surf_bytes = bytearray(n * SURFACE_DESC_SIZE)
        for op in self.ops:
            start = op.index * OP_DESC_SIZE
            op_bytes[start:start + ctypes.sizeof(op.op)] = bytes(op.op)
            start = op.index * SURFACE_DESC_SIZE
            surf_bytes[start:start + ctypes.sizeof(op.surface)] = bytes(op.surface)
        lut_bytes = b"".join(bytes(lut) for lut in self.luts) or b"\0" * 8
        parts = [bytes(net), bytes(commons), bytes(op_bytes), bytes(surf_bytes), lut_bytes]
        offsets, blob = [], bytearray()
        for part in parts:
            blob += b"\0" * (-len(blob) % 64)
            offsets.append(len(blob))
            blob += part
        buffers = {DESCRIPTORS: len(blob), **self.buffers}
        addresses = [(DESCRIPTORS, off) for off in offsets] + [(name, 0) for name in names]
        return BuiltTask(bytes(blob), buffers, addresses, list(self.ops))


def _set_cube(op: Op, name: str, cube: Cube) -> None:
    c = getattr(op.surface, name)
    c.offset, c.size = cube.offset, cube.extent
    c.width, c.height, c.channels = cube.shape[2], cube.shape[1], cube.shape[0]
    c.line_stride, c.surf_stride = cube.line_stride, cube.surf_stride
    op.buffers[name] = cube.buffer  # the address-list index is known only in build()


def _set_ref(op: Op, name: str, ref: Ref) -> None:
    target = getattr(op.surface, name)
    target.offset, target.size = ref.offset, ref.size
    op.buffers[name] = ref.buffer


def _resolve_refs(op: Op, index: dict[str, int]) -> None:
    for name, buffer in op.buffers.items():
        getattr(op.surface, name).address = index[buffer]
