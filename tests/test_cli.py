"""The command line's common options (-v, --log-level, PYDLA_LOG, before or after any subcommand) and
`pydla run`'s report: warm-up, latency, throughput only over several runs, --json."""

from __future__ import annotations

import json
import logging
import os
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
    with pytest.raises(DlaError, match="PYDLA_LOG 'loud'"):
        cli_level(None, environ={ENV: "loud"})


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
        assert "PYDLA_LOG 'chatty': use one of" in capsys.readouterr().err
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

    empty, text = tmp_path / "empty.npy", tmp_path / "text.npy"
    empty.write_bytes(b"")
    text.write_text("not an array")
    for path, words in ((empty, "is empty, not a .npy array"), (text, "cannot read")):
        assert main(["run", str(demo_dla), "--input", f"input={path}"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("pydla: error: --input input: ") and words in err and "Traceback" not in err
        assert "[FileReadFailed]" in err


def test_run_names_the_file_of_a_corrupt_loadable(demo_dla: Path, tmp_path: Path, capsys) -> None:
    from pydla.cli import main

    blob = bytearray(demo_dla.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # somewhere in the weights
    bad = tmp_path / "bad.dla"
    bad.write_bytes(bytes(blob))
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pydla: error: {bad}: section '") and "is corrupt" in err
