"""CDP: NVDLA's cross-channel data processor (local response normalisation), one operation from its
registers, bit for bit as nvdla/hw ``cmod/cdp/NV_NVDLA_cdp.cpp`` and ``cmod/hls/cdp_libs`` compute it.

Per element at channel c, for a window of ``2·normalz_len + 3`` channels centred on c:

1. Input converter (INT): ``xi = sat(round((x - DATIN_OFFSET)·DATIN_SCALE / 2^DATIN_SHIFTER))``, rounded
   half away from zero, to 17 bits (INT16; offset 16 bits) or 9 bits (INT8; the offset's low byte).
   Channels outside the cube (either side, and the unused lanes of the last surface) enter as the raw
   ``DATIN_OFFSET``, i.e. as 0 after conversion.
2. The sum of the window's squares (exact), or ``xi`` itself with ``sqsum_bypass``.
3. The LUT (pydla.hw.nvdla.cdp_lut): a 16-bit answer r.
4. ``y = r·xi`` (``mul_bypass``: y = r).
5. Output converter: ``sat(round((y - DATOUT_OFFSET)·DATOUT_SCALE / 2^DATOUT_SHIFTER))`` to 16 bits
   (INT16; a 32-bit offset) or 8 bits (INT8; the offset's low 25 bits); the saturations are counted.

FP16 runs its own path in NVDLA's float (pydla.hw.nvdla.cdp_fp16). The CDP writes whole atoms: the
unused lanes of the last surface hold what the data path computes for them.

Usage::

    result = execute(params, mem, NV_FULL)     # result.lut.uflow, result.saturations ...
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import surface
from pydla.hw.nvdla.cdp_fp16 import lrn_fp16
from pydla.hw.nvdla.cdp_lut import LutMemo, LutStats, lut_int
from pydla.hw.nvdla.cdp_params import LE_ENTRIES, LO_ENTRIES, CdpLut, CdpParams
from pydla.hw.nvdla.intmath import I64, saturate, shift_right_round, sign_extend
from pydla.hw.nvdla.memory import NvdlaMemory, select
from pydla.hw.nvdla.precision import Precision, precision
from pydla.hw.nvdla.target import NvdlaTarget

_FIELDS = dict(width=13, height=13, channel=13, src_base_addr=64, src_line_stride=32, src_surface_stride=32,
               src_ram_type=1, dst_base_addr=64, dst_line_stride=32, dst_surface_stride=32, dst_ram_type=1,
               input_data=2, normalz_len=2, sqsum_bypass=1, mul_bypass=1, datin_offset=16, datin_scale=16,
               datin_shifter=5, datout_offset=32, datout_scale=16, datout_shifter=6, nan_to_zero=1)
_SIGNED = {"datin_offset", "datin_scale", "datout_offset", "datout_scale"}
_LUT_FIELDS = dict(le_function=1, uflow_priority=1, oflow_priority=1, hybrid_priority=1, le_index_offset=8,
                   le_index_select=8, lo_index_select=8, le_start_low=32, le_start_high=6, le_end_low=32,
                   le_end_high=6, lo_start_low=32, lo_start_high=6, lo_end_low=32, lo_end_high=6,
                   le_slope_uflow_scale=16, le_slope_uflow_shift=5, le_slope_oflow_scale=16,
                   le_slope_oflow_shift=5, lo_slope_uflow_scale=16, lo_slope_uflow_shift=5,
                   lo_slope_oflow_scale=16, lo_slope_oflow_shift=5)
_LUT_SIGNED = {"le_index_offset", "le_index_select", "lo_index_select", "le_slope_uflow_scale",
               "le_slope_oflow_scale", "lo_slope_uflow_scale", "lo_slope_oflow_scale", "le_slope_uflow_shift",
               "le_slope_oflow_shift", "lo_slope_uflow_shift", "lo_slope_oflow_shift"}


@dataclass(frozen=True)
class CdpResult:
    """The CDP's statistics registers after an operation."""

    lut: LutStats  # D_PERF_LUT_UFLOW, _OFLOW, _HYBRID, _LE_HIT, _LO_HIT
    saturations: int = 0  # D_OUT_SATURATION
    nan_input: int = 0  # D_NAN_INPUT_NUM (FP16)
    inf_input: int = 0
    nan_output: int = 0  # D_NAN_OUTPUT_NUM


def _fits(v: object, bits: int, signed: bool) -> bool:
    low = -(1 << (bits - 1)) if signed else 0
    return isinstance(v, int) and low <= v < (1 << bits)


@functools.lru_cache(maxsize=256)  # the same registers at every run of a network: checked once (a refusal
def _check(p: CdpParams, target: NvdlaTarget) -> Precision:  # raises again, it is not kept)
    for f in fields(p):
        if f.name in _FIELDS and not _fits(getattr(p, f.name), _FIELDS[f.name], f.name in _SIGNED):
            raise DlaError(NvError.BadValue, f"CDP {f.name}: {getattr(p, f.name)!r} does not fit its "
                                             f"{_FIELDS[f.name]}-bit field")
    lut: CdpLut = p.lut
    for name, bits in _LUT_FIELDS.items():
        if not _fits(getattr(lut, name), bits, name in _LUT_SIGNED):
            raise DlaError(NvError.BadValue, f"CDP LUT {name}: {getattr(lut, name)!r} does not fit its "
                                             f"{bits}-bit field")
    for name, n in (("le_table", LE_ENTRIES), ("lo_table", LO_ENTRIES)):
        tab = getattr(lut, name)
        if len(tab) != n:
            raise DlaError(NvError.BadValue, f"CDP LUT {name}: {len(tab)} entries, the table has {n}")
        if not all(_fits(v, 16, True) or _fits(v, 16, False) for v in tab):
            raise DlaError(NvError.BadValue, f"CDP LUT {name}: an entry does not fit 16 bits")
    prec = precision(p.input_data, "CDP D_DATA_FORMAT.INPUT_DATA_TYPE")
    target.require(prec, "CDP")
    return prec


def _in_cvt(x: I64, p: CdpParams, prec: Precision) -> I64:
    scale = sign_extend(p.datin_scale, 16)
    if prec is Precision.INT8:
        return saturate(shift_right_round((x - sign_extend(p.datin_offset, 8)) * scale, p.datin_shifter), 9)
    return saturate(shift_right_round((x - sign_extend(p.datin_offset, 16)) * scale, p.datin_shifter), 17)


def _out_cvt(y: I64, p: CdpParams, prec: Precision) -> tuple[I64, int]:
    """The output converter and its saturation count (``IntShiftRightSat``: the floor of the shifted
    value more than 1 away from the result)."""
    bits, offset = (8, sign_extend(p.datout_offset, 25)) if prec is Precision.INT8 else \
        (16, sign_extend(p.datout_offset, 32))
    v = (y - offset) * sign_extend(p.datout_scale, 16)
    out = saturate(shift_right_round(v, p.datout_shifter), bits)
    floor = v >> p.datout_shifter
    return out, int(np.count_nonzero(np.abs(floor - out) > 1))


INT8_SUMS = (-256, 9 * 256 * 256)  # INT8 sums: 9 squares of the 9-bit converted input, or the input itself


@functools.lru_cache(maxsize=8)  # a network's LUTs; 5 MB each
def _memo(lut: CdpLut) -> LutMemo:
    return LutMemo(lut, 5, *INT8_SUMS)


def lrn_int(x: npt.NDArray[np.generic], channels: int, p: CdpParams, prec: Precision
            ) -> tuple[I64, LutStats, int]:
    """Output elements (lanes, H, W) for INT8/INT16 input elements (lanes, H, W); ``channels`` are real."""
    raw = np.asarray(x, dtype=np.int64)
    lanes = raw.shape[0]
    xi = np.where(np.arange(lanes)[:, None, None] < channels, _in_cvt(raw, p, prec), 0)
    if p.sqsum_bypass:
        s = xi
    else:
        half = p.normalz_len + 1
        sq = np.zeros((lanes + 2 * half, *raw.shape[1:]), dtype=np.int64)
        sq[half:half + lanes] = xi * xi
        s = sq[0:lanes].copy()
        for k in range(1, 2 * half + 1):
            s += sq[k:k + lanes]
    sums = np.asarray(s, dtype=np.int64)
    if prec is Precision.INT8 and sums.size and INT8_SUMS[0] <= sums.min() and sums.max() <= INT8_SUMS[1]:
        r, stats = _memo(p.lut)(sums)
    else:
        r, stats = lut_int(sums, p.lut, 5 if prec is Precision.INT8 else 6)
    y = r if p.mul_bypass else r * xi
    out, saturated = _out_cvt(y, p, prec)
    return out, stats, saturated


def execute(params: CdpParams, memory: NvdlaMemory, target: NvdlaTarget, *,
            sram: NvdlaMemory | None = None) -> CdpResult:
    """Run one LRN from memory to memory (see the module's description)."""
    prec = _check(params, target)
    w, h, c = params.width + 1, params.height + 1, params.channel + 1
    src = surface.Cube(params.src_base_addr, w, h, c, params.src_line_stride, params.src_surface_stride, prec)
    dst = surface.Cube(params.dst_base_addr, w, h, c, params.dst_line_stride, params.dst_surface_stride, prec)
    surface.check(dst, target, "CDP dst")
    x = surface.gather(select(memory, sram, params.src_ram_type, "CDP src"), src, target, "CDP src",
                       lanes=True)
    if prec is Precision.FP16:
        b = x.astype(np.int64)
        top = ((b >> 10) & 31) == 31
        nan_in, inf_in = int((top & ((b & 0x3FF) != 0)).sum()), int((top & ((b & 0x3FF) == 0)).sum())
        out, stats = lrn_fp16(x, c, params)
        nan_out = int(((((out >> 10) & 31) == 31) & ((out & 0x3FF) != 0)).sum())
        result = CdpResult(lut=stats, nan_input=nan_in, inf_input=inf_in, nan_output=nan_out)
    else:
        out, stats, saturated = lrn_int(x, c, params, prec)
        result = CdpResult(lut=stats, saturations=saturated)
    surface.scatter(select(memory, sram, params.dst_ram_type, "CDP dst"), dst, target, out.astype(prec.dtype),
                    "CDP dst")
    return result
