"""Data movement lowered to BDMA copies (bytes are bytes: any rank, any element type): copies
between graph inputs and outputs, Transpose, Concat, Split, Slice, constant Pad, nearest Resize by
whole factors, and the broadcasting of an operand to the shape of an element-wise result.

What the device cannot do from what is known at compile time — a Slice or a Pad whose parameters
arrive at run time, negative steps, reflect / edge / wrap padding, other Resize modes — is a CPU run
of pydla's CPU library (:mod:`pydla.compiler.cpuops`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pydla.compiler import cpuops
from pydla.compiler.layout import (
    broadcast_strides,
    copy_plan,
    dense_strides,
    flat_cube,
    images,
    normalize_axis,
    prod,
)
from pydla.compiler.plan import Step, attr
from pydla.errors import DlaError, NvError
from pydla.loadable.taskbuilder import Ref

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering


def bdma_copy(lw: Lowering, src: tuple[str, int], dst: tuple[str, int], shape: Sequence[int],
              src_strides: Sequence[int], dst_strides: Sequence[int], element: int, where: str) -> None:
    """Copy the elements of ``shape`` from ``src`` (buffer, byte offset) to ``dst`` with the given
    byte strides."""
    for c in copy_plan(shape, src_strides, dst_strides, element, where):
        s_ref = lw.tb.ref(src[0], c.extent(c.src_line, c.src_surf), src[1] + c.src)
        d_ref = lw.tb.ref(dst[0], c.extent(c.dst_line, c.dst_surf), dst[1] + c.dst)
        lw.tb.bdma(s_ref, d_ref, line_size=c.line_bytes, line_repeat=c.lines, src_line_stride=c.src_line,
                   dst_line_stride=c.dst_line, surf_repeat=c.surfaces, src_surf_stride=c.src_surf,
                   dst_surf_stride=c.dst_surf)


def _ref(ref: Ref) -> tuple[str, int]:
    return ref.buffer, ref.offset


def copy(lw: Lowering, step: Step) -> None:
    """A graph input or output that is a reshape of another: the same bytes, copied."""
    src, where = step.inputs[0], step.head.where()
    el = lw.elsize(src)
    count = prod(lw.g.shapes[src])
    bdma_copy(lw, lw.storage(src), lw.storage(step.output), (count,), (el,), (el,), el, where)


def constant(lw: Lowering, step: Step) -> None:
    """An output known at compile time: its bytes copied from the weights."""
    name = step.output
    el = lw.elsize(name)
    ref = lw.const_raw(lw.g.consts[name], lw.storage_dtype(name))
    count = prod(lw.g.shapes[name])
    bdma_copy(lw, _ref(ref), lw.storage(name), (count,), (el,), (el,), el, step.head.where())


def broadcast(lw: Lowering, tensor: str, out_shape: tuple[int, ...], where: str,
              src: tuple[str, int] | None = None) -> tuple[str, int]:
    """``tensor`` (or a copy of it at ``src``) broadcast to ``out_shape`` (numpy rules) in a
    temporary: its (buffer, offset)."""
    el = lw.elsize(tensor)
    shape = lw.g.shapes[tensor]
    if np.broadcast_shapes(shape, out_shape) != out_shape:
        raise DlaError(NvError.BadValue, f"{where}: '{tensor}' of shape {shape} does not broadcast to "
                                         f"{out_shape}")
    dst = lw.temp(prod(out_shape) * el)
    bdma_copy(lw, lw.storage(tensor) if src is None else src, dst, out_shape,
              broadcast_strides(shape, out_shape, el), dense_strides(out_shape, el), el, where)
    return dst


def expand(lw: Lowering, step: Step) -> None:
    """Expand of a computed tensor: one BDMA broadcast copy (stride 0 along the expanded axes)
    straight into the result, no CPU run (an attention mask expanded to (B, 1, T, T)). A constant's
    Expand too large to fold, or one whose element sizes differ where they are stored, stays the
    CPU library's."""
    src, out = step.head.inputs[0], step.output
    if src in lw.g.consts or lw.elsize(src) != lw.elsize(out):
        cpuops.expand_run(lw, step)
        return
    el = lw.elsize(out)
    shape = lw.g.shapes[out]
    src_strides, dst_strides = broadcast_strides(lw.g.shapes[src], shape, el), dense_strides(shape, el)
    try:
        copy_plan(shape, src_strides, dst_strides, el, step.head.where())
    except DlaError:  # more BDMA operations than a copy may take: one CPU run does it instead
        cpuops.expand_run(lw, step)
        return
    bdma_copy(lw, lw.storage(src), lw.storage(out), shape, src_strides, dst_strides, el, step.head.where())


def transpose(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    perm = [int(p) for p in attr(n, "perm", list(range(len(shape)))[::-1])]
    if sorted(perm) != list(range(len(shape))):
        raise DlaError(NvError.BadValue, f"{n.where()}: perm {perm} for a rank-{len(shape)} tensor")
    if len(shape) == 4 and perm[0] == 0 and lw.is_float(src):
        # RUBIK transposes each image's (C, H, W) cube.
        count, _ = images(shape, n.where())
        for i in range(count):
            lw.tb.rubik(lw.image(src, i, n.where()), lw.image(step.output, i, n.where()), mode="transpose",
                        perm=(perm[1] - 1, perm[2] - 1, perm[3] - 1))
        return
    el = lw.elsize(src)
    strides = dense_strides(shape, el)
    out_shape = tuple(shape[p] for p in perm)
    bdma_copy(lw, lw.storage(src), lw.storage(step.output), out_shape, [strides[p] for p in perm],
              dense_strides(out_shape, el), el, n.where())


def concat(lw: Lowering, step: Step) -> None:
    n = step.head
    out_shape = lw.g.shapes[step.output]
    axis = normalize_axis(int(attr(n, "axis", 1)), len(out_shape), n.where())
    el = lw.elsize(step.output)
    out_strides = dense_strides(out_shape, el)
    buf, base = lw.storage(step.output)
    start = 0
    for t in n.inputs:
        shape = lw.g.shapes[t]
        src = lw.storage(t) if t not in lw.g.consts else _ref(lw.const_raw(lw.g.consts[t],
                                                                          lw.storage_dtype(step.output)))
        if prod(shape):
            bdma_copy(lw, src, (buf, base + start * out_strides[axis]), shape, dense_strides(shape, el),
                      out_strides, el, n.where())
        start += shape[axis]


def split(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    axis = normalize_axis(int(attr(n, "axis", 0)), len(shape), n.where())
    el = lw.elsize(src)
    strides = dense_strides(shape, el)
    start = 0
    for name in n.outputs:
        part = lw.g.shapes[name][axis] if name else 0
        if name == step.output:
            buf, offset = lw.storage(src)
            out_shape = lw.g.shapes[name]
            bdma_copy(lw, (buf, offset + start * strides[axis]), lw.storage(name), out_shape, strides,
                      dense_strides(out_shape, el), el, n.where())
            return
        start += part


def slice_(lw: Lowering, step: Step) -> None:
    n = step.head
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    rank = len(shape)
    params = [n.inputs[i] if i < len(n.inputs) else "" for i in range(1, 5)]
    if not all(p == "" or p in lw.g.consts for p in params):
        cpuops.slice_run(lw, step)  # starts / ends / axes / steps given at run time
        return
    starts = lw.const_input(n, 1, "starts").astype(np.int64).ravel()
    axes = (lw.const_input(n, 3, "axes").astype(np.int64).ravel() if params[2]
            else np.arange(len(starts)))
    steps = (lw.const_input(n, 4, "steps").astype(np.int64).ravel() if params[3]
             else np.ones(len(starts), np.int64))
    if any(s < 1 for s in steps):
        cpuops.slice_run(lw, step)  # negative steps read backwards: strides cannot
        return
    begin = [0] * rank
    step_of = [1] * rank
    for a, s0, st in zip(axes, starts, steps, strict=True):
        k = normalize_axis(int(a), rank, n.where())
        dim = shape[k]
        begin[k] = int(min(max(s0 + dim if s0 < 0 else s0, 0), dim))
        step_of[k] = int(st)
    el = lw.elsize(src)
    strides = dense_strides(shape, el)
    buf, offset = lw.storage(src)
    out_shape = lw.g.shapes[step.output]
    offset += sum(b * s for b, s in zip(begin, strides, strict=True))
    bdma_copy(lw, (buf, offset), lw.storage(step.output), out_shape,
              [st * s for st, s in zip(step_of, strides, strict=True)], dense_strides(out_shape, el), el,
              n.where())


def pad(lw: Lowering, step: Step) -> None:
    n = step.head
    mode = lw.text_attr(n, "mode", "constant")
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    rank = len(shape)
    params = [n.inputs[i] if i < len(n.inputs) else "" for i in range(1, 4)]
    dynamic = not all(p == "" or p in lw.g.consts for p in params)
    if mode != "constant" or dynamic:
        cpuops.pad_run(lw, step, mode)
        return
    pads = (lw.const_input(n, 1, "pads").astype(np.int64).ravel() if params[0]
            else np.asarray(attr(n, "pads", []), np.int64))
    value = lw.const_input(n, 2, "constant_value").ravel() if params[1] else np.zeros(1)
    axes = ([normalize_axis(int(a), rank, n.where()) for a in lw.const_input(n, 3, "axes").ravel()]
            if params[2] else list(range(rank)))
    if len(pads) != 2 * len(axes):
        raise DlaError(NvError.BadValue, f"{n.where()}: {len(pads)} pads for {len(axes)} axes")
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = int(pads[i]), int(pads[i + len(axes)])
    out_shape = lw.g.shapes[step.output]
    el = lw.elsize(src)
    dtype = lw.storage_dtype(step.output)
    dst_buf, dst_off = lw.storage(step.output)
    out_strides = dense_strides(out_shape, el)
    if any(b > 0 for b in before) or any(a > 0 for a in after):
        row = lw.const_raw(np.full(out_shape[-1] if rank else 1, value[0] if value.size else 0), dtype)
        bdma_copy(lw, _ref(row), (dst_buf, dst_off), out_shape, [0] * (rank - 1) + [el], out_strides, el,
                  n.where())
    # The part of the input that lands in the output (negative pads crop it).
    src_start = [max(0, -b) for b in before]
    dst_start = [max(0, b) for b in before]
    size = [d - s - max(0, -a) for d, s, a in zip(shape, src_start, after, strict=True)]
    if min(size, default=1) < 1:
        return  # everything was cropped: the output is all padding
    strides = dense_strides(shape, el)
    buf, offset = lw.storage(src)
    bdma_copy(lw, (buf, offset + sum(s * t for s, t in zip(src_start, strides, strict=True))),
              (dst_buf, dst_off + sum(s * t for s, t in zip(dst_start, out_strides, strict=True))),
              size, strides, out_strides, el, n.where())


def resize(lw: Lowering, step: Step) -> None:
    """Nearest by whole factors of H and W on the device when the factors are known at compile
    time; everything else (linear, cubic, antialiasing filters) is a CPU run."""
    n = step.head
    src = n.inputs[0]
    mode = lw.text_attr(n, "mode", "nearest")
    ctm = lw.text_attr(n, "coordinate_transformation_mode", "half_pixel")
    rounding = lw.text_attr(n, "nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic"):
        raise DlaError(NvError.NotSupported,
                       f"{n.where()}: Resize mode '{mode}' is not one of nearest, linear, cubic")
    shape, out_shape = lw.g.shapes[src], lw.g.shapes[step.output]
    scales = cpuops.static_resize_scales(lw, n, shape, out_shape)
    # On the device: output (y, x) reads input (y // fy, x // fx): half_pixel (or pytorch_half_pixel)
    # with a round mode (the fractions never reach .5), or asymmetric with floor.
    exact = ((ctm in ("half_pixel", "pytorch_half_pixel") and rounding.startswith("round"))
             or (ctm == "asymmetric" and rounding == "floor"))
    whole = (scales is not None and len(shape) == 4 and shape[:2] == out_shape[:2]
             and all(float(s).is_integer() and o == i * int(s)
                     for o, i, s in zip(out_shape[2:], shape[2:], scales[2:], strict=True)))
    if mode != "nearest" or not exact or not whole or not lw.is_float(src):
        cpuops.resize_run(lw, step)
        return
    c, h, w = flat_cube(shape, n.where())
    x = lw.cube(src, n.where())
    out = lw.cube(step.output, n.where())
    fy, fx = out_shape[2] // h, out_shape[3] // w
    el = lw.elsize(src)
    for dy in range(fy):
        for dx in range(fx):
            # Element (c, y, x) goes to (c, fy*y + dy, fx*x + dx): rows (c, y) as surfaces.
            d_off = out.offset + (dy * out_shape[3] + dx) * el
            lw.tb.bdma(lw.tb.ref(x.buffer, x.extent, x.offset),
                       lw.tb.ref(out.buffer, out.extent - (d_off - out.offset), d_off),
                       line_size=el, line_repeat=w, src_line_stride=el, dst_line_stride=fx * el,
                       surf_repeat=c * h, src_surf_stride=w * el, dst_surf_stride=fy * out_shape[3] * el)
