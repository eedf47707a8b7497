"""The CDP's register-level parameters (CDP and CDP_RDMA), with its lookup tables.

Field names are NVDLA's register field names in lower case without the ``LUT_`` prefix of the
``S_LUT_*`` registers (``S_LUT_INFO.LUT_LE_INDEX_SELECT`` is ``lut.le_index_select``). Sizes hold
value - 1; addresses and strides are bytes. The LE/LO start and end points are the CDP's 38-bit
registers as their LOW (32 bits) and HIGH (6 bits) words; table entries, scales, offsets and selects
are the register fields' bits (signed values are accepted too and taken modulo the field).

Usage::

    p = CdpParams(width=7, height=7, channel=31, src_base_addr=0x1000, src_line_stride=256,
                  src_surface_stride=2048, dst_base_addr=0x4000, dst_line_stride=256,
                  dst_surface_stride=2048, input_data=1, normalz_len=0, datout_scale=1, lut=CdpLut())
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydla.hw.nvdla.memory import RAM_MC

LE_ENTRIES, LO_ENTRIES = 65, 257
EXPONENT, LINEAR = 0, 1  # S_LUT_CFG.LUT_LE_FUNCTION
PRI_LE, PRI_LO = 0, 1  # S_LUT_CFG.LUT_*_PRIORITY


@dataclass(frozen=True)
class CdpLut:
    """``S_LUT_*``: the two tables and how they are looked up."""

    le_function: int = LINEAR  # 0 exponent, 1 linear
    uflow_priority: int = PRI_LE
    oflow_priority: int = PRI_LE
    hybrid_priority: int = PRI_LE
    le_index_offset: int = 0  # 8 bits
    le_index_select: int = 0  # 8 bits
    lo_index_select: int = 0  # 8 bits
    le_start_low: int = 0  # 32 bits (INT, or the FP32 bits for FP16)
    le_start_high: int = 0  # 6 bits
    le_end_low: int = 0
    le_end_high: int = 0
    lo_start_low: int = 0
    lo_start_high: int = 0
    lo_end_low: int = 0
    lo_end_high: int = 0
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
class CdpParams:
    """One LRN: CDP_RDMA's source, CDP's destination, converters and functions."""

    width: int  # CDP_RDMA D_DATA_CUBE_WIDTH: width - 1 (the CDP takes its sizes from its RDMA)
    height: int
    channel: int
    input_data: int  # CDP_RDMA INPUT_DATA = CDP INPUT_DATA_TYPE: 0 INT8, 1 INT16, 2 FP16
    src_base_addr: int = 0  # CDP_RDMA D_SRC_*
    src_line_stride: int = 0
    src_surface_stride: int = 0
    src_ram_type: int = RAM_MC
    dst_base_addr: int = 0  # CDP D_DST_*
    dst_line_stride: int = 0
    dst_surface_stride: int = 0
    dst_ram_type: int = RAM_MC
    normalz_len: int = 0  # D_LRN_CFG: 0..3 for windows of 3, 5, 7, 9 channels
    sqsum_bypass: int = 0  # D_FUNC_BYPASS
    mul_bypass: int = 0
    datin_offset: int = 0  # D_DATIN_*: 16-bit offset and scale, 5-bit shifter
    datin_scale: int = 1
    datin_shifter: int = 0
    datout_offset: int = 0  # D_DATOUT_*: 32-bit offset, 16-bit scale, 6-bit shifter
    datout_scale: int = 1
    datout_shifter: int = 0
    nan_to_zero: int = 0  # D_NAN_FLUSH_TO_ZERO (FP16)
    lut: CdpLut = field(default_factory=CdpLut)
