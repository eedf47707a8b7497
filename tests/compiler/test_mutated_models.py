"""Mutated ONNX models through the compiler and the whole stack: refused with a DlaError, or run and
agreeing with onnxruntime whenever onnxruntime runs the same mutated model.

Each seed takes one of a few small valid networks and changes one to three things at random: an
attribute's value (also to something absurd), its type, its presence; a node's input (to an unknown
name, or to another tensor); a node's operator; an initializer's dimensions or element type; a graph
input's shape; or drops a node. Nothing else may escape (IndexError, KeyError, ValueError, ...), and
nothing may run with a result onnxruntime disagrees with (a silently wrong result); a refusal's
message is one printable line. More seeds:
``PYDLA_MUTATED_MODELS=3000 python -m pytest tests/compiler/test_mutated_models.py``.
"""

from __future__ import annotations

import copy
import os
import random
import time
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla import DlaError
from pydla.compiler.api import compile_model
from pydla.session import Session

SEEDS = int(os.environ.get("PYDLA_MUTATED_MODELS", "150"))
SECONDS_PER_CASE = 20.0
INTS = [-3, -1, 0, 1, 2, 3, 5, 100]
FLOATS = [-1.0, 0.0, 0.5, 1e30, float("nan")]
STRINGS = ["", "SAME_UPPER", "VALID", "bogus", "linear"]
OPS = ["Relu", "Sigmoid", "Add", "Mul", "MaxPool", "AveragePool", "Conv", "Softmax", "Transpose", "Concat",
       "Flatten", "Exp", "ReduceMean", "Identity", "Clip", "Gather"]


def _model(nodes: list[Any], inits: dict[str, np.ndarray], shape: tuple[int, ...], output: str) -> Any:
    graph = helper.make_graph(
        nodes, "base", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def base_models() -> list[Any]:
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    conv = _model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
                   helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"], epsilon=1e-5),
                   helper.make_node("Relu", ["n"], ["r"]),
                   helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                  {"w": w(4, 3, 3, 3), "b": w(4), "g": w(4), "be": w(4), "m": w(4),
                   "v": np.abs(w(4)) + 0.5}, (1, 3, 8, 8), "y")
    residual = _model([helper.make_node("Conv", ["x", "dw"], ["d"], pads=[1, 1, 1, 1], group=3),
                       helper.make_node("Add", ["d", "x"], ["a"]),
                       helper.make_node("Clip", ["a", "lo", "hi"], ["y"])],
                      {"dw": w(3, 1, 3, 3), "lo": np.float32(-1), "hi": np.float32(2)}, (1, 3, 6, 6), "y")
    head = _model([helper.make_node("GlobalAveragePool", ["x"], ["p"]),
                   helper.make_node("Flatten", ["p"], ["f"], axis=1),
                   helper.make_node("Gemm", ["f", "fc", "fb"], ["g"], transB=1),
                   helper.make_node("Softmax", ["g"], ["y"], axis=1)],
                  {"fc": w(5, 3), "fb": w(5)}, (1, 3, 4, 4), "y")
    movement = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
                       helper.make_node("Concat", ["t", "t"], ["c"], axis=1),
                       helper.make_node("Reshape", ["c", "s"], ["r"]),
                       helper.make_node("Sigmoid", ["r"], ["y"])],
                      {"s": np.array([1, -1, 4], np.int64)}, (1, 3, 4, 4), "y")
    resize = _model([helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
                     helper.make_node("Resize", ["p", "", "sc"], ["r"], mode="nearest"),
                     helper.make_node("AveragePool", ["r"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                     helper.make_node("LRN", ["a"], ["y"], size=3)],
                    {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
                     "sc": np.array([1, 1, 2, 2], np.float32)}, (1, 3, 4, 4), "y")
    return [conv, residual, head, movement, resize]


def _attribute_value(r: random.Random, a: Any) -> Any:
    if a.type == onnx.AttributeProto.INT:
        return r.choice(INTS)
    if a.type == onnx.AttributeProto.FLOAT:
        return r.choice(FLOATS)
    if a.type == onnx.AttributeProto.STRING:
        return r.choice(STRINGS)
    if a.type == onnx.AttributeProto.INTS:
        return [r.choice(INTS) for _ in range(r.choice([len(a.ints), len(a.ints), 1, 3]))]
    return r.choice(INTS)


def mutate(m: Any, seed: int) -> tuple[Any, list[str]]:
    """A mutated copy of ``m`` and what was done to it."""
    r = random.Random(seed)
    m = copy.deepcopy(m)
    g = m.graph
    done: list[str] = []
    for _ in range(r.randint(1, 3)):
        kind = r.choice(["value", "value", "type", "drop_attr", "add_attr", "input", "swap", "op",
                         "init_dims", "init_type", "input_shape", "drop_node"])
        node = r.choice(list(g.node)) if g.node else None
        if node is None:
            break
        if kind in ("value", "type", "drop_attr") and node.attribute:
            a = r.choice(list(node.attribute))
            name = a.name
            if kind == "drop_attr":
                node.attribute.remove(a)
            else:
                value = _attribute_value(r, a) if kind == "value" else r.choice([1.5, "text", [1.0, 2.0], 7])
                node.attribute.remove(a)
                node.attribute.append(helper.make_attribute(name, value))
            done.append(f"{kind} {node.op_type}.{name}")
        elif kind == "add_attr":
            node.attribute.append(helper.make_attribute(r.choice(["stride", "axis", "alpha"]), 2))
            done.append(f"add an attribute to {node.op_type}")
        elif kind == "input" and node.input:
            i = r.randrange(len(node.input))
            names = [t for n in g.node for t in n.output] + [t.name for t in g.initializer] + ["x", "nowhere"]
            node.input[i] = r.choice(names)
            done.append(f"{node.op_type} input {i} -> {node.input[i]}")
        elif kind == "swap" and len(node.input) > 1:
            node.input[0], node.input[1] = node.input[1], node.input[0]
            done.append(f"swap {node.op_type} inputs")
        elif kind == "op":
            before, node.op_type = node.op_type, r.choice(OPS)
            done.append(f"{before} -> {node.op_type}")
        elif kind in ("init_dims", "init_type") and g.initializer:
            t = r.choice(list(g.initializer))
            value = numpy_helper.to_array(t)
            if kind == "init_dims":
                new = value.reshape(-1)[:max(1, value.size - r.choice([0, 1]))]
                new = new.reshape(r.choice([new.shape, (1, *new.shape), new.shape[::-1]]))
            else:
                new = value.astype(r.choice([np.int64, np.float16, np.int32, np.float64]))
            t.CopyFrom(numpy_helper.from_array(new, t.name))
            done.append(f"{kind} {t.name} -> {new.dtype}{new.shape}")
        elif kind == "input_shape":
            dims = g.input[0].type.tensor_type.shape.dim
            d = r.randrange(len(dims))
            dims[d].dim_value = r.choice([1, 2, 5, 9])
            done.append(f"input dim {d} -> {dims[d].dim_value}")
        elif kind == "drop_node" and len(g.node) > 1:
            g.node.remove(node)
            done.append(f"drop {node.op_type}")
    return m, done


def _onnxruntime(m: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return list(sess.run(None, feeds))
    except Exception:
        return None  # onnxruntime refuses the mutated model too


BASES = base_models()


def test_the_base_models_match_onnxruntime() -> None:
    for m in BASES:
        x = np.random.default_rng(1).standard_normal(
            [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
        with Session(compile_model(m).blob) as sess:
            got = sess.run({"x": x})[m.graph.output[0].name]
        want = _onnxruntime(m, {"x": x})
        assert want is not None
        np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_mutated_model_is_refused_or_runs_correctly(seed: int) -> None:
    m, done = mutate(BASES[seed % len(BASES)], seed)
    start = time.monotonic()
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    try:
        blob = compile_model(m).blob
        with Session(blob) as sess:
            got = sess.run({"x": x})
    except DlaError as e:  # refused, with a code and a message: what a malformed model should get
        assert e.message.isprintable(), f"seed {seed} ({done}): a message of several lines: {e.message!r}"
        return
    finally:
        elapsed = time.monotonic() - start
        assert elapsed < SECONDS_PER_CASE, f"seed {seed} ({done}) took {elapsed:.0f} s"
    want = _onnxruntime(m, {"x": x})
    if want is None:
        return  # pydla runs a model onnxruntime refuses: nothing to compare with
    for name, value in zip([o.name for o in m.graph.output], want, strict=True):
        ours = got[name]
        assert ours.shape == value.shape and ours.dtype == value.dtype, (seed, done, name)
        ok = np.allclose(ours, value, rtol=1e-3, atol=1e-4, equal_nan=True)
        assert ok, f"seed {seed} ({done}): output {name} differs from onnxruntime's"
