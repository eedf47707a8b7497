"""The numerical kernels of the virtual device's functional blocks (CONV, SDP, PDP, CDP, RUBIK).

Layout: a feature map is planar CHW for batch 1, a numpy array of shape (C, H, W). Each channel is a
"surface" and each row of a surface a "line"; the blocks hand these functions views of device memory
whose surface and line strides are those of the surface descriptors, so no function assumes that an
input is contiguous. A result is written into ``out`` when the caller passes one (``out`` may itself
be a strided view; only the elements of the view are written), else it is returned as a new array.
``out`` always has the exact result shape, e.g. (K, Ho, Wo) for a convolution.

Precision: data arrays are float32 or float16. Arithmetic is float32 (products and sums accumulate
in float32); the result is rounded once, to ``out``'s dtype, or to the input's dtype when ``out`` is
None. Small per-channel parameters (scale, bias, slope) may have any float dtype.

Semantics follow ONNX (Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
LRN, Relu, LeakyRelu, PRelu, Clip, Sigmoid, Tanh, Add, Sub, Mul, Max, Min, Div, DepthToSpace,
SpaceToDepth, Transpose) on the N=1 slice of an NCHW tensor. Bad shapes or parameters raise
``DlaError(NvError.BadParameter, ...)`` naming the value at fault.

Usage::

    y = conv2d(x, w, stride=(2, 2), pads=(1, 1, 1, 1))          # new array, x.dtype
    conv2d(x, w, pads=(1, 1, 1, 1), out=dst_view)               # written into a strided view
    activation(dst_view, "relu", out=dst_view)                   # in place
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from pydla.hw.arrays import (
    F32,
    ITEM,
    F32Array,
    FloatArray,
    bad,
    channel_param,
    check_out,
    check_pads,
    f32_target,
    feature,
    finish,
    new_or_out,
    padded,
    pair,
    result_dtype,
    scratch,
    view_reshape,
)
from pydla.hw.conv import conv2d, conv_output_size, deconv2d

__all__ = [
    "activation",
    "conv2d",
    "conv_output_size",
    "deconv2d",
    "depth_to_space",
    "eltwise",
    "global_pool",
    "lrn",
    "pool2d",
    "rubik_contract",
    "scale_bias",
    "space_to_depth",
    "transpose_chw",
]
PoolMethod = Literal["max", "avg", "min"]
GlobalPoolMethod = Literal["avg", "max"]
EltwiseOp = Literal["add", "sub", "mul", "max", "min", "div"]
DepthToSpaceMode = Literal["DCR", "CRD"]

# Pooling works on blocks of channels of about this size, so that its passes (one per window tap)
# over a block hit the cache: it is bound by memory, not arithmetic.
_POOL_BLOCK_BYTES = 256 << 10
# Max/min windows (see _extreme_pool) take blocks whose line buffer is about this size: their passes
# are fewer (kh + kw calls a block, no padded copy), and smaller blocks cost more in calls than they
# gain in cache (measured: ResNet-18's 64x112x112 pool 1.37 ms with 64 KiB, 0.92-1.01 ms with 128-512
# KiB, 0.76-0.87 ms with 1-4 MiB).
_EXTREME_POOL_BLOCK_BYTES = 2 << 20
CLIP_MIN_SIZE = _CLIP_MIN_SIZE = 1 << 14  # elements: below this np.maximum is the faster ReLU

_ACTIVATIONS = ("none", "relu", "leaky_relu", "prelu", "clamp", "sigmoid", "tanh")


# -- PDP / CDP ------------------------------------------------------------------------------------------


def pool2d(x: FloatArray, *, kernel: tuple[int, int], stride: tuple[int, int],
           pads: tuple[int, int, int, int] = (0, 0, 0, 0), method: PoolMethod = "max",
           count_include_pad: bool = False, out_size: tuple[int, int] | None = None,
           out: FloatArray | None = None) -> FloatArray:
    """ONNX MaxPool / AveragePool (and "min", the PDP's third mode) over (C, H, W).

    ``out_size`` (Ho, Wo) overrides the floor output size, e.g. for ceil_mode; windows that hang past
    the padded input are clipped. Averages divide by the number of real input elements in the window,
    or with ``count_include_pad`` by the number of elements inside the padded region, as onnxruntime
    (and PyTorch) do for ceil-mode windows. Reductions are separable: kw whole-array ops along lines,
    then kh down the columns.
    """
    c, h, wd = feature(x, "x")
    if method not in ("max", "avg", "min"):
        raise bad(f"pool2d: method {method!r} is not 'max', 'avg' or 'min'")
    kh, kw = pair(kernel, "kernel", 1)
    sh, sw = pair(stride, "stride", 1)
    pt, pl, pb, pr = check_pads(pads)
    if out_size is None:
        ho = conv_output_size(h, kh, sh, pt, pb, 1)
        wo = conv_output_size(wd, kw, sw, pl, pr, 1)
    else:
        ho, wo = pair(out_size, "out_size", 1)
        if (ho - 1) * sh >= h + pt + pb or (wo - 1) * sw >= wd + pl + pr:
            raise bad(f"pool2d: out_size {tuple(out_size)} has windows starting past the padded input")
    check_out(out, (c, ho, wo))
    dtype = result_dtype(x, out)

    reduce: np.ufunc = {"max": np.maximum, "min": np.minimum, "avg": np.add}[method]
    if (ho, wo) == (1, 1) and (kh, kw) == (h, wd) and not (pt or pl or pb or pr):
        return finish(_whole_map_pool(x, reduce, method == "avg"), out, dtype)
    fill = {"max": -np.inf, "min": np.inf, "avg": 0.0}[method]
    if method != "avg":
        res = f32_target(out, (c, ho, wo), x)
        _extreme_pool(x, (kh, kw), (sh, sw), (pt, pl), reduce, fill, res)
        return finish(res, out, dtype)
    hn, wn = (ho - 1) * sh + kh, (wo - 1) * sw + kw
    needs_pad = bool(pt or pl or hn > h or wn > wd)
    res = f32_target(out, (c, ho, wo), x)
    # Blocks of channels small enough that the kw + kh passes over a block hit the cache.
    block = max(1, min(c, _POOL_BLOCK_BYTES // (hn * wn * ITEM)))
    line_buf = np.empty((block, hn, wo), dtype=np.float32)
    for c0 in range(0, c, block):
        cb = min(block, c - c0)
        xb = x[c0:c0 + cb]
        src: FloatArray = padded(xb, pt, pl, hn, wn, fill) if needs_pad else xb
        # Along lines: every line the windows touch, kw taps each.
        line = line_buf[:cb]
        for j in range(kw):
            view = src[:, :hn, j:j + (wo - 1) * sw + 1:sw]
            if j == 0:
                np.copyto(line, view, casting="same_kind")
            else:
                reduce(line, view, out=line, dtype=np.float32)
        # Down columns: kh taps.
        rb = res[c0:c0 + cb]
        for i in range(kh):
            view = line[:, i:i + (ho - 1) * sh + 1:sh]
            if i == 0:
                np.copyto(rb, view)
            else:
                reduce(rb, view, out=rb)
    if method == "avg":
        lo_h, hi_h = (-pt, h + pb) if count_include_pad else (0, h)
        lo_w, hi_w = (-pl, wd + pr) if count_include_pad else (0, wd)
        start_h = np.arange(ho) * sh - pt
        start_w = np.arange(wo) * sw - pl
        n_h = np.minimum(start_h + kh, hi_h) - np.maximum(start_h, lo_h)
        n_w = np.minimum(start_w + kw, hi_w) - np.maximum(start_w, lo_w)
        # A window with no element to count (all padding) averages to 0, as onnxruntime does.
        count = np.maximum(np.outer(n_h, n_w), 1).astype(np.float32)
        np.divide(res, count, out=res)
    return finish(res, out, dtype)


def _extreme_pool(x: FloatArray, kernel: tuple[int, int], stride: tuple[int, int], pads: tuple[int, int],
                  reduce: np.ufunc, fill: float, res: F32Array) -> None:
    """Max or min pooling into ``res`` (C, Ho, Wo): down the columns first, from x itself (each
    kernel row's taps over the output lines whose window row lies inside x: whole input lines,
    contiguous), into a buffer of Ho lines whose pad columns hold ``fill``; then along the lines, kw
    strided taps over that buffer. No padded copy of x, and the strided pass runs over Ho lines
    rather than all the padded input's. A window part outside x contributes ``fill``, which max
    (min) leaves the other values unchanged by: the same maximum (minimum) as the separable passes
    over the padded input in the other order, equal as values; only which of +0 and -0 a window of
    zeros keeps, and which NaN's payload, may differ.

    Measured (2 cores shared, load average 7-8; ``bench/bench_kernels.py --kernel maxpool``,
    medians of 5 blocks of 10; the padded passes along the lines first -> this): ResNet-18's 64x112x112
    3x3 stride 2 935 -> 764 us, SqueezeNet 1.1's ceil-mode 64x63x63 263 -> 187 us, 128x31x31 154 ->
    112 us, 256x15x15 106 -> 80 us; ShuffleNet-v2's 24x64x64 117 -> 116 us; all 1.57 -> 1.26 ms.
    """
    c, h, w = x.shape
    kh, kw = kernel
    sh, sw = stride
    pt, pl = pads
    _, ho, wo = res.shape
    wn = (wo - 1) * sw + kw
    ww = max(0, min(w, wn - pl))  # the input columns some window reads
    block = max(1, min(c, _EXTREME_POOL_BLOCK_BYTES // (ho * wn * ITEM)))
    lines_buf = scratch("pool-lines", (block, ho, wn))
    for c0 in range(0, c, block):
        cb = min(block, c - c0)
        lines = lines_buf[:cb]
        lines[:, :, :pl] = fill
        lines[:, :, pl + ww:] = fill
        inner = lines[:, :, pl:pl + ww]
        xb = x[c0:c0 + cb, :, :ww]
        for i in range(kh):
            # Output lines p whose window row p * sh + i - pt is a line of x: p0 <= p < p1.
            p0 = min(ho, max(0, -((i - pt) // sh)))
            p1 = max(p0, min(ho, (h - 1 + pt - i) // sh + 1))
            rows = xb[:, p0 * sh + i - pt:(p1 - 1) * sh + i - pt + 1:sh] if p1 > p0 else xb[:, :0]
            if i == 0:
                inner[:, :p0] = fill
                inner[:, p1:] = fill
                np.copyto(inner[:, p0:p1], rows, casting="same_kind")
            elif p1 > p0:
                reduce(inner[:, p0:p1], rows, out=inner[:, p0:p1], dtype=np.float32)
        rb = res[c0:c0 + cb]
        for j in range(kw):
            view = lines[:, :, j:j + (wo - 1) * sw + 1:sw]
            if j == 0:
                np.copyto(rb, view)
            else:
                reduce(rb, view, out=rb)


def _whole_map_pool(x: FloatArray, reduce: np.ufunc, average: bool) -> F32Array:
    """A window over the whole map (a squeeze-excite block's global average through the PDP): the
    same sums in the same order as the separable passes of :func:`pool2d` (along each line, then
    down the column of line results, one element after another), as two reductions over the
    leading axis of a (W, H, C) copy: numpy adds whole lines of C there, instead of one ufunc call
    per kernel tap over (C, H) views with H-long inner loops, so the result is bit for bit the
    same (tested).

    Measured (this machine, 2 cores shared, load average 8-9; minimum of 50 calls, the one-element
    windows of MobileNet-v3-small at 128x128 and MobileNet-v2 at 224x224): 240x8x8 41 -> 15 us,
    576x4x4 30 -> 11 us, 1280x7x7 57 -> 49 us, 16x32x32 152 -> 30 us.
    """
    c, h, w = x.shape
    across = np.empty((w, h, c), dtype=np.float32)
    np.copyto(across, x.transpose(2, 1, 0), casting="same_kind")
    lines = reduce.reduce(across, axis=0)  # (H, C): sequential over each line's W elements
    res: F32Array = reduce.reduce(lines, axis=0)  # (C,): sequential over the H line results
    if average:
        np.divide(res, np.float32(h * w), out=res)
    return res.reshape(c, 1, 1)


def global_pool(x: FloatArray, method: GlobalPoolMethod = "avg", out: FloatArray | None = None) -> FloatArray:
    """ONNX GlobalAveragePool / GlobalMaxPool: (C, H, W) -> (C, 1, 1)."""
    c, _, _ = feature(x, "x")
    if method not in ("avg", "max"):
        raise bad(f"global_pool: method {method!r} is not 'avg' or 'max'")
    check_out(out, (c, 1, 1))
    dtype = result_dtype(x, out)
    if method == "avg":
        res = np.mean(x, axis=(1, 2), dtype=np.float32)  # float32 accumulation for float16 too
    else:
        res = np.max(x, axis=(1, 2)).astype(np.float32, copy=False)
    return finish(res.reshape(c, 1, 1), out, dtype)


def lrn(x: FloatArray, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0,
        out: FloatArray | None = None) -> FloatArray:
    """ONNX LRN across channels: y = x / (bias + alpha / size * sum of x^2 over the window) ** beta.

    The window for channel c is c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2), clipped.
    """
    c, h, wd = feature(x, "x")
    if size < 1:
        raise bad(f"lrn: size {size} must be >= 1")
    check_out(out, (c, h, wd))
    dtype = result_dtype(x, out)
    before = (size - 1) // 2
    after = size - 1 - before
    sq = np.square(x, dtype=np.float32)
    acc = sq.copy()
    for d in range(-before, after + 1):
        if d == 0 or abs(d) >= c:
            continue
        # acc[ch] += sq[ch + d] for every ch whose neighbour ch + d exists.
        lo, hi = max(0, -d), min(c, c - d)
        acc[lo:hi] += sq[lo + d:hi + d]
    acc *= np.float32(alpha / size)
    acc += np.float32(bias)
    np.power(acc, np.float32(beta), out=acc)
    return finish(np.divide(x, acc, dtype=np.float32), out, dtype)


# -- SDP ------------------------------------------------------------------------------------------------


def activation(x: FloatArray, kind: str, *, alpha: float = 0.0, clip_min: float = -np.inf,
               clip_max: float = np.inf, slope: FloatArray | None = None,
               out: FloatArray | None = None) -> FloatArray:
    """An SDP activation: none, relu, leaky_relu (alpha), prelu (per-channel slope or alpha), clamp
    (clip_min..clip_max), sigmoid, tanh. ``out`` may be ``x`` itself.

    Every intermediate is float32; the last operation stores into ``out`` after every read of ``x``,
    so working in place is safe.
    """
    c, h, wd = feature(x, "x")
    if kind not in _ACTIVATIONS:
        raise bad(f"activation: kind {kind!r} is not one of {', '.join(_ACTIVATIONS)}")
    check_out(out, (c, h, wd))
    dst = new_or_out(out, (c, h, wd), result_dtype(x, out))
    if kind == "none":
        np.copyto(dst, x, casting="same_kind")
    elif kind == "relu":
        if dst.dtype == F32 and x.dtype == F32 and x.size >= _CLIP_MIN_SIZE:
            # clip is numpy's fastest pass for this on large arrays (NaN stays NaN), but its Python
            # wrapper costs a few microseconds more than maximum on small ones.
            np.clip(x, np.float32(0), np.float32(np.inf), out=dst)
        else:
            np.maximum(x, np.float32(0), out=dst, dtype=np.float32)
    elif kind in ("leaky_relu", "prelu"):
        neg_slope: Any = np.float32(alpha)
        if kind == "prelu" and slope is not None:
            neg_slope = channel_param(slope, c, "slope")
        # max(x, 0) + slope * min(x, 0): exact for either sign, no mask needed.
        neg = np.minimum(x, np.float32(0), dtype=np.float32)
        neg *= neg_slope
        np.add(np.maximum(x, np.float32(0), dtype=np.float32), neg, out=dst, dtype=np.float32)
    elif kind == "clamp":
        if clip_min > clip_max:
            raise bad(f"activation: clip_min {clip_min} > clip_max {clip_max}")
        if dst.dtype == F32 and x.dtype == F32:  # one pass, no temporary; NaN stays NaN
            np.clip(x, np.float32(clip_min), np.float32(clip_max), out=dst)
        elif dst.dtype == F32:
            np.maximum(x, np.float32(clip_min), out=dst, dtype=np.float32)
            np.minimum(dst, np.float32(clip_max), out=dst)
        else:
            lo = np.maximum(x, np.float32(clip_min), dtype=np.float32)
            np.minimum(lo, np.float32(clip_max), out=dst, dtype=np.float32)
    elif kind == "sigmoid":
        # exp(-|x|) never overflows: 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0.
        e = np.exp(-np.abs(x, dtype=np.float32))
        num = np.where(np.less(x, 0), e, np.float32(1))
        e += np.float32(1)
        np.divide(num, e, out=dst, dtype=np.float32)
    else:  # tanh
        np.tanh(x, out=dst, dtype=np.float32)
    return dst


#: The ufunc of each element-wise op (SDP calls them straight on float32 memory).
ELTWISE_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
                  "min": np.minimum, "div": np.divide}
_ELTWISE = ELTWISE_UFUNCS


def eltwise(a: FloatArray, b: FloatArray, op: EltwiseOp, out: FloatArray | None = None) -> FloatArray:
    """a (op) b with b of shape (C, H, W), per-channel (C, 1, 1) or scalar (1, 1, 1) (anything that
    broadcasts to a's shape). ``out`` may be ``a`` or ``b``.
    """
    shape = feature(a, "a")
    if op not in _ELTWISE:
        raise bad(f"eltwise: op {op!r} is not one of {', '.join(_ELTWISE)}")
    b_arr = np.asarray(b)
    try:
        ok = np.broadcast_shapes(shape, b_arr.shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise bad(f"eltwise: b of shape {b_arr.shape} does not broadcast to a's shape {shape}")
    check_out(out, shape)
    dst = new_or_out(out, shape, result_dtype(a, out))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _ELTWISE[op](a, b_arr, out=dst, dtype=np.float32)
    return dst


def scale_bias(x: FloatArray, scale: FloatArray | None, bias: FloatArray | None,
               out: FloatArray | None = None) -> FloatArray:
    """Per-channel y = x * scale[c] + bias[c] (a folded batch norm), in float32; None means 1 or 0."""
    c, h, wd = feature(x, "x")
    check_out(out, (c, h, wd))
    dst = new_or_out(out, (c, h, wd), result_dtype(x, out))
    if scale is None and bias is None:
        np.copyto(dst, x, casting="same_kind")
    elif bias is None:
        np.multiply(x, channel_param(scale, c, "scale"), out=dst, dtype=np.float32)
    elif scale is None:
        np.add(x, channel_param(bias, c, "bias"), out=dst, dtype=np.float32)
    elif dst.dtype == F32:
        # Both steps in dst: no temporary, and x is not read after the first step, so dst may be x.
        np.multiply(x, channel_param(scale, c, "scale"), out=dst, dtype=np.float32)
        np.add(dst, channel_param(bias, c, "bias"), out=dst)
    else:
        # A float16 dst would round the product before the bias is added.
        scaled = np.multiply(x, channel_param(scale, c, "scale"), dtype=np.float32)
        np.add(scaled, channel_param(bias, c, "bias"), out=dst, dtype=np.float32)
    return dst


# -- RUBIK ----------------------------------------------------------------------------------------------


def _copy_into(src_view: NDArray[Any], dst_shape: tuple[int, ...], dst_split: tuple[int, ...],
               out: FloatArray | None, dtype: np.dtype[Any]) -> FloatArray:
    """Copy a permuted view of the input into out (or a new array), both seen through axis splits."""
    check_out(out, dst_shape)
    dst = new_or_out(out, dst_shape, dtype)
    np.copyto(view_reshape(dst, dst_split), src_view, casting="same_kind")
    return dst


def depth_to_space(x: FloatArray, block_y: int, block_x: int, mode: DepthToSpaceMode = "DCR",
                   out: FloatArray | None = None) -> FloatArray:
    """ONNX DepthToSpace with a (block_y, block_x) block: (C*by*bx, H, W) -> (C, H*by, W*bx).

    DCR: input channel (y*bx + x)*C + c; CRD: input channel (c*by + y)*bx + x (y, x: offset in block).
    """
    c, h, wd = feature(x, "x")
    by, bx = pair((block_y, block_x), "block", 1)
    if mode not in ("DCR", "CRD"):
        raise bad(f"depth_to_space: mode {mode!r} is not 'DCR' or 'CRD'")
    if c % (by * bx):
        raise bad(f"depth_to_space: {c} channels are not a multiple of the block {by}x{bx}")
    co = c // (by * bx)
    if mode == "DCR":
        src = view_reshape(x, (by, bx, co, h, wd)).transpose(2, 3, 0, 4, 1)
    else:
        src = view_reshape(x, (co, by, bx, h, wd)).transpose(0, 3, 1, 4, 2)
    return _copy_into(src, (co, h * by, wd * bx), (co, h, by, wd, bx), out, result_dtype(x, out))


def space_to_depth(x: FloatArray, block_y: int, block_x: int, out: FloatArray | None = None) -> FloatArray:
    """ONNX SpaceToDepth with a (block_y, block_x) block: (C, H, W) -> (by*bx*C, H/by, W/bx).

    Output channel (y*bx + x)*C + c holds input pixel (h*by + y, w*bx + x) of channel c.
    """
    c, h, wd = feature(x, "x")
    by, bx = pair((block_y, block_x), "block", 1)
    if h % by or wd % bx:
        raise bad(f"space_to_depth: {h}x{wd} is not a multiple of the block {by}x{bx}")
    ho, wo = h // by, wd // bx
    src = view_reshape(x, (c, ho, by, wo, bx)).transpose(2, 4, 0, 1, 3)
    return _copy_into(src, (by * bx * c, ho, wo), (by, bx, c, ho, wo), out, result_dtype(x, out))


def rubik_contract(x: FloatArray, stride_x: int, stride_y: int, out: FloatArray | None = None) -> FloatArray:
    """RUBIK contract mode (deconvolution output): (C*sx*sy, H, W) -> (C, H*sy, W*sx).

    This stack's convention for the channel order is ONNX DepthToSpace DCR: input channel
    (y*sx + x)*C + c goes to output pixel (h*sy + y, w*sx + x) of channel c.
    """
    return depth_to_space(x, stride_y, stride_x, "DCR", out)


def transpose_chw(x: FloatArray, perm: tuple[int, int, int], out: FloatArray | None = None) -> FloatArray:
    """ONNX Transpose of the three axes: result axis i is input axis perm[i]."""
    feature(x, "x")
    p = tuple(int(v) for v in perm)
    if sorted(p) != [0, 1, 2]:
        raise bad(f"transpose_chw: perm {tuple(perm)} is not a permutation of (0, 1, 2)")
    src = x.transpose(p)
    return _copy_into(src, src.shape, src.shape, out, result_dtype(x, out))
