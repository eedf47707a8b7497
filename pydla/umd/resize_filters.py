"""Interpolation weights for ONNX Resize along one axis: cubic, and linear or cubic with an
antialiasing filter (opset 18), as the operator's specification defines them.

The weights of one axis form an (n_out, n_in) matrix: output position i reads the input around its
source coordinate ``origin[i]`` (from the coordinate transformation mode). The taps are the input
positions ``f + t`` for ``t`` in ``start .. start + n - 1``, where ``f = ceil(origin) - 1`` and
``ratio = origin - f`` lies in (0, 1] (ONNX prefers the left neighbour, so a whole-number coordinate
has ratio 1). A tap's weight is the filter at ``s * (t - ratio)``, with ``s`` = 1, or the scale when
antialiasing a downscale (the filter then widens by 1 / scale and is normalised to sum 1). Taps
outside the input read its edge value, or, with ``exclude_outside``, get weight 0 and the rest are
normalised again.

Usage::

    w = resize_weights("cubic", origin, n_in, scale=2.0)      # (n_out, n_in)
    y = np.tensordot(w, x, axes=([1], [axis]))                # the axis comes first in y
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError

F64 = npt.NDArray[np.float64]


def _cubic(x: F64, a: float) -> F64:
    """Keys' cubic convolution kernel with coefficient ``a`` (ONNX's cubic_coeff_a)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    out = np.zeros_like(x)
    inner, outer = x <= 1, (x > 1) & (x < 2)
    out[inner] = near[inner]
    out[outer] = far[outer]
    return out


def _triangle(x: F64) -> F64:
    out = 1 - np.abs(x)
    np.clip(out, 0.0, 1.0, out=out)
    return out


def resize_weights(mode: str, origin: F64, n_in: int, scale: float, *, cubic_coeff_a: float = -0.75,
                   exclude_outside: bool = False, antialias: bool = False) -> F64:
    """The (len(origin), n_in) interpolation matrix of one axis for ``mode`` "linear" or "cubic"."""
    if mode not in ("linear", "cubic"):
        raise DlaError(NvError.NotSupported, f"resize weights: mode '{mode}' (linear or cubic)")
    if not scale > 0 or n_in < 1:
        raise DlaError(NvError.BadParameter, f"resize weights: scale {scale}, {n_in} inputs")
    s = min(scale, 1.0) if antialias else 1.0
    reach = 1.0 if mode == "linear" else 2.0  # the filter's half-width at s = 1
    start = int(np.floor(-reach / s)) + 1
    taps = np.arange(start, 1 - start + 1, dtype=np.float64)  # start .. -start + 1: 2 - 2 * start taps
    f = np.ceil(origin) - 1
    ratio = origin - f
    args = s * (taps[None, :] - ratio[:, None])
    k = _triangle(args) if mode == "linear" else _cubic(args, cubic_coeff_a)
    if antialias:
        k = k / k.sum(axis=1, keepdims=True)
    index = (f[:, None] + taps[None, :]).astype(np.int64)
    if exclude_outside:
        k = np.where((index < 0) | (index >= n_in), 0.0, k)
        total = k.sum(axis=1, keepdims=True)
        k = np.divide(k, total, out=np.zeros_like(k), where=total != 0)
    weights = np.zeros((origin.size, n_in), dtype=np.float64)
    rows = np.broadcast_to(np.arange(origin.size)[:, None], index.shape)
    np.add.at(weights, (rows, np.clip(index, 0, n_in - 1)), k)
    return weights
