"""XRT's IP_LAYOUT in the JSON form ``xclbinutil --dump-section IP_LAYOUT:json:FILE`` writes, both ways.

xclbinutil builds its JSON with boost's property trees, which write an array as one object whose key
repeats: ``"m_ip_data": {"ip_data": {...}, "ip_data": {...}}``, every value a string
(``"m_int_enable": "1"``, ``"m_base_address": "0x1800000"``). Python's ``json`` keeps only the last of
repeated keys, so a dump is read with :func:`keep_repeated_keys`, which turns a repeated key's values
into a :class:`Repeated` list. Older xclbinutil versions write a unit's ``properties`` word instead of
``m_int_enable``, ``m_interrupt_id`` and ``m_ip_control`` (XRT's xclbin.h: bit 0 the interrupt enable,
bits 1-7 the interrupt id, bits 8-15 the control protocol, AP_CTRL_HS 0, CHAIN 1, NONE 2); both are
read.

A dump says nothing of what pydla needs to simulate a unit: its register ``window`` (XRT's units
decode 64 KiB: the default here) and the ``model`` that computes. An entry may carry those keys
itself, or a configuration's ``cu_models`` gives them per ``m_name`` or per kernel name.

Usage::

    text = dump_ip_layout(load_config("full").ip_layout)       # what xclbinutil writes
    raw = json.loads(text, object_pairs_hook=keep_repeated_keys)
    entries = xclbin_entries(raw, {"vadd": {"model": "vadd"}}, "my.json")   # parse_ip_layout's list
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydla.errors import DlaError, NvError

if TYPE_CHECKING:
    from pydla.target.cu_info import ComputeUnitInfo

DEFAULT_WINDOW = 0x10000  # an XRT compute unit's AXI-lite range
CONTROL_OF_PROPERTY = {0: "AP_CTRL_HS", 1: "AP_CTRL_CHAIN", 2: "AP_CTRL_NONE"}
_INTEGERS = ("m_int_enable", "m_interrupt_id", "m_base_address")
# pydla's own keys of an entry that xclbinutil writes as strings when a user adds them to a dump
_PYDLA_INTEGERS = ("window", "pipeline_depth", "latency_cycles", "fifo_bytes", "chunk_bytes")
MAX_UNITS = 128  # XRT's limit of compute units per xclbin


class Repeated(list[Any]):
    """The values of a key written more than once in one JSON object, in order."""


def keep_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads`` that keeps every value of a repeated key."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key not in out:
            out[key] = value
        elif isinstance(out[key], Repeated):
            out[key].append(value)
        else:
            out[key] = Repeated([out[key], value])
    return out


def dump_ip_layout(layout: tuple[ComputeUnitInfo, ...]) -> str:
    """The section exactly as ``xclbinutil --dump-section IP_LAYOUT:json`` writes it (4-space indent,
    ``ip_data`` repeated, every value a string), with a final newline."""
    q = json.dumps
    lines = ["{", '    "ip_layout": {', f'        "m_count": {q(str(len(layout)))},']
    if not layout:
        lines.append('        "m_ip_data": ""')  # boost writes an empty tree as ""
    else:
        lines.append('        "m_ip_data": {')
        for i, cu in enumerate(layout):
            fields = list(cu.xclbin_entry().items())
            lines.append('            "ip_data": {')
            lines += [f"                {q(k)}: {q(v)}{',' if j < len(fields) - 1 else ''}"
                      for j, (k, v) in enumerate(fields)]
            lines.append("            }" + ("," if i < len(layout) - 1 else ""))
        lines.append("        }")
    lines += ["    }", "}"]
    return "\n".join(lines) + "\n"


def is_xclbin_form(raw: Any) -> bool:
    """Whether a configuration's ``ip_layout`` is xclbinutil's object (the section or the whole dump)."""
    return isinstance(raw, Mapping)


def xclbin_entries(raw: Any, cu_models: Mapping[str, Any], source: str) -> list[dict[str, Any]]:
    """The entries of an xclbinutil dump (``{"ip_layout": {...}}`` or its inner object) as the list
    :func:`pydla.target.ip_layout.parse_ip_layout` checks: strings become integers, ``properties``
    its three fields, and each unit's pydla keys come from the entry or ``cu_models``."""
    where = f"{source}: ip_layout"
    if isinstance(raw, Mapping) and "ip_layout" in raw:
        extra = sorted(k for k in raw if k not in ("ip_layout", "schema_version"))
        if extra:
            raise DlaError(NvError.BadValue, f"{where}: unknown key(s) {', '.join(map(repr, extra))} next "
                                             f"to 'ip_layout' in xclbinutil's form")
        raw = raw["ip_layout"]
    if not isinstance(raw, Mapping):
        raise DlaError(NvError.BadValue, f"{where}: must be a list or xclbinutil's object, not {raw!r:.60}")
    unknown = sorted(k for k in raw if k not in ("m_count", "m_ip_data"))
    if unknown:
        raise DlaError(NvError.BadValue, f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                                         f"(xclbinutil writes m_count and m_ip_data)")
    data = raw.get("m_ip_data", "")
    if data == "":
        items: list[Any] = []
    elif isinstance(data, list):
        items = list(data)
    elif isinstance(data, Mapping) and set(data) == {"ip_data"}:
        value = data["ip_data"]
        items = list(value) if isinstance(value, Repeated) else [value]
    else:
        raise DlaError(NvError.BadValue, f"{where}: 'm_ip_data' must hold 'ip_data' entries (or be a "
                                         f"list), not {data!r:.60}")
    count = _integer(raw.get("m_count"), f"{where}: 'm_count'")
    if count != len(items) or len(items) > MAX_UNITS:
        raise DlaError(NvError.BadValue, f"{where}: 'm_count' {count} but {len(items)} 'ip_data' entries "
                                         f"(at most {MAX_UNITS})")
    return [_entry(item, cu_models, f"{where}[{i}]") for i, item in enumerate(items)]


def _entry(item: Any, cu_models: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise DlaError(NvError.BadValue, f"{where}: must be a JSON object, not {item!r:.60}")
    entry = dict(item)
    name = entry.get("m_name")
    if isinstance(name, str):
        where = f"{where} ('{name}')"
    if "properties" in entry:
        if any(k in entry for k in ("m_int_enable", "m_interrupt_id", "m_ip_control")):
            raise DlaError(NvError.BadValue, f"{where}: 'properties' and its fields both given")
        word = _integer(entry.pop("properties"), f"{where}: 'properties'")
        control = word >> 8 & 0xFF
        if control not in CONTROL_OF_PROPERTY or word >> 16:
            raise DlaError(NvError.BadValue, f"{where}: 'properties' {word:#x}: control {control} is not "
                                             f"AP_CTRL_HS (0), AP_CTRL_CHAIN (1) or AP_CTRL_NONE (2)")
        entry.update(m_int_enable=word & 1, m_interrupt_id=word >> 1 & 0x7F,
                     m_ip_control=CONTROL_OF_PROPERTY[control])
    if entry.get("m_base_address") == "not_used":
        raise DlaError(NvError.BadValue, f"{where}: 'm_base_address' is 'not_used': pydla needs the unit's "
                                         f"register window")
    for key in (*_INTEGERS, *_PYDLA_INTEGERS):
        if isinstance(entry.get(key), str):
            entry[key] = _integer(entry[key], f"{where}: '{key}'")
    extra = _models_of(cu_models, name, where)
    for key, value in extra.items():
        entry.setdefault(key, value)
    entry.setdefault("window", DEFAULT_WINDOW)
    if "model" not in entry:
        raise DlaError(NvError.BadValue, f"{where}: no 'model' computes it: give one in the entry or in the "
                                         f"configuration's cu_models under its m_name or kernel name")
    return entry


def _models_of(cu_models: Mapping[str, Any], name: Any, where: str) -> dict[str, Any]:
    if not isinstance(name, str):
        return {}
    for key in (name, name.split(":", 1)[0]):
        value = cu_models.get(key)
        if value is not None:
            if not isinstance(value, Mapping):
                raise DlaError(NvError.BadValue, f"{where}: cu_models['{key}'] must be an object, "
                                                 f"not {value!r:.60}")
            return dict(value)
    return {}


def _integer(value: Any, what: str) -> int:
    """An xclbinutil number: a decimal or 0x string (or a JSON integer)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 16) if text[:2].lower() == "0x" else int(text, 10)
        except ValueError:
            pass
    raise DlaError(NvError.BadValue, f"{what} = {value!r:.40} must be a number (decimal or 0x)")
