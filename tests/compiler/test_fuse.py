"""Gelu written out with Erf becomes one Gelu node (one run of the exact function, no SDP work
around it) in the forms exporters write it; anything else, or a form whose intermediate tensors
something else reads, stays as written. A Linear's bias Add is the product's SDP bias, and
attention's MatMul of a transposed K reads K as it lies. Either way it agrees with onnxruntime."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx import helper

from pydla.compiler.api import compile_model
from pydla.compiler.graph import import_graph
from tests.compiler.support import model, reference, run_loadable

F32 = np.float32


def _torch_form(root: float = math.sqrt(2), extra_output: bool = False) -> Any:
    """torch.onnx's: Div(x, sqrt 2), Erf, Add 1, Mul x, Mul 0.5 (after a Relu: x is computed)."""
    nodes = [helper.make_node("Relu", ["a"], ["x"]),
             helper.make_node("Div", ["x", "root"], ["u"]), helper.make_node("Erf", ["u"], ["v"]),
             helper.make_node("Add", ["v", "one"], ["w"]), helper.make_node("Mul", ["x", "w"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["y"])]
    consts = {"root": np.array(root, F32), "one": np.array(1.0, F32), "half": np.array(0.5, F32)}
    return model(nodes, {"a": (2, 3, 8)}, ["y", "v"] if extra_output else ["y"], consts)


def _halved_first_form() -> Any:
    """Another order: h = 0.5 * x first, x * (1 / sqrt 2) as a product, 1 + erf, then h * s."""
    nodes = [helper.make_node("Relu", ["a"], ["x"]),
             helper.make_node("Mul", ["half", "x"], ["h"]),
             helper.make_node("Mul", ["x", "inv_root"], ["u"]), helper.make_node("Erf", ["u"], ["v"]),
             helper.make_node("Add", ["one", "v"], ["w"]), helper.make_node("Mul", ["w", "h"], ["y"])]
    consts = {"inv_root": np.array(1 / math.sqrt(2), F32), "one": np.array(1.0, F32),
              "half": np.array(0.5, F32)}
    return model(nodes, {"a": (2, 3, 8)}, ["y"], consts)


@pytest.mark.parametrize("build,fused", [(_torch_form, True), (_halved_first_form, True),
                                         (lambda: _torch_form(root=math.sqrt(3)), False),
                                         (lambda: _torch_form(extra_output=True), False)])
def test_erf_form_gelu(build: Any, fused: bool) -> None:
    m = build()
    ops = [n.op_type for n in import_graph(m).nodes]
    assert (ops == ["Relu", "Gelu"]) == fused, ops
    assert ("Erf" in ops) != fused
    a = (np.random.default_rng(8).standard_normal((2, 3, 8)) * 3).astype(F32)
    compiled = compile_model(m, shave=False)
    assert [n["op"] for n in compiled.cpu_runs] == (["Gelu"] if fused else ["Erf"])
    on_tiles = compile_model(m)  # the default: the one function on a SHAVE tile
    assert on_tiles.cpu_runs == [] and on_tiles.operations["SHAVE"] == 1
    for blob in (compiled.blob, on_tiles.blob):
        got, want = run_loadable(blob, {"a": a}), reference(m, {"a": a})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_linear_bias_is_the_products_sdp_bias() -> None:
    """MatMul then Add of a constant per column (or a scalar): one CONV + SDP pair; an Add of a
    full matrix stays an SDP operation of its own."""
    rng = np.random.default_rng(3)
    x = {"x": rng.standard_normal((2, 5, 8)).astype(F32)}
    for bias, fused in ((rng.standard_normal(6), True), (np.array(0.25), True),
                        (rng.standard_normal((5, 6)), False)):
        m = model([helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"])],
                  {"x": (2, 5, 8)}, ["y"], {"w": rng.standard_normal((8, 6)), "b": bias})
        compiled = compile_model(m)
        assert (compiled.operations.get("SDP") == 1) == fused, compiled.operations
        got, want = run_loadable(compiled.blob, x)["y"], reference(m, x)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scaled", [False, True])
def test_attention_reads_k_as_it_lies(scaled: bool) -> None:
    """MatMul(q, Transpose(k) [* scalar]) with the Transpose swapping the last two axes: no RUBIK
    transpose and no BDMA copy of K; K's transpose read elsewhere keeps them."""
    rng = np.random.default_rng(4)
    shapes = {"q": (1, 2, 6, 4), "k": (1, 2, 6, 4)}
    feeds = {name: rng.standard_normal(shape).astype(F32) for name, shape in shapes.items()}
    nodes = [helper.make_node("Relu", ["k"], ["kr"]),
             helper.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2])]
    b = "kt"
    if scaled:
        nodes.append(helper.make_node("Mul", ["kt", "c"], ["ks"]))
        b = "ks"
    nodes.append(helper.make_node("MatMul", ["q", b], ["y"]))
    m = model(nodes, shapes, ["y"], {"c": np.array(0.5, F32)})
    compiled = compile_model(m)
    assert "RUBIK" not in compiled.operations and "BDMA" not in compiled.operations, compiled.operations
    np.testing.assert_allclose(run_loadable(compiled.blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-5,
                               atol=1e-5)
    kept = model([*nodes, helper.make_node("Identity", ["kt"], ["z"])], shapes, ["y", "z"],
                 {"c": np.array(0.5, F32)})
    compiled = compile_model(kept)
    assert "RUBIK" in compiled.operations or "BDMA" in compiled.operations
    got, want = run_loadable(compiled.blob, feeds), reference(kept, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("constant_b", [False, True])
def test_scalar_factors_of_a_products_operands_scale_the_product(constant_b: bool) -> None:
    """MatMul(Mul(A, a), Mul(B, b)): the product scaled by a * b (B given at run time: SDP's scale,
    with a bias Add fused after it; a constant B: in its weights), no SDP Mul of its own."""
    rng = np.random.default_rng(5)
    inits: dict[str, Any] = {"a": np.array(0.5, F32), "c": np.array(-3.0, F32),
                             "bias": rng.standard_normal(4)}
    shapes = {"x": (2, 3, 5)}
    if constant_b:
        inits["w"] = rng.standard_normal((5, 4))
    else:
        shapes["w"] = (5, 4)
    nodes = [helper.make_node("Mul", ["x", "a"], ["xa"]), helper.make_node("Mul", ["c", "w"], ["wc"]),
             helper.make_node("MatMul", ["xa", "wc"], ["p"]), helper.make_node("Add", ["p", "bias"], ["y"])]
    m = model(nodes, shapes, ["y"], inits)
    feeds = {name: rng.standard_normal(shape).astype(F32) for name, shape in shapes.items()}
    compiled = compile_model(m)
    assert compiled.operations.get("SDP") == 1, compiled.operations
    got, want = run_loadable(compiled.blob, feeds)["y"], reference(m, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_additive_mask_computed_at_run_time_is_the_products_operand() -> None:
    """Scores (1, H, T, T) plus a mask (1, 1, 1, T) computed at run time: the product's SDP adds it
    per channel (no broadcast copy, no SDP of its own); a mask that varies by row stays apart."""
    rng = np.random.default_rng(6)
    shapes = {"q": (1, 2, 5, 3), "k": (1, 2, 3, 5), "m": (1, 1, 1, 5)}
    nodes = [helper.make_node("Relu", ["m"], ["mask"]), helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("Add", ["s", "mask"], ["y"])]
    m = model(nodes, shapes, ["y"])
    feeds = {name: rng.standard_normal(shape).astype(F32) for name, shape in shapes.items()}
    compiled = compile_model(m)
    # The Relu, then one product's SDP per head (each with the mask); BDMA: K's weights per head.
    assert compiled.operations.get("SDP") == 3 and compiled.operations.get("BDMA") == 2, compiled.operations
    got, want = run_loadable(compiled.blob, feeds)["y"], reference(m, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    shapes["m"] = (1, 1, 5, 5)
    m = model(nodes, shapes, ["y"])
    feeds["m"] = rng.standard_normal(shapes["m"]).astype(F32)
    compiled = compile_model(m)
    assert compiled.operations.get("SDP", 0) >= 4
    np.testing.assert_allclose(run_loadable(compiled.blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("act", [None, "Relu"])
def test_a_batched_product_of_two_computed_matrices_needs_no_weight_copy(act: str | None) -> None:
    """P (H, T, T) . V (H, T, D), both computed: each head's product runs transposed (V^T read from
    V as the input, P's rows as the weights), written into Y as it lies: no BDMA copy of V."""
    rng = np.random.default_rng(7)
    shapes = {"p": (1, 3, 5, 6), "v": (1, 3, 6, 4)}
    nodes = [helper.make_node("Sigmoid", ["p"], ["ps"]), helper.make_node("Tanh", ["v"], ["vt"]),
             helper.make_node("MatMul", ["ps", "vt"], ["y" if act is None else "z"])]
    if act is not None:
        nodes.append(helper.make_node(act, ["z"], ["y"]))
    m = model(nodes, shapes, ["y"])
    feeds = {name: rng.standard_normal(shape).astype(F32) for name, shape in shapes.items()}
    compiled = compile_model(m)
    assert "BDMA" not in compiled.operations, compiled.operations
    np.testing.assert_allclose(run_loadable(compiled.blob, feeds)["y"], reference(m, feeds)["y"], rtol=1e-5,
                               atol=1e-5)
