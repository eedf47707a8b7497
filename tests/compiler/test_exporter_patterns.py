"""Exporter output compiles as if its shapes were written out, and agrees with onnxruntime.

Each model (tests/compiler/exporter_models.py) has the node patterns of a torch.onnx (opset 17) or
tf2onnx export and symbolic batch / sequence dimensions; it compiles with input shapes, and every
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain, Range, ConstantOfShape, Equal / Where, Trilu
and Expand of known shapes is folded away (no such node reaches the loadable).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from pydla.compiler.api import compile_model
from pydla.compiler.graph import import_graph
from pydla.loadable.container import Loadable
from pydla.session import Session
from tests.compiler import exporter_models as em

# Operators whose inputs after the first are parameters (shapes, indices, axes) exporters compute.
PARAMETERS = {"Reshape", "Expand", "Tile", "Slice", "Pad", "Resize", "Squeeze", "Unsqueeze", "Split",
              "ConstantOfShape", "ReduceMean", "ReduceSum"}


def _ort(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def _pydla(blob: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with Session(blob) as sess:
        return sess.run(feeds)


def _ids(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - seq // 3:] = 0  # the last sequence is padded: its tail is masked out
    return {"input_ids": rng.integers(0, 50, (batch, seq), dtype=np.int64), "attention_mask": mask}


def _floats(name: str, shape: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    return {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


CASES: dict[str, tuple[Callable[[], onnx.ModelProto], Callable[[int, int], dict[str, np.ndarray]]]] = {
    "bert_encoder": (em.bert_encoder, _ids),
    "bert_expanded_mask": (lambda: em.bert_encoder(layers=1, mask_form="expanded"), _ids),
    "vit": (em.vit, lambda b, s: _floats("pixel_values", (b, 3, 16, 16))),
    "gpt_range_mask": (lambda: em.gpt_block("range"), lambda b, s: _floats("inputs_embeds", (b, s, 32))),
    "gpt_trilu_mask": (lambda: em.gpt_block("trilu"), lambda b, s: _floats("inputs_embeds", (b, s, 32))),
    "mobilenet_v3_block": (em.mobilenet_v3_block, lambda b, s: _floats("x", (b, 16, 12, 12))),
    "channel_shuffle": (em.channel_shuffle, lambda b, s: _floats("x", (b, 8, 6, 6))),
    "tf2onnx_reshape": (em.tf2onnx_reshape, lambda b, s: _floats("input:0", (b, 3, 5, 8))),
}


@pytest.mark.parametrize("batch,seq", [(1, 8), (2, 5)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_model_agrees_with_onnxruntime(case: str, batch: int, seq: int) -> None:
    build, make_feeds = CASES[case]
    m = build()
    feeds = make_feeds(batch, seq)
    shapes = {name: value.shape for name, value in feeds.items()}
    t0 = time.perf_counter()
    blob = compile_model(m, input_shapes=shapes).blob
    compile_s = time.perf_counter() - t0
    expected = _ort(m, feeds)
    got = _pydla(blob, feeds)
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-4, err_msg=f"{case}: {name}")
    assert compile_s < 5, f"{case} took {compile_s:.1f} s to compile"


@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_model_at_the_newest_opset(case: str) -> None:
    """The same models declared at the newest opset the installed onnx knows (the operators they use
    are unchanged there, or changed in ways pydla reads: ReduceMean's axes as an input from 18)."""
    build, make_feeds = CASES[case]
    m = build()
    m.opset_import[0].version = onnx.defs.onnx_opset_version()
    m.ir_version = onnx.IR_VERSION
    feeds = make_feeds(2, 4)
    try:
        expected = _ort(m, feeds)
    except Exception as e:  # an onnxruntime older than the onnx package
        pytest.skip(f"onnxruntime cannot run opset {m.opset_import[0].version}: {str(e)[:100]}")
    got = _pydla(compile_model(m, input_shapes={n: v.shape for n, v in feeds.items()}).blob, feeds)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-4, err_msg=f"{case}: {name}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_model_in_fp16(case: str) -> None:
    """The device in fp16 (inputs and outputs keep the model's types): the same within fp16's
    precision, and an attention mask's float32 minimum (beyond fp16) is -inf there, silently."""
    build, make_feeds = CASES[case]
    m = build()
    feeds = make_feeds(2, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        blob = compile_model(m, input_shapes={n: v.shape for n, v in feeds.items()}, precision="fp16").blob
    expected = _ort(m, feeds)
    got = _pydla(blob, feeds)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-2, atol=1e-2, err_msg=f"{case}: {name}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_shape_arithmetic_is_folded_away(case: str) -> None:
    """What remains after the import is the network: no Shape, Size, Range, ConstantOfShape, Trilu
    or Constant node, every parameter (a Reshape's or Expand's shape, a Slice's starts, ...) a
    constant, every shape static."""
    build, make_feeds = CASES[case]
    feeds = make_feeds(2, 6)
    graph = import_graph(build(), input_shapes={n: v.shape for n, v in feeds.items()})
    for n in graph.nodes:
        assert n.op_type not in ("Shape", "Size", "Range", "ConstantOfShape", "Trilu", "Constant"), n.name
        if n.op_type in PARAMETERS:
            assert all(not i or i in graph.consts for i in n.inputs[1:]), (n.name, n.inputs)
        for o in n.outputs:
            assert min(graph.shapes[o], default=1) > 0, (n.name, o, graph.shapes[o])


@pytest.mark.parametrize("case", ["mobilenet_v3_block", "channel_shuffle", "tf2onnx_reshape"])
def test_cnn_patterns_have_no_cpu_run(case: str) -> None:
    """HardSwish, squeeze-excite (HardSigmoid and the channel-wise product) and channel shuffle run
    on the device's blocks: no CPU run splits the NPU work."""
    build, make_feeds = CASES[case]
    feeds = make_feeds(2, 6)
    compiled = compile_model(build(), input_shapes={n: v.shape for n, v in feeds.items()})
    assert compiled.cpu_runs == [] and "CPU" not in compiled.operations


def test_loadable_has_the_given_shapes() -> None:
    m = em.bert_encoder()
    blob = compile_model(m, input_shapes={"input_ids": (3, 7), "attention_mask": (3, 7)}).blob
    tensors = {t.name: tuple(t.dims) for t in Loadable.open(blob).tensors()}
    assert tensors == {"input_ids": (3, 7), "attention_mask": (3, 7), "last_hidden_state": (3, 7, 32)}


def _compile_error(m: onnx.ModelProto, **kwargs: Any) -> str:
    from pydla.errors import DlaError

    with pytest.raises(DlaError) as info:
        compile_model(m, **kwargs)
    return str(info.value)
