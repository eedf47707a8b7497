"""Random small ONNX graphs on integer tensors through the whole stack, against onnxruntime, exactly.

Each seed picks an integer type (int8 ... uint64) and builds a chain of one to six operators:
Neg, Abs, Add / Sub / Mul / Div / Max / Min with every broadcast form (a scalar, a per-channel and a full
constant, or an earlier tensor), Clip, MaxPool, and the data movements (Transpose, Concat, Split,
Slice, Reshape, Pad, Squeeze / Unsqueeze, Identity). Arithmetic wraps around as the type does;
divisors are never zero (onnxruntime's integer Div traps on zero). The results must be equal to
onnxruntime's, element for element and in dtype. More seeds:
``PYDLA_RANDOM_INT_GRAPHS=2000 python -m pytest tests/compiler/test_random_int_graphs.py``.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest
from onnx import helper

from pydla.compiler.api import compile_model
from pydla.loadable.container import NUMPY_TYPES
from pydla.session import Session
from tests.compiler.support import reference
from tests.compiler.test_random_graphs import Chain, movement_step

SEEDS = int(os.environ.get("PYDLA_RANDOM_INT_GRAPHS", "120"))
TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


class IntChain(Chain):
    """A chain of nodes on one NCHW integer tensor, its shape tracked as nodes are added."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        r = self.rand
        self.dtype = np.dtype(r.choice(TYPES))
        self.shape = self.input_shape = (1, r.choice([1, 2, 3, 4]), r.choice([1, 2, 5, 6]),
                                         r.choice([1, 3, 4, 7]))

    def values(self, *shape: int, nonzero: bool = False) -> np.ndarray:
        low = 0 if self.dtype.kind == "u" else -6
        v = self.rng.integers(low, 7, size=shape)
        if nonzero:
            v[v == 0] = 3
        return v.astype(self.dtype)

    def model(self) -> Any:
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        graph = helper.make_graph(
            self.nodes, "random_int", [helper.make_tensor_value_info("x", elem, self.input_shape)],
            [helper.make_tensor_value_info(self.cur, elem, None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def _step(ch: IntChain) -> None:
    r, (n, c, h, w) = ch.rand, ch.shape
    op = r.choice(["ew", "ew", "div", "clip", "pool", "merge", "transpose", "concat", "split", "slice",
                   "reshape", "pad", "squeeze", "identity", "unary"])
    if op == "ew":
        kind = r.choice(["Add", "Sub", "Mul", "Max", "Min"])
        other = r.choice([ch.const(ch.values()), ch.const(ch.values(c, 1, 1)), ch.const(ch.values(w)),
                          ch.const(ch.values(*ch.shape)), ch.cur])
        ch.add(kind, [ch.cur, other] if r.random() < 0.5 else [other, ch.cur], ch.shape)
    elif op == "div":
        divisor = r.choice([ch.values(nonzero=True), ch.values(c, 1, 1, nonzero=True),
                            ch.values(*ch.shape, nonzero=True)])
        ch.add("Div", [ch.cur, ch.const(divisor)], ch.shape)
    elif op == "unary":  # ONNX's Neg is for signed types only
        ch.add(r.choice(["Neg", "Abs"]) if ch.dtype.kind == "i" else "Abs", [ch.cur], ch.shape)
    elif op == "clip":
        lo, hi = sorted(int(v) for v in ch.values(2))
        ch.add("Clip", [ch.cur, ch.const(ch.dtype.type(lo)), ch.const(ch.dtype.type(hi))], ch.shape)
    elif op == "pool":
        k, s = r.choice([1, 2, 3]), r.choice([1, 2])
        if h < k or w < k or ch.dtype.itemsize != 1:  # ONNX MaxPool: int8 and uint8 only
            return
        ch.add("MaxPool", [ch.cur], (n, c, (h - k) // s + 1, (w - k) // s + 1), kernel_shape=[k, k],
               strides=[s, s])
    elif op == "merge":
        same = [t for t, shape in ch.earlier if shape == ch.shape]
        if same:
            ch.add(r.choice(["Add", "Sub", "Max", "Min"]), [ch.cur, r.choice(same)], ch.shape)
    elif op in ("transpose", "concat", "split"):
        movement_step(ch, op)
    elif op == "slice":
        step = r.choice([1, 2])
        params = [ch.const(np.array([v])) for v in (0, w, 3, step)]
        ch.add("Slice", [ch.cur, *params], (n, c, h, len(range(w)[::step])))
    elif op == "reshape":
        ch.add("Reshape", [ch.cur, ch.const(np.array([n, c * h, w, 1]))], (n, c * h, w, 1))
    elif op == "pad":
        pads = [0, 0, r.randint(0, 2), r.randint(0, 2), 0, 0, r.randint(0, 2), r.randint(0, 2)]
        ch.add("Pad", [ch.cur, ch.const(np.array(pads)), ch.const(ch.values()[()])],
               (n, c, h + pads[2] + pads[6], w + pads[3] + pads[7]))
    elif op == "squeeze":
        axes = ch.const(np.array([0]))
        ch.add("Squeeze", [ch.cur, axes], (c, h, w))
        ch.add("Unsqueeze", [ch.cur, axes], (n, c, h, w))
    else:
        ch.add("Identity", [ch.cur], ch.shape)


def random_int_model(seed: int) -> tuple[Any, np.ndarray]:
    ch = IntChain(seed)
    for _ in range(ch.rand.randint(1, 6)):
        _step(ch)
    if not ch.nodes:
        ch.add("Identity", [ch.cur], ch.shape)
    return ch.model(), ch.values(*ch.input_shape)


def test_every_integer_type_is_drawn() -> None:
    assert len(TYPES) == 8 and all(np.dtype(t) in NUMPY_TYPES.values() for t in TYPES)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_integer_graph_matches_onnxruntime_exactly(seed: int) -> None:
    m, x = random_int_model(seed)
    name = m.graph.output[0].name
    want = reference(m, {"x": x})[name]  # (onnx's reference where onnxruntime has no such kernel)
    with Session(compile_model(m).blob) as sess:
        got = sess.run({"x": x})[name]
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        graph = "\n".join(str(helper.printable_node(n)) for n in m.graph.node)
        pytest.fail(f"seed {seed} ({x.dtype}): pydla {got.dtype}{got.shape} differs from onnxruntime "
                    f"{want.dtype}{want.shape}:\n{graph}\nx = {x.tolist()}\npydla = {got.tolist()}\n"
                    f"onnxruntime = {want.tolist()}")


@pytest.mark.parametrize("seed", range(SEEDS // 2))
def test_random_integer_graph_with_intermediate_outputs(seed: int) -> None:
    """The same graphs with one or two intermediate tensors (or the input) as further outputs,
    each of which must equal onnxruntime's exactly."""
    m, x = random_int_model(seed)
    pick = random.Random(seed + 3_000_017)
    produced = [o for n in m.graph.node for o in n.output if o][:-1]
    extra = pick.sample(["x", *produced], k=min(len(produced) + 1, pick.randint(1, 2)))
    elem = m.graph.output[0].type.tensor_type.elem_type
    m.graph.output.extend(helper.make_tensor_value_info(t, elem, None) for t in extra)
    want = reference(m, {"x": x})
    with Session(compile_model(m).blob) as sess:
        got = sess.run({"x": x})
    for out in m.graph.output:
        w = want[out.name]
        g = got[out.name]
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), (seed, out.name)
