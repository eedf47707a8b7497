"""Task descriptors in device memory: reading them through the IOMMU and checking every field.

The host pushes a descriptor's address (with the context latched from the ``ctx`` register); the
device reads the descriptor when the task reaches the head of its FIFO. Every access goes through
the IOMMU and every value is checked before use: a bad one is a :class:`ShaveFault` naming the field.

Usage::

    task = read_kernel_task(iommu, pushed, tile=0, barriers=bars)
    dma = read_dma_task(iommu, pushed, tiles=2, cmx_bytes=..., barriers=bars)
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from pydla.deviceapi.generated import shave as S
from pydla.hw.memory import Iommu, MmuFault
from pydla.hw.shave.barriers import Barriers
from pydla.hw.shave.faults import E, ShaveFault
from pydla.target.config import MAX_BYTES_PER_OP

MAX_KERNEL_BYTES = 4 << 20


@dataclass(frozen=True)
class Pushed:
    """A FIFO entry: the descriptor's address, the context latched with the push, its number."""

    ctx: int
    addr: int
    seq: int


def read_bytes(iommu: Iommu, ctx: int, addr: int, size: int, what: str) -> bytes:
    try:
        bo, offset = iommu.translate(ctx, addr, size)
    except MmuFault as e:
        raise ShaveFault(E.MMU_FAULT, f"{what}: {e}", addr=addr) from None
    return bo.array[offset:offset + size].tobytes()


def read_kernel_task(iommu: Iommu, pushed: Pushed, tile: int, barriers: Barriers) -> S.ActKernelTask:
    what = f"ActKernelTask {pushed.seq} at {pushed.addr:#x}"
    raw = read_bytes(iommu, pushed.ctx, pushed.addr, ctypes.sizeof(S.ActKernelTask), what)
    task = S.ActKernelTask.from_buffer_copy(raw)
    inv = task.invocation
    checks = [
        (inv.tile == tile, "invocation.tile", inv.tile, f"{tile} (the tile it was pushed to)"),
        (0 < inv.kernel_size <= MAX_KERNEL_BYTES, "invocation.kernel_size", inv.kernel_size,
         f"1..{MAX_KERNEL_BYTES}"),
        (inv.entry_offset < S.WIN_D_BYTES, "invocation.entry_offset", inv.entry_offset,
         f"< WIN_D_BYTES ({S.WIN_D_BYTES:#x})"),
        (inv.args_size <= S.ARGS_MAX_BYTES, "invocation.args_size", inv.args_size,
         f"<= ARGS_MAX_BYTES ({S.ARGS_MAX_BYTES})"),
        (inv.data_size == 0 or (S.ARGS_MAX_BYTES <= inv.data_offset
                                and inv.data_offset + inv.data_size <= S.WIN_E_BYTES),
         "invocation.data_offset", inv.data_offset,
         f"ARGS_MAX_BYTES.. with data_size {inv.data_size} inside WIN_E_BYTES ({S.WIN_E_BYTES:#x})"),
    ]
    for ok, field, value, rule in checks:
        if not ok:
            raise ShaveFault(E.BAD_TASK, f"{what}: {field} = {value} must be {rule}", addr=pushed.addr)
    barriers.check_mask(task.wait_mask, "wait_mask", what)
    barriers.check_mask(task.update_mask, "update_mask", what)
    return task


@dataclass(frozen=True)
class Endpoint:
    """One side of a DMA: device memory (tile None) in context ctx, or a tile's CMX slice."""

    tile: int | None
    addr: int  # an IOVA, or a byte offset in the tile's CMX slice


def read_dma_task(iommu: Iommu, pushed: Pushed, tiles: int, cmx_bytes: int,
                  barriers: Barriers) -> tuple[S.DmaTask, Endpoint, Endpoint]:
    what = f"DmaTask {pushed.seq} at {pushed.addr:#x}"
    raw = read_bytes(iommu, pushed.ctx, pushed.addr, ctypes.sizeof(S.DmaTask), what)
    t = S.DmaTask.from_buffer_copy(raw)

    def bad(field: str, value: int, rule: str) -> ShaveFault:
        return ShaveFault(E.BAD_TASK, f"{what}: {field} = {value:#x} must be {rule}", addr=pushed.addr)

    if t.line_size == 0 or t.line_repeat == 0 or t.surf_repeat == 0:
        raise bad("line_size / line_repeat / surf_repeat", min(t.line_size, t.line_repeat, t.surf_repeat),
                  ">= 1")
    if t.line_size * t.line_repeat * t.surf_repeat > MAX_BYTES_PER_OP:
        raise bad("line_size * line_repeat * surf_repeat", t.line_size * t.line_repeat * t.surf_repeat,
                  f"<= {MAX_BYTES_PER_OP}")
    ends = []
    for side in ("src", "dst"):
        tile, addr = getattr(t, f"{side}_tile"), getattr(t, f"{side}_addr")
        if tile == S.DDR:
            ends.append(Endpoint(None, addr))
            continue
        if tile >= tiles:
            raise bad(f"{side}_tile", tile, f"< {tiles} or DDR ({S.DDR:#x})")
        extent = (t.surf_repeat - 1) * getattr(t, f"{side}_surf_stride") \
            + (t.line_repeat - 1) * getattr(t, f"{side}_line_stride") + t.line_size
        if not (S.WIN_F <= addr and addr + extent <= S.WIN_F + cmx_bytes):
            raise bad(f"{side}_addr", addr, f"inside WIN_F of tile {tile} ({S.WIN_F:#x} + {cmx_bytes:#x}) "
                                            f"for its {extent} bytes")
        ends.append(Endpoint(tile, addr - S.WIN_F))
    barriers.check_mask(t.wait_mask, "wait_mask", what)
    barriers.check_mask(t.update_mask, "update_mask", what)
    return t, ends[0], ends[1]
