"""The run recipe: the seed's examples (adapted), one test per rule, the schema agreeing with the
code on every recipe here, and ``pydla validate``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.loadable.recipe import RecipeError, load_recipe, loads, parse_recipe, schema


def seed_example() -> dict[str, Any]:
    """The seed's complete example with its CPU runs, adapted: header names a device config."""
    return {
        "header": {"device": "full", "version": "1.0.0"},
        "resources": {
            "buffers": [
                {"name": "wts", "type": "weight"},
                {"name": "ifm", "type": "input"},
                {"name": "ofm", "type": "output"},
                {"name": "ifm_int", "type": "internal", "size": "1024"},
                {"name": "ofm_int", "type": "internal", "size": 1024},
            ],
            "kernels": [{"name": "k1", "instance": "DPU", "ctrlcode": "no-ctrl-packet.elf"}],
            "cpus": [{"name": "convert_ifm", "library_path": "umd/convert.so"},
                     {"name": "convert_ofm", "library_path": "umd/convert.so"}],
        },
        "execution": {"runs": [
            {"name": "convert_ifm", "where": "cpu",
             "arguments": [{"name": "ifm", "argidx": 0}, {"name": "ifm_int", "argidx": 1}],
             "constants": [{"value": "nchw2nchw4c", "type": "string", "argidx": 2}]},
            {"name": "k1", "arguments": [
                {"name": "ifm_int", "size": 512, "offset": 0, "argidx": 3},
                {"name": "wts", "argidx": 4},
                {"name": "ofm_int", "size": 512, "offset": 512, "argidx": 5}],
             "constants": [{"value": "3", "type": "int", "argidx": 0},
                           {"value": 0, "type": "int", "argidx": 1}]},
            {"name": "k1", "arguments": [
                {"name": "ifm_int", "size": 512, "offset": 512, "argidx": 3},
                {"name": "wts", "argidx": 4},
                {"name": "ofm_int", "size": 512, "offset": 0, "argidx": 5}]},
            {"name": "convert_ofm", "where": "cpu",
             "arguments": [{"name": "ofm_int", "argidx": 0}, {"name": "ofm", "argidx": 1}],
             "constants": [{"value": "nchw4c2nchw", "argidx": 2}]},
        ]},
    }


def schema_ok(doc: Any) -> bool:
    return not list(jsonschema.Draft202012Validator(schema()).iter_errors(doc))


def test_seed_example_is_valid_and_grouped_into_runlists() -> None:
    recipe = parse_recipe(seed_example())
    assert recipe.device == "full"
    assert recipe.buffers["ifm_int"].size == 1024 and recipe.buffers["ifm"].external
    assert [(w, [r.name for r in runs]) for w, runs in recipe.runlists()] == [
        ("cpu", ["convert_ifm"]), ("npu", ["k1", "k1"]), ("cpu", ["convert_ofm"])]
    k1 = recipe.runs[1]
    first = k1.arguments[0]
    assert (first.name, first.argidx, first.size, first.offset) == ("ifm_int", 3, 512, 0)
    assert [(c.value, c.type) for c in k1.constants] == [(3, "int"), (0, "int")]
    assert recipe.runs[3].constants[0].type == "string"
    assert schema_ok(seed_example())


def _mutated(change) -> dict[str, Any]:
    doc = copy.deepcopy(seed_example())
    change(doc)
    return doc


BAD: dict[str, tuple[Any, str, str]] = {
    "missing-header": (lambda d: d.pop("header"), "", "'header' is required"),
    "unknown-top-key": (lambda d: d.update(extra=1), "/extra", "unknown key"),
    "no-device": (lambda d: d["header"].pop("device"), "/header", "'device' is required"),
    "bad-version": (lambda d: d["header"].update(version="1.0"), "/header/version", "MAJOR.MINOR.PATCH"),
    "typo-type": (lambda d: d["resources"]["buffers"][3].update(type="internal:"),
                  "/resources/buffers/3/type", "is not a buffer type"),
    "internal-without-size": (lambda d: d["resources"]["buffers"][4].pop("size"),
                              "/resources/buffers/4", "needs a size"),
    "size-not-a-number": (lambda d: d["resources"]["buffers"][4].update(size="1k"),
                          "/resources/buffers/4/size", "non-negative integer"),
    "size-zero": (lambda d: d["resources"]["buffers"][4].update(size=0), "/resources/buffers/4/size",
                  "at least 1"),
    "duplicate-buffer": (lambda d: d["resources"]["buffers"].append({"name": "ifm", "type": "input"}),
                         "/resources/buffers/5/name", "defined twice"),
    "bad-name": (lambda d: d["resources"]["buffers"][0].update(name="9w"), "/resources/buffers/0/name",
                 "not a valid name"),
    "kernel-missing-ctrlcode": (lambda d: d["resources"]["kernels"][0].pop("ctrlcode"),
                                "/resources/kernels/0", "'ctrlcode' is required"),
    "absolute-library": (lambda d: d["resources"]["cpus"][0].update(library_path="/usr/lib/x.so"),
                         "/resources/cpus/0/library_path", "must be relative"),
    "dotdot-library": (lambda d: d["resources"]["cpus"][0].update(library_path="../x.so"),
                       "/resources/cpus/0/library_path", "must be relative"),
    "unknown-kernel": (lambda d: d["execution"]["runs"][1].update(name="k9"), "/execution/runs/1/name",
                       "no kernel 'k9'"),
    "unknown-cpu": (lambda d: d["execution"]["runs"][0].update(name="k1"), "/execution/runs/0/name",
                    "no cpu function 'k1'"),
    "bad-where": (lambda d: d["execution"]["runs"][1].update(where="gpu"), "/execution/runs/1/where",
                  "must be 'npu' or 'cpu'"),
    "unknown-buffer": (lambda d: d["execution"]["runs"][1]["arguments"][1].update(name="nope"),
                       "/execution/runs/1/arguments/1/name", "no buffer 'nope'"),
    "sub-buffer-past-end": (lambda d: d["execution"]["runs"][1]["arguments"][2].update(offset=600),
                            "/execution/runs/1/arguments/2", "exceeds buffer 'ofm_int'"),
    "argidx-twice": (lambda d: d["execution"]["runs"][1]["arguments"][1].update(argidx=3),
                     "/execution/runs/1/arguments/1/argidx", "already used"),
    "argidx-constant-clash": (lambda d: d["execution"]["runs"][1]["constants"][0].update(argidx=4),
                              "/execution/runs/1/constants/0/argidx", "already used"),
    "argidx-range": (lambda d: d["execution"]["runs"][1]["arguments"][1].update(argidx=256),
                     "/execution/runs/1/arguments/1/argidx", "0..255"),
    "int-constant-not-int": (lambda d: d["execution"]["runs"][1]["constants"][0].update(value="x3"),
                             "/execution/runs/1/constants/0/value", "not an integer"),
    "bad-constant-type": (lambda d: d["execution"]["runs"][1]["constants"][0].update(type="bool"),
                          "/execution/runs/1/constants/0/type", "not a constant type"),
    "runs-not-array": (lambda d: d["execution"].update(runs={}), "/execution/runs", "must be an array"),
    "newer-major-version": (lambda d: d["header"].update(version="7.0.0"), "/header/version",
                            "reads recipe version 1.x (writes 1.0.0); the recipe is newer: upgrade pydla"),
    "older-major-version": (lambda d: d["header"].update(version="0.9.0"), "/header/version",
                            "the recipe is older"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_each_rule_rejects_with_its_json_path(case: str) -> None:
    change, path, fragment = BAD[case]
    doc = _mutated(change)
    with pytest.raises(RecipeError) as e:
        parse_recipe(doc)
    assert any(p == path and fragment in m for p, m in e.value.errors), e.value.errors


@pytest.mark.parametrize("case", list(BAD))
def test_schema_agrees_with_the_code(case: str) -> None:
    """What the code rejects for its shape, the schema rejects too (references between sections,
    argidx clashes and sub-buffer bounds are beyond a schema: those the schema accepts)."""
    doc = _mutated(BAD[case][0])
    semantic = {"internal-without-size", "duplicate-buffer", "absolute-library", "dotdot-library",
                "unknown-kernel", "unknown-cpu", "unknown-buffer", "sub-buffer-past-end", "argidx-twice",
                "argidx-constant-clash", "int-constant-not-int", "size-zero", "newer-major-version",
                "older-major-version"}
    assert schema_ok(doc) == (case in semantic)


def test_all_problems_are_reported_at_once() -> None:
    def change(d: dict[str, Any]) -> None:
        d["resources"]["buffers"][3]["type"] = "internal:"
        d["execution"]["runs"][1]["name"] = "k9"
        d["header"]["version"] = "x"

    with pytest.raises(RecipeError) as e:
        parse_recipe(_mutated(change))
    assert len(e.value.errors) == 3


def test_unsafe_paths_allowed_when_asked() -> None:
    doc = _mutated(lambda d: d["resources"]["cpus"][0].update(library_path="/opt/x.so"))
    assert parse_recipe(doc, allow_unsafe_paths=True).cpus["convert_ifm"].library_path == "/opt/x.so"


def test_trailing_comma_and_nan_are_not_json() -> None:
    with pytest.raises(DlaError, match="line 1 column"):
        loads('{"header": {"device": "full",}}', "r.json")
    with pytest.raises(DlaError, match="NaN is not JSON"):
        loads('{"x": NaN}', "r.json")


def test_json_nesting_is_bounded() -> None:
    # json's parser recurses per level: 2,000 levels would raise RecursionError, not a DlaError.
    for deep in ("[" * 2000 + "]" * 2000, '{"a":' * 2000 + "1" + "}" * 2000):
        with pytest.raises(DlaError, match="nested deeper than 64 levels") as e:
            loads(deep, "r.json")
        assert e.value.code == NvError.BadValue
    assert loads("[" * 64 + "]" * 64, "r.json") == eval("[" * 64 + "]" * 64)
    # brackets inside strings (escaped quotes too) are text, not nesting
    text = '{"s": "' + "[{" * 100 + '\\" [[["}'
    assert loads(text, "r.json") == json.loads(text)


def test_validate_reports_deep_json_as_an_error(tmp_path: Path, capsys) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    assert main(["validate", str(deep)]) == 1
    assert "nested deeper than 64 levels" in capsys.readouterr().err


def test_validate_command(tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(seed_example()))
    assert main(["validate", str(good)]) == 0
    assert "valid (5 buffers, 1 kernels, 2 cpu functions, 4 runs in 3 runlists)" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_mutated(BAD["typo-type"][0])))
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "1 problem(s)" in out and "/resources/buffers/3/type" in out
    broken = tmp_path / "broken.json"
    broken.write_text('{"header": {"device": "full",},}')
    assert main(["validate", str(broken)]) == 1
    assert "not valid JSON at line 1" in capsys.readouterr().err
    assert load_recipe(good).device == "full"
