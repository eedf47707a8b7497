"""The compiler's barriers between DLA operations and SHAVE tasks: in a transformer encoder layer, the
Softmax (spread over the tiles, each chunk of heads produced by operations of its own) runs its task
list in the task of the DLA operations before it, each chunk's DMA started by a barrier its
producers update; LayerNormalization and Gelu, whose chunks all wait for the same operation, stay
lists of their own; the outputs agree with onnxruntime and are the same bytes as without barriers
(``shave_barriers=False``). By default the compiler places them only for a configuration without a
command processor (whose device would run such a task per operation)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import pydla.target
from pydla.compiler.api import compile_model
from pydla.loadable import shave_task
from pydla.loadable.container import Loadable
from pydla.session import Session
from pydla.target.config import load_config
from tests.compiler.exporter_models import bert_encoder
from tests.compiler.support import reference

SEQ = 128  # the scores of 4 heads, 4 x 128 x 128 float32: spread over the tiles (two heads a chunk)


def run_loadable(blob: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with Session(blob) as sess:
        return sess.run(feeds)


def _encoder() -> tuple[object, dict[str, np.ndarray], dict[str, tuple[int, int]]]:
    m = bert_encoder(layers=1, d=32, heads=4, vocab=50, positions=SEQ)
    rng = np.random.default_rng(5)
    feeds = {"input_ids": rng.integers(0, 50, (1, SEQ)).astype(np.int64),
             "attention_mask": np.ones((1, SEQ), np.int64)}
    return m, feeds, {name: v.shape for name, v in feeds.items()}


def _kinds(blob: bytes) -> list[str]:
    lo = Loadable.open(blob)
    out = []
    for run in lo.recipe.runs:
        if run.where == "npu":
            code = lo.control_code(run.name)
            out.append("mixed" if code.is_mixed else "shave" if code.is_shave else "dla")
    return out


def test_an_encoder_layers_shave_steps_run_beside_their_producers() -> None:
    m, _, shapes = _encoder()
    with_barriers = compile_model(m, input_shapes=shapes, shave_barriers=True)
    without = compile_model(m, input_shapes=shapes, shave_barriers=False)
    kinds, kinds_without = _kinds(with_barriers.blob), _kinds(without.blob)
    # Without: each SHAVE list a task of its own after a DLA task. With: the Softmax's is in the task
    # of the operations computing the scores; the others stay tasks of their own.
    assert kinds_without.count("shave") == kinds.count("mixed") + kinds.count("shave")
    assert kinds.count("mixed") == 1
    assert len(kinds) == len(kinds_without) - 1
    assert with_barriers.operations == without.operations  # the same work, in fewer tasks
    lo = Loadable.open(with_barriers.blob)
    for run in lo.recipe.runs:
        if run.where != "npu" or not lo.control_code(run.name).is_mixed:
            continue
        code = lo.control_code(run.name)
        listing = shave_task.describe(code)
        assert len(listing["operations"]) == len(code.op_types()) > 0
        updated = 0
        for op in listing["operations"]:
            for b in op["update"]:
                updated |= 1 << b
            assert op["wait"] == []  # (this direction: the SHAVE tasks wait on the operations)
        assert updated, run.name
        # Each barrier an operation updates is waited on by a DMA task of the list.
        waited = 0
        for dma in listing["dma_tasks"]:
            for b in dma["wait"]:
                waited |= 1 << b
        assert updated & ~waited == 0, (run.name, updated, waited)
        # Each chunk's DMA in waits on its own producers: two chunks, two barriers.
        ins = [d for d in listing["dma_tasks"] if d["direction"] == "to_cmx"]
        assert len(ins) == 2 and all(len(d["wait"]) == 1 and updated >> d["wait"][0] & 1 for d in ins)
        assert ins[0]["wait"] != ins[1]["wait"] and ins[0]["tile"] != ins[1]["tile"]
        # The producer and consumer counts include the operations.
        for entry in listing["barriers"]:
            if updated >> entry["barrier"] & 1:
                assert entry["producers"] >= 1 and entry["consumers"] >= 1, entry


def test_the_encoder_layer_agrees_with_onnxruntime_and_without_barriers() -> None:
    m, feeds, shapes = _encoder()
    ours = run_loadable(compile_model(m, input_shapes=shapes, shave_barriers=True).blob, feeds)
    plain = run_loadable(compile_model(m, input_shapes=shapes, shave_barriers=False).blob, feeds)
    ref = reference(m, feeds)
    for name, want in ref.items():
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(ours[name], want, rtol=1e-4, atol=1e-4 * scale)
        np.testing.assert_array_equal(ours[name], plain[name])


def test_by_default_barriers_only_where_no_command_processor_runs_the_tasks(tmp_path: Path) -> None:
    # ``full`` has a command processor: a mixed task would run per operation there, so none is made
    # unless asked for; a configuration without one (the same device otherwise) gets them.
    m, feeds, shapes = _encoder()
    on = compile_model(m, input_shapes=shapes)
    assert load_config("full").command_processor
    assert _kinds(on.blob).count("mixed") == 0
    assert _kinds(on.blob) == _kinds(compile_model(m, input_shapes=shapes, shave_barriers=False).blob)
    off = compile_model(m, input_shapes=shapes, config=str(_no_command_processor(tmp_path)))
    assert _kinds(off.blob).count("mixed") == 1
    ours = run_loadable(on.blob, feeds)
    mixed = run_loadable(compile_model(m, input_shapes=shapes, shave_barriers=True).blob, feeds)
    assert ours.keys() == mixed.keys()
    for name, value in ours.items():
        np.testing.assert_array_equal(value, mixed[name])


def _no_command_processor(where: Path) -> Path:
    """``full`` with ``"engine": {"command_processor": false}``, as a configuration file."""
    doc = json.loads((Path(pydla.target.__file__).parent / "configs" / "full.json").read_text())
    doc["name"] = "full-no-cp"
    doc["engine"] = {"command_processor": False}
    path = where / "full-no-cp.json"
    path.write_text(json.dumps(doc))
    return path
