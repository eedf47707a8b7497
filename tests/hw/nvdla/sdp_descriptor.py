"""SdpParams from a 2018 ``dla_sdp_op_desc`` + ``dla_sdp_surface_desc``, programmed as NVIDIA's firmware
does it (kmd/firmware/sdp.c, docs/development/nvdla/firmware.md). For the golden-image tests only;
the firmware engineer's scheduler does this for the device."""

from __future__ import annotations

import struct

from pydla.hw.nvdla.sdp_params import SdpOperandDma, SdpParams, SdpX, SdpY
from tests.hw.nvdla.regression import Cube2018, Regression

OP_NONE, OP_MUL, OP_ADD, OP_BOTH = 0, 1, 2, 3
PER_LAYER = 0
ACT_RELU, ACT_PRELU = 1, 3


def _op(raw: bytes, off: int) -> dict[str, int]:
    (enable, alu_type, typ, mode, act, shift, truncate, prec, alu_operand, mul_operand) = \
        struct.unpack_from("<8Bii", raw, off)
    return dict(enable=enable, alu_type=alu_type, type=typ, mode=mode, act=act, shift=shift,
                truncate=truncate, precision=prec, alu_operand=alu_operand, mul_operand=mul_operand)


def _stage_x(op: dict[str, int]) -> SdpX:
    adds = op["type"] in (OP_ADD, OP_BOTH)
    muls = op["type"] in (OP_MUL, OP_BOTH)
    src = 0 if op["mode"] == PER_LAYER else 1
    return SdpX(bypass=int(not op["enable"]), alu_bypass=int(not adds), alu_algo=op["alu_type"], alu_src=src,
                alu_shift_value=op["shift"], alu_operand=op["alu_operand"] & 0xFFFF, mul_bypass=int(not muls),
                mul_prelu=int(op["act"] == ACT_PRELU), mul_src=src, mul_shift_value=op["truncate"],
                mul_operand=op["mul_operand"] & 0xFFFF, relu_bypass=int(op["act"] != ACT_RELU))


def _dma(r: Regression, op: dict[str, int], cube: Cube2018) -> SdpOperandDma:
    needed = op["enable"] and op["type"] != OP_NONE and op["mode"] != PER_LAYER
    if not needed:
        return SdpOperandDma()
    use = {OP_MUL: 0, OP_ADD: 1, OP_BOTH: 2}[op["type"]]
    return SdpOperandDma(disable=0, data_use=use, data_size=0 if op["precision"] == 0 else 1,
                         data_mode=0 if op["mode"] == 1 else 1, base_addr=r.address(cube.address),
                         line_stride=cube.line_stride, surface_stride=cube.surf_stride)


def params_from_descriptor(r: Regression, index: int = 0) -> SdpParams:
    op = r.operation(index)
    src_prec, dst_prec = struct.unpack_from("<BB", op, 0)
    cvt_scale, cvt_truncate, _, cvt_offset = struct.unpack_from("<hBBi", op, 4)
    x1, x2, y = _op(op, 20), _op(op, 52), _op(op, 84)
    surf = r.surface(index)
    src, c1, c2, cy, dst = (Cube2018.at(surf, 28 * i) for i in range(5))
    proc = (2 if src_prec == 2 else 0) if dst_prec == 0 else src_prec
    ew = _stage_x(y)
    return SdpParams(
        width=src.width - 1, height=src.height - 1, channel=src.channel - 1, in_precision=src_prec,
        proc_precision=proc, out_precision=dst_prec,
        src_base_addr=r.address(src.address) if src.type != 2 else 0, src_line_stride=src.line_stride,
        src_surface_stride=src.surf_stride, dst_base_addr=r.address(dst.address),
        dst_line_stride=dst.line_stride, dst_surface_stride=dst.surf_stride, flying_mode=int(src.type == 2),
        bs=_stage_x(x1), bn=_stage_x(x2),
        ew=SdpY(bypass=ew.bypass, alu_bypass=ew.alu_bypass, alu_algo=ew.alu_algo, alu_src=ew.alu_src,
                alu_operand=y["alu_operand"], mul_bypass=ew.mul_bypass, mul_prelu=ew.mul_prelu,
                mul_src=ew.mul_src, mul_operand=y["mul_operand"], truncate=y["truncate"]),
        brdma=_dma(r, x1, c1), nrdma=_dma(r, x2, c2), erdma=_dma(r, y, cy),
        cvt_offset=cvt_offset & 0xFFFFFFFF, cvt_scale=cvt_scale & 0xFFFF, cvt_shift=cvt_truncate)
