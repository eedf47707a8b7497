"""pydla's CPU library: ONNX Resize (the functions ``resize``, ``resize_nd`` and ``resize_filtered`` of
:mod:`pydla.umd.cpulib`, which documents their arguments): nearest, linear and cubic interpolation,
every coordinate transformation mode, the antialiasing filter of :mod:`pydla.umd.resize_filters`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.umd.cpuargs import floats_arg, ints_arg, shape_arg, tensor_arg
from pydla.umd.resize_filters import resize_weights


def _source_coords(n_out: int, n_in: int, scale: float, mode: str) -> Any:
    i = np.arange(n_out, dtype=np.float64)
    if mode == "align_corners":
        return i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return i / scale
    if mode == "pytorch_half_pixel" and n_out == 1:
        return np.zeros(n_out)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return (i + 0.5) / scale - 0.5
    raise DlaError(NvError.NotSupported, f"cpulib: coordinate_transformation_mode '{mode}'")


def resize(args: list[Any]) -> None:
    """resize(src, dst, in_shape, out_shape, mode nearest|linear, coordinate_transformation_mode,
    nearest_mode, src_dtype, dst_dtype): ONNX Resize over the last two axes of an NCHW tensor."""
    src, dst, in_text, out_text, mode, ctm, nearest_mode, src_dtype, dst_dtype = args
    in_shape, out_shape = shape_arg(in_text), shape_arg(out_text)
    if len(in_shape) != 4 or len(out_shape) != 4 or in_shape[:2] != out_shape[:2]:
        raise DlaError(NvError.NotSupported, f"cpulib: resize {in_shape} to {out_shape}: only H and W")
    x = tensor_arg(src, in_shape, src_dtype, "source").astype(np.float64)
    y = tensor_arg(dst, out_shape, dst_dtype, "destination")
    (h, w), (ho, wo) = in_shape[2:], out_shape[2:]
    ys = _source_coords(ho, h, ho / h, ctm)
    xs = _source_coords(wo, w, wo / w, ctm)
    if mode == "nearest":
        modes: dict[str, Callable[[Any], Any]] = {
            "round_prefer_floor": lambda v: np.ceil(v - 0.5),
            "round_prefer_ceil": lambda v: np.floor(v + 0.5),
            "floor": np.floor, "ceil": np.ceil}
        rounding = modes.get(nearest_mode)
        if rounding is None:
            raise DlaError(NvError.BadParameter, f"cpulib: nearest_mode '{nearest_mode}'")
        yi = np.clip(rounding(ys), 0, h - 1).astype(np.int64)
        xi = np.clip(rounding(xs), 0, w - 1).astype(np.int64)
        y[...] = x[:, :, yi][:, :, :, xi]
        return
    if mode != "linear":
        raise DlaError(NvError.NotSupported, f"cpulib: resize mode '{mode}'")
    ys, xs = np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)
    y0, x0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = x[:, :, y0][:, :, :, x0] * (1 - fx) + x[:, :, y0][:, :, :, x1] * fx
    bottom = x[:, :, y1][:, :, :, x0] * (1 - fx) + x[:, :, y1][:, :, :, x1] * fx
    y[...] = top * (1 - fy) + bottom * fy


def _origin(mode: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float]) -> Any:
    """Where each output position of one axis reads the input (ONNX Resize's coordinate modes; the
    resized length is ``scale * n_in``, which is not always the whole ``n_out``)."""
    i = np.arange(n_out, dtype=np.float64)
    length = scale * n_in
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        return n_in / 2 * (1 - n_out / length) + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if length != 1 else np.full(n_out, -0.5)
    if mode == "align_corners":
        return i * (n_in - 1) / (length - 1) if length != 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return i / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if length != 1:
            return start * (n_in - 1) + i * (end - start) * (n_in - 1) / (length - 1)
        return np.full(n_out, 0.5 * (start + end) * (n_in - 1))
    raise DlaError(NvError.NotSupported, f"cpulib: coordinate_transformation_mode '{mode}'")


ROUNDING: dict[str, Callable[[Any], Any]] = {
    "round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
    "floor": np.floor, "ceil": np.ceil}


def resize_nd(args: list[Any]) -> None:
    """resize_nd(src, dst, in_shape, out_shape, mode, ctm, nearest_mode, roi, scales, sizes, axes,
    keep_aspect_ratio_policy, extrapolation_value, src_dtype, dst_dtype): ONNX Resize, nearest or
    linear, separably along every resized axis."""
    _resize_any(args, -0.75, False, False)


def resize_filtered(args: list[Any]) -> None:
    """resize_filtered(the 15 arguments of resize_nd, cubic_coeff_a, exclude_outside, antialias)."""
    try:
        cubic_a, exclude, antialias = float(args[15]), bool(int(args[16])), bool(int(args[17]))
    except (TypeError, ValueError):
        raise DlaError(NvError.BadParameter, f"cpulib: resize_filtered options {args[15:]}") from None
    _resize_any(args[:15], cubic_a, exclude, antialias)


def _resize_any(args: list[Any], cubic_a: float, exclude_outside: bool, antialias: bool) -> None:
    (src, dst, in_text, out_text, mode, ctm, nearest_mode, roi_arg, scales_arg, sizes_arg, axes_text,
     policy, extrapolation, src_dtype, dst_dtype) = args
    in_shape, out_shape = shape_arg(in_text), shape_arg(out_text)
    rank = len(in_shape)
    axes = [a + rank if a < 0 else a for a in ints_arg(axes_text, "axes")] or list(range(rank))
    if len(out_shape) != rank or any(not 0 <= a < rank for a in axes):
        raise DlaError(NvError.BadParameter, f"cpulib: resize {in_shape} to {out_shape} over axes {axes}")
    if mode not in ("nearest", "linear", "cubic"):
        raise DlaError(NvError.NotSupported, f"cpulib: resize mode '{mode}'")
    rounding = ROUNDING.get(nearest_mode)
    if rounding is None:
        raise DlaError(NvError.BadParameter, f"cpulib: nearest_mode '{nearest_mode}'")
    scales, sizes = floats_arg(scales_arg, "scales"), ints_arg(sizes_arg, "sizes")
    roi = floats_arg(roi_arg, "roi")
    scale = [1.0] * rank
    if scales:
        if len(scales) != len(axes):
            raise DlaError(NvError.BadParameter, f"cpulib: {len(scales)} scales for axes {axes}")
        for a, v in zip(axes, scales, strict=True):
            scale[a] = v
    else:
        if len(sizes) != len(axes):
            raise DlaError(NvError.BadParameter, f"cpulib: sizes {sizes} for axes {axes}")
        ratios = [n / in_shape[a] for a, n in zip(axes, sizes, strict=True)]
        if policy == "not_larger":
            ratios = [min(ratios)] * len(axes)
        elif policy == "not_smaller":
            ratios = [max(ratios)] * len(axes)
        elif policy != "stretch":
            raise DlaError(NvError.BadParameter, f"cpulib: keep_aspect_ratio_policy '{policy}'")
        for a, v in zip(axes, ratios, strict=True):
            scale[a] = v
    if roi and len(roi) != 2 * len(axes):
        raise DlaError(NvError.BadParameter, f"cpulib: roi {roi} for axes {axes}")
    y = tensor_arg(dst, out_shape, dst_dtype, "destination", exact=True)
    x = tensor_arg(src, in_shape, src_dtype, "source").astype(np.float64)
    for k, a in enumerate(axes):
        n_in, n_out = in_shape[a], out_shape[a]
        box = (roi[k], roi[k + len(axes)]) if roi else (0.0, 1.0)
        if n_in == n_out and scale[a] == 1.0 and ctm != "tf_crop_and_resize":
            continue
        origin = _origin(ctm, n_in, n_out, scale[a], box)
        outside = (origin < 0) | (origin > n_in - 1) if ctm == "tf_crop_and_resize" else None
        view = [1] * rank
        view[a] = n_out
        if mode == "nearest":
            x = np.take(x, np.clip(rounding(origin), 0, n_in - 1).astype(np.int64), axis=a)
        elif mode == "cubic" or antialias:
            weights = resize_weights(mode, origin, n_in, scale[a], cubic_coeff_a=cubic_a,
                                     exclude_outside=exclude_outside, antialias=antialias)
            x = np.moveaxis(np.tensordot(weights, x, axes=([1], [a])), 0, a)
        else:
            pos = np.clip(origin, 0, n_in - 1)
            low = np.floor(pos).astype(np.int64)
            high = np.minimum(low + 1, n_in - 1)
            frac = (pos - low).reshape(view)
            x = np.take(x, low, axis=a) * (1 - frac) + np.take(x, high, axis=a) * frac
        if outside is not None and outside.any():
            x = np.where(outside.reshape(view), float(extrapolation), x)
    y[...] = x
