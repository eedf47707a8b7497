"""The SDP's register-level parameters (SDP and SDP_RDMA), grouped by stage.

Field names are NVDLA's register field names in lower case; the X1 (``BS_``), X2 (``BN_``) and Y
(``EW_``) stages share one dataclass each, with the stage prefix dropped (``BS_ALU_ALGO`` is
``bs.alu_algo``), and so do the three operand DMAs of SDP_RDMA (``BRDMA_``/``BS_``, ``NRDMA_``/``BN_``,
``ERDMA_``/``EW_``). Sizes hold value - 1 as the registers do; addresses and strides are bytes.
Every default is the stage's bypass or zero, so a test names only what it uses.

Usage::

    p = SdpParams(width=7, height=7, channel=31, src_base_addr=0x1000, src_line_stride=256, ...,
                  bs=SdpX(bypass=0, alu_bypass=1, mul_bypass=1, relu_bypass=0))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydla.hw.nvdla.memory import RAM_MC

# D_DP_*_CFG.*_ALU_ALGO
ALU_MAX, ALU_MIN, ALU_SUM, ALU_EQL = 0, 1, 2, 3
# *_SRC: operand from the register (per layer) or from SDP_RDMA's operand DMA
SRC_REG, SRC_MEM = 0, 1
# SDP_RDMA *_DATA_USE, *_DATA_SIZE, *_DATA_MODE
USE_MUL, USE_ALU, USE_BOTH = 0, 1, 2
SIZE_ONE_BYTE, SIZE_TWO_BYTE = 0, 1
MODE_PER_KERNEL, MODE_PER_ELEMENT = 0, 1
# D_FEATURE_MODE_CFG.OUTPUT_DST
DST_MEM, DST_PDP = 0, 1
LE_ENTRIES, LO_ENTRIES = 65, 257


@dataclass(frozen=True)
class SdpX:
    """X1 (``D_DP_BS_*``) or X2 (``D_DP_BN_*``): ALU, multiplier with shifter, ReLU."""

    bypass: int = 1  # *_BYPASS: the whole stage
    alu_bypass: int = 1
    alu_algo: int = ALU_MAX  # 0 max, 1 min, 2 sum (3 acts as sum here)
    alu_src: int = SRC_REG
    alu_shift_value: int = 0  # the operand's left shift (6 bits)
    alu_operand: int = 0  # *_ALU_SRC_VALUE: 16 bits (INT, or FP16 bits)
    mul_bypass: int = 1
    mul_prelu: int = 0
    mul_src: int = SRC_REG
    mul_shift_value: int = 0  # the product's rounding right shift ("truncate"; low 6 bits used)
    mul_operand: int = 0  # *_MUL_SRC_VALUE: 16 bits
    relu_bypass: int = 1


@dataclass(frozen=True)
class SdpY:
    """Y (``D_DP_EW_*``): multiplier, ALU (with operand converters), then the LUT."""

    bypass: int = 1
    alu_bypass: int = 1
    alu_algo: int = ALU_MAX  # 0 max, 1 min, 2 sum, 3 equal (then the SDP writes no output)
    alu_src: int = SRC_REG
    alu_cvt_bypass: int = 1
    alu_operand: int = 0  # EW_ALU_OPERAND: 32 bits (INT, or FP32 bits)
    alu_cvt_offset: int = 0  # 32 bits
    alu_cvt_scale: int = 0  # 16 bits
    alu_cvt_truncate: int = 0  # 6 bits
    mul_bypass: int = 1
    mul_prelu: int = 0
    mul_src: int = SRC_REG
    mul_cvt_bypass: int = 1
    mul_operand: int = 0
    mul_cvt_offset: int = 0
    mul_cvt_scale: int = 0
    mul_cvt_truncate: int = 0
    truncate: int = 0  # EW_TRUNCATE: the product's rounding right shift (10 bits)
    lut_bypass: int = 1


@dataclass(frozen=True)
class SdpOperandDma:
    """One of SDP_RDMA's operand reads: ``D_BRDMA_CFG`` + ``D_BS_*`` (X1), ``NRDMA``/``BN`` (X2),
    ``ERDMA``/``EW`` (Y)."""

    disable: int = 1
    data_use: int = USE_MUL  # 0 MUL, 1 ALU, 2 BOTH (ALU and MUL operands interleaved)
    data_size: int = SIZE_ONE_BYTE  # 0 one byte, 1 two bytes per operand
    data_mode: int = MODE_PER_KERNEL  # 0 one per channel, 1 one per element (a cube)
    ram_type: int = RAM_MC
    base_addr: int = 0
    line_stride: int = 0
    surface_stride: int = 0


@dataclass(frozen=True)
class SdpLut:
    """The SDP LUT: ``S_LUT_*`` registers and the two tables written through ``S_LUT_ACCESS_DATA``."""

    le_function: int = 1  # LUT_LE_FUNCTION: 0 exponent, 1 linear
    uflow_priority: int = 0  # 0 LE, 1 LO
    oflow_priority: int = 0
    hybrid_priority: int = 0
    le_index_offset: int = 0  # 8-bit fields, read as signed
    le_index_select: int = 0
    lo_index_select: int = 0
    le_start: int = 0  # 32-bit registers (INT, or FP32 bits)
    le_end: int = 0
    lo_start: int = 0
    lo_end: int = 0
    le_slope_uflow_scale: int = 0  # 16 bits (INT, or FP16 bits)
    le_slope_uflow_shift: int = 0  # 5 bits
    le_slope_oflow_scale: int = 0
    le_slope_oflow_shift: int = 0
    lo_slope_uflow_scale: int = 0
    lo_slope_uflow_shift: int = 0
    lo_slope_oflow_scale: int = 0
    lo_slope_oflow_shift: int = 0
    le_table: tuple[int, ...] = (0,) * LE_ENTRIES  # 16-bit entries (INT, or FP16 bits)
    lo_table: tuple[int, ...] = (0,) * LO_ENTRIES


@dataclass(frozen=True)
class SdpParams:
    """One SDP operation: the data cube, source, destination, the stages and the output converter."""

    width: int  # D_DATA_CUBE_WIDTH: width - 1 (the same in SDP and SDP_RDMA)
    height: int
    channel: int
    in_precision: int  # SDP_RDMA D_FEATURE_MODE_CFG.IN_PRECISION: 0 INT8, 1 INT16, 2 FP16
    proc_precision: int  # D_DATA_FORMAT.PROC_PRECISION
    out_precision: int  # D_DATA_FORMAT.OUT_PRECISION
    src_base_addr: int = 0  # SDP_RDMA D_SRC_* (unused on the fly)
    src_line_stride: int = 0
    src_surface_stride: int = 0
    src_ram_type: int = RAM_MC
    dst_base_addr: int = 0  # D_DST_* (unused when the output goes to the PDP)
    dst_line_stride: int = 0
    dst_surface_stride: int = 0
    dst_batch_stride: int = 0
    dst_ram_type: int = RAM_MC
    flying_mode: int = 0  # D_FEATURE_MODE_CFG.FLYING_MODE: 1 = input from the convolution
    output_dst: int = DST_MEM  # 0 memory, 1 the PDP
    winograd: int = 0
    nan_to_zero: int = 0
    batch_number: int = 0  # batches - 1
    bs: SdpX = field(default_factory=SdpX)
    bn: SdpX = field(default_factory=SdpX)
    ew: SdpY = field(default_factory=SdpY)
    brdma: SdpOperandDma = field(default_factory=SdpOperandDma)
    nrdma: SdpOperandDma = field(default_factory=SdpOperandDma)
    erdma: SdpOperandDma = field(default_factory=SdpOperandDma)
    lut: SdpLut = field(default_factory=SdpLut)
    cvt_offset: int = 0  # D_CVT_OFFSET: 32 bits
    cvt_scale: int = 1  # D_CVT_SCALE: 16 bits
    cvt_shift: int = 0  # D_CVT_SHIFT: 6 bits
