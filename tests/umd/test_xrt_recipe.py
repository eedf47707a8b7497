"""XRT's documented run recipes through the runner, with the files they name made here: the control
code of kernel k1 (``no-ctrl-packet.elf``: relu(ifm + wts) on 512 bytes, arguments at argidx 3, 4,
5), the layout converters of ``umd/convert.dll`` (a C library, tests/umd/data/convert_cpulib.c) and
``design.xclbin`` (a device configuration); and the buffer rules XRT's runner follows: a buffer with
a size is created even when it is an input or an output, binding it is then optional; spill and
unknown buffers bind; an internal one never does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.cli import main
from pydla.loadable.taskbuilder import TaskBuilder
from pydla.umd.runner import Runner
from tests.loadable.test_recipe import DOC_COMPLETE, DOC_RECIPES, config_file
from tests.umd.native import build_sample_library

HALF = (8, 4, 4)  # 512 bytes of float32: what one k1 run reads and writes
PIXELS = 64  # ifm is 1024 bytes: float32 NCHW with C = 4, 8 x 8


def k1_elf() -> bytes:
    tb = TaskBuilder()
    ifm, wts, ofm = tb.cube("ifm", HALF), tb.cube("wts", HALF), tb.cube("ofm", HALF)
    tb.sdp(ifm, ofm, ew=wts, ew_op="add", act="relu")
    return tb.build().control_code({"ifm": 3, "wts": 4, "ofm": 5})


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("libs")
    (d / "umd").mkdir()
    build_sample_library(d / "umd", "convert.dll", Path(__file__).parent / "data" / "convert_cpulib.c")
    return d


def recipe_dir(d: Path, doc: dict[str, Any] | str, libraries: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYDLA_LIBRARY_PATH", str(libraries))
    (d / "no-ctrl-packet.elf").write_bytes(k1_elf())
    config_file(d / "design.xclbin")
    (d / "recipe.json").write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=1))
    return d / "recipe.json"


def design(recipe: Path) -> str:
    """The device the recipe's header names: its kernels run on its DPU compute unit."""
    return str(recipe.parent / "design.xclbin")


def pipeline(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What the documentation's execution does: convert_ifm, k1 on each half into the other half of
    ofm_int, convert_ofm."""
    x4c = x.reshape(4, PIXELS).T.ravel()
    first, second = np.maximum(x4c[:128] + w, 0), np.maximum(x4c[128:] + w, 0)
    ofm_int = np.concatenate([second, first])
    return ofm_int.reshape(PIXELS, 4).T.ravel()


def floats(rt: Any, values: np.ndarray) -> Any:
    mem = rt.allocateSystemMemory(values.nbytes)
    mem.array(np.float32, values.shape)[...] = values
    return mem


def test_the_documentation_pipeline_runs(tmp_path: Path, libraries: Path, monkeypatch, capsys) -> None:
    """Every resource snippet and the execution snippet: CPU runlist, NPU runlist of two k1 runs on
    sub-buffers, CPU runlist. average_pool (umd/operators.dll) is declared but no run calls it."""
    path = recipe_dir(tmp_path, DOC_RECIPES["pipeline"], libraries, monkeypatch)
    assert main(["validate", str(path)]) == 0
    assert "valid (8 buffers, 1 kernels, 3 cpu functions, 4 runs in 3 runlists)" in capsys.readouterr().out
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(4 * PIXELS).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    with pydla.createRuntime(config=design(path)) as rt:
        runner = Runner(rt, path)
        ifm, wts, ofm = floats(rt, x), floats(rt, w), rt.allocateSystemMemory(1024)
        runner.bind_input("ifm", ifm)
        runner.bind_input("wts", wts)
        runner.bind_output("ofm", ofm)
        runner.execute()
        runner.wait()
        np.testing.assert_array_equal(ofm.array(np.float32, (4 * PIXELS,)), pipeline(x, w))
        runner.close()


def test_a_sized_output_is_created_and_binding_it_is_optional(tmp_path: Path, libraries: Path,
                                                              monkeypatch) -> None:
    """The documentation's ``"ofm"`` with ``"size": 8196``: the runner creates it (read with
    Runner.memory); memory bound to it replaces it, and must hold the 8196 bytes."""
    path = recipe_dir(tmp_path, DOC_RECIPES["pipeline-sized-output"], libraries, monkeypatch)
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(4 * PIXELS).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    with pydla.createRuntime(config=design(path)) as rt:
        runner = Runner(rt, path)
        runner.bind_input("ifm", floats(rt, x))
        runner.bind_input("wts", floats(rt, w))
        runner.execute()
        runner.wait()
        created = runner.memory("ofm")
        assert created.size == 8196
        np.testing.assert_array_equal(created.bytes_view()[:1024].view(np.float32), pipeline(x, w))
        with pytest.raises(DlaError, match="'ofm' needs 8196 bytes, the memory bound to it has 1024") as e:
            runner.bind_output("ofm", rt.allocateSystemMemory(1024))
        assert e.value.code == NvError.InvalidSize
        mine = rt.allocateSystemMemory(8196)
        runner.bind_output("ofm", mine)
        assert runner.memory("ofm") is mine
        runner.execute()
        runner.wait()
        np.testing.assert_array_equal(mine.array(np.float32, (4 * PIXELS,)), pipeline(x, w))
        runner.unbind("ofm")  # back to the runner's own
        assert runner.memory("ofm") is created
        runner.close()


@pytest.mark.parametrize("name", ["complete", "dpu-constants"])
def test_npu_constants_are_scalar_arguments_of_the_engine_unit(tmp_path: Path, libraries: Path,
                                                                monkeypatch, name: str) -> None:
    """The DPU opcode constants (argidx 0, 1, 2, 6, 7) of XRT's documentation are scalar kernel
    arguments: they travel with the task to the driver, which puts them in the argument registers of
    the engine's compute unit (DPU here); the recipe validates and runs as written."""
    path = recipe_dir(tmp_path, DOC_RECIPES[name], libraries, monkeypatch)
    assert main(["validate", str(path)]) == 0
    with pydla.createRuntime(config=design(path)) as rt:
        runner = Runner(rt, path)
        k1 = next(step for step in runner.steps if step.run.name == "k1")
        assert k1.scalars == [(0, 3), (1, 0), (2, 0), (6, 0), (7, 0)]
        x, w = np.linspace(-2, 2, 128, dtype=np.float32), np.full(128, 0.5, np.float32)
        ofm = rt.allocateSystemMemory(512)
        runner.bind_input("ifm", floats(rt, x))
        runner.bind_input("wts", floats(rt, w))
        runner.bind_output("ofm", ofm)
        runner.execute()
        runner.wait()
        np.testing.assert_array_equal(ofm.array(np.float32, (128,)), np.maximum(x + w, 0))
        runner.close()


def test_a_non_integer_npu_constant_is_refused_by_name(tmp_path: Path, libraries: Path, monkeypatch) -> None:
    doc = json.loads(DOC_COMPLETE)
    doc["execution"]["runs"][0]["constants"][1] = {"value": "0.5", "type": "float", "argidx": 1}
    path = recipe_dir(tmp_path, doc, libraries, monkeypatch)
    with pydla.createRuntime(config=design(path)) as rt, pytest.raises(DlaError) as e:
        Runner(rt, path)
    assert e.value.code == NvError.NotSupported
    assert e.value.message == ("npu run 'k1': constant at argidx 1 is a float: the DLA engine's compute "
                               "unit takes integer scalar arguments only")


def vadd_recipe(n: int, *, argidx: tuple[int, int, int, int] = (0, 1, 2, 3)) -> dict[str, Any]:
    """One NPU run of kernel "add" on instance vadd (a compute unit, not the DLA engine): out = a + b
    over n floats; n a constant."""
    size = 4 * n
    return {"header": {"xclbin": "design.xclbin"},
            "resources": {"buffers": [{"name": "a", "type": "input", "size": size},
                                      {"name": "b", "type": "input", "size": size},
                                      {"name": "out", "type": "output", "size": size}],
                          "kernels": [{"name": "add", "instance": "vadd", "ctrlcode": "no-ctrl-packet.elf"}]},
            "execution": {"runs": [{"name": "add", "where": "npu",
                                    "arguments": [{"name": "a", "argidx": argidx[0]},
                                                  {"name": "b", "argidx": argidx[1]},
                                                  {"name": "out", "argidx": argidx[2]}],
                                    "constants": [{"value": n, "type": "int", "argidx": argidx[3]}]}]}}


def test_an_npu_run_on_a_compute_unit_starts_that_unit(tmp_path: Path, libraries: Path,
                                                        monkeypatch) -> None:
    """XRT's xrt::run on the kernel's instance: the vector add computes out = a + b; the kernel's
    control code (DLA code) is not what runs."""
    path = recipe_dir(tmp_path, vadd_recipe(100), libraries, monkeypatch)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(100).astype(np.float32), rng.standard_normal(100).astype(np.float32)
    with pydla.createRuntime(config=design(path)) as rt:
        runner = Runner(rt, path)
        runner.bind_input("a", floats(rt, a))
        runner.bind_input("b", floats(rt, b))
        out = rt.allocateSystemMemory(400)
        runner.bind_output("out", out)
        runner.execute()
        runner.wait()
        np.testing.assert_array_equal(out.array(np.float32, (100,)), a + b)
        out.array(np.float32, (100,))[...] = 0
        runner.run()  # the blocking path too
        np.testing.assert_array_equal(out.array(np.float32, (100,)), a + b)
        runner.close()


def test_an_npu_run_on_a_compute_unit_needs_argidx_without_gaps(tmp_path: Path, libraries: Path,
                                                                monkeypatch) -> None:
    path = recipe_dir(tmp_path, vadd_recipe(8, argidx=(0, 1, 2, 5)), libraries, monkeypatch)
    with pydla.createRuntime(config=design(path)) as rt, pytest.raises(DlaError) as e:
        Runner(rt, path)
    assert e.value.code == NvError.BadValue
    assert e.value.message == ("npu run 'add' on compute unit 'vadd:vadd': its arguments and constants have "
                               "argidx [0, 1, 2, 5]; a compute unit's arguments are 0..3, each once")


def test_an_npu_run_with_fewer_arguments_than_the_unit_declares_is_refused(tmp_path: Path, libraries: Path,
                                                                          monkeypatch) -> None:
    doc = vadd_recipe(8)
    doc["execution"]["runs"][0]["constants"] = []
    path = recipe_dir(tmp_path, doc, libraries, monkeypatch)
    with pydla.createRuntime(config=design(path)) as rt, pytest.raises(DlaError) as e:
        Runner(rt, path)
    assert e.value.code == NvError.CountMismatch
    assert e.value.message == ("npu run 'add' on compute unit 'vadd:vadd': 3 arguments, the unit takes 4 "
                               "(a, b, out, n)")


def test_the_header_device_must_be_the_runtimes(tmp_path: Path, libraries: Path, monkeypatch) -> None:
    """design.xclbin's engine unit is DPU:DPU: the bundled 'full' is another device, and the runner
    says so naming both; a header naming a file that is not there is refused naming it."""
    path = recipe_dir(tmp_path, vadd_recipe(8), libraries, monkeypatch)
    with pydla.createRuntime() as rt, pytest.raises(DlaError) as e:
        Runner(rt, path)
    assert e.value.code == NvError.NotSupported
    assert ("header.xclbin 'design.xclbin' is device configuration 'design', and the runtime runs on 'full' "
            "(another device)") in e.value.message
    with pydla.createRuntime(config="full-headed") as rt, pytest.raises(DlaError, match="another device"):
        Runner(rt, path)
    doc = vadd_recipe(8)
    doc["header"]["xclbin"] = "nonexistent.xclbin"
    (tmp_path / "recipe.json").write_text(json.dumps(doc))
    with pydla.createRuntime(config=design(path)) as rt, pytest.raises(DlaError) as e:
        Runner(rt, path)
    assert e.value.code == NvError.BadValue  # the recipe's problem, at its JSON path
    (where, message), = e.value.errors  # type: ignore[attr-defined]
    assert where == "/header/xclbin" and "'nonexistent.xclbin'" in message
    assert "nor is it a bundled configuration (full, full-headed, " in message


def test_a_header_naming_a_bundled_configuration_runs_on_it_and_its_headed_variant(
        tmp_path: Path, libraries: Path, monkeypatch) -> None:
    doc = vadd_recipe(4)
    doc["header"]["xclbin"] = "full"
    path = recipe_dir(tmp_path, doc, libraries, monkeypatch)
    for config in ("full", "full-headed"):
        with pydla.createRuntime(config=config) as rt:
            runner = Runner(rt, path)
            runner.bind_input("a", floats(rt, np.arange(4, dtype=np.float32)))
            runner.bind_input("b", floats(rt, np.full(4, 0.5, np.float32)))
            runner.run()
            np.testing.assert_array_equal(runner.memory("out").array(np.float32, (4,)), [0.5, 1.5, 2.5, 3.5])
            runner.close()
    with pydla.createRuntime(config="small") as rt, pytest.raises(DlaError, match="another device"):
        Runner(rt, path)


def buffers_recipe(*buffers: dict[str, Any],
                   args: tuple[str, str, str] = ("ifm", "wts", "ofm")) -> dict[str, Any]:
    return {"header": {"xclbin": "design.xclbin"},
            "resources": {"buffers": list(buffers),
                          "kernels": [{"name": "k1", "instance": "DPU", "ctrlcode": "no-ctrl-packet.elf"}]},
            "execution": {"runs": [{"name": "k1", "arguments": [
                {"name": n, "argidx": i} for n, i in zip(args, (3, 4, 5), strict=True)]}]}}


def test_buffer_types_as_xrt_describes_them(tmp_path: Path, libraries: Path, monkeypatch) -> None:
    """An input with a size and a file, created by the runner (no binding); a weight from a file; a
    spill buffer without a size bound with bind_output; an unknown one with a size, created."""
    w = np.full(128, 0.25, np.float32)
    x = np.linspace(-1, 1, 128, dtype=np.float32)
    (tmp_path / "ifm.bin").write_bytes(x.tobytes())
    (tmp_path / "wts.bin").write_bytes(w.tobytes())
    doc = buffers_recipe({"name": "ifm", "type": "input", "size": 512, "file": "ifm.bin"},
                         {"name": "wts", "type": "weight", "file": "wts.bin"},
                         {"name": "out", "type": "spill"}, {"name": "u", "type": "unknown", "size": 512},
                         args=("ifm", "wts", "out"))
    path = recipe_dir(tmp_path, doc, libraries, monkeypatch)
    with pydla.createRuntime(config=design(path)) as rt:
        runner = Runner(rt, path)
        with pytest.raises(DlaError, match=r"spill buffer 'out' is not bound \(it has no size in the recipe: "
                                           "bind_input memory to it\\)") as e:
            runner.execute()
        assert e.value.code == NvError.InvalidState
        out = rt.allocateSystemMemory(512)
        runner.bind_output("out", out)
        runner.execute()
        runner.wait()
        np.testing.assert_array_equal(out.array(np.float32, (128,)), np.maximum(x + w, 0))
        assert runner.memory("u").size == 512 and runner.memory("ifm").size == 512
        # an unknown buffer may take either side; so may spill
        runner.bind_input("u", rt.allocateSystemMemory(512))
        runner.bind_input("out", out)
        runner.close()


def test_internal_buffers_are_never_bound_and_need_a_size(tmp_path: Path, libraries: Path, monkeypatch,
                                                          capsys) -> None:
    doc = buffers_recipe({"name": "ifm", "type": "input"}, {"name": "wts", "type": "input"},
                         {"name": "ofm", "type": "internal", "size": 512})
    path = recipe_dir(tmp_path, doc, libraries, monkeypatch)
    with pydla.createRuntime(config=design(path)) as rt:
        runner = Runner(rt, path)
        with pytest.raises(DlaError, match=r"bind_output: internal buffer 'ofm' \(the runner's own, "
                                           r"never bound\); bind_output binds output, inout, spill, unknown "
                                           r"buffers \(here: none\)") as e:
            runner.bind_output("ofm", rt.allocateSystemMemory(512))
        assert e.value.code == NvError.BadParameter
        runner.close()
    del doc["resources"]["buffers"][2]["size"]
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().out == (
        f"{path}: 1 problem(s)\n  /resources/buffers/2: internal buffer 'ofm' needs a size: the runner "
        "creates internal buffers and nothing can bind one, so this recipe could never run\n")
    with pydla.createRuntime(config=design(path)) as rt, \
            pytest.raises(DlaError, match="/resources/buffers/2: internal"):
        Runner(rt, path)


def test_a_recipe_for_another_device_is_refused_naming_its_instance(tmp_path: Path, libraries: Path,
                                                                   monkeypatch) -> None:
    """The pipeline's k1 runs on instance DPU: with a header naming the bundled 'full', which has no unit
    of that name, the runner refuses it before making anything."""
    doc = json.loads(json.dumps(DOC_RECIPES["pipeline"]))
    doc["header"]["xclbin"] = "full"
    path = recipe_dir(tmp_path, doc, libraries, monkeypatch)
    with pydla.createRuntime() as rt, pytest.raises(DlaError) as e:
        Runner(rt, path)
    assert e.value.code == NvError.NotSupported
    words = "kernel 'k1' runs on instance 'DPU', which is no compute unit of device config 'full'"
    assert words in str(e.value)
    assert "dla_engine:dla" in str(e.value)
