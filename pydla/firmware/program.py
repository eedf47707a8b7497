"""Programming one operation into a register group of its block (the per-block "program" step).

Each function writes the D registers of the group the block's producer pointer selects, from the
operation's (validated) descriptors; addresses are the task's address-list entries resolved through
``dla_read_dma_address``. The op-enable register is written later, by the scheduler, when the
operation's dependencies are met.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware.graph import Operation
from pydla.firmware.interface import FirmwarePortability, TaskDesc

# Per-block registers every block has, by the generated register names (BDMA_S_POINTER, ...).
POINTER = {b: R.REGISTERS[f"{b.name}_S_POINTER"] for b in dla_block_e}
OP_ENABLE = {b: R.REGISTERS[f"{b.name}_D_OP_ENABLE"] for b in dla_block_e}
STATUS = {b: R.REGISTERS[f"{b.name}_S_STATUS"] for b in dla_block_e}
ERROR = {b: R.REGISTERS[f"{b.name}_S_ERROR"] for b in dla_block_e}
_CTX = {b: R.REGISTERS[f"{b.name}_D_CTX_ID"] for b in dla_block_e}


def f32_bits(value: float) -> int:
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return bits


class _Writer:
    """Collects an operation's register writes (written in one batch by program_operation)."""

    def __init__(self, port: FirmwarePortability, task: TaskDesc, op: Operation) -> None:
        self.port = port
        self.task = task
        self.what = op.name
        self.writes: list[tuple[int, int]] = []

    def reg(self, addr: int, value: int) -> None:
        self.writes.append((addr, value & 0xFFFFFFFF))

    def address(self, ref: Any, name: str) -> int:
        if ref.address < 0:
            return 0
        base = self.port.dla_read_dma_address(self.task, ref.address, f"{self.what}: {name}")
        return base + int(ref.offset)

    def addr(self, lo: int, ref: Any, name: str) -> None:
        a = self.address(ref, name)
        self.reg(lo, a)
        self.reg(lo + 4, a >> 32)

    def cube(self, lo: int, c: Any, name: str) -> None:
        """A cube_regs_t: addr_lo, addr_hi, width, height, channels, line_stride, surf_stride."""
        self.addr(lo, c, name)
        for i, value in enumerate((c.width, c.height, c.channels, c.line_stride, c.surf_stride)):
            self.reg(lo + 8 + 4 * i, value)


def _bdma(w: _Writer, d: Any, s: Any) -> None:
    w.addr(R.BDMA_D_SRC_ADDR_LO, s.src, "src")
    w.addr(R.BDMA_D_DST_ADDR_LO, s.dst, "dst")
    for addr, value in ((R.BDMA_D_LINE_SIZE, d.line_size), (R.BDMA_D_LINE_REPEAT, d.line_repeat),
                        (R.BDMA_D_SRC_LINE_STRIDE, d.src_line_stride),
                        (R.BDMA_D_DST_LINE_STRIDE, d.dst_line_stride),
                        (R.BDMA_D_SURF_REPEAT, d.surf_repeat),
                        (R.BDMA_D_SRC_SURF_STRIDE, d.src_surf_stride),
                        (R.BDMA_D_DST_SURF_STRIDE, d.dst_surf_stride)):
        w.reg(addr, value)


def _conv(w: _Writer, d: Any, s: Any) -> None:
    w.reg(R.CONV_D_PRECISION, d.precision)
    w.reg(R.CONV_D_MODE, d.mode)
    w.cube(R.CONV_D_SRC_ADDR_LO, s.src, "src")
    w.addr(R.CONV_D_WT_ADDR_LO, s.weight, "weight")
    for addr, value in ((R.CONV_D_WT_KERNELS, d.kernels), (R.CONV_D_WT_CHANNELS, d.kernel_channels),
                        (R.CONV_D_WT_HEIGHT, d.kernel_height), (R.CONV_D_WT_WIDTH, d.kernel_width),
                        (R.CONV_D_STRIDE_X, d.stride_x), (R.CONV_D_STRIDE_Y, d.stride_y),
                        (R.CONV_D_PAD_LEFT, d.pad_left), (R.CONV_D_PAD_RIGHT, d.pad_right),
                        (R.CONV_D_PAD_TOP, d.pad_top), (R.CONV_D_PAD_BOTTOM, d.pad_bottom),
                        (R.CONV_D_DILATION_X, d.dilation_x), (R.CONV_D_DILATION_Y, d.dilation_y),
                        (R.CONV_D_GROUPS, d.groups), (R.CONV_D_OUT_WIDTH, d.out_width),
                        (R.CONV_D_OUT_HEIGHT, d.out_height), (R.CONV_D_OUT_PAD_X, d.out_pad_x),
                        (R.CONV_D_OUT_PAD_Y, d.out_pad_y), (R.CONV_D_WT_FORMAT, d.weight_format)):
        w.reg(addr, value)


def _lut(w: _Writer, op: Operation) -> None:
    index, offset = op.lut_address
    base = w.port.dla_read_dma_address(w.task, index, f"{op.name}: LUT") + offset
    w.reg(R.SDP_D_LUT_ADDR_LO, base)
    w.reg(R.SDP_D_LUT_ADDR_HI, base >> 32)
    w.reg(R.SDP_D_LUT_ENTRIES, op.lut.entries)
    w.reg(R.SDP_D_LUT_START, f32_bits(op.lut.start))
    w.reg(R.SDP_D_LUT_END, f32_bits(op.lut.end))


def _sdp(w: _Writer, d: Any, s: Any) -> None:
    for addr, value in ((R.SDP_D_PRECISION, d.precision), (R.SDP_D_OUT_PRECISION, d.out_precision),
                        (R.SDP_D_SRC_MODE, d.src_mode)):
        w.reg(addr, value)
    w.cube(R.SDP_D_SRC_ADDR_LO, s.src, "src")
    w.cube(R.SDP_D_DST_ADDR_LO, s.dst, "dst")
    w.reg(R.SDP_D_BIAS_ENABLE, d.bias_enable)
    w.addr(R.SDP_D_BIAS_ADDR_LO, s.bias, "bias")
    w.reg(R.SDP_D_BN_ENABLE, d.bn_enable)
    w.addr(R.SDP_D_SCALE_ADDR_LO, s.scale, "scale")
    w.addr(R.SDP_D_SHIFT_ADDR_LO, s.shift, "shift")
    w.reg(R.SDP_D_EW_OP, d.ew_op)
    w.reg(R.SDP_D_EW_MODE, d.ew_mode)
    w.reg(R.SDP_D_EW_SWAP, d.ew_swap)
    w.addr(R.SDP_D_EW_ADDR_LO, s.ew, "ew")
    w.reg(R.SDP_D_EW_LINE_STRIDE, s.ew.line_stride)
    w.reg(R.SDP_D_EW_SURF_STRIDE, s.ew.surf_stride)
    w.reg(R.SDP_D_ACT, d.act)
    w.reg(R.SDP_D_ACT_ALPHA, f32_bits(d.act_alpha))
    w.reg(R.SDP_D_ACT_MIN, f32_bits(d.act_min))
    w.reg(R.SDP_D_ACT_MAX, f32_bits(d.act_max))
    w.addr(R.SDP_D_PRELU_ADDR_LO, s.prelu, "prelu")


def _pdp(w: _Writer, d: Any, s: Any) -> None:
    w.reg(R.PDP_D_PRECISION, d.precision)
    w.cube(R.PDP_D_SRC_ADDR_LO, s.src, "src")
    w.cube(R.PDP_D_DST_ADDR_LO, s.dst, "dst")
    for addr, value in ((R.PDP_D_KERNEL_WIDTH, d.kernel_width), (R.PDP_D_KERNEL_HEIGHT, d.kernel_height),
                        (R.PDP_D_STRIDE_X, d.stride_x), (R.PDP_D_STRIDE_Y, d.stride_y),
                        (R.PDP_D_PAD_LEFT, d.pad_left), (R.PDP_D_PAD_RIGHT, d.pad_right),
                        (R.PDP_D_PAD_TOP, d.pad_top), (R.PDP_D_PAD_BOTTOM, d.pad_bottom),
                        (R.PDP_D_METHOD, d.method), (R.PDP_D_COUNT_INCLUDE_PAD, d.count_include_pad)):
        w.reg(addr, value)


def _cdp(w: _Writer, d: Any, s: Any) -> None:
    w.reg(R.CDP_D_PRECISION, d.precision)
    w.cube(R.CDP_D_SRC_ADDR_LO, s.src, "src")
    w.cube(R.CDP_D_DST_ADDR_LO, s.dst, "dst")
    w.reg(R.CDP_D_LRN_SIZE, d.size)
    w.reg(R.CDP_D_LRN_ALPHA, f32_bits(d.alpha))
    w.reg(R.CDP_D_LRN_BETA, f32_bits(d.beta))
    w.reg(R.CDP_D_LRN_BIAS, f32_bits(d.bias))


def _rubik(w: _Writer, d: Any, s: Any) -> None:
    w.reg(R.RUBIK_D_PRECISION, d.precision)
    w.reg(R.RUBIK_D_MODE, d.mode)
    w.cube(R.RUBIK_D_SRC_ADDR_LO, s.src, "src")
    w.cube(R.RUBIK_D_DST_ADDR_LO, s.dst, "dst")
    for addr, value in ((R.RUBIK_D_BLOCK_X, d.block_x), (R.RUBIK_D_BLOCK_Y, d.block_y),
                        (R.RUBIK_D_DCR, d.dcr), (R.RUBIK_D_PERM, d.perm)):
        w.reg(addr, value)


_PROGRAM: dict[dla_block_e, Callable[[_Writer, Any, Any], None]] = {
    dla_block_e.BDMA: _bdma, dla_block_e.CONV: _conv, dla_block_e.SDP: _sdp,
    dla_block_e.PDP: _pdp, dla_block_e.CDP: _cdp, dla_block_e.RUBIK: _rubik,
}


@dataclass(frozen=True)
class Program:
    """An operation's register writes, packed: register addresses and values as two uint32 arrays
    (written in one call, :meth:`FirmwarePortability.dla_reg_write_words`)."""

    addresses: npt.NDArray[np.uint32]
    values: npt.NDArray[np.uint32]

    @classmethod
    def of(cls, writes: tuple[tuple[int, int], ...]) -> Program:
        addresses = np.array([a for a, _ in writes], dtype=np.uint32)
        values = np.array([v for _, v in writes], dtype=np.uint32)
        addresses.flags.writeable = values.flags.writeable = False  # shared by every run of the task
        return cls(addresses, values)


def register_writes(port: FirmwarePortability, task: TaskDesc, op: Operation) -> tuple[tuple[int, int], ...]:
    """The (register, value) writes that configure ``op`` in whichever group is selected."""
    w = _Writer(port, task, op)
    w.reg(_CTX[op.block], task.ctx)
    _PROGRAM[op.block](w, op.op, op.surface)
    if op.lut is not None:
        _lut(w, op)
    return tuple(w.writes)


def program_operation(port: FirmwarePortability, task: TaskDesc, op: Operation, group: int,
                      programs: dict[int, Program] | None = None) -> None:
    """Select ``group`` of the operation's block and write the operation's configuration into it.
    ``programs`` caches the packed writes by operation index: valid for one task's resolved
    addresses (a graph is kept per address list, so its programs are too)."""
    program = programs.get(op.index) if programs is not None else None
    if program is None:
        program = Program.of(register_writes(port, task, op))
        if programs is not None:
            programs[op.index] = program
    port.dla_reg_write(POINTER[op.block], group)
    port.dla_reg_write_words(program.addresses, program.values)


def enable_operation(port: FirmwarePortability, op: Operation, group: int) -> None:
    port.dla_reg_write(POINTER[op.block], group)
    port.dla_reg_write(OP_ENABLE[op.block], 1)
