"""onnxruntime code runs unchanged on pydla: the same calls on onnxruntime's InferenceSession and on
pydla's give the same results. Dynamic axes specialized per input shape at run time (cached,
bounded), get_modelmeta, IOBinding with device memory bound once (zero-copy), OrtValues,
end_profiling, run(..., outputs=), and the methods that have no meaning here say so."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper as h
from onnx import numpy_helper as nh

import pydla
from pydla import DlaError, NvError
from pydla.demo import build_demo_model


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def dynamic_cnn() -> onnx.ModelProto:
    """A CNN exported with dynamic batch and image size: x [N, 3, H, W] -> y [N, 4]."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
             nh.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), "fc")]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]), h.make_node("GlobalAveragePool", ["r"], ["g"]),
             h.make_node("Flatten", ["g"], ["f"]), h.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = h.make_graph(nodes, "dynamic-cnn", [h.make_tensor_value_info("x", 1, ["N", 3, "H", "W"])],
                         [h.make_tensor_value_info("y", 1, ["N", 4])], inits, doc_string="a graph")
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8,
                         producer_name="exporter", producer_version="2.1", domain="ai.example",
                         model_version=7, doc_string="a model")
    h.set_model_props(model, {"author": "me", "license": "MIT"})
    return model


def two_inputs() -> onnx.ModelProto:
    """y = a + b, z = relu(a) on [batch, 4]: two inputs sharing a symbolic dimension."""
    graph = h.make_graph([h.make_node("Add", ["a", "b"], ["y"]), h.make_node("Relu", ["a"], ["z"])], "two",
                         [h.make_tensor_value_info(n, 1, ["batch", 4]) for n in "ab"],
                         [h.make_tensor_value_info("y", 1, ["batch", 4]),
                          h.make_tensor_value_info("z", 1, None)])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def image(n: int, size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def both(model: onnx.ModelProto, **kwargs) -> tuple[ort.InferenceSession, pydla.InferenceSession]:
    blob = model.SerializeToString()
    ref = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    return ref, pydla.InferenceSession(blob, **kwargs)


def described(args) -> list:
    return [(a.name, a.shape, a.type) for a in args]


# -- dynamic axes ------------------------------------------------------------------------------------


def test_dynamic_axes_construct_and_specialize_per_shape_as_onnxruntime(cache: Path) -> None:
    ref, sess = both(dynamic_cnn())
    with sess:
        assert described(sess.get_inputs()) == described(ref.get_inputs()) == [
            ("x", ["N", 3, "H", "W"], "tensor(float)")]
        assert described(sess.get_outputs()) == described(ref.get_outputs()) == [
            ("y", ["N", 4], "tensor(float)")]
        assert sess.dynamic and list(cache.glob("*.dla")) == []  # nothing compiled at construction
        for n, size in [(1, 8), (2, 16), (1, 8), (3, 12), (2, 16)]:
            x = image(n, size, seed=n * size)
            (got,) = sess.run(None, {"x": x})
            (want,) = ref.run(None, {"x": x})
            assert got.shape == want.shape == (n, 4)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert len(list(cache.glob("*.dla"))) == 3  # one compile per shape
        assert len(sess._loaded) == 3


def test_the_loaded_shapes_are_bounded_least_recently_used_first(cache: Path) -> None:
    import pydla.compiler.api as api

    compiles = []
    real = api.compile_model

    def counting(*args, **kwargs):
        compiles.append(kwargs["input_shapes"]["x"])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "compile_model", counting)
        with pydla.Session(dynamic_cnn(), max_shapes=2) as sess:
            shapes = [(1, 3, 8, 8), (1, 3, 12, 12), (1, 3, 8, 8), (1, 3, 16, 16)]
            for shape in shapes:
                sess.run({"x": np.ones(shape, np.float32)})
            # 12x12 was the least recently used when 16x16 came: unloaded, 8x8 kept.
            assert [k[0] for k in sess._loaded] == [(1, 3, 8, 8), (1, 3, 16, 16)]
            sess.run({"x": np.ones((1, 3, 12, 12), np.float32)})  # loaded again, from the disk cache
            assert [k[0] for k in sess._loaded] == [(1, 3, 16, 16), (1, 3, 12, 12)]
    assert compiles == [(1, 3, 8, 8), (1, 3, 12, 12), (1, 3, 16, 16)]
    with pytest.raises(DlaError, match=r"max_shapes 0: 1 or more"):
        pydla.Session(dynamic_cnn(), max_shapes=0)


def test_dynamic_inputs_are_checked_as_onnxruntime_checks_them() -> None:
    ref, sess = both(two_inputs())
    a, b = np.ones((2, 4), np.float32), np.ones((2, 4), np.float32)
    with sess:
        assert described(sess.get_outputs()) == described(ref.get_outputs())  # z's shape inferred, as ort's
        expected = r"input 'b': expected float32 of shape \[batch, 4\]"
        cases = [
            ({"a": a, "b": np.ones((2, 5), np.float32)}, expected + r", got shape \(2, 5\): dimension 1 is "
                                                                    r"fixed at 4"),
            ({"a": a, "b": np.ones(4, np.float32)}, expected + r" \(rank 2\), got float32 of shape \(4,\)"),
            ({"a": a, "b": b.astype(np.float64)}, expected + r", got float64"),
            ({"a": a, "b": np.ones((3, 4), np.float32)}, r"inputs: dimension 'batch' is 2 in input 'a' and 3 "
                                                         r"in input 'b'")]
        for feeds, _ in cases[:3]:  # onnxruntime refuses these too
            with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own exception types)
                ref.run(None, feeds)
        for feeds, message in cases:
            with pytest.raises(DlaError, match=message) as e:
                sess.run(None, feeds)
            assert e.value.code == NvError.BadParameter
        y, z = sess.run(None, {"a": a - 3, "b": b})
        np.testing.assert_array_equal(y, a - 2)
        np.testing.assert_array_equal(z, np.zeros((2, 4), np.float32))


def test_input_shapes_may_fix_some_dimensions_and_leave_others_dynamic() -> None:
    with pydla.Session(two_inputs(), input_shapes={"a": (3, 4)}) as sess:
        assert [t.shape for t in sess.inputs] == [(3, 4), ("batch", 4)]
        y, = sess.run(["y"], {"a": np.ones((3, 4), np.float32), "b": np.ones((3, 4), np.float32)})
        np.testing.assert_array_equal(y, np.full((3, 4), 2, np.float32))
    with pytest.raises(DlaError, match=r"input_shapes\['a'\] = \(3, 5\): dimension 1 of input 'a' is fixed "
                                       r"at 4 in the model \(\[batch, 4\]\), not 5"):
        pydla.Session(two_inputs(), input_shapes={"a": (3, 5)})


# -- metadata, profiling, OrtValues, outputs= --------------------------------------------------------


@pytest.mark.parametrize("model", [dynamic_cnn(), build_demo_model()], ids=["dynamic", "demo"])
def test_get_modelmeta_is_onnxruntimes(model: onnx.ModelProto) -> None:
    ref, sess = both(model)
    with sess:
        got, want = sess.get_modelmeta(), ref.get_modelmeta()
        for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                      "custom_metadata_map"):
            assert getattr(got, field) == getattr(want, field), field
    assert pydla.Session(build_demo_model()).get_modelmeta().producer_name == "pydla demo"


def _described(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every metadata field onnxruntime's ModelMetadata reads set."""
    from onnx import helper

    model.producer_name, model.producer_version = "exporter", "2.1"
    model.domain, model.doc_string, model.model_version = "org.example", "a small CNN", 7
    model.graph.name, model.graph.doc_string = "cnn", "conv, bn, relu"
    helper.set_model_props(model, {"author": "me", "license": "MIT"})
    return model


@pytest.mark.parametrize("model", [_described(build_demo_model()), build_demo_model()],
                         ids=["every-field", "demo"])
def test_a_compiled_loadable_keeps_the_onnx_models_metadata(model: onnx.ModelProto, tmp_path: Path) -> None:
    """get_modelmeta() of the .dla is onnxruntime's of the .onnx (it was all empty: the compiler
    kept nothing)."""
    from pydla.compiler.api import compile_model
    from pydla.loadable.container import Loadable

    ref, _ = both(model)
    want = ref.get_modelmeta()
    blob = compile_model(model).blob
    with pydla.Session(blob) as sess:
        got = sess.get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                  "custom_metadata_map"):
        assert getattr(got, field) == getattr(want, field), field
    header = Loadable(blob).recipe.raw["header"]
    if model.producer_version:
        assert header["model"]["producer_version"] == "2.1" and header["name"] == "cnn"


def test_a_loadables_metadata_is_not_trusted() -> None:
    from pydla.model_info import UNVERSIONED, loadable_metadata

    meta = loadable_metadata({"model": {"producer_name": 3, "model_version": 2**70, "graph_name": "g",
                                        "metadata_props": {"a": "b", "c": 1}}, "name": "recipe"})
    assert meta == pydla.ModelMetadata(graph_name="g", version=UNVERSIONED, custom_metadata_map={"a": "b"})
    assert loadable_metadata({"name": "recipe", "description": "d"}) == pydla.ModelMetadata(
        graph_name="recipe", description="d")
    assert loadable_metadata({"model": [1]}) == pydla.ModelMetadata()


def test_end_profiling_returns_the_trace_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.json"
    with pydla.Session(dynamic_cnn(), trace=trace) as sess:
        start = sess.get_profiling_start_time_ns()
        assert start > 0
        for size in (8, 12):  # two networks, one timeline
            sess.run({"x": image(1, size)})
        assert sess.end_profiling() == str(trace)
        assert sess.end_profiling() == ""  # ended: as onnxruntime's second call
        sess.run({"x": image(1, 8)})  # still runs, untraced
    events = json.loads(trace.read_text())["traceEvents"]
    contexts = {e["args"]["context"] for e in events if e.get("cat") == "device" and e["ph"] == "X"}
    assert len(contexts) == 2, contexts  # each shape's network ran in its own device context
    assert all(e["ts"] * 1000 >= start for e in events if "ts" in e)
    with pydla.Session(dynamic_cnn()) as sess:
        assert sess.end_profiling() == "" and sess.get_profiling_start_time_ns() == 0
    # onnxruntime's SessionOptions.enable_profiling: a file named as onnxruntime names its profile.
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = "mine"
    ref = ort.InferenceSession(dynamic_cnn().SerializeToString(), options, providers=["CPUExecutionProvider"])
    with pydla.InferenceSession(dynamic_cnn().SerializeToString(), options) as sess:
        sess.run(None, {"x": image(1, 8)})
        ref.run(None, {"x": image(1, 8)})
        got, want = Path(sess.end_profiling()), Path(ref.end_profiling())
    assert want.name.startswith("mine_20") and got.name.startswith("mine_20") and got.suffix == ".json"
    assert len(got.name) == len(want.name) and got.is_file() and "traceEvents" in json.loads(got.read_text())


def test_run_with_ort_values_as_onnxruntime(tmp_path: Path) -> None:
    ref, sess = both(two_inputs())
    a = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    with sess:
        for kind in (ort.OrtValue, pydla.OrtValue):
            feeds = {"a": kind.ortvalue_from_numpy(a), "b": kind.ortvalue_from_numpy(np.ones_like(a))}
            got = sess.run_with_ort_values(["z", "y"], feeds)
            want = ref.run_with_ort_values(["z", "y"], {n: ort.OrtValue.ortvalue_from_numpy(v.numpy())
                                                        for n, v in feeds.items()})
            assert [type(v) for v in got] == [pydla.OrtValue] * 2
            for g, w in zip(got, want, strict=True):
                assert (g.shape(), g.data_type(), g.element_type(), g.device_name()) == (
                    w.shape(), w.data_type(), w.element_type(), w.device_name())
                np.testing.assert_array_equal(g.numpy(), w.numpy())
        with pytest.raises(DlaError, match=r"input 'a': an OrtValue is expected, not array\(2, 4\)"):
            sess.run_with_ort_values(None, {"a": a, "b": a})


def test_ortvalue_speaks_onnxruntime() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for kind in (ort.OrtValue, pydla.OrtValue):
        v = kind.ortvalue_from_numpy(a)
        assert np.shares_memory(v.numpy(), a) and v.data_ptr() == a.ctypes.data
        assert (v.device_name(), v.shape(), v.data_type(), v.element_type(), v.tensor_size_in_bytes()) == (
            "cpu", [2, 3], "tensor(float)", 1, 24)
        v.update_inplace(np.ones((2, 3), np.float32))
        np.testing.assert_array_equal(a, np.ones((2, 3)))
        a[...] = np.arange(6).reshape(2, 3)
        for shape, element_type, dtype in (([2, 2], np.int64, np.int64), ([3], 10, np.float16)):
            w = kind.ortvalue_from_shape_and_type(shape, element_type)
            assert w.numpy().dtype == dtype and w.shape() == shape
    with pytest.raises(DlaError, match=r"device_type 'cuda': a value made without a session is on the host"):
        pydla.OrtValue.ortvalue_from_numpy(a, "cuda", 0)
    with pytest.raises(DlaError, match=r"update_inplace: float32 of shape \(3, 3\) into a value of float32 "
                                       r"\(2, 3\)"):
        pydla.OrtValue.ortvalue_from_numpy(a).update_inplace(np.ones((3, 3), np.float32))


def test_run_writes_into_the_callers_arrays() -> None:
    a, b = np.ones((2, 4), np.float32), np.full((2, 4), 2, np.float32)
    with pydla.Session(two_inputs()) as sess:
        y, z = np.empty((2, 4), np.float32), np.empty((2, 4), np.float32)
        out = sess.run({"a": a, "b": b}, outputs={"y": y})
        assert out["y"] is y and out["z"] is not z
        np.testing.assert_array_equal(y, a + b)
        got = sess.run(["z", "y"], {"a": -a, "b": b}, outputs=[z, None])
        assert got[0] is z and got[1] is not y
        np.testing.assert_array_equal(z, np.zeros((2, 4)))
        with pydla.InferenceSession(two_inputs().SerializeToString()) as ort_form:
            (same,) = ort_form.run(["y"], {"a": a, "b": b}, outputs=[y])
            assert same is y
        for outputs, message in (
                ({"y": np.empty((2, 4), np.float64)}, r"outputs\['y'\]: expected float32 of shape \(2, 4\), "
                                                      r"got float64"),
                ({"w": y}, r"outputs: 'w' is not an output of the model \(its outputs: \['y', 'z'\]\)"),
                ([y], r"outputs \[array\(2, 4\)\]: a dict \{output name: array\} or a list of 2 arrays")):
            with pytest.raises(DlaError, match=message) as e:
                sess.run({"a": a, "b": b}, outputs=outputs)
            assert e.value.code == NvError.BadParameter
        read_only = np.empty((2, 4), np.float32)
        read_only.setflags(write=False)
        with pytest.raises(DlaError, match=r"outputs\['y'\]: a writable numpy array is expected"):
            sess.run({"a": a, "b": b}, outputs={"y": read_only})


# -- IOBinding ---------------------------------------------------------------------------------------


def test_iobinding_same_calls_same_results_as_onnxruntime() -> None:
    ref, sess = both(build_demo_model())
    x1, x2 = image(1, 32, 1), image(1, 32, 2)
    with sess:
        results = []
        for s in (ref, sess):
            binding = s.io_binding()
            binding.bind_cpu_input("input", x1)
            binding.bind_output("probabilities")
            s.run_with_iobinding(binding)
            first = binding.copy_outputs_to_cpu()[0]
            binding.bind_cpu_input("input", x2)
            s.run_with_iobinding(binding)
            outputs = binding.get_outputs()
            results.append((first, [(o.shape(), o.data_type()) for o in outputs], outputs[0].numpy().copy()))
            binding.clear_binding_outputs()
            with pytest.raises(Exception, match="output"):  # onnxruntime's RuntimeError, pydla's DlaError
                s.run_with_iobinding(binding)
        (ort_first, ort_desc, ort_second), (first, desc, second) = results
        np.testing.assert_allclose(first, ort_first, atol=1e-5)
        np.testing.assert_allclose(second, ort_second, atol=1e-5)
        assert desc == ort_desc


def test_iobinding_runs_in_device_memory_without_copies() -> None:
    """A bound input lives in device memory once: the runtime's binding is the value's own memory
    (no copy per run); an output's numpy() is a view of the buffer the device writes."""
    ref = ort.InferenceSession(build_demo_model().SerializeToString(), providers=["CPUExecutionProvider"])
    with pydla.InferenceSession(build_demo_model()) as sess:
        x = sess.create_ortvalue_from_shape_and_type((1, 3, 32, 32), np.float32, "pydla")
        assert x.device_name() == "pydla" and x.device_address is not None and not x.numpy().any()
        binding = sess.io_binding()
        binding.bind_input("input", "pydla", 0, np.float32, [1, 3, 32, 32], x.data_ptr())
        binding.bind_output("probabilities")
        for seed in (1, 2):
            x.numpy()[...] = image(1, 32, seed)  # written where the device reads it
            sess.run_with_iobinding(binding)
            (y,) = binding.get_outputs()
            np.testing.assert_allclose(y.numpy(), ref.run(None, {"input": image(1, 32, seed)})[0], atol=1e-5)
        rt = sess.runtime
        runner, in_desc, out_desc = rt.runner, rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
        assert runner.bound[in_desc.buffer] is x._mem
        assert runner.bound[out_desc.buffer] is y._mem and y.device_name() == "pydla"
        view = y.numpy()
        x.update_inplace(image(1, 32, 3))  # onnxruntime's way of writing a device value
        sess.run_with_iobinding(binding)
        np.testing.assert_allclose(view, ref.run(None, {"input": image(1, 32, 3)})[0], atol=1e-5)
        # Session.run still runs with its own memory after a binding's run, and back.
        np.testing.assert_allclose(sess.run(None, {"input": image(1, 32, 4)})[0],
                                   ref.run(None, {"input": image(1, 32, 4)})[0], atol=1e-5)
        sess.run_with_iobinding(binding)
        np.testing.assert_allclose(view, ref.run(None, {"input": image(1, 32, 3)})[0], atol=1e-5)
        # An output written into a device value of the application's, and one copied into a host value.
        y_dev = sess.create_ortvalue_from_shape_and_type((1, 10), np.float32)
        binding.bind_ortvalue_output("probabilities", y_dev)
        sess.run_with_iobinding(binding)
        assert runner.bound[out_desc.buffer] is y_dev._mem and binding.get_outputs()[0] is y_dev
        y_host = pydla.OrtValue.ortvalue_from_shape_and_type([1, 10], np.float32)
        binding.bind_ortvalue_output("probabilities", y_host)
        sess.run_with_iobinding(binding)
        np.testing.assert_array_equal(y_host.numpy(), y_dev.numpy())


def test_iobinding_of_a_dynamic_model_follows_the_bound_shapes() -> None:
    ref, sess = both(dynamic_cnn())
    with sess:
        binding = sess.io_binding()
        binding.bind_output("y")
        for n, size in ((2, 8), (1, 12), (2, 8)):
            x = image(n, size, seed=size)
            binding.bind_cpu_input("x", x)
            sess.run_with_iobinding(binding)
            (y,) = binding.copy_outputs_to_cpu()
            np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
            assert binding.get_outputs()[0].shape() == [n, 4]
        stale = binding.get_outputs()[0]
        binding.bind_cpu_input("x", image(1, 12))
        sess.run_with_iobinding(binding)  # other shapes: the binding's output memory is another
        with pytest.raises(DlaError, match="its device memory was freed") as e:
            stale.numpy()
        assert e.value.code == NvError.InvalidState


def test_iobinding_errors_are_one_line() -> None:
    with pydla.InferenceSession(build_demo_model()) as sess, pydla.Session(build_demo_model()) as other:
        binding, host = sess.io_binding(), image(1, 32)
        cases = [
            (lambda: binding.bind_cpu_input("image", image(1, 32)),
             r"IOBinding: 'image' is not an input of the model \(its inputs: input\)"),
            (lambda: binding.bind_cpu_input("input", image(1, 32).astype(np.float64)),
             r"bind_cpu_input\('input'\): expected float32, got float64"),
            (lambda: binding.bind_input("input", "pydla", 0, np.float32, [1, 3, 32, 32], host.ctypes.data),
             r"buffer_ptr \d+ is not the data_ptr\(\) of a device value of this session"),
            (lambda: binding.bind_output("probabilities", "cuda"),
             r"device_type 'cuda': pydla binds to its own"),
            (lambda: sess.run_with_iobinding(binding), r"input\(s\) \['input'\] are not bound"),
            (lambda: sess.run_with_iobinding(other.io_binding()), r"an IOBinding of this session"),
        ]
        for call, message in cases:
            with pytest.raises(DlaError, match=message):
                call()
        binding.bind_cpu_input("input", image(1, 32))
        with pytest.raises(DlaError, match=r"no output is bound"):
            sess.run_with_iobinding(binding)
        v = sess.create_ortvalue_from_shape_and_type([1, 3, 32, 32], np.float32, "pydla")
    with pytest.raises(DlaError, match="its session is closed") as e:
        v.numpy()
    assert e.value.code == NvError.InvalidState
    message = r"inputs \['a', 'b'\] have dynamic"
    with pydla.Session(two_inputs()) as sess, pytest.raises(DlaError, match=message):
        sess.create_ortvalue_from_shape_and_type([2, 4], np.float32, "pydla")


def test_device_values_dropped_free_their_memory() -> None:
    import gc

    with pydla.Session(build_demo_model()) as sess:
        loaded = sess._current
        free_calls = []
        real_free = loaded.runtime.freeSystemMemory
        loaded.runtime.freeSystemMemory = lambda mem: (free_calls.append(mem), real_free(mem))[1]
        for _ in range(3):
            sess.create_ortvalue_from_shape_and_type([1, 3, 32, 32], np.float32, "pydla")
            gc.collect()
            sess.run({"input": image(1, 32)})
        assert len(free_calls) == 3 and not loaded.pinned


# -- what onnxruntime has and pydla cannot mean --------------------------------------------------------


def test_every_onnxruntime_method_exists_and_says_why_when_it_means_nothing_here() -> None:
    ref, sess = both(build_demo_model())
    with sess:
        for cls, ours in ((ort.InferenceSession, sess), (ort.IOBinding, sess.io_binding()),
                          (ort.OrtValue, pydla.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32)))):
            missing = [n for n in dir(cls) if not n.startswith("_") and not hasattr(ours, n)]
            assert missing == [], (cls.__name__, missing)
        for name in ("get_tuning_results", "release_captured_graph", "run_with_ortvaluevector",
                     "get_input_memory_infos"):
            with pytest.raises(DlaError, match=rf"{name}: ") as e:
                getattr(sess, name)()
            assert e.value.code == NvError.NotSupported
        assert sess.get_overridable_initializers() == ref.get_overridable_initializers() == []
        assert sess.get_provider_options() == {"PydlaExecutionProvider": {}}
        sess.disable_fallback()
        sess.enable_fallback()
        assert isinstance(sess.get_session_options(), ort.SessionOptions)


def test_run_async_calls_back_as_onnxruntime() -> None:
    ref, sess = both(build_demo_model())
    x = image(1, 32)
    with sess:
        got: dict[str, object] = {}
        done = threading.Event()

        def callback(results, user_data, err) -> None:
            got.update(results=results, user_data=user_data, err=err)
            done.set()

        sess.run_async(None, {"input": x}, callback, "data")
        assert done.wait(60)
        assert got["user_data"] == "data" and got["err"] == ""
        np.testing.assert_allclose(got["results"][0], ref.run(None, {"input": x})[0], atol=1e-5)
        done.clear()
        sess.run_async(None, {"image": x}, callback, 7)
        assert done.wait(60)
        assert got["results"] is None and "unknown ['image']" in got["err"] and got["user_data"] == 7
