"""IP_LAYOUT: the compute units a device configuration declares, as XRT's xclbin metadata does.

Each entry has XRT's fields (``m_name`` "kernel:instance", ``m_type``, ``m_int_enable``,
``m_interrupt_id``, ``m_ip_control`` AP_CTRL_HS / AP_CTRL_CHAIN / AP_CTRL_NONE,
``m_base_address``) and pydla's: the register ``window`` (bytes), the ``model`` that computes
(a built-in name or ``python:package.module:ClassName``), ``pipeline_depth`` (CHAIN),
``latency_cycles`` (one execution, or one stream chunk) and the model's own parameters (every other
key). :func:`parse_ip_layout` checks every field; errors name the entry, the field and the value.

Usage::

    cfg = load_config("full")
    [cu.instance for cu in cfg.ip_layout]    # ['dla', 'noop_hs', ...]
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.target.cu_info import ENGINE_MODEL, ComputeUnitInfo
from pydla.target.cu_model import check_model

__all__ = ["CONTROLS", "ENGINE_MODEL", "ComputeUnitInfo", "parse_ip_layout"]

CONTROLS = ("AP_CTRL_HS", "AP_CTRL_CHAIN", "AP_CTRL_NONE")
M_TYPES = ("IP_KERNEL",)
MAX_INTERRUPTS = 32  # one bit each in GLB cu_intr_status
MIN_WINDOW = 0x1000  # the control block, the arguments and the device's registers (cu_ctrl_regs_t)
MAX_WINDOW = 1 << 24
DLA_SPACE = 0x8000  # GLB and the six block windows (0x7000), rounded up to a power of two
ADDRESS_LIMIT = 1 << 32  # the register bus is 32-bit
MAX_DEPTH = 64
MAX_LATENCY = 1 << 40
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*:[A-Za-z_][A-Za-z0-9_]*$")
_FIELDS: dict[str, type] = {
    "m_name": str, "m_type": str, "m_int_enable": int, "m_interrupt_id": int, "m_ip_control": str,
    "m_base_address": int, "window": int, "model": str,
}
# fifo_bytes and chunk_bytes: an AP_CTRL_NONE unit's stream FIFOs (each) and the most it converts
# at a time (one chunk takes latency_cycles).
_OPTIONAL: dict[str, tuple[type[int], int]] = {"pipeline_depth": (int, 1), "latency_cycles": (int, 1000),
                                          "fifo_bytes": (int, 65536), "chunk_bytes": (int, 4096)}
MAX_FIFO = 1 << 24




def parse_ip_layout(raw: Any, source: str) -> tuple[ComputeUnitInfo, ...]:
    """Check every entry and the entries together (names, interrupt ids, windows)."""
    if not isinstance(raw, list):
        raise DlaError(NvError.BadValue, f"{source}: 'ip_layout' must be a list, not {raw!r}")
    units = tuple(_entry(item, f"{source}: ip_layout[{i}]") for i, item in enumerate(raw))
    seen: dict[Any, str] = {}
    for cu in units:
        for key, value in (("m_name", cu.name), ("instance", cu.instance),
                           ("m_interrupt_id", cu.m_interrupt_id)):
            other = seen.get((key, value))
            if other is not None:
                raise DlaError(NvError.BadValue,
                               f"{source}: ip_layout: '{cu.name}' and '{other}' have the same "
                               f"{key} {value!r}")
            seen[(key, value)] = cu.name
    if sum(cu.is_engine for cu in units) > 1:
        raise DlaError(NvError.BadValue, f"{source}: ip_layout: more than one entry has model 'engine'")
    spans = sorted((cu.m_base_address, cu.m_base_address + cu.window, cu.name) for cu in units)
    for (_, end, a), (start, _, b) in itertools.pairwise(spans):
        if start < end:
            raise DlaError(NvError.BadValue,
                           f"{source}: ip_layout: the windows of '{a}' and '{b}' overlap "
                           f"({a} ends at {end:#x}, {b} starts at {start:#x})")
    return units


def _entry(item: Any, where: str) -> ComputeUnitInfo:
    if not isinstance(item, dict):
        raise DlaError(NvError.BadValue, f"{where}: must be a JSON object, not {item!r}")
    if isinstance(item.get("m_name"), str):
        where = f"{where} ('{item['m_name']}')"
    for key, typ in _FIELDS.items():
        value = item.get(key)
        if value is None:
            raise DlaError(NvError.BadValue, f"{where}: missing field '{key}'")
        if not isinstance(value, typ) or isinstance(value, bool):
            raise DlaError(NvError.BadValue, f"{where}: '{key}' must be a {typ.__name__}, not {value!r}")
    optional: dict[str, int] = {}
    for key, (_, default) in _OPTIONAL.items():
        value = item.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise DlaError(NvError.BadValue, f"{where}: '{key}' must be an int, not {value!r}")
        optional[key] = value
    name, control, base, window = item["m_name"], item["m_ip_control"], item["m_base_address"], item["window"]
    engine = item["model"] == ENGINE_MODEL
    checks = [
        (bool(_NAME.match(name)), "m_name", "'kernel:instance' (letters, digits, _)"),
        (item["m_type"] in M_TYPES, "m_type", f"one of {', '.join(M_TYPES)}"),
        (item["m_int_enable"] in (0, 1), "m_int_enable", "0 or 1"),
        (0 <= item["m_interrupt_id"] < MAX_INTERRUPTS, "m_interrupt_id", f"0..{MAX_INTERRUPTS - 1}"),
        (control in CONTROLS, "m_ip_control", f"one of {', '.join(CONTROLS)}"),
        (MIN_WINDOW <= window <= MAX_WINDOW and window & (window - 1) == 0, "window",
         f"a power of two, {MIN_WINDOW:#x}..{MAX_WINDOW:#x}"),
        (window > 0 and base % window == 0, "m_base_address", f"a multiple of its window ({window:#x})"),
        (base == 0 and window >= DLA_SPACE if engine
         else DLA_SPACE <= base and base + window <= ADDRESS_LIMIT,
         "m_base_address",
         f"0 with a window of at least {DLA_SPACE:#x} (the DLA's own registers)" if engine else
         f"above the DLA blocks' registers ({DLA_SPACE:#x}) and below 2^32 with its window"),
        (1 <= optional["pipeline_depth"] <= (MAX_DEPTH if control == "AP_CTRL_CHAIN" else 1),
         "pipeline_depth", f"1..{MAX_DEPTH} for AP_CTRL_CHAIN, 1 otherwise"),
        (1 <= optional["latency_cycles"] <= MAX_LATENCY, "latency_cycles", f"1..{MAX_LATENCY}"),
        (16 <= optional["fifo_bytes"] <= MAX_FIFO, "fifo_bytes", f"16..{MAX_FIFO}"),
        (1 <= optional["chunk_bytes"] <= optional["fifo_bytes"], "chunk_bytes", "1..fifo_bytes"),
    ]
    for ok, key, rule in checks:
        if not ok:
            value = optional[key] if key in optional else item[key]
            shown = f"{value:#x}" if key in ("m_base_address", "window") else repr(value)
            raise DlaError(NvError.BadValue, f"{where}: '{key}' = {shown} must be {rule}")
    params = tuple(sorted((k, v) for k, v in item.items() if k not in _FIELDS and k not in _OPTIONAL))
    info = ComputeUnitInfo(name, item["m_type"], item["m_int_enable"], item["m_interrupt_id"], control,
                           base, window, item["model"], optional["pipeline_depth"],
                           optional["latency_cycles"], optional["fifo_bytes"], optional["chunk_bytes"],
                           params)
    if not engine:
        check_model(info, where)
    return info
