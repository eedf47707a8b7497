"""Programming SDP (with its RDMA and LUT), PDP, CDP, RUBIK and BDMA operations as NVIDIA's
``sdp.c``, ``pdp.c``, ``cdp.c``, ``rubik.c``, ``bdma.c`` and ``common.c`` (update_lut) do; the tables
of docs/development/nvdla/firmware.md, in order.
"""

from __future__ import annotations

from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.firmware.nvdla.regs import RAM_TYPE, Writes

HW = int(I.dla_mem_e.HW)
PER_LAYER = int(I.sdp_op_mode_e.PER_LAYER)
# the reciprocal of the pooling kernel's size 1..8 (INT: 1/k in 16 fractional bits; FP16: FP17 patterns)
RECIP_INT = (0x10000, 0x8000, 0x5555, 0x4000, 0x3333, 0x2AAA, 0x2492, 0x2000)
RECIP_FP16 = (0x7C00, 0x7800, 0x7555, 0x7400, 0x7266, 0x7155, 0x7092, 0x7000)


def sdp_operand_in_memory(x: Any) -> bool:
    return bool(x.enable) and x.type != I.sdp_op_e.NONE and x.mode != PER_LAYER


def sdp_needs_rdma(d: Any, s: Any) -> bool:
    """SDP_RDMA takes part: the input is in memory, or a stage reads its operand from memory."""
    return s.src_data.type != HW or any(sdp_operand_in_memory(x) for x in (d.x1_op, d.x2_op, d.y_op))


def sdp_proc_precision(src: int, dst: int) -> int:
    if dst == I.precision_e.INT8:
        return int(I.precision_e.FP16) if src == I.precision_e.FP16 else int(I.precision_e.INT8)
    return src


def _split(addr: int) -> tuple[int, int]:
    return addr & 0xFFFFFFFF, addr >> 32


def program_lut(w: Writes, block: str, lut: Any, fp16: bool) -> None:
    """The LE then LO table through S_LUT_ACCESS_DATA, then its configuration (common.c update_lut)."""
    w.f(block, "S_LUT_ACCESS_CFG", LUT_ADDR=0, LUT_TABLE_ID=0, LUT_ACCESS_TYPE=1)
    for v in lut.linear_exp_table:
        w.v(block, "S_LUT_ACCESS_DATA", int(v))
    w.f(block, "S_LUT_ACCESS_CFG", LUT_ADDR=0, LUT_TABLE_ID=1, LUT_ACCESS_TYPE=1)
    for v in lut.linear_only_table:
        w.v(block, "S_LUT_ACCESS_DATA", int(v))
    w.f(block, "S_LUT_CFG", LUT_LE_FUNCTION=lut.method, LUT_UFLOW_PRIORITY=lut.underflow_priority,
        LUT_OFLOW_PRIORITY=lut.overflow_priority, LUT_HYBRID_PRIORITY=lut.hybrid_priority)
    le, lo = lut.linear_exp_offset.exp_offset & 0xFF, lut.linear_only_offset.exp_offset & 0xFF
    if lut.method == I.lut_method_e.EXPONENTIAL:
        w.f(block, "S_LUT_INFO", LUT_LE_INDEX_OFFSET=le, LUT_LO_INDEX_SELECT=lo)
    else:
        w.f(block, "S_LUT_INFO", LUT_LE_INDEX_SELECT=le, LUT_LO_INDEX_SELECT=lo)
    for name, value in (("LE_START", lut.linear_exp_start), ("LE_END", lut.linear_exp_end),
                        ("LO_START", lut.linear_only_start), ("LO_END", lut.linear_only_end)):
        if block == "CDP":
            w.v(block, f"S_LUT_{name}_LOW", value)
            w.f(block, f"S_LUT_{name}_HIGH", **{f"LUT_{name}_HIGH": (value >> 32) & 0x3F})
        else:
            w.v(block, f"S_LUT_{name}", value)
    for table, under, over in (("LE", lut.linear_exp_underflow_slope, lut.linear_exp_overflow_slope),
                               ("LO", lut.linear_only_underflow_slope, lut.linear_only_overflow_slope)):
        w.f(block, f"S_LUT_{table}_SLOPE_SCALE",
            **{f"LUT_{table}_SLOPE_UFLOW_SCALE": under.data_i.scale & 0xFFFF,
               f"LUT_{table}_SLOPE_OFLOW_SCALE": over.data_i.scale & 0xFFFF})
        if not fp16:
            w.f(block, f"S_LUT_{table}_SLOPE_SHIFT",
                **{f"LUT_{table}_SLOPE_UFLOW_SHIFT": under.data_i.shifter & 0x1F,
                   f"LUT_{table}_SLOPE_OFLOW_SHIFT": over.data_i.shifter & 0x1F})


def _sdp_x(w: Writes, name: str, x: Any) -> None:
    adds = x.type in (I.sdp_op_e.ADD, I.sdp_op_e.BOTH)
    muls = x.type in (I.sdp_op_e.MUL, I.sdp_op_e.BOTH)
    src = 0 if x.mode == PER_LAYER else 1
    w.f("SDP", f"D_DP_{name}_CFG", **{f"{name}_BYPASS": int(not x.enable),
                                      f"{name}_ALU_BYPASS": int(not adds),
                                      f"{name}_ALU_ALGO": x.alu_type, f"{name}_MUL_BYPASS": int(not muls),
                                      f"{name}_MUL_PRELU": int(x.act == I.activation_e.PRELU),
                                      f"{name}_RELU_BYPASS": int(x.act != I.activation_e.RELU)})
    if not x.enable:
        return
    if adds:
        w.f("SDP", f"D_DP_{name}_ALU_CFG", **{f"{name}_ALU_SRC": src,
                                              f"{name}_ALU_SHIFT_VALUE": x.shift_value})
    if x.mode == PER_LAYER:
        w.f("SDP", f"D_DP_{name}_ALU_SRC_VALUE", **{f"{name}_ALU_OPERAND": x.alu_operand & 0xFFFF})
        w.f("SDP", f"D_DP_{name}_MUL_SRC_VALUE", **{f"{name}_MUL_OPERAND": x.mul_operand & 0xFFFF})
    if muls:
        w.f("SDP", f"D_DP_{name}_MUL_CFG", **{f"{name}_MUL_SRC": src, f"{name}_MUL_SHIFT_VALUE": x.truncate})


def _sdp_y(w: Writes, y: Any) -> None:
    adds = y.type in (I.sdp_op_e.ADD, I.sdp_op_e.BOTH)
    muls = y.type in (I.sdp_op_e.MUL, I.sdp_op_e.BOTH)
    src = 0 if y.mode == PER_LAYER else 1
    w.f("SDP", "D_DP_EW_CFG", EW_BYPASS=int(not y.enable), EW_ALU_BYPASS=int(not adds),
        EW_ALU_ALGO=y.alu_type,
        EW_MUL_BYPASS=int(not muls), EW_MUL_PRELU=int(y.act == I.activation_e.PRELU),
        EW_LUT_BYPASS=int(y.act != I.activation_e.LUT))
    if not y.enable:
        return
    for unit, used, operand, cvt in (("ALU", adds, y.alu_operand, y.cvt.alu_cvt),
                                     ("MUL", muls, y.mul_operand, y.cvt.mul_cvt)):
        if not used:
            continue
        w.f("SDP", f"D_DP_EW_{unit}_CFG", **{f"EW_{unit}_SRC": src,
                                             f"EW_{unit}_CVT_BYPASS": int(not cvt.enable)})
        if y.mode == PER_LAYER:
            w.v("SDP", f"D_DP_EW_{unit}_SRC_VALUE", operand)
        else:
            w.v("SDP", f"D_DP_EW_{unit}_CVT_OFFSET_VALUE", cvt.offset)
            w.f("SDP", f"D_DP_EW_{unit}_CVT_SCALE_VALUE", **{f"EW_{unit}_CVT_SCALE": cvt.scale & 0xFFFF})
            w.f("SDP", f"D_DP_EW_{unit}_CVT_TRUNCATE_VALUE", **{f"EW_{unit}_CVT_TRUNCATE": cvt.truncate})
    w.f("SDP", "D_DP_EW_TRUNCATE_VALUE", EW_TRUNCATE=y.truncate)


def program_sdp(w: Writes, d: Any, s: Any, lut: Any) -> None:
    src, dst = s.src_data, s.dst_data
    src_p, dst_p = int(d.src_precision), int(d.dst_precision)
    proc = sdp_proc_precision(src_p, dst_p)
    flying = int(src.type == HW)
    w.f("SDP_RDMA", "D_FEATURE_MODE_CFG", FLYING_MODE=0)
    for dma in ("BRDMA", "NRDMA", "ERDMA"):
        w.f("SDP_RDMA", f"D_{dma}_CFG", **{f"{dma}_DISABLE": 1})
    w.f("SDP_RDMA", "D_FEATURE_MODE_CFG", FLYING_MODE=flying, WINOGRAD=d.conv_mode, IN_PRECISION=src_p,
        PROC_PRECISION=proc, OUT_PRECISION=dst_p, BATCH_NUMBER=d.batch_num - 1)
    if sdp_needs_rdma(d, s):
        w.f("SDP_RDMA", "D_DATA_CUBE_WIDTH", WIDTH=src.width - 1)
        w.f("SDP_RDMA", "D_DATA_CUBE_HEIGHT", HEIGHT=src.height - 1)
        w.f("SDP_RDMA", "D_DATA_CUBE_CHANNEL", CHANNEL=src.channel - 1)
        if not flying:
            lo, hi = _split(w.cube_address(src, "src_data"))
            w.v("SDP_RDMA", "D_SRC_BASE_ADDR_LOW", lo)
            w.v("SDP_RDMA", "D_SRC_BASE_ADDR_HIGH", hi)
            w.v("SDP_RDMA", "D_SRC_LINE_STRIDE", src.line_stride)
            w.v("SDP_RDMA", "D_SRC_SURFACE_STRIDE", src.surf_stride)
            w.f("SDP_RDMA", "D_SRC_DMA_CFG", SRC_RAM_TYPE=RAM_TYPE[int(src.type)])
        for dma, base, x, cube, name in (("BRDMA", "BS", d.x1_op, s.x1_data, "x1_data"),
                                         ("NRDMA", "BN", d.x2_op, s.x2_data, "x2_data"),
                                         ("ERDMA", "EW", d.y_op, s.y_data, "y_data")):
            if not sdp_operand_in_memory(x):
                w.f("SDP_RDMA", f"D_{dma}_CFG", **{f"{dma}_DISABLE": 1})
                continue
            use = {I.sdp_op_e.MUL: 0, I.sdp_op_e.ADD: 1, I.sdp_op_e.BOTH: 2}[I.sdp_op_e(x.type)]
            w.f("SDP_RDMA", f"D_{dma}_CFG", **{f"{dma}_DISABLE": 0, f"{dma}_DATA_USE": use,
                                               f"{dma}_DATA_SIZE": int(x.precision != I.precision_e.INT8),
                                               f"{dma}_DATA_MODE": int(x.mode != I.sdp_op_mode_e.PER_KERNEL),
                                               f"{dma}_RAM_TYPE": RAM_TYPE[int(cube.type)]})
            lo, hi = _split(w.cube_address(cube, name))
            w.v("SDP_RDMA", f"D_{base}_BASE_ADDR_LOW", lo)
            w.v("SDP_RDMA", f"D_{base}_BASE_ADDR_HIGH", hi)
            w.v("SDP_RDMA", f"D_{base}_LINE_STRIDE", cube.line_stride)
            w.v("SDP_RDMA", f"D_{base}_SURFACE_STRIDE", cube.surf_stride)
    if lut is not None:
        program_lut(w, "SDP", lut, src_p == I.precision_e.FP16)
    w.f("SDP", "D_DATA_CUBE_WIDTH", WIDTH=src.width - 1)
    w.f("SDP", "D_DATA_CUBE_HEIGHT", HEIGHT=src.height - 1)
    w.f("SDP", "D_DATA_CUBE_CHANNEL", CHANNEL=src.channel - 1)
    to_memory = dst.type != HW
    if to_memory:
        lo, hi = _split(w.cube_address(dst, "dst_data"))
        w.v("SDP", "D_DST_BASE_ADDR_HIGH", hi)
        w.v("SDP", "D_DST_BASE_ADDR_LOW", lo)
        w.v("SDP", "D_DST_LINE_STRIDE", dst.line_stride)
        w.v("SDP", "D_DST_SURFACE_STRIDE", dst.surf_stride)
    _sdp_x(w, "BS", d.x1_op)
    _sdp_x(w, "BN", d.x2_op)
    _sdp_y(w, d.y_op)
    w.f("SDP", "D_FEATURE_MODE_CFG", FLYING_MODE=flying, OUTPUT_DST=int(not to_memory), WINOGRAD=d.conv_mode,
        BATCH_NUMBER=d.batch_num - 1)
    w.f("SDP", "D_DST_DMA_CFG", DST_RAM_TYPE=RAM_TYPE.get(int(dst.type), 1))
    if d.batch_num > 1:
        w.v("SDP", "D_DST_BATCH_STRIDE", d.batch_stride)
    w.f("SDP", "D_DATA_FORMAT", PROC_PRECISION=proc, OUT_PRECISION=dst_p)
    w.v("SDP", "D_CVT_OFFSET", d.out_cvt.offset)
    w.v("SDP", "D_CVT_SCALE", d.out_cvt.scale & 0xFFFF)
    w.v("SDP", "D_CVT_SHIFT", d.out_cvt.truncate)


def _minus1(v: int) -> int:
    return v - 1 if v else 0


def program_pdp(w: Writes, d: Any, s: Any) -> None:
    src, dst = s.src_data, s.dst_data
    flying = src.type == HW
    if not flying:
        lo, hi = _split(w.cube_address(src, "src_data"))
        w.f("PDP_RDMA", "D_DATA_CUBE_IN_WIDTH", CUBE_IN_WIDTH=src.width - 1)
        w.f("PDP_RDMA", "D_DATA_CUBE_IN_HEIGHT", CUBE_IN_HEIGHT=src.height - 1)
        w.f("PDP_RDMA", "D_DATA_CUBE_IN_CHANNEL", CUBE_IN_CHANNEL=src.channel - 1)
        w.v("PDP_RDMA", "D_SRC_BASE_ADDR_HIGH", hi)
        w.v("PDP_RDMA", "D_SRC_BASE_ADDR_LOW", lo)
        w.v("PDP_RDMA", "D_SRC_LINE_STRIDE", src.line_stride)
        w.v("PDP_RDMA", "D_SRC_SURFACE_STRIDE", src.surf_stride)
        w.f("PDP_RDMA", "D_DATA_FORMAT", INPUT_DATA=d.precision)
        w.f("PDP_RDMA", "D_SRC_RAM_CFG", SRC_RAM_TYPE=RAM_TYPE[int(src.type)])
        w.f("PDP_RDMA", "D_OPERATION_MODE_CFG", SPLIT_NUM=d.split_num - 1)
        w.f("PDP_RDMA", "D_POOLING_KERNEL_CFG", KERNEL_WIDTH=d.pool_width, KERNEL_STRIDE_WIDTH=d.stride_x - 1)
        w.f("PDP_RDMA", "D_POOLING_PADDING_CFG", PAD_WIDTH=d.pad_left)
        w.f("PDP_RDMA", "D_PARTIAL_WIDTH_IN", PARTIAL_WIDTH_IN_FIRST=_minus1(d.partial_in_width_first),
            PARTIAL_WIDTH_IN_MID=_minus1(d.partial_in_width_mid),
            PARTIAL_WIDTH_IN_LAST=_minus1(d.partial_in_width_last))
    w.f("PDP", "D_DATA_CUBE_IN_WIDTH", CUBE_IN_WIDTH=src.width - 1)
    w.f("PDP", "D_DATA_CUBE_IN_HEIGHT", CUBE_IN_HEIGHT=src.height - 1)
    w.f("PDP", "D_DATA_CUBE_IN_CHANNEL", CUBE_IN_CHANNEL=src.channel - 1)
    w.f("PDP", "D_DATA_CUBE_OUT_WIDTH", CUBE_OUT_WIDTH=dst.width - 1)
    w.f("PDP", "D_DATA_CUBE_OUT_HEIGHT", CUBE_OUT_HEIGHT=dst.height - 1)
    w.f("PDP", "D_DATA_CUBE_OUT_CHANNEL", CUBE_OUT_CHANNEL=dst.channel - 1)
    # PDP's FLYING_MODE field: 0 is on the fly, 1 off the fly (reads PDP_RDMA)
    w.f("PDP", "D_OPERATION_MODE_CFG", POOLING_METHOD=d.pool_mode, FLYING_MODE=int(not flying),
        SPLIT_NUM=d.split_num - 1)
    w.f("PDP", "D_PARTIAL_WIDTH_IN", PARTIAL_WIDTH_IN_FIRST=_minus1(d.partial_in_width_first),
        PARTIAL_WIDTH_IN_MID=_minus1(d.partial_in_width_mid),
        PARTIAL_WIDTH_IN_LAST=_minus1(d.partial_in_width_last))
    w.f("PDP", "D_PARTIAL_WIDTH_OUT", PARTIAL_WIDTH_OUT_FIRST=_minus1(d.partial_width_first),
        PARTIAL_WIDTH_OUT_MID=_minus1(d.partial_width_mid),
        PARTIAL_WIDTH_OUT_LAST=_minus1(d.partial_width_last))
    w.f("PDP", "D_POOLING_KERNEL_CFG", KERNEL_WIDTH=d.pool_width, KERNEL_HEIGHT=d.pool_height,
        KERNEL_STRIDE_WIDTH=d.stride_x - 1, KERNEL_STRIDE_HEIGHT=d.stride_y - 1)
    recip = RECIP_FP16 if d.precision == I.precision_e.FP16 else RECIP_INT
    w.v("PDP", "D_RECIP_KERNEL_WIDTH", recip[d.pool_width])
    w.v("PDP", "D_RECIP_KERNEL_HEIGHT", recip[d.pool_height])
    w.f("PDP", "D_POOLING_PADDING_CFG", PAD_LEFT=d.pad_left, PAD_TOP=d.pad_top, PAD_RIGHT=d.pad_right,
        PAD_BOTTOM=d.pad_bottom)
    for n in range(I.PDP_PAD_VAL_NUM):
        w.f("PDP", f"D_POOLING_PADDING_VALUE_{n + 1}_CFG",
            **{f"PAD_VALUE_{n + 1}X": d.padding_value[n] & 0x7FFFF})
    if not flying:
        w.v("PDP", "D_SRC_LINE_STRIDE", src.line_stride)
        w.v("PDP", "D_SRC_SURFACE_STRIDE", src.surf_stride)
    lo, hi = _split(w.cube_address(dst, "dst_data"))
    w.v("PDP", "D_DST_BASE_ADDR_LOW", lo)
    w.v("PDP", "D_DST_BASE_ADDR_HIGH", hi)
    w.v("PDP", "D_DST_LINE_STRIDE", dst.line_stride)
    w.v("PDP", "D_DST_SURFACE_STRIDE", dst.surf_stride)
    w.f("PDP", "D_DST_RAM_CFG", DST_RAM_TYPE=RAM_TYPE[int(dst.type)])
    w.f("PDP", "D_DATA_FORMAT", INPUT_DATA=d.precision)


def program_cdp(w: Writes, d: Any, s: Any, lut: Any) -> None:
    src, dst = s.src_data, s.dst_data
    lo, hi = _split(w.cube_address(src, "src_data"))
    w.f("CDP_RDMA", "D_DATA_CUBE_WIDTH", WIDTH=src.width - 1)
    w.f("CDP_RDMA", "D_DATA_CUBE_HEIGHT", HEIGHT=src.height - 1)
    w.f("CDP_RDMA", "D_DATA_CUBE_CHANNEL", CHANNEL=src.channel - 1)
    w.v("CDP_RDMA", "D_SRC_BASE_ADDR_LOW", lo)
    w.v("CDP_RDMA", "D_SRC_BASE_ADDR_HIGH", hi)
    w.v("CDP_RDMA", "D_SRC_LINE_STRIDE", src.line_stride)
    w.v("CDP_RDMA", "D_SRC_SURFACE_STRIDE", src.surf_stride)
    w.f("CDP_RDMA", "D_SRC_DMA_CFG", SRC_RAM_TYPE=RAM_TYPE[int(src.type)])
    w.f("CDP_RDMA", "D_DATA_FORMAT", INPUT_DATA=d.in_precision)
    if lut is not None:
        program_lut(w, "CDP", lut, d.in_precision == I.precision_e.FP16)
    lo, hi = _split(w.cube_address(dst, "dst_data"))
    w.v("CDP", "D_DST_BASE_ADDR_LOW", lo)
    w.v("CDP", "D_DST_BASE_ADDR_HIGH", hi)
    w.v("CDP", "D_DST_LINE_STRIDE", dst.line_stride)
    w.v("CDP", "D_DST_SURFACE_STRIDE", dst.surf_stride)
    w.f("CDP", "D_DST_DMA_CFG", DST_RAM_TYPE=RAM_TYPE[int(dst.type)])
    w.f("CDP", "D_DATA_FORMAT", INPUT_DATA_TYPE=d.in_precision)
    w.f("CDP", "D_LRN_CFG", NORMALZ_LEN=(d.local_size - 1) // 2 - 1)
    w.v("CDP", "D_DATIN_OFFSET", d.in_cvt.offset & 0xFFFF)
    w.v("CDP", "D_DATIN_SCALE", d.in_cvt.scale & 0xFFFF)
    w.v("CDP", "D_DATIN_SHIFTER", d.in_cvt.truncate & 0x1F)
    w.v("CDP", "D_DATOUT_OFFSET", d.out_cvt.offset)
    w.v("CDP", "D_DATOUT_SCALE", d.out_cvt.scale & 0xFFFF)
    w.v("CDP", "D_DATOUT_SHIFTER", d.out_cvt.truncate & 0x3F)
    w.f("CDP", "D_FUNC_BYPASS", SQSUM_BYPASS=d.bypass_sqsum, MUL_BYPASS=d.bypass_out_mul)


def program_rubik(w: Writes, d: Any, s: Any) -> None:
    src, dst = s.src_data, s.dst_data
    mode = int(d.mode)
    bpe = 1 if d.precision == I.precision_e.INT8 else 2
    w.f("RBK", "D_MISC_CFG", RUBIK_MODE=mode, IN_PRECISION=d.precision)
    w.f("RBK", "D_DAIN_RAM_TYPE", DATAIN_RAM_TYPE=RAM_TYPE[int(src.type)])
    w.f("RBK", "D_DATAIN_SIZE_0", DATAIN_WIDTH=src.width - 1, DATAIN_HEIGHT=src.height - 1)
    w.f("RBK", "D_DATAIN_SIZE_1", DATAIN_CHANNEL=src.channel - 1)
    lo, hi = _split(w.cube_address(src, "src_data"))
    w.v("RBK", "D_DAIN_ADDR_LOW", lo)
    w.v("RBK", "D_DAIN_ADDR_HIGH", hi)
    if mode == I.dla_rubik_mode.MERGE:
        w.v("RBK", "D_DAIN_PLANAR_STRIDE", src.plane_stride)
    else:
        w.v("RBK", "D_DAIN_SURF_STRIDE", src.surf_stride)
    w.v("RBK", "D_DAIN_LINE_STRIDE", src.line_stride)
    w.f("RBK", "D_DAOUT_RAM_TYPE", DATAOUT_RAM_TYPE=RAM_TYPE[int(dst.type)])
    w.f("RBK", "D_DATAOUT_SIZE_1", DATAOUT_CHANNEL=dst.channel - 1)
    lo, hi = _split(w.cube_address(dst, "dst_data"))
    w.v("RBK", "D_DAOUT_ADDR_LOW", lo)
    w.v("RBK", "D_DAOUT_ADDR_HIGH", hi)
    w.v("RBK", "D_DAOUT_LINE_STRIDE", dst.line_stride)
    if mode != I.dla_rubik_mode.SPLIT:
        w.v("RBK", "D_DAOUT_SURF_STRIDE", dst.surf_stride)
        if mode == I.dla_rubik_mode.CONTRACT:
            w.v("RBK", "D_CONTRACT_STRIDE_0", -(-dst.channel * bpe // 32) * src.surf_stride)
            w.v("RBK", "D_CONTRACT_STRIDE_1", d.stride_y * dst.line_stride)
            w.f("RBK", "D_DECONV_STRIDE", DECONV_X_STRIDE=d.stride_x - 1, DECONV_Y_STRIDE=d.stride_y - 1)
    else:
        w.v("RBK", "D_DAOUT_PLANAR_STRIDE", dst.plane_stride)


def bdma_transfers(w: Writes, s: Any) -> list[list[tuple[int, int]]]:
    """Each transfer's register writes, ending with CFG_OP.EN (which queues it)."""
    out = []
    for i in range(s.num_transfers):
        t = s.transfers[i]
        w.writes = []
        src = w.dma(int(t.source_address), f"transfers[{i}].source_address")
        dst = w.dma(int(t.destination_address), f"transfers[{i}].destination_address")
        w.v("BDMA", "CFG_SRC_ADDR_LOW", src)
        w.v("BDMA", "CFG_SRC_ADDR_HIGH", src >> 32)
        w.v("BDMA", "CFG_DST_ADDR_LOW", dst)
        w.v("BDMA", "CFG_DST_ADDR_HIGH", dst >> 32)
        w.f("BDMA", "CFG_LINE", SIZE=t.line_size // 32 - 1)
        w.f("BDMA", "CFG_CMD", SRC_RAM_TYPE=RAM_TYPE[int(s.source_type)],
            DST_RAM_TYPE=RAM_TYPE[int(s.destination_type)])
        w.f("BDMA", "CFG_LINE_REPEAT", NUMBER=t.line_repeat - 1)
        w.v("BDMA", "CFG_SRC_LINE", t.source_line)
        w.v("BDMA", "CFG_DST_LINE", t.destination_line)
        w.f("BDMA", "CFG_SURF_REPEAT", NUMBER=t.surface_repeat - 1)
        w.v("BDMA", "CFG_SRC_SURF", t.source_surface)
        w.v("BDMA", "CFG_DST_SURF", t.destination_surface)
        w.f("BDMA", "CFG_OP", EN=1)
        out.append(w.writes)
    return out
