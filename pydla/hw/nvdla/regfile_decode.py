"""From a launched operation's registers to the parameters of NVDLA's block kernels (BDMA, CONV, SDP, PDP,
CDP, RUBIK), field by field, by NVDLA's names.

Addresses, strides and byte counts are read whole from their registers (``int(view.d_src_line_stride)``):
the register keeps only its field's bits, so the value is the byte value the hardware uses (on the
nvdlav1 map a multiple of 32, or of 128 for weight byte counts: the low bits are not stored; exact on
the newer map); a 64-bit address joins its HIGH and LOW registers. Sizes keep their register encoding
(value - 1), as the kernels take them.

Usage::

    def on_launch(launch):
        params = decode(launch)                 # PdpParams for a PDP launch, ...
        pdp.execute(params, memory, target)
        regfile.complete(launch.processor, launch.group)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydla.deviceapi.registers import BitField, RegisterBits
from pydla.deviceapi.runtime import Record
from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.bdma import BdmaParams, BdmaTransfer
from pydla.hw.nvdla.cdp_params import CdpLut, CdpParams
from pydla.hw.nvdla.conv_params import CaccParams, CdmaParams, CmacParams, ConvParams, CscParams
from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.regfile_units import Launch
from pydla.hw.nvdla.rubik import RubikParams
from pydla.hw.nvdla.sdp_params import SdpLut, SdpOperandDma, SdpParams, SdpX, SdpY

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Params = BdmaParams | ConvParams | PdpParams | SdpParams | CdpParams | RubikParams
D = TypeVar("D", bound="DataclassInstance")


def _address(high: Any, low: Any) -> int:
    """A 64-bit address from its HIGH and LOW registers (the LOW register's bits in place)."""
    return (int(high) << 32) | int(low)


@functools.cache
def _bit_fields(struct: type[Record], strip: str) -> dict[str, tuple[str, BitField, bool]]:
    """A block struct's bit fields by lower-case name (without ``strip``): the register holding each,
    and whether it is a byte value (an address, stride or byte count: named as its register, above
    bit 0: read whole)."""
    out: dict[str, tuple[str, BitField, bool]] = {}
    for entry in struct._fields_:
        attr, kind = entry[0], entry[1]
        if isinstance(kind, type) and issubclass(kind, RegisterBits):
            for b in kind.BITS:
                name = b.name.lower()
                out[name.removeprefix(strip)] = (attr, b, b.lsb > 0 and attr.endswith(name))
    return out


def _by_name(cls: type[D], views: list[Any], strip: str = "", **given: Any) -> D:
    """``cls`` with each field not ``given`` from the bit field of that name in the first of ``views``
    that has one (the kernels' dataclasses name their fields as NVDLA's registers do)."""
    values = dict(given)
    for f in dataclasses.fields(cls):
        if f.name in values:
            continue
        for view in views:
            kind: type[Record] = type(view)
            hit = _bit_fields(kind, strip).get(f.name)
            if hit is not None:
                attr, bits, whole = hit
                register = getattr(view, attr)
                values[f.name] = int(register) if whole else getattr(register, bits.name.lower())
                break
        else:  # the kernels' dataclasses and the map disagree: a bug, not an input
            raise DlaError(NvError.InvalidState, f"{cls.__name__}.{f.name}: no bit field of that name")
    return cls(**values)


def decode(launch: Launch) -> Params:
    """The block kernel's parameters of ``launch``."""
    decoder = _DECODERS.get(launch.processor)
    if decoder is None:
        raise DlaError(NvError.NotSupported, f"{launch.processor} operations have no block kernel to decode "
                                             f"for (decoded: {', '.join(_DECODERS)})")
    return decoder(launch)


def bdma_params(launch: Launch) -> BdmaParams:
    """BDMA: its queued transfers, each from the ``CFG_*`` registers as it was queued."""
    return BdmaParams(tuple(BdmaTransfer(
        src_addr=_address(t.cfg_src_addr_high, t.cfg_src_addr_low),
        dst_addr=_address(t.cfg_dst_addr_high, t.cfg_dst_addr_low),
        line_size=t.cfg_line.size, line_repeat=t.cfg_line_repeat.number,
        src_line=int(t.cfg_src_line), dst_line=int(t.cfg_dst_line),
        surf_repeat=t.cfg_surf_repeat.number, src_surf=int(t.cfg_src_surf), dst_surf=int(t.cfg_dst_surf),
        src_ram_type=t.cfg_cmd.src_ram_type, dst_ram_type=t.cfg_cmd.dst_ram_type) for t in launch.transfers))


def pdp_params(launch: Launch) -> PdpParams:
    """PDP, its source read by PDP_RDMA when that takes part (from memory), else PDP's own (unused on
    the fly)."""
    p = launch.views["PDP"]
    src = launch.views.get("PDP_RDMA", p)
    mode, kernel, pad = p.d_operation_mode_cfg, p.d_pooling_kernel_cfg, p.d_pooling_padding_cfg
    part_in, part_out = p.d_partial_width_in, p.d_partial_width_out
    values = {f"pad_value_{n}x": getattr(getattr(p, f"d_pooling_padding_value_{n}_cfg"), f"pad_value_{n}x")
              for n in range(1, 8)}
    return PdpParams(
        cube_in_width=p.d_data_cube_in_width.cube_in_width,
        cube_in_height=p.d_data_cube_in_height.cube_in_height,
        cube_in_channel=p.d_data_cube_in_channel.cube_in_channel,
        cube_out_width=p.d_data_cube_out_width.cube_out_width,
        cube_out_height=p.d_data_cube_out_height.cube_out_height,
        cube_out_channel=p.d_data_cube_out_channel.cube_out_channel,
        pooling_method=mode.pooling_method, kernel_width=kernel.kernel_width,
        kernel_height=kernel.kernel_height,
        kernel_stride_width=kernel.kernel_stride_width, kernel_stride_height=kernel.kernel_stride_height,
        pad_left=pad.pad_left, pad_top=pad.pad_top, pad_right=pad.pad_right, pad_bottom=pad.pad_bottom,
        input_data=p.d_data_format.input_data,
        src_base_addr=_address(src.d_src_base_addr_high, src.d_src_base_addr_low),
        src_line_stride=int(src.d_src_line_stride), src_surface_stride=int(src.d_src_surface_stride),
        dst_base_addr=_address(p.d_dst_base_addr_high, p.d_dst_base_addr_low),
        dst_line_stride=int(p.d_dst_line_stride), dst_surface_stride=int(p.d_dst_surface_stride),
        recip_kernel_width=p.d_recip_kernel_width.recip_kernel_width,
        recip_kernel_height=p.d_recip_kernel_height.recip_kernel_height, **values,
        flying_mode=mode.flying_mode, split_num=mode.split_num,
        partial_width_in_first=part_in.partial_width_in_first,
        partial_width_in_mid=part_in.partial_width_in_mid,
        partial_width_in_last=part_in.partial_width_in_last,
        partial_width_out_first=part_out.partial_width_out_first,
        partial_width_out_mid=part_out.partial_width_out_mid,
        partial_width_out_last=part_out.partial_width_out_last,
        nan_to_zero=p.d_nan_flush_to_zero.nan_to_zero,
        src_ram_type=src.d_src_ram_cfg.src_ram_type if "PDP_RDMA" in launch.views else PdpParams.src_ram_type,
        dst_ram_type=p.d_dst_ram_cfg.dst_ram_type)


def _sdp_x(s: Any, stage: str) -> SdpX:
    """X1 (``BS``) or X2 (``BN``): ``D_DP_<stage>_*`` without the stage's prefix."""
    cfg, alu, mul = (getattr(s, f"d_dp_{stage}_{r}") for r in ("cfg", "alu_cfg", "mul_cfg"))
    return SdpX(
        bypass=getattr(cfg, f"{stage}_bypass"), alu_bypass=getattr(cfg, f"{stage}_alu_bypass"),
        alu_algo=getattr(cfg, f"{stage}_alu_algo"), alu_src=getattr(alu, f"{stage}_alu_src"),
        alu_shift_value=getattr(alu, f"{stage}_alu_shift_value"),
        alu_operand=getattr(getattr(s, f"d_dp_{stage}_alu_src_value"), f"{stage}_alu_operand"),
        mul_bypass=getattr(cfg, f"{stage}_mul_bypass"), mul_prelu=getattr(cfg, f"{stage}_mul_prelu"),
        mul_src=getattr(mul, f"{stage}_mul_src"), mul_shift_value=getattr(mul, f"{stage}_mul_shift_value"),
        mul_operand=getattr(getattr(s, f"d_dp_{stage}_mul_src_value"), f"{stage}_mul_operand"),
        relu_bypass=getattr(cfg, f"{stage}_relu_bypass"))


def _sdp_y(s: Any) -> SdpY:
    cfg, alu, mul = s.d_dp_ew_cfg, s.d_dp_ew_alu_cfg, s.d_dp_ew_mul_cfg
    return SdpY(
        bypass=cfg.ew_bypass, alu_bypass=cfg.ew_alu_bypass, alu_algo=cfg.ew_alu_algo, alu_src=alu.ew_alu_src,
        alu_cvt_bypass=alu.ew_alu_cvt_bypass, alu_operand=int(s.d_dp_ew_alu_src_value),
        alu_cvt_offset=int(s.d_dp_ew_alu_cvt_offset_value),
        alu_cvt_scale=s.d_dp_ew_alu_cvt_scale_value.ew_alu_cvt_scale,
        alu_cvt_truncate=s.d_dp_ew_alu_cvt_truncate_value.ew_alu_cvt_truncate,
        mul_bypass=cfg.ew_mul_bypass, mul_prelu=cfg.ew_mul_prelu, mul_src=mul.ew_mul_src,
        mul_cvt_bypass=mul.ew_mul_cvt_bypass, mul_operand=int(s.d_dp_ew_mul_src_value),
        mul_cvt_offset=int(s.d_dp_ew_mul_cvt_offset_value),
        mul_cvt_scale=s.d_dp_ew_mul_cvt_scale_value.ew_mul_cvt_scale,
        mul_cvt_truncate=s.d_dp_ew_mul_cvt_truncate_value.ew_mul_cvt_truncate,
        truncate=s.d_dp_ew_truncate_value.ew_truncate, lut_bypass=cfg.ew_lut_bypass)


def _sdp_dma(r: Any, dma: str, stage: str) -> SdpOperandDma:
    """One of SDP_RDMA's operand reads: ``D_<dma>_CFG`` and ``D_<stage>_*``."""
    cfg = getattr(r, f"d_{dma}_cfg")
    return SdpOperandDma(
        disable=getattr(cfg, f"{dma}_disable"), data_use=getattr(cfg, f"{dma}_data_use"),
        data_size=getattr(cfg, f"{dma}_data_size"), data_mode=getattr(cfg, f"{dma}_data_mode"),
        ram_type=getattr(cfg, f"{dma}_ram_type"),
        base_addr=_address(getattr(r, f"d_{stage}_base_addr_high"), getattr(r, f"d_{stage}_base_addr_low")),
        line_stride=int(getattr(r, f"d_{stage}_line_stride")),
        surface_stride=int(getattr(r, f"d_{stage}_surface_stride")))


def _sdp_lut(s: Any, launch: Launch) -> SdpLut:
    cfg, info = s.s_lut_cfg, s.s_lut_info
    le_scale, le_shift = s.s_lut_le_slope_scale, s.s_lut_le_slope_shift
    lo_scale, lo_shift = s.s_lut_lo_slope_scale, s.s_lut_lo_slope_shift
    return SdpLut(
        le_function=cfg.lut_le_function, uflow_priority=cfg.lut_uflow_priority,
        oflow_priority=cfg.lut_oflow_priority, hybrid_priority=cfg.lut_hybrid_priority,
        le_index_offset=info.lut_le_index_offset, le_index_select=info.lut_le_index_select,
        lo_index_select=info.lut_lo_index_select, le_start=int(s.s_lut_le_start), le_end=int(s.s_lut_le_end),
        lo_start=int(s.s_lut_lo_start), lo_end=int(s.s_lut_lo_end),
        le_slope_uflow_scale=le_scale.lut_le_slope_uflow_scale,
        le_slope_uflow_shift=le_shift.lut_le_slope_uflow_shift,
        le_slope_oflow_scale=le_scale.lut_le_slope_oflow_scale,
        le_slope_oflow_shift=le_shift.lut_le_slope_oflow_shift,
        lo_slope_uflow_scale=lo_scale.lut_lo_slope_uflow_scale,
        lo_slope_uflow_shift=lo_shift.lut_lo_slope_uflow_shift,
        lo_slope_oflow_scale=lo_scale.lut_lo_slope_oflow_scale,
        lo_slope_oflow_shift=lo_shift.lut_lo_slope_oflow_shift,
        le_table=launch.lut_le, lo_table=launch.lut_lo)


def sdp_params(launch: Launch) -> SdpParams:
    """SDP with SDP_RDMA when that takes part. Without it (the input on the fly and no operand from
    memory) the operand reads are disabled and the input precision is the processing precision (the
    convolution's result arrives in it)."""
    s = launch.views["SDP"]
    r = launch.views.get("SDP_RDMA")
    fmt, mode = s.d_data_format, s.d_feature_mode_cfg
    off = SdpOperandDma()  # disabled
    return SdpParams(
        width=s.d_data_cube_width.width, height=s.d_data_cube_height.height,
        channel=s.d_data_cube_channel.channel,
        in_precision=fmt.proc_precision if r is None else r.d_feature_mode_cfg.in_precision,
        proc_precision=fmt.proc_precision, out_precision=fmt.out_precision,
        src_base_addr=0 if r is None else _address(r.d_src_base_addr_high, r.d_src_base_addr_low),
        src_line_stride=0 if r is None else int(r.d_src_line_stride),
        src_surface_stride=0 if r is None else int(r.d_src_surface_stride),
        src_ram_type=SdpParams.src_ram_type if r is None else r.d_src_dma_cfg.src_ram_type,
        dst_base_addr=_address(s.d_dst_base_addr_high, s.d_dst_base_addr_low),
        dst_line_stride=int(s.d_dst_line_stride), dst_surface_stride=int(s.d_dst_surface_stride),
        dst_batch_stride=int(s.d_dst_batch_stride), dst_ram_type=s.d_dst_dma_cfg.dst_ram_type,
        flying_mode=mode.flying_mode, output_dst=mode.output_dst, winograd=mode.winograd,
        nan_to_zero=mode.nan_to_zero, batch_number=mode.batch_number,
        bs=_sdp_x(s, "bs"), bn=_sdp_x(s, "bn"), ew=_sdp_y(s),
        brdma=off if r is None else _sdp_dma(r, "brdma", "bs"),
        nrdma=off if r is None else _sdp_dma(r, "nrdma", "bn"),
        erdma=off if r is None else _sdp_dma(r, "erdma", "ew"), lut=_sdp_lut(s, launch),
        cvt_offset=int(s.d_cvt_offset), cvt_scale=s.d_cvt_scale.cvt_scale, cvt_shift=s.d_cvt_shift.cvt_shift)


def rubik_params(launch: Launch) -> RubikParams:
    v = launch.views["RBK"]
    return RubikParams(
        rubik_mode=v.d_misc_cfg.rubik_mode, in_precision=v.d_misc_cfg.in_precision,
        datain_width=v.d_datain_size_0.datain_width, datain_height=v.d_datain_size_0.datain_height,
        datain_channel=v.d_datain_size_1.datain_channel,
        dain_addr=_address(v.d_dain_addr_high, v.d_dain_addr_low),
        dain_line_stride=int(v.d_dain_line_stride), dain_surf_stride=int(v.d_dain_surf_stride),
        dain_planar_stride=int(v.d_dain_planar_stride), dataout_channel=v.d_dataout_size_1.dataout_channel,
        daout_addr=_address(v.d_daout_addr_high, v.d_daout_addr_low),
        daout_line_stride=int(v.d_daout_line_stride), daout_surf_stride=int(v.d_daout_surf_stride),
        daout_planar_stride=int(v.d_daout_planar_stride), contract_stride_0=int(v.d_contract_stride_0),
        contract_stride_1=int(v.d_contract_stride_1), deconv_x_stride=v.d_deconv_stride.deconv_x_stride,
        deconv_y_stride=v.d_deconv_stride.deconv_y_stride, datain_ram_type=v.d_dain_ram_type.datain_ram_type,
        dataout_ram_type=v.d_daout_ram_type.dataout_ram_type)


def conv_params(launch: Launch) -> ConvParams:
    """The convolution's five blocks, each field by its name; the addresses from HIGH and LOW."""
    v = launch.views
    c = v["CDMA"]
    cdma = _by_name(CdmaParams, [c], datain_addr_0=_address(c.d_dain_addr_high_0, c.d_dain_addr_low_0),
                    datain_addr_1=_address(c.d_dain_addr_high_1, c.d_dain_addr_low_1),
                    weight_addr=_address(c.d_weight_addr_high, c.d_weight_addr_low),
                    wgs_addr=_address(c.d_wgs_addr_high, c.d_wgs_addr_low),
                    wmb_addr=_address(c.d_wmb_addr_high, c.d_wmb_addr_low))
    return ConvParams(cdma=cdma, csc=_by_name(CscParams, [v["CSC"]]), cacc=_by_name(CaccParams, [v["CACC"]]),
                      cmac_a=_by_name(CmacParams, [v["CMAC_A"]]), cmac_b=_by_name(CmacParams, [v["CMAC_B"]]))


def cdp_params(launch: Launch) -> CdpParams:
    """CDP and CDP_RDMA (the CDP takes its sizes from its RDMA), its LUT registers and tables."""
    cdp, rdma = launch.views["CDP"], launch.views["CDP_RDMA"]
    lut = _by_name(CdpLut, [cdp], strip="lut_", le_table=launch.lut_le, lo_table=launch.lut_lo)
    return _by_name(CdpParams, [rdma, cdp], lut=lut,
                    src_base_addr=_address(rdma.d_src_base_addr_high, rdma.d_src_base_addr_low),
                    dst_base_addr=_address(cdp.d_dst_base_addr_high, cdp.d_dst_base_addr_low))


_DECODERS: dict[str, Callable[[Launch], Params]] = {
    "BDMA": bdma_params, "CONV": conv_params, "PDP": pdp_params, "SDP": sdp_params, "CDP": cdp_params,
    "RUBIK": rubik_params}
