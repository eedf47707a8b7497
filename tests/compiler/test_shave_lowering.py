"""Softmax, LogSoftmax, Exp, Log, Sqrt, Erf, Gelu, Softplus, Mish and LayerNormalization on the SHAVE
tiles: compiled to SHAVE task lists on a configuration with tiles (no CPU run left for them), kept
CPU runs without tiles or with ``shave=False``, and agreeing with onnxruntime in every case; chunked
to CMX and spread over the tiles when large; the machine code ("exact" emulation) agrees with the
numpy equivalents."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import helper

from pydla.compiler.api import compile_model
from pydla.elf.controlcode import ControlCode
from pydla.loadable import shave_task
from pydla.loadable.container import Loadable
from pydla.session import Session
from tests.compiler.support import model, reference

RNG = np.random.default_rng(7)


def _cases() -> dict[str, tuple[Any, dict[str, np.ndarray]]]:
    x = {"x": (RNG.standard_normal((2, 6, 40)) * 3).astype(np.float32)}
    scale, bias = RNG.standard_normal(40).astype(np.float32), RNG.standard_normal(40).astype(np.float32)
    shape = {"x": (2, 6, 40)}
    positive = {"x": np.abs(x["x"]) + 0.01}

    def one(op: str, inputs: list[str], opset: int = 13, inits: dict[str, Any] | None = None,
            **attrs: Any) -> tuple[Any, dict[str, np.ndarray]]:
        return model([helper.make_node(op, inputs, ["y"], **attrs)], shape, ["y"], inits, opset=opset), x

    return {
        "softmax_last": one("Softmax", ["x"], axis=-1),
        "softmax_middle": one("Softmax", ["x"], axis=1),
        "softmax_opset11": one("Softmax", ["x"], opset=11, axis=1),
        "exp": one("Exp", ["x"]),
        "erf": one("Erf", ["x"]),
        "gelu": one("Gelu", ["x"], opset=20),
        "layernorm": one("LayerNormalization", ["x", "s", "b"], 17, {"s": scale, "b": bias}, axis=-1),
        "layernorm_no_bias_axis1": one("LayerNormalization", ["x", "s"], 17,
                                       {"s": RNG.standard_normal((6, 40))}, axis=1, epsilon=1e-3),
        "log_softmax": one("LogSoftmax", ["x"], axis=-1),
        "sqrt": (one("Sqrt", ["x"])[0], positive),
        "log": (one("Log", ["x"])[0], positive),
        "softplus": one("Softplus", ["x"]),
        "mish": one("Mish", ["x"], opset=18),
        "reduce_sum_axes_input": one("ReduceSum", ["x", "ax"], 13, {"ax": np.array([1], np.int64)},
                                     keepdims=1),
        "reduce_max_middle": one("ReduceMax", ["x"], axes=[1], keepdims=0),
        "reduce_l2_two_axes": one("ReduceL2", ["x"], axes=[1, 2], keepdims=1),
        "reduce_logsumexp_all": one("ReduceLogSumExp", ["x"], keepdims=0),
        "reduce_mean_first": (one("ReduceMean", ["x"], opset=18)[0], x),
    }


CASES = _cases()


def _run(blob: bytes, feeds: dict[str, np.ndarray], config: str = "full") -> np.ndarray:
    with Session(blob, config=config) as sess:
        return next(iter(sess.run(feeds).values()))


def _shave_lists(blob: bytes) -> list[dict[str, Any]]:
    lo = Loadable.open(blob)
    codes = [lo.control_code(r.name) for r in lo.recipe.runs if r.where == "npu"]
    return [shave_task.describe(c) for c in codes if c.is_shave]


@pytest.mark.parametrize("case", sorted(CASES))
def test_on_the_tiles_agrees_with_onnxruntime(case: str) -> None:
    m, feeds = CASES[case]
    compiled = compile_model(m)
    assert compiled.operations.get("SHAVE", 0) >= 1
    assert compiled.cpu_runs == []
    want = next(iter(reference(m, feeds).values()))
    np.testing.assert_allclose(_run(compiled.blob, feeds), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["softmax_last", "gelu", "layernorm"])
def test_without_tiles_they_stay_on_the_host(case: str) -> None:
    m, feeds = CASES[case]
    want = next(iter(reference(m, feeds).values()))
    builds = [(compile_model(m, shave=False), "full")]
    if case != "layernorm":  # its decomposed form needs BDMA, which 'small' lacks
        builds.append((compile_model(m, config="small"), "small"))
    for compiled, config in builds:
        assert "SHAVE" not in compiled.operations
        assert not _shave_lists(compiled.blob)
        np.testing.assert_allclose(_run(compiled.blob, feeds, config), want, rtol=1e-4, atol=1e-5)


def test_a_large_tensor_is_spread_over_the_tiles() -> None:
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {"x": (256, 1024)}, ["y"])
    x = {"x": RNG.standard_normal((256, 1024)).astype(np.float32)}
    compiled = compile_model(m)
    lists = _shave_lists(compiled.blob)
    tiles = {t["tile"] for s in lists for t in s["kernel_tasks"]}
    assert tiles == {0, 1}
    np.testing.assert_allclose(_run(compiled.blob, x), next(iter(reference(m, x).values())), rtol=1e-4,
                               atol=1e-7)


def test_a_tensor_larger_than_the_tiles_cmx_takes_several_lists() -> None:
    shape = (4, 1024, 1024)  # 16 MiB in, 16 out: more than two 2 MiB slices hold at once
    m = model([helper.make_node("Exp", ["x"], ["y"])], {"x": shape}, ["y"])
    x = {"x": RNG.uniform(-3, 3, shape).astype(np.float32)}
    compiled = compile_model(m)
    lists = _shave_lists(compiled.blob)
    assert len(lists) > 1
    for s in lists:  # each list's barriers are counted as the KMD will check them
        for b in s["barriers"]:
            assert b["producers"] >= 1 and (b["consumers"] >= 1 or b["notify"])
    np.testing.assert_allclose(_run(compiled.blob, x), np.exp(x["x"]), rtol=1e-5)


def test_fp16_runs_softmax_and_gelu_on_the_tiles_and_decomposes_layernorm() -> None:
    """In fp16 the layernorm kernel (fp32 only) is not used: the decomposed form runs, its Sqrt on
    the tiles."""
    for case in ("softmax_last", "gelu", "layernorm"):
        m, feeds = CASES[case]
        compiled = compile_model(m, precision="fp16")
        want = next(iter(reference(m, feeds).values()))
        kernels = {t["kernel"] for s in _shave_lists(compiled.blob) for t in s["kernel_tasks"]}
        assert kernels == {"layernorm": {"shave_activation"}, "gelu": {"shave_activation"},
                           "softmax_last": {"shave_softmax"}}[case]
        assert compiled.cpu_runs == []
        np.testing.assert_allclose(_run(compiled.blob, feeds), want, rtol=2e-2, atol=2e-2)


def test_the_machine_code_agrees(tmp_path: Path) -> None:
    """The same loadable on a device whose tiles run every kernel's machine code."""
    raw = json.loads(resources.files("pydla.target").joinpath("configs/full.json").read_text())
    raw["shave"]["emulation"] = "exact"
    config = tmp_path / "full.json"
    config.write_text(json.dumps(raw))
    for case in ("softmax_middle", "gelu", "layernorm"):
        m, feeds = CASES[case]
        compiled = compile_model(m)
        np.testing.assert_allclose(_run(compiled.blob, feeds, str(config)), _run(compiled.blob, feeds),
                                   rtol=2e-5, atol=2e-6)


def test_pydla_info_lists_the_kernels_and_barriers(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from pydla.cli import main

    path = tmp_path / "m.dla"
    path.write_bytes(compile_model(CASES["layernorm"][0]).blob)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "shave kernels: shave_layernorm" in out
    assert "kernel task 0: 'shave_layernorm'" in out and "(notifies the host)" in out
    code = Loadable.open(path.read_bytes()).control_code("task0")
    assert isinstance(code, ControlCode) and code.is_shave
