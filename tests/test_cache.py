"""``pydla cache``: where the cache is, what it holds (by kind, with exact counts and sizes), and
``pydla cache clear``, which removes pydla's files only and asks first (or takes --yes)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pydla
from pydla import cachedir
from pydla.cli import main

ROOT = Path(__file__).resolve().parent.parent
DIGEST = "0123456789abcdef" * 4


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fill(cache: Path) -> dict[str, int]:
    """A cache as pydla leaves it, plus files that are not pydla's; the bytes of each kind."""
    (cache / "blas").mkdir(parents=True)
    (cache / f"{DIGEST}.dla").write_bytes(b"\0" * 1000)
    (cache / f"{DIGEST[::-1]}.dla").write_bytes(b"\0" * 24)
    (cache / f"{DIGEST}.4242.tmp").write_bytes(b"\0" * 7)  # a compile's write cut short
    (cache / "blas" / "libscipy_openblas64_-ff651d7f.so").write_bytes(b"\0" * 300)
    (cache / "blas" / ".libscipy_openblas64_-ff651d7f.so.99.tmp").write_bytes(b"\0" * 5)
    (cache / "notes.txt").write_bytes(b"mine")  # not pydla's: a cache directory given by mistake
    (cache / "model.dla").write_bytes(b"\0" * 11)  # not named by a digest: not pydla's either
    (cache / "sub").mkdir()
    (cache / "sub" / f"{DIGEST}.dla").write_bytes(b"\0" * 13)
    return {cachedir.MODELS: 1024, cachedir.BLAS: 300, cachedir.UNFINISHED: 12, cachedir.OTHER: 4 + 11 + 13}


def test_the_cache_directory_and_what_chose_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert (cachedir.cache_dir(), cachedir.chosen_by()) == (tmp_path / "a", "$PYDLA_CACHE_DIR")
    monkeypatch.delenv("PYDLA_CACHE_DIR")
    assert (cachedir.cache_dir(), cachedir.chosen_by()) == (tmp_path / "x" / "pydla", "$XDG_CACHE_HOME")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cachedir.cache_dir() == tmp_path / "home" / ".cache" / "pydla"
    assert cachedir.chosen_by().startswith("the default")


def test_contents_by_kind(cache: Path) -> None:
    sizes = fill(cache)
    found = cachedir.contents()
    assert found.root == cache and found.exists
    assert [(k.name, len(k.files), k.size) for k in found.kinds] == [
        (cachedir.MODELS, 2, sizes[cachedir.MODELS]), (cachedir.BLAS, 1, sizes[cachedir.BLAS]),
        (cachedir.UNFINISHED, 2, sizes[cachedir.UNFINISHED])]
    assert sorted(p.name for p in found.other.files) == [f"{DIGEST}.dla", "model.dla", "notes.txt"]
    assert (found.files, found.size, found.other.size) == (5, 1336, sizes[cachedir.OTHER])


def test_show_says_where_what_and_how_big(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert f"pydla's cache: {cache} ($PYDLA_CACHE_DIR)" in out and "does not exist yet" in out
    fill(cache)
    assert main(["cache"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"pydla's cache: {cache} ($PYDLA_CACHE_DIR)"
    assert lines[1].split()[:5] == ["compiled", "models", "2", "files", "1.0"]  # 1024 bytes: 1.0 KiB
    assert lines[2].split()[:5] == ["BLAS", "copy", "1", "file", "300"]
    assert lines[4].split()[:5] == ["total", "5", "files", "1.3", "KiB"]
    assert "also 3 files (28 B) that are not pydla's" in lines[5]
    assert "pydla cache clear --yes" in lines[6]
    assert main(["cache", "show", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["path"] == str(cache) and doc["bytes"] == 1336 and doc["files"] == 5
    assert doc["kinds"][cachedir.MODELS] == {"files": 2, "bytes": 1024}
    assert doc["not_pydlas"] == {"files": 3, "bytes": 28}
    assert main(["cache", "--json", "show"]) == 0 and json.loads(capsys.readouterr().out) == doc


def test_clear_removes_pydlas_files_only(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill(cache)
    assert main(["cache", "clear", "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"removed 5 files (1.3 KiB) from {cache}" in out and "left 3 files (28 B)" in out
    left = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*"))
    assert left == ["model.dla", "notes.txt", "sub", f"sub/{DIGEST}.dla"]  # blas/ went once empty
    assert main(["cache", "clear", "--yes"]) == 0
    assert "nothing to remove" in capsys.readouterr().out


def test_clear_asks_first(cache: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    fill(cache)
    # No terminal to ask: refused in one line, nothing removed.
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["cache", "clear"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "add --yes" in err and "5 files (1.3 KiB)" in err
    assert len(cachedir.contents().kinds[0].files) == 2

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    assert main(["cache", "clear"]) == 1
    assert "remove 5 files (1.3 KiB)" in capsys.readouterr().out
    assert cachedir.contents().files == 5
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert main(["cache", "clear"]) == 0
    assert cachedir.contents().files == 0


def test_a_compiled_model_is_in_the_cache_and_compiled_again_once_cleared(
        cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = ROOT / "examples" / "demo_model.onnx"
    x = np.ones((1, 3, 32, 32), np.float32)
    with pydla.Session(model) as s:
        first = s.run({"input": x})["probabilities"]
    found = cachedir.contents()
    (entry,) = found.kinds[0].files
    assert found.kinds[0].size == entry.stat().st_size and entry.read_bytes()[:4] == b"\x7fELF"
    assert main(["cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kinds"][cachedir.MODELS]["files"] == 1
    assert main(["cache", "clear", "--yes"]) == 0
    assert not entry.exists()
    with pydla.Session(model) as s:
        np.testing.assert_array_equal(s.run({"input": x})["probabilities"], first)
    assert entry.is_file()  # compiled again, to the same key


def test_the_command_as_typed(tmp_path: Path) -> None:
    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "c")}
    fill(tmp_path / "c")
    result = subprocess.run([sys.executable, "-m", "pydla", "cache", "clear"], env=env, capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert result.returncode == 1 and "add --yes" in result.stderr
    result = subprocess.run([sys.executable, "-m", "pydla", "cache", "clear", "-y"], env=env,
                            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert result.returncode == 0 and "removed 5 files" in result.stdout, result.stderr
    help_text = subprocess.run([sys.executable, "-m", "pydla", "cache", "--help"], env=env,
                               capture_output=True, text=True, timeout=120).stdout
    for fragment in ("PYDLA_CACHE_DIR", "compiled models", "BLAS copy", "pydla cache clear --yes"):
        assert fragment in help_text, fragment
