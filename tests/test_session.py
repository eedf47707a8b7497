"""pydla.Session and `pydla run`: ONNX (compiled and cached) and loadables, numbers against
onnxruntime, threads, and errors that say what was expected."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.cli import main
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model, reference


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def demo():
    return build_demo_model()


def x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)


def test_session_on_an_onnx_file_is_compiled_once_and_cached(demo, tmp_path: Path, cache: Path,
                                                              monkeypatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(demo, str(path))
    with pydla.Session(path) as sess:
        assert [(t.name, t.shape, t.dtype) for t in sess.inputs] == [("input", (1, 3, 32, 32), np.float32)]
        assert sess.outputs[0].name == "probabilities"
        out = sess.run({"input": x()})["probabilities"]
        np.testing.assert_allclose(out, reference(demo, {"input": x()})[0], atol=1e-5)
    assert len(list(cache.glob("*.dla"))) == 1

    import pydla.compiler.api as api

    compile_for_real = api.compile_model
    monkeypatch.setattr(api, "compile_model", lambda *a, **k: pytest.fail("compiled again"))
    with pydla.Session(path) as sess:  # from the cache
        np.testing.assert_allclose(sess.run({"input": x(1)})["probabilities"],
                                   reference(demo, {"input": x(1)})[0], atol=1e-5)
    monkeypatch.setattr(api, "compile_model", compile_for_real)
    # A changed compiler (its sources' fingerprint) never gets a loadable the old one made.
    import pydla.session as session_module

    monkeypatch.setattr(session_module, "compiler_fingerprint", lambda: "another compiler")
    with pydla.Session(path):
        pass
    assert len(list(cache.glob("*.dla"))) == 2


@pytest.mark.parametrize("kind", ["modelproto", "loadable-bytes", "loadable-path", "onnx-bytes"])
def test_session_takes_every_form_of_model(demo, kind: str, tmp_path: Path) -> None:
    blob = compile_model(demo).blob
    model = {"modelproto": demo, "loadable-bytes": blob, "onnx-bytes": demo.SerializeToString()}.get(kind)
    if kind == "loadable-path":
        model = tmp_path / "m.dla"
        model.write_bytes(blob)
    with pydla.Session(model) as sess:
        out = sess.run({"input": x(2)})["probabilities"]
    np.testing.assert_allclose(out, reference(demo, {"input": x(2)})[0], atol=1e-5)


def test_session_is_safe_from_several_threads(demo) -> None:
    with pydla.Session(demo) as sess:
        errors = []

        def work(seed: int) -> None:
            try:
                for i in range(5):
                    inp = x(seed * 10 + i)
                    got = sess.run({"input": inp})["probabilities"]
                    np.testing.assert_allclose(got, reference(demo, {"input": inp})[0], atol=1e-5)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors


def test_session_errors_say_what_was_expected(demo, tmp_path: Path) -> None:
    with pydla.Session(demo) as sess:
        with pytest.raises(DlaError, match=r"expected \['input'\]; unknown \['image'\], missing \['input'\]"):
            sess.run({"image": x()})
        with pytest.raises(DlaError, match=r"expected float32 of shape \(1, 3, 32, 32\), got float32"):
            sess.run({"input": x()[:, :, :16]})
        with pytest.raises(DlaError, match="got float64") as e:
            sess.run({"input": x().astype(np.float64)})
        assert e.value.code == NvError.BadParameter
    with pytest.raises(DlaError) as e:
        pydla.Session(tmp_path / "missing.onnx")
    assert e.value.code == NvError.FileNotFound
    with pytest.raises(DlaError, match="not a loadable and not an ONNX model"):
        pydla.Session(b"neither")
    with pytest.raises(DlaError, match="give a path"):
        pydla.Session(42)


def test_run_command(demo, tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(demo, str(path))
    np.save(tmp_path / "in.npy", x(3))
    out_dir = tmp_path / "out"
    assert main(["run", str(path), "--input", f"input={tmp_path / 'in.npy'}", "--output-dir", str(out_dir),
                 "--iterations", "3"]) == 0
    text = capsys.readouterr().out
    assert "output probabilities: float32 (1, 10)" in text and "latency over 3 run(s): median" in text
    np.testing.assert_allclose(np.load(out_dir / "probabilities.npy"), reference(demo, {"input": x(3)})[0],
                               atol=1e-5)
    assert main(["run", str(path)]) == 0
    assert "input input: random float32 (1, 3, 32, 32)" in capsys.readouterr().out
    assert main(["run", str(path), "--input", "bad"]) == 1
    assert "write NAME=FILE.npy" in capsys.readouterr().err
    assert main(["run", str(path), "--iterations", "0"]) == 1
    # A misspelled input name is an error, not a silently random input.
    assert main(["run", str(path), "--input", f"inptu={tmp_path / 'in.npy'}"]) == 1
    assert "the model has no input 'inptu' (its inputs: input)" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["run", str(path), "--output-dir", str(tmp_path / "file" / "sub")]) == 1
    assert "--output-dir" in capsys.readouterr().err  # refused before the run, not a traceback after it


def test_run_writes_every_output_inside_the_output_dir(tmp_path: Path, capsys) -> None:
    from pydla.run import output_file_name

    assert [output_file_name(n) for n in ("y", "resnet/fc:0", "../../etc/x", "..", "a b.c")] == [
        "y", "resnet_fc_0", "_.._etc_x", "_", "a_b.c"]
    h = onnx.helper
    names = ("../escape", "net/out:0")
    nodes = [h.make_node("Relu", ["x"], [names[0]]), h.make_node("Neg", ["x"], [names[1]])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", 1, [2])],
                         [h.make_tensor_value_info(n, 1, None) for n in names])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.onnx"), "--output-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["_escape.npy", "net_out_0.npy"]
    assert not (tmp_path / "escape.npy").exists()
    assert "written to" in capsys.readouterr().out


def test_random_inputs_of_every_loadable_type() -> None:
    from pydla.run import random_input

    rng = np.random.default_rng(0)
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        v = random_input(rng, (1000,), np.dtype(dtype))
        assert v.dtype == dtype and v.min() >= -100 and v.max() <= 100 and len(np.unique(v)) > 100
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        v = random_input(rng, (1000,), np.dtype(dtype))
        assert v.dtype == dtype and v.max() <= 200 and len(np.unique(v)) > 100
    b = random_input(rng, (1000,), np.dtype(np.bool_))
    assert b.dtype == np.bool_ and 400 < b.sum() < 600
    f = random_input(rng, (2, 3), np.dtype(np.float16))
    assert f.dtype == np.float16 and f.shape == (2, 3) and f.std() > 0.3


def test_the_compile_cache_key_covers_what_decides_a_loadable(tmp_path: Path, cache: Path) -> None:
    """The fingerprint hashes the compiler and the loadable side it writes with (task encoder, CPU
    operator tables, writers), the device configurations and the contracts; a configuration given
    as a file is keyed by its contents."""
    import json

    import pydla.session as session_module

    root = Path(session_module.__file__).parent
    hashed = {f.relative_to(root).as_posix() for f in session_module.fingerprinted_files()}
    for needed in ("compiler/api.py", "loadable/taskbuilder.py", "loadable/cpuops.py", "elf/writer.py",
                   "hw/config.py", "hw/configs/full.json", "deviceapi/task_layout.py",
                   "deviceapi/specs/dla_task.yaml"):
        assert needed in hashed, needed
    onnx_bytes = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 2, 2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 2, 2])]),
        opset_imports=[onnx.helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    config = tmp_path / "my.json"
    full = json.loads((root / "hw" / "configs" / "full.json").read_text())
    config.write_text(json.dumps(full))
    session_module._compile_cached(onnx_bytes, str(config), "fp32")
    full["tap_major_min_channels"] = 32  # the same name, other contents: another key
    config.write_text(json.dumps(full))
    session_module._compile_cached(onnx_bytes, str(config), "fp32")
    assert len(list(cache.glob("*.dla"))) == 2
