"""The package as a whole: errors, the command line, the README's commands and CI agreeing."""

from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pydla
from pydla import DlaError, NvError
from pydla.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent


def test_nverror_values_follow_nvdla() -> None:
    assert NvError.NvSuccess == 0
    assert NvError.BadParameter == 4
    assert NvError.Timeout == 5
    assert NvError.InsufficientMemory == 6
    assert NvError.InvalidState == 8
    assert NvError.BadValue == 0xB
    assert NvError.ResourceError == 0xF
    assert NvError.FileOperationFailed == 0x30003
    assert NvError.VersionMismatch >= 0xF0000
    assert len({int(e) for e in NvError}) == len(NvError)


def test_dlaerror_carries_code_and_message_and_pickles() -> None:
    e = DlaError(NvError.Timeout, "task 3 did not finish in 100 ms")
    assert e.code is NvError.Timeout
    assert str(e) == "task 3 did not finish in 100 ms [Timeout]"
    back = pickle.loads(pickle.dumps(e))
    assert back.code is NvError.Timeout and back.message == e.message
    assert isinstance(e, Exception)


def test_version_flag(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"pydla {pydla.__version__}"


def _all_command_paths(parser, prefix=()):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _all_command_paths(sub, (*prefix, name))


def test_every_subcommand_has_help(capsys) -> None:
    paths = list(_all_command_paths(build_parser()))
    assert ("deviceapi", "generate") in paths
    for path in paths:
        with pytest.raises(SystemExit) as e:
            main([*path, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: pydla " + " ".join(path)), path


def test_no_command_is_a_usage_error(capsys) -> None:
    assert main([]) == 1
    assert capsys.readouterr().err == ("pydla: error: the following arguments are required: COMMAND (pydla "
                                       "--help shows the usage) [BadParameter]\n")


def test_cli_error_is_one_line_and_exit_1(tmp_path: Path, capsys) -> None:
    assert main(["deviceapi", "trace", str(tmp_path / "missing.bin")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pydla: error: ") and "missing.bin" in err and err.count("\n") == 1


def test_missing_codegen_extra_says_what_to_install() -> None:
    code = ("import sys; sys.modules['jinja2'] = None\n"
            "from pydla.cli import main\n"
            "sys.exit(main(['deviceapi', 'generate', '--check']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "pip install 'pydla[codegen]'" in result.stderr
    assert "jinja2" in result.stderr


def test_core_imports_need_no_codegen_packages() -> None:
    code = ("import sys, pydla, pydla.deviceapi.generated.device_api, pydla.deviceapi.trace, "
            "pydla.deviceapi.version, pydla.cli\n"
            "bad = {'jinja2', 'yaml', 'jsonschema', 'onnx'} & set(sys.modules)\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_module_entry_point_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "pydla", "--version"], check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == f"pydla {pydla.__version__}"


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", quick, flags=re.S)


def test_readme_quick_start_has_exactly_two_commands_and_ci_runs_the_test_one() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands)
    main_job, tests = commands
    assert "pip install" in main_job and "pip install" in tests
    assert "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines(), "the README's test command must appear verbatim in .ci/run"
    assert "5" in ci and "no tests" in ci


def test_layout_matches_the_design() -> None:
    for sub in ("umd", "portability", "kmd", "hw", "loadable", "elf", "compiler", "deviceapi"):
        assert (ROOT / "pydla" / sub / "__init__.py").is_file(), sub
    for folder in ("tests", "bench", "tools", "examples"):
        assert (ROOT / folder).is_dir(), folder


def test_demo_runs_and_checks_its_numbers(capsys) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for fragment in ("stages:", "compile", "submit", "wait",
                     "device operations: CONV 3, PDP 2, SDP 3, SHAVE 1", "device BLAS: ",
                     "max |pydla - onnxruntime|", ": OK", "next:"):
        assert fragment in out, fragment


def test_readme_main_command_is_the_demo() -> None:
    main_job, _ = _readme_commands()
    assert main_job.endswith("pydla demo") and "'.[onnx]'" in main_job


def test_demo_as_a_new_user_runs_it(tmp_path: Path) -> None:
    """The command a new user types, in a subprocess (CI also runs it from its fresh venv)."""
    result = subprocess.run([sys.executable, "-m", "pydla", "demo"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert ": OK" in result.stdout


def test_run_as_a_new_user_runs_it(tmp_path: Path) -> None:
    """`pydla run` in a subprocess, as typed (CI also runs it from its fresh venv): outputs written,
    latency reported; a wrong input is one line on stderr and exit code 1."""
    import numpy as np

    model = ROOT / "examples" / "demo_model.onnx"
    env = {**os.environ, "PYDLA_CACHE_DIR": str(tmp_path / "cache")}
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = subprocess.run([sys.executable, "-m", "pydla", "run", str(model), "--input", "input=x.npy",
                             "--iterations", "3", "--output-dir", "out"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert "latency over 3 run(s): median" in result.stdout
    probabilities = np.load(tmp_path / "out" / "probabilities.npy")
    assert probabilities.shape == (1, 10) and abs(float(probabilities.sum()) - 1) < 1e-5
    np.save(tmp_path / "bad.npy", x[:, :2])
    bad = subprocess.run([sys.executable, "-m", "pydla", "run", str(model), "--input", "input=bad.npy"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and "expected float32 of shape (1, 3, 32, 32)" in bad.stderr


def test_committed_demo_model_is_what_the_script_writes() -> None:
    from pydla.demo import build_demo_model

    committed = (ROOT / "examples" / "demo_model.onnx").read_bytes()
    assert committed == build_demo_model().SerializeToString(), "run: python examples/demo_model.py"


# -- tools/: the maintenance scripts the README and the docs promise ---------------------------------


def _tool(name: str):  # type: ignore[no-untyped-def]
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(ROOT / "tools" / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["regenerate", "release-check", "build-kernels"])
def test_tools_are_executable_and_take_help(name: str) -> None:
    path = ROOT / "tools" / name
    assert os.access(path, os.X_OK), f"tools/{name} is not executable"
    assert f"tools/{name}" in (ROOT / "tools" / "README.md").read_text()
    result = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith(f"usage: tools/{name}"), result.stderr


def test_tools_regenerate_check_passes_on_this_checkout() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "regenerate"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_release_check_names_missing_package_data(tmp_path: Path) -> None:
    """The wheel check of tools/release-check on wheels made here: a complete one passes, one
    without a device configuration or the entry point fails, naming what is missing."""
    import zipfile

    release_check = _tool("release-check")
    files = release_check.expected_files()
    for wanted in ("pydla/target/configs/full.json", "pydla/py.typed",
                   "pydla/umd/include/pydla/cpu_library_api.h", "pydla/deviceapi/specs/device_api.yaml"):
        assert wanted in files, wanted
    assert any(f.startswith("pydla/loadable/schema/") for f in files)
    assert any(f.startswith("pydla/deviceapi/include/pydla/") and f.endswith(".h") for f in files)

    def wheel(name: str, leave_out: str = "", entry_point: bool = True) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as z:
            for f in ["pydla/__init__.py", *files]:
                if f != leave_out:
                    z.writestr(f, "")
            if entry_point:
                z.writestr("pydla-0.dist-info/entry_points.txt",
                           f"[console_scripts]\n{release_check.console_script()}\n")
        return path

    assert release_check.console_script() == "pydla = pydla.entry:main"  # pyproject.toml's
    assert release_check.check_wheel(wheel("good.whl")) == []
    problems = release_check.check_wheel(wheel("bad.whl", leave_out="pydla/target/configs/full.json"))
    assert problems == ["bad.whl lacks pydla/target/configs/full.json"]
    assert "console script" in " ".join(release_check.check_wheel(wheel("noentry.whl", entry_point=False)))


def test_every_config_option_names_every_bundled_configuration() -> None:
    """`--config` help lists the configurations there are (full-headed was left out)."""
    from pydla.target.config import bundled_configs

    names = bundled_configs()
    assert {"full", "small", "full-headed"} <= set(names)
    found = []
    for path in _all_command_paths(build_parser()):
        parser = build_parser()
        for step in path:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[step]
        for action in parser._actions:
            if "--config" in action.option_strings:
                found.append(path)
                missing = [n for n in names if n not in (action.help or "")]
                assert not missing, f"pydla {' '.join(path)} --config help omits {missing}: {action.help}"
    assert {("run",), ("compile",), ("info",)} <= set(found)


def test_the_demo_points_to_a_readme_section_that_exists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    named = re.findall(r"README: '([^']+)'", capsys.readouterr().out)
    assert named, "the demo's last line names a README section"
    headings = [line[3:] for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("## ")]
    for name in named:
        assert any(h.startswith(name) for h in headings), (name, headings)


def test_readme_quick_start_says_how_long_and_how_to_enter_the_environment() -> None:
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    demo, tests = quick.split("```sh", 2)[:2]
    assert re.search(r"\d+ (?:s|seconds)\b", demo), "the quick start says how long the demo takes"
    assert re.search(r"\d+ minutes", tests), "the quick start says how long the tests take"
    assert ". .venv/bin/activate" in quick  # the commands after it are typed as bare `pydla`
    assert len(text.splitlines()) <= 250
