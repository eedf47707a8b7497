"""Decoded operations, kept by their register bytes: the device's cache of the work a register group
describes.

Decoding a group (checking its registers, translating its addresses through the IOMMU into numpy
views, choosing a kernel: :mod:`pydla.hw.blocks`' ``decode_*``) depends only on the group's register
bytes and on the mappings of the context those registers name, never on the data in memory. A
network's operations are programmed with the same bytes on every run, so the device keeps each
decoded operation, keyed by the bytes of its group (and of its flying partner's), and stamped with the
context's mapping generation (:meth:`pydla.hw.memory.Iommu.generation`). A stamp that no longer
matches (a buffer was mapped, unmapped or freed since, or the context is gone) decodes anew; so does
anything after a reset, which empties the cache.

Usage::

    cache = DecodedCache(iommu, precisions)
    execute = cache.get(conv_block, 0, (sdp_block, 0))    # raises HwError / MmuFault as decode does
    execute()
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.runtime import Record
from pydla.hw import blocks
from pydla.hw.memory import Iommu, MmuFault

CAPACITY = 4096  # decoded operations per device; past it the cache starts again
_CTX_WORD = (R.BDMA_D_CTX_ID - R.BDMA_S_STATUS) >> 2  # the same in every block window


class Group(Protocol):
    """What the cache needs of a block (the device's ``_Block``)."""

    kind: dla_block_e
    groups: list[bytearray]
    words: list[memoryview]
    regs_size: int

    def snapshot(self, group: int) -> Record: ...


Execute = Callable[[], None]


class DecodedCache:
    """See the module docstring. Thread-safe (blocks of a threaded device share it)."""

    def __init__(self, iommu: Iommu, precisions: tuple[int, ...]) -> None:
        self.iommu = iommu
        self.precisions = precisions
        self._entries: dict[bytes, tuple[int, Execute]] = {}
        # The keys decoded in each context: dropped when its mappings change, so that no decoded
        # operation keeps a freed buffer's memory alive through its views.
        self._by_ctx: dict[int, set[bytes]] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self.cleared = 0  # times clear() ran
        iommu.add_listener(self.forget)

    def forget(self, ctx: int) -> None:
        """Drop the operations decoded in context ``ctx`` (its mappings changed, or it is gone)."""
        with self._lock:
            for key in self._by_ctx.pop(ctx, ()):
                self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self.cleared += 1  # (the command processor's decoded jobs compare it: pydla.hw.cmdproc)
            self._entries.clear()
            self._by_ctx.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, block: Group, group: int, partner: tuple[Group, int] | None) -> Execute:
        """The operation in ``group`` of ``block`` (with its flying ``partner``), decoded."""
        key = bytes(memoryview(block.groups[group])[:block.regs_size])
        if partner is not None:
            key += bytes(memoryview(partner[0].groups[partner[1]])[:partner[0].regs_size])
        # Read before decoding: a change of the mappings during the decode then leaves a stale stamp.
        ctx = block.words[group][_CTX_WORD]
        generation = self.iommu.generation(ctx)
        hit = self._entries.get(key)
        if hit is not None and hit[0] == generation and generation is not None:
            self.hits += 1
            return hit[1]
        self.misses += 1
        execute = self._decode(block, group, partner)
        if generation is not None:
            with self._lock:
                if self.iommu.generation(ctx) != generation:
                    return execute  # the mappings changed meanwhile: use it once, keep nothing
                if len(self._entries) >= CAPACITY:
                    self._entries.clear()
                    self._by_ctx.clear()
                self._entries[key] = (generation, execute)
                self._by_ctx.setdefault(ctx, set()).add(key)
        return execute

    def _decode(self, block: Group, group: int, partner: tuple[Group, int] | None) -> Execute:
        regs = block.snapshot(group)
        mem = blocks.ContextMemory(self.iommu, regs.d_ctx_id, self.precisions)
        # Each block's registers as its own struct (Block.snapshot makes the kind's regs_type).
        if isinstance(regs, R.conv_regs_t):
            assert partner is not None
            sdp_regs = partner[0].snapshot(partner[1])
            assert isinstance(sdp_regs, R.sdp_regs_t)
            return _decode_pair(regs, sdp_regs, mem)
        if isinstance(regs, R.sdp_regs_t):
            sdp = blocks.decode_sdp(regs, mem)
            return lambda: sdp(None, False)
        if isinstance(regs, R.bdma_regs_t):
            return blocks.decode_bdma(regs, mem)
        if isinstance(regs, R.pdp_regs_t):
            return blocks.decode_pdp(regs, mem)
        if isinstance(regs, R.cdp_regs_t):
            cdp = regs
            return lambda: blocks.run_cdp(cdp, mem)
        if isinstance(regs, R.rubik_regs_t):
            rubik = regs
            return lambda: blocks.run_rubik(rubik, mem)
        raise blocks.HwError(R.dla_hw_error_e.UNSUPPORTED, f"{block.kind.name}: no registers of this block")


def _decode_pair(regs: R.conv_regs_t, sdp_regs: R.sdp_regs_t, mem: blocks.ContextMemory) -> Execute:
    """A CONV operation and the SDP operation its result flies to."""
    if sdp_regs.d_ctx_id != regs.d_ctx_id:
        raise blocks.HwError(R.dla_hw_error_e.BAD_CONFIG,
                             f"CONV context {regs.d_ctx_id} != SDP context {sdp_regs.d_ctx_id}")
    conv = blocks.decode_conv(regs, mem, out=blocks.flying_destination(regs, sdp_regs, mem),
                              addends=blocks.sdp_addends(regs, sdp_regs, mem))
    try:
        sdp = blocks.decode_sdp(sdp_regs, mem)
    except MmuFault as e:
        e.block = int(dla_block_e.SDP)
        raise

    def execute() -> None:
        result, folded = conv()
        try:
            sdp(result, folded)
        except MmuFault as e:
            e.block = int(dla_block_e.SDP)
            raise
    return execute
