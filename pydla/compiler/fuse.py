"""Exporter patterns recognised as one operator: Gelu written out with Erf (torch.onnx before opset
20, tf2onnx), x * 0.5 * (1 + erf(x / sqrt 2)), becomes one Gelu node. The Erf is a CPU run (or a
SHAVE task) either way; as one node it is one run of the exact function instead of that run between
four SDP operations (the division, the sum, two products), and its intermediate tensors go. And
attention's ``Q . K^T`` as exported, a MatMul of a Transpose that swaps K's last two axes, becomes a
MatMul reading K itself as its transposed operand (``TRANS_B``): the product's weights are K's rows
as they lie, so neither the Transpose's copy nor the copy that would turn K^T back into weights runs.

Usage: ``fuse_gelu(graph)``, ``fold_transposed_operands(graph)`` after the import has folded the
constants.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np

from pydla.compiler.graph_types import Graph, Node

_TOLERANCE = 1e-6


def _is(graph: Graph, name: str, value: float) -> bool:
    """``name`` is a constant whose every element is ``value`` (within float32's rounding)."""
    const = graph.consts.get(name)
    return (const is not None and const.size >= 1 and const.dtype.kind == "f"
            and bool(np.all(np.abs(const.astype(np.float64) - value) <= _TOLERANCE * max(1.0, abs(value)))))


def _other(node: Node, name: str) -> str | None:
    """The input of a two-input node that is not ``name`` (None when ``name`` is not one of them)."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def fuse_gelu(graph: Graph) -> None:
    """Replace each Erf-form Gelu whose intermediate tensors nothing else reads by a Gelu node."""
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    readers: Counter[str] = Counter(i for n in graph.nodes for i in n.inputs if i)
    outputs = set(graph.outputs)
    consumer = {i: n for n in graph.nodes for i in n.inputs if i and readers[i] == 1}

    def private(name: str) -> bool:
        return readers[name] == 1 and name not in outputs

    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for erf in graph.nodes:
        if erf.op_type != "Erf" or graph.dtypes.get(erf.inputs[0]) != np.float32:
            continue
        scaled = producer.get(erf.inputs[0])
        if scaled is None or not private(erf.inputs[0]):
            continue
        x = _x_of(graph, scaled)
        add = consumer.get(erf.outputs[0])
        if x is None or add is None or add.op_type != "Add" or not private(erf.outputs[0]):
            continue
        one = _other(add, erf.outputs[0])
        if one is None or not _is(graph, one, 1.0) or not private(add.outputs[0]):
            continue
        found = _product(graph, x, add.outputs[0], consumer, producer, private)
        if found is None or graph.shapes.get(found[-1].outputs[0]) != graph.shapes.get(x):
            continue
        last = found[-1]
        nodes = [scaled, erf, add, *found]
        drop.update(id(n) for n in nodes)
        replace[id(last)] = Node(last.name, "Gelu", [x], [last.outputs[0]], {"approximate": "none"})
    if replace:
        graph.nodes = [replace.get(id(n), n) for n in graph.nodes if id(n) not in drop or id(n) in replace]


def _x_of(graph: Graph, node: Node) -> str | None:
    """x of x / sqrt 2 or x * (1 / sqrt 2)."""
    if node.op_type == "Div" and len(node.inputs) == 2 and _is(graph, node.inputs[1], math.sqrt(2)):
        return node.inputs[0]
    if node.op_type == "Mul":
        for x, c in (node.inputs, node.inputs[::-1]):
            if _is(graph, c, 1 / math.sqrt(2)) and x not in graph.consts:
                return x
    return None


def _product(graph: Graph, x: str, sum_: str, consumer: dict[str, Node], producer: dict[str, Node],
             private: Callable[[str], bool]) -> list[Node] | None:
    """The products making x * 0.5 * (1 + erf): ``(x * s) * 0.5`` or ``(0.5 * x) * s`` (s the sum),
    in either operand order; the nodes in order, the last one writing the result."""
    first = consumer.get(sum_)
    if first is None or first.op_type != "Mul":
        return None
    other = _other(first, sum_)
    if other == x:  # (x * s) * 0.5
        half = consumer.get(first.outputs[0])
        if half is None or half.op_type != "Mul" or not private(first.outputs[0]):
            return None
        constant = _other(half, first.outputs[0])
        return [first, half] if constant is not None and _is(graph, constant, 0.5) else None
    if other is None:
        return None
    halved = producer.get(other)
    if halved is None or halved.op_type != "Mul" or not private(other):  # (0.5 * x) * s
        return None
    constant = _other(halved, x)
    return [halved, first] if constant is not None and _is(graph, constant, 0.5) else None


TRANS_B = "pydla_trans_b"  # an internal attribute of a MatMul: its second input is B transposed
ALPHA = "pydla_alpha"  # an internal attribute of a MatMul: its product is scaled by this factor


class _Uses:
    """Who produces each tensor, and whether a tensor is read once and is no graph output."""

    def __init__(self, graph: Graph) -> None:
        self.producer = {o: n for n in graph.nodes for o in n.outputs if o}
        self.readers: Counter[str] = Counter(i for n in graph.nodes for i in n.inputs if i)
        self.outputs = set(graph.outputs)

    def sole(self, name: str) -> bool:
        return self.readers[name] == 1 and name not in self.outputs


def _scaled(graph: Graph, uses: _Uses, name: str) -> tuple[Node, str, float] | None:
    """``name`` as Mul(x, c) by a scalar float constant c, read only here and shaped like x:
    (the Mul, x, c); None otherwise."""
    mul = uses.producer.get(name)
    if mul is None or mul.op_type != "Mul" or not uses.sole(name):
        return None
    x = next((i for i in mul.inputs if i not in graph.consts), None)
    c = _other(mul, x) if x is not None else None
    if (x is None or c is None or c not in graph.consts or graph.consts[c].size != 1
            or graph.consts[c].dtype.kind != "f" or graph.shapes.get(x) != graph.shapes.get(name)):
        return None
    return mul, x, float(graph.consts[c].reshape(-1)[0])


def _drop(graph: Graph, dropped: set[int]) -> None:
    if dropped:
        graph.nodes = [n for n in graph.nodes if id(n) not in dropped]


def fold_transposed_operands(graph: Graph) -> None:
    """MatMul(A, Transpose(K)) whose Transpose swaps the last two axes only and is read by nothing
    else: the MatMul reads K with TRANS_B set, and the Transpose goes. A Mul by a scalar constant
    between them (scaled_dot_product_attention's export scales K^T) moves before the Transpose."""
    uses = _Uses(graph)
    dropped: set[int] = set()
    for node in graph.nodes:
        if node.op_type != "MatMul" or len(node.inputs) != 2 or node.attrs.get(TRANS_B):
            continue
        b = node.inputs[1]
        scaled = _scaled(graph, uses, b)
        if scaled is not None:
            b = scaled[1]
        t = uses.producer.get(b)
        if t is None or t.op_type != "Transpose" or not uses.sole(t.outputs[0]):
            continue
        source = t.inputs[0]
        rank = len(graph.shapes.get(source, ()))
        perm = [int(p) for p in t.attrs.get("perm", [])]
        swap = [*range(rank - 2), rank - 1, rank - 2] if rank >= 2 else None
        if perm != swap or source in graph.consts or graph.dtypes.get(source) != np.dtype(np.float32):
            continue
        if scaled is not None:  # Mul(Transpose(K), c) -> Mul(K, c), read transposed
            mul = scaled[0]
            mul.inputs = [source if i == b else i for i in mul.inputs]
            graph.shapes[mul.outputs[0]] = graph.shapes[source]
        else:
            node.inputs[1] = source
        node.attrs[TRANS_B] = 1
        dropped.add(id(t))
    _drop(graph, dropped)


def fold_scalar_factors(graph: Graph) -> None:
    """MatMul(Mul(A, a), Mul(B, b)) with scalar constants a and b, the products read by nothing
    else: the MatMul reads A and B and scales its product by a * b (ALPHA: folded into constant
    weights, else SDP's scale), as attention's exported 1 / sqrt(d) factors are."""
    uses = _Uses(graph)
    dropped: set[int] = set()
    for node in graph.nodes:
        if node.op_type != "MatMul" or len(node.inputs) != 2:
            continue
        alpha = float(node.attrs.get(ALPHA, 1.0))
        for index, name in enumerate(list(node.inputs)):
            scaled = _scaled(graph, uses, name)
            if scaled is None:
                continue
            mul, node.inputs[index], factor = scaled
            alpha *= factor
            dropped.add(id(mul))
        if alpha != 1.0:
            node.attrs[ALPHA] = alpha
    _drop(graph, dropped)
