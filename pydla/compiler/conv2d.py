"""1-D and 2-D Conv and ConvTranspose on the CONV block: one CONV + SDP pair per image of the batch,
batch norm folded into constant weights and bias (else applied by SDP), the element-wise add and
activation after it fused into the SDP, constant weights laid out tap-major where the device
configuration's speed rules say it pays. 3-D ones are :mod:`pydla.compiler.conv3d`'s.

Usage: ``LOWER["conv"] = conv2d.lower_conv`` (pydla.compiler.lower)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.compiler import conv3d
from pydla.compiler.graph import Node
from pydla.compiler.layout import deconv_pads, images, prod, spatial_2d, spatial_pads
from pydla.compiler.plan import Step, attr
from pydla.errors import DlaError, NvError
from pydla.loadable.taskbuilder import Ref

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering


def lower_conv(lw: Lowering, step: Step) -> None:
    node = step.head
    where = node.where()
    x_name, w_name = node.inputs[0], node.inputs[1]
    shape, w_shape = lw.g.shapes[x_name], lw.g.shapes[w_name]
    groups = lw.check_conv(node, transpose=False)
    if len(shape) == 5:
        conv3d.lower_conv3d(lw, step, deconv=False)
        return
    nd = _spatial_rank(node, shape)
    k = w_shape[0]
    kernel = w_shape[2:]
    stride = [int(v) for v in attr(node, "strides", [1] * nd)]
    dilation = [int(v) for v in attr(node, "dilations", [1] * nd)]
    begins, ends = spatial_pads(lw.auto_pad(node), attr(node, "pads", None),
                                shape[2:], kernel, stride, dilation)
    bias, bias_ref = lw.conv_bias(node, k)
    rest = step.nodes[1:]
    prev = node.outputs[0]
    scale = shift = None
    w_const = w_name in lw.g.consts
    w = lw.const_input(node, 1, "weights").astype(np.float64) if w_const else None
    if rest and rest[0].op_type == "BatchNormalization":
        bn = rest.pop(0)
        bn_scale, bn_shift = lw.bn_params(bn)
        prev = bn.outputs[0]
        if w is not None and bias is not None:
            w = w * bn_scale[:, None, None, None]
            bias = bias * bn_scale + bn_shift
        else:  # weights or bias given at run time: SDP applies the batch norm
            scale, shift = bn_scale, bn_shift
    ew, act = lw.epilogue(rest, prev, k)
    if ew is not None and ew[0] == "bias":
        if shift is not None:
            shift = shift + ew[1]
        elif bias is not None:
            bias = bias + ew[1]
        else:
            scale, shift = np.ones(k), ew[1]
        ew = None
    weight_shape = (k, w_shape[1], *spatial_2d(kernel, 1))
    # Constant weights of a one-group convolution with a kernel larger than 1x1, enough channels
    # and wide enough lines go tap-major (RSKC): the device then runs it as one BLAS product per
    # kernel tap on its input as it lies, its fastest way for such layers (see
    # pydla.hw.conv.conv2d_shift_gemm). Otherwise one product over an im2col matrix is faster.
    # "Enough" and "wide enough" are the device configuration's speed rules.
    out_w = lw.g.shapes[node.outputs[0]][-1] if node.outputs[0] in lw.g.shapes else 0
    tap_major = (w is not None and groups == 1 and weight_shape[2] * weight_shape[3] > 1
                 and weight_shape[1] >= lw.config.tap_major_min_channels and out_w > 0
                 and lw.config.tap_major_pays(weight_shape[3], spatial_2d(dilation, 1)[1],
                                              spatial_2d(stride, 1)[1], out_w))
    if w is not None:
        laid = w.reshape(weight_shape)
        weights = lw.const(np.ascontiguousarray(laid.transpose(2, 3, 0, 1)) if tap_major else laid)
    else:
        weights = _runtime_weights(lw, w_name, where)
    sdp: dict[str, Any] = dict(act, bias=lw.const(bias) if bias is not None else bias_ref)
    if scale is not None and shift is not None:
        sdp.update(scale=lw.const(scale), shift=lw.const(shift))
    b2, e2 = spatial_2d(begins, 0), spatial_2d(ends, 0)
    _conv_pairs(lw, step, weights, dict(weight_shape=weight_shape, stride=spatial_2d(stride, 1),
                                        pads=(b2[0], b2[1], e2[0], e2[1]),
                                        dilation=spatial_2d(dilation, 1), groups=groups,
                                        weight_format="rskc" if tap_major else "kcrs"),
                sdp, ew[1] if ew is not None else None)


def lower_deconv(lw: Lowering, step: Step) -> None:
    node = step.head
    where = node.where()
    x_name, w_name = node.inputs[0], node.inputs[1]
    shape, w_shape = lw.g.shapes[x_name], lw.g.shapes[w_name]
    groups = lw.check_conv(node, transpose=True)
    if len(shape) == 5:
        conv3d.lower_conv3d(lw, step, deconv=True)
        return
    nd = _spatial_rank(node, shape)
    k = w_shape[1] * groups
    kernel = [int(v) for v in w_shape[2:]]
    stride = [int(v) for v in attr(node, "strides", [1] * nd)]
    dilation = [int(v) for v in attr(node, "dilations", [1] * nd)]
    begins, ends, out_pad = deconv_pads(
        lw.auto_pad(node), attr(node, "pads", None),
        [int(v) for v in attr(node, "output_padding", [0] * nd)], shape[2:],
        lw.g.shapes[node.outputs[0]][2:], kernel, stride, dilation)
    bias, bias_ref = lw.conv_bias(node, k)
    _, act = lw.epilogue(step.nodes[1:], node.outputs[0], k)
    weight_shape = (w_shape[0], w_shape[1], *spatial_2d(kernel, 1))
    if w_name in lw.g.consts:
        weights = lw.const(lw.const_input(node, 1, "weights").reshape(weight_shape))
    else:
        weights = _runtime_weights(lw, w_name, where)
    sdp: dict[str, Any] = dict(act, bias=lw.const(bias) if bias is not None else bias_ref)
    b2, e2 = spatial_2d(begins, 0), spatial_2d(ends, 0)
    _conv_pairs(lw, step, weights, dict(weight_shape=weight_shape, stride=spatial_2d(stride, 1),
                                        pads=(b2[0], b2[1], e2[0], e2[1]),
                                        dilation=spatial_2d(dilation, 1), groups=groups, deconv=True,
                                        output_padding=spatial_2d(out_pad, 0)), sdp, None)


def _spatial_rank(node: Node, shape: tuple[int, ...]) -> int:
    if len(shape) not in (3, 4):
        raise DlaError(NvError.NotSupported, f"{node.where()}: input of shape {shape}: pydla convolves "
                                             "1-D, 2-D and 3-D images")
    return len(shape) - 2


def _runtime_weights(lw: Lowering, name: str, where: str) -> Ref:
    """Weights given at run time, read where they are (the ONNX layout is the device's)."""
    lw.cube(name, where)  # checks that it is float32
    buf, offset = lw.storage(name)
    return lw.tb.ref(buf, prod(lw.g.shapes[name]) * lw.np_dtype.itemsize, offset)


def _conv_pairs(lw: Lowering, step: Step, weights: Ref, conv: dict[str, Any], sdp: dict[str, Any],
                ew: str | None) -> None:
    """One CONV + SDP pair per image of the batch."""
    where = step.head.where()
    count, _ = images(lw.g.shapes[step.head.inputs[0]], where)
    for i in range(count):
        op = lw.tb.conv(lw.image(step.head.inputs[0], i, where), weights, **conv)
        extra: dict[str, Any] = {} if ew is None else dict(ew=lw.image(ew, i, where), ew_op="add")
        lw.tb.sdp(op, lw.image(step.output, i, where), **sdp, **extra)
