"""The mistakes a new user makes (the new-user trial of 2026-11-28), each answered before any work, in
one line that names the option, parameter or variable used and the value, and never by destroying
the user's file: outputs onto inputs, directories and missing files, files of another kind,
command-line values, bad timeouts and trace paths, freed memory, an unwritable cache."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.cli import main
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model

ROOT = Path(__file__).resolve().parents[1]
KERNEL_ELF = ROOT / "pydla" / "kernels" / "shipped" / "activation.elf"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A demo ONNX model, its loadable, a saved trace ring and a Chrome trace of a run."""
    d = tmp_path_factory.mktemp("mistakes")
    onnx.save(build_demo_model(), str(d / "demo.onnx"))
    (d / "demo.dla").write_bytes(compile_model(build_demo_model()).blob)
    assert main(["run", str(d / "demo.dla"), "--trace-ring", str(d / "ring.bin"),
                 "--trace", str(d / "trace.json")]) == 0
    np.save(d / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    return {p.stem if p.suffix != ".dla" else "dla": p for p in d.iterdir()}


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one line a failing command prints on stderr (nothing on stdout: no work was done)."""
    assert main(argv) == 1, argv
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("pydla: error: "), err
    assert "input input: random" not in out and "written" not in out, out
    return err.removeprefix("pydla: error: ").rstrip("\n")


def _copy(src: Path, tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copy(src, dst)
    return dst


# -- 1. an output is never one of the inputs -----------------------------------------------------------


def test_compile_refuses_to_write_over_the_model(files: dict[str, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    model = _copy(files["demo"], tmp_path, "m.onnx")
    before = model.read_bytes()
    assert _err(capsys, ["compile", str(model), "-o", str(model)]) == (
        f"-o {model}: that is the model being compiled; choose another file [BadParameter]")
    link = tmp_path / "link.onnx"  # another name for the same file
    link.symlink_to(model)
    assert "that is the model being compiled" in _err(capsys, ["compile", str(model), "-o", str(link)])
    assert model.read_bytes() == before


@pytest.mark.parametrize("flag", ["--trace", "--trace-ring"])
def test_run_refuses_to_write_a_trace_over_its_inputs(flag: str, files: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for model in (_copy(files["dla"], tmp_path, "victim.dla"), _copy(files["demo"], tmp_path, "v.onnx")):
        before = model.read_bytes()
        assert _err(capsys, ["run", str(model), flag, str(model)]) == (
            f"{flag} {model}: that is the model being run; choose another file [BadParameter]")
        assert model.read_bytes() == before
    x = _copy(files["x"], tmp_path, "x.npy")
    assert _err(capsys, ["run", str(files["dla"]), "--input", f"input={x}", flag, str(x)]) == (
        f"{flag} {x}: that is the file of --input input; choose another file [BadParameter]")
    assert np.load(x).shape == (1, 3, 32, 32)


def test_run_refuses_an_output_file_over_an_input(files: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--output-dir writes NAME.npy for each output: never over an --input file."""
    x = tmp_path / "probabilities.npy"
    np.save(x, np.ones((1, 3, 32, 32), np.float32))
    argv = ["run", str(files["dla"]), "--input", f"input={x}", "--output-dir", str(tmp_path)]
    assert _err(capsys, argv) == (
        f"--output-dir: output probabilities: {x}: that is the file of --input input; choose another file "
        "[BadParameter]")
    assert np.load(x).shape == (1, 3, 32, 32)


def test_kernel_build_refuses_to_write_over_its_source(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    source = _copy(ROOT / "examples" / "kernels" / "scale_add.c", tmp_path, "scale_add.c")
    before = source.read_bytes()
    try:
        assert _err(capsys, ["kernel", "build", str(source), "-o", str(source)]) == (
            f"-o {source}: that is the kernel's source; choose another file [BadParameter]")
    finally:
        assert source.read_bytes() == before, "the C source was overwritten with the ELF"


def test_run_refuses_one_file_for_both_traces(files: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    t = tmp_path / "t.json"
    assert _err(capsys, ["run", str(files["dla"]), "--trace", str(t), "--trace-ring", str(t)]) == (
        f"--trace-ring {t}: that is the --trace file; choose another file [BadParameter]")


def test_trace_refuses_to_write_over_the_ring(files: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    ring = _copy(files["ring"], tmp_path, "r.bin")
    before = ring.read_bytes()
    assert _err(capsys, ["trace", str(ring), "--format", "chrome", "-o", str(ring)]) == (
        f"-o {ring}: that is the ring being read; choose another file [BadParameter]")
    assert ring.read_bytes() == before


def test_session_refuses_a_trace_over_the_model_or_where_it_cannot_write(files: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    model = _copy(files["dla"], tmp_path, "m.dla")
    with pytest.raises(DlaError) as e:
        pydla.Session(model, trace=model)
    assert (e.value.code, e.value.message) == (
        NvError.BadParameter, f"Session: trace {model}: that is the model; choose another file")
    # 9: checked when the session is made, not when it closes after every run
    with pytest.raises(DlaError) as e:
        pydla.Session(model, trace="/nonexistent/t.json")
    assert (e.value.code, e.value.message) == (
        NvError.FileWriteFailed,
        "Session: trace /nonexistent/t.json: the directory /nonexistent does not exist")


# -- 6. a missing file, a directory: one wording, reading and writing ----------------------------------------


def test_a_directory_is_said_to_be_one(files: dict[str, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["compile"], ["run"], ["info"], ["validate"], ["trace"]):
        assert _err(capsys, [*command, str(tmp_path)]) == (
            f"{tmp_path}: a directory, not a file [FileReadFailed]"), command
    with pytest.raises(DlaError, match=f"^{tmp_path}: a directory, not a file "), pydla.createRuntime() as rt:
        rt.load(tmp_path)


def test_the_runtime_words_a_missing_or_empty_file_as_the_commands_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pydla.createRuntime() as rt:
        with pytest.raises(DlaError) as e:
            rt.load(str(tmp_path / "nope.dla"))
        assert (e.value.code, e.value.message) == (NvError.FileNotFound,
                                                   f"{tmp_path / 'nope.dla'}: no such file")
        empty = tmp_path / "empty.dla"
        empty.write_bytes(b"")
        with pytest.raises(DlaError) as e:
            rt.load(empty)
        assert (e.value.code, e.value.message) == (
            NvError.BadValue, f"{empty}: the file is empty (0 bytes), not a loadable")
    assert _err(capsys, ["trace", str(tmp_path / "out.json")]) == (
        f"{tmp_path / 'out.json'}: no such file [FileNotFound]")


def test_an_output_in_a_missing_directory_is_said_before_the_work(files: dict[str, Path], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "model.dla"
    assert _err(capsys, ["compile", str(files["demo"]), "-o", str(out)]) == (
        f"-o {out}: the directory {out.parent} does not exist [FileWriteFailed]")
    assert _err(capsys, ["trace", str(files["ring"]), "-o", str(out)]) == (
        f"-o {out}: the directory {out.parent} does not exist [FileWriteFailed]")


# -- 12. a file of another kind says what it is -----------------------------------------------------------


def test_a_shave_kernel_given_as_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kernel = _copy(KERNEL_ELF, tmp_path, "scale_add.elf")
    said = (f"{kernel} is a SHAVE kernel ELF, not a loadable: run it on arrays with "
            f"pydla.ShaveKernel('{kernel}'), or from a model as a custom operator")
    assert _err(capsys, ["run", str(kernel)]).startswith(said)
    with pytest.raises(DlaError) as e:
        pydla.Session(kernel)
    assert e.value.code == NvError.BadParameter and e.value.message.startswith(said)


@pytest.mark.parametrize("command,given,said", [
    (["trace"], "dla", "is a pydla loadable, not a trace ring (saved by `pydla run MODEL --trace-ring "
                       "RING`): run it with `pydla run"),
    (["trace"], "trace", "is a Perfetto / Chrome trace (JSON), not a trace ring"),
    (["deviceapi", "trace"], "dla", "is a pydla loadable, not a trace ring"),
    (["validate"], "x", "is a .npy array, not a run recipe or a loadable: it is a tensor: give it to a model "
                        "with `pydla run MODEL --input NAME="),
    (["info"], "x", "is a .npy array, not a loadable"),
    (["info"], "trace", "is a Perfetto / Chrome trace (JSON), not a loadable: open it at https://ui.perfetto.dev"),
    (["validate"], "trace", "is a Perfetto / Chrome trace (JSON), not a run recipe or a loadable"),
    (["info"], "ring", "is a device trace ring, not a loadable: show it with `pydla trace"),
])
def test_a_file_of_another_kind_is_named(command: list[str], given: str, said: str, files: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    err = _err(capsys, [*command, str(files[given])])
    assert err.startswith(f"{files[given]} {said}") and err.endswith("[BadParameter]"), err


def test_a_malformed_ring_names_its_file(files: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "cut.bin"
    cut.write_bytes(files["ring"].read_bytes()[:100])
    assert _err(capsys, ["trace", str(cut)]).startswith(f"{cut}: trace ring: capacity ")


# -- 7, 15, 2: the command line's own values --------------------------------------------------------------


@pytest.mark.parametrize("argv,said", [
    (["compile", "m.onnx", "--precision", "FP16"], "--precision 'FP16': choose from fp32, fp16"),
    (["run", "m.dla", "--seed", "abc"], "--seed 'abc': not an integer"),
    (["run", "m.dla", "--iterations", "1.5"], "--iterations '1.5': not an integer"),
    (["kmd", "--mount", "/tmp/x", "--mode", "fast"], "--mode 'fast': choose from threaded, deterministic"),
    (["runn", "m.dla"], "'runn' is not a pydla command: choose from demo, run,"),
    (["run", "m.dla", "--nope"], "unrecognized arguments: --nope (pydla run --help shows the usage)"),
    (["run"], "the following arguments are required: MODEL.dla|MODEL.onnx (pydla run --help shows the "
              "usage)"),
])
def test_a_bad_option_value_is_one_line_and_exit_1(argv: list[str], said: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """It printed the command's whole usage and exited 2."""
    err = _err(capsys, argv)
    assert err.startswith(said) and err.endswith(" [BadParameter]"), err


@pytest.mark.parametrize("command", [["run", "MODEL"], ["demo"]])
def test_a_negative_seed_is_refused(command: list[str], files: dict[str, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """It was numpy's ValueError, as a traceback."""
    argv = [str(files["dla"]) if a == "MODEL" else a for a in command]
    assert _err(capsys, [*argv, "--seed", "-1"]) == "--seed -1: 0 or more [BadParameter]"


def test_run_quotes_the_input_shape_flag_it_was_given(files: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """It quoted the Python parameter: input_shapes['input'] = (2, 3, 32, 32)."""
    assert _err(capsys, ["run", str(files["demo"]), "--input-shape", "input=2,3,32,32"]) == (
        "--input-shape input=2,3,32,32: dimension 0 of input 'input' is fixed at 1 in the model "
        "([1, 3, 32, 32]), not 2 [BadParameter]")
    assert _err(capsys, ["run", str(files["dla"]), "--input-shape", "input=1,3,16,16"]).startswith(
        "--input-shape input=1,3,16,16: the loadable's input 'input' has shape (1, 3, 32, 32), fixed when it "
        "was compiled")
    assert _err(capsys, ["run", str(files["dla"]), "--input-shape", "x=1,3,16,16"]).startswith(
        "--input-shape x: the model has no input 'x'")


# -- 8, 2: timeouts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout,said", [
    (0, "Session: timeout_ms 0: 1..3600000 (milliseconds)"),
    (-5, "Session: timeout_ms -5: 1..3600000 (milliseconds)"),
    (0.5, "Session: timeout_ms 0.5 is not an integer (milliseconds)"),
    ("100", "Session: timeout_ms '100' is not an integer (milliseconds)"),
    (True, "Session: timeout_ms True is not an integer (milliseconds)"),
])
def test_a_bad_session_timeout_is_refused_when_the_session_is_made(timeout: object, said: str,
                                                                   files: dict[str, Path]) -> None:
    """It constructed, and the first run failed naming an internal function (NvDlaSubmitPrepared)."""
    with pytest.raises(DlaError) as e:
        pydla.Session(files["dla"], timeout_ms=timeout)  # type: ignore[arg-type]
    assert (e.value.code, e.value.message) == (NvError.BadParameter, said)


def test_isync_wait_refuses_a_timeout_that_is_not_an_integer() -> None:
    """It was a TypeError from comparing a str with 0."""
    with pydla.createRuntime() as rt:
        sync = rt.createSync()
        for timeout, said in (("10", "ISync.wait: timeout '10' is not an integer (milliseconds)"),
                              (None, "ISync.wait: timeout None is not an integer (milliseconds)"),
                              (-1, "ISync.wait: timeout -1: 0..2147483647 (milliseconds)")):
            with pytest.raises(DlaError) as e:
                sync.wait(timeout)  # type: ignore[arg-type]
            assert (e.value.code, e.value.message) == (NvError.BadParameter, said)
        sync.signal()
        sync.wait(np.int64(0))  # a numpy integer is an integer


def test_create_runtime_refuses_a_bad_timeout() -> None:
    with pytest.raises(DlaError) as e:
        pydla.createRuntime(timeout_ms=-5)
    assert e.value.message == "createRuntime: timeout_ms -5: 1..3600000 (milliseconds)"


# -- 11: memory ---------------------------------------------------------------------------------------------


def test_freed_memory_bound_to_a_tensor_is_named_before_the_run(files: dict[str, Path]) -> None:
    """It was 'NvDlaPrepareTask address 6: memory handle is not one of this session's'."""
    with pydla.createRuntime() as rt:
        rt.load(files["dla"])
        m_in = rt.allocateSystemMemory(rt.getInputTensorDesc(0).size)
        rt.bindInputTensor(0, m_in)
        rt.bindOutputTensor(0, rt.allocateSystemMemory(rt.getOutputTensorDesc(0).size))
        rt.freeSystemMemory(m_in)
        for submit in (rt.submit, rt.submitNonBlocking):
            with pytest.raises(DlaError) as e:
                submit()
            assert (e.value.code, e.value.message) == (
                NvError.InvalidState,
                "input tensor 0 ('input') is bound to memory that was freed: bind it again")
        with pytest.raises(DlaError, match=r"^input tensor 0 \('input'\): the memory is not this runtime's, "
                                           "or was freed"):
            rt.bindInputTensor(0, m_in)
        rt.bindInputTensor(0, rt.allocateSystemMemory(rt.getInputTensorDesc(0).size))  # bound again: it runs
        rt.submit()


def test_an_array_view_too_large_for_its_memory_says_shape_dtype_and_bytes() -> None:
    with pydla.createRuntime() as rt:
        mem = rt.allocateSystemMemory(12288)
        with pytest.raises(DlaError) as e:
            mem.array(np.float32, (1, 3, 64, 64))
        assert (e.value.code, e.value.message) == (
            NvError.InvalidSize,
            "array: (1, 3, 64, 64) float32 = 49152 bytes does not fit the 12288-byte buffer")
        assert mem.array(np.float32, (1, 3, 32, 32)).nbytes == 12288


def test_freeing_memory_twice_says_it_was_freed() -> None:
    with pydla.createRuntime() as rt:
        mem = rt.allocateSystemMemory(64)
        rt.freeSystemMemory(mem)
        with pytest.raises(DlaError) as e:
            rt.freeSystemMemory(mem)
        assert e.value.message == "NvDlaFreeMem: the memory was already freed (NvDlaFreeMem)"


# -- 13, 14: the environment ---------------------------------------------------------------------------------


def test_a_bad_pydla_port_names_the_variable(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PYDLA_PORT", "bogus")
    assert _err(capsys, ["run", str(files["dla"])]).startswith("$PYDLA_PORT 'bogus': available: inprocess")
    monkeypatch.delenv("PYDLA_PORT")
    assert _err(capsys, ["run", str(files["dla"]), "--port", "bogus"]).startswith("--port 'bogus': available")


def test_an_unwritable_cache_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """It recompiled at every open, silently."""
    from pydla import compile_cache

    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("a file")
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(not_a_dir))
    monkeypatch.setattr(compile_cache, "_warned", set())
    model = build_demo_model()
    with caplog.at_level(logging.WARNING, logger="pydla"):
        for _ in range(2):
            pydla.Session(model).close()
    said = [r.getMessage() for r in caplog.records if "compile cache" in r.getMessage()]
    assert said == [f"the compile cache {not_a_dir} ($PYDLA_CACHE_DIR) cannot be written: it is a file, "
                    "not a directory; every model is compiled again each time it is opened (set "
                    "$PYDLA_CACHE_DIR to a writable directory)"]


# -- 17: compute units ---------------------------------------------------------------------------------------


def test_a_compute_unit_start_with_the_wrong_argument_count_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When the device declares a unit's arguments (pydla.hw.cu.models: VectorAdd's a, b, out, n)."""
    import dataclasses

    with pydla.createRuntime() as rt:
        info = rt.port.NvDlaGetDeviceInfo(0)
        declared = tuple(("a", "b", "out", "n") if cu.startswith("vadd") else None
                         for cu in info.compute_units)
        monkeypatch.setattr(rt.port, "NvDlaGetDeviceInfo",
                            lambda select: dataclasses.replace(info, compute_unit_arguments=declared))
        vadd = pydla.ComputeUnit(rt, "vadd")
        a = rt.allocateSystemMemory(64)
        with pytest.raises(DlaError) as e:
            vadd(a, a)
        assert (e.value.code, e.value.message) == (
            NvError.BadParameter, "ComputeUnit 'vadd'.start: 2 argument(s) given; it takes 4 (a, b, out, n)")
        a.array(np.float32)[:] = 1.5
        vadd(a, a, a, 16)
        assert a.array(np.float32).tolist() == [3.0] * 16


def test_the_device_declares_vadds_arguments() -> None:
    with pydla.createRuntime() as rt:
        a = rt.allocateSystemMemory(64)
        with pytest.raises(DlaError, match="2 argument"):
            pydla.ComputeUnit(rt, "vadd")(a, a)
