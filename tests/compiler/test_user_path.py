"""What a user meets first: progress from the start of a compile, and errors that say what is
wrong with the model or the file given (the operator, the empty model, the file that is no model),
each a DlaError with its NvError code; the `pydla compile` description."""

from __future__ import annotations

import argparse
import io
import json
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pydla import DlaError, NvError
from pydla.compiler import cli
from pydla.compiler.api import compile_model
from pydla.compiler.operators import SUPPORTED
from pydla.compiler.progress import PHASES, TerminalProgress
from tests.compiler.support import model, reference, run_loadable

RNG = np.random.default_rng(16)


def _conv_relu(batch: int = 1) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="pool")]
    return model(nodes, {"x": (batch, 3, 8, 8)}, ["y"],
                 {"W": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)})


# -- progress ------------------------------------------------------------------------------------------


def test_progress_reports_every_phase_in_order(tmp_path: Path) -> None:
    path = tmp_path / "net.onnx"
    onnx.save(_conv_relu(), str(path))
    calls: list[tuple[int, int, str]] = []
    result = compile_model(path, progress=lambda done, total, what: calls.append((done, total, what)))
    assert result.steps == 2  # conv + relu fused, then the pooling
    assert calls == [(0, 0, f"reading: {path}"), (0, 0, "checking"), (0, 0, "shape inference"),
                     (0, 0, "folding constants"), (0, 0, "planning"), (1, 2, "lowering: conv"),
                     (2, 2, "lowering: pool"), (0, 0, "writing"), (1, 1, "done")]
    phases = list(dict.fromkeys(c[2].split(":")[0] for c in calls))
    assert phases == list(PHASES)


def test_progress_of_a_model_object_starts_with_checking() -> None:
    calls: list[str] = []
    compile_model(_conv_relu(), progress=lambda done, total, what: calls.append(what))
    assert calls[0] == "checking" and calls[-1] == "done" and len(calls) == 8


def test_terminal_progress_draws_phases_then_the_bar_then_ends_the_line() -> None:
    stream = io.StringIO()
    bar = TerminalProgress(stream, interval=3600)  # within a phase only the last step is drawn
    bar(0, 0, "reading: net.onnx")
    assert stream.getvalue() == "\rcompiling: reading: net.onnx ..."
    bar(0, 0, "checking")
    # padded to the length of the line before, so that nothing of it is left on the screen
    assert stream.getvalue().endswith("\rcompiling: checking ..." + " " * 9)
    for i in range(1, 1001):
        bar(i, 1000, f"lowering: conv{i}")
    drawn = stream.getvalue().split("\r")
    assert drawn[3].startswith("compiling [..............................] 1/1000 lowering: conv1")
    assert drawn[4].startswith("compiling [##############################] 1000/1000 lowering: conv1000")
    assert len(drawn) == 5  # steps 2..999 came within the interval: not drawn
    bar(1, 1, "done")
    assert stream.getvalue().endswith("\n") and "compiled in" in stream.getvalue().split("\r")[-1]
    bar.close()  # the line is ended once
    assert stream.getvalue().count("\n") == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _compile_args(path: Path) -> argparse.Namespace:
    """`pydla compile PATH --precision fp32` as the command line parses it (every option's default)."""
    from pydla.cli import build_parser

    args: argparse.Namespace = build_parser().parse_args(["compile", str(path), "--precision", "fp32"])
    return args


@pytest.mark.parametrize("terminal", [True, False])
def test_pydla_compile_shows_progress_on_stderr_only_when_it_is_a_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        terminal: bool) -> None:
    path = tmp_path / "net.onnx"
    onnx.save(_conv_relu(), str(path))
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    assert cli._compile(_compile_args(path)) == 0
    shown = stderr.getvalue()
    if terminal:
        # the path's end (its file name) is kept when it does not fit
        assert shown.startswith("\rcompiling: reading: ...") and "progr0/net.onnx ...\r" in shown
        assert "2/2 lowering: pool" in shown
        assert shown.endswith("\n") and "compiled in" in shown
    else:
        assert shown == ""
    assert "net.dla" in capsys.readouterr().out and (tmp_path / "net.dla").is_file()


def test_pydla_compile_ends_the_progress_line_before_an_error(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "nms.onnx"
    onnx.save(_nms(), str(path))
    stderr = _Terminal()
    monkeypatch.setattr("sys.stderr", stderr)
    with pytest.raises(DlaError) as e:
        cli._compile(_compile_args(path))
    assert e.value.code == NvError.NotSupported
    assert stderr.getvalue().endswith("\n")


# -- operators -----------------------------------------------------------------------------------------


def _nms() -> onnx.ModelProto:
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"], name="nms")]
    graph = helper.make_graph(nodes, "nms", [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 10, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 10])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_non_max_suppression_is_refused_as_an_unsupported_operator() -> None:
    """Its output shape depends on the data: the operator is named, not a shape that is not static."""
    with pytest.raises(DlaError) as e:
        compile_model(_nms())
    assert e.value.code == NvError.NotSupported
    assert e.value.message.startswith("node 'nms' (NonMaxSuppression): the NonMaxSuppression operator is "
                                      "not supported")
    assert "static" not in e.value.message
    assert "supported: Abs, Acos," in e.value.message and ", Conv, " in e.value.message


def test_an_unsupported_operator_after_supported_ones_is_named() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("NonZero", ["r"], ["nz"], name="where_positive"),
             helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT)]
    with pytest.raises(DlaError) as e:
        compile_model(model(nodes, {"x": (2, 3)}, ["y"]))
    assert e.value.code == NvError.NotSupported
    assert "node 'where_positive' (NonZero): the NonZero operator is not supported" in e.value.message


def test_the_supported_operators_are_onnx_operators_the_compiler_dispatches() -> None:
    assert len(SUPPORTED) == 101  # LayerNormalization (decomposed) and Size (folded) joined the 99
    assert all(onnx.defs.has(op) for op in SUPPORTED)
    assert {"NonMaxSuppression", "NonZero", "Einsum", "Loop", "If"}.isdisjoint(SUPPORTED)


# -- the model and the file ----------------------------------------------------------------------------


def test_an_empty_file_is_named_and_said_to_be_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(DlaError) as e:
        compile_model(path)
    assert e.value.code == NvError.BadValue
    assert e.value.message == f"{path}: the file is empty (0 bytes), not an ONNX model or a loadable"


def test_an_empty_model_says_it_has_no_graph_not_opset_0() -> None:
    with pytest.raises(DlaError) as e:
        compile_model(onnx.ModelProto())
    assert e.value.code == NvError.BadValue
    assert e.value.message == ("the model is empty: it has no graph (no nodes, inputs or outputs) and no "
                               "opset_import")


@pytest.mark.parametrize("content", [bytes(range(256)) * 8, b"hello, world\n"])
def test_a_file_that_is_no_onnx_model_is_named(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "random.onnx"
    path.write_bytes(content)
    with pytest.raises(DlaError) as e:
        compile_model(str(path))
    assert e.value.code == NvError.BadValue
    assert e.value.message.startswith(f"{path}: not an ONNX model or a loadable, or a truncated one: it "
                                      "does not parse as ONNX (")


def test_a_loadable_given_as_the_model_is_named_as_one(tmp_path: Path) -> None:
    path = tmp_path / "net.dla"
    path.write_bytes(compile_model(_conv_relu()).blob)
    with pytest.raises(DlaError) as e:
        compile_model(path)
    assert e.value.code == NvError.BadValue
    assert e.value.message.startswith(f"{path}: not an ONNX model: it is an ELF file (a compiled pydla "
                                      "loadable?")


def test_bytes_that_parse_as_an_empty_model_are_no_model(tmp_path: Path) -> None:
    path = tmp_path / "nothing.onnx"
    path.write_bytes(b"\xf8\x07\x01")  # field 127 = 1: kept as unknown; no field of a model is set
    assert onnx.load(str(path)).ByteSize() == 3
    with pytest.raises(DlaError) as e:
        compile_model(path)
    assert e.value.code == NvError.BadValue
    assert e.value.message == (f"{path}: not an ONNX model: the model is empty: it has no graph (no nodes, "
                               "inputs or outputs) and no opset_import")


def test_a_missing_file_and_a_wrong_type(tmp_path: Path) -> None:
    with pytest.raises(DlaError) as e:
        compile_model(tmp_path / "missing.onnx")
    assert e.value.code == NvError.FileNotFound and "missing.onnx: no such file" in e.value.message
    with pytest.raises(DlaError) as e:
        compile_model(42)
    assert e.value.code == NvError.BadParameter and "not int" in e.value.message


# -- what `pydla compile` says it takes ----------------------------------------------------------------


def test_compile_help_says_static_shapes_and_any_batch() -> None:
    parser = argparse.ArgumentParser(prog="pydla")
    cli.register(parser.add_subparsers())
    help_text = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)) \
        .choices["compile"].format_help()
    assert "batch 1" not in help_text and "any batch size" in help_text and "static" in help_text
    assert "stderr" in help_text
    words = " ".join(help_text.split())  # argparse wraps lines where it likes
    assert "--input-shape NAME=D0,D1,..." in words and "symbolic dimensions" in words


def test_a_batch_of_four_compiles_and_runs() -> None:
    m = _conv_relu(batch=4)
    x = RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)
    result = compile_model(m)
    assert result.operations == {"CONV": 4, "SDP": 4, "PDP": 1}
    got = run_loadable(result.blob, {"x": x})["y"]
    np.testing.assert_allclose(got, reference(m, {"x": x})["y"], rtol=1e-4, atol=1e-4)


def test_a_device_without_a_block_the_network_needs_is_named(tmp_path: Path) -> None:
    raw = json.loads(resources.files("pydla.target").joinpath("configs/full.json").read_text())
    raw["name"], raw["blocks"] = "no-pdp", [b for b in raw["blocks"] if b != "PDP"]
    path = tmp_path / "no-pdp.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(DlaError) as e:
        compile_model(_conv_relu(), config=str(path))
    assert e.value.code == NvError.NotSupported
    # named as the node is lowered, with the configurations that have the block
    assert e.value.message == ("node 'pool' (MaxPool): pydla computes it with the PDP block, which "
                               "device config 'no-pdp' does not have (its blocks: BDMA, CONV, SDP, CDP, "
                               "RUBIK); compile for device config 'full', 'full-headed' or 'small', which "
                               "have it (--config full)")


# -- compile time grows linearly -----------------------------------------------------------------------


def _chain(blocks: int) -> onnx.ModelProto:
    """Conv -> Relu -> Add(the block's input), ``blocks`` times (bench/bench_compile_scaling.py's model)."""
    nodes, inits = [], {}
    x = "x"
    for i in range(blocks):
        inits[f"w{i}"] = np.full((2, 2, 1, 1), 0.5, np.float32)
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
                  helper.make_node("Add", [f"r{i}", x], [f"a{i}"])]
        x = f"a{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return model(nodes, {"x": (1, 2, 2, 2)}, ["y"], inits)


def test_grouping_and_planning_take_time_in_proportion_to_the_graph() -> None:
    """They were quadratic (a list.index and a scan for each node's readers per convolution): at
    2,000 blocks each node cost 20 times what it did at 100. The bound leaves room for a noisy machine."""
    import time

    from pydla.compiler.graph import import_graph
    from pydla.compiler.plan import group_steps, plan_memory

    per_node = {}
    for blocks in (100, 2000):
        graph = import_graph(_chain(blocks))
        best = float("inf")
        for _ in range(3):
            t0 = time.thread_time()  # this thread's CPU time: other processes' load does not count
            steps = group_steps(graph)
            plan_memory(graph, steps, {"x", "y"})
            best = min(best, time.thread_time() - t0)
        assert len(steps) == 2 * blocks + 1  # conv+relu fused, the add, the identity (a view)
        per_node[blocks] = best / len(graph.nodes)
    assert per_node[2000] < 3 * per_node[100]


def test_pydla_compile_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    import gc

    path = tmp_path / "net.onnx"
    onnx.save(_conv_relu(), str(path))
    assert gc.isenabled()
    assert cli._compile(_compile_args(path)) == 0
    assert gc.isenabled()
    with pytest.raises(DlaError):
        cli._compile(_compile_args(tmp_path / "missing.onnx"))
    assert gc.isenabled()
