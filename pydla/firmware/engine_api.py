"""What the driver needs of an engine, in both modes (the NVDLA design's headless and headed
implementations): the run it gets back (:class:`RunState`) and the calls it makes (:class:`EngineApi`).

:class:`~pydla.firmware.engine.Engine` answers them on the host (headless); the proxy in
:mod:`pydla.kmd.headed` answers them through device-API messages to the same engine scheduler running
on the device's microcontroller (headed).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Protocol

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import DeviceCaps, TaskDesc


def engine_depth(config: object) -> int:
    """How many tasks the engine takes at once: the pipeline depth of its IP_LAYOUT entry under
    AP_CTRL_CHAIN, else 1 (AP_CTRL_HS, or a device that declares no engine unit)."""
    for cu in getattr(config, "compute_units", ()):
        if getattr(cu, "engine", False):
            return max(1, int(cu.pipeline_depth)) if cu.control == "CHAIN" else 1
    return 1


class RunState:
    """What the driver sees of one execution of a task, in both modes: the task, its graph, whom to
    tell when it ends, its error, whether it ended, how many operations completed (a
    :class:`TaskRun` of this engine, or a run of the headed-mode proxy, :mod:`pydla.kmd.headed`)."""

    __slots__ = ("completed", "error", "finished", "graph", "on_finish", "task")

    def __init__(self, task: TaskDesc, graph: TaskGraph,
                 on_finish: Callable[[RunState], None] | None = None) -> None:
        self.task = task
        self.graph = graph
        self.on_finish = on_finish
        self.error: DlaError | None = None
        self.finished = False
        self.completed = 0


class EngineApi(Protocol):
    """What the driver (:mod:`pydla.kmd.driver`, its watchdog and compute-unit view) uses of an
    engine: :class:`Engine` itself (headless), or the headed-mode proxy that reaches the same engine
    on the device's microcontroller through device-API messages (:mod:`pydla.kmd.headed`)."""

    depth: int
    bottom_half_on_irq: bool
    live_progress: bool
    listening: bool
    cu_events: collections.deque[tuple[str, int]]
    on_device_reset: Callable[[str], None] | None  # told when the engine reset the whole device itself

    @property
    def config(self) -> DeviceCaps: ...
    @property
    def inflight(self) -> Sequence[RunState]: ...
    @property
    def current(self) -> RunState | None: ...
    def dla_engine_init(self, priv_data: object = None) -> int: ...
    def dla_execute_task(self, task: TaskDesc, graph: TaskGraph | None = None,
                         on_finish: Callable[[RunState], None] | None = None) -> RunState: ...
    def dla_isr_handler(self) -> int: ...
    def dla_process_events(self) -> int: ...
    def pending_events(self) -> int: ...
    def wait_for_events(self, timeout: float) -> None: ...
    def wake(self) -> None: ...
    def abort(self, run: RunState, error: DlaError) -> None: ...
    def barriers_fired(self) -> None: ...
    def describe_stuck(self, run: RunState) -> str: ...
    def progress(self, run: RunState) -> int | None: ...
    def reset_blocks(self, blocks: Sequence[dla_block_e]) -> list[dla_block_e]: ...
    def reset_device(self) -> list[dla_block_e]: ...
    def close(self) -> None: ...


def stuck_text(total: int, completed: int, running: list[str], waiting: list[str], n_running: int,
               n_waiting: int) -> str:
    """The watchdog's account of a stuck task (shared with the headed proxy, which learns the counts
    and one operation of each kind from the firmware)."""
    parts = []
    if n_running:
        more = f" (and {n_running - len(running)} more)" if n_running > len(running) else ""
        parts.append("running and not finishing: " + ", ".join(running) + more)
    if n_waiting:
        more = f" (and {n_waiting - len(waiting)} more)" if n_waiting > len(waiting) else ""
        parts.append("enabled and waiting: " + ", ".join(waiting) + more)
    unprogrammed = total - completed - n_running - n_waiting
    parts.append(f"{completed} of {total} operations completed")
    if unprogrammed > 0 and not n_running:
        parts.append(f"{unprogrammed} not started")
    return "; ".join(parts)
