"""RUBIK: NVDLA's data reshaper (contract, split, merge), as nvdla/hw ``cmod/rubik`` moves the bytes.

RUBIK works on 32-byte atoms (nv_full only) and never changes a value:

- **contract** (the output reshuffle of a deconvolution): input surface ``(j·sx + i)·so + s`` at
  (x, y) goes to output surface ``s``, line ``y·sy + j``, column ``x·sx + i``, at
  ``dst + s·daout_surf_stride + y·contract_stride_1 + j·daout_line_stride + (x·sx + i)·32``, where
  ``so = ceil(out channels / epa)``.
- **split**: feature data to planes: channel ``c`` becomes the plane at ``dst + c·daout_planar_stride``,
  ``W`` elements per line at ``daout_line_stride``; each line is written up to the next 32-byte
  boundary, the bytes past the W elements as 0.
- **merge**: the reverse: planes at ``src + c·dain_planar_stride`` (read in whole 32-byte atoms) to
  feature data; the unused lanes of the last surface are written as 0.

Register fields keep their hardware encoding: sizes and strides of the deconvolution hold value - 1.

Usage::

    p = RubikParams(rubik_mode=0, in_precision=1, datain_width=7, ...)
    execute(p, mem, NV_FULL)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import surface
from pydla.hw.nvdla.memory import RAM_MC, NvdlaMemory, access, select
from pydla.hw.nvdla.precision import Precision, precision
from pydla.hw.nvdla.strided import read_block, write_block
from pydla.hw.nvdla.target import NvdlaTarget

ATOM = 32
CONTRACT, SPLIT, MERGE = 0, 1, 2


@dataclass(frozen=True)
class RubikParams:
    """RUBIK's registers (addresses and strides in bytes; sizes as the registers hold them, - 1)."""

    rubik_mode: int  # D_MISC_CFG.RUBIK_MODE: 0 contract, 1 split, 2 merge
    in_precision: int  # D_MISC_CFG.IN_PRECISION
    datain_width: int  # D_DATAIN_SIZE_0.DATAIN_WIDTH
    datain_height: int  # D_DATAIN_SIZE_0.DATAIN_HEIGHT
    datain_channel: int  # D_DATAIN_SIZE_1.DATAIN_CHANNEL
    dain_addr: int  # D_DAIN_ADDR_HIGH/LOW
    dain_line_stride: int
    dain_surf_stride: int
    dain_planar_stride: int
    dataout_channel: int  # D_DATAOUT_SIZE_1.DATAOUT_CHANNEL
    daout_addr: int  # D_DAOUT_ADDR_HIGH/LOW
    daout_line_stride: int
    daout_surf_stride: int
    daout_planar_stride: int
    contract_stride_0: int  # not used by the hardware's data movement (nvdla/hw cmod)
    contract_stride_1: int  # bytes from one input line's output lines to the next input line's
    deconv_x_stride: int  # D_DECONV_STRIDE.DECONV_X_STRIDE: stride - 1
    deconv_y_stride: int
    datain_ram_type: int = RAM_MC  # D_DAIN_RAM_TYPE (0 CVIF, 1 MCIF)
    dataout_ram_type: int = RAM_MC  # D_DAOUT_RAM_TYPE


def _check_fields(p: RubikParams) -> None:
    for name, top in (("datain_width", 0x1FFF), ("datain_height", 0x1FFF), ("datain_channel", 0x1FFF),
                      ("dataout_channel", 0x1FFF), ("deconv_x_stride", 0x1F), ("deconv_y_stride", 0x1F)):
        v = getattr(p, name)
        if not 0 <= v <= top:
            raise DlaError(NvError.BadValue, f"RUBIK: {name} {v} is outside its field (0..{top})")
    for name in ("dain_addr", "dain_line_stride", "dain_surf_stride", "dain_planar_stride", "daout_addr",
                 "daout_line_stride", "daout_surf_stride", "daout_planar_stride", "contract_stride_1"):
        v = getattr(p, name)
        if v < 0 or v % ATOM:
            raise DlaError(NvError.BadValue, f"RUBIK: {name} {v:#x} is not a non-negative multiple of {ATOM}")


def _no_overlap(what: str, lines: list[tuple[str, int, int]], line_bytes: int) -> None:
    """Nested strides (outermost first: name, stride, count) must keep every line apart."""
    extent = line_bytes
    for name, stride, count in reversed(lines):
        if count > 1 and stride < extent:
            raise DlaError(NvError.BadValue, f"RUBIK {what}: {name} {stride} is less than the {extent} bytes "
                                             "it must step over")
        extent = (count - 1) * stride + extent


def _contract(p: RubikParams, prec: Precision, src: NvdlaMemory, dst: NvdlaMemory) -> None:
    w, h = p.datain_width + 1, p.datain_height + 1
    sx, sy = p.deconv_x_stride + 1, p.deconv_y_stride + 1
    epa = ATOM // prec.bpe
    so = -(-(p.dataout_channel + 1) // epa)
    channels = sx * sy * so * epa
    if channels > surface.MAX_DIM:
        raise DlaError(NvError.BadValue, f"RUBIK src: contract reads {sx}x{sy}x{so} surfaces = {channels} "
                                         f"channels, more than {surface.MAX_DIM}")
    line = w * ATOM
    _no_overlap("src", [("dain_surf_stride", p.dain_surf_stride, sx * sy * so),
                        ("dain_line_stride", p.dain_line_stride, h)], line)
    _no_overlap("dst", [("daout_surf_stride", p.daout_surf_stride, so),
                        ("contract_stride_1", p.contract_stride_1, h),
                        ("daout_line_stride", p.daout_line_stride, sy)], line * sx)
    with access("RUBIK src"):
        atoms = read_block(src, p.dain_addr, (sx * sy * so, h), (p.dain_surf_stride, p.dain_line_stride),
                           line)
    # input surface (j·sx + i)·so + s  ->  output (s, y, j, x·sx + i)
    cube = atoms.reshape(sy, sx, so, h, w, ATOM)
    out = np.ascontiguousarray(cube.transpose(2, 3, 0, 4, 1, 5)).reshape(so, h, sy, w * sx * ATOM)
    with access("RUBIK dst"):
        write_block(dst, p.daout_addr, (p.daout_surf_stride, p.contract_stride_1, p.daout_line_stride), out)


def _plane_line(w: int, prec: Precision) -> int:
    """Bytes RUBIK moves per plane line: W elements rounded up to whole 32-byte atoms."""
    return -(-w * prec.bpe // ATOM) * ATOM


def _split(p: RubikParams, prec: Precision, src: NvdlaMemory, dst: NvdlaMemory, target: NvdlaTarget) -> None:
    w, h, c = p.datain_width + 1, p.datain_height + 1, p.datain_channel + 1
    if p.dataout_channel != p.datain_channel:
        # The hardware reads datain_channel's surfaces and writes dataout_channel's planes; different
        # counts leave its internal FIFOs out of step.
        raise DlaError(NvError.BadValue, f"RUBIK: split of {c} channels into {p.dataout_channel + 1} planes "
                                         "(datain_channel and dataout_channel differ)")
    cube = surface.Cube(p.dain_addr, w, h, c, p.dain_line_stride, p.dain_surf_stride, prec)
    data = surface.gather(src, cube, target, "RUBIK src")  # (C, H, W)
    lb = _plane_line(w, prec)
    _no_overlap("dst", [("daout_planar_stride", p.daout_planar_stride, c),
                        ("daout_line_stride", p.daout_line_stride, h)], lb)
    planes = np.zeros((c, h, lb), dtype=np.uint8)
    planes[:, :, :w * prec.bpe] = np.ascontiguousarray(data).view(np.uint8).reshape(c, h, w * prec.bpe)
    with access("RUBIK dst"):
        write_block(dst, p.daout_addr, (p.daout_planar_stride, p.daout_line_stride), planes)


def _merge(p: RubikParams, prec: Precision, src: NvdlaMemory, dst: NvdlaMemory, target: NvdlaTarget) -> None:
    w, h, c = p.datain_width + 1, p.datain_height + 1, p.datain_channel + 1
    lb = _plane_line(w, prec)
    _no_overlap("src", [("dain_planar_stride", p.dain_planar_stride, c),
                        ("dain_line_stride", p.dain_line_stride, h)], lb)
    with access("RUBIK src"):
        raw = read_block(src, p.dain_addr, (c, h), (p.dain_planar_stride, p.dain_line_stride), lb)
    data = np.ascontiguousarray(raw[:, :, :w * prec.bpe]).view(prec.dtype).reshape(c, h, w)
    cube = surface.Cube(p.daout_addr, w, h, c, p.daout_line_stride, p.daout_surf_stride, prec)
    surface.scatter(dst, cube, target, data, "RUBIK dst")


def execute(params: RubikParams, memory: NvdlaMemory, target: NvdlaTarget, *,
            sram: NvdlaMemory | None = None) -> None:
    """Run one RUBIK operation."""
    if not target.has_rubik:
        raise DlaError(NvError.NotSupported, f"RUBIK: {target.name} has no RUBIK")
    if target.atom != ATOM:
        raise DlaError(NvError.NotSupported,
                       f"RUBIK: works on 32-byte atoms, {target.name} has {target.atom}")
    _check_fields(params)
    prec = precision(params.in_precision, "RUBIK D_MISC_CFG.IN_PRECISION")
    target.require(prec, "RUBIK")
    src = select(memory, sram, params.datain_ram_type, "RUBIK src")
    dst = select(memory, sram, params.dataout_ram_type, "RUBIK dst")
    if params.rubik_mode == CONTRACT:
        _contract(params, prec, src, dst)
    elif params.rubik_mode == SPLIT:
        _split(params, prec, src, dst, target)
    elif params.rubik_mode == MERGE:
        _merge(params, prec, src, dst, target)
    else:
        raise DlaError(NvError.BadValue, f"RUBIK: rubik_mode {params.rubik_mode} is not contract (0), "
                                         "split (1) or merge (2)")
