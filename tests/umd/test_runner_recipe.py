"""The runner on a standalone recipe JSON file naming external files (seed 000's runner API:
Runner(device, recipe), bind_input, bind_output, execute, wait): CPU runs (a C library built here
and a Python library) between NPU runs, sub-buffers, constants, one buffer at two argidx, weights
from a file; and every way such a recipe can be wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.loadable.taskbuilder import TaskBuilder
from pydla.umd.runner import Runner
from tests.umd.native import build_sample_library

SHAPE = (2, 4, 4)
BYTES = 2 * 4 * 4 * 4  # one fp32 cube

PY_LIB = """
import numpy as np

def double(args):
    src, dst = args
    dst.view(np.float32)[...] = src.view(np.float32) * 2

def lookup(name, out):
    if name == "double":
        out.num_args, out.callable = 2, double

def library_init(args):
    args.lookup_fn = lookup
"""


def kernel_elf() -> bytes:
    """ofm = relu(ifm + wts): one SDP operation, arguments at the run recipe's argidx 3, 4, 5."""
    tb = TaskBuilder()
    ifm, wts, ofm = tb.cube("ifm", SHAPE), tb.cube("wts", SHAPE), tb.cube("ofm", SHAPE)
    tb.sdp(ifm, ofm, ew=wts, ew_op="add", act="relu")
    return tb.build().control_code({"ifm": 3, "wts": 4, "ofm": 5})


def recipe() -> dict[str, Any]:
    """ifm -(C affine x*2+1)-> ifm_int[0:128] -(k1)-> ofm_int[128:256] -(k1)-> ifm_int[128:256]
    -(C affine x*0.5)-> ofm -(Python double, in place: ofm at argidx 0 and 1)-> ofm."""
    half = {"size": BYTES}
    return {
        "header": {"device": "full", "name": "standalone"},
        "resources": {
            "buffers": [
                {"name": "ifm", "type": "input"},
                {"name": "ofm", "type": "output"},
                {"name": "wts", "type": "weight", "file": "wts.bin"},
                {"name": "ifm_int", "type": "internal", "size": 2 * BYTES},
                {"name": "ofm_int", "type": "internal", "size": str(2 * BYTES)},
            ],
            "kernels": [{"name": "k1", "instance": "dla", "ctrlcode": "k1.elf"}],
            "cpus": [{"name": "affine", "library_path": "umd/libsample.so"},
                     {"name": "double", "library_path": "umd/pylib.py"}],
        },
        "execution": {"runs": [
            {"name": "affine", "where": "cpu",
             "arguments": [{"name": "ifm", "argidx": 0},
                           {"name": "ifm_int", **half, "offset": 0, "argidx": 1}],
             "constants": [{"value": "2.0", "type": "float", "argidx": 2},
                           {"value": "1", "type": "int", "argidx": 3}]},
            {"name": "k1", "arguments": [{"name": "ifm_int", **half, "offset": 0, "argidx": 3},
                                         {"name": "wts", "argidx": 4},
                                         {"name": "ofm_int", **half, "offset": BYTES, "argidx": 5}]},
            {"name": "k1", "arguments": [{"name": "ofm_int", **half, "offset": BYTES, "argidx": 3},
                                         {"name": "wts", "argidx": 4},
                                         {"name": "ifm_int", **half, "offset": BYTES, "argidx": 5}]},
            {"name": "affine", "where": "cpu",
             "arguments": [{"name": "ifm_int", **half, "offset": BYTES, "argidx": 0},
                           {"name": "ofm", "argidx": 1}],
             "constants": [{"value": 0.5, "type": "float", "argidx": 2},
                           {"value": 0, "type": "int", "argidx": 3}]},
            {"name": "double", "where": "cpu",
             "arguments": [{"name": "ofm", "argidx": 0}, {"name": "ofm", "argidx": 1}]},
        ]},
    }


def expected(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    a = x * 2 + 1
    b = np.maximum(a + w, 0)
    c = np.maximum(b + w, 0)
    return (c * 0.5) * 2


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("libs")
    (d / "umd").mkdir()
    build_sample_library(d / "umd")
    (d / "umd" / "pylib.py").write_text(PY_LIB)
    return d


@pytest.fixture
def recipe_dir(tmp_path: Path, libraries: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYDLA_LIBRARY_PATH", str(libraries))
    (tmp_path / "k1.elf").write_bytes(kernel_elf())
    w = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    (tmp_path / "wts.bin").write_bytes(w.tobytes())
    write(tmp_path, recipe())
    return tmp_path


def write(d: Path, doc: dict[str, Any]) -> Path:
    (d / "recipe.json").write_text(json.dumps(doc, indent=1))
    return d / "recipe.json"


def weights(d: Path) -> np.ndarray:
    return np.frombuffer((d / "wts.bin").read_bytes(), np.float32).reshape(SHAPE)


def test_the_seed_runner_api_on_a_standalone_recipe(recipe_dir: Path) -> None:
    with pydla.createRuntime() as rt:
        runner = Runner(rt, recipe_dir / "recipe.json")
        ifm, ofm = rt.allocateSystemMemory(BYTES), rt.allocateSystemMemory(BYTES)
        runner.bind_input("ifm", ifm)
        runner.bind_output("ofm", ofm)
        for seed in range(3):  # runs again without rebuilding anything
            x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
            ifm.array(np.float32, SHAPE)[...] = x
            runner.execute()
            runner.wait()
            np.testing.assert_allclose(ofm.array(np.float32, SHAPE), expected(x, weights(recipe_dir)),
                                       rtol=1e-6, atol=1e-6)
        runner.close()


def test_execute_and_wait_misuse_and_unbound_buffers(recipe_dir: Path) -> None:
    with pydla.createRuntime() as rt:
        runner = Runner(rt, recipe_dir / "recipe.json")
        with pytest.raises(DlaError, match="nothing to wait for") as e:
            runner.wait()
        assert e.value.code == NvError.InvalidState
        with pytest.raises(DlaError, match="input buffer 'ifm' is not bound") as e:
            runner.execute()
        assert e.value.code == NvError.InvalidState
        runner.bind_input("ifm", rt.allocateSystemMemory(BYTES))
        runner.bind_output("ofm", rt.allocateSystemMemory(BYTES))
        runner.execute()
        with pytest.raises(DlaError, match=r"wait\(\) before executing again"):
            runner.execute()
        runner.wait()
        with pytest.raises(DlaError, match="bind_input: output buffer 'ofm'; bind_input binds input, inout, "
                                           r"weight, spill, unknown buffers \(here: ifm, wts\)"):
            runner.bind_input("ofm", rt.allocateSystemMemory(BYTES))


def test_a_failing_cpu_function_surfaces_on_wait(recipe_dir: Path) -> None:
    with pydla.createRuntime() as rt:
        runner = Runner(rt, recipe_dir / "recipe.json")
        runner.bind_input("ifm", rt.allocateSystemMemory(2 * BYTES))  # larger than affine's output
        runner.bind_output("ofm", rt.allocateSystemMemory(BYTES))
        runner.execute()
        with pytest.raises(DlaError, match="dst is smaller than src") as e:
            runner.wait()
        assert e.value.code == NvError.InvalidSize
        # That execution is over: the runner executes again (and says so when nothing is pending).
        with pytest.raises(DlaError, match="nothing to wait for"):
            runner.wait()
        runner.bind_input("ifm", rt.allocateSystemMemory(BYTES))
        runner.execute()
        runner.wait()


def test_sub_buffers_are_bounds_checked(recipe_dir: Path) -> None:
    doc = recipe()
    doc["execution"]["runs"][1]["arguments"][2]["offset"] = 2 * BYTES - 4  # 128 bytes from 252 of 256
    write(recipe_dir, doc)
    with pydla.createRuntime() as rt:
        with pytest.raises(DlaError, match="exceeds buffer 'ofm_int'") as e:
            Runner(rt, recipe_dir / "recipe.json")
        assert e.value.code == NvError.BadValue
        doc = recipe()
        doc["execution"]["runs"][3]["arguments"][1].update(size=BYTES, offset=8)  # into ofm
        write(recipe_dir, doc)
        runner = Runner(rt, recipe_dir / "recipe.json")
        runner.bind_input("ifm", rt.allocateSystemMemory(BYTES))
        with pytest.raises(DlaError, match=r"argument 'ofm' \(argidx 1\) at offset 8, 128 bytes, is outside "
                                           "its buffer of 128 bytes") as e:
            runner.bind_output("ofm", rt.allocateSystemMemory(BYTES))
        assert e.value.code == NvError.InvalidSize


def test_npu_sub_buffer_limits_what_the_device_may_touch(recipe_dir: Path) -> None:
    """An NPU argument with a size is a sub-buffer: a kernel whose surface is larger is refused by the
    KMD before the device sees it."""
    doc = recipe()
    doc["execution"]["runs"][1]["arguments"][2]["size"] = BYTES // 2
    write(recipe_dir, doc)
    with pydla.createRuntime() as rt:
        runner = Runner(rt, recipe_dir / "recipe.json")
        runner.bind_input("ifm", rt.allocateSystemMemory(BYTES))
        runner.bind_output("ofm", rt.allocateSystemMemory(BYTES))
        runner.execute()
        with pytest.raises(DlaError, match="exceeds address-list entry") as e:
            runner.wait()
        assert e.value.code == NvError.InvalidSize


@pytest.mark.parametrize(("change", "code", "message"), [
    (lambda d: d["resources"]["kernels"][0].update(ctrlcode="../k1.elf"), NvError.BadParameter,
     r"'\.\./k1\.elf': absolute paths and '\.\.' are not allowed"),
    (lambda d: d["resources"]["kernels"][0].update(ctrlcode="/etc/k1.elf"), NvError.BadParameter,
     "absolute paths"),
    (lambda d: d["resources"]["kernels"][0].update(ctrlcode="missing.elf"), NvError.FileNotFound,
     "'missing.elf' not found"),
    (lambda d: d["resources"]["kernels"][0].update(ctrlcode="wts.bin"), NvError.BadValue, "ELF"),
    (lambda d: d["resources"]["buffers"][2].update(size=16), NvError.InvalidSize,
     "holds 128 bytes, more than its size 16"),
    (lambda d: d["execution"]["runs"][1].update(constants=[{"value": "3", "type": "string", "argidx": 0}]),
     NvError.NotSupported, "constant at argidx 0 is a string: the DLA engine's compute unit takes integer "
                           "scalar arguments only"),
    (lambda d: d["resources"]["cpus"][0].update(library_path="umd/nope.so"), NvError.FileNotFound,
     "not found"),
    (lambda d: d["execution"]["runs"][0]["constants"].pop(), NvError.CountMismatch,
     "3 arguments, the function takes 4"),
])
def test_recipes_that_are_wrong(recipe_dir: Path, change: Any, code: NvError, message: str) -> None:
    doc = recipe()
    change(doc)
    write(recipe_dir, doc)
    with pydla.createRuntime() as rt, pytest.raises(DlaError, match=message) as e:
        Runner(rt, recipe_dir / "recipe.json")
    assert e.value.code == code


def test_files_outside_the_recipe_directory_are_refused_even_through_links(recipe_dir: Path,
                                                                             tmp_path_factory: Any) -> None:
    """A symbolic link out of the directory, a FIFO (a read that would block), or a directory."""
    outside = tmp_path_factory.mktemp("outside") / "wts.bin"
    outside.write_bytes((recipe_dir / "wts.bin").read_bytes())
    (recipe_dir / "out.bin").symlink_to(outside)
    (recipe_dir / "inside.bin").symlink_to(recipe_dir / "wts.bin")  # inside: fine
    os.mkfifo(recipe_dir / "fifo.bin")
    (recipe_dir / "sub").mkdir()
    for name, message in (("out.bin", r"leads to .*outside the recipe's directory"),
                          ("fifo.bin", "not a regular file"), ("sub", "not a regular file"),
                          ("inside.bin", None)):
        doc = recipe()
        doc["resources"]["buffers"][2]["file"] = name
        write(recipe_dir, doc)
        with pydla.createRuntime() as rt:
            if message is None:
                Runner(rt, recipe_dir / "recipe.json").close()
                continue
            with pytest.raises(DlaError, match=message) as e:
                Runner(rt, recipe_dir / "recipe.json")
            assert e.value.code == NvError.BadParameter


def test_a_loadable_through_the_same_runner_api(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    from pydla.compiler.api import compile_model

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])])
    blob = compile_model(helper.make_model(graph)).blob
    (tmp_path / "relu.dla").write_bytes(blob)
    with pydla.createRuntime() as rt:
        runner = Runner(rt, tmp_path / "relu.dla")
        inputs = [b.name for b in runner.lo.recipe.buffers.values() if b.type == "input"]
        outputs = [b.name for b in runner.lo.recipe.buffers.values() if b.type == "output"]
        x_mem, y_mem = rt.allocateSystemMemory(BYTES), rt.allocateSystemMemory(BYTES)
        x = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
        x_mem.array(np.float32, SHAPE)[...] = x
        runner.bind_input(inputs[0], x_mem)
        runner.bind_output(outputs[0], y_mem)
        runner.execute()
        runner.wait()
        np.testing.assert_array_equal(y_mem.array(np.float32, SHAPE), np.maximum(x, 0))
        with pytest.raises(DlaError, match="needs 128 bytes") as e:
            runner.bind_input(inputs[0], rt.allocateSystemMemory(64))
        assert e.value.code == NvError.InvalidSize
