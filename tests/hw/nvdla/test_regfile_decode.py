"""From registers to the block kernels' parameters: each kernel's dataclass programmed into the register
file field by field (by NVDLA's field names, addresses and strides as bytes, the way the firmware writes
them), launched, and decoded back, in both maps; and a PDP run from its registers end to end."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.hw.nvdla import pdp
from pydla.hw.nvdla.bdma import BdmaParams, BdmaTransfer
from pydla.hw.nvdla.cdp_params import CdpLut, CdpParams
from pydla.hw.nvdla.conv_params import CmacParams, ConvParams, direct
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.regfile import NvdlaRegisterFile
from pydla.hw.nvdla.regfile_decode import decode
from pydla.hw.nvdla.regfile_units import Launch
from pydla.hw.nvdla.rubik import RubikParams
from pydla.hw.nvdla.sdp_params import SdpLut, SdpOperandDma, SdpParams, SdpX, SdpY
from pydla.hw.nvdla.surface import Cube, gather, scatter
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget

BYTE_VALUE = re.compile(r"(_ADDR_LOW(_[01])?|_ADDR|_STRIDE(_[01])?|_BYTES)$")


def program(rf: NvdlaRegisterFile, block: str, **fields: int) -> None:
    """Set each bit field NAME of ``block``'s registers to its value. An address, a stride or a byte
    count (a register's only field, above bit 0) is a byte value: written whole, the register keeps
    its field's bits."""
    words: dict[str, int] = {}
    for name, value in fields.items():
        infos = [i for n, i in rf.regs.REGISTER_INFO.items()
                 if n.startswith(f"NVDLA_{block}_") and n[len(f"NVDLA_{block}_"):][:2] in ("D_", "S_", "CF")
                 and any(b.name == name for b in i.bits)]
        assert len(infos) == 1, (block, name, [i.name for i in infos])
        info = infos[0]
        b = info.field(name)
        word = words.get(info.name, rf.read(info.address))
        if len(info.bits) == 1 and b.lsb > 0 and BYTE_VALUE.search(name):
            assert value & ~b.mask == 0, (name, value)  # the test keeps to what the field holds
            words[info.name] = (word & ~b.mask) | value
        else:
            words[info.name] = b.put(word, value)
    for name, word in words.items():
        rf.write(rf.regs.REGISTERS[name], word)


def _launch(config: str, *enables: str, setup: Any = None) -> tuple[NvdlaRegisterFile, list[Launch]]:
    launches: list[Launch] = []
    rf = NvdlaRegisterFile(config, on_launch=launches.append)
    if setup is not None:
        setup(rf)
    for block in enables:
        rf.write(rf.regs.REGISTERS[f"NVDLA_{block}_D_OP_ENABLE_0"], 1)
    assert not rf.faults, list(rf.faults)
    return rf, launches


def _split(address: int, what: str) -> dict[str, int]:
    return {f"{what}_LOW": address & 0xFFFFFFFF, f"{what}_HIGH": address >> 32}


PDP = PdpParams(
    cube_in_width=36, cube_in_height=17, cube_in_channel=70, cube_out_width=12, cube_out_height=5,
    cube_out_channel=70, pooling_method=0, kernel_width=3, kernel_height=5, kernel_stride_width=2,
    kernel_stride_height=3, pad_left=2, pad_top=1, pad_right=3, pad_bottom=4, input_data=1,
    src_base_addr=0x1_2345_6780, src_line_stride=0x4A0, src_surface_stride=0x14E00,
    dst_base_addr=0x2_0000_0040, dst_line_stride=0x1A0, dst_surface_stride=0x9C0, recip_kernel_width=0x4000,
    recip_kernel_height=0x2AAA, pad_value_1x=0x7FF01, pad_value_2x=2, pad_value_3x=3, pad_value_4x=0x40004,
    pad_value_5x=5, pad_value_6x=6, pad_value_7x=0x7FFFF, flying_mode=1, split_num=2,
    partial_width_in_first=11, partial_width_in_mid=12, partial_width_in_last=13, partial_width_out_first=3,
    partial_width_out_mid=4, partial_width_out_last=5, nan_to_zero=1, src_ram_type=0, dst_ram_type=1)


@pytest.mark.parametrize("config", ["nv_full", "nv_small"])
def test_pdp(config: str) -> None:
    p = PDP
    core = {f.name.upper(): getattr(p, f.name) for f in dataclasses.fields(p)
            if not f.name.startswith(("src_", "dst_base"))}

    def setup(rf: NvdlaRegisterFile) -> None:
        program(rf, "PDP", **core, **_split(p.dst_base_addr, "DST_BASE_ADDR"), SRC_LINE_STRIDE=0x20)
        program(rf, "PDP_RDMA", **_split(p.src_base_addr, "SRC_BASE_ADDR"), SRC_LINE_STRIDE=p.src_line_stride,
                SRC_SURFACE_STRIDE=p.src_surface_stride, SRC_RAM_TYPE=p.src_ram_type)

    _, launches = _launch(config, "PDP_RDMA", "PDP", setup=setup)
    assert decode(launches[0]) == p  # the source is PDP_RDMA's, not PDP's own SRC_LINE_STRIDE
    # On the fly from the SDP: no PDP_RDMA, PDP's own source registers (unused by the kernel).
    _, launches = _launch(config, "PDP",
                          setup=lambda rf: program(rf, "PDP", FLYING_MODE=0, SRC_LINE_STRIDE=0x40))
    got = decode(launches[0])
    assert isinstance(got, PdpParams)
    assert (got.flying_mode, got.src_line_stride, got.src_ram_type) == (0, 0x40, 1)


def test_nvdlav1_drops_the_low_bits_of_addresses_as_the_hardware_does() -> None:
    _, launches = _launch("nv_full", "RBK",
                          setup=lambda rf: rf.write(rf.regs.NVDLA_RBK_D_DAIN_ADDR_LOW_0, 0x12345678))
    v1 = decode(launches[0])
    _, launches = _launch("nv_small", "PDP",
                          setup=lambda rf: rf.write(rf.regs.NVDLA_PDP_D_DST_BASE_ADDR_LOW_0, 0x12345678))
    v2 = decode(launches[0])
    assert isinstance(v1, RubikParams) and isinstance(v2, PdpParams)
    assert (v1.dain_addr, v2.dst_base_addr) == (0x12345660, 0x12345678)


def _sdp_x(seed: int) -> SdpX:
    return SdpX(bypass=0, alu_bypass=seed & 1, alu_algo=2, alu_src=1, alu_shift_value=seed + 3,
                alu_operand=0x8000 + seed, mul_bypass=1 - (seed & 1), mul_prelu=1, mul_src=seed & 1,
                mul_shift_value=0x80 + seed, mul_operand=0x7FFF - seed, relu_bypass=seed & 1)


SDP = SdpParams(
    width=55, height=27, channel=63, in_precision=2, proc_precision=2, out_precision=1,
    src_base_addr=0x3_0000_0020, src_line_stride=0x700, src_surface_stride=0x18800, src_ram_type=0,
    dst_base_addr=0x4_0000_0000, dst_line_stride=0x380, dst_surface_stride=0xC400, dst_batch_stride=0x62000,
    dst_ram_type=0, flying_mode=0, output_dst=0, winograd=1, nan_to_zero=1, batch_number=3,
    bs=_sdp_x(0), bn=_sdp_x(1),
    ew=SdpY(bypass=0, alu_bypass=0, alu_algo=3, alu_src=1, alu_cvt_bypass=0, alu_operand=0xDEADBEEF,
            alu_cvt_offset=0x80000001, alu_cvt_scale=0x1234, alu_cvt_truncate=0x21, mul_bypass=0, mul_prelu=1,
            mul_src=0, mul_cvt_bypass=1, mul_operand=0xCAFEF00D, mul_cvt_offset=7, mul_cvt_scale=0xFFFF,
            mul_cvt_truncate=0x3F, truncate=0x3FF, lut_bypass=0),
    brdma=SdpOperandDma(disable=0, data_use=2, data_size=1, data_mode=1, ram_type=0, base_addr=0x5_0000_0060,
                        line_stride=0x80, surface_stride=0x1000),
    nrdma=SdpOperandDma(disable=0, data_use=1, data_size=0, data_mode=0, ram_type=1, base_addr=0x600,
                        line_stride=0x20, surface_stride=0x40),
    erdma=SdpOperandDma(disable=1, data_use=0, data_size=1, data_mode=1, ram_type=1, base_addr=0x7_0000_0000,
                        line_stride=0xE0, surface_stride=0x3000),
    lut=SdpLut(le_function=0, uflow_priority=1, oflow_priority=0, hybrid_priority=1, le_index_offset=0xF8,
               le_index_select=3, lo_index_select=5, le_start=0xFFFF8000, le_end=0x7FFF, lo_start=0x80000000,
               lo_end=0x7FFFFFFF, le_slope_uflow_scale=0x3C00, le_slope_uflow_shift=31,
               le_slope_oflow_scale=0xBC00, le_slope_oflow_shift=1, lo_slope_uflow_scale=2,
               lo_slope_uflow_shift=3, lo_slope_oflow_scale=4, lo_slope_oflow_shift=5,
               le_table=tuple(range(1000, 1065)), lo_table=tuple(range(0xFF00, 0xFF00 - 257, -1))),
    cvt_offset=0xFFFFFF80, cvt_scale=0x4000, cvt_shift=0x3F)


def _program_sdp(rf: NvdlaRegisterFile, p: SdpParams) -> None:
    fields: dict[str, int] = {"WIDTH": p.width, "HEIGHT": p.height, "CHANNEL": p.channel}
    top = ("proc_precision", "out_precision", "dst_line_stride", "dst_surface_stride", "dst_batch_stride",
           "dst_ram_type", "flying_mode", "output_dst", "winograd", "nan_to_zero", "batch_number",
           "cvt_offset", "cvt_scale", "cvt_shift")
    fields.update({name.upper(): getattr(p, name) for name in top})
    for stage in ("bs", "bn", "ew"):
        fields.update({f"{stage}_{f.name}".upper(): getattr(getattr(p, stage), f.name)
                       for f in dataclasses.fields(getattr(p, stage))})
    fields.update({f"LUT_{f.name}".upper(): getattr(p.lut, f.name) for f in dataclasses.fields(p.lut)
                   if not f.name.endswith("_table")})
    program(rf, "SDP", **fields, **_split(p.dst_base_addr, "DST_BASE_ADDR"))
    rdma = {"WIDTH": p.width, "HEIGHT": p.height, "CHANNEL": p.channel, "IN_PRECISION": p.in_precision,
            "SRC_LINE_STRIDE": p.src_line_stride, "SRC_SURFACE_STRIDE": p.src_surface_stride,
            "SRC_RAM_TYPE": p.src_ram_type, **_split(p.src_base_addr, "SRC_BASE_ADDR")}
    for dma, stage in (("brdma", "bs"), ("nrdma", "bn"), ("erdma", "ew")):
        d = getattr(p, dma)
        rdma.update({f"{dma}_{name}".upper(): getattr(d, name)
                     for name in ("disable", "data_use", "data_size", "data_mode", "ram_type")})
        rdma.update({f"{stage}_LINE_STRIDE".upper(): d.line_stride,
                     f"{stage}_SURFACE_STRIDE".upper(): d.surface_stride,
                     **_split(d.base_addr, f"{stage}_BASE_ADDR".upper())})
    program(rf, "SDP_RDMA", **rdma)
    for table_id, table in ((0, p.lut.le_table), (1, p.lut.lo_table)):
        program(rf, "SDP", LUT_TABLE_ID=table_id, LUT_ACCESS_TYPE=1, LUT_ADDR=0)
        for entry in table:
            rf.write(rf.regs.NVDLA_SDP_S_LUT_ACCESS_DATA_0, entry)


def test_sdp_on_the_full_map() -> None:
    _, launches = _launch("nv_full", "SDP_RDMA", "SDP", setup=lambda rf: _program_sdp(rf, SDP))
    assert decode(launches[0]) == SDP


def test_sdp_on_the_fly_without_its_rdma() -> None:
    p = dataclasses.replace(SDP, flying_mode=1, bs=SdpX(), bn=SdpX(), ew=SdpY())
    _, launches = _launch("nv_small", "SDP", setup=lambda rf: _program_sdp(rf, p))
    assert sorted(launches[0].groups) == ["SDP"]
    off = SdpOperandDma()
    assert decode(launches[0]) == dataclasses.replace(
        p, in_precision=p.proc_precision, src_base_addr=0, src_line_stride=0, src_surface_stride=0,
        src_ram_type=1, brdma=off, nrdma=off, erdma=off)


RUBIK = RubikParams(
    rubik_mode=2, in_precision=1, datain_width=100, datain_height=31, datain_channel=4000,
    dain_addr=0x8_0000_00E0, dain_line_stride=0xCA0, dain_surf_stride=0x19400, dain_planar_stride=0x64000,
    dataout_channel=255, daout_addr=0x9_0000_0000, daout_line_stride=0x1960, daout_surf_stride=0x32800,
    daout_planar_stride=0xC8000, contract_stride_0=0x20, contract_stride_1=0x40, deconv_x_stride=31,
    deconv_y_stride=17, datain_ram_type=0, dataout_ram_type=1)


def test_rubik() -> None:
    p = RUBIK
    fields = {f.name.upper(): getattr(p, f.name) for f in dataclasses.fields(p)
              if f.name not in ("dain_addr", "daout_addr")}

    def setup(rf: NvdlaRegisterFile) -> None:
        program(rf, "RBK", **fields, **_split(p.dain_addr, "DAIN_ADDR"), **_split(p.daout_addr, "DAOUT_ADDR"))

    _, launches = _launch("nv_full", "RBK", setup=setup)
    assert decode(launches[0]) == p


def test_bdma() -> None:
    transfers = (BdmaTransfer(src_addr=0x1_0000_0020, dst_addr=0x40, line_size=7, line_repeat=0xFFFFFF,
                              src_line=0x100, dst_line=0x120, surf_repeat=3, src_surf=0x2000, dst_surf=0x2400,
                              src_ram_type=0, dst_ram_type=1),
                 BdmaTransfer(src_addr=0x60, dst_addr=0xFFFF_FFFF_FFFF_FFE0, line_size=0x1FFF, line_repeat=0,
                              src_line=0xFFFFFFE0, dst_line=0x20, surf_repeat=0, src_surf=0, dst_surf=0))
    launches: list[Launch] = []
    rf = NvdlaRegisterFile("nv_full", on_launch=launches.append)
    for t in transfers:
        for reg, value in (("CFG_SRC_ADDR_LOW", t.src_addr & 0xFFFFFFFF),
                           ("CFG_SRC_ADDR_HIGH", t.src_addr >> 32),
                           ("CFG_DST_ADDR_LOW", t.dst_addr & 0xFFFFFFFF),
                           ("CFG_DST_ADDR_HIGH", t.dst_addr >> 32),
                           ("CFG_LINE", t.line_size), ("CFG_LINE_REPEAT", t.line_repeat),
                           ("CFG_SRC_LINE", t.src_line), ("CFG_DST_LINE", t.dst_line),
                           ("CFG_SURF_REPEAT", t.surf_repeat), ("CFG_SRC_SURF", t.src_surf),
                           ("CFG_DST_SURF", t.dst_surf), ("CFG_CMD", t.src_ram_type | (t.dst_ram_type << 1)),
                           ("CFG_OP", 1)):
            rf.write(rf.regs.REGISTERS[f"NVDLA_BDMA_{reg}_0"], value)
    rf.write(rf.regs.NVDLA_BDMA_CFG_LAUNCH1_0, 1)
    assert decode(launches[0]) == BdmaParams(transfers)


def _conv() -> ConvParams:
    p = direct(target=NV_FULL, precision=Precision.INT16, width=13, height=9, channel=40, kernels=70,
               kernel_width=3, kernel_height=3, data_addr=0x1_0000_0100, weight_addr=0x2_0000_0080,
               stride=(2, 1), dilation=(1, 2), pad=(1, 2, 0, 1), pad_value=0x8001, clip_truncate=5,
               cvt=(3, -2, 4))
    cdma = dataclasses.replace(p.cdma, datain_addr_1=0x3_0000_0020, wgs_addr=0x4_0000_0040,
                               wmb_addr=0x5_0000_0060, wmb_bytes=0x380, data_bank=5, weight_bank=9,
                               entries=0x7FF, grains=17, weight_format=1, mean_format=1, mean_ry=0x8000,
                               mean_gu=1, mean_bv=2, mean_ax=0xFFFF, datain_format=1, pixel_format=35,
                               pixel_sign_override=1, conv_mode=1, data_reuse=1, skip_weight_rls=1)
    csc = dataclasses.replace(p.csc, y_extension=2, rls_slices=3, pra_truncate=1, wmb_bytes=0x380,
                              data_bank=5, weight_bank=9, entries=0x7FF)
    cacc = dataclasses.replace(p.cacc, dataout_addr=0x7FFFFFE0, line_stride=0x1A0, surf_stride=0xEA0,
                               line_packed=1, surf_packed=1, conv_mode=1)
    return ConvParams(cdma=cdma, csc=csc, cacc=cacc, cmac_a=CmacParams(conv_mode=1, proc_precision=1),
                      cmac_b=CmacParams(conv_mode=0, proc_precision=2))


def _fields(params: Any, *skip: str) -> dict[str, int]:
    return {f.name.upper(): getattr(params, f.name) for f in dataclasses.fields(params) if f.name not in skip}


@pytest.mark.parametrize("config", ["nv_full", "nv_small"])
def test_conv(config: str) -> None:
    p = _conv()
    c = p.cdma
    addresses = {**_split(c.weight_addr, "WEIGHT_ADDR"), **_split(c.wgs_addr, "WGS_ADDR"),
                 **_split(c.wmb_addr, "WMB_ADDR")}
    for plane, address in enumerate((c.datain_addr_0, c.datain_addr_1)):  # DATAIN_ADDR_LOW_0 ...
        addresses.update({f"{k}_{plane}": v for k, v in _split(address, "DATAIN_ADDR").items()})

    def setup(rf: NvdlaRegisterFile) -> None:
        program(rf, "CDMA", **_fields(c, "datain_addr_0", "datain_addr_1", "weight_addr", "wgs_addr",
                                      "wmb_addr"), **addresses)
        program(rf, "CSC", **_fields(p.csc))
        program(rf, "CACC", **_fields(p.cacc))
        program(rf, "CMAC_A", **_fields(p.cmac_a))
        program(rf, "CMAC_B", **_fields(p.cmac_b))

    _, launches = _launch(config, "CACC", "CMAC_A", "CMAC_B", "CSC", "CDMA", setup=setup)
    assert decode(launches[0]) == p


def test_cdp() -> None:
    lut = CdpLut(le_function=0, uflow_priority=1, oflow_priority=1, hybrid_priority=0, le_index_offset=0x81,
                 le_index_select=7, lo_index_select=9, le_start_low=0x89ABCDEF, le_start_high=0x3F,
                 le_end_low=1, le_end_high=2, lo_start_low=3, lo_start_high=4, lo_end_low=0xFFFFFFFF,
                 lo_end_high=0x20, le_slope_uflow_scale=0x8000, le_slope_uflow_shift=31,
                 le_slope_oflow_scale=5, le_slope_oflow_shift=6, lo_slope_uflow_scale=7,
                 lo_slope_uflow_shift=8,
                 lo_slope_oflow_scale=9, lo_slope_oflow_shift=10, le_table=tuple(range(65)),
                 lo_table=tuple(range(0xFFFF, 0xFFFF - 257, -1)))
    p = CdpParams(width=30, height=20, channel=100, input_data=2, src_base_addr=0x1_0000_0020,
                  src_line_stride=0x3E0, src_surface_stride=0x4D80, src_ram_type=0, dst_base_addr=0x40,
                  dst_line_stride=0x400, dst_surface_stride=0x5000, dst_ram_type=1, normalz_len=3,
                  sqsum_bypass=1, mul_bypass=1, datin_offset=0x8000, datin_scale=0xFFFF, datin_shifter=31,
                  datout_offset=0x80000000, datout_scale=3, datout_shifter=63, nan_to_zero=1, lut=lut)
    rdma = {"WIDTH", "HEIGHT", "CHANNEL", "INPUT_DATA", "SRC_LINE_STRIDE", "SRC_SURFACE_STRIDE",
            "SRC_RAM_TYPE"}
    fields = _fields(p, "src_base_addr", "dst_base_addr", "lut")

    def setup(rf: NvdlaRegisterFile) -> None:
        program(rf, "CDP_RDMA", **{k: v for k, v in fields.items() if k in rdma},
                **_split(p.src_base_addr, "SRC_BASE_ADDR"))
        program(rf, "CDP", **{k: v for k, v in fields.items() if k not in rdma}, INPUT_DATA_TYPE=2,
                **_split(p.dst_base_addr, "DST_BASE_ADDR"),
                **{f"LUT_{k}": v for k, v in _fields(lut, "le_table", "lo_table").items()})
        for table_id, table in ((0, lut.le_table), (1, lut.lo_table)):
            program(rf, "CDP", LUT_TABLE_ID=table_id, LUT_ACCESS_TYPE=1, LUT_ADDR=0)
            for entry in table:
                rf.write(rf.regs.NVDLA_CDP_S_LUT_ACCESS_DATA_0, entry)

    _, launches = _launch("nv_full", "CDP_RDMA", "CDP", setup=setup)
    assert decode(launches[0]) == p


def test_an_unknown_operation_is_refused() -> None:
    with pytest.raises(DlaError) as e:
        decode(Launch("GEC", 0, {}, {}))
    assert e.value.code == NvError.NotSupported and "GEC operations" in e.value.message


@pytest.mark.parametrize(("config", "target"), [("nv_full", NV_FULL), ("nv_small", NV_SMALL)])
def test_a_pooling_from_its_registers(config: str, target: NvdlaTarget) -> None:
    """Max pooling 2x2/2 of an INT8 cube, programmed as registers, decoded, executed: numpy's result."""
    c, h, w = 11, 6, 8
    x = np.random.default_rng(5).integers(-128, 128, (c, h, w), dtype=np.int8)
    atom = target.atom
    surfs = -(-c // atom)
    src = Cube(0x100, w, h, c, w * atom, h * w * atom, Precision.INT8)
    dst = Cube(0x4000, w // 2, h // 2, c, w // 2 * atom, h // 2 * w // 2 * atom, Precision.INT8)
    mem = ByteMemory(0x4000 + surfs * dst.surf_stride)
    scatter(mem, src, target, x, "test")

    def setup(rf: NvdlaRegisterFile) -> None:
        program(rf, "PDP_RDMA", CUBE_IN_WIDTH=w - 1, CUBE_IN_HEIGHT=h - 1, CUBE_IN_CHANNEL=c - 1,
                SRC_BASE_ADDR_LOW=src.address, SRC_LINE_STRIDE=src.line_stride,
                SRC_SURFACE_STRIDE=src.surf_stride, SRC_RAM_TYPE=1, INPUT_DATA=0, KERNEL_WIDTH=1,
                KERNEL_STRIDE_WIDTH=1)
        program(rf, "PDP", CUBE_IN_WIDTH=w - 1, CUBE_IN_HEIGHT=h - 1, CUBE_IN_CHANNEL=c - 1,
                CUBE_OUT_WIDTH=w // 2 - 1, CUBE_OUT_HEIGHT=h // 2 - 1, CUBE_OUT_CHANNEL=c - 1,
                POOLING_METHOD=1, FLYING_MODE=1, KERNEL_WIDTH=1, KERNEL_HEIGHT=1, KERNEL_STRIDE_WIDTH=1,
                KERNEL_STRIDE_HEIGHT=1, DST_BASE_ADDR_LOW=dst.address, DST_LINE_STRIDE=dst.line_stride,
                DST_SURFACE_STRIDE=dst.surf_stride, DST_RAM_TYPE=1, INPUT_DATA=0)

    rf, launches = _launch(config, "PDP_RDMA", "PDP", setup=setup)
    params = decode(launches[0])
    assert isinstance(params, PdpParams)
    pdp.execute(params, mem, target)
    rf.complete("PDP", launches[0].group)
    want = x.reshape(c, h // 2, 2, w // 2, 2).max(axis=(2, 4))
    assert np.array_equal(gather(mem, dst, target, "test"), want)
    assert rf.read(rf.regs.NVDLA_GLB_S_INTR_STATUS_0) == 1 << 4
