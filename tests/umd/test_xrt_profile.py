"""XRT's execution profile: the runner creates, fills, binds and validates the recipe's external
buffers as the profile's bindings say, and runs its executions (iterations, latency, throughput,
re-binding and re-filling between iterations); every malformed part is refused naming its JSON path."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.umd.profile_run import ProfileRun
from pydla.umd.profile_spec import parse_profile
from tests.umd.test_xrt_recipe import design, recipe_dir, vadd_recipe
from tests.umd.test_xrt_recipe import libraries as libraries  # the fixture: the CPU library folder

N = 64  # floats per buffer
HALF = struct.unpack("<I", struct.pack("<f", 0.5))[0]


def unsized_vadd() -> dict[str, Any]:
    doc = vadd_recipe(N)
    for buf in doc["resources"]["buffers"]:
        del buf["size"]  # external buffers: the profile's bindings make them
    return doc


def setup(tmp_path: Path, libraries: Path, monkeypatch: pytest.MonkeyPatch, profile: dict[str, Any]) -> Path:
    recipe = recipe_dir(tmp_path, unsized_vadd(), libraries, monkeypatch)
    a = np.arange(N // 2, dtype=np.float32)  # half the buffer: the file wraps around
    (tmp_path / "a.bin").write_bytes(a.tobytes())
    (tmp_path / "want.bin").write_bytes((np.tile(a, 2) + 0.5).astype(np.float32).tobytes())
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    return recipe


BINDINGS = [{"name": "a", "size": 4 * N, "init": {"file": "a.bin"}},
            {"name": "b", "size": 4 * N, "init": {"stride": 4, "value": HALF}},
            {"name": "out", "size": 4 * N, "validate": {"file": "want.bin"}}]


def test_a_profile_binds_fills_runs_and_validates(tmp_path: Path, libraries: Path, monkeypatch) -> None:
    profile = {"qos": {"gops": 10}, "bindings": BINDINGS,
               "executions": [{"name": "three", "iterations": 3, "validate": True},
                              {"name": "lat", "mode": "latency", "iterations": 2, "validate": True},
                              {"name": "tput", "mode": "throughput", "depth": 3, "iterations": 2,
                               "validate": True, "verbose": False}]}
    recipe = setup(tmp_path, libraries, monkeypatch, profile)
    lines: list[str] = []
    with pydla.createRuntime(config=design(recipe)) as rt, \
            ProfileRun(rt, recipe, tmp_path / "profile.json", out=lines.append) as run:
        reports = run.run()
        out = run.memory["out"].array(np.float32, (N,))
        np.testing.assert_array_equal(out, np.tile(np.arange(N // 2, dtype=np.float32), 2) + 0.5)
    assert [(r.name, r.runs, r.mode, r.ok) for r in reports] == [
        ("three", 3, "iterations", True), ("lat", 2, "latency", True), ("tput", 6, "throughput", True)]
    assert len(lines) == 2 and lines[0].startswith("execution 'three' (iterations): 3 run(s) in ")
    assert lines[1].endswith("; validated")


def test_a_validation_failure_names_the_first_differing_byte(tmp_path: Path, libraries: Path,
                                                              monkeypatch) -> None:
    bindings = [*BINDINGS[:2], {"name": "out", "size": 4 * N, "validate": {"name": "a"}}]
    recipe = setup(tmp_path, libraries, monkeypatch, {"bindings": bindings,
                                                       "executions": [{"validate": True, "verbose": False}]})
    with pydla.createRuntime(config=design(recipe)) as rt, \
            ProfileRun(rt, recipe, tmp_path / "profile.json") as run:
        (report,) = run.run()
    assert not report.ok
    # out[0] = 0.5 (0x3f000000), a[0] = 0.0: byte 3 is the first to differ (little-endian)
    a = np.tile(np.arange(N // 2, dtype=np.float32), 2)
    differ = int(np.count_nonzero((a + 0.5).view(np.uint8) != a.view(np.uint8)))
    assert report.failures == [f"buffer 'out' differs from buffer 'a' at byte 3: 0x3f != 0x00 ({differ} of "
                               f"{4 * N} bytes differ)"]


def test_reinit_continues_in_the_file_and_rebind_binds_again(tmp_path: Path, libraries: Path,
                                                             monkeypatch) -> None:
    """a is filled from a 3-float file into 64 floats: each reinit continues where the last fill
    stopped (64 mod 3 = 1 float further), and the iteration validates out against a + 0.5 each time."""
    recipe = recipe_dir(tmp_path, unsized_vadd(), libraries, monkeypatch)
    (tmp_path / "a.bin").write_bytes(np.array([1, 2, 3], np.float32).tobytes())
    profile = {"bindings": [{"name": "a", "size": 4 * N, "reinit": True, "rebind": True,
                             "init": {"file": "a.bin"}},
                            BINDINGS[1], {"name": "out", "size": 4 * N}],
               "executions": [{"iterations": 3, "verbose": False,
                               "iteration": {"init": True, "bind": True, "wait": True}}]}
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    with pydla.createRuntime(config=design(recipe)) as rt, \
            ProfileRun(rt, recipe, tmp_path / "profile.json") as run:
        run.run()
        a = run.memory["a"].array(np.float32, (N,))
        out = run.memory["out"].array(np.float32, (N,))
        # three fills: 0, 64, 128 floats into the file; the third starts at 128 mod 3 = 2 (value 3)
        np.testing.assert_array_equal(a[:4], [3, 1, 2, 3])
        np.testing.assert_array_equal(out, a + 0.5)


@pytest.mark.parametrize(("profile", "path", "words"), [
    ({"bindings": {}}, "/bindings", "must be an array"),
    ({"bindings": [{"name": "a"}]}, "/bindings/0", "buffer 'a' needs a 'size' or an 'init' from a file"),
    ({"bindings": [{"name": "a", "init": {"random": True}}]}, "/bindings/0/size", "required"),
    ({"bindings": [{"name": "a", "size": 8, "init": {"random": True, "stride": 1}}]}, "/bindings/0/init",
     "exactly one of"),
    ({"bindings": [{"name": "a", "size": 8, "init": {"stride": 1, "value": 256}}]}, "/bindings/0/init/value",
     "does not fit the stride of 1 bytes"),
    ({"bindings": [{"name": "a", "size": 8, "init": {"file": "x", "begin": 8, "end": 4}}]},
     "/bindings/0/init/end", "is before begin 8"),
    ({"bindings": [{"name": "a", "size": 8, "validate": {"file": "x", "name": "b"}}]},
     "/bindings/0/validate", "exactly one of 'file' and 'name'"),
    ({"bindings": [{"name": "a", "size": 8}, {"name": "a", "size": 8}]}, "/bindings", "bound more than once"),
    ({"bindings": [{"name": "a", "size": 8, "colour": 1}]}, "/bindings/0", "unknown key(s) 'colour'"),
    ({"executions": []}, "/executions", "non-empty array"),
    ({"executions": [{"iterations": 0}]}, "/executions/0/iterations", "must be an integer 1.."),
    ({"executions": [{"mode": "fast"}]}, "/executions/0/mode", "must be 'latency' or 'throughput'"),
    ({"executions": [{"iteration": {"sleep": -1}}]}, "/executions/0/iteration/sleep", "must be an integer"),
    ({"qos": [1]}, "/qos", "must be an object"),
])
def test_a_malformed_profile_is_refused_naming_the_path(profile: dict[str, Any], path: str,
                                                        words: str) -> None:
    with pytest.raises(DlaError) as e:
        parse_profile(profile, "p.json")
    assert e.value.code == NvError.BadValue
    assert e.value.message.startswith(f"p.json: {path}: ") and words in e.value.message


def test_a_binding_of_no_bindable_buffer_is_refused(tmp_path: Path, libraries: Path, monkeypatch) -> None:
    recipe = setup(tmp_path, libraries, monkeypatch, {"bindings": [{"name": "c", "size": 8}]})
    with pydla.createRuntime(config=design(recipe)) as rt, pytest.raises(DlaError) as e:
        ProfileRun(rt, recipe, tmp_path / "profile.json")
    assert e.value.code == NvError.BadParameter
    assert "/bindings/0/name: 'c' is no buffer of the recipe; bindable: a, b, out" in e.value.message


def test_the_runner_command(tmp_path: Path, libraries: Path, monkeypatch, capsys) -> None:
    """`pydla runner RECIPE --profile PROFILE`, as XRT's runner tool: the figures, exit 0; a failed
    validation, exit 1 naming it."""
    from pydla.cli import main

    profile = {"bindings": BINDINGS, "executions": [{"name": "two", "iterations": 2, "validate": True}]}
    recipe = setup(tmp_path, libraries, monkeypatch, profile)
    config = design(recipe)
    assert main(["runner", str(recipe), "--profile", str(tmp_path / "profile.json"), "--config", config]) == 0
    assert "execution 'two' (iterations): 2 run(s) in " in capsys.readouterr().out
    (tmp_path / "want.bin").write_bytes(bytes(4 * N))  # the golden no longer matches
    assert main(["runner", str(recipe), "--profile", str(tmp_path / "profile.json"), "--config", config]) == 1
    out = capsys.readouterr().out
    assert "validation failed: buffer 'out' differs from file 'want.bin' at byte " in out
    assert main(["runner", str(recipe), "--profile", str(tmp_path / "none.json"), "--config", config]) == 1
    assert "none.json: no such file" in capsys.readouterr().err
