"""Programming a CONV operation into CDMA, CSC, CMAC_A, CMAC_B and CACC (NVIDIA's ``conv.c``),
register by register as docs/development/nvdla/firmware.md tables it: reverse pipeline order,
sizes minus one, precisions as the descriptor gives them (CSC takes the MAC's, out_precision).
"""

from __future__ import annotations

from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.firmware.nvdla.regs import RAM_TYPE, Writes

FEATURE = int(I.format_e.FEATURE)
WINOGRAD = int(I.dla_conv_mode.WINOGRAD)


def program_conv(w: Writes, d: Any, s: Any, atom: int) -> None:
    src, dst, wt = s.src_data, s.dst_data, s.weight_data
    mode, p_in, p_out = int(d.conv_mode), int(d.in_precision), int(d.out_precision)
    reuse = dict(DATA_REUSE=d.data_reuse, WEIGHT_REUSE=d.weight_reuse, SKIP_DATA_RLS=d.skip_data_rls,
                 SKIP_WEIGHT_RLS=d.skip_weight_rls)
    out_addr = w.cube_address(dst, "dst_data") if dst.address != -1 else 0
    weight_addr = w.cube_address(wt, "weight_data") if wt.address != -1 else 0
    in_addr = w.cube_address(src, "src_data") if src.type != I.dla_mem_e.HW else 0
    one = dst.width == 1 and dst.height == 1
    # CACC
    w.f("CACC", "D_MISC_CFG", CONV_MODE=mode, PROC_PRECISION=p_out)
    w.f("CACC", "D_DATAOUT_SIZE_0", DATAOUT_WIDTH=dst.width - 1, DATAOUT_HEIGHT=dst.height - 1)
    w.f("CACC", "D_DATAOUT_SIZE_1", DATAOUT_CHANNEL=dst.channel - 1)
    w.v("CACC", "D_DATAOUT_ADDR", out_addr)
    w.f("CACC", "D_BATCH_NUMBER", BATCHES=d.batch - 1)
    w.v("CACC", "D_LINE_STRIDE", dst.line_stride)
    w.v("CACC", "D_SURF_STRIDE", dst.surf_stride)
    w.f("CACC", "D_DATAOUT_MAP", LINE_PACKED=int(one), SURF_PACKED=int(one))
    w.f("CACC", "D_CLIP_CFG", CLIP_TRUNCATE=d.out_cvt.truncate)
    # CMAC
    for cmac in ("CMAC_A", "CMAC_B"):
        w.f(cmac, "D_MISC_CFG", CONV_MODE=mode, PROC_PRECISION=p_out)
    # CSC
    pixel = int(d.data_format != FEATURE)
    w.f("CSC", "D_MISC_CFG", CONV_MODE=mode, IN_PRECISION=p_out, PROC_PRECISION=p_out, **reuse)
    w.v("CSC", "D_DATAIN_FORMAT", pixel)
    w.f("CSC", "D_DATAIN_SIZE_EXT_0", DATAIN_WIDTH_EXT=d.input_width_csc - 1,
        DATAIN_HEIGHT_EXT=d.input_height_csc - 1)
    w.f("CSC", "D_DATAIN_SIZE_EXT_1", DATAIN_CHANNEL_EXT=d.input_channel_csc - 1)
    w.f("CSC", "D_BATCH_NUMBER", BATCHES=d.batch - 1)
    w.f("CSC", "D_POST_Y_EXTENSION", Y_EXTENSION=d.post_extension)
    w.f("CSC", "D_ENTRY_PER_SLICE", ENTRIES=d.entry_per_slice - 1)
    w.v("CSC", "D_WEIGHT_FORMAT", d.weight_format)
    w.f("CSC", "D_WEIGHT_SIZE_EXT_0", WEIGHT_WIDTH_EXT=d.kernel_width_csc - 1,
        WEIGHT_HEIGHT_EXT=d.kernel_height_csc - 1)
    w.f("CSC", "D_WEIGHT_SIZE_EXT_1", WEIGHT_CHANNEL_EXT=d.kernel_channel_csc - 1,
        WEIGHT_KERNEL=dst.channel - 1)
    w.v("CSC", "D_WEIGHT_BYTES", wt.size)
    w.v("CSC", "D_WMB_BYTES", s.wmb_data.size)
    w.f("CSC", "D_DATAOUT_SIZE_0", DATAOUT_WIDTH=d.input_width_cmac - 1,
        DATAOUT_HEIGHT=d.input_height_cmac - 1)
    w.f("CSC", "D_DATAOUT_SIZE_1", DATAOUT_CHANNEL=dst.channel - 1)
    w.v("CSC", "D_ATOMICS", dst.width * dst.height - 1)
    w.f("CSC", "D_RELEASE", RLS_SLICES=d.release - 1)
    if mode == WINOGRAD:
        w.f("CSC", "D_CONV_STRIDE_EXT", CONV_X_STRIDE_EXT=0, CONV_Y_STRIDE_EXT=0)
    else:
        w.f("CSC", "D_CONV_STRIDE_EXT", CONV_X_STRIDE_EXT=d.conv_stride_x - 1,
            CONV_Y_STRIDE_EXT=d.conv_stride_y - 1)
    w.f("CSC", "D_DILATION_EXT", X_DILATION_EXT=d.dilation_x - 1, Y_DILATION_EXT=d.dilation_y - 1)
    if mode == WINOGRAD:
        w.f("CSC", "D_ZERO_PADDING", PAD_LEFT=0, PAD_TOP=0)
    else:
        w.f("CSC", "D_ZERO_PADDING", PAD_LEFT=d.pad_x_left, PAD_TOP=d.pad_y_top)
    w.f("CSC", "D_ZERO_PADDING_VALUE", PAD_VALUE=d.pad_val & 0xFFFF)
    w.f("CSC", "D_BANK", DATA_BANK=d.data_bank - 1, WEIGHT_BANK=d.weight_bank - 1)
    w.f("CSC", "D_PRA_CFG", PRA_TRUNCATE=d.pra_truncate)
    # CDMA
    w.f("CDMA", "D_MISC_CFG", CONV_MODE=mode, IN_PRECISION=p_in, PROC_PRECISION=p_out, **reuse)
    w.f("CDMA", "D_DATAIN_FORMAT", DATAIN_FORMAT=pixel, PIXEL_FORMAT=d.data_format if pixel else 0,
        PIXEL_MAPPING=d.pixel_mapping, PIXEL_SIGN_OVERRIDE=d.pixel_override)
    w.f("CDMA", "D_DATAIN_SIZE_0", DATAIN_WIDTH=src.width - 1, DATAIN_HEIGHT=src.height - 1)
    w.f("CDMA", "D_DATAIN_SIZE_1", DATAIN_CHANNEL=src.channel - 1)
    w.f("CDMA", "D_DATAIN_SIZE_EXT_0", DATAIN_WIDTH_EXT=d.input_width_csc - 1,
        DATAIN_HEIGHT_EXT=d.input_height_csc - 1)
    w.f("CDMA", "D_DAIN_RAM_TYPE", DATAIN_RAM_TYPE=RAM_TYPE.get(int(src.type), 1))
    w.v("CDMA", "D_DAIN_ADDR_HIGH_0", in_addr >> 32)
    w.v("CDMA", "D_DAIN_ADDR_LOW_0", in_addr)
    uv = in_addr + int(s.offset_u) if in_addr else 0
    w.v("CDMA", "D_DAIN_ADDR_HIGH_1", uv >> 32)
    w.v("CDMA", "D_DAIN_ADDR_LOW_1", uv)
    w.v("CDMA", "D_LINE_STRIDE", src.line_stride)
    w.v("CDMA", "D_SURF_STRIDE", src.surf_stride)
    w.f("CDMA", "D_LINE_UV_STRIDE", UV_LINE_STRIDE=s.in_line_uv_stride)
    w.f("CDMA", "D_DAIN_MAP", LINE_PACKED=int(src.line_stride == src.width * atom),
        SURF_PACKED=int(src.surf_stride == src.width * src.height * atom))
    w.f("CDMA", "D_BATCH_NUMBER", BATCHES=d.batch - 1)
    w.v("CDMA", "D_BATCH_STRIDE", d.batch_stride)
    w.f("CDMA", "D_ENTRY_PER_SLICE", ENTRIES=d.entry_per_slice - 1)
    w.f("CDMA", "D_FETCH_GRAIN", GRAINS=d.fetch_grain - 1)
    w.v("CDMA", "D_WEIGHT_FORMAT", d.weight_format)
    w.f("CDMA", "D_WEIGHT_SIZE_0", BYTE_PER_KERNEL=d.bytes_per_kernel - 1)
    w.f("CDMA", "D_WEIGHT_SIZE_1", WEIGHT_KERNEL=dst.channel - 1)
    w.v("CDMA", "D_WEIGHT_RAM_TYPE", RAM_TYPE.get(int(wt.type), 1))
    w.v("CDMA", "D_WEIGHT_ADDR_HIGH", weight_addr >> 32)
    w.v("CDMA", "D_WEIGHT_ADDR_LOW", weight_addr)
    w.v("CDMA", "D_WEIGHT_BYTES", wt.size)
    if d.weight_format == I.weight_format_e.COMPRESSED:
        wgs = w.cube_address(s.wgs_data, "wgs_data")
        wmb = w.cube_address(s.wmb_data, "wmb_data")
        w.v("CDMA", "D_WGS_ADDR_HIGH", wgs >> 32)
        w.v("CDMA", "D_WGS_ADDR_LOW", wgs)
        w.v("CDMA", "D_WMB_ADDR_HIGH", wmb >> 32)
        w.v("CDMA", "D_WMB_ADDR_LOW", wmb)
        w.v("CDMA", "D_WMB_BYTES", s.wmb_data.size)
    w.v("CDMA", "D_MEAN_FORMAT", d.mean_format)
    if d.mean_format == I.mean_format_e.ENABLE:
        w.f("CDMA", "D_MEAN_GLOBAL_0", MEAN_RY=d.mean_ry & 0xFFFF, MEAN_GU=d.mean_gu & 0xFFFF)
        w.f("CDMA", "D_MEAN_GLOBAL_1", MEAN_BV=d.mean_bv & 0xFFFF, MEAN_AX=d.mean_ax & 0xFFFF)
    if d.in_cvt.enable:
        w.f("CDMA", "D_CVT_CFG", CVT_EN=1, CVT_TRUNCATE=d.in_cvt.truncate)
        w.v("CDMA", "D_CVT_OFFSET", d.in_cvt.offset)
        w.v("CDMA", "D_CVT_SCALE", d.in_cvt.scale & 0xFFFF)
    else:
        w.f("CDMA", "D_CVT_CFG", CVT_EN=0)
    w.f("CDMA", "D_CONV_STRIDE", CONV_X_STRIDE=d.conv_stride_x - 1, CONV_Y_STRIDE=d.conv_stride_y - 1)
    w.f("CDMA", "D_ZERO_PADDING", PAD_LEFT=d.pad_x_left, PAD_RIGHT=d.pad_x_right, PAD_TOP=d.pad_y_top,
        PAD_BOTTOM=d.pad_y_bottom)
    w.f("CDMA", "D_ZERO_PADDING_VALUE", PAD_VALUE=d.pad_val & 0xFFFF)
    w.f("CDMA", "D_BANK", WEIGHT_BANK=d.weight_bank - 1, DATA_BANK=d.data_bank - 1)
