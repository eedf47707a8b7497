"""The device's blocks, checked as each step is lowered: a node that the compiler lowers to a block
the device configuration lacks (a Transpose to RUBIK, a copy to BDMA on ``small``) is refused by
name, with the bundled configurations that have the block, rather than after the whole network
is compiled.

Usage (pydla.compiler.lower)::

    mark = (lowering.tb, len(lowering.tb.ops), len(lowering.runs))
    ...  # lower the step
    check_step_blocks(step.head, config, [b for _, b in lowering.runs], lowering.tb, *mark)
"""

from __future__ import annotations

from typing import Any

from pydla.compiler.graph_types import Node
from pydla.errors import DlaError, NvError
from pydla.loadable.taskbuilder import TaskBuilder
from pydla.target import config as device_config


def check_step_blocks(node: Node, config: device_config.DeviceConfig, runs: list[Any], current: TaskBuilder,
                      tb: TaskBuilder, start: int, closed: int) -> None:
    """The operations a step added use blocks ``config`` has: those in ``tb`` (the task being built
    when the step began) from operation ``start``, in the tasks closed after ``closed`` runs, and
    in ``current`` (the task being built now). DlaError NotSupported naming ``node`` otherwise."""
    builders = [b for b in runs[closed:] if isinstance(b, TaskBuilder)]
    if current not in builders:
        builders.append(current)
    blocks = {op.block for b in builders for op in (b.ops[start:] if b is tb else b.ops)}
    missing = sorted(b.name for b in blocks if not config.has_block(b))
    if missing:
        raise DlaError(NvError.NotSupported, missing_blocks_message(node, missing, config))


def missing_blocks_message(node: Node, blocks: list[str], config: device_config.DeviceConfig) -> str:
    """What the compiler says of ``node``, which the device computes with ``blocks`` that
    ``config`` lacks: the node, the blocks, and the bundled configurations that have them."""
    names = " and ".join(blocks)
    have = [n for n in device_config.bundled_configs()  # pydla's own (an NVDLA one runs NVDLA Loadables)
            if n != config.name and device_config.load_config(n).nvdla is None
            and all(device_config.load_config(n).has_block(b) for b in blocks)]
    if have:
        which = " or ".join([", ".join(repr(n) for n in have[:-1]), repr(have[-1])] if len(have) > 1 else
                            [repr(have[0])])
        fix = f"compile for device config {which}, which {'have' if len(have) > 1 else 'has'} it " \
              f"(--config {have[0]})"
    else:
        fix = "no bundled device configuration has it either"
    return (f"{node.where()}: pydla computes it with the {names} block, which device config "
            f"'{config.name}' does not have (its blocks: {', '.join(b.name for b in config.blocks)}); {fix}")
