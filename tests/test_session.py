"""pydla.Session and `pydla run`: ONNX (compiled and cached) and loadables, numbers against
onnxruntime, threads, and errors that say what was expected."""

from __future__ import annotations

import threading
from collections.abc import Iterator
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
    import pydla.compile_cache as compile_cache

    monkeypatch.setattr(compile_cache, "compiler_fingerprint", lambda: "another compiler")
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
    with pytest.raises(DlaError, match=r"not an ONNX model or a loadable") as e:
        pydla.Session(b"neither")
    assert e.value.code == NvError.BadValue
    # One wording with `pydla compile`, `run`, `info` and `validate` (compiler.onnx_model.parse_model).
    truncated = r"not an ONNX model or a loadable, or a truncated one: it does not parse"
    for name, data, message in (
            ("model.bin", b"neither", truncated),
            ("empty.onnx", b"", r"the file is empty \(0 bytes\), not an ONNX model or a loadable"),
            ("empty.bin", b"", r"the file is empty \(0 bytes\), not an ONNX model or a loadable"),
            ("bad.onnx", b"\x08\x08\xff", truncated)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DlaError, match=rf"{name}: {message}") as e:
            pydla.Session(tmp_path / name)
        assert e.value.code == NvError.BadValue and str(tmp_path) in e.value.message
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
    assert main(["run", str(path), "--input", "=bad"]) == 1
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

    import pydla.compile_cache as compile_cache

    root = Path(compile_cache.__file__).parent
    hashed = {f.relative_to(root).as_posix() for f in compile_cache.fingerprinted_files()}
    for needed in ("compiler/api.py", "loadable/taskbuilder.py", "loadable/cpuops.py", "elf/writer.py",
                   "target/config.py", "target/configs/full.json", "deviceapi/task_layout.py",
                   "deviceapi/specs/dla_task.yaml"):
        assert needed in hashed, needed
    onnx_bytes = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 2, 2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 2, 2])]),
        opset_imports=[onnx.helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    config = tmp_path / "my.json"
    full = json.loads((root / "target" / "configs" / "full.json").read_text())
    config.write_text(json.dumps(full))
    compile_cache.OnnxModel(onnx_bytes).loadable(str(config), "fp32")
    full["tap_major_min_channels"] = 32  # the same name, other contents: another key
    config.write_text(json.dumps(full))
    compile_cache.OnnxModel(onnx_bytes).loadable(str(config), "fp32")
    assert len(list(cache.glob("*.dla"))) == 2


# -- models whose weights live in external data files -------------------------------------------


def matmul_model(w: np.ndarray) -> onnx.ModelProto:
    h = onnx.helper
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, w.shape[0]])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, w.shape[1]])],
                         [onnx.numpy_helper.from_array(w, "w")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


def save_external(w: np.ndarray, directory: Path, location: str = "weights.bin") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "m.onnx"
    onnx.save_model(matmul_model(w), str(path), save_as_external_data=True, location=location,
                    size_threshold=0)
    return path


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)  # type: ignore[no-any-return]


def test_external_data_is_read_next_to_the_model_from_any_cwd(tmp_path: Path, monkeypatch,
                                                              cache: Path) -> None:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    path = save_external(w, tmp_path / "model")
    assert (tmp_path / "model" / "weights.bin").stat().st_size == w.nbytes
    assert len(path.read_bytes()) < w.nbytes  # the weights really are outside the .onnx file
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    feeds = {"x": rng.standard_normal((1, 16)).astype(np.float32)}
    with pydla.Session(path) as sess:
        got = sess.run(feeds)["y"]
    np.testing.assert_allclose(got, ort_run(path, feeds)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, feeds["x"] @ w, rtol=1e-5, atol=1e-5)
    # New weights in the same file, the .onnx file unchanged: the new result, not the cached one.
    onnx_bytes = path.read_bytes()
    (tmp_path / "model" / "weights.bin").write_bytes((w * 4 + 1).tobytes())
    assert path.read_bytes() == onnx_bytes
    with pydla.Session(path) as sess:
        got = sess.run(feeds)["y"]
    np.testing.assert_allclose(got, ort_run(path, feeds)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, feeds["x"] @ (w * 4 + 1), rtol=1e-5, atol=1e-4)
    assert len(list(cache.glob("*.dla"))) == 2
    # The same model and weights in another directory: the same key (a cache hit).
    import shutil

    shutil.copytree(tmp_path / "model", tmp_path / "copy")
    with pydla.Session(tmp_path / "copy" / "m.onnx") as sess:
        np.testing.assert_array_equal(sess.run(feeds)["y"], got)
    assert len(list(cache.glob("*.dla"))) == 2
    # `pydla run` reads it the same way.
    assert main(["run", str(path)]) == 0


def test_external_data_that_is_missing_or_outside_the_model_directory_is_refused(tmp_path: Path) -> None:
    w = np.ones((4, 2), np.float32)
    path = save_external(w, tmp_path / "a")
    (tmp_path / "a" / "weights.bin").unlink()
    with pytest.raises(DlaError, match=r"m.onnx: tensor 'w' keeps its data in external file 'weights.bin': "
                                       r".*weights.bin: no such file") as e:
        pydla.Session(path)
    assert e.value.code == NvError.FileNotFound
    for location in ("../secret.bin", "sub/../../secret.bin", "/etc/passwd"):
        model = matmul_model(w)
        onnx.external_data_helper.convert_model_to_external_data(model, location="weights.bin",
                                                                 size_threshold=0)
        entry = next(e for e in model.graph.initializer[0].external_data if e.key == "location")
        entry.value = location
        (tmp_path / "secret.bin").write_bytes(w.tobytes())
        (tmp_path / "b").mkdir(exist_ok=True)
        (tmp_path / "b" / "m.onnx").write_bytes(model.SerializeToString())
        with pytest.raises(DlaError, match=rf"tensor 'w' keeps its data in external file '{location}': the "
                                           r"location must be a path inside the model's directory") as e:
            pydla.Session(tmp_path / "b" / "m.onnx")
        assert e.value.code == NvError.BadParameter
    # Weights shorter than the model says: refused, naming the file.
    path = save_external(w, tmp_path / "c")
    (tmp_path / "c" / "weights.bin").write_bytes(b"\0" * 8)
    with pytest.raises(DlaError, match=r"tensor 'w' in .*weights.bin: offset 0 \+ length 32 is outside the "
                                       r"file's 8 bytes") as e:
        pydla.Session(path)
    assert e.value.code == NvError.BadValue
    # A model in memory whose external data was not loaded: no directory to find it in.
    model = onnx.load(str(save_external(w, tmp_path / "d")), load_external_data=False)
    with pytest.raises(DlaError, match=r"keeps its data in external file 'weights.bin', which is not loaded: "
                                       r"give the model's path") as e:
        pydla.Session(model)
    assert e.value.code == NvError.BadParameter
    with pydla.Session(onnx.load(str(tmp_path / "d" / "m.onnx"))) as sess:  # loaded: fine
        assert sess.run({"x": np.ones((1, 4), np.float32)})["y"].tolist() == [[4.0, 4.0]]


def test_external_data_may_be_a_link_to_elsewhere(tmp_path: Path) -> None:
    """A model directory that links its weights from another place (as the Hugging Face cache lays
    out its snapshots) works: only the location written in the model must stay inside."""
    w = np.arange(8, dtype=np.float32).reshape(4, 2)
    save_external(w, tmp_path / "blobs")
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "m.onnx").write_bytes((tmp_path / "blobs" / "m.onnx").read_bytes())
    (tmp_path / "snapshot" / "weights.bin").symlink_to(tmp_path / "blobs" / "weights.bin")
    with pydla.Session(tmp_path / "snapshot" / "m.onnx") as sess:
        assert sess.run({"x": np.ones((1, 4), np.float32)})["y"].tolist() == [[12.0, 16.0]]


# -- onnxruntime's habits -------------------------------------------------------------------------


def test_session_speaks_onnxruntime(demo) -> None:
    import onnxruntime as ort

    ref = ort.InferenceSession(demo.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input": x(4)}
    with pydla.Session(demo) as sess:
        def described(args) -> list:
            return [(a.name, a.shape, a.type) for a in args]

        assert described(sess.get_inputs()) == described(ref.get_inputs()) == [
            ("input", [1, 3, 32, 32], "tensor(float)")]
        assert described(sess.get_outputs()) == described(ref.get_outputs()) == [
            ("probabilities", [1, 10], "tensor(float)")]
        assert sess.get_providers() == ["PydlaExecutionProvider"]
        expected = ref.run(None, feeds)
        for got in (sess.run(None, feeds), sess.run(["probabilities"], feeds), sess.run([], feeds),
                    sess.run(None, feeds, None)):
            assert isinstance(got, list) and len(got) == 1
            np.testing.assert_allclose(got[0], expected[0], atol=1e-5)
        as_dict = sess.run(feeds)  # pydla's own form stays a dict
        assert list(as_dict) == ["probabilities"]
        np.testing.assert_allclose(as_dict["probabilities"], expected[0], atol=1e-5)


def test_session_refuses_what_neither_form_accepts(demo) -> None:
    forms = r"the accepted forms: run\(\{name: array\}\) -> \{name: array\}; run\(None, \{name: array\}\)"
    with pydla.Session(demo) as sess:
        cases = [
            (lambda: sess.run([x()]), r"run\(\[array\(1, 3, 32, 32\)\]\): the inputs must be a dict "
                                      r"\{input name: array\}, not list; " + forms),
            (lambda: sess.run(None, [x()]), r"not list; " + forms),
            (lambda: sess.run(None, x()), r"not ndarray; " + forms),
            (lambda: sess.run(), r"run\(\): the inputs must be a dict"),
            (lambda: sess.run(["nope"], {"input": x()}),
             r"output_names: \['nope'\] are not outputs of the model \(its outputs: \['probabilities'\]\)"),
            (lambda: sess.run("probabilities", {"input": x()}),
             r"output_names 'probabilities': None or a list of output names"),
            (lambda: sess.run(None, {"input": x()}, "fast"), r"run_options 'fast': None or an onnxruntime"),
            (lambda: sess.run({0: x()}), r"unknown \[0\], missing \['input'\]"),
        ]
        for call, message in cases:
            with pytest.raises(DlaError, match=message) as e:
                call()
            assert e.value.code == NvError.BadParameter


def test_inference_session_takes_onnxruntimes_place(demo, tmp_path: Path) -> None:
    import onnxruntime as ort

    path = tmp_path / "m.onnx"
    onnx.save(demo, str(path))
    feeds = {"input": x(5)}
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    options = ort.SessionOptions()
    for sess in (pydla.InferenceSession(str(path)), pydla.InferenceSession(path.read_bytes(), options),
                 pydla.InferenceSession(str(path), providers=["CPUExecutionProvider"]),
                 pydla.InferenceSession(str(path), None, [("CPUExecutionProvider", {})], [{}],
                                        config="full")):
        with sess:
            assert isinstance(sess, pydla.Session) and sess.get_providers() == ["PydlaExecutionProvider"]
            name = sess.get_inputs()[0].name
            (got,) = sess.run(None, {name: feeds["input"]})
            np.testing.assert_allclose(got, expected[0], atol=1e-5)
            (got,) = sess.run(["probabilities"], feeds, ort.RunOptions())
            np.testing.assert_allclose(got, expected[0], atol=1e-5)
            with pytest.raises(DlaError, match=r"InferenceSession.run\(\{'input': array\(1, 3, 32, 32\)\}\): "
                                               r"onnxruntime's run takes the output names first: write "
                                               r"InferenceSession.run\(None, feeds\)"):
                sess.run(feeds)  # onnxruntime's run has no one-argument form
            sess.set_providers(["CPUExecutionProvider"])
    for kwargs, message in (
            ({"providerz": ["CPU"]}, r"unknown keyword argument\(s\) \['providerz'\]: pydla takes"),
            ({"providers": "CPUExecutionProvider"}, r"providers 'CPUExecutionProvider': None or a list"),
            ({"provider_options": {}}, r"provider_options \{\}: None or a list of dicts")):
        with pytest.raises(DlaError, match=message) as e:
            pydla.InferenceSession(str(path), **kwargs)
        assert e.value.code == NvError.BadParameter


def test_the_package_shows_its_signatures_and_documentation() -> None:
    import inspect

    from pydla.platform import createRuntime

    assert pydla.createRuntime is createRuntime
    assert list(inspect.signature(pydla.createRuntime).parameters) == ["port", "config", "device", "mode",
                                                                       "timeout_ms", "path"]
    for cls in (pydla.Session, pydla.InferenceSession):
        doc = inspect.getdoc(cls) or ""
        assert "Usage::" in doc and "Parameters:" in doc and "module docstring" not in doc
    assert list(inspect.signature(pydla.InferenceSession).parameters) == [
        "path_or_bytes", "sess_options", "providers", "provider_options", "kwargs"]
    assert "InferenceSession" in dir(pydla)


def test_session_reports_compile_progress_and_not_for_a_cache_hit(demo, tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(demo, str(path))
    calls: list[tuple[int, int, str]] = []
    with pydla.Session(path, progress=lambda done, total, what: calls.append((done, total, what))):
        pass
    phases = [what.split(":")[0] for _, _, what in calls]
    assert phases[0] == "checking" and calls[-1] == (1, 1, "done"), calls  # read by the session
    assert "lowering" in phases and "writing" in phases
    calls.clear()
    with pydla.Session(path, progress=lambda *a: calls.append(a)):  # from the cache: nothing to report
        pass
    assert calls == []


# -- symbolic input dimensions ------------------------------------------------------------------------


def _symbolic_model() -> onnx.ModelProto:
    """y = relu(x) * 2 + 1 on x of shape (batch, sequence, 4)."""
    h = onnx.helper
    graph = h.make_graph(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Mul", ["r", "two"], ["m"]),
         h.make_node("Add", ["m", "one"], ["y"])], "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "sequence", 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", "sequence", 4])],
        [onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"),
         onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_session_input_shapes_compile_each_shape_once(cache: Path) -> None:
    """Each shape is its own cache entry: the second session of a shape is a cache hit, and a
    model compiled for one shape never serves another."""
    m = _symbolic_model()
    for shape in [(1, 5, 4), (3, 2, 4), (1, 5, 4)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        with pydla.Session(m, input_shapes={"x": shape}) as sess:
            assert sess.inputs[0].shape == shape and sess.outputs[0].shape == shape
            np.testing.assert_allclose(sess.run({"x": x})["y"], np.maximum(x, 0) * 2 + 1, rtol=1e-6)
    assert len(list(cache.glob("*.dla"))) == 2


def test_session_without_input_shapes_compiles_for_the_shapes_it_runs(cache: Path) -> None:
    """Dynamic axes left without sizes: the session is made at once, nothing compiled; each run's
    shapes are compiled at the run (once: the next run of a shape reuses its network)."""
    with pydla.Session(_symbolic_model()) as sess:
        assert [(t.name, t.shape) for t in sess.inputs] == [("x", ("batch", "sequence", 4))]
        assert list(cache.glob("*.dla")) == []
        with pytest.raises(DlaError, match="loaded for the input shapes of its first run") as e:
            sess.runtime  # noqa: B018
        assert e.value.code == NvError.InvalidState
        for shape in [(1, 5, 4), (3, 2, 4), (1, 5, 4)]:
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(sess.run({"x": x})["y"], np.maximum(x, 0) * 2 + 1, rtol=1e-6)
            assert sess.runtime.getInputTensorDesc(0).dims == shape
        assert len(list(cache.glob("*.dla"))) == 2
        with pytest.raises(DlaError, match=r"input 'x': expected float32 of shape \[batch, sequence, 4\], "
                                           r"got shape \(1, 5, 3\): dimension 2 is fixed at 4") as e:
            sess.run({"x": np.ones((1, 5, 3), np.float32)})
        assert e.value.code == NvError.BadParameter
        assert len(list(cache.glob("*.dla"))) == 2  # refused before any compile


def test_input_shapes_of_a_loadable_must_be_its_own(tmp_path: Path) -> None:
    blob = compile_model(_symbolic_model(), input_shapes={"x": (2, 3, 4)}).blob
    with pydla.Session(blob, input_shapes={"x": (2, 3, 4)}) as sess:
        assert sess.inputs[0].shape == (2, 3, 4)
    with pytest.raises(DlaError) as e:
        pydla.Session(blob, input_shapes={"x": (1, 3, 4)})
    assert e.value.code == NvError.BadParameter
    assert "input_shapes['x'] = (1, 3, 4): the loadable's input 'x' has shape (2, 3, 4)" in e.value.message
    with pytest.raises(DlaError, match="the model has no input 'z'"):
        pydla.Session(blob, input_shapes={"z": (1,)})


def test_inference_session_takes_input_shapes() -> None:
    with pydla.InferenceSession(_symbolic_model(), providers=["CPUExecutionProvider"],
                                input_shapes={"x": (2, 2, 4)}) as sess:
        assert sess.get_inputs()[0].shape == [2, 2, 4]
        y, = sess.run(None, {"x": np.ones((2, 2, 4), np.float32)})
        np.testing.assert_allclose(y, 3.0)


# -- Ctrl-C ---------------------------------------------------------------------------------------


def _interrupt_the_device_once(monkeypatch) -> None:
    """Ctrl-C while a run is in flight: the first time the driver is polled for the device's
    progress (a wait drives a deterministic device) KeyboardInterrupt is raised, the job unfinished."""
    from pydla.kmd.job_sched import JobScheduler

    real = JobScheduler.poll_locked
    calls = []

    def poll(self, start: bool = True) -> None:
        calls.append(self)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(self, start=start)

    monkeypatch.setattr(JobScheduler, "poll_locked", poll)


def test_ctrl_c_in_a_session_block_cancels_the_run_at_once(demo, monkeypatch) -> None:
    """The close that waits up to timeout_ms for a run in flight is a normal close's; a block ended
    by KeyboardInterrupt cancels the run at once (it used to wait the whole timeout, 60 s)."""
    import time

    sess = pydla.Session(demo, timeout_ms=20_000)
    _interrupt_the_device_once(monkeypatch)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), sess:
        sess.run({"input": x()})
    assert time.monotonic() - t0 < 2
    assert sess._closed and sess._loaded == {}
    with pytest.raises(DlaError, match="the session is closed: create another to run the model") as e:
        sess.run({"input": x()})
    assert e.value.code == NvError.InvalidState


def test_ctrl_c_in_a_runtime_block_cancels_the_run_at_once(demo, monkeypatch) -> None:
    import time

    rt = pydla.createRuntime(timeout_ms=20_000)
    rt.load(compile_model(demo).blob)
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    rt.bindInputTensor(0, rt.allocateSystemMemory(d_in.size))
    rt.bindOutputTensor(0, rt.allocateSystemMemory(d_out.size))
    _interrupt_the_device_once(monkeypatch)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), rt:
        rt.submit()
    assert time.monotonic() - t0 < 2 and rt._closed


@pytest.fixture
def python_sigint_handler() -> Iterator[None]:
    """SIGINT handled by Python's own handler while the test runs: ``_thread.interrupt_main`` simulates
    the signal through it, and a test run started in the background (``pytest &`` in a script) has
    SIGINT ignored, where the simulated Ctrl-C would be dropped."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_close_waits_for_a_run_ends_the_wait(demo, python_sigint_handler: None) -> None:
    """A normal close waits for a run in flight; Ctrl-C during that wait cancels it at once."""
    import _thread
    import time

    with pydla.createRuntime(timeout_ms=20_000) as rt:
        rt.load(compile_model(demo).blob)
        d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
        rt.bindInputTensor(0, rt.allocateSystemMemory(d_in.size))
        rt.bindOutputTensor(0, rt.allocateSystemMemory(d_out.size))
        gate = rt.createSync()
        rt.submitNonBlocking(wait_for=[gate])  # in flight until the gate opens: it never does
        timer = threading.Timer(0.3, _thread.interrupt_main)
        t0 = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            rt.close()
        timer.join()
        assert time.monotonic() - t0 < 2 and rt._closed


def test_a_closed_session_says_it_is_closed(demo) -> None:
    """Not the memory handle underneath ("memory handle 8 was freed")."""
    sess = pydla.Session(demo)
    binding = sess.io_binding()
    binding.bind_cpu_input("input", x())
    binding.bind_output("probabilities")
    sess.close()
    sess.close()  # idempotent
    for call in (lambda: sess.run({"input": x()}), lambda: sess.run(None, {"input": x()}),
                 lambda: sess.run_with_iobinding(binding), sess.io_binding,
                 lambda: sess.create_ortvalue_from_shape_and_type([1, 3, 32, 32], np.float32, "pydla")):
        with pytest.raises(DlaError) as e:
            call()
        assert (e.value.code, e.value.message) == (
            NvError.InvalidState, "the session is closed: create another to run the model")
