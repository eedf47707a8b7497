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
from numpy.lib.stride_tricks import as_strided
from numpy.typing import NDArray

from pydla.errors import DlaError, NvError

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

FloatArray = NDArray[np.floating[Any]]
F32Array = NDArray[np.float32]
PoolMethod = Literal["max", "avg", "min"]
GlobalPoolMethod = Literal["avg", "max"]
EltwiseOp = Literal["add", "sub", "mul", "max", "min", "div"]
DepthToSpaceMode = Literal["DCR", "CRD"]

_F32 = np.dtype(np.float32)
_DATA_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
_ITEM = _F32.itemsize
# Upper bound on one im2col chunk (the column matrix is built and multiplied a chunk of output lines
# at a time): it bounds memory for big inputs, and is big enough that each matmul keeps both cores
# busy (smaller chunks measured slower; past ~4 MiB it makes no difference).
_IM2COL_BYTES = 8 << 20
# Wide im2col (see _wide_im2col_conv) pays off once output lines are long: copying fewer, longer runs
# saves more than the cropped extra matmul columns and the crop copy cost.
_WIDE_MIN_WIDTH = 32
_WIDE_MAX_EXTRA = 0.125  # at most this fraction of extra (cropped) matmul columns
# Depthwise convolution and pooling work on blocks of channels of about this size, so that their
# passes (one per kernel tap) over a block hit the cache: they are bound by memory, not arithmetic.
_DEPTHWISE_BLOCK_BYTES = 256 << 10
_POOL_BLOCK_BYTES = 256 << 10
_ACTIVATIONS = ("none", "relu", "leaky_relu", "prelu", "clamp", "sigmoid", "tanh")


# -- checks and plumbing ------------------------------------------------------------------------------


def _bad(message: str) -> DlaError:
    return DlaError(NvError.BadParameter, message)


def _feature(x: Any, name: str) -> tuple[int, int, int]:
    """The (C, H, W) of a data array, after checking that it is one."""
    if not isinstance(x, np.ndarray):
        raise _bad(f"{name}: expected a numpy array, got {type(x).__name__}")
    if x.ndim != 3:
        raise _bad(f"{name}: expected a (C, H, W) array, got shape {x.shape}")
    if x.dtype not in _DATA_DTYPES:
        raise _bad(f"{name}: dtype {x.dtype} is not float32 or float16")
    c, h, w = x.shape
    return int(c), int(h), int(w)


def _check_out(out: FloatArray | None, shape: tuple[int, ...]) -> None:
    if out is None:
        return
    if not isinstance(out, np.ndarray):
        raise _bad(f"out: expected a numpy array, got {type(out).__name__}")
    if out.shape != shape:
        raise _bad(f"out: shape {out.shape} is not the result shape {shape}")
    if out.dtype not in _DATA_DTYPES:
        raise _bad(f"out: dtype {out.dtype} is not float32 or float16")
    if not out.flags.writeable:
        raise _bad("out: the array is read-only")


def _ints(value: Any, n: int, name: str) -> tuple[int, ...]:
    try:
        ints = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        ints = ()
    if len(ints) != n:
        raise _bad(f"{name}: expected {n} integers, got {value!r}")
    return ints


def _pair(value: Any, name: str, minimum: int) -> tuple[int, int]:
    a, b = _ints(value, 2, name)
    if a < minimum or b < minimum:
        raise _bad(f"{name}: {tuple(value)} has a value below {minimum}")
    return a, b


def _pads(value: Any) -> tuple[int, int, int, int]:
    top, left, bottom, right = _ints(value, 4, "pads")
    if min(top, left, bottom, right) < 0:
        raise _bad(f"pads: {tuple(value)} has a negative value")
    return top, left, bottom, right


def _channel_param(p: Any, c: int, name: str) -> F32Array:
    """A per-channel parameter as a float32 (C, 1, 1) array, ready to broadcast over a feature map."""
    arr = np.asarray(p, dtype=np.float32)
    if arr.size != c:
        raise _bad(f"{name}: {arr.size} values for {c} channels")
    return arr.reshape(c, 1, 1)


def _result_dtype(x: FloatArray, out: FloatArray | None) -> np.dtype[Any]:
    return out.dtype if out is not None else x.dtype


def _new_or_out(out: FloatArray | None, shape: tuple[int, ...], dtype: np.dtype[Any]) -> FloatArray:
    """Where a ufunc writes its result: ``out`` itself (ufuncs cast float32 to float16 on store)."""
    return out if out is not None else np.empty(shape, dtype=dtype)


def _f32_target(out: FloatArray | None, shape: tuple[int, ...], *inputs: FloatArray) -> F32Array:
    """A float32 array to accumulate into: ``out`` when that is safe, else a new array.

    Accumulating kernels write partial results, so ``out`` is used only when it is float32 and cannot
    overlap an input (an overlapping ``out`` would be read after being written).
    """
    if out is not None and out.dtype == _F32 and not any(np.may_share_memory(out, a) for a in inputs):
        return out
    return np.empty(shape, dtype=np.float32)


def _finish(res: F32Array, out: FloatArray | None, dtype: np.dtype[Any]) -> FloatArray:
    """Store a float32 result: into ``out`` (rounding to its dtype) or as a new array of ``dtype``."""
    if out is None:
        return np.ascontiguousarray(res, dtype=dtype)
    if res is not out:
        np.copyto(out, res, casting="same_kind")
    return out


def _matrix(a: NDArray[Any], rows: int, cols: int, row_stride: int) -> NDArray[Any]:
    """A (rows, cols) view with unit column stride that numpy's matmul hands to BLAS without a copy.

    BLAS wants a leading dimension >= cols even for a single row, so a 1-row matrix gets one.
    """
    stride = row_stride if rows > 1 else cols * a.itemsize
    return as_strided(a, (rows, cols), (stride, a.itemsize))


def _flat_hw(a: NDArray[Any]) -> NDArray[Any] | None:
    """(C, H, W) as a BLAS-ready (C, H*W) view, or None when lines are not packed back to back."""
    c, h, w = a.shape
    s0, s1, s2 = a.strides
    item = a.itemsize
    if (w > 1 and s2 != item) or (h > 1 and s1 != w * item):
        return None
    if c > 1 and (s0 % item or s0 < h * w * item):
        return None
    return _matrix(a, c, h * w, s0)


def _stack(m: NDArray[Any], groups: int) -> NDArray[Any]:
    """Split a (R, N) matrix view into (groups, R // groups, N): one matrix per convolution group."""
    r, n = m.shape
    rs = m.strides[0] if r > 1 else n * m.itemsize
    per = r // groups
    inner = rs if per > 1 else n * m.itemsize
    return as_strided(m, (groups, per, n), (per * rs, inner, m.itemsize))


def _padded(x: FloatArray, top: int, left: int, hn: int, wn: int, fill: float) -> F32Array:
    """x placed at (top, left) in a new float32 (C, hn, wn) array whose other elements are ``fill``.

    Only the border is filled (not the whole buffer first), so the input is read and written once.
    Rows or columns of x beyond (hn, wn) are not copied: no window reaches them.
    """
    c, h, w = x.shape
    buf = np.empty((c, hn, wn), dtype=np.float32)
    hh = max(0, min(h, hn - top))
    ww = max(0, min(w, wn - left))
    buf[:, :top] = fill
    buf[:, top + hh:] = fill
    buf[:, top:top + hh, :left] = fill
    buf[:, top:top + hh, left + ww:] = fill
    buf[:, top:top + hh, left:left + ww] = x[:, :hh, :ww]
    return buf


def _view_reshape(a: NDArray[Any], shape: tuple[int, ...]) -> NDArray[Any]:
    """Reshape that must not copy (it only ever splits axes here); a copy would lose writes to out."""
    v = a.reshape(shape)
    if v.size and not np.may_share_memory(v, a):
        raise _bad(f"cannot view an array of shape {a.shape} and strides {a.strides} as {shape}")
    return v


# -- CONV -----------------------------------------------------------------------------------------------


def conv_output_size(in_size: int, kernel: int, stride: int, pad_before: int, pad_after: int,
                     dilation: int) -> int:
    """Output length along one axis of a convolution or pooling window, floor semantics (ONNX Conv)."""
    if in_size < 1 or kernel < 1 or stride < 1 or dilation < 1:
        raise _bad(f"conv_output_size: in_size {in_size}, kernel {kernel}, stride {stride} and "
                   f"dilation {dilation} must all be >= 1")
    if pad_before < 0 or pad_after < 0:
        raise _bad(f"conv_output_size: pads ({pad_before}, {pad_after}) must be >= 0")
    span = dilation * (kernel - 1) + 1
    padded = in_size + pad_before + pad_after
    if span > padded:
        raise _bad(f"conv_output_size: kernel span {span} exceeds the padded input size {padded}")
    return (padded - span) // stride + 1


def conv2d(x: FloatArray, w: FloatArray, *, stride: tuple[int, int] = (1, 1),
           pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
           groups: int = 1, out: FloatArray | None = None) -> FloatArray:
    """ONNX Conv without bias: x (C, H, W), w (K, C // groups, kh, kw) -> (K, Ho, Wo).

    ``pads`` is (top, left, bottom, right). Paths:

    - 1x1, stride 1, unpadded: one matmul on x as it lies in memory;
    - depthwise (one input channel per group): kh*kw multiply-adds of shifted views;
    - wide maps: "wide" im2col, each row of the column matrix one contiguous run of a stride phase
      of the zero-padded input (Ho whole lines), the extra columns cropped after the matmul;
    - otherwise: im2col as a strided view of the (padded) input copied once.

    The column matrix is built in chunks of output lines (bounded memory) and each chunk is one
    matmul, batched over groups, written straight into ``out`` when ``out`` is float32 with packed
    lines.
    """
    c, h, wd = _feature(x, "x")
    if not isinstance(w, np.ndarray) or w.ndim != 4:
        raise _bad(f"w: expected a (K, C/groups, kh, kw) array, got {getattr(w, 'shape', type(w))}")
    k, cg, kh, kw = (int(v) for v in w.shape)
    if groups < 1 or c % groups or k % groups:
        raise _bad(f"groups: {groups} does not divide input channels {c} and output channels {k}")
    if cg != c // groups:
        raise _bad(f"w: {cg} input channels per group, expected {c // groups} ({c} / {groups} groups)")
    sh, sw = _pair(stride, "stride", 1)
    dh, dw = _pair(dilation, "dilation", 1)
    pt, pl, pb, pr = _pads(pads)
    ho = conv_output_size(h, kh, sh, pt, pb, dh)
    wo = conv_output_size(wd, kw, sw, pl, pr, dw)
    _check_out(out, (k, ho, wo))
    dtype = _result_dtype(x, out)
    w32 = w.astype(np.float32, copy=False)
    res = _f32_target(out, (k, ho, wo), x)
    if cg == 1 and groups == c:
        _depthwise(x, w32, (sh, sw), (pt, pl), (dh, dw), res)
    else:
        _gemm_conv(x, w32, groups, (sh, sw), (pt, pl, pb, pr), (dh, dw), res)
    return _finish(res, out, dtype)


def _gemm_conv(x: FloatArray, w32: F32Array, groups: int, stride: tuple[int, int],
               pads: tuple[int, int, int, int], dilation: tuple[int, int], res: F32Array) -> None:
    """Convolution as matmul into ``res``, the float32 (K, Ho, Wo) result (any strides)."""
    c, h, wd = x.shape
    k, cg, kh, kw = w32.shape
    ho, wo = res.shape[1:]
    sh, sw = stride
    pt, pl = pads[0], pads[1]
    dw = dilation[1]
    depth = cg * kh * kw
    wg = w32.reshape(groups, k // groups, depth)
    if kh * kw > 1 and wo >= _WIDE_MIN_WIDTH and (kw - 1) * dw // sw <= wo * _WIDE_MAX_EXTRA:
        _wide_im2col_conv(x, wg, stride, (pt, pl), dilation, (kh, kw), res)
        return

    # BLAS writes the (K, Ho*Wo) product straight into res when res has packed lines; else into a
    # temporary that is copied into res once at the end.
    flat = _flat_hw(res)
    tmp = None
    if flat is None:
        tmp = np.empty((k, ho, wo), dtype=np.float32)
        flat = _matrix(tmp, k, ho * wo, tmp.strides[0])
    target = _stack(flat, groups)
    if kh == kw == 1 and sh == sw == 1 and not any(pads):
        # 1x1: x itself is the (C, H*W) matrix, unless its lines are padded or it is float16.
        xm = _flat_hw(x) if x.dtype == _F32 else None
        if xm is None:
            xm = np.ascontiguousarray(x, dtype=np.float32).reshape(c, h * wd)
        np.matmul(wg, _stack(xm, groups), out=target)
    else:
        _im2col_conv(x, wg, stride, (pt, pl), dilation, (kh, kw), target, (ho, wo))
    if tmp is not None:
        np.copyto(res, tmp)


def _chunk_lines(depth: int, line: int, lines: int) -> int:
    """Output lines per im2col chunk: as many as fit the budget (bigger matmuls thread better)."""
    return max(1, min(lines, _IM2COL_BYTES // (depth * line * _ITEM)))


def _im2col_conv(x: FloatArray, wg: F32Array, stride: tuple[int, int], pads: tuple[int, int],
                 dilation: tuple[int, int], kernel: tuple[int, int], target: F32Array,
                 out_hw: tuple[int, int]) -> None:
    """im2col as a strided view of the (padded) input, copied chunk by chunk; matmul into target."""
    c = x.shape[0]
    groups, _, depth = wg.shape
    kh, kw = kernel
    sh, sw = stride
    pt, pl = pads
    dh, dw = dilation
    ho, wo = out_hw
    hn = (ho - 1) * sh + (kh - 1) * dh + 1
    wn = (wo - 1) * sw + (kw - 1) * dw + 1
    # Pad only when a window reaches outside x; the padded copy holds just the extent windows reach.
    src: FloatArray = _padded(x, pt, pl, hn, wn, 0.0) if pt or pl or hn > x.shape[1] or wn > x.shape[2] else x
    s0, s1, s2 = src.strides
    windows = as_strided(src, (c, kh, kw, ho, wo), (s0, dh * s1, dw * s2, sh * s1, sw * s2),
                         writeable=False)
    rows = _chunk_lines(depth * groups, wo, ho)
    buf = np.empty(c * kh * kw * rows * wo, dtype=np.float32)
    for r0 in range(0, ho, rows):
        r = min(rows, ho - r0)
        cols = buf[:c * kh * kw * r * wo].reshape(c, kh, kw, r, wo)
        np.copyto(cols, windows[:, :, :, r0:r0 + r], casting="same_kind")  # float16 converts here
        np.matmul(wg, cols.reshape(groups, depth, r * wo), out=target[:, :, r0 * wo:(r0 + r) * wo])


def _phase_planes(x: FloatArray, top: int, left: int, stride: tuple[int, int],
                  kernel: tuple[int, int], dilation: tuple[int, int], hq: int, wq: int) -> F32Array:
    """The zero-padded input split into stride phases, each plane flattened: (sh*sw, C, hq*wq).

    Plane a*sw + b holds padded pixel (y*sh + a, x*sw + b) at (y, x), so a strided window becomes a
    stride-1 window of one plane. With stride 1 this is just the padded input. Only the planes some
    kernel tap reads are filled.
    """
    sh, sw = stride
    if sh == sw == 1:
        return _padded(x, top, left, hq, wq, 0.0).reshape(1, x.shape[0], hq * wq)
    c, h, wd = x.shape
    planes = np.empty((sh, sw, c, hq, wq), dtype=np.float32)
    row_phases = sorted({i * dilation[0] % sh for i in range(kernel[0])})
    col_phases = sorted({j * dilation[1] % sw for j in range(kernel[1])})
    for a in row_phases:
        # Plane lines y whose padded line y*sh + a is a line of x: y0 <= y < y1.
        y0 = min(hq, max(0, -((a - top) // sh)))
        y1 = max(y0, min(hq, -((a - top - h) // sh)))
        for b in col_phases:
            x0 = min(wq, max(0, -((b - left) // sw)))
            x1 = max(x0, min(wq, -((b - left - wd) // sw)))
            p = planes[a, b]
            p[:, :y0] = 0.0
            p[:, y1:] = 0.0
            p[:, y0:y1, :x0] = 0.0
            p[:, y0:y1, x1:] = 0.0
            p[:, y0:y1, x0:x1] = x[:, y0 * sh + a - top:(y1 - 1) * sh + a - top + 1:sh,
                                   x0 * sw + b - left:(x1 - 1) * sw + b - left + 1:sw]
    return planes.reshape(sh * sw, c, hq * wq)


def _wide_im2col_conv(x: FloatArray, wg: F32Array, stride: tuple[int, int], pads: tuple[int, int],
                      dilation: tuple[int, int], kernel: tuple[int, int], res: F32Array) -> None:
    """im2col over whole lines of the padded input's stride phases.

    In a phase plane flattened per channel, the window of kernel tap (i, j) for output lines
    r0..r0+r is one contiguous run of r * Wq elements (Wq = Wo + (kw-1)*dw // sw, the plane's width),
    so each row of the column matrix is a single memcpy rather than r strided runs of Wo. The matmul
    then yields Wq columns per line, of which the first Wo are the output and the rest are cropped.
    """
    c = x.shape[0]
    groups, kg, depth = wg.shape
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    k, ho, wo = res.shape
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    # One spare line: the run for the last tap of the last line reaches past line hq - 1.
    planes = _phase_planes(x, pads[0], pads[1], stride, kernel, dilation, hq + 1, wq)
    rows = _chunk_lines(depth * groups + k, wq, ho)
    cols_buf = np.empty(c * kh * kw * rows * wq, dtype=np.float32)
    prod_buf = np.empty(k * rows * wq, dtype=np.float32)
    for r0 in range(0, ho, rows):
        r = min(rows, ho - r0)
        n = r * wq
        cols = cols_buf[:c * kh * kw * n].reshape(c, kh, kw, n)
        for i in range(kh):
            qi, a = divmod(i * dh, sh)
            for j in range(kw):
                qj, b = divmod(j * dw, sw)
                start = (r0 + qi) * wq + qj
                np.copyto(cols[:, i, j], planes[a * sw + b, :, start:start + n])
        prod = prod_buf[:k * n].reshape(groups, kg, n)
        np.matmul(wg, cols.reshape(groups, depth, n), out=prod)
        np.copyto(res[:, r0:r0 + r], prod.reshape(k, r, wq)[:, :, :wo])


def _depthwise(x: FloatArray, w32: F32Array, stride: tuple[int, int], pads: tuple[int, int],
               dilation: tuple[int, int], res: F32Array) -> None:
    """One input channel per group: res[k] = sum over taps (i, j) of w[k, 0, i, j] * shifted x[k // m].

    kh*kw multiply-adds of whole lines (as in _wide_im2col_conv: each tap's window is one contiguous
    run of a stride phase of the padded input, extra columns cropped at the end) beat an im2col with
    a 1-deep matmul per channel by far. Channels go in blocks small enough to stay in cache across
    the taps: these passes are bound by memory bandwidth, not arithmetic.
    """
    c = x.shape[0]
    k, _, kh, kw = w32.shape
    m = k // c  # channel multiplier: outputs c*m .. c*m + m - 1 read input channel c
    sh, sw = stride
    dh, dw = dilation
    ho, wo = res.shape[1:]
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    n = ho * wq
    taps = w32.reshape(c, m, kh * kw)
    block = max(1, min(c, _DEPTHWISE_BLOCK_BYTES // (m * n * _ITEM)))
    acc_buf = np.empty((block, m, n), dtype=np.float32)
    tmp_buf = np.empty((block, m, n), dtype=np.float32)
    for c0 in range(0, c, block):
        cb = min(block, c - c0)
        planes = _phase_planes(x[c0:c0 + cb], pads[0], pads[1], stride, (kh, kw), dilation, hq + 1, wq)
        acc, tmp = acc_buf[:cb], tmp_buf[:cb]
        for i in range(kh):
            qi, a = divmod(i * dh, sh)
            for j in range(kw):
                qj, b = divmod(j * dw, sw)
                start = qi * wq + qj
                window = planes[a * sw + b, :, None, start:start + n]
                tap = taps[c0:c0 + cb, :, i * kw + j, None]
                if i == 0 and j == 0:
                    np.multiply(window, tap, out=acc)
                else:
                    np.multiply(window, tap, out=tmp)
                    acc += tmp
        np.copyto(res[c0 * m:(c0 + cb) * m], acc.reshape(cb * m, ho, wq)[:, :, :wo])


def deconv2d(x: FloatArray, w: FloatArray, *, stride: tuple[int, int] = (1, 1),
             pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
             groups: int = 1, output_padding: tuple[int, int] = (0, 0),
             out: FloatArray | None = None) -> FloatArray:
    """ONNX ConvTranspose without bias: x (C, H, W), w (C, K // groups, kh, kw) -> (K, Ho, Wo).

    Ho = stride * (H - 1) + output_padding + dilation * (kh - 1) + 1 - top - bottom. One matmul (batched
    over groups) gives every input pixel's kh*kw contributions; col2im adds them, one strided slice
    per kernel tap, into the full output, which is then cropped by the pads.
    """
    c, h, wd = _feature(x, "x")
    if not isinstance(w, np.ndarray) or w.ndim != 4:
        raise _bad(f"w: expected a (C, K/groups, kh, kw) array, got {getattr(w, 'shape', type(w))}")
    wc, kg, kh, kw = (int(v) for v in w.shape)
    if groups < 1 or c % groups:
        raise _bad(f"groups: {groups} does not divide input channels {c}")
    if wc != c:
        raise _bad(f"w: {wc} input channels, x has {c}")
    sh, sw = _pair(stride, "stride", 1)
    dh, dw = _pair(dilation, "dilation", 1)
    oph, opw = _pair(output_padding, "output_padding", 0)
    pt, pl, pb, pr = _pads(pads)
    k = kg * groups
    hf = sh * (h - 1) + dh * (kh - 1) + 1 + oph
    wf = sw * (wd - 1) + dw * (kw - 1) + 1 + opw
    ho, wo = hf - pt - pb, wf - pl - pr
    if ho < 1 or wo < 1:
        raise _bad(f"deconv2d: pads {tuple(pads)} crop the {hf}x{wf} output to nothing")
    _check_out(out, (k, ho, wo))
    dtype = _result_dtype(x, out)

    cg = c // groups
    xm = _flat_hw(x) if x.dtype == _F32 else None
    if xm is None:
        xm = np.ascontiguousarray(x, dtype=np.float32).reshape(c, h * wd)
    # (G, Kg*kh*kw, Cg): each group's weights transposed; matmul passes the transpose to BLAS as a flag.
    wt = w.astype(np.float32, copy=False).reshape(groups, cg, kg * kh * kw).transpose(0, 2, 1)
    cols = np.matmul(wt, _stack(xm, groups)).reshape(k, kh, kw, h, wd)
    full = np.zeros((k, hf, wf), dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            y, x0 = i * dh, j * dw
            full[:, y:y + sh * (h - 1) + 1:sh, x0:x0 + sw * (wd - 1) + 1:sw] += cols[:, i, j]
    return _finish(full[:, pt:pt + ho, pl:pl + wo], out, dtype)


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
    c, h, wd = _feature(x, "x")
    if method not in ("max", "avg", "min"):
        raise _bad(f"pool2d: method {method!r} is not 'max', 'avg' or 'min'")
    kh, kw = _pair(kernel, "kernel", 1)
    sh, sw = _pair(stride, "stride", 1)
    pt, pl, pb, pr = _pads(pads)
    if out_size is None:
        ho = conv_output_size(h, kh, sh, pt, pb, 1)
        wo = conv_output_size(wd, kw, sw, pl, pr, 1)
    else:
        ho, wo = _pair(out_size, "out_size", 1)
        if (ho - 1) * sh >= h + pt + pb or (wo - 1) * sw >= wd + pl + pr:
            raise _bad(f"pool2d: out_size {tuple(out_size)} has windows starting past the padded input")
    _check_out(out, (c, ho, wo))
    dtype = _result_dtype(x, out)

    fill = {"max": -np.inf, "min": np.inf, "avg": 0.0}[method]
    reduce = {"max": np.maximum, "min": np.minimum, "avg": np.add}[method]
    hn, wn = (ho - 1) * sh + kh, (wo - 1) * sw + kw
    needs_pad = bool(pt or pl or hn > h or wn > wd)
    res = _f32_target(out, (c, ho, wo), x)
    # Blocks of channels small enough that the kw + kh passes over a block hit the cache.
    block = max(1, min(c, _POOL_BLOCK_BYTES // (hn * wn * _ITEM)))
    line_buf = np.empty((block, hn, wo), dtype=np.float32)
    for c0 in range(0, c, block):
        cb = min(block, c - c0)
        xb = x[c0:c0 + cb]
        src: FloatArray = _padded(xb, pt, pl, hn, wn, fill) if needs_pad else xb
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
    return _finish(res, out, dtype)


def global_pool(x: FloatArray, method: GlobalPoolMethod = "avg", out: FloatArray | None = None) -> FloatArray:
    """ONNX GlobalAveragePool / GlobalMaxPool: (C, H, W) -> (C, 1, 1)."""
    c, _, _ = _feature(x, "x")
    if method not in ("avg", "max"):
        raise _bad(f"global_pool: method {method!r} is not 'avg' or 'max'")
    _check_out(out, (c, 1, 1))
    dtype = _result_dtype(x, out)
    if method == "avg":
        res = np.mean(x, axis=(1, 2), dtype=np.float32)  # float32 accumulation for float16 too
    else:
        res = np.max(x, axis=(1, 2)).astype(np.float32, copy=False)
    return _finish(res.reshape(c, 1, 1), out, dtype)


def lrn(x: FloatArray, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0,
        out: FloatArray | None = None) -> FloatArray:
    """ONNX LRN across channels: y = x / (bias + alpha / size * sum of x^2 over the window) ** beta.

    The window for channel c is c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2), clipped.
    """
    c, h, wd = _feature(x, "x")
    if size < 1:
        raise _bad(f"lrn: size {size} must be >= 1")
    _check_out(out, (c, h, wd))
    dtype = _result_dtype(x, out)
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
    return _finish(np.divide(x, acc, dtype=np.float32), out, dtype)


# -- SDP ------------------------------------------------------------------------------------------------


def activation(x: FloatArray, kind: str, *, alpha: float = 0.0, clip_min: float = -np.inf,
               clip_max: float = np.inf, slope: FloatArray | None = None,
               out: FloatArray | None = None) -> FloatArray:
    """An SDP activation: none, relu, leaky_relu (alpha), prelu (per-channel slope or alpha), clamp
    (clip_min..clip_max), sigmoid, tanh. ``out`` may be ``x`` itself.

    Every intermediate is float32; the last operation stores into ``out`` after every read of ``x``,
    so working in place is safe.
    """
    c, h, wd = _feature(x, "x")
    if kind not in _ACTIVATIONS:
        raise _bad(f"activation: kind {kind!r} is not one of {', '.join(_ACTIVATIONS)}")
    _check_out(out, (c, h, wd))
    dst = _new_or_out(out, (c, h, wd), _result_dtype(x, out))
    if kind == "none":
        np.copyto(dst, x, casting="same_kind")
    elif kind == "relu":
        np.maximum(x, np.float32(0), out=dst, dtype=np.float32)
    elif kind in ("leaky_relu", "prelu"):
        neg_slope: Any = np.float32(alpha)
        if kind == "prelu" and slope is not None:
            neg_slope = _channel_param(slope, c, "slope")
        # max(x, 0) + slope * min(x, 0): exact for either sign, no mask needed.
        neg = np.minimum(x, np.float32(0), dtype=np.float32)
        neg *= neg_slope
        np.add(np.maximum(x, np.float32(0), dtype=np.float32), neg, out=dst, dtype=np.float32)
    elif kind == "clamp":
        if clip_min > clip_max:
            raise _bad(f"activation: clip_min {clip_min} > clip_max {clip_max}")
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


_ELTWISE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
            "min": np.minimum, "div": np.divide}


def eltwise(a: FloatArray, b: FloatArray, op: EltwiseOp, out: FloatArray | None = None) -> FloatArray:
    """a (op) b with b of shape (C, H, W), per-channel (C, 1, 1) or scalar (1, 1, 1) (anything that
    broadcasts to a's shape). ``out`` may be ``a`` or ``b``.
    """
    shape = _feature(a, "a")
    if op not in _ELTWISE:
        raise _bad(f"eltwise: op {op!r} is not one of {', '.join(_ELTWISE)}")
    b_arr = np.asarray(b)
    try:
        ok = np.broadcast_shapes(shape, b_arr.shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise _bad(f"eltwise: b of shape {b_arr.shape} does not broadcast to a's shape {shape}")
    _check_out(out, shape)
    dst = _new_or_out(out, shape, _result_dtype(a, out))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _ELTWISE[op](a, b_arr, out=dst, dtype=np.float32)
    return dst


def scale_bias(x: FloatArray, scale: FloatArray | None, bias: FloatArray | None,
               out: FloatArray | None = None) -> FloatArray:
    """Per-channel y = x * scale[c] + bias[c] (a folded batch norm), in float32; None means 1 or 0."""
    c, h, wd = _feature(x, "x")
    _check_out(out, (c, h, wd))
    dst = _new_or_out(out, (c, h, wd), _result_dtype(x, out))
    if scale is None and bias is None:
        np.copyto(dst, x, casting="same_kind")
    elif bias is None:
        np.multiply(x, _channel_param(scale, c, "scale"), out=dst, dtype=np.float32)
    elif scale is None:
        np.add(x, _channel_param(bias, c, "bias"), out=dst, dtype=np.float32)
    elif dst.dtype == _F32:
        # Both steps in dst: no temporary, and x is not read after the first step, so dst may be x.
        np.multiply(x, _channel_param(scale, c, "scale"), out=dst, dtype=np.float32)
        np.add(dst, _channel_param(bias, c, "bias"), out=dst)
    else:
        # A float16 dst would round the product before the bias is added.
        scaled = np.multiply(x, _channel_param(scale, c, "scale"), dtype=np.float32)
        np.add(scaled, _channel_param(bias, c, "bias"), out=dst, dtype=np.float32)
    return dst


# -- RUBIK ----------------------------------------------------------------------------------------------


def _copy_into(src_view: NDArray[Any], dst_shape: tuple[int, ...], dst_split: tuple[int, ...],
               out: FloatArray | None, dtype: np.dtype[Any]) -> FloatArray:
    """Copy a permuted view of the input into out (or a new array), both seen through axis splits."""
    _check_out(out, dst_shape)
    dst = _new_or_out(out, dst_shape, dtype)
    np.copyto(_view_reshape(dst, dst_split), src_view, casting="same_kind")
    return dst


def depth_to_space(x: FloatArray, block_y: int, block_x: int, mode: DepthToSpaceMode = "DCR",
                   out: FloatArray | None = None) -> FloatArray:
    """ONNX DepthToSpace with a (block_y, block_x) block: (C*by*bx, H, W) -> (C, H*by, W*bx).

    DCR: input channel (y*bx + x)*C + c; CRD: input channel (c*by + y)*bx + x (y, x: offset in block).
    """
    c, h, wd = _feature(x, "x")
    by, bx = _pair((block_y, block_x), "block", 1)
    if mode not in ("DCR", "CRD"):
        raise _bad(f"depth_to_space: mode {mode!r} is not 'DCR' or 'CRD'")
    if c % (by * bx):
        raise _bad(f"depth_to_space: {c} channels are not a multiple of the block {by}x{bx}")
    co = c // (by * bx)
    if mode == "DCR":
        src = _view_reshape(x, (by, bx, co, h, wd)).transpose(2, 3, 0, 4, 1)
    else:
        src = _view_reshape(x, (co, by, bx, h, wd)).transpose(0, 3, 1, 4, 2)
    return _copy_into(src, (co, h * by, wd * bx), (co, h, by, wd, bx), out, _result_dtype(x, out))


def space_to_depth(x: FloatArray, block_y: int, block_x: int, out: FloatArray | None = None) -> FloatArray:
    """ONNX SpaceToDepth with a (block_y, block_x) block: (C, H, W) -> (by*bx*C, H/by, W/bx).

    Output channel (y*bx + x)*C + c holds input pixel (h*by + y, w*bx + x) of channel c.
    """
    c, h, wd = _feature(x, "x")
    by, bx = _pair((block_y, block_x), "block", 1)
    if h % by or wd % bx:
        raise _bad(f"space_to_depth: {h}x{wd} is not a multiple of the block {by}x{bx}")
    ho, wo = h // by, wd // bx
    src = _view_reshape(x, (c, ho, by, wo, bx)).transpose(2, 4, 0, 1, 3)
    return _copy_into(src, (by * bx * c, ho, wo), (by, bx, c, ho, wo), out, _result_dtype(x, out))


def rubik_contract(x: FloatArray, stride_x: int, stride_y: int, out: FloatArray | None = None) -> FloatArray:
    """RUBIK contract mode (deconvolution output): (C*sx*sy, H, W) -> (C, H*sy, W*sx).

    This stack's convention for the channel order is ONNX DepthToSpace DCR: input channel
    (y*sx + x)*C + c goes to output pixel (h*sy + y, w*sx + x) of channel c.
    """
    return depth_to_space(x, stride_y, stride_x, "DCR", out)


def transpose_chw(x: FloatArray, perm: tuple[int, int, int], out: FloatArray | None = None) -> FloatArray:
    """ONNX Transpose of the three axes: result axis i is input axis perm[i]."""
    _feature(x, "x")
    p = tuple(int(v) for v in perm)
    if sorted(p) != [0, 1, 2]:
        raise _bad(f"transpose_chw: perm {tuple(perm)} is not a permutation of (0, 1, 2)")
    src = x.transpose(p)
    return _copy_into(src, src.shape, src.shape, out, _result_dtype(x, out))
