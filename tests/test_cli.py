"""The command line's common options (-v, --log-level, PYDLA_LOG, before or after any subcommand);
`pydla run`'s report (warm-up, latency, throughput only over several runs, --json), its inputs (files,
dynamic shapes from them, integers within the axis they index, what is no .npy), its files checked
before the runs; Ctrl-C ending `pydla run` and `pydla demo` within 2 s."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.cli import build_parser, main
from pydla.logconfig import ENV, StderrHandler, cli_level, cli_logging, configure_from_env

ROOT = Path(__file__).resolve().parent.parent


def _all_parsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield from _all_parsers(sub, (*path, name))


def test_every_command_takes_verbose_and_log_level() -> None:
    paths = []
    for path, parser in _all_parsers(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        assert {"-v", "--verbose", "--log-level"} <= options, path
        paths.append(path)
    assert ("deviceapi", "generate") in paths and ("run",) in paths and ("info",) in paths


@pytest.mark.parametrize(("argv", "verbose", "level"), [
    (["run", "m.dla"], False, None),
    (["-v", "run", "m.dla"], True, None),
    (["run", "m.dla", "-v"], True, None),
    (["run", "m.dla", "--verbose", "--log-level", "debug"], True, "debug"),
    (["--log-level", "error", "run", "m.dla"], False, "error"),  # not overwritten by run's default
    (["--log-level", "error", "run", "m.dla", "--log-level", "info"], False, "info"),
    (["deviceapi", "generate", "--check", "-v"], True, None),
    (["--log-level", "info", "deviceapi", "generate"], False, "info"),
])
def test_common_options_before_or_after_the_command(argv, verbose, level) -> None:
    args = build_parser().parse_args(argv)
    assert (args.verbose, args.log_level) == (verbose, level)


def test_level_rules() -> None:
    assert cli_level(None, environ={}) == logging.WARNING
    assert cli_level(None, verbose=True, environ={}) == logging.INFO
    assert cli_level("DEBUG", environ={ENV: "error"}) == logging.DEBUG  # the option wins
    assert cli_level(None, environ={ENV: "error"}) == logging.ERROR
    assert cli_level("error", verbose=True, environ={}) == logging.ERROR  # -v does not override it
    assert cli_level(None, verbose=True, environ={ENV: "debug"}) == logging.DEBUG  # never quieter
    with pytest.raises(DlaError, match="--log-level 'loud': use one of debug, info, warning, error") as e:
        cli_level("loud", environ={})
    assert e.value.code == NvError.BadParameter
    # the variable, set for every program, never stops one: warning, and the warning said once
    assert cli_level(None, environ={ENV: "loud"}) == logging.WARNING


def test_a_bad_pydla_log_is_one_warning_naming_it_and_the_command_runs(demo_dla: Path,
                                                                       tmp_path: Path) -> None:
    """It was a warning 'using warning' from the import, then an error from the command line."""
    env = {**os.environ, ENV: "verbose", "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYDLA_PORT", None)
    result = subprocess.run([sys.executable, "-m", "pydla", "run", str(demo_dla)], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        "pydla WARNING: $PYDLA_LOG 'verbose': use one of debug, info, warning, error; using warning"), lines
    assert "output probabilities" in result.stdout


def test_cli_logging_logs_the_pydla_hierarchy_to_stderr_and_puts_logging_back(capsys) -> None:
    logger = logging.getLogger("pydla")
    before = (logger.level, list(logger.handlers))
    with cli_logging("info", environ={}):
        logging.getLogger("pydla.kmd").info("job %d done", 7)
        logging.getLogger("pydla.linux.daemon").debug("not shown at info")
    err = capsys.readouterr().err
    assert "pydla.kmd INFO: job 7 done" in err and "not shown" not in err
    assert err[2] == ":" and err[5] == ":" and err[8] == "."  # HH:MM:SS.mmm
    assert (logger.level, list(logger.handlers)) == before


def test_a_bad_log_level_is_a_one_line_error(capsys) -> None:
    assert main(["info", "m.dla", "--log-level", "loud"]) == 1
    assert capsys.readouterr().err == ("pydla: error: --log-level 'loud': use one of debug, info, warning, "
                                       "error [BadParameter]\n")


def test_verbose_after_the_command_shows_the_traceback(tmp_path: Path, capsys) -> None:
    assert main(["info", str(tmp_path / "missing.dla"), "-v"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("pydla: error:")


def test_library_hook_installs_a_handler_only_when_pydla_log_is_set(capsys) -> None:
    logger = logging.getLogger("pydla")
    before = (logger.level, list(logger.handlers))
    try:
        assert configure_from_env({}) is False and list(logger.handlers) == before[1]
        assert configure_from_env({ENV: "debug"}) is True
        assert configure_from_env({ENV: "debug"}) is True  # still one handler
        assert sum(isinstance(h, StderrHandler) for h in logger.handlers) == 1
        logging.getLogger("pydla.umd").debug("hello")
        assert "pydla.umd DEBUG: hello" in capsys.readouterr().err
        assert configure_from_env({ENV: "chatty"}) is True  # never raises in a library
        assert logger.level == logging.WARNING
        assert "$PYDLA_LOG 'chatty': use one of" in capsys.readouterr().err
    finally:
        for h in list(logger.handlers):
            if h not in before[1]:
                logger.removeHandler(h)
        logger.setLevel(before[0])


def test_pydla_log_reaches_the_command_line_in_a_subprocess(tmp_path: Path) -> None:
    """A warning logged by the stack while a command runs (the command replaced by one that logs as
    the KMD would) reaches stderr formatted, at PYDLA_LOG=warning; --log-level error silences it."""
    code = ("import logging, sys\nfrom pydla.cli import main\n"
            "import pydla.run\n"
            "def fake(args):\n"
            "    logging.getLogger('pydla.kmd').warning('engine reset after %d ms', 12)\n"
            "    return 0\n"
            "pydla.run._run = fake\n"
            "sys.exit(main(['run', 'm.dla'] + sys.argv[1:]))")
    env = {**os.environ, ENV: "warning"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "pydla.kmd WARNING: engine reset after 12 ms" in run.stderr
    quiet = subprocess.run([sys.executable, "-c", code, "--log-level", "error"], capture_output=True,
                           text=True, env=env, check=True)
    assert quiet.stderr == ""


# -- pydla run ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_dla(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pydla.session import loadable_bytes

    path = tmp_path_factory.mktemp("run") / "demo.dla"
    path.write_bytes(loadable_bytes(ROOT / "examples" / "demo_model.onnx"))
    return path


def test_run_json_is_the_only_thing_on_stdout(demo_dla: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("PYDLA_PORT", raising=False)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "out"
    assert main(["run", str(demo_dla), "--input", f"input={tmp_path / 'x.npy'}", "--iterations", "4",
                 "--warmup", "2", "--output-dir", str(out_dir), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert captured.out.count("\n") == 1
    assert report["model"] == str(demo_dla) and report["port"] == "inprocess"
    assert report["iterations"] == 4 and report["warmup"] == 2
    assert report["inputs"] == [{"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32",
                                 "source": str(tmp_path / "x.npy")}]
    [out] = report["outputs"]
    y = np.load(out_dir / "probabilities.npy")
    assert out == {"name": "probabilities", "shape": [1, 10], "dtype": "float32", "min": float(y.min()),
                   "max": float(y.max()), "mean": float(y.mean()), "file": str(out_dir / "probabilities.npy")}
    lat = report["latency_ms"]
    assert 0 < lat["min"] <= lat["median"] <= lat["p90"] <= lat["max"]
    assert report["load_ms"] > 0 and report["throughput"] > 0
    assert 1000 / lat["max"] <= report["throughput"] <= 1000 / lat["min"]
    # What a person reads went to stderr.
    assert "latency over 4 run(s)" in captured.err and "(after 2 untimed warm-up runs)" in captured.err
    assert "written to" in captured.err


def test_run_json_random_inputs_and_one_run_has_no_throughput(demo_dla: Path, capsys) -> None:
    assert main(["run", str(demo_dla), "--json", "--port", "inprocess"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["inputs"][0]["source"] == "random" and report["outputs"][0]["file"] is None
    assert report["throughput"] is None and report["iterations"] == 1 and report["warmup"] == 0
    lat = report["latency_ms"]
    assert lat["min"] == lat["median"] == lat["p90"] == lat["max"]
    assert "input input: random float32 (1, 3, 32, 32)" in captured.err


def test_run_text_report(demo_dla: Path, capsys) -> None:
    assert main(["run", str(demo_dla)]) == 0
    out = capsys.readouterr().out
    assert "latency of 1 run: " in out and "throughput" not in out.split("latency of 1 run")[1].split("(")[0]
    assert "warm-up" not in out
    assert main(["run", str(demo_dla), "--iterations", "3"]) == 0
    out = capsys.readouterr().out
    assert "latency over 3 run(s): median" in out and "(after 1 untimed warm-up run)" in out
    assert "throughput: " in out and "runs/s" in out
    assert main(["run", str(demo_dla), "--iterations", "2", "--warmup", "0"]) == 0
    assert "warm-up" not in capsys.readouterr().out
    assert main(["run", str(demo_dla), "--warmup", "-1"]) == 1
    assert "--warmup -1: 0 or more" in capsys.readouterr().err


def test_output_statistics_as_json_numbers() -> None:
    from pydla.run import _number, latency_stats

    values = (np.float32(1.5), np.int64(3), np.bool_(True), np.float32("nan"), np.float64("inf"), -np.inf)
    assert [_number(v) for v in values] == [1.5, 3, True, "NaN", "Infinity", "-Infinity"]
    assert latency_stats([0.001, 0.003, 0.002]) == pytest.approx({"median": 2, "p90": 3, "min": 1, "max": 3})


def test_run_input_files_that_are_not_arrays_are_one_line_errors(demo_dla: Path, tmp_path: Path,
                                                                 capsys) -> None:
    from pydla.cli import main

    empty, text, model, archive = (tmp_path / n for n in ("empty.npy", "text.npy", "m.onnx", "x.npz"))
    empty.write_bytes(b"")
    text.write_text("not an array")
    model.write_bytes(b"\x08\x08\x12\x04test")  # what an ONNX file begins with: numpy would call it a pickle
    np.savez(archive, input=np.ones((1, 3, 32, 32), np.float32))
    for path, words, code in (
            (empty, "the file is empty (0 bytes), not a .npy array", "BadValue"),
            (text, "is not a .npy array file (numpy.save writes those)", "BadValue"),
            (model, "is an ONNX model, not a .npy array: the model is pydla run's first argument",
             "BadValue"),
            (archive, "is a .npz archive, not a .npy array: save each input with numpy.save", "BadValue"),
            (tmp_path / "missing.npy", "missing.npy: no such file", "FileNotFound")):
        assert main(["run", str(demo_dla), "--input", f"input={path}"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"pydla: error: --input input={path}") and err.endswith(f" [{code}]\n"), err
        assert err.count("\n") == 1 and words in err and "pickle" not in err, err


def test_a_missing_file_is_worded_one_way(demo_dla: Path, tmp_path: Path, capsys) -> None:
    """The model, an input, a compile: '<path>: no such file' [FileNotFound]."""
    from pydla.cli import main

    missing = tmp_path / "missing"
    for argv, said in ((["run", f"{missing}.dla"], f"{missing}.dla: no such file"),
                       (["run", f"{missing}.onnx"], f"{missing}.onnx: no such file"),
                       (["compile", f"{missing}.onnx"], f"{missing}.onnx: no such file"),
                       (["run", str(demo_dla), "--input", f"input={missing}.npy"],
                        f"--input input={missing}.npy: no such file"),
                       (["run", str(demo_dla), "--input", f"{missing}.npy"],
                        f"--input {missing}.npy: no such file"),
                       (["trace", f"{missing}.bin"], f"{missing}.bin: no such file"),
                       (["info", f"{missing}.dla"], f"{missing}.dla: no such file"),
                       (["validate", f"{missing}.json"], f"{missing}.json: no such file")):
        assert main(argv) == 1
        assert capsys.readouterr().err == f"pydla: error: {said} [FileNotFound]\n", argv


def test_run_names_the_file_of_a_corrupt_loadable(demo_dla: Path, tmp_path: Path, capsys) -> None:
    from pydla.cli import main

    blob = bytearray(demo_dla.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # somewhere in the weights
    bad = tmp_path / "bad.dla"
    bad.write_bytes(bytes(blob))
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pydla: error: {bad}: section '") and "is corrupt" in err


# -- Ctrl-C: `pydla run` and `pydla demo` end within 2 s of SIGINT ----------------------------------------

# Run first in the subprocess: a real SIGINT to itself when WHERE is reached (the class, the method, the
# call number), its time on stderr; then the command.
SIGINT_AT = """
import importlib, os, signal, sys, time
module, cls, method, nth = sys.argv.pop(1).split(":")
owner = getattr(importlib.import_module(module), cls)
real, calls = getattr(owner, method), []
def reached(*args, **kwargs):
    calls.append(1)
    if len(calls) == int(nth):
        print(f"SIGINT {time.monotonic()!r}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)
    return real(*args, **kwargs)
setattr(owner, method, reached)
from pydla.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _sigint_as_a_terminal_leaves_it() -> None:
    """preexec_fn of the Ctrl-C tests' children: SIGINT at its default, as a shell starts a command in
    the foreground. A test run started in the background (``pytest &`` in a script) has SIGINT
    ignored, which its children would inherit: Python then never raises KeyboardInterrupt."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupted(argv: list[str], where: str,
                 tmp_path: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    import time

    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYDLA_PORT", None)
    result = subprocess.run([sys.executable, "-c", SIGINT_AT, where, *argv], capture_output=True, text=True,
                            env=env, timeout=120, preexec_fn=_sigint_as_a_terminal_leaves_it)
    ended = time.monotonic()
    sent = [float(line.split()[1]) for line in result.stderr.splitlines() if line.startswith("SIGINT ")]
    assert len(sent) == 1, (where, result.stderr)
    return ended - sent[0], result


@pytest.mark.parametrize("where", [
    "pydla.umd.runtime:IRuntime:load:1",        # loading the network
    "pydla.kmd.job_sched:JobScheduler:poll_locked:1",   # the first run, in flight on the device
    "pydla.kmd.job_sched:JobScheduler:poll_locked:40",  # a later run
    "pydla.session:Session:_close:1",           # closing, after the runs
])
def test_ctrl_c_ends_pydla_run_within_2_s(where: str, demo_dla: Path, tmp_path: Path) -> None:
    iterations = "1" if where.endswith("_close:1") else "100000"
    took, result = _interrupted(["run", str(demo_dla), "--iterations", iterations], where, tmp_path)
    assert result.returncode == 130 and result.stderr.endswith("pydla: interrupted\n"), result.stderr
    assert "Traceback" not in result.stderr and "cancelled" not in result.stderr
    assert took < 2, took


def test_ctrl_c_ends_pydla_demo_within_2_s(tmp_path: Path) -> None:
    took, result = _interrupted(["demo"], "pydla.kmd.job_sched:JobScheduler:poll_locked:1", tmp_path)
    assert result.returncode == 130 and result.stderr.endswith("pydla: interrupted\n"), result.stderr
    assert took < 2, took


def test_sigint_from_outside_ends_pydla_run_within_2_s(demo_dla: Path, tmp_path: Path) -> None:
    """As a terminal's Ctrl-C does: SIGINT from another process, while the runs go on."""
    import select
    import signal
    import time

    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYDLA_PORT", None)
    env.pop("PYTHONUNBUFFERED", None)  # stdout a pipe, block-buffered, as in a user's shell
    with subprocess.Popen([sys.executable, "-m", "pydla", "run", str(demo_dla), "--iterations", "10000000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          preexec_fn=_sigint_as_a_terminal_leaves_it) as child:
        assert child.stdout is not None and child.stderr is not None
        try:  # on any failure the child is killed: leaving the with block waits for it
            # The first line says the runs start next; waited for with a limit (a `pydla run` that
            # kept it in its buffer once hung this test where PYTHONUNBUFFERED is not set).
            readable, _, _ = select.select([child.stdout], [], [], 60)
            assert readable, "pydla run said nothing of its inputs within 60 s"
            assert child.stdout.readline().startswith("input input: random")
            time.sleep(0.5)
            child.send_signal(signal.SIGINT)
            sent = time.monotonic()
            child.wait(timeout=30)
        finally:
            child.kill()
        took = time.monotonic() - sent
        err = child.stderr.read()
    assert child.returncode == 130 and err == "pydla: interrupted\n", err
    assert took < 2, took


# Run first in the subprocess: a real SIGINT to itself while module MODULE is being imported (its first
# statement has run), then the console script's entry point, as `pydla ARGS` runs it.
SIGINT_IN_IMPORT = """
import importlib.abc, os, signal, sys, time
target = sys.argv.pop(1)
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target_=None):
        if name == target:
            sys.meta_path.remove(self)
            print(f"SIGINT {time.monotonic()!r}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGINT)  # delivered at the import's next bytecode
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv[0] = "pydla"
from pydla.entry import main
main()
"""


@pytest.mark.parametrize("module", ["pydla.logconfig", "pydla.cli", "pydla.run", "numpy"])
def test_ctrl_c_while_the_command_imports_its_modules_is_one_line(module: str, demo_dla: Path,
                                                                   tmp_path: Path) -> None:
    """Ctrl-C in the first 0.03-0.15 s of `pydla run` was a 20-29-line KeyboardInterrupt traceback and
    exit -2 or 1: the imports of pydla.cli run before its main() could catch anything."""
    import time

    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYDLA_PORT", None)
    result = subprocess.run([sys.executable, "-c", SIGINT_IN_IMPORT, module, "run", str(demo_dla)],
                            capture_output=True, text=True, env=env, timeout=120,
                            preexec_fn=_sigint_as_a_terminal_leaves_it)
    ended = time.monotonic()
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("SIGINT "), result.stderr  # sent, once
    assert (result.returncode, lines[1], result.stdout) == (130, "pydla: interrupted", ""), result.stderr
    assert ended - float(lines[0].split()[1]) < 2


def test_the_entry_point_is_reached_after_importing_next_to_nothing() -> None:
    """Before pydla.entry's try block, a Ctrl-C can only be Python's own: importing it imports the
    package and its version, not pydla.errors, enum or typing (30 ms of imports on a loaded machine,
    now 2)."""
    code = ("import sys; before = set(sys.modules); import pydla.entry; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    new = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    assert {m for m in new if m.startswith("pydla")} == {"pydla", "pydla._version", "pydla.entry"}, new
    assert not {"typing", "enum", "logging", "argparse"} & set(new), new


# Run first in the subprocess: when `pydla run` starts drawing its random input, a real SIGINT to itself
# DELAY seconds later (from a thread, as a terminal's comes from outside).
SIGINT_IN_DRAW = """
import os, signal, sys, threading, time
import pydla.run
delay = float(sys.argv.pop(1))
real = pydla.run.random_input
def drawing(*args, **kwargs):
    def interrupt():
        time.sleep(delay)
        print(f"SIGINT {time.monotonic()!r}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    return real(*args, **kwargs)
pydla.run.random_input = drawing
sys.argv[0] = "pydla"
from pydla.entry import main
main()
"""


def test_ctrl_c_while_a_large_random_input_is_drawn_ends_within_2_s(tmp_path: Path) -> None:
    """A 1x3x4096x4096 random input was drawn as 50 M float64 values in one call (then converted):
    SIGINT 2-3.5 s after the start ended the command 2.2-4.3 s later."""
    import time

    import onnx

    from tests.test_ort_habits import dynamic_cnn

    model = tmp_path / "dyn.onnx"
    onnx.save(dynamic_cnn(), str(model))
    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYDLA_PORT", None)
    result = subprocess.run([sys.executable, "-c", SIGINT_IN_DRAW, "0.2", "run", str(model), "--input-shape",
                             "x=1,3,4096,4096"], capture_output=True, text=True, env=env, timeout=300,
                            preexec_fn=_sigint_as_a_terminal_leaves_it)
    ended = time.monotonic()
    sent = [float(line.split()[1]) for line in result.stderr.splitlines() if line.startswith("SIGINT ")]
    assert len(sent) == 1, result.stderr
    assert result.returncode == 130 and result.stderr.endswith("pydla: interrupted\n"), result.stderr
    assert "latency" not in result.stdout  # it did not go on to run
    assert ended - sent[0] < 2, ended - sent[0]


def test_a_random_input_is_drawn_in_its_dtype_and_in_chunks() -> None:
    """No draw is longer than CHUNK values (a Ctrl-C waits for one chunk at most) and none makes
    float64 values for a float32 input (a copy twice the input's size)."""
    from pydla.run_inputs import CHUNK, random_input

    draws: list[tuple[str, int, object]] = []

    class Recording:
        def __init__(self) -> None:
            self.rng = np.random.default_rng(0)

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            method = getattr(self.rng, name)

            def draw(*args, **kwargs):  # type: ignore[no-untyped-def]
                size = args[0] if name == "standard_normal" else args[2] if name == "integers" else args[0]
                dtype = kwargs.get("dtype", args[1] if len(args) > 1 and name != "integers" else None)
                draws.append((name, int(size), dtype))
                return method(*args, **kwargs)

            return draw

    shape = (1, 3, 1024, 1024)  # 3 M values: 3 chunks
    x = random_input(Recording(), shape, np.dtype(np.float32))  # type: ignore[arg-type]
    assert x.dtype == np.float32 and x.shape == shape and 0.99 < x.std() < 1.01
    assert [d for d in draws] == [("standard_normal", CHUNK, np.float32)] * 3
    draws.clear()
    ids = random_input(Recording(), (3 * CHUNK + 5,), np.dtype(np.int64), 7)  # type: ignore[arg-type]
    assert ids.min() == 0 and ids.max() == 6 and [n for _, n, _ in draws] == [CHUNK] * 3 + [5]


# -- pydla run: inputs ---------------------------------------------------------------------------------


def _save(model, path: Path) -> Path:
    import onnx

    onnx.save(model, str(path))
    return path


def _token_model():
    """y = emb[reshape(ids)] * k: ids index the 50 rows of emb (through a Reshape); k indexes nothing."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    emb = nh.from_array(np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32), "emb")
    nodes = [h.make_node("Reshape", ["ids", "shape"], ["flat"]),
             h.make_node("Gather", ["emb", "flat"], ["e"]),
             h.make_node("Cast", ["k"], ["kf"], to=1), h.make_node("Mul", ["e", "kf"], ["y"])]
    graph = h.make_graph(nodes, "tokens", [h.make_tensor_value_info("ids", 7, [1, 6]),
                                           h.make_tensor_value_info("k", 7, [1, 1])],
                         [h.make_tensor_value_info("y", 1, [6, 8])],
                         [emb, nh.from_array(np.array([6], np.int64), "shape")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


def test_run_draws_integers_within_the_axis_they_index(tmp_path: Path, capsys, monkeypatch) -> None:
    """Token ids feeding a Gather are drawn within its rows (random -100..100 broke it), and a
    loadable, whose graph is compiled away, says which input needs a file when its run fails."""
    from pydla.compiler.api import compile_model
    from pydla.run_inputs import index_limits

    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    model = _token_model()
    assert index_limits(model) == {"ids": 50}
    path = _save(model, tmp_path / "tokens.onnx")
    for seed in range(3):
        assert main(["run", str(path), "--seed", str(seed), "--output-dir", str(tmp_path / "out")]) == 0
        out = capsys.readouterr().out
        assert "input ids: random int64 (1, 6) in 0..49 (indices of an axis of 50)" in out, out
        assert "input k: random int64 (1, 1) in -100..100" in out
    dla = tmp_path / "tokens.dla"
    dla.write_bytes(compile_model(model).blob)
    assert main(["run", str(dla), "--seed", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pydla: error: ") and err.count("\n") == 1
    assert ("(input 'ids' was random integers in -100..100: if it holds indices or ids, give its values with "
            "--input ids=FILE.npy; input 'k' was random integers") in err, err
    np.save(tmp_path / "ids.npy", np.arange(6, dtype=np.int64).reshape(1, 6))
    assert main(["run", str(dla), "--input", f"ids={tmp_path / 'ids.npy'}"]) == 0


def _dynamic_cnn():
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                          h.make_node("GlobalAveragePool", ["c"], ["y"])], "dynamic",
                         [h.make_tensor_value_info("x", 1, ["N", 3, "H", "W"])],
                         [h.make_tensor_value_info("y", 1, ["N", 4, 1, 1])], [w])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_run_takes_a_dynamic_models_shapes_from_its_input_files(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    path = _save(_dynamic_cnn(), tmp_path / "dynamic.onnx")
    x = np.random.default_rng(1).standard_normal((2, 3, 20, 12)).astype(np.float32)
    np.save(tmp_path / "img.npy", x)
    for given in (f"x={tmp_path / 'img.npy'}", str(tmp_path / "img.npy")):  # a one-input model: no name
        assert main(["run", str(path), "--input", given, "--output-dir", str(tmp_path / "out")]) == 0
        assert "output y: float32 (2, 4, 1, 1)" in capsys.readouterr().out
        import onnxruntime as ort

        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-4, atol=1e-4)
    assert main(["run", str(path)]) == 1
    assert capsys.readouterr().err == (
        "pydla: error: input 'x' [N, 3, H, W] has dynamic dimensions: give its data, whose shape is taken, "
        "with --input x=FILE.npy, or its shape, --input-shape x=1,3,H,W (H, W: the sizes to run with) "
        "[BadParameter]\n")
    assert main(["run", str(path), "--input-shape", "x=1,3,8,8"]) == 0
    assert "input x: random float32 (1, 3, 8, 8)" in capsys.readouterr().out
    np.save(tmp_path / "bad.npy", np.ones((1, 4, 8, 8), np.float32))
    assert main(["run", str(path), "--input", str(tmp_path / "bad.npy")]) == 1
    assert ("input 'x': expected float32 of shape [N, 3, H, W], got shape (1, 4, 8, 8): dimension 1 is fixed "
            "at 3") in capsys.readouterr().err


def test_run_input_without_a_name_is_for_a_model_of_one_input(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    path = _save(_token_model(), tmp_path / "tokens.onnx")
    np.save(tmp_path / "ids.npy", np.zeros((1, 6), np.int64))
    assert main(["run", str(path), "--input", str(tmp_path / "ids.npy")]) == 1
    assert capsys.readouterr().err == (
        f"pydla: error: --input {tmp_path / 'ids.npy'}: the model has 2 inputs (ids, k): name the one this "
        "file is, --input NAME=FILE.npy [BadParameter]\n")
    assert main(["run", str(path), "--input", f"ids={tmp_path / 'ids.npy'}", "--input",
                 f"ids={tmp_path / 'ids.npy'}"]) == 1
    assert "--input ids: given twice" in capsys.readouterr().err


def test_run_checks_its_trace_files_before_the_runs(demo_dla: Path, tmp_path: Path, capsys) -> None:
    for flag in ("--trace", "--trace-ring"):
        assert main(["run", str(demo_dla), "--iterations", "3", flag, str(tmp_path / "no" / "t.json")]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""  # nothing ran
        assert captured.err == (f"pydla: error: {flag} {tmp_path / 'no' / 't.json'}: the directory "
                                f"{tmp_path / 'no'} does not exist [FileWriteFailed]\n")
        assert main(["run", str(demo_dla), flag, str(tmp_path)]) == 1
        assert f"{flag} {tmp_path}: a directory, not a file" in capsys.readouterr().err


def test_demo_points_to_a_page_that_is_there(capsys, tmp_path: Path, monkeypatch) -> None:
    """It pointed to a README section that was renamed."""
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["demo"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    pages = re.findall(r"\((docs/[\w/.-]+\.md)\)", last)
    assert last.startswith("next: ") and pages, last
    assert all((ROOT / page).is_file() for page in pages), pages


def test_run_and_compile_word_a_broken_onnx_file_alike(tmp_path: Path, capsys) -> None:
    from pydla.compiler import cli as compiler_cli  # noqa: F401 (pydla compile is there)

    empty, cut = tmp_path / "empty.onnx", tmp_path / "cut.onnx"
    empty.write_bytes(b"")
    cut.write_bytes((ROOT / "examples" / "demo_model.onnx").read_bytes()[:100])
    for path in (empty, cut):
        said = []
        for command in ("run", "compile"):
            assert main([command, str(path)]) == 1
            said.append(capsys.readouterr().err)
        assert said[0] == said[1] and said[0].startswith(f"pydla: error: {path}: "), said


def test_index_limits_follow_what_indexes_an_axis() -> None:
    from onnx import helper as h
    from onnx import numpy_helper as nh

    from pydla.run_inputs import index_limits

    def model(nodes, inputs, inits=()):
        graph = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info("y", 1, None)], list(inits))
        return h.make_model(graph)

    one_hot = model([h.make_node("OneHot", ["i", "d", "v"], ["y"])], [h.make_tensor_value_info("i", 7, [3])],
                    [nh.from_array(np.array(7, np.int64), "d"),
                     nh.from_array(np.array([0, 1], np.float32), "v")])
    elements = model([h.make_node("GatherElements", ["data", "i"], ["y"], axis=1)],
                     [h.make_tensor_value_info("data", 1, [2, 9]), h.make_tensor_value_info("i", 7, [2, 3])])
    # indices of two tables: the smaller one bounds them; an unknown axis size bounds nothing
    two = model([h.make_node("Gather", ["a", "i"], ["p"]), h.make_node("Gather", ["b", "i"], ["q"]),
                 h.make_node("Gather", ["c", "j"], ["y"])],
                [h.make_tensor_value_info("i", 7, [4]), h.make_tensor_value_info("j", 7, [4]),
                 h.make_tensor_value_info("c", 1, ["rows", 3])],
                [nh.from_array(np.zeros((30, 2), np.float32), "a"),
                 nh.from_array(np.zeros((12, 2), np.float32), "b")])
    assert index_limits(one_hot) == {"i": 7} and index_limits(elements) == {"i": 9}
    assert index_limits(two) == {"i": 12}
