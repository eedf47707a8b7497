"""A convolution or fully connected layer as an NVDLA CONV + SDP: INT8 kernels (a float model's
quantized here per output channel, with scales the SDP's requantization represents exactly), the
bias and the input's zero point folded into the 32-bit sums' offset, grouped convolutions as
convolutions over a few surfaces each with block-diagonal kernels, the padding at the input's zero point.

Usage::

    ops, shape = conv_ops(layer, Ref("x"), (16, 8, 8), (0.02, 0), (0.05, -128), relu=True, atom=8)
"""

from __future__ import annotations

import numpy as np

from pydla.compiler.nvdla import requant
from pydla.compiler.nvdla.layers import Layer, Quant
from pydla.compiler.nvdla.plan import ConvOp, Ref, SdpOp
from pydla.errors import DlaError, NvError

MAX_KERNEL = 32  # CSC's weight width and height fields: 5 bits


def _quantize_float(w: np.ndarray, sx: float, sy: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-output-channel INT8 kernels whose requantization multipliers are representable."""
    k = w.shape[0]
    amax = np.abs(w.reshape(k, -1)).max(axis=1).astype(np.float64)
    scales = np.where(amax > 0, amax / 127.0, 1.0)
    multipliers, unit = requant.snap_multipliers(sx * scales / sy)
    snapped = multipliers * sy / sx
    q = np.clip(np.round(w / snapped.reshape((k,) + (1,) * (w.ndim - 1))), -128, 127).astype(np.int8)
    return q, snapped, unit


def _block_diagonal(w: np.ndarray, groups: int) -> np.ndarray:
    k, cg, r, s = w.shape
    kg = k // groups
    out = np.zeros((k, cg * groups, r, s), w.dtype)
    for g in range(groups):
        out[g * kg : (g + 1) * kg, g * cg : (g + 1) * cg] = w[g * kg : (g + 1) * kg]
    return out


def _chunks(groups: int, cin_g: int, cout_g: int, atom: int, channels: int) -> int:
    """Groups per convolution of a grouped layer: whole surfaces in and out, about ``channels`` channels
    (all groups in one convolution when no such split exists)."""
    for n in range(max(1, channels // max(cin_g, 1)), groups + 1):
        if groups % n == 0 and (n * cin_g) % atom == 0 and (n * cout_g) % atom == 0:
            return n
    return groups


def conv_ops(
    layer: Layer,
    src: Ref,
    x_shape: tuple[int, int, int],
    xq: Quant,
    yq: Quant,
    relu: bool,
    atom: int,
    group_channels: int = 64,
) -> tuple[list[tuple[ConvOp, int, int]], tuple[int, int, int]]:
    """The CONVs (each with its SDP, whose destination the caller sets at the given channel offset and
    count) and the output's (C, H, W). A grouped convolution is split into convolutions of about
    ``group_channels`` input channels with block-diagonal kernels."""
    assert layer.weights is not None
    wts = layer.weights
    a = layer.attrs
    c, h, w = x_shape
    values = wts.values
    if a.get("fc"):  # a fully connected layer over a (C, H, W) input: one window over all of it
        values = values.reshape(values.shape[0], c, h, w)
        a = {**a, "kernel": (h, w)}
    k = values.shape[0]
    groups = int(a.get("group", 1))
    if values.shape[1] * groups != c or k % groups:
        raise DlaError(
            NvError.BadValue,
            f"layer '{layer.name}': {values.shape[1]} x {groups} kernel channels for a {c}-channel input",
        )
    if wts.scales is None:
        q, scales, unit_of_layer = _quantize_float(values, xq[0], yq[0])
        unit: float | None = unit_of_layer
    else:
        q, scales = values.astype(np.int8), np.asarray(wts.scales, np.float64)
        unit = None
    r, s = q.shape[2], q.shape[3]
    if max(r, s) > MAX_KERNEL:
        raise DlaError(NvError.NotSupported, f"layer '{layer.name}': a {r}x{s} kernel (NVDLA's convolution "
                                             f"takes at most {MAX_KERNEL}x{MAX_KERNEL})")
    (dy, dx), (sy, sx) = a["dilations"], a["strides"]
    left, right, top, bottom = a["pads"]
    oh = (h + top + bottom - ((r - 1) * dy + 1)) // sy + 1
    ow = (w + left + right - ((s - 1) * dx + 1)) // sx + 1
    if oh < 1 or ow < 1:
        raise DlaError(NvError.BadValue, f"layer '{layer.name}': the kernel is larger than the padded input")
    multipliers = xq[0] * scales / yq[0]
    if wts.bias is not None:
        bias = np.round(np.asarray(wts.bias, np.float64) / (xq[0] * scales)).astype(np.int64)
    else:
        bias = np.zeros(k, np.int64)
    q64 = q.astype(np.int64)
    bias = bias - xq[1] * q64.sum(axis=(1, 2, 3))  # sum(w * (x - z)) = sum(w * x) - z * sum(w)
    bound = np.abs(q64).sum(axis=(1, 2, 3)).astype(np.float64) * 128
    cin_g, cout_g = c // groups, k // groups
    per = _chunks(groups, cin_g, cout_g, atom, group_channels) if groups > 1 else 1
    ops = []
    for g0 in range(0, groups, per):
        ko = slice(g0 * cout_g, (g0 + per) * cout_g)
        kernels = _block_diagonal(q[ko], per) if per > 1 else q[ko]
        x1, x2, cvt = requant.conv_stages(multipliers[ko], bias[ko], bound[ko], yq[1], relu, unit)
        sdp = SdpOp(None, Ref(""), x1=x1, x2=x2, cvt=cvt, name=layer.name)
        part = src if groups == 1 else Ref(src.buffer, src.c0 + g0 * cin_g, per * cin_g)
        op = ConvOp(
            part,
            kernels,
            sdp,
            stride=(sx, sy),
            dilation=(dx, dy),
            pads=(left, right, top, bottom),
            pad_value=xq[1],
            name=layer.name,
        )
        ops.append((op, g0 * cout_g, per * cout_g))
    return ops, (k, oh, ow)
