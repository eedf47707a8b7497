"""What the driver's watchdog asks of the engine scheduler (:mod:`pydla.kmd.recovery`; headed, the
firmware answers the same through messages): which blocks are still busy, which operations of a task
are running or waiting, read from the blocks' status registers, and the resets.

Usage: ``running, waiting = engine.watch.stuck_operations(run)`` (the engine owns one)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware.cp_submit import mark_stuck
from pydla.firmware.engine_api import stuck_text
from pydla.firmware.interface import DeviceCaps, FirmwarePortability
from pydla.firmware.processors import IDLE, RUNNING, Processors
from pydla.firmware.task_run import TaskRun


class EngineWatch:
    """The engine's answers to the watchdog, read from the device through the engine's port."""

    def __init__(self, port: FirmwarePortability, config: DeviceCaps, hw: Processors,
                 lock: threading.RLock) -> None:
        self.port = port
        self.config = config
        self.hw = hw
        self._lock = lock  # the engine's: the runs' groups are read as the scheduler left them

    def busy(self, blocks: Sequence[dla_block_e]) -> list[dla_block_e]:
        """Of ``blocks``, those the device has whose register groups are enabled or running."""
        present = set(self.config.blocks)
        return [b for b in blocks if b in present and any(self.hw.group_states(self.port, b))]

    def reset_blocks(self, blocks: Sequence[dla_block_e]) -> list[dla_block_e]:
        """Reset ``blocks`` (the GLB reset register, a bit per block); those still busy after it."""
        self.hw.reset(self.port, blocks)
        return self.busy(blocks)

    def reset_device(self) -> list[dla_block_e]:
        """Reset the whole device; the blocks still busy after it."""
        self.hw.reset_device(self.port)
        return self.busy(list(dla_block_e))

    def stuck_operations(self, run: TaskRun) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The (operation, group) pairs of ``run`` that are running, and those enabled and waiting,
        read from the blocks' status registers."""
        with self._lock:
            if run.cp == 2 and not run.finished:  # the command processor's: where it stopped
                mark_stuck(self.port, self.hw, run)
            running: list[tuple[int, int]] = []
            waiting: list[tuple[int, int]] = []
            for b in run.graph.blocks:
                states = self.hw.group_states(self.port, b)
                for g in (0, 1):
                    index = run.busy[b][g]
                    if index is None or states[g] == IDLE:
                        continue
                    (running if states[g] == RUNNING else waiting).append((index, g))
            return running, waiting

    def describe_stuck(self, run: TaskRun) -> str:
        """Which operations were running or waiting, read from the blocks' status registers."""
        running, waiting = self.stuck_operations(run)
        ops = run.graph.operations
        return stuck_text(len(ops), run.completed, [f"{ops[i].name} in group {g}" for i, g in running],
                          [f"{ops[i].name} in group {g}" for i, g in waiting], len(running), len(waiting))
