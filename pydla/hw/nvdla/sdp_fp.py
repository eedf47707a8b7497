"""The SDP's FP16 processing, as nvdla/hw ``cmod/hls/sdp`` computes it, in NVDLA's FP32.

Inputs are FP32 bit patterns (FP16 from memory widened by ``Fp16ToFp32``, or FP32 from the
convolution); with ``nan_to_zero`` NaN inputs and NaN FP16 operands become 0.

- X (X1, X2): ALU = FP32 max / min / add with the FP16 operand widened to FP32 (the shift value is
  not used; "equal" gives 0 or 1 as an integer pattern); MUL = FP32 product, PReLU passing values
  whose sign bit is 0; no truncation; ReLU.
- Y: memory operands are FP16 widened to FP32 (no offset/scale conversion), register operands FP32;
  MUL then ALU as in X; then the LUT (sdp_lut.lut_fp16).
- C: FP32 -> FP16 (rounded to nearest even, saturating at 65504), then to INT16 for an INT16
  output; an INT8 output gets the FP16 pattern's low byte, as the C model writes it.

Usage::

    out, unequal = datapath(fp32_bits, params, operands, Precision.FP16)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.intmath import I64, wrap
from pydla.hw.nvdla.nvfloat import (
    FP16,
    FP32,
    fp16_to_fp32,
    fp16_to_int16,
    fp32_to_fp16,
    fp_add,
    fp_max,
    fp_min,
    fp_mul,
    fp_relu,
    int_to_fp16,
    split,
)
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_lut import lut_fp16
from pydla.hw.nvdla.sdp_params import ALU_EQL, ALU_MAX, ALU_SUM, SRC_MEM, SdpParams, SdpX

__all__ = ["datapath", "fp16_to_fp32", "int17_to_fp16"]


def int17_to_fp16(value: I64) -> I64:
    """The output converter's INT -> FP16 (``Int17ToFp16``)."""
    return int_to_fp16(value, 17)


def _nan_to_zero(bits: I64, f: tuple[int, int], on: bool) -> I64:
    if not on:
        return bits
    fmt = FP16 if f == (FP16.e, FP16.m) else FP32
    _, e, m = split(bits, fmt)
    out: I64 = np.where((e == fmt.emax) & (m != 0), 0, bits)
    return out


def _alu(algo: int, a: I64, b: I64) -> I64:
    if algo == ALU_SUM:
        return fp_add(a, b, FP32)
    if algo == ALU_MAX:
        return fp_max(a, b, FP32)
    if algo == ALU_EQL:
        ne: I64 = (np.broadcast_to(a, np.broadcast(a, b).shape) != b).astype(np.int64)
        return ne
    return fp_min(a, b, FP32)


def _x(data: I64, alu16: I64, mul16: I64, x: SdpX, nan0: bool) -> I64:
    if x.bypass:
        return data
    out = data
    if not x.alu_bypass:
        op = fp16_to_fp32(_nan_to_zero(alu16 & 0xFFFF, (5, 10), nan0))
        out = _alu(x.alu_algo, out, op)
    if not x.mul_bypass:
        op = fp16_to_fp32(_nan_to_zero(mul16 & 0xFFFF, (5, 10), nan0))
        product = fp_mul(out, op, FP32)
        out = np.where(((out >> 31) & 1) == 0, out, product) if x.mul_prelu else product
    out = out & 0xFFFFFFFF
    if not x.relu_bypass:
        out = fp_relu(out, FP32)
    return out


def datapath(data: I64, p: SdpParams, ops: dict[str, tuple[I64, I64]], pout: Precision
             ) -> tuple[npt.NDArray[np.generic], bool]:
    """X1, X2, Y and the output converter in FP16 processing: (output elements, "unequal")."""
    nan0 = bool(p.nan_to_zero)
    v = _nan_to_zero(data & 0xFFFFFFFF, (8, 23), nan0)

    def operands(stage: str, alu_reg: int, mul_reg: int) -> tuple[I64, I64]:
        mem = ops.get(stage)
        s = getattr(p, stage)
        alu = mem[0] if mem is not None and s.alu_src == SRC_MEM else np.asarray(alu_reg & 0xFFFF)
        mul = mem[1] if mem is not None and s.mul_src == SRC_MEM else np.asarray(mul_reg & 0xFFFF)
        return alu, mul

    a, m = operands("bs", p.bs.alu_operand, p.bs.mul_operand)
    v = _x(v, a, m, p.bs, nan0)
    a, m = operands("bn", p.bn.alu_operand, p.bn.mul_operand)
    v = _x(v, a, m, p.bn, nan0)
    y = p.ew
    unequal = False
    if not y.bypass:
        mem = ops.get("ew")
        if mem is not None and y.mul_src == SRC_MEM and not y.mul_bypass:
            mul_op = fp16_to_fp32(_nan_to_zero(mem[1] & 0xFFFF, (5, 10), nan0))
        else:
            mul_op = np.asarray(y.mul_operand & 0xFFFFFFFF)
        if mem is not None and y.alu_src == SRC_MEM and not y.alu_bypass:
            alu_op = fp16_to_fp32(_nan_to_zero(mem[0] & 0xFFFF, (5, 10), nan0))
        else:
            alu_op = np.asarray(y.alu_operand & 0xFFFFFFFF)
        if not y.mul_bypass:
            product = fp_mul(v, mul_op, FP32)
            v = np.where(((v >> 31) & 1) == 0, v, product) if y.mul_prelu else product
        if not y.alu_bypass:
            v = _alu(y.alu_algo, v, alu_op)
        if not y.lut_bypass:
            v = lut_fp16(v, p.lut)
        if not y.alu_bypass and y.alu_algo == ALU_EQL:
            unequal = bool(np.any(wrap(v, 16) != 0))
    half = fp32_to_fp16(v)
    if pout is Precision.INT16:
        return fp16_to_int16(half).astype(np.int16), unequal
    if pout is Precision.INT8:
        return wrap(half, 8).astype(np.int8), unequal
    return half.astype(np.uint16), unequal
