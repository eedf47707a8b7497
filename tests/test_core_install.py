"""The core install (numpy, pyelftools, unicorn; no extras) runs a compiled loadable: `pydla run
model.dla`, pydla.Session and createRuntime, in a process where onnx and onnxruntime cannot be
imported (as after `pip install pydla` alone); what needs an extra says which, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model

# Run first in the subprocess: onnx and onnxruntime are not installed, as far as it can tell.
NO_EXTRAS = """
import sys
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("onnx", "onnxruntime"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


def without_extras(code: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYDLA_PORT", None)
    return subprocess.run([sys.executable, "-c", NO_EXTRAS + code, *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture(scope="module")
def dla(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("core") / "demo.dla"
    path.write_bytes(compile_model(build_demo_model()).blob)
    return path


def test_the_blocker_really_blocks(tmp_path: Path) -> None:
    result = without_extras("import onnx", tmp_path)
    assert result.returncode == 1 and "No module named 'onnx'" in result.stderr


def test_pydla_run_of_a_loadable_needs_no_extra(dla: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones((1, 3, 32, 32), np.float32))
    code = ("from pydla.cli import main; rc = main(sys.argv[1:]); assert 'onnx' not in sys.modules; "
            "sys.exit(rc)")
    result = without_extras(code, tmp_path, "run", str(dla), "--input", f"input={tmp_path / 'x.npy'}",
                            "--iterations", "2")
    assert result.returncode == 0, result.stderr
    assert "output probabilities: float32 (1, 10)" in result.stdout and result.stderr == ""


def test_session_and_runtime_of_a_loadable_need_no_extra(dla: Path, tmp_path: Path) -> None:
    code = """
import numpy as np, pydla
x = np.ones((1, 3, 32, 32), np.float32)
with pydla.Session(sys.argv[1]) as sess:
    a = sess.run({"input": x})["probabilities"]
with pydla.InferenceSession(sys.argv[1]) as sess:
    b, = sess.run(None, {"input": x})
with pydla.createRuntime() as rt:
    rt.load(sys.argv[1])
    m_in = rt.allocateSystemMemory(rt.getInputTensorDesc(0).size)
    m_out = rt.allocateSystemMemory(rt.getOutputTensorDesc(0).size)
    m_in.array(np.float32, (1, 3, 32, 32))[...] = x
    rt.bindInputTensor(0, m_in); rt.bindOutputTensor(0, m_out); rt.submit()
    c = m_out.array(np.float32, (1, 10)).copy()
assert np.array_equal(a, b) and np.array_equal(a, c) and abs(a.sum() - 1) < 1e-5, (a, b, c)
assert "onnx" not in sys.modules and "onnxruntime" not in sys.modules
print("ok")
"""
    result = without_extras(code, tmp_path, str(dla))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "MODEL"], "compiling an ONNX model needs the onnx extra: pip install 'pydla[onnx]'"),
    (["demo"], "pydla demo needs the onnx extra: pip install 'pydla[onnx]'"),
])
def test_what_needs_an_extra_says_which_in_one_line(argv: list[str], message: str, tmp_path: Path) -> None:
    model = Path(__file__).resolve().parent.parent / "examples" / "demo_model.onnx"
    argv = [str(model) if a == "MODEL" else a for a in argv]
    result = without_extras("from pydla.cli import main; sys.exit(main(sys.argv[1:]))", tmp_path, *argv)
    assert result.returncode == 1
    assert result.stderr == f"pydla: error: {message} [NotSupported]\n"


def test_session_of_an_onnx_model_says_which_extra(tmp_path: Path) -> None:
    model = Path(__file__).resolve().parent.parent / "examples" / "demo_model.onnx"
    code = """
import pydla
try:
    pydla.Session(sys.argv[1])
except pydla.DlaError as e:
    print(e)
"""
    result = without_extras(code, tmp_path, str(model))
    assert result.stdout == ("compiling an ONNX model needs the onnx extra: pip install 'pydla[onnx]' "
                             "[NotSupported]\n"), result.stderr


def test_the_onnx_backend_says_which_extra(tmp_path: Path) -> None:
    result = without_extras("import pydla.onnx_backend", tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == ("ImportError: pydla.onnx_backend is an ONNX backend: it needs "
                                              "the onnx extra: pip install 'pydla[onnx]'")


# The codegen extra's packages are not installed either (the README's quick start installs `.[onnx]`).
NO_CODEGEN = NO_EXTRAS.replace('("onnx", "onnxruntime")',
                               '("onnx", "onnxruntime", "jinja2", "yaml", "jsonschema")')


def test_the_include_directories_need_no_extra(tmp_path: Path) -> None:
    """`pydla deviceapi include-dir` and the CPU-library command of applications.md printed a
    ModuleNotFoundError traceback for jinja2: printing a directory imported the code generator."""
    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    code = ("from pydla.cli import main; rc = main(['deviceapi', 'include-dir']); "
            "import pydla.umd.cpu_native as c; print(c.cflags()); "
            "assert not {'jinja2', 'yaml', 'jsonschema'} & set(sys.modules); sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", NO_CODEGEN + code], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    include, flags = result.stdout.splitlines()
    assert (Path(include) / "pydla" / "device_api.h").is_file()
    assert flags.split() == [f"-I{Path(include).parent.parent / 'umd' / 'include'}", f"-I{include}"]
    # and what needs the extra still says so in one line
    result = subprocess.run([sys.executable, "-c", NO_CODEGEN + "from pydla.cli import main; "
                             "sys.exit(main(['deviceapi', 'validate', 'x.yaml']))"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "pip install 'pydla[codegen]'" in result.stderr
