"""The dependency graph of an NVDLA DLA task's operations, from the buffer ranges each reads and writes,
encoded as NVIDIA's firmware runs it: each block's operations form a chain (``op_head``, then
``consumers[own block]``) on OP_COMPLETED, an operation signals per other block the earliest operation
of that block that needs its data (OP_COMPLETED; later ones follow in their chain), and a CONV and its
SDP on the fly are paired (the CONV signals the SDP on OP_PROGRAMMED, the SDP its fused parent on
OP_ENABLED).

Usage::

    commons, heads = dependency_graph(hw_ops)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.errors import DlaError, NvError


@dataclass
class HwOp:
    block: int  # dla_op_e
    op: Any
    surface: Any
    reads: list[tuple[str, int, int]]  # (buffer, first channel, end channel)
    writes: list[tuple[str, int, int]]
    fused_parent: int = -1


def _overlap(a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def dependency_graph(hw: list[HwOp]) -> tuple[list[Any], dict[int, int]]:
    """The dependency graph's common descriptors and each block's first operation."""
    n = len(hw)
    commons = [I.dla_common_op_desc(index=i, op_type=h.block, roi_index=0) for i, h in enumerate(hw)]
    for c in commons:
        for b in range(I.DLA_OP_NUM):
            c.consumers[b] = I.dla_consumer(index=-1, event=0)
        c.fused_parent = I.dla_consumer(index=-1, event=0)
    counts = [0] * n
    heads: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, h in enumerate(hw):
        if h.block in last:
            prev = commons[last[h.block]]
            # OP_COMPLETED: an operation of a block may read what the one before it wrote, and
            # pydla's device runs an enabled group as soon as it is enabled
            prev.consumers[h.block] = I.dla_consumer(index=i, event=I.dla_op_event_e.OP_COMPLETED)
            counts[i] += 1
        else:
            heads[h.block] = i
        last[h.block] = i
        if h.fused_parent >= 0:  # CONV -> SDP on the fly: programmed together, the SDP enabled first
            p = h.fused_parent
            commons[p].consumers[I.dla_op_e.SDP] = I.dla_consumer(
                index=i, event=I.dla_op_event_e.OP_PROGRAMMED
            )
            counts[i] += 1
            commons[i].fused_parent = I.dla_consumer(index=p, event=I.dla_op_event_e.OP_ENABLED)
            counts[p] += 1
    partner = {h.fused_parent: i for i, h in enumerate(hw) if h.fused_parent >= 0}
    partner.update({i: h.fused_parent for i, h in enumerate(hw) if h.fused_parent >= 0})
    for y, hy in enumerate(hw):
        for x in range(y):
            hx = hw[x]
            if hx.block == hy.block or partner.get(x) == y:
                continue
            raw = any(_overlap(w, r) for w in hx.writes for r in hy.reads)
            war = any(_overlap(r, w) for r in hx.reads for w in hy.writes)
            waw = any(_overlap(a, b) for a in hx.writes for b in hy.writes)
            if not (raw or war or waw):
                continue
            slot = commons[x].consumers[hy.block]
            if slot.index == -1:
                commons[x].consumers[hy.block] = I.dla_consumer(index=y, event=I.dla_op_event_e.OP_COMPLETED)
                counts[y] += 1
            elif slot.index > y:  # not reached: y only grows
                counts[slot.index] -= 1
                commons[x].consumers[hy.block] = I.dla_consumer(index=y, event=I.dla_op_event_e.OP_COMPLETED)
                counts[y] += 1
    for i, count in enumerate(counts):
        if count > 255:
            raise DlaError(NvError.OverFlow, f"operation {i} waits for {count} events; at most 255")
        commons[i].dependency_count = count
    return commons, heads
