"""The state of one execution of a task graph by the engine scheduler (:mod:`pydla.firmware.engine`):
dependency counters, register groups, progress, the operations held for barriers. Made at every
submit; the :class:`~pydla.firmware.graph.TaskGraph` it runs is never modified.

Usage: ``run = TaskRun(task, graph, on_finish)`` (the engine's ``dla_execute_task`` makes it)
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware.engine_api import RunState
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import TaskDesc

WAITING, PROGRAMMED, ENABLED, DONE = range(4)


class TaskRun(RunState):
    """The state of one execution of a task graph (made at every submit: kept lean)."""

    __slots__ = (
        "busy",
        "chain_pos",
        "cp",
        "deps",
        "enable_order",
        "failed",
        "gated",
        "group_of",
        "held",
        "next_group",
        "ready",
        "state",
        "traced",
    )

    def __init__(self, task: TaskDesc, graph: TaskGraph,
                 on_finish: Callable[[RunState], None] | None = None) -> None:
        super().__init__(task, graph, on_finish)
        self.gated = False  # a task before it is still in flight: it programs, it enables nothing
        # (operation index, dla_hw_error_e, MMU fault address) when a block reported its failure: what
        # a headed firmware sends the host (task_failed_evt)
        self.failed: tuple[int, int, int] | None = None
        self.traced = False  # its task_start was recorded: its task_end is too (pydla.kmd.trace)
        # Run by the device's command processor (task.command_buffer; pydla.firmware.engine): 0 not,
        # 1 waiting for its turn, 2 its doorbell rung
        self.cp = 0
        self.restart()

    def restart(self) -> None:
        """Back to nothing programmed (a gated run whose groups a reset or an abort before it undid)."""
        graph = self.graph
        n = len(graph.operations)
        self.deps = list(graph.dependency_counts)
        self.state = [WAITING] * n
        self.group_of = [-1] * n
        # Per block of the graph: the operation in each register group, the position in its chain,
        # the group it programs next (-1: not known until the tasks before it programmed that block).
        self.busy: dict[dla_block_e, list[int | None]] = {b: [None, None] for b in graph.blocks}
        self.chain_pos: dict[dla_block_e, int] = dict.fromkeys(graph.blocks, 0)
        self.next_group: dict[dla_block_e, int] = dict.fromkeys(graph.blocks, -1)
        self.ready: collections.deque[int] = collections.deque()
        self.completed = 0
        self.enable_order: list[int] = []
        self.held: list[int] = []  # ready, but a wait barrier has not fired (a task with a SHAVE list)

    def signal(self, index: int, event: int) -> None:
        """Operation ``index`` reached ``event`` (a dla_event_e as an int): its consumers that wait for
        that event count it, and those whose count reached zero once programmed become ready."""
        deps, state, ready = self.deps, self.state, self.ready
        for c in self.graph.operations[index].consumers:
            if c.event != event:
                continue
            deps[c.index] -= 1
            if deps[c.index] == 0 and state[c.index] == PROGRAMMED:
                ready.append(c.index)

    def release_groups(self, owner: dict[dla_block_e, list[TaskRun | None]]) -> None:
        """Give up the register groups this run holds in the engine's ``owner`` table (block -> the run
        in each group)."""
        for b in self.graph.blocks:
            holders = owner[b]
            for g in (0, 1):
                if holders[g] is self:
                    holders[g] = None

    def operation_in(self, block: dla_block_e, group: int) -> int | None:
        busy = self.busy.get(block)
        return None if busy is None else busy[group]
