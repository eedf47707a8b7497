"""`pydla info` and `pydla validate` on loadables, ONNX models and recipes: what each says, its exit
code, and the bytes --dump-section writes (against pyelftools' reading of the same section)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from pydla.cli import main
from pydla.loadable.container import FORMAT_VERSION
from tests.loadable.test_container import build_writer

FORMAT = ".".join(map(str, FORMAT_VERSION))

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dla(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "m.dla"
    path.write_bytes(build_writer().build())
    return path


@pytest.fixture(scope="module")
def broken_dla(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A loadable whose recipe misspells a buffer type: the loadable reader refuses it."""
    lw = build_writer()
    assert lw.recipe is not None
    lw.recipe["resources"]["buffers"][3]["type"] = "internl"
    path = tmp_path_factory.mktemp("cli") / "broken.dla"
    path.write_bytes(lw.build())
    return path


def elf_section(path: Path, name: str) -> bytes:
    with path.open("rb") as f:
        data: bytes = ELFFile(f).get_section_by_name(name).data()
    return data


def test_info_on_an_onnx_model_says_to_compile_it(tmp_path: Path, capsys) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes((ROOT / "examples" / "demo_model.onnx").read_bytes())
    for command in ("info", "validate"):
        assert main([command, str(model)]) == 1
        err = capsys.readouterr().err
        wanted = "a loadable" if command == "info" else "a run recipe or a loadable"
        assert err.startswith(f"pydla: error: {model} is an ONNX model, not {wanted}: compile it with "
                              f"`pydla compile {model} -o {tmp_path / 'model.dla'}`"), err
        assert err.count("\n") == 1 and "[BadParameter]" in err
        # no "--input-shape for each input with symbolic dimensions" for a model that has none
        assert "--input-shape" not in err
    # Recognized by its bytes too, whatever its name.
    renamed = tmp_path / "model.bin"
    renamed.write_bytes(model.read_bytes())
    assert main(["info", str(renamed)]) == 1
    assert "is an ONNX model, not a loadable" in capsys.readouterr().err


def test_info_on_json_and_on_other_files(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text('{"header": {}}')
    assert main(["info", str(recipe)]) == 1
    assert (f"{recipe} is JSON (a run recipe?), not a loadable: check a run recipe with "
            f"`pydla validate {recipe}`") in capsys.readouterr().err
    other = tmp_path / "notes.txt"
    other.write_text("hello, world, this is not an ELF file at all" * 2)
    assert main(["info", str(other)]) == 1
    assert "not an ELF file" in capsys.readouterr().err
    assert main(["info", str(tmp_path / "missing.dla")]) == 1
    assert "missing.dla: no such file" in capsys.readouterr().err


def test_info_lists_sections_by_name(dla: Path, capsys) -> None:
    assert main(["info", str(dla)]) == 0
    out = capsys.readouterr().out
    assert "sections (dump one with --dump-section NAME[:FILE]):" in out
    for short, elf_name in (("recipe", ".pydla.recipe"), ("ctrl.task0", ".pydla.ctrl.task0"),
                            ("weights", ".pydla.weights"), ("note", ".note.pydla")):
        line = next(x for x in out.splitlines() if x.split()[:1] == [short])
        assert line.split()[1] == elf_name and int(line.split()[2]) == len(elf_section(dla, elf_name))
    assert main(["info", str(dla), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["section_names"]["recipe"] == ".pydla.recipe"
    assert info["sections"][".pydla.weights"] == len(elf_section(dla, ".pydla.weights"))
    assert main(["info", str(dla), "--list-sections", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {"name": "ctrl.task0", "elf_name": ".pydla.ctrl.task0",
            "size": len(elf_section(dla, ".pydla.ctrl.task0"))} in listed


@pytest.mark.parametrize(("name", "elf_name"), [
    ("recipe", ".pydla.recipe"), ("ctrl.task0", ".pydla.ctrl.task0"), ("weights", ".pydla.weights"),
    ("tensors", ".pydla.tensors"), ("memory", ".pydla.memory"), ("note", ".note.pydla"),
    (".pydla.recipe", ".pydla.recipe"), (".shstrtab", ".shstrtab")])
def test_dump_section_to_a_file_is_the_sections_bytes(dla: Path, tmp_path: Path, name: str, elf_name: str,
                                                      capsys) -> None:
    out = tmp_path / "dumped.bin"
    assert main(["info", str(dla), "--dump-section", f"{name}:{out}"]) == 0
    expected = elf_section(dla, elf_name)
    assert out.read_bytes() == expected and expected
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"section {name} ({len(expected)} bytes) written to {out}" in captured.err


def test_dump_section_to_stdout_and_several_at_once(dla: Path, tmp_path: Path, capsysbinary) -> None:
    assert main(["info", str(dla), "--dump-section", "recipe:-"]) == 0
    assert capsysbinary.readouterr().out == elf_section(dla, ".pydla.recipe")
    assert main(["info", str(dla), "--dump-section", "ctrl.task0"]) == 0
    assert capsysbinary.readouterr().out == elf_section(dla, ".pydla.ctrl.task0")
    assert main(["info", str(dla), "--dump-section", f"recipe:{tmp_path / 'r.json'}",
                 "--dump-section", f"weights:{tmp_path / 'w.bin'}"]) == 0
    assert (tmp_path / "w.bin").read_bytes() == elf_section(dla, ".pydla.weights")
    assert (tmp_path / "r.json").read_bytes() == elf_section(dla, ".pydla.recipe")


def test_dump_section_refuses_an_unknown_name_listing_the_sections(dla: Path, tmp_path: Path, capsys) -> None:
    first = tmp_path / "first.json"
    assert main(["info", str(dla), "--dump-section", f"recipe:{first}", "--dump-section", "ctrl.task9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pydla: error: --dump-section 'ctrl.task9': {dla} has no such section; its "
                          "sections: note, recipe, tensors, memory, ctrl.task0, weights"), err
    assert not first.exists()  # every name is checked before anything is written
    assert main(["info", str(dla), "--dump-section", f"recipe:{tmp_path / 'no' / 'dir' / 'r.json'}"]) == 1
    assert "--dump-section recipe: cannot write" in capsys.readouterr().err


def test_dumped_recipe_validates_and_so_does_the_loadable(dla: Path, tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "recipe.json"
    assert main(["info", str(dla), "--dump-section", f"recipe:{recipe}"]) == 0
    capsys.readouterr()
    assert main(["validate", str(recipe)]) == 0
    summary = "valid (5 buffers, 1 kernels, 0 cpu functions, 1 runs in 1 runlists)"
    assert capsys.readouterr().out == f"{recipe}: {summary}\n"
    assert main(["validate", str(dla)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{dla} (.pydla.recipe): {summary}"
    assert out[1].startswith(f"{dla}: valid loadable (format {FORMAT}, device config 'full', 2 tensors, ")


def test_validate_a_loadable_with_a_bad_recipe_lists_its_problems(broken_dla: Path, tmp_path: Path,
                                                                  capsys) -> None:
    assert main(["validate", str(broken_dla)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{broken_dla} (.pydla.recipe): 1 problem(s)\n")
    assert "/resources/buffers/3/type" in out and "internl" in out
    assert main(["info", str(broken_dla)]) == 1  # the loadable reader refuses it...
    capsys.readouterr()
    recipe = tmp_path / "recipe.json"  # ...but its recipe can still be taken out, mended and checked
    assert main(["info", str(broken_dla), "--dump-section", f"recipe:{recipe}"]) == 0
    assert recipe.read_bytes() == elf_section(broken_dla, ".pydla.recipe")
    assert main(["validate", str(recipe)]) == 1
    assert "/resources/buffers/3/type" in capsys.readouterr().out


def test_validate_checks_a_loadables_kernel_instances_against_its_configuration(
        tmp_path: Path, capsys) -> None:
    import pydla.loadable.container as c

    w = build_writer()
    assert w.recipe is not None
    w.recipe["resources"]["kernels"][0]["instance"] = "nowhere"
    bad = tmp_path / "bad.dla"
    bad.write_bytes(w.build())
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "/resources/kernels/0/instance: 'nowhere' is no compute unit of device configuration 'full'" in out
    assert "dla (dla_engine:dla)" in out
    assert c.RECIPE in out
