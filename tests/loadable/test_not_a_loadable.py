"""An ONNX model given to the runtime where a loadable goes is named as one, with what to do: compile
it, or open it with pydla.Session (not "not an ELF file ... magic b'\\x08\\x08...'")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import pydla
from pydla.loadable.container import Loadable

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "demo_model.onnx"


def test_runtime_load_of_an_onnx_model_says_what_to_do(tmp_path: Path) -> None:
    renamed = tmp_path / "weights.bin"  # known by its bytes, whatever it is called
    shutil.copy(MODEL, renamed)
    with pydla.createRuntime() as rt:
        for given, label, named in ((str(MODEL), str(MODEL), str(MODEL)),
                                    (MODEL.read_bytes(), "the data given", "MODEL.onnx"),
                                    (renamed, str(renamed), str(renamed))):
            with pytest.raises(pydla.DlaError) as e:
                rt.load(given)
            assert e.value.code == pydla.NvError.BadParameter
            message = e.value.message
            assert message.startswith(f"{label} is an ONNX model, not a loadable: ") and "ELF" not in message
            assert f"`pydla compile {named} -o {Path(named).with_suffix('.dla')}`" in message
            assert f"pydla.Session('{named}')" in message
        # What it says works: the model compiled, then loaded.
        from pydla.compiler.api import compile_model

        rt.load(compile_model(str(MODEL)).blob)
        assert rt.getNumInputTensors() == 1


def test_other_files_are_still_not_an_elf_file() -> None:
    with pytest.raises(pydla.DlaError, match=r"not an ELF file \(90 bytes, magic b'hell'\)") as e:
        Loadable(b"hello" * 18)
    assert e.value.code == pydla.NvError.BadValue
    # Bytes that start like a ModelProto's field 1 but go on as no model does.
    with pytest.raises(pydla.DlaError, match="not an ELF file"):
        Loadable(b"\x08\x08\x99" + bytes(100))
