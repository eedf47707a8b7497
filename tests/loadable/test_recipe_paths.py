"""A recipe's paths that no file name can hold (a NUL byte, a lone surrogate from a JSON escape) or
that hold control characters: a problem with its JSON path, or a DlaError naming the path as text,
never a ValueError from the operating system; `pydla validate` prints every problem on one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.loadable.recipe import RecipeError, load_recipe
from pydla.loadable.recipe_file import RecipeFile, resolve_file
from tests.loadable.test_recipe import seed_example

BAD_NAMES = [("fu\x00ll", "a NUL byte", "fu\\x00ll"),
             ("sub/\ud800.json", "a lone surrogate", "sub/\\ud800.json"),
             ("two\nlines.json", "the unprintable character \\n", "two\\nlines.json")]


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(doc))  # ensure_ascii: NUL and surrogates as \u escapes
    return path


@pytest.mark.parametrize("device,kind,shown", BAD_NAMES)
def test_validate_reports_a_device_path_no_file_can_have(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         device: str, kind: str, shown: str) -> None:
    doc = seed_example()
    doc["header"]["device"] = device
    path = _write(tmp_path, doc)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert out == (f"{path}: 1 problem(s)\n  /header/device: {device!r} holds a character that is not "
                   "printable: not a file name\n")
    assert out.isascii() and "\x00" not in out
    # the runner's reading (configuration not loaded) refuses it as a recipe problem too
    with pytest.raises(RecipeError):
        load_recipe(path, check_config=False)


@pytest.mark.parametrize("field", ["file", "ctrlcode", "library_path"])
def test_every_path_of_a_recipe_is_checked(tmp_path: Path, field: str) -> None:
    doc = seed_example()
    resources = doc["resources"]
    if field == "file":
        resources["buffers"][0]["file"] = "w\x00.bin"
        where = "/resources/buffers/0/file"
    elif field == "ctrlcode":
        resources["kernels"][0]["ctrlcode"] = "c\x1b[2J.elf"
        where = "/resources/kernels/0/ctrlcode"
    else:
        resources["cpus"][0]["library_path"] = "umd/\x00.so"
        where = "/resources/cpus/0/library_path"
    with pytest.raises(RecipeError) as e:
        load_recipe(_write(tmp_path, doc), check_config=False)
    assert [p for p, _ in e.value.errors] == [where]


@pytest.mark.parametrize("relative,kind,shown", BAD_NAMES)
def test_resolve_file_refuses_what_the_system_cannot_open(tmp_path: Path, relative: str, kind: str,
                                                         shown: str) -> None:
    recipe = tmp_path / "recipe.json"
    for unsafe in (False, True):
        with pytest.raises(DlaError) as e:
            resolve_file(recipe, relative, "buffer 'w' file", allow_unsafe_paths=unsafe)
        assert e.value.code == NvError.BadParameter
        assert e.value.message == f"{recipe}: buffer 'w' file '{shown}' holds {kind}: not a file name"


def test_a_recipe_file_at_a_path_with_a_nul_is_a_dla_error(tmp_path: Path) -> None:
    with pytest.raises(DlaError) as e:
        RecipeFile(str(tmp_path / "a\x00b.json"))
    assert e.value.code == NvError.BadParameter
    assert "\\x00" in e.value.message and "\x00" not in e.value.message


def test_validate_prints_every_problem_on_one_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = seed_example()
    doc["resources"]["buffers"][0]["name"] = "w\nts\x1b[31m"
    assert main(["validate", str(_write(tmp_path, doc))]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert all(line.isprintable() for line in lines)
    assert any("'w\\nts\\x1b[31m' is not a valid name" in line for line in lines)
