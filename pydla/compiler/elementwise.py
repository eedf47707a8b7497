"""Element-wise work on SDP: activations, Add / Sub / Mul / Div / Max / Min with numpy broadcasting,
BatchNormalization, Clip with bounds given at run time.

Every tensor is its flat cube (batch folded into channels, see :mod:`pydla.compiler.layout`). A
constant operand is classified against the result's cube: one value (SDP's scalar operand), one value
per channel (per-channel operand, repeated for each image of a batch) or anything else (a full cube
of constants). A tensor operand computed at run time with a smaller shape is broadcast to the
result's shape by a BDMA copy first; a single value is read as SDP's scalar operand as it is.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.compiler import cpuops, movement
from pydla.compiler.layout import channel_values, flat_cube, prod
from pydla.compiler.plan import Step, attr
from pydla.errors import DlaError, NvError
from pydla.loadable.taskbuilder import Cube, Ref

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering

EW_OPS = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}


def classify(value: np.ndarray, shape: tuple[int, ...], cube: tuple[int, int, int]) -> tuple[str, np.ndarray]:
    """A constant broadcast to ``shape``, seen on ``cube``: ("scalar", [v]), ("per_channel", [C]) or
    ("cube", the whole cube)."""
    full = np.broadcast_to(np.asarray(value, dtype=np.float64), shape).reshape(cube)
    first = full.reshape(-1)[:1]
    if (full == first[0]).all():
        return "scalar", first
    if (full == full[:, :1, :1]).all():
        return "per_channel", full[:, 0, 0].copy()
    return "cube", full


INT_OPS = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}


def lower_sdp(lw: Lowering, step: Step) -> None:
    op = step.head.op_type
    dtype = lw.g.dtypes[step.output]
    integer = dtype.kind in "iu"
    if op in INT_OPS and (integer or (dtype.kind == "f" and dtype != np.float32)):
        # Integers exactly, a model's float64 / float16 in its type: on the CPU.
        cpuops.eltwise_cpu_run(lw, step, INT_OPS[op])
    elif integer and op == "Clip":
        cpuops.clip_int_run(lw, step)
    elif op == "BatchNormalization":
        _batchnorm(lw, step)
    elif op in EW_OPS:
        _eltwise(lw, step)
    elif op == "Clip" and any(i and i not in lw.g.consts for i in step.head.inputs[1:]):
        _clip_runtime(lw, step)
    elif op == "PRelu":
        _prelu(lw, step)
    elif op == "HardSwish":
        _hardswish(lw, step)
    else:
        n = step.head
        out = lw.cube(step.output, n.where())
        # HardSigmoid alone: SDP's scale and shift, then a clamp (fused after a convolution, the
        # activation's lookup table: lw.activation)
        kw = (hard_sigmoid_alone(lw, float(attr(n, "alpha", 0.2)), float(attr(n, "beta", 0.5)), out.shape[0],
                                 n.where()) if op == "HardSigmoid" else lw.activation(n, out.shape[0]))
        lw.tb.sdp(lw.cube(n.inputs[0], n.where()), out, **kw)


def _const_operand(lw: Lowering, kind: str, values: np.ndarray, like: Cube) -> Cube | Ref:
    if kind == "cube":
        ref = lw.const(values)
        el = lw.np_dtype.itemsize
        return Cube(ref.buffer, ref.offset, like.shape, lw.precision, like.shape[2] * el,
                    like.shape[1] * like.shape[2] * el)
    return lw.const(values)


def _tensor_cube(lw: Lowering, name: str, out_shape: tuple[int, ...], where: str) -> Cube:
    """``name`` as a cube of the result's shape: itself, or broadcast into a temporary."""
    if lw.g.shapes[name] == out_shape:
        return lw.cube(name, where)
    lw.cube(name, where)  # checks that it is float32
    buf, offset = movement.broadcast(lw, name, out_shape, where)
    return lw.tb.cube(buf, flat_cube(out_shape, where), offset=offset)


def _eltwise(lw: Lowering, step: Step) -> None:
    n = step.head
    where = n.where()
    a, b = n.inputs[0], n.inputs[1]
    ew_op = EW_OPS[n.op_type]
    out = lw.cube(step.output, where)
    out_shape = lw.g.shapes[step.output]
    if a in lw.g.consts or b in lw.g.consts:
        swap = a in lw.g.consts
        tensor, other = (b, a) if swap else (a, b)
        x = _tensor_cube(lw, tensor, out_shape, where)
        kind, values = classify(lw.g.consts[other], out_shape, out.shape)
        lw.tb.sdp(x, out, ew=_const_operand(lw, kind, values, out), ew_op=ew_op, ew_mode=kind, ew_swap=swap)
        return
    el = lw.np_dtype.itemsize
    for tensor, other, swap in ((a, b, False), (b, a, True)):
        if prod(lw.g.shapes[other]) == 1 and lw.g.shapes[tensor] == out_shape:
            lw.cube(other, where)  # checks that it is float32
            buf, offset = lw.storage(other)
            lw.tb.sdp(lw.cube(tensor, where), out, ew=lw.tb.ref(buf, el, offset), ew_op=ew_op,
                      ew_mode="scalar", ew_swap=swap)
            return
        if _per_channel_tensor(lw, other, tensor, out_shape, out):
            lw.cube(other, where)  # checks that it is float32
            buf, offset = lw.storage(other)
            lw.tb.sdp(lw.cube(tensor, where), out, ew=lw.tb.ref(buf, out.shape[0] * el, offset), ew_op=ew_op,
                      ew_mode="per_channel", ew_swap=swap)
            return
    lw.tb.sdp(_tensor_cube(lw, a, out_shape, where), out, ew=_tensor_cube(lw, b, out_shape, where),
              ew_op=ew_op)


def _per_channel_tensor(lw: Lowering, other: str, tensor: str, out_shape: tuple[int, ...], out: Cube) -> bool:
    """Whether ``other`` (computed) holds one value per channel of a batch-1 result that ``tensor``
    has the shape of: a squeeze-excite gate (1, C, 1, 1) times its (1, C, H, W) map. SDP then reads
    it as its per-channel operand, where it lies, instead of a BDMA broadcast into a temporary and
    an operand cube (MobileNet-v3-small: 9 copies and operations fewer)."""
    shape = lw.g.shapes[other]
    if (len(out_shape) < 2 or out_shape[0] != 1 or lw.g.shapes[tensor] != out_shape
            or len(shape) != len(out_shape)):
        return False
    # The cube's channels must be axis 1 (not a dense cube of a tensor beyond the device's sizes).
    channels_first = (out_shape[1], prod(out_shape[2:-1]), out_shape[-1]) if len(out_shape) > 2 \
        else (out_shape[1], 1, 1)
    return (tuple(out.shape) == channels_first and shape[1] == out_shape[1]
            and all(d == 1 for i, d in enumerate(shape) if i != 1))


def _clip_runtime(lw: Lowering, step: Step) -> None:
    """min(max(x, lo), hi) with lo or hi given at run time: SDP max / min with a scalar operand
    read from memory, one operation per bound (in that order, as ONNX: lo > hi gives hi)."""
    n = step.head
    where = n.where()
    out = lw.cube(step.output, where)
    src: Cube = lw.cube(n.inputs[0], where)
    el = lw.np_dtype.itemsize
    for index, op in ((1, "max"), (2, "min")):
        name = n.inputs[index] if index < len(n.inputs) else ""
        if not name:
            continue
        if name in lw.g.consts:
            bound = float(lw.g.consts[name])
            clip = (bound, math.inf) if op == "max" else (-math.inf, bound)
            lw.tb.sdp(src, out, act="clamp", clip=clip)
        else:
            if prod(lw.g.shapes[name]) != 1:
                raise DlaError(NvError.BadValue, f"{where}: Clip bound '{name}' of shape {lw.g.shapes[name]}")
            lw.cube(name, where)  # checks that it is float32
            buf, offset = lw.storage(name)
            lw.tb.sdp(src, out, ew=lw.tb.ref(buf, el, offset), ew_op=op, ew_mode="scalar")
        src = out


def _prelu(lw: Lowering, step: Step) -> None:
    n = step.head
    where = n.where()
    out = lw.cube(step.output, where)
    x = lw.cube(n.inputs[0], where)
    kind, values = classify(lw.const_input(n, 1, "slope"), lw.g.shapes[step.output], out.shape)
    if kind == "scalar":
        lw.tb.sdp(x, out, act="leaky_relu", alpha=float(values[0]))
    elif kind == "per_channel":
        lw.tb.sdp(x, out, act="prelu", prelu=lw.const(values))
    else:
        # A slope varying within a channel: min(x, 0) * slope into a temporary, then max(x, 0)
        # plus it (SDP applies its element-wise operation before its activation, so two passes).
        el = lw.np_dtype.itemsize
        buf, offset = lw.temp(prod(out.shape) * el)
        neg = lw.tb.cube(buf, out.shape, offset=offset, precision=lw.precision)
        lw.tb.sdp(x, neg, ew=lw.const(np.zeros(1)), ew_op="min", ew_mode="scalar")
        lw.tb.sdp(neg, neg, ew=_const_operand(lw, "cube", values, out), ew_op="mul", ew_mode="cube")
        lw.tb.sdp(x, out, act="relu")
        lw.tb.sdp(out, out, ew=neg, ew_op="add")


def _hardswish(lw: Lowering, step: Step) -> None:
    """x * HardSigmoid(x) (alpha 1/6, beta 0.5): the gate by SDP's lookup table into a temporary,
    then SDP's element-wise product with x."""
    n = step.head
    where = n.where()
    out = lw.cube(step.output, where)
    x = lw.cube(n.inputs[0], where)
    buf, offset = lw.temp(prod(out.shape) * lw.np_dtype.itemsize)
    gate = lw.tb.cube(buf, out.shape, offset=offset, precision=lw.precision)
    lw.tb.sdp(x, gate, **hard_sigmoid_alone(lw, 1.0 / 6.0, 0.5, out.shape[0], where))
    lw.tb.sdp(gate, out, ew=x, ew_op="mul", ew_mode="cube")


def hard_sigmoid_alone(lw: Lowering, alpha: float, beta: float, channels: int, where: str) -> dict[str, Any]:
    """HardSigmoid in an SDP operation of its own (no bias, no element-wise operand): in fp32, SDP's
    batch-norm stage as the line (x * alpha + beta, each step rounded to float32 as onnxruntime's
    is) then the clamp activation to [0, 1]: a few passes over the cube instead of the lookup
    table's interpolation (MobileNet-v3-small: 19 HardSwish gates, 12% of its device time). In fp16
    alpha and beta would be rounded to half: the lookup table, whose ends are float32."""
    alpha, beta = float(np.float32(alpha)), float(np.float32(beta))
    if lw.precision != "fp32" or alpha == 0 or channels < 1:
        return hard_sigmoid(lw, alpha, beta, where)
    return {"scale": lw.const(np.full(channels, alpha)), "shift": lw.const(np.full(channels, beta)),
            "act": "clamp", "clip": (0.0, 1.0)}


def hard_sigmoid(lw: Lowering, alpha: float, beta: float, where: str) -> dict[str, Any]:
    """max(0, min(1, alpha * x + beta)) as SDP's lookup-table activation: a table of two points where
    the line meets 0 and 1; the table's linear interpolation is the line between them, and SDP
    holds the end values outside (0 and 1: the clip)."""
    alpha, beta = float(np.float32(alpha)), float(np.float32(beta))
    if alpha == 0:  # the planner keeps these CPU runs
        raise DlaError(NvError.NotSupported, f"{where}: HardSigmoid with alpha 0 on SDP")
    zero, one = -beta / alpha, (1.0 - beta) / alpha
    start, end = min(zero, one), max(zero, one)
    if not (math.isfinite(float(np.float32(start))) and math.isfinite(float(np.float32(end)))
            and np.float32(start) < np.float32(end)):
        raise DlaError(NvError.NotSupported, f"{where}: HardSigmoid alpha {alpha}, beta {beta}: the line "
                                             "meets 0 and 1 outside float32's range")
    table = [0.0, 1.0] if alpha > 0 else [1.0, 0.0]
    return {"act": "lut", "lut": lw.tb.lut(table, start, end)}


def _batchnorm(lw: Lowering, step: Step) -> None:
    n = step.head
    where = n.where()
    if attr(n, "training_mode", 0):
        raise DlaError(NvError.NotSupported, f"{where}: training_mode=1 (batch statistics and running "
                                             "averages) is training, not inference")
    shape = lw.g.shapes[n.inputs[0]]
    if len(shape) < 2:
        raise DlaError(NvError.BadValue, f"{where}: input of shape {shape}")
    x = lw.cube(n.inputs[0], where)
    out = lw.cube(step.output, where)
    images, channels = shape[0], shape[1]
    if x.shape[0] != images * channels:
        raise DlaError(NvError.NotSupported, f"{where}: {images}x{channels} channels exceed a device cube")
    if all(i in lw.g.consts for i in n.inputs[1:5]):
        scale, shift = lw.bn_params(n)
        lw.tb.sdp(x, out, scale=lw.const(np.tile(scale, images)), shift=lw.const(np.tile(shift, images)))
        return
    params = cpuops.batchnorm_params(lw, n, images)
    half = params.size // 2
    lw.tb.sdp(x, out, scale=lw.tb.ref(params.buffer, half, params.offset),
              shift=lw.tb.ref(params.buffer, half, params.offset + half))


def _one_value(value: np.ndarray, n: Any, what: str) -> float:
    """A bound that ONNX defines as a scalar (onnxruntime also takes one element of any shape)."""
    if value.size != 1:
        raise DlaError(NvError.BadValue, f"{n.where()}: {what} has shape {value.shape}; a scalar is expected")
    return float(value.reshape(-1)[0])


def activation_kwargs(lw: Lowering, n: Any, channels: int, axis: int = 1) -> dict[str, Any]:
    """SDP's activation for node ``n`` (fused after a convolution of ``channels`` outputs, or alone)."""
    op = n.op_type
    if op == "Relu":
        return {"act": "relu"}
    if op == "LeakyRelu":
        return {"act": "leaky_relu", "alpha": float(attr(n, "alpha", 0.01))}
    if op == "Sigmoid":
        return {"act": "sigmoid"}
    if op == "Tanh":
        return {"act": "tanh"}
    if op == "HardSigmoid":
        return hard_sigmoid(lw, float(attr(n, "alpha", 0.2)), float(attr(n, "beta", 0.5)), n.where())
    if op == "Clip":
        lo = attr(n, "min", -math.inf)
        hi = attr(n, "max", math.inf)
        if len(n.inputs) > 1 and n.inputs[1]:
            lo = _one_value(lw.const_input(n, 1, "min"), n, "min")
        if len(n.inputs) > 2 and n.inputs[2]:
            hi = _one_value(lw.const_input(n, 2, "max"), n, "max")
        return {"act": "clamp", "clip": (float(lo), float(hi))}
    if op == "PRelu":
        # ``axis`` of the result is the channels of the cube SDP works on (the planner fuses a
        # PRelu only when its slope varies along that axis alone).
        slope = lw.const_input(n, 1, "slope")
        values = channel_values(slope, lw.g.shapes[n.outputs[0]], axis)
        if values is None or values.size != channels:
            raise DlaError(NvError.NotSupported,
                           f"{n.where()}: slope of shape {slope.shape} is not one value per channel")
        return {"act": "prelu", "prelu": lw.const(values)}
    raise DlaError(NvError.NotSupported, f"{n.where()}: not an activation")
