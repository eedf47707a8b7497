"""Single operations of NVIDIA's regression loadables through the block kernels: the one helper of every
golden-image test.

A loadable is read and its DLA task decoded by pydla.loadable.nvdla; every memory-list entry gets its
own range of one ByteMemory (4 KiB apart, SET contents copied in, the rest zero, as NVIDIA's runtime
binds a zeroed output); each operation's registers are derived from its descriptors as NVIDIA's
firmware programs them (kmd/firmware conv.c, sdp.c, pdp.c, cdp.c, common.c update_lut;
docs/development/nvdla/firmware.md). The engine scheduler does this for the device; here it only
feeds the kernels. The output image is compared through pydla's .dimg reader and writer.

Folders: the regression tests in ``$PYDLA_NVDLA_REGRESSION`` or ``../shared/nvdla-regression``;
NN_L0_0 also from an nvdla/sw checkout in ``$PYDLA_NVDLA_SW``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from pydla.hw.nvdla import conv_params as cp
from pydla.hw.nvdla.bdma import BdmaParams, BdmaTransfer
from pydla.hw.nvdla.cdp_params import CdpLut, CdpParams
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.rubik import RubikParams
from pydla.hw.nvdla.sdp_params import SdpOperandDma, SdpParams, SdpX, SdpY
from pydla.hw.nvdla.target import NvdlaTarget

MEM_HW = 2  # dla_data_cube.type: on the fly
RAM = {0: 1, 1: 0}  # descriptor memory type (0 MC, 1 CV) -> *_RAM_TYPE register (MC 1, CV 0)
ROOT = Path(__file__).resolve().parents[3]
# the reciprocal of the pooling kernel's size (kmd/firmware pdp.c): INT, 1/k in 16 fractional bits
RECIP_INT = (0x10000, 0x8000, 0x5555, 0x4000, 0x3333, 0x2AAA, 0x2492, 0x2000)
RECIP_FP16 = (0x7C00, 0x7800, 0x7555, 0x7400, 0x7266, 0x7155, 0x7092, 0x7000)  # FP17 patterns


def folder() -> Path | None:
    """``$PYDLA_NVDLA_REGRESSION``, or ``../shared/nvdla-regression`` from the repository root."""
    env = os.environ.get("PYDLA_NVDLA_REGRESSION")
    if env:
        return Path(env) if Path(env).is_dir() else None
    # ../shared from the repository root (a git worktree one level further down also finds it)
    for up in (ROOT.parent, ROOT.parent.parent):
        path = up / "shared" / "nvdla-regression"
        if path.is_dir():
            return path
    return None


def loadable_path(name: str) -> Path:
    """``<name>_fbuf`` of a regression test, or skip the calling test with the reason."""
    pytest.importorskip("flatbuffers", reason="reading NVDLA Loadables needs the flatbuffers package")
    base = folder()
    if base is not None and (base / name / f"{name}_fbuf").is_file():
        return base / name / f"{name}_fbuf"
    sw = os.environ.get("PYDLA_NVDLA_SW")
    if sw and (Path(sw) / "regression/flatbufs/kmd/NN" / f"{name}_fbuf").is_file():
        return Path(sw) / "regression/flatbufs/kmd/NN" / f"{name}_fbuf"
    pytest.skip(f"{name}_fbuf is not here (set PYDLA_NVDLA_REGRESSION, or PYDLA_NVDLA_SW to an nvdla/sw "
                "checkout for the NN tests)")


def golden_path(name: str) -> Path:
    fbuf = loadable_path(name)
    if fbuf.parent.name == name:
        return fbuf.parent / "o_000000.dimg"
    golden = sorted((fbuf.parents[3] / "golden").glob(f"{name}_*/dla/o_000000.dimg"))
    if not golden:
        pytest.skip(f"no golden image of {name} next to {fbuf}")
    return golden[0]


class Run:
    """A loadable's memory and one DLA task's decoded descriptors."""

    def __init__(self, name: str, task: int | None = None) -> None:
        from pydla.loadable.nvdla.descriptors import decode_dla_task
        from pydla.loadable.nvdla.memory import read_memory
        from pydla.loadable.nvdla.model import Interface, MemoryFlags
        from pydla.loadable.nvdla.reader import read_nvdla_loadable
        self.name = name
        self.lo = lo = read_nvdla_loadable(loadable_path(name))
        tasks = [t for t in lo.task_list if t.interface == Interface.DLA1]
        self.task = tasks[0] if task is None else lo.task_list[task]
        self.net = decode_dla_task(lo, self.task)
        self.base: dict[int, int] = {}
        top = 0x10000
        for m in lo.memory_list:
            self.base[m.id] = top
            top += (m.size + 0xFFF) & ~0xFFF
        self.memory = ByteMemory(top)
        for m in lo.memory_list:
            if m.flags & MemoryFlags.SET:
                self.memory.write(self.base[m.id], bytearray(read_memory(lo, m.id, 0, m.size, "test")))
        self.output_mem = next(m.id for m in lo.memory_list if m.flags & MemoryFlags.OUTPUT)

    def address(self, index: int) -> int:
        """The DMA address of the task's address-list index ``index``."""
        entry = self.lo.address_list[self.task.address_list[index]]
        return self.base[entry.mem_id] + entry.offset

    def op(self, i: int) -> Any:
        return self.net.operations[i]

    def image(self) -> bytes:
        """The output as NVIDIA's runtime writes it (.dimg with the golden's metadata)."""
        from pydla.loadable.nvdla.dimg import DlaImage, read_dimg, write_dimg
        golden = read_dimg(golden_path(self.name).read_bytes())
        size = self.lo.memory_list[self.output_mem].size
        raw = bytes(self.memory.read(self.base[self.output_mem], size))
        img = DlaImage.from_surface(golden.format, golden.width, golden.height, golden.channel,
                                    golden.line_stride, golden.surface_stride, raw, size=golden.size)
        return write_dimg(dataclasses.replace(golden, data=img.data))

    def golden(self) -> bytes:
        return golden_path(self.name).read_bytes()


def conv_params(run: Run, op: Any, target: NvdlaTarget) -> cp.ConvParams:
    """The convolution pipeline's registers for a CONV operation (conv.c processor_conv_program)."""
    d, s = op.op_desc, op.surface_desc
    src, dst, wt = s.src_data, s.dst_data, s.weight_data
    atom = target.atom
    prec_in, prec_out = int(d.in_precision), int(d.out_precision)
    common = dict(conv_mode=d.conv_mode, data_reuse=d.data_reuse, weight_reuse=d.weight_reuse,
                  skip_data_rls=d.skip_data_rls, skip_weight_rls=d.skip_weight_rls)
    pixel = 0 if d.data_format == 36 else 1
    cdma = cp.CdmaParams(
        in_precision=prec_in, proc_precision=prec_out, **common, datain_format=pixel,
        pixel_sign_override=d.pixel_override, datain_width=src.width - 1, datain_height=src.height - 1,
        datain_channel=src.channel - 1, datain_width_ext=d.input_width_csc - 1,
        datain_height_ext=d.input_height_csc - 1, datain_ram_type=RAM[src.type],
        datain_addr_0=run.address(src.address), line_stride=src.line_stride, surf_stride=src.surf_stride,
        line_packed=int(src.line_stride == src.width * atom),
        surf_packed=int(src.surf_stride == src.width * src.height * atom), batches=d.batch - 1,
        batch_stride=d.batch_stride, entries=d.entry_per_slice - 1, grains=d.fetch_grain - 1,
        weight_format=d.weight_format, byte_per_kernel=d.bytes_per_kernel - 1, weight_kernel=dst.channel - 1,
        weight_ram_type=RAM[wt.type], weight_addr=run.address(wt.address), weight_bytes=wt.size,
        cvt_en=int(bool(d.in_cvt.enable)), cvt_truncate=d.in_cvt.truncate if d.in_cvt.enable else 0,
        cvt_offset=d.in_cvt.offset & 0xFFFF if d.in_cvt.enable else 0,
        cvt_scale=d.in_cvt.scale & 0xFFFF if d.in_cvt.enable else 0,
        conv_x_stride=d.conv_stride_x - 1, conv_y_stride=d.conv_stride_y - 1, pad_left=d.pad_x_left,
        pad_right=d.pad_x_right, pad_top=d.pad_y_top, pad_bottom=d.pad_y_bottom, pad_value=d.pad_val & 0xFFFF,
        data_bank=d.data_bank - 1, weight_bank=d.weight_bank - 1)
    csc = cp.CscParams(
        in_precision=prec_out, proc_precision=prec_out, **common, datain_format=pixel,
        datain_width_ext=d.input_width_csc - 1, datain_height_ext=d.input_height_csc - 1,
        datain_channel_ext=d.input_channel_csc - 1, batches=d.batch - 1, y_extension=d.post_extension,
        entries=d.entry_per_slice - 1, weight_format=d.weight_format, weight_width_ext=d.kernel_width_csc - 1,
        weight_height_ext=d.kernel_height_csc - 1, weight_channel_ext=d.kernel_channel_csc - 1,
        weight_kernel=dst.channel - 1, weight_bytes=wt.size, dataout_width=d.input_width_cmac - 1,
        dataout_height=d.input_height_cmac - 1, dataout_channel=dst.channel - 1,
        atomics=dst.width * dst.height - 1, rls_slices=d.release - 1, conv_x_stride_ext=d.conv_stride_x - 1,
        conv_y_stride_ext=d.conv_stride_y - 1, x_dilation_ext=d.dilation_x - 1,
        y_dilation_ext=d.dilation_y - 1,
        pad_left=d.pad_x_left, pad_top=d.pad_y_top, pad_value=d.pad_val & 0xFFFF, data_bank=d.data_bank - 1,
        weight_bank=d.weight_bank - 1, pra_truncate=d.pra_truncate)
    one = dst.width == 1 and dst.height == 1
    cacc = cp.CaccParams(conv_mode=d.conv_mode, proc_precision=prec_out, dataout_width=dst.width - 1,
                         dataout_height=dst.height - 1, dataout_channel=dst.channel - 1,
                         dataout_addr=run.address(dst.address) if dst.address != -1 else 0,
                         batches=d.batch - 1, line_stride=dst.line_stride, surf_stride=dst.surf_stride,
                         line_packed=int(one), surf_packed=int(one), clip_truncate=d.out_cvt.truncate)
    cmac = cp.CmacParams(conv_mode=d.conv_mode, proc_precision=prec_out)
    return cp.ConvParams(cdma=cdma, csc=csc, cacc=cacc, cmac_a=cmac, cmac_b=cmac)


def _x(op: Any) -> SdpX:
    adds, muls = op.type in (2, 3), op.type in (1, 3)
    src = 0 if op.mode == 0 else 1
    return SdpX(bypass=int(not op.enable), alu_bypass=int(not adds), alu_algo=op.alu_type, alu_src=src,
                alu_shift_value=op.shift_value, alu_operand=op.alu_operand & 0xFFFF, mul_bypass=int(not muls),
                mul_prelu=int(op.act == 3), mul_src=src, mul_shift_value=op.truncate,
                mul_operand=op.mul_operand & 0xFFFF, relu_bypass=int(op.act != 1))


def _dma(run: Run, op: Any, cube: Any) -> SdpOperandDma:
    if not (op.enable and op.type != 0 and op.mode != 0):
        return SdpOperandDma()
    return SdpOperandDma(disable=0, data_use={1: 0, 2: 1, 3: 2}[op.type],
                         data_size=0 if op.precision == 0 else 1,
                         data_mode=0 if op.mode == 1 else 1, ram_type=RAM[cube.type],
                         base_addr=run.address(cube.address), line_stride=cube.line_stride,
                         surface_stride=cube.surf_stride)


def _y(op: Any) -> SdpY:
    x = _x(op)
    return SdpY(bypass=x.bypass, alu_bypass=x.alu_bypass, alu_algo=op.alu_type, alu_src=x.alu_src,
                alu_operand=op.alu_operand & 0xFFFFFFFF, mul_bypass=x.mul_bypass, mul_prelu=x.mul_prelu,
                mul_src=x.mul_src, mul_operand=op.mul_operand & 0xFFFFFFFF, truncate=op.truncate,
                lut_bypass=int(op.act != 2))


def sdp_params(run: Run, op: Any) -> SdpParams:
    """The SDP's registers for an SDP operation (sdp.c): X1, X2, Y (its register operands, no converters
    nor LUT: the regression's operations use none) and the output converter."""
    d, s = op.op_desc, op.surface_desc
    src, dst = s.src_data, s.dst_data
    src_p, dst_p = int(d.src_precision), int(d.dst_precision)
    proc = (2 if src_p == 2 else 0) if dst_p == 0 else src_p
    flying = src.type == MEM_HW
    return SdpParams(
        width=src.width - 1, height=src.height - 1, channel=src.channel - 1, in_precision=src_p,
        proc_precision=proc, out_precision=dst_p, src_base_addr=0 if flying else run.address(src.address),
        src_line_stride=src.line_stride, src_surface_stride=src.surf_stride,
        dst_base_addr=run.address(dst.address),
        dst_line_stride=dst.line_stride, dst_surface_stride=dst.surf_stride, flying_mode=int(flying),
        bs=_x(d.x1_op), bn=_x(d.x2_op), brdma=_dma(run, d.x1_op, s.x1_data),
        nrdma=_dma(run, d.x2_op, s.x2_data), ew=_y(d.y_op), erdma=_dma(run, d.y_op, s.y_data),
        cvt_offset=d.out_cvt.offset & 0xFFFFFFFF, cvt_scale=d.out_cvt.scale & 0xFFFF,
        cvt_shift=d.out_cvt.truncate)


def pdp_params(run: Run, op: Any) -> PdpParams:
    """The PDP's registers for a PDP operation (pdp.c)."""
    d, s = op.op_desc, op.surface_desc
    src, dst = s.src_data, s.dst_data

    def minus1(v: int) -> int:
        return v - 1 if v else 0

    recip = RECIP_FP16 if d.precision == 2 else RECIP_INT
    flying = src.type == MEM_HW
    return PdpParams(
        cube_in_width=src.width - 1, cube_in_height=src.height - 1, cube_in_channel=src.channel - 1,
        cube_out_width=dst.width - 1, cube_out_height=dst.height - 1, cube_out_channel=dst.channel - 1,
        pooling_method=d.pool_mode, kernel_width=d.pool_width, kernel_height=d.pool_height,
        kernel_stride_width=d.stride_x - 1, kernel_stride_height=d.stride_y - 1, pad_left=d.pad_left,
        pad_top=d.pad_top, pad_right=d.pad_right, pad_bottom=d.pad_bottom, input_data=d.precision,
        src_base_addr=0 if flying else run.address(src.address), src_line_stride=src.line_stride,
        src_surface_stride=src.surf_stride, dst_base_addr=run.address(dst.address),
        dst_line_stride=dst.line_stride, dst_surface_stride=dst.surf_stride,
        recip_kernel_width=recip[d.pool_width], recip_kernel_height=recip[d.pool_height],
        **{f"pad_value_{n + 1}x": d.padding_value[n] & 0x7FFFF for n in range(7)},
        flying_mode=0 if flying else 1, split_num=d.split_num - 1,  # PDP's FLYING_MODE: 0 on the fly
        partial_width_in_first=minus1(d.partial_in_width_first),
        partial_width_in_mid=minus1(d.partial_in_width_mid),
        partial_width_in_last=minus1(d.partial_in_width_last),
        partial_width_out_first=minus1(d.partial_width_first),
        partial_width_out_mid=minus1(d.partial_width_mid),
        partial_width_out_last=minus1(d.partial_width_last),
        src_ram_type=RAM.get(src.type, 1), dst_ram_type=RAM[dst.type])


def bdma_params(run: Run, op: Any) -> BdmaParams:
    """The BDMA's transfers for a BDMA operation (bdma.c)."""
    s = op.surface_desc
    transfers = []
    for i in range(s.num_transfers):
        t = s.transfers[i]
        transfers.append(BdmaTransfer(run.address(t.source_address), run.address(t.destination_address),
                                      t.line_size // 32 - 1, t.line_repeat - 1, t.source_line,
                                      t.destination_line, t.surface_repeat - 1, t.source_surface,
                                      t.destination_surface, RAM[s.source_type], RAM[s.destination_type]))
    return BdmaParams(tuple(transfers))


def rubik_params(run: Run, op: Any) -> RubikParams:
    """The RUBIK's registers for a RUBIK operation (rubik.c)."""
    d, s = op.op_desc, op.surface_desc
    src, dst = s.src_data, s.dst_data
    mode = d.mode
    bpe = 1 if d.precision == 0 else 2
    return RubikParams(
        rubik_mode=mode, in_precision=d.precision, datain_width=src.width - 1, datain_height=src.height - 1,
        datain_channel=src.channel - 1, dain_addr=run.address(src.address), dain_line_stride=src.line_stride,
        dain_surf_stride=src.surf_stride if mode != 2 else 0,
        dain_planar_stride=src.plane_stride if mode == 2 else 0, dataout_channel=dst.channel - 1,
        daout_addr=run.address(dst.address), daout_line_stride=dst.line_stride,
        daout_surf_stride=dst.surf_stride if mode != 1 else 0,
        daout_planar_stride=dst.plane_stride if mode == 1 else 0,
        contract_stride_0=-(-dst.channel * bpe // 32) * src.surf_stride,
        contract_stride_1=d.stride_y * dst.line_stride, deconv_x_stride=d.stride_x - 1,
        deconv_y_stride=d.stride_y - 1)


def cdp_params(run: Run, op: Any) -> CdpParams:
    """The CDP's registers for a CDP operation (cdp.c, update_lut in common.c)."""
    d, s = op.op_desc, op.surface_desc
    src, dst = s.src_data, s.dst_data
    lut = CdpLut()
    if d.lut_index >= 0:
        p = run.net.luts[d.lut_index]
        exp = p.method == 0
        fp16 = d.in_precision == 2

        def scale(slope: Any) -> int:
            return int(slope.data_i.scale) & 0xFFFF

        def shift(slope: Any) -> int:
            return 0 if fp16 else int(slope.data_i.shifter) & 0x1F

        le_sel = 0 if exp else p.linear_exp_offset.exp_offset & 0xFF  # the union's frac_bits
        lut = CdpLut(
            le_function=p.method, uflow_priority=p.underflow_priority, oflow_priority=p.overflow_priority,
            hybrid_priority=p.hybrid_priority,
            le_index_offset=p.linear_exp_offset.exp_offset & 0xFF if exp else 0, le_index_select=le_sel,
            lo_index_select=p.linear_only_offset.exp_offset & 0xFF,
            le_start_low=p.linear_exp_start & 0xFFFFFFFF, le_start_high=(p.linear_exp_start >> 32) & 0x3F,
            le_end_low=p.linear_exp_end & 0xFFFFFFFF, le_end_high=(p.linear_exp_end >> 32) & 0x3F,
            lo_start_low=p.linear_only_start & 0xFFFFFFFF, lo_start_high=(p.linear_only_start >> 32) & 0x3F,
            lo_end_low=p.linear_only_end & 0xFFFFFFFF, lo_end_high=(p.linear_only_end >> 32) & 0x3F,
            le_slope_uflow_scale=scale(p.linear_exp_underflow_slope),
            le_slope_uflow_shift=shift(p.linear_exp_underflow_slope),
            le_slope_oflow_scale=scale(p.linear_exp_overflow_slope),
            le_slope_oflow_shift=shift(p.linear_exp_overflow_slope),
            lo_slope_uflow_scale=scale(p.linear_only_underflow_slope),
            lo_slope_uflow_shift=shift(p.linear_only_underflow_slope),
            lo_slope_oflow_scale=scale(p.linear_only_overflow_slope),
            lo_slope_oflow_shift=shift(p.linear_only_overflow_slope),
            le_table=tuple(int(v) & 0xFFFF for v in p.linear_exp_table),
            lo_table=tuple(int(v) & 0xFFFF for v in p.linear_only_table))
    return CdpParams(
        width=src.width - 1, height=src.height - 1, channel=src.channel - 1, input_data=d.in_precision,
        src_base_addr=run.address(src.address), src_line_stride=src.line_stride,
        src_surface_stride=src.surf_stride,
        src_ram_type=RAM[src.type], dst_base_addr=run.address(dst.address), dst_line_stride=dst.line_stride,
        dst_surface_stride=dst.surf_stride, dst_ram_type=RAM[dst.type],
        normalz_len=(d.local_size - 1) // 2 - 1, sqsum_bypass=d.bypass_sqsum, mul_bypass=d.bypass_out_mul,
        datin_offset=d.in_cvt.offset & 0xFFFF, datin_scale=d.in_cvt.scale & 0xFFFF,
        datin_shifter=d.in_cvt.truncate & 0x1F, datout_offset=d.out_cvt.offset & 0xFFFFFFFF,
        datout_scale=d.out_cvt.scale & 0xFFFF, datout_shifter=d.out_cvt.truncate & 0x3F, lut=lut)
