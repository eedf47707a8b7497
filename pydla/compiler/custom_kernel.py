"""The ONNX custom operator ``ShaveKernel`` of domain ``ai.pydla``: a kernel author's SHAVE kernel
in a model, compiled to one SHAVE task list that calls it.

Attributes (all optional but one of the first two):

- ``kernel`` (string): the kernel's ELF (built with ``pydla kernel build``), a path relative to the
  model file's directory (or, for a model given as bytes or an ``onnx.ModelProto``, to
  ``compile_model``'s ``base_dir``, by default the current directory), or absolute; a relative path
  may not leave that directory (no ``..``);
- ``kernel_elf`` (tensor of uint8, or string): the ELF's bytes in the model itself;
- ``entry`` (string): a function to enter instead of the ELF's entry point (unstripped ELFs only);
- ``params`` (tensor of any type, or string): the bytes that follow the MemRefData in the argument
  buffer (a tensor's elements little-endian, as ONNX stores them);
- ``output_shape`` (ints), ``output_dtype`` (int, an ONNX TensorProto element type): the output's;
  by default input 0's;
- ``stack_bytes`` (int): the tile's stack (default 8 KiB).

The argument convention is :mod:`pydla.kernels`': one MemRefData per input, then one for the
output, then ``params``. The whole of every tensor goes to tile 0's CMX (DMA in, the kernel, DMA
out). The kernel sees the model's element types: in an fp16 compile, the float32 tensors the device
keeps as fp16 are converted to float32 copies for the call and back after it. The node has one
output. On a configuration without SHAVE tiles the compile fails (NotSupported): a custom kernel
has no host equivalent. ``compile_model(..., shave=False)`` keeps
only the shipped kernels' operators on the host; custom kernels still run on the tiles.

Usage (building the node)::

    helper.make_node("ShaveKernel", ["x"], ["y"], domain="ai.pydla", kernel="scale_add.elf",
                     params=numpy_helper.from_array(np.array([2.0, 1.0], np.float32)))
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pydla.compiler.graph_types import Graph, Node
from pydla.compiler.layout import flat_cube, prod
from pydla.compiler.operators import SHAVE_KERNEL
from pydla.errors import DlaError, NvError
from pydla.kernels.build import RUNTIME, runtime_elf
from pydla.kernels.image import KernelImage, check_elf, read_elf
from pydla.kernels.invocation import CUSTOM_KERNEL_ID, DATA_TYPES, plan_invocation
from pydla.kernels.memref import DEFAULT_STACK
from pydla.loadable.shave_task import task_list
from pydla.loadable.taskbuilder import Ref
from pydla.logconfig import Detail, first_line, printable

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering
    from pydla.compiler.plan import Step

DOMAIN = "ai.pydla"
OP_TYPE = "ShaveKernel"
ATTRIBUTES = ("kernel", "kernel_elf", "entry", "params", "output_shape", "output_dtype", "stack_bytes")
SPEC = "spec"  # the imported node's only attribute: its CustomKernel


@dataclass(frozen=True)
class CustomKernel:
    """A ShaveKernel node's attributes, checked: its kernel image and what the call needs."""

    name: str  # the ELF file's stem, or the node's name for an embedded ELF
    image: KernelImage
    params: bytes
    stack: int
    output_shape: tuple[int, ...] | None
    output_dtype: np.dtype[Any] | None


def is_custom(proto: onnx.NodeProto) -> bool:
    """Whether the ONNX node is of pydla's domain (its operator is checked on import)."""
    return proto.domain == DOMAIN


def import_node(node: Node, proto: onnx.NodeProto, base_dir: Path | None) -> Node:
    """The compiler's node for ONNX node ``proto`` of domain ai.pydla: its attributes checked, its
    kernel read (a path from ``base_dir``, default the current directory).

    Usage (pydla.compiler.graph.import_graph): ``graph.nodes.append(import_node(node, proto, base_dir))``
    """
    where = f"node '{printable(node.name)}' ({DOMAIN} {printable(proto.op_type)})"
    if proto.op_type != OP_TYPE:
        raise DlaError(NvError.NotSupported, f"{where}: domain '{DOMAIN}' has one operator, {OP_TYPE}")
    unknown = sorted(set(node.attrs) - set(ATTRIBUTES))
    if unknown:
        raise DlaError(NvError.BadValue, f"{where}: unknown attribute(s) {', '.join(unknown)} (a {OP_TYPE} "
                                         f"takes {', '.join(ATTRIBUTES)})")
    outputs = [o for o in node.outputs if o]
    if len(node.outputs) != 1 or not outputs:
        raise DlaError(NvError.BadValue, f"{where}: {len(outputs)} outputs {outputs}: a {OP_TYPE} has one")
    a = node.attrs
    entry = _text(a["entry"], where, "entry") if "entry" in a else None
    if ("kernel" in a) == ("kernel_elf" in a):
        raise DlaError(NvError.BadValue, f"{where}: give the kernel's ELF as 'kernel' (a path) or "
                                         "'kernel_elf' (its bytes), one of them")
    if "kernel" in a:
        path = kernel_path(_text(a["kernel"], where, "kernel"), base_dir, where)
        data, name = read_elf(path, f"{where}: kernel")
    else:
        data, name = _bytes(a["kernel_elf"], where, "kernel_elf", uint8_only=True), node.name
    image = check_elf(data, f"{where}: kernel '{name}'", entry)
    params = _bytes(a["params"], where, "params") if "params" in a else b""
    shape = None
    if "output_shape" in a:
        value = a["output_shape"]
        if not isinstance(value, (list, tuple)) or not all(isinstance(d, int) and d >= 1 for d in value):
            raise DlaError(NvError.BadValue,
                           f"{where}: output_shape {value!r}: a list of ints, each at least 1")
        shape = tuple(int(d) for d in value)
    dtype = None
    if "output_dtype" in a:
        code = a["output_dtype"]
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))
        except (KeyError, TypeError, ValueError):
            dtype = None
        if dtype not in DATA_TYPES:
            raise DlaError(NvError.BadValue, f"{where}: output_dtype {code!r}: an ONNX element type of "
                                             f"{', '.join(str(t) for t in DATA_TYPES)}")
    stack = a.get("stack_bytes", DEFAULT_STACK)
    if not isinstance(stack, int):
        raise DlaError(NvError.BadValue, f"{where}: stack_bytes {stack!r} is not an int")
    if not [i for i in node.inputs if i] and (shape is None or dtype is None):
        raise DlaError(NvError.BadValue, f"{where}: no inputs: give output_shape and output_dtype")
    spec = CustomKernel(name, image, params, stack, shape, dtype)
    return Node(node.name, SHAVE_KERNEL, list(node.inputs), list(node.outputs), {SPEC: spec})


def kernel_path(text: str, base_dir: Path | None, where: str) -> Path:
    """Where a ``kernel`` attribute points: absolute as it is, relative from ``base_dir`` (default
    the current directory) and inside it.

    Usage: ``kernel_path("k/scale_add.elf", Path("/models"), where)`` -> ``/models/k/scale_add.elf``
    """
    path = PurePath(text)
    if not text or "\0" in text:
        raise DlaError(NvError.BadValue, f"{where}: kernel {text!r} is not a path")
    if path.is_absolute():
        return Path(path)
    if ".." in path.parts:
        raise DlaError(NvError.BadValue, f"{where}: kernel '{text}': a relative path may not leave the "
                                         "model's directory ('..'); give an absolute path")
    return (base_dir if base_dir is not None else Path.cwd()) / path


def kernel_files(model: onnx.ModelProto, base_dir: Path | None) -> list[Path]:
    """The kernel files the model's ShaveKernel nodes name (those that are files): what a compiled
    loadable also depends on, beside the model's bytes (:mod:`pydla.session` keys its cache by them).

    Usage: ``for path in kernel_files(onnx.load(p), Path(p).parent): digest.update(path.read_bytes())``
    """
    found = []
    for n in model.graph.node:
        if not is_custom(n):
            continue
        for attr in n.attribute:
            if attr.name == "kernel" and attr.type == onnx.AttributeProto.STRING:
                try:
                    path = kernel_path(attr.s.decode(), base_dir, "")
                except (DlaError, UnicodeDecodeError):
                    continue  # the compile reports it
                if path.is_file():
                    found.append(path)
    return found


def _text(value: Any, where: str, name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            pass
    raise DlaError(NvError.BadValue, f"{where}: attribute '{name}' must be a UTF-8 string, not {value!r:.60}")


def _bytes(value: Any, where: str, name: str, uint8_only: bool = False) -> bytes:
    """A string attribute's bytes, or a tensor attribute's elements (little-endian)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, onnx.TensorProto):
        try:
            array = numpy_helper.to_array(value)
        except Exception as e:  # onnx raises several types for malformed tensors
            raise DlaError(NvError.BadValue,
                           f"{where}: attribute '{name}' cannot be read: {first_line(e)}") from Detail(str(e))
        if array.dtype.kind not in "biuf" or (uint8_only and array.dtype != np.uint8):
            want = "uint8" if uint8_only else "a numeric type"
            raise DlaError(NvError.BadValue,
                           f"{where}: attribute '{name}' is a tensor of {array.dtype}, not {want}")
        return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    raise DlaError(NvError.BadValue, f"{where}: attribute '{name}' must be a tensor or a string, not "
                                     f"{type(value).__name__}")


def spec(node: Node) -> CustomKernel:
    value = node.attrs.get(SPEC)
    if not isinstance(value, CustomKernel):  # an ONNX-domain node named like the imported form
        raise DlaError(NvError.NotSupported, f"{node.where()}: a {OP_TYPE} node belongs to domain '{DOMAIN}'")
    return value


def infer(graph: Graph, node: Node) -> None:
    """The output's shape and element type: the attributes', else input 0's."""
    s = spec(node)
    first = next((i for i in node.inputs if i), "")
    out = node.outputs[0]
    shape = s.output_shape if s.output_shape is not None else graph.shapes.get(first)
    dtype = s.output_dtype if s.output_dtype is not None else graph.dtypes.get(first)
    if shape is not None:
        graph.shapes[out] = shape
    if dtype is not None:
        graph.dtypes[out] = dtype


def output_infos(graph: Graph) -> list[onnx.ValueInfoProto]:
    """The custom nodes' outputs as typed values: onnx's shape inference of the graph without those
    nodes (which it cannot infer) takes them as inputs."""
    outs = [n.outputs[0] for n in graph.nodes if n.op_type == SHAVE_KERNEL]
    return [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(graph.dtypes[o]),
                                          list(graph.shapes[o]))
            for o in outs if o in graph.shapes and o in graph.dtypes]


# -- lowering -----------------------------------------------------------------------------------------

def lower(lw: Lowering, step: Step) -> None:
    """One SHAVE task list: the inputs DMA'd into tile 0's CMX, the kernel, the output DMA'd back.

    Usage: ``LOWER["custom"] = custom_kernel.lower`` (pydla.compiler.lower)
    """
    node = step.head
    s = spec(node)
    where = node.where()
    shave = lw.config.shave
    if shave is None or shave.tiles == 0:
        raise DlaError(NvError.NotSupported, f"{where}: a custom SHAVE kernel runs on SHAVE tiles, and "
                                             f"device configuration '{lw.config.name}' has none (compile for "
                                             "'full')")
    in_refs: list[Ref] = []
    in_specs = []
    for name in [i for i in node.inputs if i]:
        dtype = lw.g.dtypes[name]  # the kernel sees the model's types
        _check_type(where, name, dtype)
        if name in lw.g.consts:
            ref = lw.const_raw(np.asarray(lw.g.consts[name]), dtype)
        else:
            ref = _in_model_type(lw, name, where)
        in_refs.append(ref)
        in_specs.append((tuple(lw.g.shapes[name]), dtype))
    out = step.output
    out_dtype = lw.g.dtypes[out]
    _check_type(where, out, out_dtype)
    out_ref, converted = _output_in_model_type(lw, out, where)
    inv = plan_invocation(s.image, in_specs, [(tuple(lw.g.shapes[out]), out_dtype)], s.params,
                          shave.cmx_bytes, where, s.stack)
    runtime = lw.kernel_data(RUNTIME, runtime_elf())
    kernel = lw.kernel_data(_kernel_name(lw, s), s.image.elf)
    number = list(lw.shave_kernels).index(kernel.buffer.removeprefix("shave_"))
    lw.finish_task()
    sb = task_list(shave.tiles, shave.cmx_bytes, shave.barriers, runtime, kernel, s.image, inv, in_refs,
                   [out_ref], kernel_id=CUSTOM_KERNEL_ID + number, name=node.name)
    lw.runs.append(("shave", sb))
    if converted is not None:  # back to the device's fp16, in the NPU task after the list
        lw.tb.sdp(converted, lw.cube(out, where))


# In an fp16 compile, float32 tensors between device operations are stored as fp16: the kernel gets
# float32 copies (SDP converts, before and after the list), so it sees the types of the model.

def _in_model_type(lw: Lowering, name: str, where: str) -> Ref:
    dtype = lw.g.dtypes[name]
    size = prod(lw.g.shapes[name]) * dtype.itemsize
    if lw.storage_dtype(name) == dtype:
        buf, offset = lw.storage(name)
        return Ref(buf, offset, size)
    buf, offset = lw.temp(size)
    lw.tb.sdp(lw.cube(name, where), lw.tb.cube(buf, flat_cube(lw.g.shapes[name], where), offset=offset,
                                               precision="fp32"))
    return Ref(buf, offset, size)


def _output_in_model_type(lw: Lowering, name: str, where: str) -> tuple[Ref, Any]:
    """Where the kernel writes output ``name``, and the float32 copy to convert when that is one."""
    dtype = lw.g.dtypes[name]
    size = prod(lw.g.shapes[name]) * dtype.itemsize
    if lw.storage_dtype(name) == dtype:
        buf, offset = lw.storage(name)
        return Ref(buf, offset, size), None
    buf, offset = lw.temp(size)
    return Ref(buf, offset, size), lw.tb.cube(buf, flat_cube(lw.g.shapes[name], where), offset=offset,
                                              precision="fp32")


def _check_type(where: str, tensor: str, dtype: np.dtype[Any]) -> None:
    if dtype not in DATA_TYPES:
        raise DlaError(NvError.NotSupported, f"{where}: '{tensor}' is {dtype}; a SHAVE kernel's MemRefData "
                                             f"takes {', '.join(str(t) for t in DATA_TYPES)}")


def _kernel_name(lw: Lowering, s: CustomKernel) -> str:
    """``custom_<name>``, numbered when another kernel of that name is already in the loadable."""
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in s.name)[:40] or "kernel"
    name, n = f"custom_{clean}", 1
    while lw.shave_kernels.get(name, s.image.elf) != s.image.elf:
        n += 1
        name = f"custom_{clean}_{n}"
    return name


def base_dir_of(model: str | os.PathLike[str] | Any) -> Path | None:
    """The directory a model file's relative kernel paths start from (None for a model in memory)."""
    return Path(model).resolve().parent if isinstance(model, (str, os.PathLike)) else None
