"""Pooling on PDP and local response normalization on CDP, any batch.

Pooling works per channel, so the batch is folded into the channels (the flat cube). 1-D pooling is
2-D pooling of rows (H = 1); 3-D pooling is separable, a 2-D pooling of every depth slice over (H, W)
then a pooling over D of the (H, W) results seen as rows: max of maxima, and averages of averages
(the count of a box window is the product of its counts per axis, with or without the padding).
Pooling with dilations, with a pad as large as the kernel, or MaxPool with its Indices output is a
CPU run. LRN mixes channels, so it
is one CDP operation per image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydla.compiler import cpuops
from pydla.compiler.layout import MAX_DIM, images, prod, spatial_2d, spatial_pads
from pydla.compiler.plan import Step, attr
from pydla.errors import DlaError, NvError

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering


def lower_pool(lw: Lowering, step: Step) -> None:
    n = step.head
    where = n.where()
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    out_shape = lw.g.shapes[step.output]
    if len(shape) < 3:
        raise DlaError(NvError.BadValue, f"{where}: input of shape {shape}: pooling needs (N, C, ...)")
    method = "max" if n.op_type in ("MaxPool", "GlobalMaxPool") else "avg"
    indices = len(n.outputs) > 1 and bool(n.outputs[1])
    integer_max = n.op_type == "MaxPool" and not lw.is_float(src) and not indices
    x = None if integer_max else lw.cube(src, where)  # the device pools floating point only
    out = None if integer_max else lw.cube(step.output, where)
    if n.op_type.startswith("Global"):
        assert x is not None and out is not None
        lw.tb.pdp(x, out, kernel=x.shape[1:], stride=(1, 1), method=method)
        return
    nd = len(shape) - 2
    kernel = [int(k) for k in attr(n, "kernel_shape", [])]
    strides = [int(s) for s in attr(n, "strides", [1] * nd)]
    dilations = [int(d) for d in attr(n, "dilations", [1] * nd)]
    if len(kernel) != nd or len(strides) != nd or len(dilations) != nd:
        raise DlaError(NvError.BadValue, f"{where}: kernel_shape {kernel}, strides {strides} for a "
                                         f"rank-{len(shape)} input")
    begins, ends = spatial_pads(lw.auto_pad(n), attr(n, "pads", None), shape[2:],
                                kernel, strides, dilations)
    if len(n.outputs) > 1 and n.outputs[1]:
        # PDP computes the maxima, not their positions: the Indices output makes it a CPU run.
        cpuops.maxpool_indices_run(lw, step, kernel, strides, begins + ends, dilations)
        return
    if (integer_max or any(d != 1 for d in dilations) or nd > 3
            or any(max(b, e) >= k for b, e, k in zip(begins, ends, kernel, strict=True))):
        cpuops.pool_run(lw, step, kernel, strides, begins + ends, dilations)
        return
    assert x is not None and out is not None
    include = bool(attr(n, "count_include_pad", 0))
    if nd <= 2:
        b2, e2 = spatial_2d(begins, 0), spatial_2d(ends, 0)
        lw.tb.pdp(x, out, kernel=spatial_2d(kernel, 1), stride=spatial_2d(strides, 1),
                  pads=(b2[0], b2[1], e2[0], e2[1]), method=method, count_include_pad=include)
        return
    # 3-D: (H, W) of every depth slice first, then D.
    nc, (d, h, w) = prod(shape[:2]), shape[2:]
    do, ho, wo = out_shape[2:]
    if max(nc * d, ho * wo) > MAX_DIM:
        cpuops.pool_run(lw, step, kernel, strides, begins + ends, dilations)
        return
    el = lw.np_dtype.itemsize
    buf, offset = lw.temp(nc * d * ho * wo * el)
    xs, xo = lw.storage(src)
    ys, yo = lw.storage(step.output)
    lw.tb.pdp(lw.tb.cube(xs, (nc * d, h, w), offset=xo), lw.tb.cube(buf, (nc * d, ho, wo), offset=offset),
              kernel=(kernel[1], kernel[2]), stride=(strides[1], strides[2]),
              pads=(begins[1], begins[2], ends[1], ends[2]), method=method, count_include_pad=include)
    lw.tb.pdp(lw.tb.cube(buf, (nc, d, ho * wo), offset=offset), lw.tb.cube(ys, (nc, do, ho * wo), offset=yo),
              kernel=(kernel[0], 1), stride=(strides[0], 1), pads=(begins[0], 0, ends[0], 0),
              method=method, count_include_pad=include)


def lower_lrn(lw: Lowering, step: Step) -> None:
    n = step.head
    count, _ = images(lw.g.shapes[n.inputs[0]], n.where())
    for i in range(count):
        lw.tb.cdp(lw.image(n.inputs[0], i, n.where()), lw.image(step.output, i, n.where()),
                  size=int(attr(n, "size", 1)), alpha=float(attr(n, "alpha", 1e-4)),
                  beta=float(attr(n, "beta", 0.75)), bias=float(attr(n, "bias", 1.0)))
