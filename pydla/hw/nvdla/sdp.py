"""SDP: NVDLA's single-point data processor, one operation from its registers.

The input comes from the convolution on the fly (``flying_mode`` 1: 32-bit integers, or FP32 bit
patterns for FP16 processing, handed in as an array) or is read from memory by SDP_RDMA (INT8
sign-extended, INT16, FP16 converted to FP32). Each element then passes X1, X2, Y and the output
converter (sdp_int for INT8/INT16 processing, sdp_fp for FP16), with operands from registers or
read by SDP_RDMA per channel or per element. The result goes to memory, or to the PDP on the fly
(returned), or, in the Y ALU's "equal" mode, nowhere: the SDP then only reports whether any element
differed.

Like the hardware, the SDP computes whole atoms: the unused lanes of the last surface are
processed too and written. Operand lanes past the cube's channels read as 0.

Usage::

    result = execute(params, mem, NV_FULL)                  # offline, to memory
    result = execute(params, mem, NV_FULL, flying_input=acc)  # from CACC: int32 (C, H, W)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import sdp_fp, sdp_fused, sdp_int, surface
from pydla.hw.nvdla.intmath import I64, saturate, sign_extend, wrap
from pydla.hw.nvdla.memory import NvdlaMemory, access, select
from pydla.hw.nvdla.precision import Precision, precision
from pydla.hw.nvdla.sdp_lut import check_lut, lut_int
from pydla.hw.nvdla.sdp_params import (
    ALU_EQL,
    DST_MEM,
    DST_PDP,
    MODE_PER_ELEMENT,
    MODE_PER_KERNEL,
    SIZE_TWO_BYTE,
    SRC_MEM,
    USE_ALU,
    USE_BOTH,
    USE_MUL,
    SdpOperandDma,
    SdpParams,
)
from pydla.hw.nvdla.strided import read_block
from pydla.hw.nvdla.target import NvdlaTarget


@dataclass(frozen=True)
class SdpResult:
    """What an SDP operation produced besides memory: the PDP's input, the "equal" mode's verdict."""

    to_pdp: npt.NDArray[np.generic] | None = None  # (C lanes, H, W) elements of the output precision
    unequal: bool = False  # Y ALU "equal" mode: some element differed from its operand


@dataclass(frozen=True)
class _Needs:
    alu: bool
    mul: bool


def _stage_needs(p: SdpParams, stage: str) -> _Needs:
    s = getattr(p, stage)
    on = not s.bypass
    return _Needs(on and not s.alu_bypass and s.alu_src == SRC_MEM,
                  on and not s.mul_bypass and s.mul_src == SRC_MEM)


def _check_winograd(p: SdpParams, proc: Precision, pout: Precision, target: NvdlaTarget) -> None:
    """What the C model's Winograd output mode takes (its data loop walks 4 lines by 2 atoms of the
    convolution's output; the arithmetic per element is the same)."""
    if not target.winograd:
        raise DlaError(NvError.NotSupported, f"SDP: winograd 1, but {target.name} has no Winograd mode")
    if not p.flying_mode:
        raise DlaError(NvError.NotSupported, "SDP: winograd 1 with input from memory (the C model reads it "
                                             "in line order but consumes it in Winograd order)")
    if p.output_dst != DST_MEM or p.batch_number:
        raise DlaError(NvError.NotSupported, "SDP: winograd 1 writes one batch to memory (output_dst 0, "
                                             "batch_number 0)")
    if not p.ew.bypass and not p.ew.alu_bypass and p.ew.alu_algo == ALU_EQL:
        raise DlaError(NvError.NotSupported, "SDP: winograd 1 has no EQL comparison")
    if proc is Precision.INT8 and pout is not Precision.INT8:
        raise DlaError(NvError.NotSupported, "SDP: winograd 1 with INT8 processing writes INT8 only")
    per_element = any(not d.disable and d.data_mode == MODE_PER_ELEMENT for d in (p.brdma, p.nrdma, p.erdma))
    if (p.height + 1) % 4 or (p.width + 1) % (4 if per_element else 2):
        raise DlaError(NvError.BadValue, f"SDP: winograd 1 needs a height that is a multiple of 4 and a "
                                         f"width of 2 (4 with per-element operands); the cube is "
                                         f"{p.width + 1}x{p.height + 1}")


@functools.lru_cache(maxsize=256)  # the same registers at every run: checked once (a refusal raises again)
def _check(p: SdpParams, target: NvdlaTarget) -> tuple[Precision, Precision, Precision]:
    for name, top in (("width", 0x1FFF), ("height", 0x1FFF), ("channel", 0x1FFF), ("batch_number", 31)):
        v = getattr(p, name)
        if not 0 <= v <= top:
            raise DlaError(NvError.BadValue, f"SDP: {name} {v} is outside its field (0..{top})")
    pin = precision(p.in_precision, "SDP_RDMA D_FEATURE_MODE_CFG.IN_PRECISION")
    proc = precision(p.proc_precision, "SDP D_DATA_FORMAT.PROC_PRECISION")
    pout = precision(p.out_precision, "SDP D_DATA_FORMAT.OUT_PRECISION")
    for prec, what in ((pin, "SDP input"), (proc, "SDP processing"), (pout, "SDP output")):
        target.require(prec, what)
    if p.winograd:
        _check_winograd(p, proc, pout, target)
    if p.output_dst not in (DST_MEM, DST_PDP):
        raise DlaError(NvError.BadValue, f"SDP: output_dst {p.output_dst} is neither 0 (memory) nor 1 (PDP)")
    if p.batch_number and not p.flying_mode:
        raise DlaError(NvError.BadValue, f"SDP: batch_number {p.batch_number} with input from memory "
                                         "(batches come from the convolution only)")
    if p.batch_number and not target.multi_batch:
        raise DlaError(NvError.NotSupported, f"SDP: {target.name} has no multi-batch mode")
    if not p.ew.bypass and not target.sdp_has_y:
        raise DlaError(NvError.NotSupported, f"SDP: {target.name} has no Y (element-wise) stage")
    if not p.ew.bypass and not p.ew.lut_bypass:
        if not target.sdp_has_lut:
            raise DlaError(NvError.NotSupported, f"SDP: {target.name} has no LUT")
        check_lut(p.lut)
    for stage, dma_name in (("bs", "brdma"), ("bn", "nrdma"), ("ew", "erdma")):
        need = _stage_needs(p, stage)
        dma: SdpOperandDma = getattr(p, dma_name)
        wanted = USE_BOTH if need.alu and need.mul else USE_ALU if need.alu else USE_MUL
        if need.alu or need.mul:
            if dma.disable:
                raise DlaError(NvError.BadValue, f"SDP: {stage} reads an operand from memory but "
                                                 f"{dma_name}_disable is 1")
            if dma.data_use != wanted:
                raise DlaError(NvError.BadValue, f"SDP: {dma_name}_data_use {dma.data_use} does not match "
                                                 f"the operands {stage} reads from memory (needs {wanted})")
            if dma.data_mode not in (MODE_PER_KERNEL, MODE_PER_ELEMENT):
                raise DlaError(NvError.BadValue, f"SDP: {dma_name}_data_mode {dma.data_mode} is not 0 or 1")
        elif not dma.disable:
            # The hardware would read operands nobody consumes and stall on them.
            raise DlaError(NvError.BadValue, f"SDP: {dma_name} is enabled but {stage} takes no operand "
                                             "from memory")
    return pin, proc, pout


def _read_operands(p: SdpParams, dma: SdpOperandDma, name: str, need: _Needs, lanes: int, proc: Precision,
                   memory: NvdlaMemory, sram: NvdlaMemory | None, target: NvdlaTarget) -> tuple[I64, I64]:
    """The (ALU, MUL) operands of one stage as 16-bit values, shaped to broadcast over (C, H, W)."""
    comps = 2 if dma.data_use == USE_BOTH else 1
    size = 2 if dma.data_size == SIZE_TWO_BYTE else 1
    per = comps * size
    mem = select(memory, sram, dma.ram_type, f"SDP {name}")
    c, h, w = p.channel + 1, p.height + 1, p.width + 1
    for field_name in ("base_addr", "line_stride", "surface_stride"):
        v = getattr(dma, field_name)
        if v < 0 or v % target.atom:
            raise DlaError(NvError.BadValue, f"SDP: {name}_{field_name} {v:#x} is not a non-negative "
                                             f"multiple of the {target.atom}-byte atom")
    with access(f"SDP {name}"):
        if dma.data_mode == MODE_PER_KERNEL:
            raw = mem.read(dma.base_addr, c * per).reshape(c, 1, 1, comps, size)
            raw = np.concatenate([raw, np.zeros((lanes - c, 1, 1, comps, size), np.uint8)])
        else:
            epg = target.epa(proc)
            groups = -(-lanes // epg)
            line = w * epg * per
            if h > 1 and dma.line_stride < line:
                raise DlaError(NvError.BadValue, f"SDP: {name}_line_stride {dma.line_stride} is less than a "
                                                 f"line of operands ({line} bytes)")
            plane = (h - 1) * dma.line_stride + line
            if groups > 1 and dma.surface_stride < plane:
                raise DlaError(NvError.BadValue, f"SDP: {name}_surface_stride {dma.surface_stride} is less "
                                                 f"than a surface of operands ({plane} bytes)")
            block = read_block(mem, dma.base_addr, (groups, h), (dma.surface_stride, dma.line_stride), line)
            raw = block.reshape(groups, h, w, epg, comps, size).transpose(0, 3, 1, 2, 4, 5)
            raw = raw.reshape(groups * epg, h, w, comps, size)[:lanes]
    vals = (raw[..., 0].astype(np.int8).astype(np.int64) if size == 1
            else np.ascontiguousarray(raw).view("<i2")[..., 0].astype(np.int64))
    alu = vals[..., 0] if need.alu else np.zeros((1, 1, 1), np.int64)
    mul = vals[..., comps - 1] if need.mul else np.zeros((1, 1, 1), np.int64)
    return alu, mul


def execute(params: SdpParams, memory: NvdlaMemory, target: NvdlaTarget, *, sram: NvdlaMemory | None = None,
            flying_input: npt.NDArray[np.integer] | None = None) -> SdpResult:
    """Run one SDP operation (see the module's description)."""
    pin, proc, pout = _check(params, target)
    w, h, c = params.width + 1, params.height + 1, params.channel + 1
    batches = params.batch_number + 1
    out_lanes = -(-c // target.epa(pout)) * target.epa(pout)
    in_lanes = -(-c // target.epa(pin)) * target.epa(pin)
    lanes = max(out_lanes, in_lanes)
    data = _input(params, pin, proc, lanes, batches, memory, sram, target, flying_input)

    ops = {}
    for stage, dma_name in (("bs", "brdma"), ("bn", "nrdma"), ("ew", "erdma")):
        need = _stage_needs(params, stage)
        if need.alu or need.mul:
            ops[stage] = _read_operands(params, getattr(params, dma_name), dma_name, need, lanes, proc,
                                        memory, sram, target)
    if proc is Precision.FP16:
        out, unequal = sdp_fp.datapath(data, params, ops, pout)
    else:
        out, unequal = _int_datapath(data, params, ops, pout)

    if not params.ew.bypass and not params.ew.alu_bypass and params.ew.alu_algo == ALU_EQL:
        return SdpResult(unequal=unequal)  # the "equal" mode writes no output
    out = out[:, :out_lanes]
    if params.output_dst == DST_PDP:
        return SdpResult(to_pdp=out[0])
    cube = surface.Cube(params.dst_base_addr, w, h, c, params.dst_line_stride, params.dst_surface_stride,
                        pout, batch=batches, batch_stride=params.dst_batch_stride)
    dst = select(memory, sram, params.dst_ram_type, "SDP dst")
    surface.scatter_batches(dst, cube, target, out, "SDP dst")
    return SdpResult()


def _input(p: SdpParams, pin: Precision, proc: Precision, lanes: int, batches: int, memory: NvdlaMemory,
           sram: NvdlaMemory | None, target: NvdlaTarget, flying: npt.NDArray[np.integer] | None) -> I64:
    """(batch, lanes, H, W) int64: 32-bit integers, or FP32 bit patterns for FP16 processing."""
    w, h, c = p.width + 1, p.height + 1, p.channel + 1
    if p.flying_mode:
        if flying is None:
            raise DlaError(NvError.BadParameter, "SDP: flying_mode 1 (input from the convolution) but no "
                                                 "input was given")
        arr = np.asarray(flying)
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[0] != batches or arr.shape[1] < c or arr.shape[2:] != (h, w):
            raise DlaError(NvError.BadParameter, f"SDP: the input on the fly has shape {arr.shape}, the "
                                                 f"cube needs ({batches}, >= {c}, {h}, {w})")
        if arr.dtype == np.int32 and proc is not Precision.FP16:
            vals = arr  # 32-bit integers as they are (kept narrow: the data path widens them per block)
        else:
            vals = wrap(arr.astype(np.int64), 32)
            if proc is Precision.FP16:
                vals = vals & 0xFFFFFFFF
    else:
        if flying is not None:
            raise DlaError(NvError.BadParameter, "SDP: an input on the fly was given but flying_mode is 0")
        cube = surface.Cube(p.src_base_addr, w, h, c, p.src_line_stride, p.src_surface_stride, pin)
        el = surface.gather(select(memory, sram, p.src_ram_type, "SDP src"), cube, target, "SDP src",
                            lanes=True)
        # SDP_RDMA hands 16-bit values to the data path (INT8 sign-extended); FP16 processing
        # widens them to FP32, integer processing to int32.
        v16 = np.asarray(el if pin is Precision.INT8 else el.view("<i2"), dtype=np.int64)
        vals = sdp_fp.fp16_to_fp32(v16 & 0xFFFF)[None] if proc is Precision.FP16 else v16[None]
    if vals.shape[1] < lanes:
        pad = np.zeros((vals.shape[0], lanes - vals.shape[1], h, w), vals.dtype)
        vals = np.concatenate([vals, pad], axis=1)
    out: I64 = vals[:, :lanes]
    return out


def _int_datapath(data: I64, p: SdpParams, ops: dict[str, tuple[I64, I64]], pout: Precision, *,
                  fused: bool = True) -> tuple[npt.NDArray[np.generic], bool]:
    """The integer data path: sdp_fused's passes where they apply (``fused``), else stage by stage."""
    def operands(stage: str, alu_reg: int, mul_reg: int) -> tuple[I64, I64]:
        mem = ops.get(stage)
        need = _stage_needs(p, stage)
        alu = mem[0] if mem is not None and need.alu else np.asarray(sign_extend(alu_reg, 16), dtype=np.int64)
        mul = mem[1] if mem is not None and need.mul else np.asarray(sign_extend(mul_reg, 16), dtype=np.int64)
        return alu, mul

    x_ops = {"bs": operands("bs", p.bs.alu_operand, p.bs.mul_operand),
             "bn": operands("bn", p.bn.alu_operand, p.bn.mul_operand)}
    if fused and sdp_fused.fusable(p, pout):
        return sdp_fused.datapath(data, p, x_ops, pout), False
    x = np.asarray(data, dtype=np.int64)
    x = sdp_int.x_stage(x, *x_ops["bs"], p.bs)
    x = sdp_int.x_stage(x, *x_ops["bn"], p.bn)
    unequal = False
    if not p.ew.bypass:
        a16, m16 = ops.get("ew", (np.zeros(1, np.int64), np.zeros(1, np.int64)))
        ya, ym = sdp_int.y_operands(a16, m16, p.ew)
        x = sdp_int.y_core(x, ya, ym, p.ew)
        if not p.ew.lut_bypass:
            x = lut_int(x, p.lut)
        if not p.ew.alu_bypass and p.ew.alu_algo == ALU_EQL:
            # the converter passes the value through; the SDP checks its low 16 bits
            unequal = bool(np.any(wrap(x, 16) != 0))
    t = sdp_int.c_convert(x, p.cvt_offset, p.cvt_scale, p.cvt_shift)
    if pout is Precision.FP16:
        return sdp_fp.int17_to_fp16(t).astype(np.uint16), unequal
    return saturate(t, 8 * pout.bpe).astype(pout.dtype), unequal
