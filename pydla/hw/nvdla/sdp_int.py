"""The SDP's integer data path (INT8/INT16 processing), as nvdla/hw ``cmod/hls/sdp`` computes it.

Per element, 32-bit values flow X1 -> X2 -> Y -> C (``sdp_x.cpp``, ``sdp_y_core.cpp``,
``sdp_y_cvt.cpp``, ``sdp_c.cpp``; widths from ``sdp.h``):

- X (X1, X2): ALU: the 16-bit operand shifted left by ``alu_shift_value`` with saturation to 32 bits,
  then max / min / sum with the input (the sum kept in 33 bits). MUL: the 33-bit value times the
  16-bit operand (49 bits); PReLU passes non-negative values unmultiplied. Then the rounding right
  shift by ``mul_shift_value`` (round half away from zero, saturation to 32 bits), also when the
  multiplier is bypassed; a PReLU-passed value skips it and keeps its low 32 bits. Then ReLU.
- Y: memory operands (16 bits) pass their converter ``(op - offset)·scale >> truncate`` (rounded,
  saturated to 32 bits) unless bypassed. MUL first: the 32-bit input times the 32-bit operand (64
  bits), rounded right shift by ``truncate``, saturated; PReLU passes non-negative inputs. Then the
  ALU (max, min, sum, or "not equal" as 0/1) saturated to 32 bits. Then the LUT (sdp_lut).
- C: ``(x - cvt_offset)·cvt_scale`` (33 x 16 -> 49 bits), rounded right shift by ``cvt_shift`` with
  saturation to 17 bits, then saturation to the output's 8 or 16 bits (or FP16 from the 17-bit
  integer).

Values are int64 numpy arrays (any shape; operands broadcast).

Usage::

    y = x_stage(data, alu_op, mul_op, params.bs)
"""

from __future__ import annotations

import numpy as np

from pydla.hw.nvdla.intmath import (
    I64,
    saturate,
    shift_left_sat,
    shift_right_round,
    shift_right_round_sat,
    wrap,
)
from pydla.hw.nvdla.sdp_params import ALU_EQL, ALU_MAX, ALU_MIN, SRC_MEM, SdpX, SdpY


def x_stage(data: I64, alu_op: I64, mul_op: I64, x: SdpX) -> I64:
    """One X stage (X1 or X2) on 32-bit values; operands are the 16-bit values (register or memory)."""
    if x.bypass:
        return data
    if x.alu_bypass:
        alu = data
    else:
        operand = shift_left_sat(alu_op, x.alu_shift_value & 0x3F, 32)
        if x.alu_algo == ALU_MAX:
            alu = np.maximum(data, operand)
        elif x.alu_algo == ALU_MIN:
            alu = np.minimum(data, operand)
        else:
            alu = data + operand  # 33 bits: no saturation before the shifter
    shift = x.mul_shift_value & 0x3F
    if x.mul_bypass:
        out = shift_right_round_sat(alu, shift, 32)
    else:
        product = alu * mul_op
        out = shift_right_round_sat(product, shift, 32)
        if x.mul_prelu:
            out = np.where(alu >= 0, wrap(alu, 32), out)
    if not x.relu_bypass:
        out = np.maximum(out, 0)
    return out


def y_operand_cvt(op16: I64, bypass: int, offset: int, scale: int, truncate: int) -> I64:
    """Y's converter of a memory operand (16 bits in, 32 bits out)."""
    if bypass:
        return op16
    prod = (op16 - int(wrap(offset, 32))) * int(wrap(scale, 16))
    return shift_right_round_sat(prod, truncate & 0x3F, 32)


def y_core(data: I64, alu_op: I64, mul_op: I64, y: SdpY) -> I64:
    """Y's multiplier then ALU, on 32-bit values with 32-bit operands (converted already)."""
    if y.mul_bypass:
        mul = data
    else:
        product = data * mul_op  # |product| <= 2^62
        mul = shift_right_round_sat(product, y.truncate & 0x3FF, 32)
        if y.mul_prelu:
            mul = np.where(data >= 0, data, mul)
    if y.alu_bypass:
        return mul
    if y.alu_algo == ALU_MAX:
        out = np.maximum(mul, alu_op)
    elif y.alu_algo == ALU_MIN:
        out = np.minimum(mul, alu_op)
    elif y.alu_algo == ALU_EQL:
        out = (mul != alu_op).astype(np.int64)
    else:
        out = mul + alu_op
    return saturate(out, 32)


def y_operands(alu_mem: I64, mul_mem: I64, y: SdpY) -> tuple[I64, I64]:
    """Y's ALU and MUL operands: the 32-bit registers, or the converted memory operands."""
    if y.alu_src == SRC_MEM and not y.alu_bypass:
        alu = y_operand_cvt(alu_mem, y.alu_cvt_bypass, y.alu_cvt_offset, y.alu_cvt_scale, y.alu_cvt_truncate)
    else:
        alu = np.asarray(wrap(y.alu_operand, 32))
    if y.mul_src == SRC_MEM and not y.mul_bypass:
        mul = y_operand_cvt(mul_mem, y.mul_cvt_bypass, y.mul_cvt_offset, y.mul_cvt_scale, y.mul_cvt_truncate)
    else:
        mul = np.asarray(wrap(y.mul_operand, 32))
    return alu, mul


def c_convert(data: I64, offset: int, scale: int, shift: int) -> I64:
    """The output converter up to its 17-bit result (saturate to 8/16 bits or convert to FP16 next)."""
    diff = data - wrap(offset, 32)
    prod = diff * int(wrap(scale, 16))
    return saturate(shift_right_round(prod, shift & 0x3F), 17)
