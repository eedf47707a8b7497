"""A user schema (`pydla deviceapi generate --schema`): replacing the bundled one, every
violation named with the spec file, line and JSON path, and every broken schema file a DlaError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pydla import DlaError, NvError
from pydla.cli import main
from pydla.deviceapi.loader import SpecError, load_user_schema
from pydla.deviceapi.spec import load_spec

SPEC = """\
Name: sensor
Version: 1.0.0
Modules:
  - Name: m
    Messages:
      - Name: read_cmd
        Id: 1
        Type: Command
        Description: Read one channel.
        Fields:
          - {Name: channel, Type: u32}
      - Name: Read_Rsp
        Id: 200
        Type: Response
        Command: read_cmd
"""

# Ours: every message described, names in lower case, ids below 100.
OURS = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "properties": {"Modules": {"items": {"properties": {
        "Messages": {"items": {"$ref": "#/$defs/message"}}}}}},
    "$defs": {"message": {"required": ["Description"],
                          "properties": {"Name": {"pattern": "^[a-z_]+$"}, "Id": {"maximum": 99}}}},
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_violation_names_the_spec_line_json_path_and_schema(tmp_path: Path) -> None:
    spec = write(tmp_path, "sensor.yaml", SPEC)
    schema = write(tmp_path, "ours.json", json.dumps(OURS))
    load_spec(spec)  # the bundled schema alone accepts it
    with pytest.raises(SpecError) as e:
        load_spec(spec, load_user_schema(schema))
    found = [(p.rule, p.location.line, p.location.item, p.message) for p in e.value.problems]
    at, suffix = ("user-schema", 12, "Read_Rsp"), f" (user schema {schema})"
    assert found == [
        (*at, "Modules/0/Messages/1: 'Description' is a required property" + suffix),
        (*at, "Modules/0/Messages/1/Id: 200 is greater than the maximum of 99" + suffix),
        (*at, "Modules/0/Messages/1/Name: 'Read_Rsp' does not match '^[a-z_]+$'" + suffix),
    ]
    assert all(p.location.file == str(spec) for p in e.value.problems)


def test_the_user_schema_replaces_the_bundled_one_but_not_the_generators_needs(tmp_path: Path) -> None:
    """A schema that allows anything accepts what the bundled one refuses; what the generator cannot
    use is then refused as its need, naming the bundled rule."""
    spec = write(tmp_path, "s.yaml", SPEC.replace("Description: Read one channel.", "Owner: me"))
    with pytest.raises(SpecError) as e:
        load_spec(spec, load_user_schema(write(tmp_path, "any.json", "{}")))
    assert e.value.rules == ["generator-needs"]
    assert e.value.problems[0].message.startswith(
        "the user's schema accepts this, but pydla's generator needs what its bundled schema says: ")
    assert "'Owner' was unexpected" in e.value.problems[0].message
    # a narrower schema's own problems come alone: the bundled schema does not add its own
    strict = write(tmp_path, "strict.json", json.dumps({"type": "object", "required": ["Copyright"]}))
    with pytest.raises(SpecError) as e:
        load_spec(spec, load_user_schema(strict))
    assert e.value.rules == ["user-schema"]


def test_draft_07_and_strict_integers(tmp_path: Path) -> None:
    schema = write(tmp_path, "d7.json", json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"small": {"type": "integer", "maximum": 5}},
        "properties": {"Modules": {"items": {"properties": {"Messages": {"items": {
            "properties": {"Id": {"$ref": "#/definitions/small"}}}}}}}}}))
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "s.yaml", SPEC), load_user_schema(schema))
    assert [p.message.split(" (user")[0] for p in e.value.problems] == [
        "Modules/0/Messages/1/Id: 200 is greater than the maximum of 5"]


def test_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "sensor.yaml", SPEC)
    schema = write(tmp_path, "ours.json", json.dumps(OURS))
    args = ["deviceapi", "generate", "--spec", str(spec), "--schema", str(schema),
            "--out-dir", str(tmp_path / "o")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"{spec}:12: module 'm', message 'Read_Rsp': Modules/0/Messages/1: 'Description' is a required " \
           f"property (user schema {schema}) [user-schema]" in err
    assert not (tmp_path / "o").exists()
    fixed = "read_rsp\n        Id: 2\n        Description: x"
    spec.write_text(SPEC.replace("Read_Rsp\n        Id: 200", fixed))
    assert main(args) == 0
    assert (tmp_path / "o" / "sensor.py").is_file()


def test_schema_needs_a_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deviceapi", "generate", "--schema", str(write(tmp_path, "s.json", "{}")), "--check"]) == 1
    assert "checks the specs given with --spec" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "code", "fragment"), [
    (None, NvError.FileNotFound, "--schema {path}: no such file"),
    ('{\n  "type": "object",\n  "properties": {,}\n}', NvError.BadValue, "{path}:3:18: not valid JSON"),
    ("[1, 2]", NvError.BadValue, "{path}: a JSON schema here is an object, not a list"),
    ('{"properties": {"Name": {"type": 12}}}', NvError.BadValue,
     "{path}: not a valid JSON schema: at properties/Name/type: 12 is not valid"),
    ('{"$schema": "http://json-schema.org/draft-07/schema#", "required": "Name"}', NvError.BadValue,
     "{path}: not a valid JSON schema: at required: 'Name' is not of type 'array'"),
])
def test_broken_schema_files(tmp_path: Path, text: str | None, code: NvError, fragment: str) -> None:
    path = tmp_path / "bad.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(DlaError) as e:
        load_user_schema(path)
    assert e.value.code == code and fragment.format(path=path) in e.value.message, e.value.message


def test_a_reference_outside_the_schema_is_an_error(tmp_path: Path) -> None:
    schema = load_user_schema(write(tmp_path, "ref.json", '{"$ref": "https://example.invalid/other.json"}'))
    with pytest.raises(DlaError) as e:
        load_spec(write(tmp_path, "s.yaml", SPEC), schema)
    assert "cannot resolve the reference 'https://example.invalid/other.json'" in e.value.message
    assert str(tmp_path / "ref.json") in e.value.message


def test_validate_takes_the_schema_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "sensor.yaml", SPEC)
    schema = write(tmp_path, "ours.json", json.dumps(OURS))
    assert main(["deviceapi", "validate", str(spec)]) == 0
    assert main(["deviceapi", "validate", "--schema", str(schema), str(spec)]) == 1
    out = capsys.readouterr().out
    assert f"{spec}: 3 problem(s)" in out and "[user-schema]" in out
