"""Specs written as the Device API code generation design writes them, and where pydla differs.

The design's example spec (its "How To Add A New Message" section) is accepted as written:

- a message or trace event without an ``Id`` gets the lowest free one in declaration order (the
  design's default), with a warning saying what to write: an id is the item's identity on the wire,
  so one that follows list order changes when items are added or moved;
- a Response without ``Command`` is paired with the Command its name points at (``x_rsp`` ->
  ``x_cmd``) when exactly one does, with a warning; when none or several do, it is an error;
- a spec is a mapping (``Name``, ``Version``, ``Modules``); the design's files of bare message lists
  (``rpc-calls.yaml``, ``tracing-events.yaml``) are included from one with ``!include``.

:func:`design_problems` runs before the schema and fills in what it assigns (in the loaded document
only, never in the file), so that the schema and the layout rules see a complete document.
"""

from __future__ import annotations

from typing import Any

from pydla.deviceapi.loader import Location, Problem, SourceMap

_ID_WHY = ("the lowest free one in declaration order, as the design assigns them; write `Id: {n}` so "
           "that the {what}'s identity on the wire stays when items are added or reordered")
_COMMAND_WHY = ("pydla pairs a Response with the Command it answers explicitly, not by name or by "
                "position")
_RESPONSE_SUFFIXES = ("_rsp", "_resp", "_response")
_COMMAND_SUFFIXES = ("_cmd", "_command", "")


def design_problems(doc: Any, source_map: SourceMap, file: str) -> list[Problem]:
    """What the design's way of writing a spec lacks for pydla, each with the text to add.

    Modifies ``doc`` in place: a missing ``Id`` becomes the suggested one, a missing ``Command``
    the Command suggested when exactly one fits; so later checks see a complete document.
    """
    if isinstance(doc, list):
        return [_bare_list(doc, file)]
    if not isinstance(doc, dict) or not isinstance(doc.get("Modules"), list):
        return []  # not recognisably a spec: the schema says what is wrong
    modules = [m for m in doc["Modules"] if isinstance(m, dict)]
    problems: list[Problem] = []
    for key, what, retired in (("Messages", "message", "RetiredMessageIds"),
                               ("TraceEvents", "trace event", "RetiredTraceEventIds")):
        items = [(m, item) for m in modules for item in _items(m, key)]
        problems += _missing_ids(items, what, doc.get(retired), source_map, file)
    messages = [(m, item) for m in modules for item in _items(m, "Messages")]
    problems += _missing_commands(messages, source_map, file)
    return problems


def _items(module: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = module.get(key)
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, dict) and isinstance(i.get("Name"), str)]


def _where(item: dict[str, Any], module: dict[str, Any], kind: str, source_map: SourceMap,
           file: str) -> Location:
    at, line = source_map.of(item) or (file, None)
    name = module.get("Name")
    return Location(at, line, name if isinstance(name, str) else None, kind, item["Name"])


def _missing_ids(items: list[tuple[dict[str, Any], dict[str, Any]]], what: str, retired: Any,
                 source_map: SourceMap, file: str) -> list[Problem]:
    taken = {i["Id"] for _, i in items if isinstance(i.get("Id"), int)}
    if isinstance(retired, list):
        taken |= {r for r in retired if isinstance(r, int)}
    problems = []
    for module, item in items:
        if "Id" in item:
            continue
        n = 1
        while n in taken:
            n += 1
        taken.add(n)
        item["Id"] = n
        why = _ID_WHY.format(what=what, n=n)
        problems.append(Problem("explicit-id", _where(item, module, what, source_map, file),
                                f"no `Id`: {n}, {why}", "warning"))
    return problems


def _missing_commands(messages: list[tuple[dict[str, Any], dict[str, Any]]], source_map: SourceMap,
                      file: str) -> list[Problem]:
    commands = [i["Name"] for _, i in messages if i.get("Type") == "Command"]
    answered = {i.get("Command") for _, i in messages if i.get("Type") == "Response"}
    problems = []
    for module, item in messages:
        if item.get("Type") != "Response" or "Command" in item:
            continue
        guess = _command_for(item["Name"], commands, answered)
        at = _where(item, module, "message", source_map, file)
        if guess is not None:
            item["Command"] = guess
            answered.add(guess)
            problems.append(Problem("response-command", at,
                                    f"no `Command`: paired with '{guess}' by its name, as the design pairs "
                                    f"them; write `Command: {guess}` to say so", "warning"))
            continue
        choices = [c for c in commands if c not in answered]
        listed = f"; unanswered Commands: {', '.join(choices)}" if choices else \
            "; this spec defines no unanswered Command"
        text = f"add `Command: <the Command it answers>`{listed}"
        problems.append(Problem("response-command", at,
                                f"a Response must name the Command it answers: {text} "
                                f"({_COMMAND_WHY})"))
    return problems


def _command_for(response: str, commands: list[str], answered: set[Any]) -> str | None:
    """The Command a Response's name points at (``x_rsp`` -> ``x_cmd``), when exactly one does."""
    for suffix in _RESPONSE_SUFFIXES:
        if response.endswith(suffix):
            stem = response[: -len(suffix)]
            found = [stem + s for s in _COMMAND_SUFFIXES if stem + s in commands]
            found = [c for c in found if c not in answered]
            return found[0] if len(found) == 1 else None
    return None


def _bare_list(doc: list[Any], file: str) -> Problem:
    """A file that is a list of items, as the design's rpc-calls.yaml: say how to include it."""
    items = [i for i in doc if isinstance(i, dict)]
    has_type = any("Type" in i for i in items) and all(
        i.get("Type") in ("Command", "Response", "Event") for i in items)
    key = "Messages" if has_type else "TraceEvents"
    kind = "messages (each has a Type)" if has_type else "trace (log) events"
    return Problem(
        "spec-shape", Location(file),
        f"this file is a list of {kind}; a spec is a mapping with Name, Version and Modules. Include "
        f"the list from a spec, e.g.:\n    Name: my_api\n    Version: 1.0.0\n    Modules:\n"
        f"      - Name: my_module\n        {key}: !include {file.rsplit('/', 1)[-1]}")
