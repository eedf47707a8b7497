"""Reading a spec: YAML with ``!include``, source positions, and JSON-schema validation.

Every mapping read from YAML is remembered with the file and line it came from, so that a problem
found later (by the schema or by a semantic rule) can name the place to fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import referencing.exceptions
import yaml

from pydla.errors import DlaError, NvError, file_error

MAX_INCLUDE_DEPTH = 16


@dataclass(frozen=True)
class Location:
    """Where a problem is: file and line, then module, item and field names where known."""

    file: str
    line: int | None = None
    module: str | None = None
    item_kind: str | None = None
    item: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        parts = []
        if self.module:
            parts.append(f"module '{self.module}'")
        if self.item:
            parts.append(f"{self.item_kind or 'item'} '{self.item}'")
        if self.field:
            parts.append(f"field '{self.field}'")
        return where + (": " + ", ".join(parts) if parts else "")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: the rule it breaks, where, and what to do."""

    rule: str
    location: Location
    message: str
    # "warning": pydla filled in what the design's way of writing leaves implicit; the spec is used
    severity: str = "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.location}: {prefix}{self.message} [{self.rule}]"


class SpecError(DlaError):
    """A spec that cannot be used; ``problems`` lists every problem found, not only the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(NvError.BadValue, f"{len(self.problems)} problem(s) in the spec:\n{lines}")

    @property
    def rules(self) -> list[str]:
        return [p.rule for p in self.problems]


@dataclass
class SourceMap:
    """The file and line of each mapping (keyed by object identity) and of each included list."""

    positions: dict[int, tuple[str, int]] = field(default_factory=dict)

    def of(self, obj: object) -> tuple[str, int] | None:
        return self.positions.get(id(obj))


def _make_loader(path: Path, source_map: SourceMap, chain: tuple[Path, ...]) -> type[yaml.SafeLoader]:
    file_name = str(path)

    class Loader(yaml.SafeLoader):
        # YAML 1.1 reads on/off/yes/no as booleans, which turns an enum member named OFF into
        # False; only true and false are booleans in a spec.
        yaml_implicit_resolvers = {
            first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

    booleans = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
    Loader.add_implicit_resolver("tag:yaml.org,2002:bool", booleans, list("tTfF"))

    def construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
        data: dict[Any, Any] = {}
        source_map.positions[id(data)] = (file_name, node.start_mark.line + 1)
        yield data
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<: *anchor' merges; later keys may override merged ones
            key = loader.construct_object(key_node)
            if key in seen:
                raise DlaError(
                    NvError.BadValue,
                    f"{file_name}:{key_node.start_mark.line + 1}: key '{key}' appears twice in one "
                    f"mapping (first at line {seen[key]})",
                )
            seen[key] = key_node.start_mark.line + 1
        data.update(loader.construct_mapping(node))

    def construct_include(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise DlaError(
                NvError.BadValue,
                f"{file_name}:{node.start_mark.line + 1}: !include takes a file name",
            )
        target = (path.parent / str(loader.construct_scalar(node))).resolve()
        where = f"{file_name}:{node.start_mark.line + 1}"
        if target in chain:
            cycle = " -> ".join(str(p) for p in (*chain, target))
            raise DlaError(NvError.BadValue, f"{where}: !include cycle: {cycle}")
        if len(chain) >= MAX_INCLUDE_DEPTH:
            raise DlaError(NvError.BadValue, f"{where}: !include nested deeper than {MAX_INCLUDE_DEPTH}")
        included = _load(target, source_map, chain, where)
        if isinstance(included, list):
            for item in included:
                if isinstance(item, dict) and id(item) not in source_map.positions:
                    source_map.positions[id(item)] = (str(target), 1)
        return included

    Loader.add_constructor("tag:yaml.org,2002:map", construct_map)
    Loader.add_constructor("!include", construct_include)
    return Loader


def _load(path: Path, source_map: SourceMap, chain: tuple[Path, ...], where: str | None) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        error = file_error(path, e)
        raise DlaError(error.code, f"{where}: {error.message}" if where else error.message) from e
    loader = _make_loader(path, source_map, (*chain, path))
    try:
        return yaml.load(text, Loader=loader)  # our Loader derives from SafeLoader
    except yaml.YAMLError as e:
        raise DlaError(NvError.BadValue, f"{path}: not valid YAML: {e}") from e


def load_yaml(path: str | Path) -> tuple[Any, SourceMap]:
    """Load a YAML spec file, following ``!include`` (relative to the including file).

    Usage: ``doc, where = load_yaml("pydla/deviceapi/specs/device_api.yaml")``
    """
    source_map = SourceMap()
    resolved = Path(path).resolve()
    if not resolved.exists():  # e.g. /dev/fd/N of a shell's <(...): keep the name that works
        resolved = Path(path).absolute()
    return _load(resolved, source_map, (), None), source_map


def load_schema() -> dict[str, Any]:
    """The JSON schema every spec is validated against (shipped in the package)."""
    text = resources.files("pydla.deviceapi").joinpath("schema/deviceapi.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


_ITEM_KINDS = {
    "Enums": "enum",
    "Structs": "struct",
    "Messages": "message",
    "TraceEvents": "trace event",
}


def locate(doc: Any, path: list[Any], source_map: SourceMap, default_file: str) -> Location:
    """Turn a JSON path into the spec (``Modules/0/Messages/2/Fields/1``) into a Location."""
    module = item = item_kind = field_name = None
    position = source_map.of(doc)
    node = doc
    parent_key: Any = None
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            break
        if isinstance(node, dict):
            position = source_map.of(node) or position
            name = node.get("Name")
            name = name if isinstance(name, str) else None
            if parent_key == "Modules":
                module = name
            elif parent_key in _ITEM_KINDS:
                item_kind, item = _ITEM_KINDS[parent_key], name
            elif parent_key in ("Fields", "Members"):
                field_name = name
        parent_key = key
    file, line = position if position else (default_file, None)
    return Location(file, line, module, item_kind, item, field_name)


def _strict_integer(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 2.0 as an integer; a size or an id of 2.0 would reach the generated code.
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def schema_problems(doc: Any, source_map: SourceMap, default_file: str) -> list[Problem]:
    """Every schema violation in ``doc``, each with its location."""
    return _problems(_Validator(load_schema()), doc, source_map, default_file, "schema", "")


def _problems(validator: Any, doc: Any, source_map: SourceMap, default_file: str, rule: str,
              suffix: str) -> list[Problem]:
    problems = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        path = list(error.absolute_path)
        where = locate(doc, path, source_map, default_file)
        json_path = "/".join(str(p) for p in path) or "(top level)"
        problems.append(Problem(rule, where, f"{json_path}: {_schema_message(error)}{suffix}"))
    return problems


@dataclass(frozen=True)
class UserSchema:
    """A user's JSON schema (``--schema``): it replaces the bundled one, as the design's generator
    takes its schema. What the user's schema accepts and the generator cannot use (the layout rules
    and the templates rely on the bundled schema's shape) is refused as ``generator-needs``, naming
    the bundled rule, only once the user's schema is satisfied.
    """

    file: str
    validator: Any

    def problems(self, doc: Any, source_map: SourceMap, default_file: str) -> list[Problem]:
        try:
            return _problems(self.validator, doc, source_map, default_file, "user-schema",
                             f" (user schema {self.file})")
        except referencing.exceptions.Unresolvable as e:
            raise DlaError(NvError.BadValue, f"{self.file}: cannot resolve the reference {e.ref!r}: "
                           "a user schema must be self-contained ($ref within the file)") from None


def load_user_schema(path: str | Path) -> UserSchema:
    """Read and check the JSON schema in ``path``; its ``$schema`` picks the draft (default 2020-12)."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise file_error(file, e, flag="--schema") from None
    except UnicodeDecodeError:
        raise DlaError(NvError.FileReadFailed, f"--schema {file}: not UTF-8 text") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise DlaError(NvError.BadValue, f"{file}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    if not isinstance(schema, dict):
        raise DlaError(NvError.BadValue, f"{file}: a JSON schema here is an object, "
                                         f"not a {type(schema).__name__}")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise DlaError(NvError.BadValue, f"{file}: not a valid JSON schema: at {where}: "
                                         f"{e.message}") from None
    # The same strict integers as the bundled schema: 2.0 is not an id.
    strict = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls, type_checker=cls.TYPE_CHECKER.redefine("integer", _strict_integer))
    return UserSchema(file, strict(schema))


def _schema_message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties" and isinstance(error.schema, dict):
        return f"{error.message} (allowed: {', '.join(sorted(error.schema.get('properties', {})))})"
    if error.validator == "not" and isinstance(error.schema, dict):
        required = error.schema.get("not", {}).get("required")
        if required:
            return f"'{required[0]}' is not allowed with this Type"
    required = error.validator_value
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(required, list):
        missing = [k for k in _REQUIRED_HINTS if k in required and k not in error.instance]
        if missing:
            return f"{error.message}: {_REQUIRED_HINTS[missing[0]]}"
    return str(error.message)


# What to write when a key is missing, for the keys an author coming from the Device API code
# generation design's examples is likely to leave out.
_REQUIRED_HINTS = {
    "Length": "add `Length: <bytes>` (a string is a fixed-size char array, NUL-padded: a message has no "
              "variable-length data)",
    "Storage": "add `Storage: <u8, u16, u32, ...>` (an enum is stored as the integer type it names)",
    "Enum": "add `Enum: <the enum's name>`",
    "Struct": "add `Struct: <the struct's name>`",
}
