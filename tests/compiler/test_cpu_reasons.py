"""Each CPU run says which node made it and why the device could not take it: in the compile result,
in the recipe header's metadata, and in `pydla info` (text and --json); malformed metadata in a
loadable from elsewhere is ignored, never trusted."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from pydla.cli import main
from pydla.compiler.api import compile_model
from pydla.compiler.cpu_reasons import WHY
from pydla.loadable.cli import _cpu_runs
from pydla.loadable.container import Loadable
from tests.compiler.support import model


def _sine_then_cast() -> Any:
    m = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("Sin", ["r"], ["s"], name="sine"),
               helper.make_node("Relu", ["s"], ["t"], name="relu2"),
               helper.make_node("Cast", ["t"], ["y"], to=TensorProto.INT32, name="to_int")],
              {"x": (2, 5)}, ["y"])
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    return m


def test_the_compile_result_and_the_recipe_header_name_each_cpu_run() -> None:
    compiled = compile_model(_sine_then_cast())
    runs = Loadable.open(compiled.blob).recipe.runs
    assert [r.where for r in runs] == ["npu", "cpu", "npu", "cpu"]
    assert compiled.cpu_runs == [
        {"index": 1, "function": "unary", "node": "sine", "op": "Sin", "why": WHY["unary"]},
        {"index": 3, "function": "cast", "node": "to_int", "op": "Cast", "why": WHY["cast"]}]
    assert Loadable.open(compiled.blob).recipe.raw["header"]["cpu_runs"] == compiled.cpu_runs


def test_a_network_on_the_device_alone_has_no_cpu_runs_entry() -> None:
    compiled = compile_model(model([helper.make_node("Relu", ["x"], ["y"])], {"x": (1, 2, 3, 3)}, ["y"]))
    assert compiled.cpu_runs == []
    assert "cpu_runs" not in Loadable.open(compiled.blob).recipe.raw["header"]


def test_pydla_info_reports_the_count_and_the_reasons(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.dla"
    path.write_bytes(compile_model(_sine_then_cast()).blob)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "cpu runs: 2 (each splits the NPU work" in out
    assert f"cpu run unary from umd/cpulib.py for node 'sine' (Sin): {WHY['unary']}" in out
    assert f"cpu run cast from umd/cpulib.py for node 'to_int' (Cast): {WHY['cast']}" in out
    assert main(["info", str(path), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["cpu_runs"]
    assert [(r["run"], r["node"], r["op"]) for r in runs] == [("unary", "sine", "Sin"),
                                                              ("cast", "to_int", "Cast")]


@pytest.mark.parametrize("notes", [None, "text", [1, "x", None], [{"index": "1", "node": "n"}],
                                   [{"index": True, "node": "n"}], [{"index": 1, "node": 7, "why": ["w"]}]])
def test_malformed_cpu_run_metadata_is_ignored(notes: Any) -> None:
    header: dict[str, Any] = {"device": "full"}
    if notes is not None:
        header["cpu_runs"] = notes
    recipe = SimpleNamespace(raw={"header": header}, cpus={"f": SimpleNamespace(library_path="lib.py")},
                             runs=(SimpleNamespace(name="t0", where="npu"),
                                   SimpleNamespace(name="f", where="cpu")))
    assert _cpu_runs(recipe) == [{"run": "f", "library": "lib.py"}]


def test_the_reasons_cover_every_cpu_library_function_the_compiler_calls() -> None:
    import re

    root = Path(__file__).resolve().parents[2] / "pydla" / "compiler"
    called = {m for f in root.glob("*.py") for m in re.findall(r'cpu_run\(lw, "(\w+)"', f.read_text())}
    called |= {"softmax", "log_softmax", "eltwise", "eltwise_int"}  # named through variables
    assert called <= set(WHY), called - set(WHY)
    assert np.all([len(w) > 10 for w in WHY.values()])


def test_pydla_compile_counts_the_cpu_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(_sine_then_cast(), str(path))
    assert main(["compile", str(path)]) == 0
    out = capsys.readouterr().out
    dla = tmp_path / "m.dla"
    assert f"cpu runs: 2 (Cast, Sin), each a split of the NPU work: `pydla info {dla}`" in out
