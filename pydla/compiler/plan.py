"""Grouping ONNX nodes into device steps (with fusion) and planning their memory by liveness.

A step is what one device operation (or a fused CONV+SDP pair) computes: a convolution with the
batch norm, residual add and activation that follow it; a pooling; an element-wise SDP operation;
and so on. Reshape-like nodes become aliases (no device work: batch-1 tensors are stored densely,
so the bytes are the same). Tensors computed on the device live in one scratch arena; a tensor's
range is free again after its last use, and later tensors reuse it (first fit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.compiler.graph import Graph, Node
from pydla.compiler.layout import channel_values, prod
from pydla.compiler.operators import (
    ACTIVATIONS,
    ALIASES,
    CPU_UNARY,
    ELTWISE,
    POOLS,
    PRODUCTS,
    SDP_COMPOSITES,
    SHAVE_KERNEL,
    unsupported,
)
from pydla.errors import DlaError, NvError
from pydla.loadable.cpuops import ARGMAX_OPS, COMPARE_OPS, REDUCE_OPS

ALIGN = 64


@dataclass
class Step:
    kind: str
    nodes: list[Node]
    inputs: list[str]
    output: str
    extra: list[str] = field(default_factory=list)  # further outputs it writes (MaxPool's Indices)

    @property
    def head(self) -> Node:
        return self.nodes[0]


@dataclass
class MemoryPlan:
    offsets: dict[str, int] = field(default_factory=dict)  # root tensor -> scratch offset
    sizes: dict[str, int] = field(default_factory=dict)
    peak: int = 0
    total: int = 0  # without reuse

    def report(self) -> str:
        saved = self.total - self.peak
        return (f"scratch arena {self.peak} bytes for {len(self.offsets)} tensors "
                f"({self.total} without reuse, {saved} saved)")


def group_steps(graph: Graph) -> list[Step]:
    """The device steps, in order; fused nodes are consumed by their convolution."""
    steps: list[Step] = []
    fused: set[int] = set()
    producer = {o: j for j, n in enumerate(graph.nodes) for o in n.outputs}
    # Built once: looking a node up in the list, or scanning it for a tensor's readers, per node
    # made compiling quadratic in the graph's size. Nodes are found by identity (their dataclass
    # equality compares every field).
    position = {id(n): j for j, n in enumerate(graph.nodes)}
    users = consumer_map(graph)
    outputs = set(graph.outputs)
    for i, node in enumerate(graph.nodes):
        if i in fused:
            continue
        op = node.op_type
        if op in PRODUCTS:
            chain = [node]
            out = node.outputs[0]
            for nxt_kind in ("BatchNormalization", "eltwise", "activation"):
                nxt = _sole_consumer(users, outputs, out)
                if nxt is None or position[id(nxt)] in fused:
                    break
                constant = all(not t or t in graph.consts for t in nxt.inputs[1:])
                image = op == "Conv" and len(graph.shapes.get(node.inputs[0], ())) <= 4  # not a volume
                ok = ((nxt_kind == "BatchNormalization" and nxt.op_type == "BatchNormalization"
                       and image and constant and not nxt.attrs.get("training_mode", 0))
                      or (nxt_kind == "eltwise" and nxt.op_type in ("Add",) and image
                          and _other_is_fusable(graph, nxt, out, producer, i))
                      or (nxt_kind == "eltwise" and op == "MatMul" and nxt.op_type == "Add"
                          and _column_bias(graph, nxt, out))
                      or (nxt_kind == "activation" and nxt.op_type in ACTIVATIONS and constant
                          and _per_channel(graph, nxt, op) and _on_sdp(graph, nxt)))
                if not ok:
                    continue
                chain.append(nxt)
                fused.add(position[id(nxt)])
                out = nxt.outputs[0]
            kind = {"Conv": "conv", "ConvTranspose": "deconv"}.get(op, "gemm")
            inputs = [t for n in chain for t in n.inputs if t and t not in graph.consts
                      and t not in (m.outputs[0] for m in chain)]
            steps.append(Step(kind, chain, inputs, out))
        elif op in ALIASES:
            steps.append(Step("alias", [node], [node.inputs[0]], node.outputs[0]))
        elif op in POOLS:
            extra = [o for o in node.outputs[1:] if o]
            steps.append(Step("pool", [node], [node.inputs[0]], node.outputs[0], extra))
        elif op == "LRN":
            steps.append(Step("lrn", [node], [node.inputs[0]], node.outputs[0]))
        elif (op in ACTIVATIONS or op in ELTWISE or op == "BatchNormalization") and _on_sdp(graph, node):
            inputs = [t for t in node.inputs if t and t not in graph.consts]
            steps.append(Step("sdp", [node], inputs, node.outputs[0]))
        elif op in SDP_COMPOSITES and _on_sdp(graph, node):
            steps.append(Step("sdp", [node], [node.inputs[0]], node.outputs[0]))
        elif op == "Concat":
            steps.append(Step("concat", [node], [t for t in node.inputs if t not in graph.consts],
                              node.outputs[0]))
        elif op == "Transpose":
            steps.append(Step("transpose", [node], [node.inputs[0]], node.outputs[0]))
        elif op in ("Softmax", "LogSoftmax"):
            steps.append(Step("cpu", [node], [node.inputs[0]], node.outputs[0]))
        elif op == "LayerNormalization":  # kept whole for the SHAVE tiles (graph.keeps_whole)
            steps.append(Step("layernorm", [node], [node.inputs[0]], node.outputs[0]))
        elif op in CPU_UNARY:
            steps.append(Step("unary", [node], [node.inputs[0]], node.outputs[0]))
        elif op in REDUCE_OPS:
            steps.append(Step("reduce", [node], [node.inputs[0]], node.outputs[0]))
        elif op in ("Gather", "Expand", "Tile"):
            inputs = [t for t in node.inputs if t and t not in graph.consts]
            steps.append(Step(op.lower(), [node], inputs, node.outputs[0]))
        elif op in COMPARE_OPS or op in ("Where", "Cast") or op in ARGMAX_OPS:
            inputs = [t for t in node.inputs if t and t not in graph.consts]
            steps.append(Step(op.lower() if op in ("Where", "Cast") else "compare" if op in COMPARE_OPS
                              else "argmax", [node], inputs, node.outputs[0]))
        elif op == "Pow":
            steps.append(Step("pow", [node], [t for t in node.inputs if t not in graph.consts],
                              node.outputs[0]))
        elif op in ("Slice", "Pad", "Resize"):
            # Parameters computed at run time (starts, pads, scales, ...) are read by the step too.
            inputs = [t for t in node.inputs if t and t not in graph.consts]
            steps.append(Step(op.lower(), [node], inputs, node.outputs[0]))
        elif op == SHAVE_KERNEL:  # a kernel author's (pydla.compiler.custom_kernel)
            steps.append(Step("custom", [node], [t for t in node.inputs if t and t not in graph.consts],
                              node.outputs[0]))
        elif op == "Split":
            for out in node.outputs:  # one copy per part (an empty part has nothing to copy)
                if out and out not in graph.consts:
                    steps.append(Step("split", [node], [node.inputs[0]], out))
        else:
            raise DlaError(NvError.NotSupported, f"{node.where()}: {unsupported(op)}")
    # Outputs known at compile time (a Dropout's mask, a folded value, a reduction of an empty
    # tensor): the constant is copied into the output buffer. An empty output has nothing to copy.
    constants = [Step("constant", [Node(f"constant output '{t}'", "Constant", [], [t], {})], [], t)
                 for t in dict.fromkeys(graph.outputs) if t in graph.consts and not graph.is_empty(t)]
    return constants + steps


def _column_bias(graph: Graph, add: Node, out: str) -> bool:
    """Whether ``add`` adds a constant to each column of MatMul result ``out`` (a bias over its last
    axis, or one scalar), or a float32 vector computed at run time along that axis, into a tensor of
    the same shape: SDP's per-channel bias or operand of the product's cube (pydla.compiler.matmul),
    so that a Linear is one CONV + SDP pair, and so is attention's scores plus its mask."""
    other = add.inputs[1] if add.inputs[0] == out else add.inputs[0]
    shape = graph.shapes.get(out, ())
    if other == out or not shape or graph.shapes.get(add.outputs[0]) != shape:
        return False
    if other not in graph.consts:  # a vector computed at run time (attention's additive mask)
        vector = graph.shapes.get(other, ())
        return (graph.dtypes.get(other) == np.dtype(np.float32) and bool(vector)
                and vector[-1] == shape[-1] == int(np.prod(vector)) and len(vector) <= len(shape))
    value = graph.consts[other]
    return value.dtype.kind == "f" and (value.size == 1 or (value.size == shape[-1] == value.shape[-1]))


def _on_sdp(graph: Graph, node: Node) -> bool:
    """Whether an element-wise node goes to SDP: any but HardSigmoid (a lookup table, float types
    only; alpha 0 stays a CPU run, whose 0 * inf is NaN as ONNX's) and the composites, which on
    float64 or integer tensors stay CPU runs."""
    if node.op_type != "HardSigmoid" and node.op_type not in SDP_COMPOSITES:
        return True
    if node.op_type == "HardSigmoid" and float(node.attrs.get("alpha", 0.2)) == 0:
        return False
    dtype = graph.dtypes.get(node.outputs[0])
    return dtype is not None and dtype in (np.dtype(np.float32), np.dtype(np.float16))


def _per_channel(graph: Graph, act: Node, producer_op: str) -> bool:
    """An activation fused into a convolution (channels: axis 1) or a matrix product (channels: the
    last axis) has one parameter per channel; PRelu's slope must be that."""
    if act.op_type != "PRelu" or len(act.inputs) < 2:
        return True
    shape = graph.shapes.get(act.outputs[0], ())
    if len(shape) < 2:
        return False
    axis = -1 if producer_op in ("Gemm", "MatMul") else 1
    return channel_values(graph.consts[act.inputs[1]], shape, axis) is not None


def consumer_map(graph: Graph) -> dict[str, list[Node]]:
    """Every tensor's readers, in graph order, each node once. Built once per pass: scanning the
    nodes for one tensor's readers at a time made compiling quadratic in the graph's size."""
    users: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for name in dict.fromkeys(n.inputs):
            users.setdefault(name, []).append(n)
    return users


def _sole_consumer(users: dict[str, list[Node]], outputs: set[str], tensor: str) -> Node | None:
    if tensor in outputs:
        return None
    readers = users.get(tensor, [])
    return readers[0] if len(readers) == 1 else None


def _other_is_fusable(graph: Graph, add: Node, mine: str, producer: dict[str, int], at: int) -> bool:
    """The other operand of an Add after the convolution at node ``at`` can be read by its SDP: a
    constant per channel, or a tensor of the same shape computed before the convolution."""
    other = add.inputs[1] if add.inputs[0] == mine else add.inputs[0]
    if producer.get(other, -1) >= at:
        return False  # computed later (the other branch of a residual): that convolution takes the Add
    shape = graph.shapes.get(other)
    if other in graph.consts:
        value = graph.consts[other]
        mine_shape = graph.shapes[mine]
        c = mine_shape[1] if len(mine_shape) > 1 else 1
        per_channel = (len(value.shape) >= len(mine_shape) - 1 >= 1 and value.shape[-len(mine_shape) + 1] == c
                       and int(np.prod(value.shape)) == c)  # (C, 1, ..., 1) against (N, C, ...)
        return value.size == 1 or per_channel
    return shape == graph.shapes.get(mine)


def plan_memory(graph: Graph, steps: list[Step], external: set[str], *,
                element: int | Callable[[str], int] = 4,
                keep_io: bool = False) -> tuple[MemoryPlan, dict[str, str], dict[str, int]]:
    """Scratch offsets by liveness (``element``: bytes per value, or a function of the tensor's
    name); the storage root of every tensor and its byte offset in that root. With ``keep_io`` the
    graph's inputs and outputs get scratch slots too, live from the first step to the last (their
    converted copies).

    A concatenation whose inputs are each computed by a device step for it alone, along an axis
    with nothing but 1s before it (the channels of a batch-1 image), costs nothing: each input is
    written straight into its range of the output (its root is the output, at a byte offset), and
    the concat step becomes a view. A reshape of a graph input or output into another graph input
    or output cannot share their bytes: it becomes a copy step."""
    def _el(t: str) -> int:
        return element(t) if callable(element) else element

    def size_of(t: str) -> int:
        return prod(graph.shapes[t]) * _el(t)

    root: dict[str, str] = {}
    within: dict[str, int] = {}
    parts: set[str] = set()  # slices that are a byte range of their source (slice_view steps)
    producers = {s.output: s for s in steps}
    users = consumer_map(graph) if any(s.kind in ("concat", "slice") for s in steps) else {}
    outputs = set(graph.outputs)

    def find(t: str) -> str:
        while t in root:
            t = root[t]
        return t

    for step in steps:
        if step.kind == "concat" and _concat_in_place(graph, step, producers, root, external, users,
                                                          outputs):
            step.kind = "concat_view"
            offset = 0
            for t in step.head.inputs:
                root[t], within[t] = step.output, offset
                offset += size_of(t)
            continue
        if step.kind == "slice" and step.output not in external and step.output not in outputs:
            begin = _slice_view_start(graph, step, find(step.inputs[0]) in external, users)
            if begin is not None:
                step.kind = "slice_view"
                root[step.output], within[step.output] = step.inputs[0], begin * _el(step.inputs[0])
                parts.add(step.output)
                continue
        if step.kind == "alias":
            src = step.inputs[0]
            part = _in_part(src, root, parts)
            if step.output in external and (find(src) in external or part):
                step.kind = "copy"  # separate buffers (graph inputs / outputs, a part of a tensor): a copy
                continue
            if step.output in external:
                root[find(src)] = step.output  # the source is written straight into the output
            else:
                root[step.output] = src  # through src: the offsets of the parts on the way add up
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        if step.kind in ("alias", "concat_view", "slice_view"):
            continue
        for written in [step.output, *step.extra]:
            out = find(written)
            first.setdefault(out, i)
            last[out] = max(last.get(out, i), i)
        for t in step.inputs:
            r = find(t)
            last[r] = max(last.get(r, i), i)
    if keep_io:
        for t in graph.inputs:
            first[find(t)] = -1
            last.setdefault(find(t), -1)
        for t in graph.outputs:
            last[find(t)] = len(steps)
    plan = MemoryPlan()
    live: list[tuple[int, int, str]] = []  # (offset, size, tensor)
    order = sorted(first, key=lambda t: first[t])
    graph_inputs = set(graph.inputs)
    for t in order:
        if t in external or (t in graph_inputs and not keep_io):
            continue
        i = first[t]
        live = [entry for entry in live if last[entry[2]] >= i]
        size = _round(size_of(t))
        plan.sizes[t] = size
        plan.total += size
        offset = 0
        for o, s, _ in sorted(live):
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        live.append((offset, size, t))
        plan.offsets[t] = offset
        plan.peak = max(plan.peak, offset + size)

    def offset_in_root(t: str) -> int:
        total = 0
        while t in root:
            total += within.get(t, 0)
            t = root[t]
        return total

    return plan, {t: find(t) for t in graph.shapes}, {t: offset_in_root(t) for t in graph.shapes}


def _concat_in_place(graph: Graph, step: Step, producers: dict[str, Step], root: dict[str, str],
                     external: set[str], users: dict[str, list[Node]], outputs: set[str]) -> bool:
    node = step.head
    shape = graph.shapes.get(step.output, ())
    axis = int(node.attrs.get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape) or prod(shape[:axis]) != 1 or step.output in root:
        return False  # only when each input's range of the output is contiguous
    if len(set(node.inputs)) != len(node.inputs):
        return False  # an input given twice would be written to two places
    for t in node.inputs:
        p = producers.get(t)
        if (p is None or p.kind in ("alias", "concat_view", "concat", "slice_view") or t in external
                or t in root or t in outputs or len(users.get(t, ())) != 1):
            return False
    return True


def _in_part(t: str, root: dict[str, str], parts: set[str]) -> bool:
    """Whether ``t`` is (an alias of) a part of a larger tensor: not a buffer of its own."""
    while t in root:
        if t in parts:
            return True
        t = root[t]
    return False


def _slice_view_start(graph: Graph, step: Step, external_source: bool,
                      users: dict[str, list[Node]]) -> int | None:
    """The element offset where a Slice's result starts in its source, when that result is one
    contiguous range of it: constant starts / ends, step 1, along one axis with nothing but 1s
    before it (a batch-1 image's channels, as ShuffleNet's channel split takes them), of a tensor in
    scratch. The result is then that range (no copy). None otherwise, and when a Concat consumes
    the result: the copy then writes straight into the concatenation, which costs no more."""
    node = step.head
    shape = graph.shapes.get(step.inputs[0], ())
    out_shape = graph.shapes.get(step.output, ())
    params = [node.inputs[i] if i < len(node.inputs) else "" for i in range(1, 5)]
    if (external_source or not shape or len(out_shape) != len(shape) or not params[0] or not params[1]
            or not all(p == "" or p in graph.consts for p in params)
            or any(u.op_type == "Concat" for u in users.get(step.output, ()))):
        return None
    starts = np.asarray(graph.consts[params[0]]).astype(np.int64).ravel()
    axes = (np.asarray(graph.consts[params[2]]).astype(np.int64).ravel() if params[2]
            else np.arange(len(starts)))
    slice_steps = (np.asarray(graph.consts[params[3]]).astype(np.int64).ravel() if params[3]
                   else np.ones(len(starts), np.int64))
    if len(axes) != len(starts) or len(slice_steps) != len(starts) or any(int(v) != 1 for v in slice_steps):
        return None
    if not all(-len(shape) <= int(a) < len(shape) for a in axes):
        return None
    begin = [0] * len(shape)
    for a, s0 in zip(axes, starts, strict=True):
        k = int(a) % len(shape)
        dim = shape[k]
        begin[k] = int(min(max(int(s0) + dim if s0 < 0 else int(s0), 0), dim))
    cut = [k for k in range(len(shape)) if out_shape[k] != shape[k] or begin[k]]
    if len(cut) != 1 or prod(shape[:cut[0]]) != 1 or begin[cut[0]] + out_shape[cut[0]] > shape[cut[0]]:
        return None  # several axes cut, or lines before the cut axis: not one range
    return begin[cut[0]] * prod(shape[cut[0] + 1:])


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def attr(node: Node, name: str, default: Any) -> Any:
    return node.attrs.get(name, default)
