"""Random small ONNX graphs through the whole stack, against onnxruntime (or onnx's reference
implementation where the two disagree: see the README's "Where onnx's own pieces disagree").

Each seed builds a chain of one to five operators with random shapes and attributes (convolutions
with strides, pads, dilations and groups; transposed convolutions; pooling with ceil_mode; element-
wise operations with every broadcast form; activations, PRelu, BatchNormalization, LRN, Concat,
Split, Transpose, Pad, Resize, Slice, Softmax, Gemm, MatMul, variadic Mean, reductions, Pow and the
element-wise math of the CPU library), compiles it and runs it.
This is how the ceil_mode shapes and the PRelu fusion into MatMul were found; a failure prints the
graph. More seeds: ``PYDLA_RANDOM_GRAPHS=2000 python -m pytest tests/compiler/test_random_graphs.py``
(and ``PYDLA_RANDOM_PRECISION=fp16``).
"""

from __future__ import annotations

import contextlib
import os
import random
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from pydla import DlaError, NvError
from pydla.compiler.api import compile_model
from pydla.session import Session
from tests.compiler.support import reference

SEEDS = int(os.environ.get("PYDLA_RANDOM_GRAPHS", "200"))
PRECISION = os.environ.get("PYDLA_RANDOM_PRECISION", "fp32")
TOLERANCE = 1e-3 if PRECISION == "fp32" else 3e-2


class Chain:
    """A chain of nodes on one NCHW tensor, its shape tracked as nodes are added."""

    def __init__(self, seed: int) -> None:
        self.rand = random.Random(seed)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0
        r = self.rand
        self.shape = (r.choice([1, 1, 2]), r.choice([1, 2, 3, 4, 8]), r.choice([1, 3, 5, 7, 8, 12]),
                      r.choice([1, 2, 5, 6, 9, 16]))
        self.input_shape = self.shape
        self.cur = "x"
        self.earlier: list[tuple[str, tuple[int, ...]]] = []  # tensors a later node may read again

    def name(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def const(self, value: Any) -> str:
        self.count += 1
        self.inits.append(numpy_helper.from_array(np.asarray(value), f"c{self.count}"))
        return f"c{self.count}"

    def floats(self, *shape: int, low: float = -1.0, high: float = 1.0) -> str:
        return self.const(self.rng.uniform(low, high, shape).astype(np.float32))

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs: Any) -> None:
        out = self.name()
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.earlier.append((self.cur, self.shape))
        self.cur, self.shape = out, shape

    def model(self) -> Any:
        graph = helper.make_graph(
            self.nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.input_shape)],
            [helper.make_tensor_value_info(self.cur, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def _conv(ch: Chain, transpose: bool) -> bool:
    r, (n, c, h, w) = ch.rand, ch.shape
    k, kw = r.choice([1, 2, 3]), r.choice([1, 2, 3])
    s, d = r.choice([1, 1, 2, 3]), 1 if transpose else r.choice([1, 1, 2])
    groups = r.choice([1, c])
    per_group = r.choice([1, 2, 4]) if groups > 1 else r.choice([1, 4, 8])
    limit_h, limit_w = (k - 1, kw - 1) if transpose else (2, 2)  # transposed: pads below the kernel
    pads = [r.randint(0, min(2, limit)) for limit in (limit_h, limit_w, limit_h, limit_w)]
    if transpose:
        wt = ch.floats(c, per_group, k, kw)
        out_pad = r.choice([0, 1]) if s > 1 else 0
        ho = s * (h - 1) + out_pad + k - pads[0] - pads[2]
        wo = s * (w - 1) + out_pad + kw - pads[1] - pads[3]
        if ho < 1 or wo < 1:
            return False
        ch.add("ConvTranspose", [ch.cur, wt], (n, per_group * groups, ho, wo), strides=[s, s], pads=pads,
               group=groups, output_padding=[out_pad, out_pad])
        return True
    k_out = per_group * groups
    span_h, span_w = (k - 1) * d + 1, (kw - 1) * d + 1
    if h + pads[0] + pads[2] < span_h or w + pads[1] + pads[3] < span_w:
        return False
    inputs = [ch.cur, ch.floats(k_out, c // groups, k, kw)] + ([ch.floats(k_out)] if r.random() < 0.5 else [])
    ho, wo = (h + pads[0] + pads[2] - span_h) // s + 1, (w + pads[1] + pads[3] - span_w) // s + 1
    ch.add("Conv", inputs, (n, k_out, ho, wo), strides=[s, s], pads=pads, dilations=[d, d], group=groups,
           kernel_shape=[k, kw])
    return True


def _pool(ch: Chain) -> bool:
    r, (n, c, h, w) = ch.rand, ch.shape
    op = r.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
    if op.startswith("Global"):
        ch.add(op, [ch.cur], (n, c, 1, 1))
        return True
    k, s = r.choice([1, 2, 3]), r.choice([1, 2])
    p = r.choice([0, 1]) if k > 1 else 0
    if h + 2 * p < k or w + 2 * p < k:
        return False
    attrs: dict[str, Any] = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                                 ceil_mode=r.choice([0, 1]))
    if op == "AveragePool":
        attrs["count_include_pad"] = r.choice([0, 1])
    ch.add(op, [ch.cur], (n, c, -1, -1), **attrs)  # the shape comes from shape inference below
    return True


def movement_step(ch: Chain, op: str) -> bool:
    """Concat of the current tensor with itself, Split (the chain goes on with the second part) or
    Transpose, on a random axis other than the batch; False when the shape does not allow it."""
    r = ch.rand
    if op == "concat":
        axis = r.choice([1, 2, 3])
        shape = list(ch.shape)
        shape[axis] *= 2
        ch.add("Concat", [ch.cur, ch.cur], tuple(shape), axis=axis)
    elif op == "split":
        axis = r.choice([1, 2, 3])
        if ch.shape[axis] < 2:
            return False
        first = r.randint(1, ch.shape[axis] - 1)
        parts = [ch.name(), ch.name()]
        sizes = ch.const(np.array([first, ch.shape[axis] - first]))
        ch.nodes.append(helper.make_node("Split", [ch.cur, sizes], parts, axis=axis))
        shape = list(ch.shape)
        shape[axis] -= first
        ch.cur, ch.shape = parts[1], tuple(shape)
    else:
        perm = [0, *r.sample([1, 2, 3], 3)]
        ch.add("Transpose", [ch.cur], tuple(ch.shape[i] for i in perm), perm=perm)
    return True


def _step(ch: Chain) -> bool:
    r, (n, c, h, w) = ch.rand, ch.shape
    op = r.choice(["conv", "deconv", "pool", "ew", "act", "prelu", "bn", "lrn", "concat", "split",
                   "transpose", "pad", "resize", "slice", "softmax", "gemm", "matmul", "mean", "merge",
                   "reduce", "pow"])
    if op in ("conv", "deconv"):
        return _conv(ch, op == "deconv")
    if op == "pool":
        return _pool(ch)
    if op == "ew":
        other = r.choice([ch.floats(low=0.5, high=2), ch.floats(c, 1, 1, low=0.5, high=2),
                          ch.floats(w, low=0.5, high=2), ch.floats(*ch.shape, low=0.5, high=2), ch.cur])
        kind = r.choice(["Add", "Sub", "Mul", "Div", "Max", "Min"])
        if kind == "Div" and other == ch.cur:
            kind = "Mul"
        inputs = [ch.cur, other] if kind == "Div" or r.random() < 0.5 else [other, ch.cur]
        ch.add(kind, inputs, ch.shape)
    elif op == "act":
        kind = r.choice(["Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "Neg", "Abs", "Reciprocal",
                         # CPU runs: continuous functions, defined everywhere (no Log of a negative)
                         "Erf", "HardSwish", "HardSigmoid", "Softplus", "Softsign", "Elu", "Selu", "Sin",
                         "Atan"])
        if kind == "Clip":
            ch.add(kind, [ch.cur, ch.const(np.float32(-0.5)), ch.const(np.float32(0.7))], ch.shape)
        elif kind == "Reciprocal":  # of |x| + 1: near 0, fp16's rounding of x would be magnified
            ch.add("Abs", [ch.cur], ch.shape)
            ch.add("Add", [ch.cur, ch.const(np.float32(1.0))], ch.shape)
            ch.add(kind, [ch.cur], ch.shape)
        else:
            ch.add(kind, [ch.cur], ch.shape, **({"alpha": 0.3} if kind == "LeakyRelu" else {}))
    elif op == "reduce":  # opset 17: axes as an attribute (ReduceSum takes them as an input)
        axis = r.choice([1, 2, 3])
        shape = tuple(1 if i == axis else d for i, d in enumerate(ch.shape))
        ch.add(r.choice(["ReduceMean", "ReduceMax", "ReduceL2", "ReduceSumSquare"]), [ch.cur], shape,
               axes=[axis], keepdims=1)
    elif op == "pow":  # of tanh(x), by an integer: real and bounded, so fp16 cannot overflow
        ch.add("Tanh", [ch.cur], ch.shape)
        ch.add("Pow", [ch.cur, ch.const(np.float32(r.choice([2.0, 3.0])))], ch.shape)
    elif op == "prelu":
        slope = r.choice([(c, 1, 1), (w,), (1,)])
        ch.add("PRelu", [ch.cur, ch.floats(*slope, low=0, high=0.5)], ch.shape)
    elif op == "bn":
        params = [ch.floats(c, low=0.5, high=1.5), ch.floats(c), ch.floats(c),
                  ch.floats(c, low=0.5, high=1.5)]
        ch.add("BatchNormalization", [ch.cur, *params], ch.shape, epsilon=1e-3)
    elif op == "lrn":
        ch.add("LRN", [ch.cur], ch.shape, size=r.choice([3, 5]), alpha=1e-3, beta=0.75, bias=1.0)
    elif op in ("concat", "split", "transpose"):
        if not movement_step(ch, op):
            return False
        if op == "split":
            ch.add("Relu", [ch.cur], ch.shape)
    elif op == "pad":
        pads = [0, 0, r.randint(0, 2), r.randint(0, 2), 0, 0, r.randint(0, 2), r.randint(0, 2)]
        mode = r.choice(["constant", "reflect", "edge"])
        if mode == "reflect" and (max(pads[2], pads[6]) >= h or max(pads[3], pads[7]) >= w):
            mode = "constant"
        ch.add("Pad", [ch.cur, ch.const(np.array(pads)), ch.const(np.float32(0.25))],
               (n, c, h + pads[2] + pads[6], w + pads[3] + pads[7]), mode=mode)
    elif op == "resize":
        scales = [r.choice([0.5, 1, 2, 1.5]), r.choice([0.5, 1, 2, 3])]
        ho, wo = int(h * scales[0]), int(w * scales[1])
        if min(ho, wo) < 1:
            return False
        ch.add("Resize", [ch.cur, "", ch.const(np.array([1, 1, *scales], np.float32))], (n, c, ho, wo),
               mode=r.choice(["nearest", "linear"]),
               coordinate_transformation_mode=r.choice(["half_pixel", "asymmetric", "pytorch_half_pixel"]))
    elif op == "slice":
        step = r.choice([1, 2, -1, -2])
        start, end = (0, w) if step > 0 else (w - 1, -w - 1)
        params = [ch.const(np.array([v])) for v in (start, end, 3, step)]
        ch.add("Slice", [ch.cur, *params], (n, c, h, len(range(w)[::step])))
    elif op == "softmax":
        ch.add(r.choice(["Softmax", "LogSoftmax"]), [ch.cur], ch.shape, axis=r.choice([1, 2, 3, -1]))
    elif op == "gemm":
        flat = ch.name()
        ch.nodes.append(helper.make_node("Flatten", [ch.cur], [flat], axis=1))
        size, m = c * h * w, r.choice([1, 3, 10])
        trans_b = r.choice([0, 1])
        inputs = [flat, ch.floats(*((m, size) if trans_b else (size, m)))]
        inputs += [ch.floats(m)] if r.random() < 0.5 else []
        ch.cur, ch.shape = flat, (n, size)
        ch.add("Gemm", inputs, (n, m), transB=trans_b, alpha=r.choice([1.0, 0.5]), beta=r.choice([1.0, 2.0]))
        ch.add("Reshape", [ch.cur, ch.const(np.array([n, m, 1, 1]))], (n, m, 1, 1))
    elif op == "matmul":
        m = r.choice([1, 3, 7])
        ch.add("MatMul", [ch.cur, ch.floats(w, m)], (n, c, h, m))
    elif op == "merge":  # a residual connection or a concatenation with an earlier tensor
        same = [t for t, shape in ch.earlier if shape == ch.shape and shape[0] > 0]
        if not same:
            return False
        other = r.choice(same)
        if r.random() < 0.5:
            ch.add(r.choice(["Add", "Mul", "Max"]), [ch.cur, other], ch.shape)
        else:
            ch.add("Concat", [other, ch.cur], (n, 2 * c, h, w), axis=1)
    else:
        ch.add("Mean", [ch.cur, ch.cur, ch.floats(c, 1, 1)], ch.shape)
    return True


def random_model(seed: int) -> tuple[Any, np.ndarray]:
    ch = Chain(seed)
    for _ in range(ch.rand.randint(1, 7)):
        if _step(ch) and -1 in ch.shape:
            # pooling: its shape as onnxruntime computes the graph so far (ceil_mode included)
            probe = ch.model()
            x = np.zeros(ch.input_shape, np.float32)
            ch.shape = tuple(next(iter(reference(probe, {"x": x}).values())).shape)
        if min(ch.shape) < 1:
            break
    x = ch.rng.standard_normal(ch.input_shape).astype(np.float32)
    return ch.model(), x


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_graph_matches_onnxruntime(seed: int) -> None:
    try:
        m, x = random_model(seed)
        name = m.graph.output[0].name
        want = reference(m, {"x": x})[name] if m.graph.node else None
    except ort.capi.onnxruntime_pybind11_state.Fail as e:  # (ceil_mode's shapes before opset 22)
        pytest.skip(f"onnxruntime refuses this graph: {e}")
    if want is None:
        pytest.skip("this seed built an empty graph")
    try:
        onnx.checker.check_model(shape_inference.infer_shapes(m))
    except onnx.checker.ValidationError as e:  # (a shape this builder tracked differently; older
        pytest.skip(f"onnx's checker refuses this graph: {e}")  # onnxruntimes run it anyway)
    with Session(compile_model(m, precision=PRECISION).blob) as sess:
        got = sess.run({"x": x})[name]
    if _close(got, want):
        return
    try:  # where onnxruntime and onnx's reference disagree, pydla follows the reference
        if _close(got, ReferenceEvaluator(m).run(None, {"x": x})[0]):
            return
    except Exception:  # the reference lacks some cases (grouped ConvTranspose)
        pass
    graph = "\n".join(str(helper.printable_node(n)) for n in m.graph.node)
    pytest.fail(f"seed {seed}: pydla differs from onnxruntime (and onnx's reference):\n{graph}")


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape or want.size == 0:
        return got.shape == want.shape and got.dtype == want.dtype
    scale = max(1.0, float(np.abs(want).max()))
    return got.shape == want.shape and bool(np.abs(got - want).max() <= TOLERANCE * scale)


def _expected(m: Any, feeds: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """Each output's acceptable values: onnxruntime's, and onnx's reference's where it runs (where
    the two differ pydla may follow either); skips the test when onnxruntime refuses the graph."""
    try:
        ort_out = reference(m, feeds)
    except ort.capi.onnxruntime_pybind11_state.Fail as e:
        pytest.skip(f"onnxruntime refuses this graph: {e}")
    wants = {o.name: [np.asarray(ort_out[o.name])] for o in m.graph.output}
    with contextlib.suppress(Exception):  # the reference lacks some cases: onnxruntime's alone
        for o, value in zip(m.graph.output, ReferenceEvaluator(m).run(None, feeds), strict=True):
            wants[o.name].append(np.asarray(value))
    return wants


MULTI_SEEDS = int(os.environ.get("PYDLA_RANDOM_MULTI_OUTPUT_GRAPHS", "100"))


@pytest.mark.parametrize("seed", range(MULTI_SEEDS))
def test_random_graph_with_intermediate_outputs(seed: int) -> None:
    """The same random chains, with some of their intermediate tensors (and sometimes the input
    itself, or one tensor twice) as further graph outputs: every output is written, and the
    memory planner never reuses an output's bytes (``PYDLA_RANDOM_MULTI_OUTPUT_GRAPHS`` for more)."""
    m, x = random_model(seed)
    if not m.graph.node:
        pytest.skip("this seed built an empty graph")
    pick = random.Random(seed + 1_000_003)
    produced = [o for n in m.graph.node for o in n.output if o]
    candidates = ["x", *produced[:-1]]
    extra = pick.sample(candidates, k=min(len(candidates), pick.randint(1, 3)))
    if pick.random() < 0.2:
        extra.append(m.graph.output[0].name)  # the final output listed twice
    m.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in extra)
    wants = _expected(m, {"x": x})
    with Session(compile_model(m, precision=PRECISION).blob) as sess:
        assert [t.name for t in sess.outputs] == [o.name for o in m.graph.output]
        got = sess.run({"x": x})
    for out in m.graph.output:
        if not any(_close(got[out.name], w) for w in wants[out.name]):
            graph = "\n".join(str(helper.printable_node(n)) for n in m.graph.node)
            pytest.fail(f"seed {seed}: output '{out.name}' differs from onnxruntime and onnx's reference:\n"
                        f"{graph}")


PARAM_SEEDS = int(os.environ.get("PYDLA_RANDOM_RUNTIME_PARAMETER_GRAPHS", "100"))


@pytest.mark.parametrize("seed", range(PARAM_SEEDS))
def test_random_graph_with_parameters_given_at_run_time(seed: int) -> None:
    """The same random chains with one or two of their constants (weights, biases, scales, pads,
    starts, shapes, axes...) turned into graph inputs fed at run time: pydla refuses the graph with
    a DlaError naming what must be constant, or runs it and agrees with onnxruntime
    (``PYDLA_RANDOM_RUNTIME_PARAMETER_GRAPHS`` for more)."""
    m, x = random_model(seed)
    if not m.graph.node or not m.graph.initializer:
        pytest.skip("this seed built no node or no constant")
    pick = random.Random(seed + 2_000_003)
    moved = pick.sample(list(m.graph.initializer), k=min(len(m.graph.initializer), pick.randint(1, 2)))
    feeds = {"x": x}
    for init in moved:
        value = numpy_helper.to_array(init)
        feeds[init.name] = value
        m.graph.initializer.remove(init)
        m.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(value.shape)))
    name = m.graph.output[0].name
    wants = _expected(m, feeds)[name]
    try:
        blob = compile_model(m, precision=PRECISION).blob
    except DlaError as e:
        assert e.code in (NvError.NotSupported, NvError.BadValue) and "please report" not in str(e), e
        return  # refused, saying why
    with Session(blob) as sess:
        got = sess.run({t.name: feeds[t.name] for t in sess.inputs})[name]
    if not any(_close(got, w) for w in wants):
        graph = "\n".join(str(helper.printable_node(n)) for n in m.graph.node)
        pytest.fail(f"seed {seed}: with {[i.name for i in moved]} at run time pydla differs from "
                    f"onnxruntime (and onnx's reference):\n{graph}")
