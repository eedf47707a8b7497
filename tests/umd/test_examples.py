"""The example scripts run as a user runs them (`python examples/X.py`, from another directory)
and print the numbers onnxruntime computes for the demo model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    sess = ort.InferenceSession(str(EXAMPLES / "demo_model.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0].ravel()  # type: ignore[no-any-return]


def run_example(name: str, tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def numbers(line: str) -> np.ndarray:
    return np.array([float(v) for v in line.split(":", 1)[1].split()])


def test_session_example(tmp_path: Path, expected: np.ndarray) -> None:
    lines = run_example("session_example.py", tmp_path).splitlines()
    assert lines[0].startswith("probabilities: ") and len(lines) == 2
    np.testing.assert_allclose(numbers(lines[0]), expected, atol=2e-6)
    assert lines[1] == f"class: {int(expected.argmax())}"


@pytest.mark.parametrize("given", [False, True])
def test_runtime_example(tmp_path: Path, expected: np.ndarray, given: bool) -> None:
    args = []
    if given:  # a loadable file, as `pydla compile` writes it
        from pydla.compiler.api import compile_model

        (tmp_path / "demo.dla").write_bytes(compile_model(EXAMPLES / "demo_model.onnx").blob)
        args = ["demo.dla"]
    out = run_example("runtime_example.py", tmp_path, *args)
    assert re.search(r"^devices: 2 available of 2$", out, re.M)
    assert "input input (1, 3, 32, 32) (12288 bytes), output probabilities (1, 10)" in out
    lines = {line.split(":", 1)[0]: line for line in out.splitlines()}
    np.testing.assert_allclose(numbers(lines["submit"]), expected, atol=2e-6)
    np.testing.assert_allclose(numbers(lines["submitNonBlocking"]), expected, atol=2e-6)
    assert lines["same result"] == "same result: True"


def test_the_examples_are_listed() -> None:
    listed = (EXAMPLES / "README.md").read_text()
    for script in EXAMPLES.glob("*.py"):
        assert f"`{script.name}`" in listed, script.name
