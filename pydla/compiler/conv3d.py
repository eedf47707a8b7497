"""3-D (volumetric) Conv and ConvTranspose as sums of 2-D ones on the CONV block.

Output depth slice ``od`` of a 3-D convolution is the sum, over the kernel's depth taps ``j`` whose
input slice ``id`` exists (``id = od*stride + j*dilation - pad`` for Conv, ``od = id*stride +
j*dilation - pad`` for ConvTranspose), of 2-D convolutions of input slice ``id`` with the kernel's
slice ``j``. Each term is a CONV + SDP pair: the first adds the bias, each later one adds the sum so
far (SDP's element-wise operand, from one of two temporaries in turn), the last applies the fused
activation and writes the output slice. A depth slice of a (C, D, H, W) image is the cube (C, H, W)
with a channel stride of D*H*W elements, so nothing is copied. An output slice no tap reaches is a
convolution with zero weights (the bias alone, activated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.compiler import movement
from pydla.compiler.layout import deconv_pads, dense_strides, spatial_pads
from pydla.compiler.plan import Step, attr
from pydla.errors import DlaError, NvError
from pydla.loadable.taskbuilder import Ref

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering


def lower_conv3d(lw: Lowering, step: Step, deconv: bool) -> None:
    n = step.head
    where = n.where()
    x_name, w_name = n.inputs[0], n.inputs[1]
    shape, w_shape = lw.g.shapes[x_name], lw.g.shapes[w_name]
    out_shape = lw.g.shapes[n.outputs[0]]
    groups = int(attr(n, "group", 1))
    k = w_shape[1] * groups if deconv else w_shape[0]
    kernel = [int(v) for v in w_shape[2:]]
    stride = [int(v) for v in attr(n, "strides", [1, 1, 1])]
    dilation = [int(v) for v in attr(n, "dilations", [1, 1, 1])]
    out_pad = [0, 0, 0]
    if deconv:
        begins, ends, out_pad = deconv_pads(lw.auto_pad(n), attr(n, "pads", None),
                                            [int(v) for v in attr(n, "output_padding", [0, 0, 0])], shape[2:],
                                            out_shape[2:], kernel, stride, dilation)
    else:
        begins, ends = spatial_pads(lw.auto_pad(n), attr(n, "pads", None), shape[2:],
                                    kernel, stride, dilation)
    bias, bias_ref = lw.conv_bias(n, k)
    act = lw.epilogue(step.nodes[1:], n.outputs[0], k)[1]
    el = lw.np_dtype.itemsize
    slice_shape = (w_shape[0], w_shape[1], kernel[1], kernel[2])
    taps = _weight_slices(lw, w_name, slice_shape, kernel[0], where)
    zero = lw.const(np.zeros(slice_shape))
    conv_args: dict[str, Any] = dict(
        weight_shape=slice_shape, stride=(stride[1], stride[2]), dilation=(dilation[1], dilation[2]),
        pads=(begins[1], begins[2], ends[1], ends[2]), groups=groups)
    if deconv:
        conv_args.update(deconv=True, output_padding=(out_pad[1], out_pad[2]))
    (images, c, d, h, w), (do, ho, wo) = shape, out_shape[2:]
    x_buf, x_off = lw.storage(x_name)
    y_buf, y_off = lw.storage(step.output)
    temps = [lw.temp(k * ho * wo * el), lw.temp(k * ho * wo * el)]
    bias_arg = lw.const(bias) if bias is not None else bias_ref
    for img in range(images):
        for od in range(do):
            terms = _terms(od, d, kernel[0], stride[0], dilation[0], begins[0], deconv)
            for t, (i_d, j) in enumerate(terms or [(0, -1)]):
                x = lw.tb.cube(x_buf, (c, h, w), offset=x_off + ((img * c * d) + i_d) * h * w * el,
                               surf_stride=d * h * w * el)
                op = lw.tb.conv(x, taps[j] if j >= 0 else zero, **conv_args)
                last = t == max(len(terms), 1) - 1
                if last:
                    dst = lw.tb.cube(y_buf, (k, ho, wo), offset=y_off + ((img * k * do) + od) * ho * wo * el,
                                     surf_stride=do * ho * wo * el)
                else:
                    dst = lw.tb.cube(temps[t % 2][0], (k, ho, wo), offset=temps[t % 2][1])
                kwargs: dict[str, Any] = dict(act) if last else {}
                if t == 0:
                    kwargs["bias"] = bias_arg
                else:
                    prev = temps[(t - 1) % 2]
                    kwargs.update(ew=lw.tb.cube(prev[0], (k, ho, wo), offset=prev[1]), ew_op="add")
                lw.tb.sdp(op, dst, **kwargs)


def _terms(od: int, depth: int, taps: int, stride: int, dilation: int, pad: int,
           deconv: bool) -> list[tuple[int, int]]:
    """(input depth, kernel depth) pairs that reach output depth ``od``."""
    found = []
    for j in range(taps):
        if deconv:
            offset = od + pad - j * dilation
            if offset % stride:
                continue
            i_d = offset // stride
        else:
            i_d = od * stride + j * dilation - pad
        if 0 <= i_d < depth:
            found.append((i_d, j))
    return found


def _weight_slices(lw: Lowering, name: str, slice_shape: tuple[int, ...], taps: int, where: str) -> list[Ref]:
    """The kernel's depth slices as dense 2-D kernels: constants, or copied out of the weights given
    at run time."""
    if name in lw.g.consts:
        w = lw.g.consts[name].astype(np.float64)
        return [lw.const(w[:, :, j]) for j in range(taps)]
    lw.cube(name, where)  # checks that it is float32
    el = lw.np_dtype.itemsize
    buf, offset = lw.storage(name)
    strides = dense_strides(lw.g.shapes[name], el)
    size = int(np.prod(slice_shape)) * el
    refs = []
    for j in range(taps):
        dst = lw.temp(size)
        movement.bdma_copy(lw, (buf, offset + j * strides[2]), dst, slice_shape,
                           (strides[0], strides[1], strides[3], strides[4]), dense_strides(slice_shape, el),
                           el, where)
        refs.append(lw.tb.ref(dst[0], size, dst[1]))
    if not refs:
        raise DlaError(NvError.BadValue, f"{where}: a kernel of depth 0")
    return refs
