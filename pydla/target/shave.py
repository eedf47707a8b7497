"""The SHAVE part of a device configuration: ``"shave": {"tiles": 2, "cmx_bytes": ..., ...}``.

Fields (all but ``tiles`` optional): ``tiles`` (1..MAX_TILES), ``cmx_bytes`` (each tile's CMX slice,
WIN_F: a multiple of 4 KiB up to WIN_F_MAX_BYTES), ``barriers`` (physical barriers, 1..MAX_BARRIERS),
and the budget after which a kernel (or the runtime kernel between two accesses to its control
page) stops its tile with error BUDGET: ``instruction_budget`` (instructions, counted exactly, so a
runaway kernel stops at the same instruction in every run; the emulator then runs about 2.5x
slower: 0 = off, the default) or else ``time_budget_ms`` (milliseconds of emulation, default 2000,
enforced by a watchdog thread (pydla.hw.shave.watchdog) at no cost while kernels run; where a
runaway kernel is stopped then varies from run to run, its error status does not), and
``emulation``: ``"fast"`` (the default: an unchanged shipped kernel runs as its numpy equivalent,
pydla.hw.shave.hle) or ``"exact"`` (every kernel's machine code runs on the emulator).

Usage: ``parse_shave({"tiles": 2}, "full.json")``
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError

DEFAULT_CMX = 2 << 20
FAST, EXACT = "fast", "exact"  # the emulation modes (pydla.hw.shave.hle)
DEFAULT_TIME_BUDGET_MS = 2000  # a 64k-element softmax takes ~20 ms
_PAGE = 4096


@dataclass(frozen=True)
class ShaveConfig:
    tiles: int
    cmx_bytes: int = DEFAULT_CMX
    barriers: int = S.MAX_BARRIERS
    instruction_budget: int = 0
    time_budget_ms: int = DEFAULT_TIME_BUDGET_MS
    emulation: str = FAST


def parse_shave(raw: Any, source: str) -> ShaveConfig | None:
    """The checked SHAVE configuration, or None when ``raw`` is None (no tiles)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise DlaError(NvError.BadValue, f"{source}: 'shave' must be an object, not {raw!r}")
    known = {"tiles", "cmx_bytes", "barriers", "instruction_budget", "time_budget_ms", "emulation"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise DlaError(NvError.BadValue, f"{source}: 'shave' has unknown field(s) {', '.join(unknown)}")
    values = {"tiles": raw.get("tiles"), "cmx_bytes": raw.get("cmx_bytes", DEFAULT_CMX),
              "barriers": raw.get("barriers", S.MAX_BARRIERS),
              "instruction_budget": raw.get("instruction_budget", 0),
              "time_budget_ms": raw.get("time_budget_ms", DEFAULT_TIME_BUDGET_MS)}
    rules: dict[str, tuple[Callable[[int], bool], str]] = {
        "tiles": (lambda v: 1 <= v <= S.MAX_TILES, f"1..{S.MAX_TILES}"),
        "cmx_bytes": (lambda v: _PAGE <= v <= S.WIN_F_MAX_BYTES and v % _PAGE == 0,
                      f"a multiple of {_PAGE} up to {S.WIN_F_MAX_BYTES}"),
        "barriers": (lambda v: 1 <= v <= S.MAX_BARRIERS, f"1..{S.MAX_BARRIERS}"),
        "instruction_budget": (lambda v: v == 0 or 1000 <= v <= 1 << 40, "0 (off) or 1000..2^40"),
        "time_budget_ms": (lambda v: 1 <= v <= 3_600_000, "1..3600000"),
    }
    for key, (ok, rule) in rules.items():
        value = values[key]
        if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
            raise DlaError(NvError.BadValue, f"{source}: 'shave.{key}' = {value!r} must be {rule}")
    emulation = raw.get("emulation", FAST)
    if emulation not in (FAST, EXACT):
        raise DlaError(NvError.BadValue, f"{source}: 'shave.emulation' = {emulation!r} must be 'fast' "
                                         "(shipped kernels as their numpy equivalents) or 'exact' (every "
                                         "kernel emulated)")
    return ShaveConfig(**values, emulation=emulation)
