"""CPU libraries: found through PYDLA_LIBRARY_PATH or the install directory, paths hardened, and
every failure a DlaError naming the library and the function."""

from __future__ import annotations

from pathlib import Path

import pytest

from pydla import DlaError, NvError
from pydla.umd.cpu import CpuLibraries

LIB = """
def double(args):
    args[1][...] = args[0] * 2

def lookup(name, out):
    if name == "double":
        out.num_args, out.callable = 2, double

def library_init(args):
    args.lookup_fn = lookup
"""


def test_the_bundled_library_is_found_in_the_install_directory() -> None:
    fn = CpuLibraries().lookup("umd/cpulib.py", "softmax")
    assert fn.num_args == 6 and callable(fn.callable)


def test_a_library_on_pydla_library_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "ops.py").write_text(LIB)
    monkeypatch.setenv("PYDLA_LIBRARY_PATH", str(tmp_path))
    libs = CpuLibraries()
    fn = libs.lookup("mine/ops.py", "double")
    import numpy as np

    a, b = np.arange(3.0), np.zeros(3)
    fn.callable([a, b])
    assert b.tolist() == [0.0, 2.0, 4.0]
    assert libs.load("mine/ops.py") is libs.load("mine/ops.py")  # loaded once
    with pytest.raises(DlaError, match="has no function 'triple'") as e:
        libs.lookup("mine/ops.py", "triple")
    assert "mine/ops.py" in str(e.value) and e.value.code == NvError.NotSupported


@pytest.mark.parametrize("path", ["/usr/lib/evil.py", "../evil.py", "ok/../../evil.py"])
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(DlaError, match="not allowed") as e:
        CpuLibraries().load(path)
    assert e.value.code == NvError.BadParameter


def test_unsafe_paths_when_allowed(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text(LIB)
    assert CpuLibraries(allow_unsafe_paths=True).lookup(str(tmp_path / "lib.py"), "double").num_args == 2


def test_missing_library_and_missing_entry_point(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYDLA_LIBRARY_PATH", str(tmp_path))
    with pytest.raises(DlaError, match="not found") as e:
        CpuLibraries().load("nope.py")
    assert e.value.code == NvError.FileNotFound
    (tmp_path / "bare.py").write_text("x = 1\n")
    with pytest.raises(DlaError, match="no library_init"):
        CpuLibraries().load("bare.py")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(DlaError, match="failed to load: RuntimeError: boom"):
        CpuLibraries().load("broken.py")
    (tmp_path / "lib.txt").write_text("x")
    with pytest.raises(DlaError, match=r"a shared library \(.so, .dylib, .dll\) or a Python module"):
        CpuLibraries().load("lib.txt")
