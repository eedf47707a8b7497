"""Lowering the planned steps to device operations with the TaskBuilder, and emitting the loadable.

Layout (:mod:`pydla.compiler.layout`): every tensor is stored densely in its ONNX layout, so graph
inputs and outputs need no conversion; the device sees a tensor as its flat cube (the batch folded
into the channels) or as one cube per image. Batch norm is folded into the convolution's weights and
bias; constants added or multiplied per channel become SDP operands; weights go to one weight
buffer, computed tensors to one scratch arena planned by liveness, with a region after it for the
temporaries of one step at a time. Each step kind is lowered in its own module (:data:`LOWER`):
convolutions (conv2d, conv3d), element-wise work, pooling, data movement, matrix products, SHAVE
and CPU runs (elementwise, pooling, movement, matmul, shave_ops, cpuops, custom_kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.compiler import (
    conv2d,
    cpu_reasons,
    cpuops,
    custom_kernel,
    elementwise,
    matmul,
    movement,
    pooling,
    shave_ops,
)
from pydla.compiler.device_blocks import check_step_blocks
from pydla.compiler.graph import Graph, Node
from pydla.compiler.layout import (
    check_auto_pad,
    check_conv,
    flat_cube,
    images,
    prod,
)
from pydla.compiler.plan import ALIGN, MemoryPlan, Step, attr, group_steps, plan_memory
from pydla.compiler.progress import Progress, report
from pydla.errors import DlaError, NvError
from pydla.loadable.container import NUMPY_TYPES, LoadableWriter
from pydla.loadable.mixed_task import MixedTask
from pydla.loadable.shave_task import ShaveTaskBuilder
from pydla.loadable.taskbuilder import Cube, Ref, TaskBuilder
from pydla.target import config as device_config

SCRATCH, WEIGHTS = "scratch", "weights"
CPU_LIBRARY = "umd/cpulib.py"  # pydla's own CPU library, relative to the installed package
DATA_TYPES = {d: t for t, d in NUMPY_TYPES.items()}


@dataclass
class Compiled:
    """The loadable's bytes and what the compiler found worth reporting."""

    blob: bytes
    steps: int
    operations: dict[str, int]
    memory: MemoryPlan
    weights_bytes: int
    notes: list[str] = field(default_factory=list)
    # Why each CPU run exists (pydla.compiler.cpu_reasons): also in the recipe header.
    cpu_runs: list[dict[str, Any]] = field(default_factory=list)


class Lowering:
    def __init__(self, graph: Graph, config: device_config.DeviceConfig,
                 progress: Progress | None, precision: str = "fp32", use_shave: bool = True,
                 model_header: dict[str, Any] | None = None, shave_barriers: bool = True) -> None:
        self.g = graph
        self.model_header = model_header  # the ONNX model's metadata, kept in the recipe header
        self.config = config  # the device configuration compiled for: its blocks and speed rules
        self.device = config.name
        self.progress = progress
        self.precision = precision
        self.np_dtype = np.dtype(np.float16 if precision == "fp16" else np.float32)
        self.tb = TaskBuilder(precision)
        self.weights = bytearray()
        self.runs: list[tuple[str, TaskBuilder | ShaveTaskBuilder | MixedTask | dict[str, Any]]] = []
        self.use_shave = use_shave  # lower what the SHAVE kernels compute to the tiles (shave_ops)
        # a SHAVE step's first list runs beside the DLA operations before it (shave_ops, barriers)
        self.shave_barriers = shave_barriers
        self.shave_kernels: dict[str, bytes] = {}  # kernel ELFs the SHAVE task lists use, by name
        self.node: Node | None = None  # the head of the step being lowered (named by CPU runs' notes)
        self.cpu_notes: list[dict[str, Any]] = []
        self.temp_used = 0  # bytes of the current step's temporaries, after the planned arena
        self.temp_peak = 0
        # Each graph input's and output's position (the first, as list.index gave it): asked for
        # every cube, so a dictionary rather than a scan of the lists.
        self.input_index: dict[str, int] = {}
        self.output_index: dict[str, int] = {}
        for names, index in ((graph.inputs, self.input_index), (graph.outputs, self.output_index)):
            for i, name in enumerate(names):
                index.setdefault(name, i)

    # -- placement ------------------------------------------------------------------------------------

    def buffer_of(self, tensor: str) -> str:
        if self.precision == "fp16" and self.is_float(tensor):
            return SCRATCH  # fp16 copies of the inputs and outputs live in scratch (converted by SDP)
        if tensor in self.input_index:
            return f"in{self.input_index[tensor]}"
        if tensor in self.output_index:
            return f"out{self.output_index[tensor]}"
        return SCRATCH

    def is_float(self, tensor: str) -> bool:
        return bool(self.g.dtypes[tensor] == np.float32)

    def storage(self, tensor: str) -> tuple[str, int]:
        """The buffer holding ``tensor`` and its byte offset there."""
        root = self.roots[tensor]
        buf = self.buffer_of(root)
        return buf, (self.plan.offsets.get(root, 0) if buf == SCRATCH else 0) + self.within[tensor]

    def storage_dtype(self, tensor: str) -> np.dtype[Any]:
        """The element type of ``tensor`` where it is stored (float tensors in scratch: the device's)."""
        if self.is_float(tensor):
            return self.np_dtype if self.storage(tensor)[0] == SCRATCH else np.dtype(np.float32)
        return self.g.dtypes[tensor]

    def elsize(self, tensor: str) -> int:
        return int(self.storage_dtype(tensor).itemsize)

    def cube(self, tensor: str, where: str) -> Cube:
        """The flat cube of ``tensor`` (the whole tensor, batch folded into the channels)."""
        if not self.is_float(tensor):
            dtype = self.g.dtypes[tensor]
            why = ("pydla compiles float32 models and computes them in fp32 or fp16 (the precision "
                   "option)" if dtype.kind == "f" else "the device computes floating point (fp32, fp16) only")
            raise DlaError(NvError.NotSupported, f"{where}: tensor '{tensor}' is {dtype}; {why}")
        buf, offset = self.storage(tensor)
        return self.tb.cube(buf, flat_cube(self.g.shapes[tensor], where), offset=offset,
                            precision=self.precision)

    def image(self, tensor: str, index: int, where: str) -> Cube:
        """The cube of image ``index`` of a batched tensor (N, C, ...)."""
        whole = self.cube(tensor, where)
        _, shape = images(self.g.shapes[tensor], where)
        size = prod(shape) * self.elsize(tensor)
        return self.tb.cube(whole.buffer, shape, offset=whole.offset + index * size, precision=self.precision)

    def const(self, values: np.ndarray) -> Ref:
        return self.const_raw(values, self.np_dtype)

    def const_raw(self, values: np.ndarray, dtype: np.dtype[Any]) -> Ref:
        """Constant ``values`` as ``dtype`` in the weights buffer."""
        # A float32 beyond fp16's range becomes +-inf in fp16, as the device's own conversion makes
        # it: an attention mask's float32 minimum masks as -inf does. Not worth a warning.
        with np.errstate(over="ignore"):
            data = np.ascontiguousarray(values, dtype=dtype).tobytes()
        self.weights += b"\0" * (-len(self.weights) % ALIGN)
        offset = len(self.weights)
        self.weights += data
        return self.tb.ref(WEIGHTS, max(len(data), 1), offset)

    def temp(self, nbytes: int) -> tuple[str, int]:
        """Scratch bytes for the current step only (after the planned arena): (buffer, offset)."""
        start = self.plan.peak + self.temp_used
        start += -start % ALIGN
        self.temp_used = start + nbytes - self.plan.peak
        self.temp_peak = max(self.temp_peak, self.temp_used)
        return SCRATCH, start

    def param_buffer(self, tensor: str, where: str) -> cpuops.Buf:
        """A tensor read by a CPU run as a parameter, in its model type: a graph input from its own
        buffer (also in fp16 mode), a constant from the weights."""
        if tensor in self.g.consts:
            value = self.g.consts[tensor]
            ref = self.const_raw(value, value.dtype)
            return cpuops.Buf(ref.buffer, ref.offset, value.nbytes)
        dtype = self.g.dtypes[tensor]
        size = prod(self.g.shapes[tensor]) * dtype.itemsize
        if tensor in self.input_index and tensor not in self.g.half_io:
            return cpuops.Buf(f"in{self.input_index[tensor]}", 0, size)
        if self.storage_dtype(tensor) != dtype:
            raise DlaError(NvError.NotSupported, f"{where}: parameter '{tensor}' is computed in "
                                                 f"{self.precision}; compile with fp32")
        buf, offset = self.storage(tensor)
        return cpuops.Buf(buf, offset, size)

    def kernel_data(self, name: str, elf: bytes) -> Ref:
        """SHAVE kernel ``name``'s ELF as KernelData: the loadable's constant buffer ``shave_<name>``
        (written once, whatever the number of task lists calling it)."""
        self.shave_kernels[name] = elf
        return Ref(f"shave_{name}", 0, len(elf))

    def text_attr(self, node: Node, name: str, default: str) -> str:
        value = attr(node, name, default)
        return value.decode() if isinstance(value, bytes) else str(value)

    def auto_pad(self, node: Node) -> str:
        return check_auto_pad(node.where(), self.text_attr(node, "auto_pad", "NOTSET"))

    def check_conv(self, node: Node, transpose: bool) -> int:
        """The node's group, after checking it and kernel_shape against the input and weights."""
        groups = int(attr(node, "group", 1))
        check_conv(node.where(), self.g.shapes[node.inputs[0]], self.g.shapes[node.inputs[1]], groups,
                   attr(node, "kernel_shape", None), transpose)
        return groups

    # -- the steps -------------------------------------------------------------------------------------

    def run(self) -> Compiled:
        report(self.progress, "planning")
        steps = group_steps(self.g)
        fp16 = self.precision == "fp16"
        external = {t for t in [*self.g.inputs, *self.g.outputs] if not fp16 or not self.is_float(t)}

        def element(t: str) -> int:
            return self.np_dtype.itemsize if self.is_float(t) else int(self.g.dtypes[t].itemsize)

        self.plan, self.roots, self.within = plan_memory(self.g, steps, external, element=element,
                                                         keep_io=fp16)
        if fp16:
            for i, name in enumerate(self.g.inputs):  # model-layout fp32 in, device fp16 scratch out
                if self.is_float(name) and not self.g.is_empty(name):
                    shape = flat_cube(self.g.shapes[name], f"input '{name}'")
                    self.tb.sdp(self.tb.cube(f"in{i}", shape, precision=self.io_precision(name)),
                                self.cube(name, name))
        for i, step in enumerate(steps):
            report(self.progress, "lowering", i + 1, len(steps), step.head.name)
            self.temp_used = 0
            self.node = step.head
            mark = (self.tb, len(self.tb.ops), len(self.runs))
            LOWER[step.kind](self, step)
            check_step_blocks(step.head, self.config, [b for _, b in self.runs], self.tb, *mark)
        if fp16:
            for i, name in enumerate(self.g.outputs):
                if self.is_float(name) and not self.g.is_empty(name):
                    shape = flat_cube(self.g.shapes[name], f"output '{name}'")
                    self.tb.sdp(self.cube(name, name),
                                self.tb.cube(f"out{i}", shape, precision=self.io_precision(name)))
        report(self.progress, "writing")
        return self.emit(len(steps))

    def io_precision(self, tensor: str) -> str:
        """The precision of a float graph input's or output's own buffer: fp32, or fp16 for the
        float16 inputs and outputs of a float16 model (:mod:`pydla.compiler.half`)."""
        return "fp16" if tensor in self.g.half_io else "fp32"

    def io_dtype(self, tensor: str) -> np.dtype[Any]:
        """The element type of a graph input or output in the loadable."""
        return np.dtype(np.float16) if tensor in self.g.half_io else self.g.dtypes[tensor]

    def conv_bias(self, node: Node, k: int) -> tuple[np.ndarray | None, Ref | None]:
        """A convolution's bias: its values when constant (zeros when absent), else its buffer."""
        name = node.inputs[2] if len(node.inputs) > 2 else ""
        if not name or name in self.g.consts:
            value = self.const_input(node, 2, "bias") if name else np.zeros(k)
            return value.astype(np.float64), None
        self.cube(name, node.where())  # checks that it is float32
        buf, offset = self.storage(name)
        return None, self.tb.ref(buf, k * self.np_dtype.itemsize, offset)

    def epilogue(self, nodes: list[Node], prev: str, channels: int,
                 axis: int = 1) -> tuple[Any, dict[str, Any]]:
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
                act = self.activation(n, channels, axis)
            prev = n.outputs[0]
        return ew, act

    def activation(self, n: Node, channels: int, axis: int = 1) -> dict[str, Any]:
        """SDP's activation registers for ``n``; its per-channel parameters are along ``axis``."""
        return elementwise.activation_kwargs(self, n, channels, axis)

    def bn_params(self, n: Node) -> tuple[np.ndarray, np.ndarray]:
        """A BatchNormalization's per-channel scale and shift (its constants, in float64)."""
        gamma, beta, mean, var = (self.const_input(n, i, what).astype(np.float64)
                                  for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")))
        with np.errstate(all="ignore"):  # a negative variance gives NaN, as onnxruntime's does
            scale = gamma / np.sqrt(var + attr(n, "epsilon", 1e-5))
            return scale, beta - mean * scale

    def const_input(self, node: Node, index: int, what: str) -> np.ndarray:
        name = node.inputs[index] if index < len(node.inputs) else ""
        if name not in self.g.consts:
            raise DlaError(NvError.NotSupported,
                           f"{node.where()}: its {what} ('{name}') must be a constant (an initializer)")
        return np.asarray(self.g.consts[name])

    # -- CPU runs -------------------------------------------------------------------------------------

    def finish_task(self) -> None:
        """Close the NPU task being built (a CPU run, a SHAVE task list or the end follows)."""
        if self.tb.ops:
            self.runs.append(("npu", self.tb))
            self.tb = TaskBuilder(self.precision)

    # -- the loadable --------------------------------------------------------------------------------

    def emit(self, steps: int) -> Compiled:
        self.finish_task()
        sizes: dict[str, int] = {}
        data_types: dict[str, int] = {}
        for prefix, names in (("in", self.g.inputs), ("out", self.g.outputs)):
            for i, name in enumerate(names):
                dtype = DATA_TYPES.get(self.io_dtype(name))
                if dtype is None:
                    what = "input" if prefix == "in" else "output"
                    raise DlaError(NvError.NotSupported,
                                   f"{what} '{name}' is {self.g.dtypes[name]}: a loadable's tensors are "
                                   f"{', '.join(str(t) for t in DATA_TYPES)}")
                data_types[name] = int(dtype)
                sizes[f"{prefix}{i}"] = prod(self.g.shapes[name]) * self.io_dtype(name).itemsize
        if self.plan.peak + self.temp_peak:
            sizes[SCRATCH] = self.plan.peak + self.temp_peak
        sizes[WEIGHTS] = max(len(self.weights), 8)
        lw = LoadableWriter(self.device)
        lw.add_weights(WEIGHTS, bytes(self.weights).ljust(sizes[WEIGHTS], b"\0"), alignment=ALIGN)
        constant = {WEIGHTS}
        for kernel, elf in self.shave_kernels.items():  # KernelData: each kernel's ELF, once
            name = f"shave_{kernel}"
            sizes[name] = len(elf)
            lw.add_weights(name, elf, alignment=ALIGN)
            constant.add(name)
        names = list(sizes)
        buffers = []
        for name in names:
            kind = ("weight" if name in constant else "internal" if name == SCRATCH
                    else "input" if name.startswith("in") else "output")
            lw.add_memory(name, kind, sizes[name], ALIGN)
            entry: dict[str, Any] = {"name": name, "type": kind}
            if kind in ("internal", "weight"):
                entry["size"] = sizes[name]
            buffers.append(entry)
        for prefix, direction, names_ in (("in", "input", self.g.inputs), ("out", "output", self.g.outputs)):
            for i, name in enumerate(names_):
                public = self.g.output_names[i] if prefix == "out" and self.g.output_names else name
                lw.add_tensor(public, names.index(f"{prefix}{i}"), self.g.shapes[name], data_types[name],
                              direction, i)
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
            assert isinstance(item, (TaskBuilder, ShaveTaskBuilder, MixedTask))
            kernel = f"task{len(kernels)}"
            built = item.build()
            if not isinstance(item, TaskBuilder):
                acts = item.acts if isinstance(item, ShaveTaskBuilder) else item.sb.acts
                counts["SHAVE"] = counts.get("SHAVE", 0) + len(acts)
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
        header: dict[str, Any] = {"device": self.device, "version": "1.0.0"}
        if self.model_header:
            header.update(self.model_header)
        if self.cpu_notes:
            header[cpu_reasons.HEADER_KEY] = self.cpu_notes
        lw.set_recipe({"header": header, "resources": resources, "execution": {"runs": runs}})
        return Compiled(lw.build(), steps, counts, self.plan, len(self.weights), cpu_runs=self.cpu_notes)


def _planned(lw: Lowering, step: Step) -> None:
    """Nothing to emit: an alias (the planner made both names one tensor), a concatenation whose
    inputs the planner placed in their channel ranges of the output, or a slice that is a range of
    its source."""


LOWER: dict[str, Callable[[Lowering, Step], None]] = {
    "alias": _planned, "concat_view": _planned, "slice_view": _planned,
    "conv": conv2d.lower_conv, "deconv": conv2d.lower_deconv,
    "copy": movement.copy, "constant": movement.constant, "transpose": movement.transpose,
    "concat": movement.concat,
    "split": movement.split, "slice": movement.slice_, "pad": movement.pad, "resize": movement.resize,
    "gemm": matmul.lower_gemm, "sdp": elementwise.lower_sdp, "pool": pooling.lower_pool,
    "lrn": pooling.lower_lrn, "cpu": shave_ops.softmax_step, "unary": shave_ops.unary_step,
    "layernorm": shave_ops.layernorm_step,
    "reduce": shave_ops.reduce_step, "pow": cpuops.pow_run, "compare": cpuops.compare_run,
    "where": cpuops.where_run, "cast": cpuops.cast_run, "argmax": cpuops.argmax_run,
    "gather": cpuops.gather_run, "expand": movement.expand, "tile": cpuops.tile_run,
    "custom": custom_kernel.lower,
}
