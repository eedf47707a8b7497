"""XRT's execution profile for a run recipe, read and checked: ``qos``, ``bindings`` (how the runner
creates, initialises, binds and validates external buffers) and ``executions`` (how many times and
how the recipe runs). The format is the one XRT's runner documents (its profile.md); every key and
value is checked, an error names its JSON path. :mod:`pydla.umd.profile_run` executes a profile.

Decisions where XRT's document is loose: ``qos`` keys are kept and reported as ignored (pydla has no
hardware-context QoS); a binding's ``size`` is required unless it is initialised from a file; only
one of ``random``, ``file`` and ``stride`` initialises a buffer; numbers are JSON integers;
``runlist_threshold`` is accepted and has no effect (pydla submits a recipe's runs as one chain).

Usage::

    profile = load_profile("profile.json")                 # DlaError naming the JSON path
    profile.bindings[0].name, profile.executions[0].iterations
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydla.errors import DlaError, NvError, file_error
from pydla.loadable.recipe_json import loads

MAX_ITERATIONS = 1 << 31
MAX_DEPTH = 64
MAX_SLEEP_MS = 3_600_000


@dataclass(frozen=True)
class Init:
    """How a created buffer is filled: ``kind`` random, file or stride."""

    kind: str
    file: str | None = None
    skip: int = 0
    begin: int = 0
    end: int | None = None
    stride: int = 1
    value: int = 0


@dataclass(frozen=True)
class Validate:
    """What a buffer is compared with after the runs: a file's bytes, or another buffer's."""

    file: str | None = None
    name: str | None = None
    skip: int = 0
    begin: int = 0
    end: int | None = None


@dataclass(frozen=True)
class Binding:
    name: str
    size: int | None = None
    rebind: bool = False
    reinit: bool = False
    init: Init | None = None
    validate: Validate | None = None


@dataclass(frozen=True)
class Iteration:
    bind: bool = False
    init: bool = False
    wait: bool = True
    sleep_ms: int = 0
    validate: bool = False


@dataclass(frozen=True)
class Execution:
    name: str = "execution"
    iterations: int = 1
    verbose: bool = True
    validate: bool = False
    mode: str | None = None  # None, "latency" or "throughput"
    depth: int = 2
    iteration: Iteration | None = None


@dataclass(frozen=True)
class Profile:
    source: str
    qos: dict[str, Any] = field(default_factory=dict)
    bindings: tuple[Binding, ...] = ()
    executions: tuple[Execution, ...] = (Execution(),)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> DlaError:
        return DlaError(NvError.BadValue, f"{self.source}: {path}: {message}")

    def obj(self, value: Any, path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be an object, not {value!r:.40}")
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise self.fail(path, f"unknown key(s) {', '.join(map(repr, unknown))} "
                                  f"(known: {', '.join(allowed)})")
        return value

    def int_(self, value: Any, path: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(path, f"{value!r:.40} must be an integer {low}..{high}")
        return value

    def bool_(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"{value!r:.40} must be true or false")
        return value

    def str_(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value or "\0" in value:
            raise self.fail(path, f"{value!r:.40} must be a non-empty string")
        return value


def load_profile(profile: str | Path | dict[str, Any]) -> Profile:
    """Read and check an execution profile (a file, or its JSON as a dict)."""
    if isinstance(profile, dict):
        return parse_profile(profile, "execution profile")
    path = Path(profile)
    try:
        text = path.read_bytes()
    except OSError as e:
        raise file_error(path, e) from e
    return parse_profile(loads(text, str(path)), str(path))


def parse_profile(raw: Any, source: str) -> Profile:
    r = _Reader(source)
    top = r.obj(raw, "/", ("qos", "bindings", "executions", "execution"))
    qos = top.get("qos", {})
    if not isinstance(qos, dict):  # its keys are free (XRT warns about the ones it does not know)
        raise r.fail("/qos", f"must be an object, not {qos!r:.40}")
    bindings_raw = top.get("bindings", [])
    if not isinstance(bindings_raw, list):
        raise r.fail("/bindings", "must be an array of binding elements")
    bindings = tuple(_binding(r, b, f"/bindings/{i}") for i, b in enumerate(bindings_raw))
    names = [b.name for b in bindings]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise r.fail("/bindings", f"buffer(s) {', '.join(twice)} bound more than once")
    if "executions" in top and "execution" in top:
        raise r.fail("/", "'executions' and 'execution' both given")
    if "execution" in top:  # the document's iteration example writes one execution object
        executions_raw: Any = [top["execution"]]
    else:
        executions_raw = top.get("executions", [{}])
    if not isinstance(executions_raw, list) or not executions_raw:
        raise r.fail("/executions", "must be a non-empty array of executions")
    executions = tuple(_execution(r, e, f"/executions/{i}") for i, e in enumerate(executions_raw))
    return Profile(source, dict(qos), bindings, executions)


def _range(r: _Reader, d: dict[str, Any], path: str) -> tuple[int, int, int | None]:
    skip = r.int_(d.get("skip", 0), f"{path}/skip", 0, 1 << 48)
    begin = r.int_(d.get("begin", 0), f"{path}/begin", 0, 1 << 48)
    end = r.int_(d["end"], f"{path}/end", 0, 1 << 48) if "end" in d else None
    if end is not None and end < begin:
        raise r.fail(f"{path}/end", f"{end} is before begin {begin}")
    return skip, begin, end


def _binding(r: _Reader, raw: Any, path: str) -> Binding:
    b = r.obj(raw, path, ("name", "size", "rebind", "reinit", "init", "validate"))
    name = r.str_(b.get("name"), f"{path}/name")
    size = r.int_(b["size"], f"{path}/size", 1, 1 << 40) if "size" in b else None
    init = None
    if "init" in b:
        i = r.obj(b["init"], f"{path}/init", ("random", "file", "skip", "begin", "end", "stride", "value"))
        kinds = [k for k in ("random", "file", "stride") if k in i]
        if len(kinds) != 1:
            raise r.fail(f"{path}/init", "needs exactly one of 'random', 'file' and 'stride'")
        skip, begin, end = _range(r, i, f"{path}/init")
        if kinds == ["random"]:
            if i["random"] is not True:
                raise r.fail(f"{path}/init/random", "must be true")
            init = Init("random", begin=begin, end=end)
        elif kinds == ["file"]:
            init = Init("file", r.str_(i["file"], f"{path}/init/file"), skip, begin, end)
        else:
            stride = r.int_(i["stride"], f"{path}/init/stride", 1, 8)
            value = r.int_(i.get("value", 0), f"{path}/init/value", 0, (1 << 64) - 1)
            if value >> (8 * stride):
                raise r.fail(f"{path}/init/value", f"{value} does not fit the stride of {stride} bytes")
            init = Init("stride", None, 0, begin, end, stride, value)
        if size is None and init.kind != "file":
            raise r.fail(f"{path}/size",
                         f"required: buffer '{name}' is initialised by {init.kind}, not a file")
    validate = None
    if "validate" in b:
        v = r.obj(b["validate"], f"{path}/validate", ("file", "name", "skip", "begin", "end"))
        if ("file" in v) == ("name" in v):
            raise r.fail(f"{path}/validate", "needs exactly one of 'file' and 'name'")
        skip, begin, end = _range(r, v, f"{path}/validate")
        validate = Validate(r.str_(v["file"], f"{path}/validate/file") if "file" in v else None,
                            r.str_(v["name"], f"{path}/validate/name") if "name" in v else None,
                            skip, begin, end)
    if size is None and init is None:
        raise r.fail(path, f"buffer '{name}' needs a 'size' or an 'init' from a file")
    return Binding(name, size, r.bool_(b.get("rebind", False), f"{path}/rebind"),
                   r.bool_(b.get("reinit", False), f"{path}/reinit"), init, validate)


def _execution(r: _Reader, raw: Any, path: str) -> Execution:
    e = r.obj(raw, path, ("name", "iterations", "verbose", "validate", "runlist_threshold", "mode", "depth",
                          "iteration"))
    mode = e.get("mode")
    if mode is not None and mode not in ("latency", "throughput"):
        raise r.fail(f"{path}/mode", f"{mode!r:.40} must be 'latency' or 'throughput'")
    if "runlist_threshold" in e:
        r.int_(e["runlist_threshold"], f"{path}/runlist_threshold", 0, 1 << 31)
    iteration = None
    if "iteration" in e:
        it = r.obj(e["iteration"], f"{path}/iteration", ("bind", "init", "wait", "sleep", "validate"))
        iteration = Iteration(r.bool_(it.get("bind", False), f"{path}/iteration/bind"),
                              r.bool_(it.get("init", False), f"{path}/iteration/init"),
                              r.bool_(it.get("wait", True), f"{path}/iteration/wait"),
                              r.int_(it.get("sleep", 0), f"{path}/iteration/sleep", 0, MAX_SLEEP_MS),
                              r.bool_(it.get("validate", False), f"{path}/iteration/validate"))
    default_depth = 2 if mode == "throughput" else 1
    return Execution(r.str_(e.get("name", "execution"), f"{path}/name"),
                     r.int_(e.get("iterations", 1), f"{path}/iterations", 1, MAX_ITERATIONS),
                     r.bool_(e.get("verbose", True), f"{path}/verbose"),
                     r.bool_(e.get("validate", False), f"{path}/validate"), mode,
                     r.int_(e.get("depth", default_depth), f"{path}/depth", 1, MAX_DEPTH), iteration)
