"""Gemm and MatMul as 1x1 convolutions on strided cubes.

``Y (M, N) = A (M, K) . B (K, N)``: the convolution's input cube is ``(K, M, 1)`` read straight from A
(its channel stride is A's column stride, its line stride A's row stride, so a transposed A costs
nothing), the weights are B transposed to ``(N, K)`` (done at compile time for a constant B, by one
BDMA copy for a B given at run time), and SDP writes the ``(N, M, 1)`` result cube with a channel
stride of one element and a line stride of a row of Y, which is Y in its own row-major layout.
Batched MatMul is one such pair per matrix of the (broadcast) batch, or a single pair with the rows
of every matrix of A when B is one matrix. Gemm's bias C is SDP's bias, per-channel, scalar or cube
operand, whichever its broadcast needs; alpha scales constant weights or is SDP's scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.compiler import movement
from pydla.compiler.fuse import ALPHA, TRANS_B
from pydla.compiler.layout import MAX_DIM, dense_strides, flat_cube, prod
from pydla.compiler.plan import Step, attr
from pydla.errors import DlaError, NvError
from pydla.loadable.taskbuilder import Cube, Ref

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering


@dataclass
class _Epilogue:
    """What SDP adds after the product, for every job of one Gemm / MatMul."""

    bias: Ref | None = None
    scale: Ref | None = None
    shift: Ref | None = None
    ew: tuple[str, Any] | None = None  # ("scalar" | "per_channel", Ref) or ("cube", (buffer, offset))
    act: dict[str, Any] = field(default_factory=dict)


def lower_gemm(lw: Lowering, step: Step) -> None:
    n = step.head
    where = n.where()
    a_name, b_name = n.inputs[0], n.inputs[1]
    a_shape, b_shape = lw.g.shapes[a_name], lw.g.shapes[b_name]
    el = lw.np_dtype.itemsize
    gemm = n.op_type == "Gemm"
    if gemm:
        if len(a_shape) != 2 or len(b_shape) != 2:
            raise DlaError(NvError.BadValue, f"{where}: Gemm of {a_shape} and {b_shape}")
        trans_a, trans_b = bool(attr(n, "transA", 0)), bool(attr(n, "transB", 0))
        alpha, beta = float(attr(n, "alpha", 1.0)), float(attr(n, "beta", 1.0))
    else:  # attention's K^T read as K, its scalar factors moved onto the product (pydla.compiler.fuse)
        trans_a, trans_b = False, bool(n.attrs.get(TRANS_B))
        alpha, beta = float(n.attrs.get(ALPHA, 1.0)), 0.0
    a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape  # a vector is one row ...
    b2 = (*b_shape, 1) if len(b_shape) == 1 else b_shape  # ... or one column
    m, k = (a2[-1], a2[-2]) if trans_a else (a2[-2], a2[-1])
    kb, cols = (b2[-1], b2[-2]) if trans_b else (b2[-2], b2[-1])
    if k != kb:
        raise DlaError(NvError.BadValue, f"{where}: inner dimensions {k} and {kb} differ")
    a_batch, b_batch = a2[:-2], b2[:-2]
    batch = tuple(np.broadcast_shapes(a_batch, b_batch))
    ew, act = lw.epilogue(step.nodes[1:], n.outputs[0], cols, axis=-1)
    epi = _gemm_epilogue(lw, step, m, cols, alpha, beta, act) if gemm else _Epilogue(act=act)
    if not gemm:
        epi = _matmul_epilogue(lw, n, ew, alpha, cols, act)
    scale_weights = alpha if epi.scale is None else 1.0
    y_buf, y_off = lw.storage(step.output)
    a_src = _operand(lw, a_name)
    a_strides = dense_strides(a2, el)
    row, col = (a_strides[-1], a_strides[-2]) if trans_a else (a_strides[-2], a_strides[-1])
    if prod(b_batch) == 1 and not trans_a:
        # One matrix B: the rows of all of A's matrices are one tall A (rows evenly spaced).
        weights = _weights(lw, b_name, b2, (0,) * len(b_batch), trans_b, cols, k, scale_weights, where)
        _jobs(lw, step, a_src, row, col, prod(a_batch) * m, k, weights, (y_buf, y_off), cols, epi)
        return
    a_bs = _batch_strides(a_batch, batch, m * k * el)
    y_step = m * cols * el
    # B given at run time as (K, N) would be copied into (N, K) weights for every matrix; the same
    # product transposed, Y^T = B^T . A^T, reads B^T straight from B as the input cube and takes A's
    # dense rows as its weights (attention's probabilities . V). Only without a per-column epilogue,
    # which would then run along the result's rows.
    swapped = (b_name not in lw.g.consts and not trans_b and not trans_a and not gemm and ew is None
               and "prelu" not in act and prod(b_batch) > 1)
    b_strides = dense_strides(b2, el)
    b_bs = _batch_strides(b_batch, batch, k * cols * el)
    b_src = lw.storage(b_name) if swapped else ("", 0)
    for i, index in enumerate(np.ndindex(*batch) if batch else [()]):
        a_off = a_src[1] + sum(j * s for j, s in zip(index, a_bs, strict=True))
        if swapped:
            b_off = b_src[1] + sum(j * s for j, s in zip(index, b_bs, strict=True))
            weights = lw.tb.ref(a_src[0], m * k * el, a_off)
            _jobs(lw, step, (b_src[0], b_off), b_strides[-1], b_strides[-2], cols, k, weights,
                  (y_buf, y_off + i * y_step), m, epi, transposed=True)
            continue
        b_index = tuple(j if d != 1 else 0 for j, d in zip(index[len(batch) - len(b_batch):], b_batch,
                                                           strict=True))
        weights = _weights(lw, b_name, b2, b_index, trans_b, cols, k, scale_weights, where)
        _jobs(lw, step, (a_src[0], a_off), row, col, m, k, weights, (y_buf, y_off + i * y_step), cols, epi)



def _batch_strides(own: tuple[int, ...], batch: tuple[int, ...], matrix: int) -> list[int]:
    """Byte strides of a broadcast batch index into a dense stack of ``matrix``-byte matrices."""
    strides = [s * matrix for s in dense_strides(own, 1)] if own else []
    lead = len(batch) - len(own)
    return [0 if i < lead or own[i - lead] == 1 else strides[i - lead] for i in range(len(batch))]


def _operand(lw: Lowering, name: str) -> tuple[str, int]:
    if name in lw.g.consts:
        ref = lw.const(lw.g.consts[name])
        return ref.buffer, ref.offset
    lw.cube(name, "matrix operand")  # checks that it is float32
    return lw.storage(name)


def _weights(lw: Lowering, name: str, b2: tuple[int, ...], index: tuple[int, ...], trans_b: bool,
             cols: int, k: int, alpha: float, where: str) -> Ref:
    """B's matrix ``index`` of its batch as dense (N, K) weights."""
    el = lw.np_dtype.itemsize
    if name in lw.g.consts:
        value = lw.g.consts[name].reshape(b2)[index].astype(np.float64)
        w = (value if trans_b else value.T) * alpha
        return lw.const(w.reshape(cols, k, 1, 1))
    if alpha != 1.0:
        raise DlaError(NvError.BadValue, f"{where}: internal: alpha of runtime weights not in SDP")
    buf, offset = lw.storage(name)
    strides = dense_strides(b2, el)
    offset += sum(j * s for j, s in zip(index, strides[:len(index)], strict=True))
    if trans_b:
        return lw.tb.ref(buf, cols * k * el, offset)
    t_buf, t_off = lw.temp(cols * k * el)  # B (K, N) -> weights (N, K)
    movement.bdma_copy(lw, (buf, offset), (t_buf, t_off), (cols, k), (strides[-1], strides[-2]),
                       (k * el, el), el, where)
    return lw.tb.ref(t_buf, cols * k * el, t_off)


def _jobs(lw: Lowering, step: Step, a: tuple[str, int], row: int, col: int, rows: int, k: int,
          weights: Ref, y: tuple[str, int], cols: int, epi: _Epilogue, transposed: bool = False) -> None:
    """CONV + SDP pairs for ``rows`` rows of A (at most MAX_DIM rows each). ``transposed``: the
    product computed is Y^T (``rows`` is Y's column count, ``cols`` its row count), written into Y."""
    el = lw.np_dtype.itemsize
    for first in range(0, rows, MAX_DIM):
        count = min(MAX_DIM, rows - first)
        x = lw.tb.cube(a[0], (k, count, 1), offset=a[1] + first * row, line_stride=max(row, el),
                       surf_stride=col)
        if transposed:  # channel c is Y's row c, line j its column first + j
            out = lw.tb.cube(y[0], (cols, count, 1), offset=y[1] + first * el, line_stride=el,
                             surf_stride=rows * el)
        else:
            out = lw.tb.cube(y[0], (cols, count, 1), offset=y[1] + first * cols * el, line_stride=cols * el,
                             surf_stride=el)
        conv = lw.tb.conv(x, weights, weight_shape=(cols, k, 1, 1))
        kwargs: dict[str, Any] = dict(epi.act)
        if epi.ew is not None:
            mode, operand = epi.ew
            if mode == "cube":
                ew: Cube | Ref = lw.tb.cube(operand[0], (cols, count, 1), line_stride=cols * el,
                                            offset=operand[1] + first * cols * el, surf_stride=el)
            else:
                ew = operand
            kwargs.update(ew=ew, ew_op="add", ew_mode=mode)
        lw.tb.sdp(conv, out, bias=epi.bias, scale=epi.scale, shift=epi.shift, **kwargs)


def _matmul_epilogue(lw: Lowering, n: Any, ew: Any, alpha: float, cols: int,
                     act: dict[str, Any]) -> _Epilogue:
    """A MatMul's SDP work: its column bias (constant) or operand (a vector computed at run time),
    fused by plan.group_steps (_column_bias), and
    its ALPHA factor when B is given at run time (a constant B takes it in its weights): SDP computes
    (x + bias) * scale + shift, so alpha * x + b is scale alpha and shift b."""
    epi = _Epilogue(act=act)
    if ew is not None and ew[0] == "cube":  # a vector computed at run time: SDP's per-channel operand
        buf, offset = lw.storage(ew[1])
        epi.ew = ("per_channel", lw.tb.ref(buf, cols * lw.elsize(ew[1]), offset))
        ew = None
    if ew is not None and ew[0] != "bias":
        raise DlaError(NvError.BadValue, f"{n.where()}: internal: a fused addition of kind {ew[0]}")
    bias = None if ew is None else np.asarray(ew[1], dtype=np.float64)
    if alpha != 1.0 and n.inputs[1] not in lw.g.consts:
        epi.scale = lw.const(np.full(cols, alpha))
        epi.shift = lw.const(bias if bias is not None else np.zeros(cols))
    elif bias is not None:
        epi.bias = lw.const(bias)
    return epi


def _gemm_epilogue(lw: Lowering, step: Step, m: int, cols: int, alpha: float, beta: float,
                   act: dict[str, Any]) -> _Epilogue:
    """Gemm's ``alpha * A.B + beta * C`` after the product (alpha folded into constant weights)."""
    n = step.head
    where = n.where()
    epi = _Epilogue(act=act)
    runtime_b = n.inputs[1] not in lw.g.consts
    c_name = n.inputs[2] if len(n.inputs) > 2 else ""
    if runtime_b and alpha != 1.0:
        epi.scale = lw.const(np.full(cols, alpha))
        epi.shift = lw.const(np.zeros(cols))
    if not c_name or beta == 0.0:
        return epi
    c_shape = lw.g.shapes[c_name]
    if np.broadcast_shapes(c_shape, (m, cols)) != (m, cols):
        raise DlaError(NvError.BadValue, f"{where}: C of shape {c_shape} does not broadcast to {(m, cols)}")
    if c_name in lw.g.consts:
        full = beta * np.broadcast_to(lw.g.consts[c_name].astype(np.float64), (m, cols))
        if (full == full[:1]).all():
            if epi.shift is not None:
                epi.shift = lw.const(full[0])
            else:
                epi.bias = lw.const(full[0])
        else:
            ref = lw.const(full)
            epi.ew = ("cube", (ref.buffer, ref.offset))
        return epi
    src = lw.storage(c_name)
    if beta != 1.0:  # beta * C into a temporary first
        el = lw.np_dtype.itemsize
        shape = flat_cube(c_shape, where)
        dst = lw.temp(prod(c_shape) * el)
        lw.tb.sdp(lw.cube(c_name, where), lw.tb.cube(dst[0], shape, offset=dst[1]),
                  ew=lw.const(np.array([beta])), ew_op="mul", ew_mode="scalar")
        src = dst
    el = lw.np_dtype.itemsize
    if prod(c_shape) == 1:
        epi.ew = ("scalar", lw.tb.ref(src[0], el, src[1]))
    elif len(c_shape) >= 1 and c_shape[-1] == cols and prod(c_shape) == cols:
        epi.ew = ("per_channel", lw.tb.ref(src[0], cols * el, src[1]))
    elif tuple(c_shape) == (m, cols):
        epi.ew = ("cube", src)
    else:
        epi.ew = ("cube", movement.broadcast(lw, c_name, (m, cols), where, src))
    return epi
