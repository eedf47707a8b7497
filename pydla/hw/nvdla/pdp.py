"""PDP: NVDLA's planar pooling (max, min, average) as nvdla/hw ``cmod/pdp/NV_NVDLA_pdp.cpp`` computes.

Per channel, over kernel windows of ``kernel_width x kernel_height`` at the kernel strides, on the
input padded by ``pad_left/right/top/bottom`` (each smaller than the kernel):

- MAX / MIN take the extreme of the input elements in the window; padded positions do not take
  part (the padding values matter to the average only).
- AVERAGE sums the window in a wider integer (INT8 in 16 bits, INT16 in 32 bits, wrapping as the C
  model's ``int16_t`` / ``int32_t`` line buffers do): the inputs, plus for each input row of the
  window ``PAD_VALUE_<n>X`` for its ``n`` padded columns, plus for the ``n`` padded rows
  ``PAD_VALUE_<n>X · kernel_width``. The sum is then scaled by ``RECIP_KERNEL_WIDTH`` and
  ``RECIP_KERNEL_HEIGHT`` (16 fractional bits) with a round half away from zero after each
  multiplication, and stored by truncation to the element width (the C model's cast).
- FP16 computes in NVDLA's FP17 (pydla.hw.nvdla.pdp_fp16).

Split width (``split_num > 0``) pools vertical strips one after the other exactly as the hardware
does: strip ``i > 0`` starts ``kernel_width - kernel_stride_width`` columns before the end of the
previous one, only the first strip is left-padded and only the last right-padded, and strip ``i``
writes its ``partial_width_out`` columns after the previous strips'. The partial widths must add
up to the cube's.

Register fields keep their hardware encoding (sizes, kernel sizes, strides and partial widths hold
value - 1; the descriptor's split count - 1 is ``split_num``).

Usage::

    p = PdpParams(cube_in_width=7, cube_in_height=7, cube_in_channel=31, ..., pooling_method=1)
    execute(p, mem, NV_FULL)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.nvdla import surface
from pydla.hw.nvdla.intmath import I64, shift_right_round, wrap
from pydla.hw.nvdla.memory import RAM_MC, NvdlaMemory, select
from pydla.hw.nvdla.pdp_fp16 import pool_fp16
from pydla.hw.nvdla.precision import Precision, precision
from pydla.hw.nvdla.target import NvdlaTarget

AVERAGE, MAX, MIN = 0, 1, 2
ON_FLYING, OFF_FLYING = 0, 1  # D_OPERATION_MODE_CFG.FLYING_MODE: the input comes from the SDP, or memory
MAX_SPLIT = 64  # NVDLA's firmware limit on strips


@dataclass(frozen=True)
class PdpParams:
    """The PDP's registers (and PDP_RDMA's source address); byte addresses and strides."""

    cube_in_width: int  # D_DATA_CUBE_IN_WIDTH: width - 1
    cube_in_height: int
    cube_in_channel: int
    cube_out_width: int  # D_DATA_CUBE_OUT_WIDTH: width - 1
    cube_out_height: int
    cube_out_channel: int
    pooling_method: int  # D_OPERATION_MODE_CFG: 0 average, 1 max, 2 min
    kernel_width: int  # D_POOLING_KERNEL_CFG: size - 1 (0..7)
    kernel_height: int
    kernel_stride_width: int  # stride - 1 (0..15)
    kernel_stride_height: int
    pad_left: int  # D_POOLING_PADDING_CFG (0..7)
    pad_top: int
    pad_right: int
    pad_bottom: int
    input_data: int  # D_DATA_FORMAT.INPUT_DATA: 0 INT8, 1 INT16, 2 FP16
    src_base_addr: int  # PDP_RDMA D_SRC_BASE_ADDR_HIGH/LOW (unused on the fly)
    src_line_stride: int
    src_surface_stride: int
    dst_base_addr: int
    dst_line_stride: int
    dst_surface_stride: int
    recip_kernel_width: int = 0x10000  # D_RECIP_KERNEL_WIDTH: 1/k, 16 fractional bits (FP17 for FP16)
    recip_kernel_height: int = 0x10000
    pad_value_1x: int = 0  # D_POOLING_PADDING_VALUE_<n>_CFG.PAD_VALUE_<n>X: the value of n padded
    pad_value_2x: int = 0  # elements (19-bit fields, sign-extended from the element's width)
    pad_value_3x: int = 0
    pad_value_4x: int = 0
    pad_value_5x: int = 0
    pad_value_6x: int = 0
    pad_value_7x: int = 0
    flying_mode: int = OFF_FLYING
    split_num: int = 0  # strips - 1
    partial_width_in_first: int = 0  # D_PARTIAL_WIDTH_IN (width - 1 each)
    partial_width_in_mid: int = 0
    partial_width_in_last: int = 0
    partial_width_out_first: int = 0  # D_PARTIAL_WIDTH_OUT
    partial_width_out_mid: int = 0
    partial_width_out_last: int = 0
    nan_to_zero: int = 0  # D_NAN_FLUSH_TO_ZERO: FP16 NaN inputs read from memory become 0
    src_ram_type: int = RAM_MC
    dst_ram_type: int = RAM_MC

    @property
    def pad_values(self) -> tuple[int, ...]:
        return (self.pad_value_1x, self.pad_value_2x, self.pad_value_3x, self.pad_value_4x,
                self.pad_value_5x, self.pad_value_6x, self.pad_value_7x)


@dataclass(frozen=True)
class Strip:
    """One strip of a (possibly split) pooling: input columns, paddings, output columns."""

    in_start: int
    in_width: int
    pad_left: int
    pad_right: int
    out_start: int
    out_width: int


_FIELDS = (("cube_in_width", 0x1FFF), ("cube_in_height", 0x1FFF), ("cube_in_channel", 0x1FFF),
           ("cube_out_width", 0x1FFF), ("cube_out_height", 0x1FFF), ("cube_out_channel", 0x1FFF),
           ("kernel_width", 7), ("kernel_height", 7), ("kernel_stride_width", 15),
           ("kernel_stride_height", 15), ("pad_left", 7), ("pad_top", 7), ("pad_right", 7), ("pad_bottom", 7),
           ("recip_kernel_width", 0x1FFFF), ("recip_kernel_height", 0x1FFFF), ("split_num", 0xFF),
           ("partial_width_in_first", 0x3FF), ("partial_width_in_mid", 0x3FF),
           ("partial_width_in_last", 0x3FF), ("partial_width_out_first", 0x3FF),
           ("partial_width_out_mid", 0x3FF), ("partial_width_out_last", 0x3FF),
           *((f"pad_value_{n}x", 0x7FFFF) for n in range(1, 8)))


def out_size(size: int, pad_a: int, pad_b: int, kernel: int, stride: int) -> int:
    """Windows that fit in ``size`` elements padded by ``pad_a`` and ``pad_b``."""
    return (size + pad_a + pad_b - kernel) // stride + 1


@functools.lru_cache(maxsize=256)  # the same registers at every run: checked once (a refusal raises again)
def _check(p: PdpParams) -> None:
    for name, top in _FIELDS:
        v = getattr(p, name)
        if not 0 <= v <= top:
            raise DlaError(NvError.BadValue, f"PDP: {name} {v} is outside its field (0..{top})")
    if p.pooling_method not in (AVERAGE, MAX, MIN):
        raise DlaError(NvError.BadValue, f"PDP: pooling_method {p.pooling_method} is not average (0), "
                                         "max (1) or min (2)")
    if p.flying_mode not in (ON_FLYING, OFF_FLYING):
        raise DlaError(NvError.BadValue, f"PDP: flying_mode {p.flying_mode} is neither 0 nor 1")
    kw, kh = p.kernel_width + 1, p.kernel_height + 1
    # A window wholly inside the padding has no input element: the C model never completes it.
    for name, pad, k in (("pad_left", p.pad_left, kw), ("pad_right", p.pad_right, kw),
                         ("pad_top", p.pad_top, kh), ("pad_bottom", p.pad_bottom, kh)):
        if pad >= k:
            raise DlaError(NvError.BadValue, f"PDP: {name} {pad} is not smaller than the kernel ({k})")
    if p.cube_out_channel != p.cube_in_channel:
        raise DlaError(NvError.BadValue, f"PDP: cube_out_channel {p.cube_out_channel} differs from "
                                         f"cube_in_channel {p.cube_in_channel} (pooling keeps the channels)")
    h_out = out_size(p.cube_in_height + 1, p.pad_top, p.pad_bottom, kh, p.kernel_stride_height + 1)
    if h_out != p.cube_out_height + 1:
        raise DlaError(NvError.BadValue, f"PDP: cube_out_height {p.cube_out_height} is not the pooled "
                                         f"height - 1 ({h_out - 1})")
    if p.flying_mode == ON_FLYING and p.split_num:
        raise DlaError(NvError.BadValue, f"PDP: split_num {p.split_num} with input on the fly (needs 0)")


def strips(p: PdpParams) -> list[Strip]:
    """The strips the hardware pools, checked against the cube (one strip unless split)."""
    w_in, w_out = p.cube_in_width + 1, p.cube_out_width + 1
    kw, sw = p.kernel_width + 1, p.kernel_stride_width + 1
    if p.split_num == 0:
        plan = [Strip(0, w_in, p.pad_left, p.pad_right, 0, w_out)]
    else:
        n = p.split_num + 1
        if n > MAX_SPLIT:
            raise DlaError(NvError.BadValue, f"PDP: split_num {p.split_num}: more than {MAX_SPLIT} strips")
        first_in, mid_in, last_in = (p.partial_width_in_first + 1, p.partial_width_in_mid + 1,
                                     p.partial_width_in_last + 1)
        first_out, mid_out, last_out = (p.partial_width_out_first + 1, p.partial_width_out_mid + 1,
                                        p.partial_width_out_last + 1)
        overlap = kw - sw  # strips after the first re-read the columns the next window needs
        plan = [Strip(0, first_in, p.pad_left, 0, 0, first_out)]
        for i in range(1, n):
            last = i == n - 1
            plan.append(Strip(first_in + (i - 1) * mid_in - overlap, (last_in if last else mid_in) + overlap,
                              0, p.pad_right if last else 0, first_out + (i - 1) * mid_out,
                              last_out if last else mid_out))
        if first_in + (n - 2) * mid_in + last_in != w_in or first_out + (n - 2) * mid_out + last_out != w_out:
            raise DlaError(NvError.BadValue, f"PDP: partial widths of {n} strips do not add up to "
                                             f"cube_in_width + 1 = {w_in} and cube_out_width + 1 = {w_out}")
    for i, s in enumerate(plan):
        if s.in_start < 0 or s.in_width < 1 or s.in_start + s.in_width > w_in:
            raise DlaError(NvError.BadValue, f"PDP: strip {i} reads input columns {s.in_start}.."
                                             f"{s.in_start + s.in_width - 1}, outside 0..{w_in - 1}")
        got = out_size(s.in_width, s.pad_left, s.pad_right, kw, sw)
        if got != s.out_width:
            raise DlaError(NvError.BadValue, f"PDP: strip {i} pools {s.in_width} columns into {got}, its "
                                             f"output width says {s.out_width} (cube_out_width / partial "
                                             "widths)")
    return plan


def _pad_value(p: PdpParams, prec: Precision) -> list[int]:
    """The seven padding values as the C model's sign extension reads them (it fills the bits above
    the element's sign bit with it, keeps the bits the field has there, and keeps the low 16 bits for
    INT8, 32 for INT16)."""
    sign_bits = (7, 8, 9, 9, 10, 10, 10) if prec is Precision.INT8 else (15, 16, 17, 17, 18, 18, 18)
    width = 16 if prec is Precision.INT8 else 32
    out = []
    for v, b in zip(p.pad_values, sign_bits, strict=True):
        if (v >> b) & 1:
            v |= -(1 << (b + 1))
        out.append(int(wrap(v, width)))
    return out


def _window_reduce(x: I64, axis: int, kernel: int, stride: int, pad_a: int, pad_b: int, fill: int,
                   op: str) -> I64:
    """Reduce windows along ``axis`` of ``x`` padded with ``fill``: "sum", "max" or "min"."""
    n_out = out_size(x.shape[axis], pad_a, pad_b, kernel, stride)
    if kernel == 1 and stride == 1 and not pad_a and not pad_b:
        return x  # every window is one element
    xp = x
    if pad_a or pad_b:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (pad_a, pad_b)
        xp = np.pad(x, widths, constant_values=fill)
    span = (n_out - 1) * stride + 1
    head = (slice(None),) * axis
    acc: I64 | None = None
    for k in range(kernel):
        window = (*head, slice(k, k + span, stride))
        part = xp[window]
        if acc is None:
            acc = part.copy()
        elif op == "sum":
            acc += part
        elif op == "max":
            np.maximum(acc, part, out=acc)
        else:
            np.minimum(acc, part, out=acc)
    assert acc is not None
    return acc


def _valid_counts(size: int, pad_a: int, kernel: int, stride: int, n_out: int) -> npt.NDArray[np.int64]:
    """Input elements inside each window along one axis."""
    start = np.arange(n_out, dtype=np.int64) * stride - pad_a
    return np.minimum(start + kernel, size) - np.maximum(start, 0)


def pool_int(x: npt.NDArray[np.generic], p: PdpParams, prec: Precision, pad_l: int, pad_r: int) -> I64:
    """Pool one strip of integer data (C, H, W) as the C model does; int64 results in element range."""
    kw, kh = p.kernel_width + 1, p.kernel_height + 1
    sw, sh = p.kernel_stride_width + 1, p.kernel_stride_height + 1
    v = x.astype(np.int64)
    if p.pooling_method in (MAX, MIN):
        op = "max" if p.pooling_method == MAX else "min"
        fill = -(1 << 62) if op == "max" else 1 << 62
        rows = _window_reduce(v, 2, kw, sw, pad_l, pad_r, fill, op)
        return _window_reduce(rows, 1, kh, sh, p.pad_top, p.pad_bottom, fill, op)
    rows = _window_reduce(v, 2, kw, sw, pad_l, pad_r, 0, "sum")
    total = _window_reduce(rows, 1, kh, sh, p.pad_top, p.pad_bottom, 0, "sum")
    pads = [0, *_pad_value(p, prec)]  # pads[n]: the value of n padded elements
    _, h, w = v.shape
    valid_w = _valid_counts(w, pad_l, kw, sw, total.shape[2])
    valid_h = _valid_counts(h, p.pad_top, kh, sh, total.shape[1])
    pad_row = np.take(pads, kw - valid_w)  # added once per input row of the window
    pad_rows = np.take(pads, kh - valid_h) * kw  # the padded rows
    total = total + pad_row[None, None, :] * valid_h[None, :, None] + pad_rows[None, :, None]
    acc_bits = 16 if prec is Precision.INT8 else 32
    total = wrap(total, acc_bits)
    # (double)sum * recip / 65536, rounded half away from zero into an int32 (x86 turns what does not
    # fit into INT32_MIN), twice; then the cast to the element type.
    first = _to_int32(shift_right_round(total * p.recip_kernel_width, 16))
    second = _to_int32(shift_right_round(first * p.recip_kernel_height, 16))
    return wrap(second, 8 * prec.bpe)


def _to_int32(v: I64) -> I64:
    out: I64 = np.where((v < -(1 << 31)) | (v >= 1 << 31), -(1 << 31), v).astype(np.int64)
    return out


def execute(params: PdpParams, memory: NvdlaMemory, target: NvdlaTarget, *, sram: NvdlaMemory | None = None,
            flying_input: npt.NDArray[np.generic] | None = None) -> None:
    """Run one pooling: from memory (``flying_mode`` 1) or from ``flying_input`` (the SDP's output on
    the fly, elements (C, H, W) with whole surfaces) to memory."""
    _check(params)
    prec = precision(params.input_data, "PDP D_DATA_FORMAT.INPUT_DATA")
    target.require(prec, "PDP")
    plan = strips(params)
    w, h, c = params.cube_in_width + 1, params.cube_in_height + 1, params.cube_in_channel + 1
    src_cube = surface.Cube(params.src_base_addr, w, h, c, params.src_line_stride, params.src_surface_stride,
                            prec)
    if params.flying_mode == OFF_FLYING:
        data = surface.gather(select(memory, sram, params.src_ram_type, "PDP src"), src_cube, target,
                              "PDP src", lanes=True)
    else:
        data = _flying(flying_input, src_cube, target)
    out_w, out_h = params.cube_out_width + 1, params.cube_out_height + 1
    out = np.zeros((data.shape[0], out_h, out_w), dtype=prec.dtype)
    for s in plan:
        part = data[:, :, s.in_start:s.in_start + s.in_width]
        if prec is Precision.FP16:
            pooled = pool_fp16(part, params, s.pad_left, s.pad_right,
                               nan_to_zero=bool(params.nan_to_zero) and params.flying_mode == OFF_FLYING)
        else:
            pooled = pool_int(part, params, prec, s.pad_left, s.pad_right).astype(prec.dtype)
        out[:, :, s.out_start:s.out_start + s.out_width] = pooled
    dst_cube = surface.Cube(params.dst_base_addr, out_w, out_h, c, params.dst_line_stride,
                            params.dst_surface_stride, prec)
    surface.scatter(select(memory, sram, params.dst_ram_type, "PDP dst"), dst_cube, target, out, "PDP dst")


def _flying(data: npt.NDArray[np.generic] | None, cube: surface.Cube, target: NvdlaTarget
            ) -> npt.NDArray[np.generic]:
    lanes = cube.lanes(target)
    if data is None:
        raise DlaError(NvError.BadParameter, "PDP: flying_mode 0 (input on the fly) but no input was given")
    if data.shape != (lanes, cube.height, cube.width) or data.dtype != cube.precision.dtype:
        need = (lanes, cube.height, cube.width)
        raise DlaError(NvError.BadParameter, f"PDP: the input on the fly is {data.dtype}{data.shape}, "
                                             f"the cube needs {cube.precision.dtype}{need}")
    return data
