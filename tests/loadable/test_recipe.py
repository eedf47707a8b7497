"""The run recipe: the seed's examples (adapted), one test per rule, the schema agreeing with the
code on every recipe here, and ``pydla validate``."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.loadable.recipe import RecipeError, load_recipe, loads, parse_recipe, schema
from pydla.target.config import bundled_configs


def seed_example() -> dict[str, Any]:
    """XRT's complete example with its CPU runs, adapted: the header names a bundled device
    configuration, whose DLA engine is compute unit 'dla'."""
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
            "kernels": [{"name": "k1", "instance": "dla", "ctrlcode": "no-ctrl-packet.elf"}],
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
    "no-device": (lambda d: d["header"].pop("device"), "/header", "'xclbin' (or pydla's 'device') is "
                  "required"),
    "header-not-object": (lambda d: d.update(header=["full"]), "/header", "must be an object"),
    "empty-xclbin": (lambda d: d["header"].update(xclbin=""), "/header/xclbin", "non-empty string"),
    "xclbin-and-device-disagree": (lambda d: d["header"].update(xclbin="small"), "/header/device",
                                   "must name the same device configuration"),
    "absolute-xclbin": (lambda d: d["header"].update(xclbin="/etc/d.xclbin", device="/etc/d.xclbin"),
                        "/header/xclbin", "must be relative"),
    "dotdot-device": (lambda d: d["header"].update(device="../full.json"), "/header/device",
                      "must be relative"),
    "header-name-not-string": (lambda d: d["header"].update(name=3), "/header/name", "must be a string"),
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
    semantic = {"internal-without-size", "duplicate-buffer", "xclbin-and-device-disagree", "absolute-xclbin",
                "dotdot-device", "absolute-library", "dotdot-library",
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


GOOD: dict[str, Any] = {
    "xclbin-only": lambda d: (d["header"].pop("device"), d["header"].update(xclbin="full")),
    "xclbin-and-device-equal": lambda d: d["header"].update(xclbin="full"),
    "header-metadata": lambda d: d["header"].update(compiler="VAIML 1.2", build={"id": 7, "tags": ["a"]}),
    "spill-without-size": lambda d: d["resources"]["buffers"].append({"name": "s", "type": "spill"}),
    "unknown-with-size": lambda d: d["resources"]["buffers"].append({"name": "u", "type": "unknown",
                                                                     "size": 64}),
    "output-with-size": lambda d: d["resources"]["buffers"][2].update(size=8196),
    "input-with-file": lambda d: d["resources"]["buffers"][1].update(file="ifm.bin"),
    "internal-with-file": lambda d: d["resources"]["buffers"].__setitem__(
        3, {"name": "ifm_int", "type": "internal", "file": "start.bin"}),
}


@pytest.mark.parametrize("case", list(GOOD))
def test_xrt_header_and_buffer_rules_accept(case: str) -> None:
    doc = _mutated(GOOD[case])
    parse_recipe(doc)
    assert schema_ok(doc)


def test_created_and_bound_buffers() -> None:
    doc = _mutated(lambda d: d["resources"]["buffers"].extend([
        {"name": "s", "type": "spill"}, {"name": "o2", "type": "output", "size": 16},
        {"name": "i2", "type": "internal", "file": "x.bin"}]))
    buffers = parse_recipe(doc).buffers
    assert [n for n, b in buffers.items() if b.external] == ["wts", "ifm", "ofm", "s"]
    assert all(b.bindable for n, b in buffers.items() if b.type != "internal")
    assert not buffers["ifm_int"].bindable


# XRT's run-recipe documentation, every example, as written there but for its JSON slips: trailing
# commas, a '"internal:' left open, stray ']' after the constants, a missing ',' after '"where":
# "cpu"', and '...' for "more runs". Fragments of a recipe ("resources": {...}) are wrapped in braces.
DOC_HEADER = """{
  "header": {
    "xclbin": "design.xclbin"
  }
}"""
DOC_KERNELS = """{
  "resources": {
    "kernels": [
      {
        "name": "k1",
        "instance": "DPU",
        "ctrlcode": "no-ctrl-packet.elf"
      }
    ]
  }
}"""
DOC_CPUS = """{
  "resources": {
    "cpus": [
      {
        "name": "convert_ifm",
        "library_path": "umd/convert.dll"
      },
      {
        "name": "convert_ofm",
        "library_path": "umd/convert.dll"
      },
      {
        "name": "average_pool",
        "library_path": "umd/operators.dll"
      }
    ]
  }
}"""
DOC_EXTERNAL_BUFFERS = """{
  "resources": {
    "buffers": [
      {
        "name": "wts",
        "type": "input"
      },
      {
        "name": "ifm",
        "type": "input"
      },
      {
        "name": "ofm",
        "type": "output"
      }
    ]
  }
}"""
DOC_SIZED_OUTPUT = """{
        "name": "ofm",
        "type": "output",
        "size": 8196
      }"""
DOC_INTERNAL_BUFFERS = """{
  "resources": {
    "buffers": [
      {
        "name": "ifm_int",
        "type": "internal",
        "size": "1024"
      },
      {
        "name": "ofm_int",
        "type": "internal",
        "size": "1024"
      },
      {
        "name": "b0",
        "type": "internal",
        "size": "1024"
      },
      {
        "name": "b1",
        "type": "internal",
        "size": "1024"
      },
      {
        "name": "b2",
        "type": "internal",
        "size": "1024"
      }
    ]
  }
}"""
DOC_EXECUTION = """{
  "execution": {
    "runs": [
      {
        "name": "convert_ifm",
        "where": "cpu",
        "arguments" : [
            { "name": "ifm", "argidx": 0 },
            { "name": "ifm_int", "argidx": 1 }
         ],
         "constants" : [
            { "value": "nchw2nchw4c", "type": "string", "argidx": 2 }
         ]
      },
      {
        "name": "k1",
        "arguments" : [
            { "name": "ifm_int", "size": 512, "offset": 0, "argidx": 3 },
            { "name": "wts", "argidx": 4 },
            { "name": "ofm_int", "size": 512, "offset": 512, "argidx": 5 }
        ]
      },
      {
        "name": "k1",
        "arguments" : [
            { "name": "ifm_int", "size": 512, "offset": 512, "argidx": 3 },
            { "name": "wts", "argidx": 4 },
            { "name": "ofm_int", "size": 512, "offset": 0, "argidx": 5 }
        ]
      },
      {
        "name": "convert_ofm",
        "where": "cpu",
        "arguments" : [
            { "name": "ofm_int", "argidx": 0 },
            { "name": "ofm", "argidx": 1 }
         ],
         "constants" : [
            { "value": "nchw4c2nchw", "argidx": 2 }
         ]
      }
    ]
  }
}"""
DOC_DPU_CONSTANTS = """{
  "execution": {
    "runs": [
      {
        "name": "k1",
        "arguments" : [
            { "name": "wts", "argidx": 4 },
            { "name": "ifm", "argidx": 3 },
            { "name": "ofm", "argidx": 5 }
        ],
        "constants" : [
            { "value": "3", "type": "int", "argidx": 0 },
            { "value": "0", "type": "int", "argidx": 1 },
            { "value": "0", "type": "int", "argidx": 2 },
            { "value": "0", "type": "int", "argidx": 6 },
            { "value": "0", "type": "int", "argidx": 7 }
        ]
      }
    ]
  }
}"""
DOC_COMPLETE = """{
  "header": {
    "xclbin": "design.xclbin"
  },
  "resources": {
    "buffers": [
      {
        "name": "wts",
        "type": "input"
      },
      {
        "name": "ifm",
        "type": "input"
      },
      {
        "name": "ofm",
        "type": "output"
      }
    ],
    "kernels": [
      {
        "name": "k1",
        "instance": "DPU",
        "ctrlcode": "no-ctrl-packet.elf"
      }
    ]
  },
  "execution": {
    "runs": [
      {
        "name": "k1",
        "arguments" : [
            { "name": "wts", "argidx": 4 },
            { "name": "ifm", "argidx": 3 },
            { "name": "ofm", "argidx": 5 }
         ],
         "constants": [
            { "value": "3", "type": "int", "argidx": 0 },
            { "value": "0", "type": "int", "argidx": 1 },
            { "value": "0", "type": "int", "argidx": 2 },
            { "value": "0", "type": "int", "argidx": 6 },
            { "value": "0", "type": "int", "argidx": 7 }
        ]
      }
    ]
  }
}"""


def doc_recipe(*fragments: str, sized_output: bool = False) -> dict[str, Any]:
    """A recipe assembled from the documentation's fragments (loads() checks each as JSON)."""
    out: dict[str, Any] = {"header": {}, "resources": {}, "execution": {"runs": []}}
    for text in fragments:
        part = loads(text, "the documentation")
        out["header"].update(part.get("header", {}))
        for key, items in part.get("resources", {}).items():
            out["resources"].setdefault(key, []).extend(items)
        out["execution"]["runs"] += part.get("execution", {}).get("runs", [])
    if sized_output:
        sized = loads(DOC_SIZED_OUTPUT, "the documentation")
        out["resources"]["buffers"] = [sized if b["name"] == sized["name"] else b
                                       for b in out["resources"]["buffers"]]
    return out


# The documentation's recipes: its CPU pipeline (every resource snippet and the execution snippet),
# the same with its sized output, the DPU run with its constants, and the complete recipe.
DOC_PIPELINE = (DOC_HEADER, DOC_EXTERNAL_BUFFERS, DOC_INTERNAL_BUFFERS, DOC_KERNELS, DOC_CPUS, DOC_EXECUTION)
DOC_RECIPES: dict[str, dict[str, Any]] = {
    "pipeline": doc_recipe(*DOC_PIPELINE),
    "pipeline-sized-output": doc_recipe(*DOC_PIPELINE, sized_output=True),
    "dpu-constants": doc_recipe(DOC_HEADER, DOC_EXTERNAL_BUFFERS, DOC_KERNELS, DOC_DPU_CONSTANTS),
    "complete": loads(DOC_COMPLETE, "the documentation"),
}


@pytest.mark.parametrize("name", list(DOC_RECIPES))
def test_the_documentation_recipes_validate(name: str) -> None:
    doc = DOC_RECIPES[name]
    recipe = parse_recipe(doc)
    assert schema_ok(doc)
    assert recipe.device == "design.xclbin" and recipe.device_path == "/header/xclbin"
    assert recipe.kernels["k1"].instance == "DPU"


def test_the_documentation_pipeline_as_parsed() -> None:
    recipe = parse_recipe(DOC_RECIPES["pipeline-sized-output"])
    assert [(w, [r.name for r in runs]) for w, runs in recipe.runlists()] == [
        ("cpu", ["convert_ifm"]), ("npu", ["k1", "k1"]), ("cpu", ["convert_ofm"])]
    assert recipe.buffers["ofm"].size == 8196 and not recipe.buffers["ofm"].external
    assert recipe.buffers["b1"].size == 1024 and recipe.buffers["wts"].external
    assert recipe.runs[3].constants[0].type == "string"  # no type: a string
    assert [c.value for c in parse_recipe(DOC_RECIPES["complete"]).runs[0].constants] == [3, 0, 0, 0, 0]


def test_the_documentation_slips_are_refused_as_json() -> None:
    slips = {'"xclbin": "design.xclbin",\n  }': "(a trailing comma?)",
             '"type": "internal:,\n        "size": "1024"':
                 "line 1 column 21: Invalid control character at (a string not closed on its line?)",
             '"where": "cpu"\n        "arguments" : []': "Expecting ',' delimiter"}
    for text, message in slips.items():
        with pytest.raises(DlaError, match=re.escape(message)) as e:
            loads("{" + text + "}", "r.json")
        assert e.value.code == NvError.BadValue


def config_file(path: Path, name: str = "design", engine: str = "DPU:DPU") -> Path:
    """A device configuration file at ``path``: the bundled 'full' one, renamed, its DLA engine the
    compute unit ``engine`` (XRT's documentation runs kernel k1 on instance DPU)."""
    from importlib import resources

    raw = json.loads(resources.files("pydla.target").joinpath("configs/full.json").read_text())
    raw["name"] = name
    engines = [cu for cu in raw["ip_layout"] if cu["model"] == "engine"]
    engines[0]["m_name"] = engine
    path.write_text(json.dumps(raw))
    return path


def layout(*names: str) -> Any:
    """A configuration with compute units ``names`` ("kernel:instance") and nothing else."""
    from dataclasses import replace

    from pydla.target.config import load_config

    config = load_config("full")
    units = tuple(replace(config.ip_layout[0], name=n) for n in names)
    return replace(config, name="design", ip_layout=units)


def test_the_header_names_a_configuration_file_next_to_the_recipe(tmp_path: Path, capsys) -> None:
    from pydla.loadable.recipe_config import check_config

    recipe = tmp_path / "recipe.json"
    recipe.write_text(DOC_COMPLETE)
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe)
    bundled = ", ".join(bundled_configs())
    assert e.value.errors == [("/header/xclbin", f"device configuration (header.xclbin) 'design.xclbin' not "
                                                 f"found (looked for {tmp_path / 'design.xclbin'}); nor is "
                                                 f"it a bundled configuration ({bundled})")]
    assert main(["validate", str(recipe)]) == 1
    out = capsys.readouterr().out
    assert "/header/xclbin: device configuration (header.xclbin) 'design.xclbin' not found" in out
    (tmp_path / "design.xclbin").write_text("{}")
    with pytest.raises(RecipeError, match=r"/header/xclbin: .*missing field"):
        load_recipe(recipe)
    config_file(tmp_path / "design.xclbin")
    assert load_recipe(recipe).device == "design.xclbin"
    assert check_config(load_recipe(recipe), recipe).name == "design"
    assert main(["validate", str(recipe)]) == 0
    # a bundled name; a file elsewhere only when unsafe paths are allowed
    recipe.write_text(DOC_COMPLETE.replace('"design.xclbin"', '"small"').replace('"DPU"', '"dla"'))
    assert check_config(load_recipe(recipe), recipe).name == "small"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link.json").symlink_to(config_file(tmp_path.parent / "outside.json"))
    recipe.write_text(DOC_COMPLETE.replace('"design.xclbin"', '"sub/link.json"'))
    with pytest.raises(RecipeError, match="outside the recipe's directory"):
        load_recipe(recipe)
    assert load_recipe(recipe, allow_unsafe_paths=True).device == "sub/link.json"
    # load_recipe(check_config=False) (what the runner reads) loads no configuration
    recipe.write_text(DOC_COMPLETE.replace('"design.xclbin"', '"nowhere.json"'))
    assert load_recipe(recipe, check_config=False).device == "nowhere.json"


def test_kernel_instances_must_name_compute_units() -> None:
    from pydla.loadable.recipe_config import compute_unit_errors

    config = layout("DPU:DPU", "dla:dla")
    recipe = parse_recipe(DOC_RECIPES["complete"])
    assert compute_unit_errors(recipe, config) == []
    for instance in ("dla", "dla:dla", "DPU:DPU"):  # instance, kernel:instance or kernel name
        doc = copy.deepcopy(DOC_RECIPES["complete"])
        doc["resources"]["kernels"][0]["instance"] = instance
        assert compute_unit_errors(parse_recipe(doc), config) == []
    doc["resources"]["kernels"][0]["instance"] = "dpu"  # names are case-sensitive, as in XRT
    assert compute_unit_errors(parse_recipe(doc), config) == [(
        "/resources/kernels/0/instance", "'dpu' is no compute unit of device configuration 'design' (its "
                                         "IP_LAYOUT has: DPU (DPU:DPU), dla (dla:dla))")]
    # a configuration without an IP_LAYOUT has nothing to check against
    assert compute_unit_errors(parse_recipe(doc), layout()) == []


def test_validate_refuses_an_unknown_instance(tmp_path: Path, capsys) -> None:
    config_file(tmp_path / "design.xclbin")
    recipe = tmp_path / "recipe.json"
    recipe.write_text(DOC_COMPLETE.replace('"DPU"', '"NPU"'))
    assert main(["validate", str(recipe)]) == 1
    out = capsys.readouterr().out
    assert out == (f"{recipe}: 1 problem(s)\n  /resources/kernels/0/instance: 'NPU' is no compute unit of "
                   "device configuration 'design' (its IP_LAYOUT has: DPU (DPU:DPU), noop_hs (noop:noop_hs), "
                   "noop_chain (noop:noop_chain), vadd (vadd:vadd), scale (scale_i16:scale), tile0 "
                   "(shave:tile0), tile1 (shave:tile1))\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe)
    assert e.value.errors[0][0] == "/resources/kernels/0/instance"
    recipe.write_text(DOC_COMPLETE)
    assert main(["validate", str(recipe)]) == 0
    # the bundled configurations name the DLA engine 'dla', as compiled loadables do
    recipe.write_text(DOC_COMPLETE.replace('"design.xclbin"', '"full"'))
    with pytest.raises(RecipeError, match="'DPU' is no compute unit of device configuration 'full'"):
        load_recipe(recipe)
    recipe.write_text(DOC_COMPLETE.replace('"design.xclbin"', '"full"').replace('"DPU"', '"dla"'))
    assert load_recipe(recipe).kernels["k1"].instance == "dla"
