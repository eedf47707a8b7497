"""Lowering the planned steps to device operations with the TaskBuilder, and emitting the loadable.

Layout: a batch-1 tensor (1, C, H, W) is the device cube (C, H, W) stored densely, which is exactly
its ONNX (NCHW) layout, so graph inputs and outputs need no conversion; (1, F) is the cube (F, 1, 1).
Batch norm is folded into the convolution's weights and bias; constants added or multiplied per
channel become SDP operands; weights go to one weight buffer, computed tensors to one scratch arena
planned by liveness.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.compiler.graph import Graph, Node
from pydla.compiler.plan import ALIGN, MemoryPlan, Step, attr, group_steps, plan_memory
from pydla.deviceapi.generated import loadable as L
from pydla.errors import DlaError, NvError
from pydla.kmd.taskbuilder import Cube, Op, Ref, TaskBuilder
from pydla.loadable.container import LoadableWriter

SCRATCH, WEIGHTS = "scratch", "weights"
CPU_LIBRARY = "umd/cpulib.py"  # pydla's own CPU library, relative to the installed package
DATA_TYPES = {np.dtype(np.float32): L.dla_data_type_e.FLOAT32}


@dataclass
class Compiled:
    """The loadable's bytes and what the compiler found worth reporting."""

    blob: bytes
    steps: int
    operations: dict[str, int]
    memory: MemoryPlan
    weights_bytes: int
    notes: list[str] = field(default_factory=list)


def cube_shape(shape: tuple[int, ...], where: str) -> tuple[int, int, int]:
    """The device cube of a batch-1 tensor."""
    if len(shape) == 0:
        return (1, 1, 1)
    if len(shape) > 4 or (len(shape) >= 2 and shape[0] != 1):
        raise DlaError(NvError.NotSupported, f"{where}: shape {shape}: pydla runs batch 1 tensors of up "
                                             "to 4 dimensions")
    rest = list(shape[1:]) if len(shape) >= 2 else list(shape)
    rest += [1] * (3 - len(rest))
    c, h, w = rest[0], rest[1], rest[2]
    return (int(c), int(h), int(w))


class Lowering:
    def __init__(self, graph: Graph, device: str, progress: Callable[[int, int, str], None] | None,
                 precision: str = "fp32") -> None:
        self.g = graph
        self.device = device
        self.progress = progress
        self.precision = precision
        self.np_dtype = np.dtype(np.float16 if precision == "fp16" else np.float32)
        self.tb = TaskBuilder(precision)
        self.weights = bytearray()
        self.runs: list[tuple[str, TaskBuilder | dict[str, Any]]] = []

    # -- placement ------------------------------------------------------------------------------------

    def buffer_of(self, tensor: str) -> str:
        if self.precision == "fp16":
            return SCRATCH  # fp16 copies of the inputs and outputs live in scratch (converted by SDP)
        if tensor in self.g.inputs:
            return f"in{self.g.inputs.index(tensor)}"
        if tensor in self.g.outputs:
            return f"out{self.g.outputs.index(tensor)}"
        return SCRATCH

    def cube(self, tensor: str, where: str) -> Cube:
        root = self.roots[tensor]
        shape = cube_shape(self.g.shapes[tensor], where)
        if self.g.dtypes[tensor] != np.float32:
            raise DlaError(NvError.NotSupported, f"{where}: tensor '{tensor}' is {self.g.dtypes[tensor]}; "
                                                 "the device computes float32")
        buf = self.buffer_of(root)
        offset = (self.plan.offsets.get(root, 0) if buf == SCRATCH else 0) + self.within[tensor]
        return self.tb.cube(buf, shape, offset=offset, precision=self.precision)

    def const(self, values: np.ndarray) -> Ref:
        data = np.ascontiguousarray(values, dtype=self.np_dtype).tobytes()
        self.weights += b"\0" * (-len(self.weights) % ALIGN)
        offset = len(self.weights)
        self.weights += data
        return self.tb.ref(WEIGHTS, len(data), offset)

    # -- the steps -------------------------------------------------------------------------------------

    def run(self) -> Compiled:
        steps = group_steps(self.g)
        fp16 = self.precision == "fp16"
        external = set() if fp16 else set(self.g.inputs) | set(self.g.outputs)
        self.plan, self.roots, self.within = plan_memory(self.g, steps, external,
                                                         element=self.np_dtype.itemsize, keep_io=fp16)
        if fp16:
            for i, name in enumerate(self.g.inputs):  # model-layout fp32 in, device fp16 scratch out
                shape = cube_shape(self.g.shapes[name], f"input '{name}'")
                self.tb.sdp(self.tb.cube(f"in{i}", shape, precision="fp32"), self.cube(name, name))
        for i, step in enumerate(steps):
            if self.progress is not None:
                self.progress(i + 1, len(steps), step.head.name)
            getattr(self, f"_{step.kind}")(step)
        if fp16:
            for i, name in enumerate(self.g.outputs):
                shape = cube_shape(self.g.shapes[name], f"output '{name}'")
                self.tb.sdp(self.cube(name, name), self.tb.cube(f"out{i}", shape, precision="fp32"))
        return self.emit(len(steps))

    def _alias(self, step: Step) -> None:
        pass  # same bytes: the planner made both names one tensor

    def _concat_view(self, step: Step) -> None:
        pass  # the planner placed each input in its channel range of the output

    def _conv(self, step: Step) -> None:
        node = step.head
        where = node.where()
        x = self.cube(node.inputs[0], where)
        w = self._const(node, 1, "weights")
        k = w.shape[0]
        bias = self._const(node, 2, "bias") if len(node.inputs) > 2 and node.inputs[2] else np.zeros(k)
        kh, kw = w.shape[2], w.shape[3]
        stride = tuple(attr(node, "strides", [1, 1]))
        dilation = tuple(attr(node, "dilations", [1, 1]))
        pads = _pads(node, x.shape[1:], (kh, kw), stride, dilation)
        groups = attr(node, "group", 1)
        bias = bias.astype(np.float64)
        w = w.astype(np.float64)
        rest = step.nodes[1:]
        prev = node.outputs[0]
        if rest and rest[0].op_type == "BatchNormalization":
            bn = rest.pop(0)
            scale, shift = self._bn(bn)
            w = w * scale[:, None, None, None]
            bias = bias * scale + shift
            prev = bn.outputs[0]
        ew, act = self._epilogue(rest, prev, k)
        if ew is not None and ew[0] == "bias":
            bias = bias + ew[1]
            ew = None
        conv = self.tb.conv(x, self.const(w), weight_shape=tuple(w.shape), stride=stride,
                            pads=pads, dilation=dilation, groups=groups)
        self._sdp_after(conv, step, bias, ew, act)

    def _deconv(self, step: Step) -> None:
        node = step.head
        where = node.where()
        x = self.cube(node.inputs[0], where)
        w = self._const(node, 1, "weights")
        groups = attr(node, "group", 1)
        k = w.shape[1] * groups
        bias = self._const(node, 2, "bias") if len(node.inputs) > 2 and node.inputs[2] else np.zeros(k)
        stride = tuple(attr(node, "strides", [1, 1]))
        dilation = tuple(attr(node, "dilations", [1, 1]))
        if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") or "output_shape" in node.attrs:
            raise DlaError(NvError.NotSupported, f"{where}: auto_pad / output_shape are not supported")
        p = list(attr(node, "pads", [0, 0, 0, 0]))
        pads = (p[0], p[1], p[2], p[3])
        out_pad = tuple(attr(node, "output_padding", [0, 0]))
        _, act = self._epilogue(step.nodes[1:], node.outputs[0], k)
        conv = self.tb.conv(x, self.const(w), weight_shape=tuple(w.shape), stride=stride, pads=pads,
                            dilation=dilation, groups=groups, deconv=True, output_padding=out_pad)
        self._sdp_after(conv, step, bias, None, act)

    def _gemm(self, step: Step) -> None:
        node = step.head
        where = node.where()
        x = self.cube(node.inputs[0], where)
        b = self._const(node, 1, "B")
        if node.op_type == "Gemm":
            if attr(node, "transA", 0):
                raise DlaError(NvError.NotSupported, f"{where}: transA is not supported")
            if not attr(node, "transB", 0):
                b = b.T
            b = b * attr(node, "alpha", 1.0)
            bias = (self._const(node, 2, "C") * attr(node, "beta", 1.0)
                    if len(node.inputs) > 2 and node.inputs[2] else np.zeros(b.shape[0]))
        else:
            b = b.T
            bias = np.zeros(b.shape[0])
        if b.ndim != 2 or b.shape[1] != x.shape[0] * x.shape[1] * x.shape[2]:
            raise DlaError(NvError.NotSupported, f"{where}: {b.shape} weights against input {x.shape}")
        bias = np.broadcast_to(np.asarray(bias, dtype=np.float64).ravel(), (b.shape[0],))
        flat = self.tb.cube(x.buffer, (b.shape[1], 1, 1), offset=x.offset, precision=self.precision)
        _, act = self._epilogue(step.nodes[1:], node.outputs[0], b.shape[0])
        w = b.reshape(b.shape[0], b.shape[1], 1, 1)
        conv = self.tb.conv(flat, self.const(w), weight_shape=tuple(w.shape))
        self._sdp_after(conv, step, bias, None, act)

    def _sdp_after(self, conv: Op, step: Step, bias: np.ndarray, ew: Any, act: dict[str, Any]) -> None:
        out = self.cube(step.output, step.head.where())
        kwargs: dict[str, Any] = dict(act)
        if ew is not None:
            kwargs.update(ew=self.cube(ew[1], step.head.where()), ew_op="add")
        self.tb.sdp(conv, out, bias=self.const(bias), **kwargs)

    def _epilogue(self, nodes: list[Node], prev: str, channels: int) -> tuple[Any, dict[str, Any]]:
        """The element-wise add and activation fused after a convolution whose (so far) result is
        the tensor ``prev``."""
        ew: Any = None
        act: dict[str, Any] = {}
        for n in nodes:
            if n.op_type == "Add":
                other = n.inputs[1] if n.inputs[0] == prev else n.inputs[0]
                if other in self.g.consts:
                    value = np.broadcast_to(self.g.consts[other].astype(np.float64).ravel(), (channels,)) \
                        if self.g.consts[other].size in (1, channels) else None
                    if value is None:
                        raise DlaError(NvError.NotSupported, f"{n.where()}: cannot broadcast {other}")
                    ew = ("bias", value)
                else:
                    ew = ("cube", other)
            else:
                act = self._activation(n, channels)
            prev = n.outputs[0]
        return ew, act

    def _activation(self, n: Node, channels: int) -> dict[str, Any]:
        op = n.op_type
        if op == "Relu":
            return {"act": "relu"}
        if op == "LeakyRelu":
            return {"act": "leaky_relu", "alpha": float(attr(n, "alpha", 0.01))}
        if op == "Sigmoid":
            return {"act": "sigmoid"}
        if op == "Tanh":
            return {"act": "tanh"}
        if op == "Clip":
            lo = attr(n, "min", -math.inf)
            hi = attr(n, "max", math.inf)
            if len(n.inputs) > 1 and n.inputs[1]:
                lo = float(self._const(n, 1, "min"))
            if len(n.inputs) > 2 and n.inputs[2]:
                hi = float(self._const(n, 2, "max"))
            return {"act": "clamp", "clip": (float(lo), float(hi))}
        if op == "PRelu":
            slope = self._const(n, 1, "slope")
            if slope.size not in (1, channels):
                raise DlaError(NvError.NotSupported, f"{n.where()}: slope of shape {slope.shape}")
            return {"act": "prelu", "prelu": self.const(np.broadcast_to(slope.ravel(), (channels,)))}
        raise DlaError(NvError.NotSupported, f"{n.where()}: not an activation")

    def _bn(self, n: Node) -> tuple[np.ndarray, np.ndarray]:
        gamma, beta, mean, var = (self._const(n, i, what).astype(np.float64)
                                  for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")))
        scale = gamma / np.sqrt(var + attr(n, "epsilon", 1e-5))
        return scale, beta - mean * scale

    def _sdp(self, step: Step) -> None:
        n = step.head
        where = n.where()
        out = self.cube(step.output, where)
        c = out.shape[0]
        op = n.op_type
        if op == "BatchNormalization":
            x = self.cube(n.inputs[0], where)
            scale, shift = self._bn(n)
            self.tb.sdp(x, out, scale=self.const(scale), shift=self.const(shift))
        elif op in ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "PRelu"):
            self.tb.sdp(self.cube(n.inputs[0], where), out, **self._activation(n, c))
        else:
            a, b = n.inputs[0], n.inputs[1]
            ew_op = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}[op]
            swap = a in self.g.consts
            tensor, other = (b, a) if swap else (a, b)
            x = self.cube(tensor, where)
            if other in self.g.consts:
                value = self.g.consts[other].astype(np.float32)
                if value.size == 1:
                    self.tb.sdp(x, out, ew=self.const(value.ravel()), ew_op=ew_op, ew_mode="scalar",
                                ew_swap=swap)
                elif value.size == c and value.squeeze().shape == (c,):
                    self.tb.sdp(x, out, ew=self.const(value.ravel()), ew_op=ew_op, ew_mode="per_channel",
                                ew_swap=swap)
                elif np.broadcast_shapes(value.shape, self.g.shapes[tensor]) == self.g.shapes[tensor]:
                    full = np.broadcast_to(value, self.g.shapes[tensor])
                    ref = self.const(full)
                    el = self.np_dtype.itemsize
                    cube = Cube(ref.buffer, ref.offset, x.shape, self.precision, x.shape[2] * el,
                                x.shape[1] * x.shape[2] * el)
                    self.tb.sdp(x, out, ew=cube, ew_op=ew_op, ew_swap=swap)
                else:
                    raise DlaError(NvError.NotSupported, f"{where}: cannot broadcast {value.shape}")
            else:
                if self.g.shapes[a] != self.g.shapes[b]:
                    raise DlaError(NvError.NotSupported,
                                   f"{where}: element-wise {op} of {self.g.shapes[a]} and {self.g.shapes[b]} "
                                   "needs equal shapes (or a constant operand)")
                self.tb.sdp(x, out, ew=self.cube(other, where), ew_op=ew_op)

    def _pool(self, step: Step) -> None:
        n = step.head
        where = n.where()
        x = self.cube(n.inputs[0], where)
        out = self.cube(step.output, where)
        if n.op_type.startswith("Global"):
            self.tb.pdp(x, out, kernel=x.shape[1:], stride=(1, 1),
                        method="max" if n.op_type == "GlobalMaxPool" else "avg")
            return
        kernel = tuple(attr(n, "kernel_shape", None))
        if len(kernel) != 2 or any(d != 1 for d in attr(n, "dilations", [1, 1])):
            raise DlaError(NvError.NotSupported, f"{where}: only 2-D pooling without dilation")
        stride = tuple(attr(n, "strides", [1, 1]))
        pads = _pads(n, x.shape[1:], kernel, stride, (1, 1))
        self.tb.pdp(x, out, kernel=kernel, stride=stride, pads=pads,
                    method="max" if n.op_type == "MaxPool" else "avg",
                    count_include_pad=bool(attr(n, "count_include_pad", 0)))

    def _lrn(self, step: Step) -> None:
        n = step.head
        x = self.cube(n.inputs[0], n.where())
        self.tb.cdp(x, self.cube(step.output, n.where()), size=int(attr(n, "size", 1)),
                    alpha=float(attr(n, "alpha", 1e-4)), beta=float(attr(n, "beta", 0.75)),
                    bias=float(attr(n, "bias", 1.0)))

    def _transpose(self, step: Step) -> None:
        n = step.head
        perm = list(attr(n, "perm", []))
        shape = self.g.shapes[n.inputs[0]]
        if len(shape) != 4 or perm[0] != 0:
            raise DlaError(NvError.NotSupported,
                           f"{n.where()}: only 4-D transposes that keep the batch axis")
        p = (perm[1] - 1, perm[2] - 1, perm[3] - 1)
        self.tb.rubik(self.cube(n.inputs[0], n.where()), self.cube(step.output, n.where()),
                      mode="transpose", perm=p)

    def _concat(self, step: Step) -> None:
        n = step.head
        axis = attr(n, "axis", 1)
        rank = len(self.g.shapes[step.output])
        if axis < 0:
            axis += rank
        if rank != 4 or axis != 1:
            raise DlaError(NvError.NotSupported,
                           f"{n.where()}: only channel concatenation (axis 1) of 4-D tensors")
        out = self.cube(step.output, n.where())
        offset = out.offset
        for t in n.inputs:
            if t in self.g.consts:
                raise DlaError(NvError.NotSupported, f"{n.where()}: constant operand '{t}'")
            x = self.cube(t, n.where())
            nbytes = x.shape[0] * x.shape[1] * x.shape[2] * self.np_dtype.itemsize
            self.tb.bdma(x.ref, Ref(out.buffer, offset, nbytes), line_size=nbytes)
            offset += nbytes

    # -- data movement with BDMA ----------------------------------------------------------------

    def _copy_box(self, node: Node, src: Cube, dst: Cube, start: tuple[int, int, int],
                  dst_start: tuple[int, int, int], size: tuple[int, int, int]) -> None:
        """Copy the box ``size`` (C, H, W) at ``start`` of ``src`` to ``dst_start`` of ``dst``."""
        el = self.np_dtype.itemsize
        c, h, w = size
        if min(size) < 1:
            raise DlaError(NvError.NotSupported, f"{node.where()}: empty slice {size}")
        s_off = src.offset + start[0] * src.surf_stride + start[1] * src.line_stride + start[2] * el
        d_off = (dst.offset + dst_start[0] * dst.surf_stride + dst_start[1] * dst.line_stride
                 + dst_start[2] * el)
        s_ext = (c - 1) * src.surf_stride + (h - 1) * src.line_stride + w * el
        d_ext = (c - 1) * dst.surf_stride + (h - 1) * dst.line_stride + w * el
        self.tb.bdma(Ref(src.buffer, s_off, s_ext), Ref(dst.buffer, d_off, d_ext), line_size=w * el,
                     line_repeat=h, src_line_stride=src.line_stride, dst_line_stride=dst.line_stride,
                     surf_repeat=c, src_surf_stride=src.surf_stride, dst_surf_stride=dst.surf_stride)

    def _axis(self, node: Node, axis: int, rank: int) -> int:
        """An ONNX axis of a 4-D (or 2-D) batch-1 tensor as a cube axis 0..2."""
        axis = axis + rank if axis < 0 else axis
        if not 1 <= axis < rank or rank not in (2, 3, 4):
            raise DlaError(NvError.NotSupported, f"{node.where()}: axis {axis} of a rank-{rank} tensor "
                                                 "(the batch axis cannot be sliced)")
        return axis - 1

    def _slice(self, step: Step) -> None:
        n = step.head
        x = self.cube(n.inputs[0], n.where())
        out = self.cube(step.output, n.where())
        rank = len(self.g.shapes[n.inputs[0]])
        starts = self._const(n, 1, "starts").astype(np.int64).ravel()
        axes = (self._const(n, 3, "axes").astype(np.int64).ravel() if len(n.inputs) > 3 and n.inputs[3]
                else np.arange(len(starts)))
        steps = (self._const(n, 4, "steps").astype(np.int64).ravel() if len(n.inputs) > 4 and n.inputs[4]
                 else np.ones(len(starts), np.int64))
        ends = self._const(n, 2, "ends").astype(np.int64).ravel()
        if any(st != 1 for st in steps) or any((a + rank) % rank == 0 for a in axes):
            def text(v: Any) -> str:
                return ",".join(str(int(min(max(i, -(1 << 62)), 1 << 62))) for i in v)

            self._cpu_run(step, "slice", [(",".join(str(d) for d in self.g.shapes[n.inputs[0]]), "string"),
                                          (text(starts), "string"), (text(ends), "string"),
                                          (text(axes), "string"), (text(steps), "string")])
            return
        begin = [0, 0, 0]
        for a, s0 in zip(axes, starts, strict=True):
            k = self._axis(n, int(a), rank)
            dim = x.shape[k]
            begin[k] = int(min(max(s0 + dim if s0 < 0 else s0, 0), dim))
        self._copy_box(n, x, out, (begin[0], begin[1], begin[2]), (0, 0, 0), out.shape)

    def _split(self, step: Step) -> None:
        n = step.head
        x = self.cube(n.inputs[0], n.where())
        rank = len(self.g.shapes[n.inputs[0]])
        k = self._axis(n, int(attr(n, "axis", 0)), rank)
        start = 0
        for name in n.outputs:
            part = cube_shape(self.g.shapes[name], n.where())[k]
            if name == step.output:
                begin = [0, 0, 0]
                begin[k] = start
                out = self.cube(name, n.where())
                self._copy_box(n, x, out, (begin[0], begin[1], begin[2]), (0, 0, 0), out.shape)
                return
            start += part

    def _pad(self, step: Step) -> None:
        n = step.head
        mode = attr(n, "mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        pads = (self._const(n, 1, "pads").astype(np.int64).ravel() if len(n.inputs) > 1 and n.inputs[1]
                else np.asarray(attr(n, "pads", []), np.int64))
        value = float(self._const(n, 2, "constant_value")) if len(n.inputs) > 2 and n.inputs[2] else 0.0
        rank = len(self.g.shapes[n.inputs[0]])
        if min(pads, default=0) < 0 or len(pads) != 2 * rank:
            raise DlaError(NvError.NotSupported, f"{n.where()}: pads {pads.tolist()} (negative pads crop)")
        if mode != "constant" or len(pads) != 8 or pads[0] or pads[1] or pads[4] or pads[5]:
            shape = ",".join(str(d) for d in self.g.shapes[n.inputs[0]])
            self._cpu_run(step, "pad", [(shape, "string"), (",".join(str(int(p)) for p in pads), "string"),
                                        (mode, "string"), (value, "float")])
            return
        x = self.cube(n.inputs[0], n.where())
        out = self.cube(step.output, n.where())
        row = self.const(np.full(out.shape[2], value))
        el = self.np_dtype.itemsize
        c, h, w = out.shape
        self.tb.bdma(Ref(row.buffer, row.offset, w * el),
                     Ref(out.buffer, out.offset, out.extent), line_size=w * el, line_repeat=h,
                     src_line_stride=0, dst_line_stride=out.line_stride, surf_repeat=c,
                     src_surf_stride=0, dst_surf_stride=out.surf_stride)
        self._copy_box(n, x, out, (0, 0, 0), (0, int(pads[2]), int(pads[3])), x.shape)

    def _resize(self, step: Step) -> None:
        n = step.head
        mode = attr(n, "mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        x = self.cube(n.inputs[0], n.where())
        out = self.cube(step.output, n.where())
        c, h, w = x.shape
        ctm = attr(n, "coordinate_transformation_mode", b"half_pixel")
        ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
        rounding = attr(n, "nearest_mode", b"round_prefer_floor")
        rounding = rounding.decode() if isinstance(rounding, bytes) else rounding
        # On the device: nearest by whole factors, where output (y, x) reads input (y // fy, x // fx):
        # half_pixel (or pytorch_half_pixel) with a round mode (the fractions never reach .5), or
        # asymmetric with floor. Everything else is a CPU run.
        whole = out.shape[0] == c and out.shape[1] % h == 0 and out.shape[2] % w == 0
        exact = ((ctm in ("half_pixel", "pytorch_half_pixel") and rounding.startswith("round"))
                 or (ctm == "asymmetric" and rounding == "floor"))
        if mode != "nearest" or not whole or not exact:
            rank = len(self.g.shapes[n.inputs[0]])
            if mode not in ("nearest", "linear") or attr(n, "antialias", 0) or rank != 4:
                raise DlaError(NvError.NotSupported,
                               f"{n.where()}: Resize mode {mode} (antialias, other ranks) is not supported")
            shapes = [",".join(str(d) for d in self.g.shapes[t]) for t in (n.inputs[0], step.output)]
            self._cpu_run(step, "resize", [(shapes[0], "string"), (shapes[1], "string"), (mode, "string"),
                                           (ctm, "string"), (rounding, "string")])
            return
        fy, fx = out.shape[1] // h, out.shape[2] // w
        el = self.np_dtype.itemsize
        for dy in range(fy):
            for dx in range(fx):
                # Element (c, y, x) goes to (c, fy*y + dy, fx*x + dx): rows (c, y) as surfaces.
                d_off = out.offset + (dy * out.shape[2] + dx) * el
                self.tb.bdma(Ref(x.buffer, x.offset, x.extent),
                             Ref(out.buffer, d_off, out.extent - (d_off - out.offset)),
                             line_size=el, line_repeat=w, src_line_stride=el, dst_line_stride=fx * el,
                             surf_repeat=c * h, src_surf_stride=w * el,
                             dst_surf_stride=fy * out.shape[2] * el)

    def _const(self, node: Node, index: int, what: str) -> np.ndarray:
        name = node.inputs[index] if index < len(node.inputs) else ""
        if name not in self.g.consts:
            raise DlaError(NvError.NotSupported,
                           f"{node.where()}: its {what} ('{name}') must be a constant (an initializer)")
        return np.asarray(self.g.consts[name])

    # -- the loadable --------------------------------------------------------------------------------

    # -- CPU runs -------------------------------------------------------------------------------------

    def _finish_task(self) -> None:
        """Close the NPU task being built (a CPU run or the end follows)."""
        if self.tb.ops:
            self.runs.append(("npu", self.tb))
            self.tb = TaskBuilder(self.precision)

    def _cpu_run(self, step: Step, function: str, constants: list[tuple[Any, str]]) -> None:
        """A CPU run of pydla's CPU library between NPU tasks: (source, destination, constants...)."""
        self._finish_task()
        src, src_dtype = self._placement(step.head.inputs[0])
        dst, dst_dtype = self._placement(step.output)
        values = [*constants, (src_dtype, "string"), (dst_dtype, "string")]
        self.runs.append(("cpu", {
            "name": function, "where": "cpu",
            "arguments": [{**src, "argidx": 0}, {**dst, "argidx": 1}],
            "constants": [{"value": v, "type": t, "argidx": 2 + i} for i, (v, t) in enumerate(values)]}))

    def _cpu(self, step: Step) -> None:
        """Softmax / LogSoftmax: CPU runs."""
        n = step.head
        rank = len(self.g.shapes[n.inputs[0]])
        default_axis = -1 if self.g.opset >= 13 else 1
        axis = int(attr(n, "axis", default_axis))
        if self.g.opset < 13 and axis not in (rank - 1, -1):
            raise DlaError(NvError.NotSupported,
                           f"{n.where()}: opset {self.g.opset} Softmax over the axes from {axis} on")
        shape = ",".join(str(d) for d in self.g.shapes[n.inputs[0]])
        function = {"Softmax": "softmax", "LogSoftmax": "log_softmax"}[n.op_type]
        self._cpu_run(step, function, [(axis, "int"), (shape, "string")])

    def _placement(self, tensor: str) -> tuple[dict[str, Any], str]:
        """A recipe argument (buffer, offset, size) for ``tensor``, and its element type."""
        root = self.roots[tensor]
        buf = self.buffer_of(root)
        scratch = buf == SCRATCH
        dtype = self.np_dtype if scratch else np.dtype(np.float32)
        size = int(np.prod(self.g.shapes[tensor])) * dtype.itemsize
        offset = (self.plan.offsets.get(root, 0) if scratch else 0) + self.within[tensor]
        return {"name": buf, "offset": offset, "size": size}, str(dtype)

    # -- the loadable --------------------------------------------------------------------------------

    def emit(self, steps: int) -> Compiled:
        self._finish_task()
        if not self.runs:
            raise DlaError(NvError.NotSupported, "the model has no operation to run")
        sizes: dict[str, int] = {}
        for i, name in enumerate(self.g.inputs):
            sizes[f"in{i}"] = int(np.prod(self.g.shapes[name])) * 4
        for i, name in enumerate(self.g.outputs):
            sizes[f"out{i}"] = int(np.prod(self.g.shapes[name])) * 4
        if self.plan.peak:
            sizes[SCRATCH] = self.plan.peak
        sizes[WEIGHTS] = max(len(self.weights), 8)
        lw = LoadableWriter(self.device)
        lw.add_weights(WEIGHTS, bytes(self.weights).ljust(sizes[WEIGHTS], b"\0"), alignment=ALIGN)
        names = list(sizes)
        buffers = []
        for name in names:
            kind = ("weight" if name == WEIGHTS else "internal" if name == SCRATCH
                    else "input" if name.startswith("in") else "output")
            lw.add_memory(name, kind, sizes[name], ALIGN)
            entry: dict[str, Any] = {"name": name, "type": kind}
            if kind in ("internal", "weight"):
                entry["size"] = sizes[name]
            buffers.append(entry)
        for i, name in enumerate(self.g.inputs):
            dtype = DATA_TYPES.get(self.g.dtypes[name])
            if dtype is None:
                raise DlaError(NvError.NotSupported, f"input '{name}' is {self.g.dtypes[name]}: float32 only")
            lw.add_tensor(name, names.index(f"in{i}"), self.g.shapes[name], int(dtype), "input", i)
        for i, name in enumerate(self.g.outputs):
            lw.add_tensor(name, names.index(f"out{i}"), self.g.shapes[name],
                          int(DATA_TYPES.get(self.g.dtypes[name], L.dla_data_type_e.FLOAT32)), "output", i)
        runs: list[dict[str, Any]] = []
        kernels: list[dict[str, str]] = []
        cpus: dict[str, dict[str, str]] = {}
        counts: dict[str, int] = {}
        for kind, item in self.runs:
            if kind == "cpu":
                assert isinstance(item, dict)
                cpus[item["name"]] = {"name": item["name"], "library_path": CPU_LIBRARY}
                runs.append(item)
                counts["CPU"] = counts.get("CPU", 0) + 1
                continue
            assert isinstance(item, TaskBuilder)
            kernel = f"task{len(kernels)}"
            built = item.build()
            args = [n for n in built.buffers if n != "descriptors"]
            arguments = {name: i for i, name in enumerate(args)}
            lw.add_control_code(kernel, built.control_code(arguments))
            kernels.append({"name": kernel, "instance": "dla", "ctrlcode": kernel})
            runs.append({"name": kernel, "where": "npu",
                         "arguments": [{"name": name, "argidx": i} for name, i in arguments.items()]})
            for op in built.operations:
                counts[op.block.name] = counts.get(op.block.name, 0) + 1
        resources: dict[str, Any] = {"buffers": buffers, "kernels": kernels}
        if cpus:
            resources["cpus"] = list(cpus.values())
        lw.set_recipe({"header": {"device": self.device, "version": "1.0.0"}, "resources": resources,
                       "execution": {"runs": runs}})
        return Compiled(lw.build(), steps, counts, self.plan, len(self.weights))


def _pads(node: Node, hw: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
          dilation: tuple[int, ...]) -> tuple[int, int, int, int]:
    """ONNX pads (or auto_pad) as (top, left, bottom, right)."""
    auto = attr(node, "auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        p = list(attr(node, "pads", [0, 0, 0, 0]))
        pads = (p[0], p[1], p[2], p[3])
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    else:
        begin, end = [], []
        for size, k, s, d in zip(hw, kernel, stride, dilation, strict=True):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        pads = (begin[0], begin[1], end[0], end[1])
    # ceil_mode needs nothing here: the output cube has ONNX's (inferred) size, and the PDP block
    # computes the windows that hang past the padded input as ONNX does.
    return pads


def terminal_progress(done: int, total: int, what: str) -> None:
    width = 30
    filled = width * done // total
    sys.stdout.write(f"\rcompiling [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what[:30]:<30}")
    if done == total:
        sys.stdout.write("\n")
    sys.stdout.flush()
