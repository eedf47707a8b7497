"""BDMA: NVDLA's bridge DMA, copies of strided blocks between memories.

A transfer copies ``surf_repeat + 1`` surfaces of ``line_repeat + 1`` lines of ``(line_size + 1)·32``
bytes, with independent source and destination line and surface strides (nvdla/hw
``cmod/bdma/BdmaCore.cpp``)::

    dst + s·dst_surf + l·dst_line + b  <-  src + s·src_surf + l·src_line + b

An operation is a list of up to 20 transfers (what NVDLA's firmware queues per BDMA operation),
executed in order; each transfer reads its whole source before it writes. The register fields keep
their hardware encoding: ``line_size``, ``line_repeat`` and ``surf_repeat`` hold count - 1.

Usage::

    t = BdmaTransfer(src_addr=0, dst_addr=4096, line_size=7, line_repeat=7, src_line=256,
                     dst_line=256, surf_repeat=0, src_surf=2048, dst_surf=2048)
    execute(BdmaParams((t,)), mem, NV_FULL)       # 8 lines of 256 bytes
"""

from __future__ import annotations

from dataclasses import dataclass

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.memory import RAM_MC, NvdlaMemory, access, select
from pydla.hw.nvdla.strided import read_block, write_block
from pydla.hw.nvdla.target import NvdlaTarget

MAX_TRANSFERS = 20  # NVDLA's dla_bdma_op_desc holds at most 20 transfers
LINE_UNIT = 32  # CFG_LINE.SIZE counts 32-byte units


@dataclass(frozen=True)
class BdmaTransfer:
    """One transfer: BDMA's CFG_* registers (addresses and strides in bytes)."""

    src_addr: int  # CFG_SRC_ADDR_LOW/HIGH
    dst_addr: int  # CFG_DST_ADDR_LOW/HIGH
    line_size: int  # CFG_LINE.SIZE: 32-byte units - 1
    line_repeat: int  # CFG_LINE_REPEAT.NUMBER: lines - 1
    src_line: int  # CFG_SRC_LINE.STRIDE
    dst_line: int  # CFG_DST_LINE.STRIDE
    surf_repeat: int  # CFG_SURF_REPEAT.NUMBER: surfaces - 1
    src_surf: int  # CFG_SRC_SURF.STRIDE
    dst_surf: int  # CFG_DST_SURF.STRIDE
    src_ram_type: int = RAM_MC  # CFG_CMD.SRC_RAM_TYPE (0 SRAM, 1 MC)
    dst_ram_type: int = RAM_MC  # CFG_CMD.DST_RAM_TYPE

    @property
    def line_bytes(self) -> int:
        return (self.line_size + 1) * LINE_UNIT

    @property
    def lines(self) -> int:
        return self.line_repeat + 1

    @property
    def surfaces(self) -> int:
        return self.surf_repeat + 1


@dataclass(frozen=True)
class BdmaParams:
    """One BDMA operation: its transfers, in the order they were queued."""

    transfers: tuple[BdmaTransfer, ...]


def _check(t: BdmaTransfer, what: str) -> None:
    fields = (("line_size", t.line_size, 0x1FFF), ("line_repeat", t.line_repeat, 0xFFFFFF),
              ("surf_repeat", t.surf_repeat, 0xFFFFFF))
    for name, v, top in fields:
        if not 0 <= v <= top:
            raise DlaError(NvError.BadValue, f"{what}: {name} {v} is outside its field (0..{top})")
    for side in ("src", "dst"):
        addr, line, surf = (getattr(t, f"{side}_addr"), getattr(t, f"{side}_line"),
                            getattr(t, f"{side}_surf"))
        for name, v in ((f"{side}_addr", addr), (f"{side}_line", line), (f"{side}_surf", surf)):
            if v < 0 or v % LINE_UNIT:
                raise DlaError(NvError.BadValue,
                               f"{what}: {name} {v:#x} is not a non-negative multiple of {LINE_UNIT}")
        # Lines and surfaces must not overlap (NVDLA's firmware refuses them too): this also bounds
        # the work of a transfer by the memory it spans.
        if t.lines > 1 and line < t.line_bytes:
            raise DlaError(NvError.BadValue, f"{what}: {side}_line {line} is less than the line "
                                             f"({t.line_bytes} bytes)")
        if t.surfaces > 1 and surf < (t.lines - 1) * line + t.line_bytes:
            raise DlaError(NvError.BadValue, f"{what}: {side}_surf {surf} is less than a surface of "
                                             f"{t.lines} lines")


def execute(params: BdmaParams, memory: NvdlaMemory, target: NvdlaTarget, *,
            sram: NvdlaMemory | None = None) -> None:
    """Run the operation's transfers in order."""
    if not target.has_bdma:
        raise DlaError(NvError.NotSupported, f"BDMA: {target.name} has no BDMA")
    if len(params.transfers) > MAX_TRANSFERS:
        raise DlaError(NvError.BadValue, f"BDMA: {len(params.transfers)} transfers, at most {MAX_TRANSFERS}")
    for i, t in enumerate(params.transfers):
        what = f"BDMA transfer {i}"
        _check(t, what)
        src = select(memory, sram, t.src_ram_type, f"{what} src")
        dst = select(memory, sram, t.dst_ram_type, f"{what} dst")
        with access(f"{what} src"):
            data = read_block(src, t.src_addr, (t.surfaces, t.lines), (t.src_surf, t.src_line), t.line_bytes)
        with access(f"{what} dst"):
            write_block(dst, t.dst_addr, (t.dst_surf, t.dst_line), data)
