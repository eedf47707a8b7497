"""A pure-integer numpy model of an INT8 NVDLA program (:mod:`pydla.compiler.nvdla.plan`), written from
NVIDIA's documented arithmetic (docs/development/nvdla/arithmetic.md), independently of pydla's
device: CONV sums exactly (saturated to 32 bits after CACC's truncation 0), the SDP's X stages
(operand shifted left with saturation, 33-bit sum, multiply, rounding right shift with round half
away from zero and saturation to 32 bits, ReLU), its output converter (17-bit then 8-bit saturation),
the PDP's maximum and its average (line-buffer sum, two 16-bit reciprocal multiplications, each
rounded half away, cast to 8 bits). The device's results must equal these bit for bit.

Usage::

    outputs = run_reference(plan, {"x": x_int8})      # {"y": int8 (C, H, W)}
    every = reference_buffers(plan, {"x": x_int8})    # every buffer, scratch ones too
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.compiler.nvdla.plan import Alu, ConvOp, Cvt, PdpOp, Plan, Ref, SdpOp, SoftmaxOp, Stage
from pydla.errors import DlaError, NvError

I64 = npt.NDArray[np.int64]
RECIPROCALS = (0x10000, 0x8000, 0x5555, 0x4000, 0x3333, 0x2AAA, 0x2492, 0x2000)  # 1/k, 16 bits


def saturate(x: I64, bits: int) -> I64:
    out: I64 = np.clip(x, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return out


def round_shift(x: I64, shift: int) -> I64:
    """``round_half_away(x / 2**shift)`` in integers."""
    if shift == 0:
        return x
    half = np.int64(1) << np.int64(shift - 1)
    mag = (np.abs(x) + half) >> np.int64(shift)
    return np.where(x < 0, -mag, mag)  # type: ignore[no-any-return]


def round_shift_sat(x: Any, shift: int, bits: int) -> I64:
    """Round-half-away right shift then saturation, exact for any Python/numpy integers (object
    arrays where int64 could overflow)."""
    arr = np.asarray(x)
    if arr.dtype == object:
        half = (1 << (shift - 1)) if shift else 0
        mag = (abs(arr) + half) >> shift  # type: ignore[operator]
        out = np.where(arr < 0, -mag, mag)
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return np.clip(out, lo, hi).astype(np.int64)  # type: ignore[no-any-return]
    return saturate(round_shift(arr.astype(np.int64), shift), bits)


def _view(buffers: Mapping[str, npt.NDArray[Any]], ref: Ref) -> I64:
    a = buffers[ref.buffer]
    end = a.shape[0] if ref.channels is None else ref.c0 + ref.channels
    return a[ref.c0 : end].astype(np.int64)


def conv_sums(x: I64, op: ConvOp) -> I64:
    """The convolution's 32-bit sums (CACC truncation 0), exact."""
    w = op.weights.astype(np.int64)
    _k, c, r, s = w.shape
    left, right, top, bottom = op.pads
    pad = np.int64(np.int8(op.pad_value))
    xp = np.full((c, x.shape[1] + top + bottom, x.shape[2] + left + right), pad, np.int64)
    xp[:, top : top + x.shape[1], left : left + x.shape[2]] = x
    (sx, sy), (dx, dy) = op.stride, op.dilation
    oh = (xp.shape[1] - ((r - 1) * dy + 1)) // sy + 1
    ow = (xp.shape[2] - ((s - 1) * dx + 1)) // sx + 1
    cols = np.empty((c, r, s, oh, ow), np.float32)
    for i in range(r):
        for j in range(s):
            cols[:, i, j] = xp[
                :, i * dy : i * dy + (oh - 1) * sy + 1 : sy, j * dx : j * dx + (ow - 1) * sx + 1 : sx
            ]
    return saturate(_sums(w, cols.reshape(c, r * s, oh * ow)).reshape(-1, oh, ow), 32)


def _sums(w: I64, cols: npt.NDArray[np.float32]) -> I64:
    """``sum over (c, tap) of w[k, c, tap] * cols[c, tap, p]``, exact: in float32 over at most 1024
    products of two int8 values at a time (each sum within 2**24, where float32 holds every integer),
    added up in int64; the rows of a block-diagonal (grouped) kernel only over their own channels."""
    k, c = w.shape[:2]
    taps = cols.shape[1]
    wf = w.reshape(k, c, taps).astype(np.float32)
    acc = np.zeros((k, cols.shape[2]), np.int64)
    used = np.any(w.reshape(k, c, taps) != 0, axis=2)  # (k, c)
    blocks = [(np.arange(k), np.arange(c))]
    if used.mean() < 0.25:  # grouped: rows in blocks of 8, each over the channels it uses
        blocks = [(np.arange(r0, min(r0 + 8, k)), np.flatnonzero(used[r0 : r0 + 8].any(axis=0)))
                  for r0 in range(0, k, 8)]
    step = max(1, 1024 // taps)
    for rows, channels in blocks:
        for c0 in range(0, len(channels), step):
            ch = channels[c0 : c0 + step]
            part = wf[rows[:, None], ch[None, :]].reshape(len(rows), -1) @ cols[ch].reshape(-1, cols.shape[2])
            acc[rows] += part.astype(np.int64)
    return acc


def _operand(buffers: Mapping[str, npt.NDArray[Any]], v: Any) -> I64:
    if isinstance(v, Ref):
        return _view(buffers, v)
    if isinstance(v, np.ndarray):
        return v.astype(np.int64)[:, None, None]
    return np.asarray(int(v), np.int64)


def x_stage(data: I64, st: Stage, buffers: Mapping[str, npt.NDArray[Any]]) -> I64:
    """One X stage: every intermediate fits int64 (a 33-bit sum times a 16-bit operand: 49 bits)."""
    out = data
    if st.alu is not None:
        op = saturate(_operand(buffers, st.alu.operand) << np.int64(st.alu.shift), 32)
        out = _alu(st.alu, out, op)
    if st.mul is not None:
        out = out * _operand(buffers, st.mul)
    res = round_shift_sat(out, st.truncate, 32)
    return np.maximum(res, 0) if st.relu else res


def _alu(alu: Alu, x: Any, op: I64) -> Any:
    if alu.algo == "max":
        return np.maximum(x, op)
    if alu.algo == "min":
        return np.minimum(x, op)
    return x + op


def convert(x: I64, cvt: Cvt) -> I64:
    t = round_shift_sat((x - np.int64(cvt.offset)) * np.int64(cvt.scale), cvt.shift, 17)  # 49 bits
    return saturate(t, 8)


def sdp(data: I64, op: SdpOp, buffers: Mapping[str, npt.NDArray[Any]]) -> I64:
    for st in (op.x1, op.x2):
        if st is not None:
            data = x_stage(data, st, buffers)
    return convert(data, op.cvt)


def pdp(x: I64, op: PdpOp) -> I64:
    kw, kh = op.kernel
    (sx, sy), (left, right, top, bottom) = op.stride, op.pads
    c, h, w = x.shape
    oh, ow = (h + top + bottom - kh) // sy + 1, (w + left + right - kw) // sx + 1
    out = np.empty((c, oh, ow), np.int64)
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * sy - top, ox * sx - left
            ys, xs = slice(max(y0, 0), min(y0 + kh, h)), slice(max(x0, 0), min(x0 + kw, w))
            win = x[:, ys, xs]
            if op.mode == "max":
                out[:, oy, ox] = win.max(axis=(1, 2))
                continue
            padded = kh * kw - win.shape[1] * win.shape[2]
            total = win.sum(axis=(1, 2)) + padded * op.pad_value
            total = ((total + (1 << 15)) % (1 << 16)) - (1 << 15)  # the int16 line buffer wraps
            v = round_shift(total * RECIPROCALS[kw - 1], 16)
            v = round_shift(v * RECIPROCALS[kh - 1], 16)
            out[:, oy, ox] = ((v + 128) % 256) - 128  # cast to the element type
    return out


def _half(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """float32 -> half -> float32, rounding to nearest with ties away from zero (the emulator's
    half_float; numpy rounds ties to even)."""
    x = np.asarray(x, np.float32)
    h = x.astype(np.float16)
    away = np.nextafter(h, np.where(x < 0, np.float16(-np.inf), np.float16(np.inf)).astype(np.float16))
    hf, af = h.astype(np.float32), away.astype(np.float32)
    tie = (np.abs(af - x) == np.abs(hf - x)) & (np.abs(af) > np.abs(hf)) & (x != hf)
    return np.where(tie, af, hf).astype(np.float32)


def softmax_emulated(q: npt.NDArray[Any], in_scale: float, out_scale: float) -> npt.NDArray[np.int8]:
    """NVIDIA's emulator's INT8 softmax of a vector (see SoftmaxOp)."""
    scaled = _half(q.astype(np.float32) * np.float32(in_scale))
    with np.errstate(all="ignore"):
        e = np.exp((scaled - scaled.max()).astype(np.float64)).astype(np.float32)
        total = np.add.accumulate(e, dtype=np.float32)[-1]
        p = _half((e / total).astype(np.float32))
        y = np.clip(p / np.float32(out_scale), -128, 127)
    out: npt.NDArray[np.int8] = np.trunc(y).astype(np.int8)
    return out


def run_reference(plan: Plan, inputs: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[np.int8]]:
    """Every output buffer of ``plan`` computed from ``inputs`` (int8 (C, H, W) by input name)."""
    buffers = reference_buffers(plan, inputs)
    return {b.name: buffers[b.name] for b in plan.role("output")}


def reference_buffers(
    plan: Plan, inputs: Mapping[str, npt.NDArray[Any]], given: Mapping[str, npt.NDArray[Any]] | None = None
) -> dict[str, npt.NDArray[np.int8]]:
    """Every buffer of ``plan`` (int8 (C, H, W) by name) after a run from ``inputs``. With ``given``
    (buffers by name, e.g. another implementation's results), each operation reads the given buffers
    in place of the computed ones: what each operation alone makes of the same inputs, e.g.
    ``reference_buffers(plan, x, given=theirs)["y"] - theirs["y"]`` is the convolution's own error."""
    buffers: dict[str, npt.NDArray[Any]] = {}
    for name, b in plan.buffers.items():
        if b.role == "input":
            if name not in inputs or tuple(inputs[name].shape) != b.shape:
                raise DlaError(NvError.BadParameter, f"reference: input '{name}' must be int8 {b.shape}")
            buffers[name] = np.asarray(inputs[name]).astype(np.int8)
        else:
            buffers[name] = np.zeros(b.shape, np.int8)
    read = buffers
    if given:
        read = dict(buffers)
        for name, value in given.items():
            if name not in plan.buffers or tuple(np.shape(value)) != plan.buffers[name].shape:
                raise DlaError(NvError.BadParameter,
                               f"reference: given buffer '{name}' is not one of the plan's with its shape")
            read[name] = np.asarray(value).astype(np.int8)
    for op in plan.ops:
        if isinstance(op, ConvOp):
            y = sdp(conv_sums(_view(read, op.src), op), op.sdp, read)
            dst = op.sdp.dst
        elif isinstance(op, SdpOp):
            assert op.src is not None
            y, dst = sdp(_view(read, op.src), op, read), op.dst
        elif isinstance(op, SoftmaxOp):
            v = _view(read, op.src)
            probabilities = softmax_emulated(v.ravel(), op.in_scale, op.out_scale)
            y, dst = probabilities.astype(np.int64).reshape(v.shape), op.dst
        else:
            y, dst = pdp(_view(read, op.src), op), op.dst
        buffers[dst.buffer][dst.c0 : dst.c0 + y.shape[0]] = y.astype(np.int8)
    return {name: value.copy() for name, value in buffers.items()}
