"""The run recipe (XRT's run recipe): a network's execution plan as JSON (header, resources, execution).

The loadable carries one; a standalone recipe file can name external files instead. This module
checks a recipe by hand (the core needs no jsonschema) and reports every problem with its JSON path;
``schema/recipe.schema.json`` states the same rules for other tools, and a test runs every recipe
the project uses through both.

Decisions on the examples of XRT's run-recipe documentation (which contain slips):

- trailing commas are not JSON and are rejected, with the line and column;
- a buffer type must be one of input, output, inout, internal, weight, spill, unknown (so the
  documentation's ``"internal:`` is rejected, naming the valid types);
- sizes, offsets and int constants may be written as JSON integers or as strings of decimal digits
  (the documentation writes ``"size": "1024"`` and ``{"value": "3", "type": "int"}``); a constant without a
  type is a string;
- ``where`` defaults to ``npu``.

The header names the device configuration as XRT does (``xclbin``) or as pydla always has
(``device``); both may be given if they say the same. Other header keys are metadata ("the header
section can be amended") and are kept, not checked; every other object is strict.

Buffers follow XRT's rules: one with a ``size`` (or a ``file``) is created by the runner whatever
its type, and binding one is then optional; one without is bound by the application. An internal
buffer cannot be bound, so one without a size makes a recipe that can never run: refused here.

Usage::

    recipe = load_recipe("recipe.json")          # RecipeError listing every problem
    for run in recipe.runs: ...
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydla.errors import DlaError, NvError, file_error

# Re-exported: the reader was here first and other modules import it from here.
from pydla.loadable.recipe_json import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from pydla.loadable.recipe_json import loads as loads

BUFFER_TYPES = ("input", "output", "inout", "internal", "weight", "spill", "unknown")
# The types a loadable's runtime binds (its tensors), whatever their size.
EXTERNAL_TYPES = ("input", "output", "inout")
# What the runner's bind_input and bind_output accept (XRT binds any buffer but an internal one,
# which the runner manages): graph inputs and what feeds kernels; graph outputs; either for the
# types that say nothing of a direction.
BIND_INPUT_TYPES = ("input", "inout", "weight", "spill", "unknown")
BIND_OUTPUT_TYPES = ("output", "inout", "spill", "unknown")
CONSTANT_TYPES = ("int", "float", "string")
MAX_ARGIDX = 255
# The recipe format this pydla writes; it reads any recipe of the same major version.
RECIPE_VERSION = (1, 0, 0)
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class RecipeError(DlaError):
    """A recipe with problems; ``errors`` holds (JSON path, message) for each."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.source = source
        self.errors = errors
        lines = "\n".join(f"  {path}: {message}" for path, message in errors)
        super().__init__(NvError.BadValue, f"{source}: {len(errors)} problem(s) in the recipe:\n{lines}")


@dataclass(frozen=True)
class Buffer:
    name: str
    type: str
    size: int | None
    file: str | None = None

    @property
    def external(self) -> bool:
        """Bound by the application: neither a size nor a file says how to create it."""
        return self.size is None and self.file is None

    @property
    def bindable(self) -> bool:
        """Whether the application may bind memory to it (any type but internal)."""
        return self.type in BIND_INPUT_TYPES or self.type in BIND_OUTPUT_TYPES


@dataclass(frozen=True)
class Kernel:
    name: str
    instance: str
    ctrlcode: str


@dataclass(frozen=True)
class Cpu:
    name: str
    library_path: str


@dataclass(frozen=True)
class Argument:
    name: str
    argidx: int
    size: int | None
    offset: int


@dataclass(frozen=True)
class Constant:
    value: int | float | str
    type: str
    argidx: int


@dataclass(frozen=True)
class Run:
    name: str
    where: str
    arguments: tuple[Argument, ...]
    constants: tuple[Constant, ...]


@dataclass(frozen=True)
class Recipe:
    # The device configuration, from header.xclbin (XRT's key) or header.device (pydla's).
    device: str
    version: str | None
    buffers: dict[str, Buffer]
    kernels: dict[str, Kernel]
    cpus: dict[str, Cpu]
    runs: tuple[Run, ...]
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def device_path(self) -> str:
        """The JSON path the configuration came from (for errors about it)."""
        header = self.raw.get("header") if isinstance(self.raw, dict) else None
        key = "xclbin" if isinstance(header, dict) and "xclbin" in header else "device"
        return f"/header/{key}"

    def runlists(self) -> list[tuple[str, list[Run]]]:
        """Contiguous runs of the same ``where`` grouped, in order (the runner's runlists)."""
        out: list[tuple[str, list[Run]]] = []
        for run in self.runs:
            if out and out[-1][0] == run.where:
                out[-1][1].append(run)
            else:
                out.append((run.where, [run]))
        return out


class _Checker:
    def __init__(self, allow_unsafe_paths: bool) -> None:
        self.errors: list[tuple[str, str]] = []
        self.allow_unsafe_paths = allow_unsafe_paths

    def error(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def obj(self, value: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...],
            *, more: bool = False) -> bool:
        """An object with the required keys and, unless ``more``, no key but the optional ones."""
        if not isinstance(value, dict):
            self.error(path, f"must be an object, not {_kind(value)}")
            return False
        for key in required:
            if key not in value:
                self.error(path, f"'{key}' is required")
        for key in () if more else value:
            if key not in required and key not in optional:
                allowed = ", ".join((*required, *optional))
                self.error(f"{path}/{key}", f"unknown key '{key}' (allowed: {allowed})")
        return True

    def array(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, f"must be an array, not {_kind(value)}")
            return []
        return value

    def string(self, value: Any, path: str, *, name: bool = False) -> str | None:
        if not isinstance(value, str) or not value:
            self.error(path, f"must be a non-empty string, not {_kind(value)}")
            return None
        if name and (len(value) > 128 or not set(value) <= _NAME_CHARS
                     or not (value[0].isalpha() or value[0] == "_")):
            self.error(path, f"'{value}' is not a valid name (letters, digits, _ . -; starting "
                             "with a letter or _)")
            return None
        return value

    def count(self, value: Any, path: str) -> int | None:
        if isinstance(value, bool):
            self.error(path, "must be a non-negative integer, not a boolean")
            return None
        if isinstance(value, int) and value >= 0:
            return value
        if isinstance(value, str) and value.isdigit() and value.isascii():
            return int(value)
        self.error(path, f"must be a non-negative integer (or a string of digits), not {value!r}")
        return None

    def argidx(self, value: Any, path: str) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ARGIDX:
            self.error(path, f"must be an integer 0..{MAX_ARGIDX}, not {value!r}")
            return None
        return value

    def file_name(self, value: str | None, path: str) -> None:
        """A path holds no NUL, lone surrogate or control character (no file name can, or should)."""
        if value is not None and not value.isprintable():
            self.error(path, f"{value!r} holds a character that is not printable: not a file name")

    def relative(self, value: str, path: str, against: str) -> None:
        self.file_name(value, path)
        p = PurePosixPath(value.replace("\\", "/"))
        if not self.allow_unsafe_paths and (p.is_absolute() or ".." in p.parts or ":" in value):
            self.error(path, f"'{value}' must be relative, without '..' ({against})")


def parse_recipe(doc: Any, source: str = "recipe", *, allow_unsafe_paths: bool = False) -> Recipe:
    """Check ``doc`` (parsed JSON) and build a :class:`Recipe`; RecipeError lists every problem."""
    c = _Checker(allow_unsafe_paths)
    if not c.obj(doc, "", ("header", "resources", "execution"), ()):
        raise RecipeError(source, c.errors)
    device, version = _header(c, doc.get("header"))
    buffers: dict[str, Buffer] = {}
    kernels: dict[str, Kernel] = {}
    cpus: dict[str, Cpu] = {}
    resources = doc.get("resources")
    if c.obj(resources, "/resources", (), ("buffers", "kernels", "cpus")):
        for i, b in enumerate(c.array(resources.get("buffers"), "/resources/buffers")):
            path = f"/resources/buffers/{i}"
            if not c.obj(b, path, ("name", "type"), ("size", "file")):
                continue
            name = c.string(b.get("name"), f"{path}/name", name=True)
            btype = b.get("type")
            if btype not in BUFFER_TYPES:
                c.error(f"{path}/type", f"{btype!r} is not a buffer type ({', '.join(BUFFER_TYPES)})")
            size = c.count(b["size"], f"{path}/size") if "size" in b else None
            if "size" in b and size == 0:
                c.error(f"{path}/size", "must be at least 1")
            file = c.string(b["file"], f"{path}/file") if "file" in b else None
            c.file_name(file, f"{path}/file")
            if btype == "internal" and "size" not in b and "file" not in b:
                # Nothing binds an internal buffer, so without a size the runner cannot make it
                # and no run can ever start: said now, not at execute().
                c.error(path, f"internal buffer '{name}' needs a size: the runner creates internal "
                              "buffers and nothing can bind one, so this recipe could never run")
            if name is not None:
                if name in buffers:
                    c.error(f"{path}/name", f"buffer '{name}' is defined twice")
                else:  # registered even when broken, so that its uses are not reported too
                    buffers[name] = Buffer(name, btype if btype in BUFFER_TYPES else "unknown", size, file)
        for i, k in enumerate(c.array(resources.get("kernels"), "/resources/kernels")):
            path = f"/resources/kernels/{i}"
            if not c.obj(k, path, ("name", "instance", "ctrlcode"), ()):
                continue
            name = c.string(k.get("name"), f"{path}/name", name=True)
            instance = c.string(k.get("instance"), f"{path}/instance")
            ctrl = c.string(k.get("ctrlcode"), f"{path}/ctrlcode")
            c.file_name(ctrl, f"{path}/ctrlcode")
            if name is not None and (name in kernels or name in cpus):
                c.error(f"{path}/name", f"'{name}' is defined twice")
            elif name and instance and ctrl:
                kernels[name] = Kernel(name, instance, ctrl)
        for i, cpu in enumerate(c.array(resources.get("cpus"), "/resources/cpus")):
            path = f"/resources/cpus/{i}"
            if not c.obj(cpu, path, ("name", "library_path"), ()):
                continue
            name = c.string(cpu.get("name"), f"{path}/name", name=True)
            lib = c.string(cpu.get("library_path"), f"{path}/library_path")
            if lib is not None:
                c.relative(lib, f"{path}/library_path",
                           "libraries resolve against PYDLA_LIBRARY_PATH or the install location")
            if name is not None and (name in cpus or name in kernels):
                c.error(f"{path}/name", f"'{name}' is defined twice")
            elif name and lib:
                cpus[name] = Cpu(name, lib)

    runs: list[Run] = []
    execution = doc.get("execution")
    if c.obj(execution, "/execution", ("runs",), ()):
        for i, r in enumerate(c.array(execution.get("runs"), "/execution/runs")):
            run = _run(c, r, f"/execution/runs/{i}", buffers, kernels, cpus)
            if run is not None:
                runs.append(run)
    if c.errors:
        raise RecipeError(source, c.errors)
    return Recipe(device, version, buffers, kernels, cpus, tuple(runs), doc)


def _header(c: _Checker, header: Any) -> tuple[str, str | None]:
    """The configuration (header.xclbin or header.device) and the version; other keys are metadata."""
    if not c.obj(header, "/header", (), (), more=True):
        return "", None
    names: dict[str, str] = {}
    for key in ("xclbin", "device"):
        if key in header:
            value = c.string(header[key], f"/header/{key}")
            if value is not None:
                # A file is found next to the recipe, as its other files are.
                c.relative(value, f"/header/{key}", "a bundled configuration name, or a file next "
                                                    "to the recipe")
                names[key] = value
    if "xclbin" not in header and "device" not in header:
        c.error("/header", "'xclbin' (or pydla's 'device') is required: the device configuration, a "
                           "bundled name or a configuration file")
    if len(set(names.values())) > 1:
        c.error("/header/device", f"'{names['device']}' and header.xclbin '{names['xclbin']}' must "
                                  "name the same device configuration (give one of them)")
    version = None
    if "version" in header:
        version = c.string(header["version"], "/header/version")
        if version is not None and not _semver(version):
            c.error("/header/version", f"'{version}' is not MAJOR.MINOR.PATCH")
        elif version is not None and int(version.split(".")[0]) != RECIPE_VERSION[0]:
            major = int(version.split(".")[0])
            fix = ("the recipe is newer: upgrade pydla" if major > RECIPE_VERSION[0]
                   else "the recipe is older: rewrite it for this version")
            mine = ".".join(map(str, RECIPE_VERSION))
            c.error("/header/version", f"'{version}': this pydla reads recipe version "
                                       f"{RECIPE_VERSION[0]}.x (writes {mine}); {fix}")
    for key in ("name", "description"):
        if key in header and not isinstance(header[key], str):
            c.error(f"/header/{key}", "must be a string")
    return names.get("xclbin", names.get("device", "")), version


def _run(c: _Checker, r: Any, path: str, buffers: dict[str, Buffer], kernels: dict[str, Kernel],
         cpus: dict[str, Cpu]) -> Run | None:
    if not c.obj(r, path, ("name",), ("where", "arguments", "constants")):
        return None
    name = c.string(r.get("name"), f"{path}/name", name=True)
    where = r.get("where", "npu")
    if where not in ("npu", "cpu"):
        c.error(f"{path}/where", f"{where!r} must be 'npu' or 'cpu'")
    elif name is not None:
        table = kernels if where == "npu" else cpus
        if name not in table:
            what = "kernel" if where == "npu" else "cpu function"
            c.error(f"{path}/name", f"no {what} '{name}' in resources")
    used: dict[int, str] = {}
    args: list[Argument] = []
    for j, a in enumerate(c.array(r.get("arguments"), f"{path}/arguments")):
        apath = f"{path}/arguments/{j}"
        if not c.obj(a, apath, ("name", "argidx"), ("size", "offset")):
            continue
        bname = c.string(a.get("name"), f"{apath}/name", name=True)
        idx = c.argidx(a.get("argidx"), f"{apath}/argidx")
        size = c.count(a["size"], f"{apath}/size") if "size" in a else None
        offset = c.count(a["offset"], f"{apath}/offset") if "offset" in a else 0
        if bname is not None and bname not in buffers:
            c.error(f"{apath}/name", f"no buffer '{bname}' in resources")
        elif bname is not None and offset is not None:
            total = buffers[bname].size
            if size == 0:
                c.error(f"{apath}/size", "must be at least 1")
            elif total is not None and (offset >= total or offset + (size or 0) > total):
                c.error(apath, f"offset {offset} + size {size} exceeds buffer '{bname}' ({total} bytes)")
        if idx is not None:
            if idx in used:
                c.error(f"{apath}/argidx", f"argidx {idx} is already used by {used[idx]}")
            used[idx] = f"argument '{bname}'"
        if bname is not None and idx is not None and offset is not None:
            args.append(Argument(bname, idx, size, offset))
    consts: list[Constant] = []
    for j, k in enumerate(c.array(r.get("constants"), f"{path}/constants")):
        kpath = f"{path}/constants/{j}"
        if not c.obj(k, kpath, ("value", "argidx"), ("type",)):
            continue
        ctype = k.get("type", "string")
        idx = c.argidx(k.get("argidx"), f"{kpath}/argidx")
        if ctype not in CONSTANT_TYPES:
            c.error(f"{kpath}/type", f"{ctype!r} is not a constant type ({', '.join(CONSTANT_TYPES)})")
            continue
        value = _constant(c, k.get("value"), ctype, f"{kpath}/value")
        if idx is not None:
            if idx in used:
                c.error(f"{kpath}/argidx", f"argidx {idx} is already used by {used[idx]}")
            used[idx] = "a constant"
        if value is not None and idx is not None:
            consts.append(Constant(value, ctype, idx))
    if name is None or where not in ("npu", "cpu"):
        return None
    return Run(name, where, tuple(args), tuple(consts))


def _constant(c: _Checker, value: Any, ctype: str, path: str) -> int | float | str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        c.error(path, f"must be a string or a number, not {_kind(value)}")
        return None
    if ctype == "string":
        if not isinstance(value, str):
            c.error(path, f"type string needs a string value, not {value!r}")
            return None
        return value
    if ctype == "int":
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value, 0)
            except ValueError:
                pass
        c.error(path, f"{value!r} is not an integer")
        return None
    try:
        number = float(value)
    except ValueError:
        c.error(path, f"{value!r} is not a number")
        return None
    if not math.isfinite(number):
        c.error(path, f"{value!r} is not a finite number")
        return None
    return number


def _semver(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 3 and all(p.isdigit() and (p == "0" or not p.startswith("0")) for p in parts)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def load_recipe(path: str | Path, *, allow_unsafe_paths: bool = False, check_config: bool = True) -> Recipe:
    """Read and check a recipe JSON file. With ``check_config``, also load the device configuration
    its header names (a bundled name, or a file next to the recipe) and check every kernel's
    instance against the configuration's compute units (:mod:`pydla.loadable.recipe_config`)."""
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as e:
        raise file_error(p, e) from e
    recipe = parse_recipe(loads(text, str(p)), str(p), allow_unsafe_paths=allow_unsafe_paths)
    if check_config:
        # Imported here: it loads device configurations (pydla.target.config), which a recipe read
        # for the runner does not (the UMD learns its device through its port).
        from pydla.loadable.recipe_config import check_config as check

        check(recipe, p, allow_unsafe_paths=allow_unsafe_paths)
    return recipe


def schema() -> dict[str, Any]:
    """The recipe's JSON schema (shipped in the package)."""
    from importlib import resources

    text = resources.files("pydla.loadable").joinpath("schema/recipe.schema.json").read_text()
    result: dict[str, Any] = json.loads(text)
    return result
