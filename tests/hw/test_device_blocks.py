"""What each functional block of the virtual device computes, driven only through registers and memory.

Every operation is programmed register by register (see ``regs.py``) in a fresh device in deterministic
mode, so it has executed when ``op_enable`` is written. Results are read back from device memory and
compared with plain numpy references, or with onnxruntime one-node models where that is easier (Conv,
ConvTranspose, LRN, DepthToSpace, SpaceToDepth).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from pydla.target.config import parse_config
from tests.hw.regs import (
    FP16,
    FP32,
    PRECISION,
    SENTINEL,
    Arena,
    Cube,
    bdma_op,
    done_bit,
    group_state,
    pdp_op,
    program,
    raw_config,
    status,
)

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

RTOL32 = ATOL32 = 1e-4
TOL16 = 1e-2
ACT = R.sdp_act_e
EW = R.sdp_ew_op_e
EW_MODE = R.sdp_ew_mode_e


def rand(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def ort_node(op: str, inputs: dict[str, np.ndarray], **attrs: Any) -> np.ndarray:
    """Run one ONNX node on float32 inputs (a batch axis is added to the first); return output[0]."""
    feeds = {}
    for i, (name, value) in enumerate(inputs.items()):
        feeds[name] = (value[None] if i == 0 else value).astype(np.float32)
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    result: np.ndarray = sess.run(None, feeds)[0][0]
    return result


@pytest.fixture
def dev() -> Any:
    device = VirtualDevice("full", mode="deterministic")
    yield device
    device.close()


@pytest.fixture
def arena(dev: VirtualDevice) -> Arena:
    return Arena(dev)


def assert_done(dev: VirtualDevice, *bits: int) -> None:
    value = status(dev)
    want = 0
    for b in bits:
        want |= b
    assert value == want, f"intr_status {value:#x}, expected {want:#x}; log: {list(dev.log)}"


# -- BDMA -----------------------------------------------------------------------------------------------


def test_bdma_single_line(dev: VirtualDevice, arena: Arena) -> None:
    data = np.arange(100, dtype=np.uint8)
    src = arena.vector(data)
    dst_off = arena.alloc(200)
    bdma_op(dev, src, arena.iova + dst_off + 50, arena.ctx, line_size=100, group=0)
    assert_done(dev, done_bit("BDMA", 0))
    out = arena.bo.array[dst_off:dst_off + 200]
    assert np.array_equal(out[50:150], data)
    assert (out[:50] == SENTINEL).all() and (out[150:] == SENTINEL).all()


def test_bdma_strided_lines_leave_gaps_untouched(dev: VirtualDevice, arena: Arena) -> None:
    lines, size, s_stride, d_stride = 5, 24, 40, 56
    src_off = arena.alloc(lines * s_stride)
    arena.bo.array[src_off:src_off + lines * s_stride] = np.arange(lines * s_stride) % 251
    dst_off = arena.alloc(64 + lines * d_stride + 64)
    bdma_op(dev, arena.iova + src_off, arena.iova + dst_off + 64, arena.ctx, line_size=size, lines=lines,
            src_line_stride=s_stride, dst_line_stride=d_stride)
    assert_done(dev, done_bit("BDMA", 0))
    src = arena.bo.array[src_off:src_off + lines * s_stride].reshape(lines, s_stride)
    region = arena.bo.array[dst_off:dst_off + 64 + lines * d_stride + 64].copy()
    expect = np.full_like(region, SENTINEL)
    body = expect[64:64 + lines * d_stride].reshape(lines, d_stride)
    body[:, :size] = src[:, :size]
    assert np.array_equal(region, expect)


def test_bdma_multi_surface_between_buffers(dev: VirtualDevice, arena: Arena) -> None:
    # Source and destination in different buffer objects (different mappings) of one context.
    other = dev.memory.allocate(8192)
    other.array[:] = 0
    dst_iova = dev.iommu.map(arena.ctx, other)
    surfaces, lines, size = 3, 4, 10
    s_line, s_surf, d_line, d_surf = 16, 80, 12, 100
    src_off = arena.alloc(surfaces * s_surf)
    rng = np.random.default_rng(1)
    arena.bo.array[src_off:src_off + surfaces * s_surf] = rng.integers(1, 255, surfaces * s_surf)
    bdma_op(dev, arena.iova + src_off, dst_iova + 8, arena.ctx, line_size=size, lines=lines,
            src_line_stride=s_line, dst_line_stride=d_line, surfaces=surfaces, src_surf_stride=s_surf,
            dst_surf_stride=d_surf)
    assert_done(dev, done_bit("BDMA", 0))
    expect = np.zeros(8192, np.uint8)
    src = arena.bo.array[src_off:]
    for s, li in itertools.product(range(surfaces), range(lines)):
        d = 8 + s * d_surf + li * d_line
        expect[d:d + size] = src[s * s_surf + li * s_line:s * s_surf + li * s_line + size]
    assert np.array_equal(other.array, expect)


@pytest.mark.parametrize("line_size", [1, 2, 3, 4, 6, 8, 12, 16])
@pytest.mark.parametrize("misalign", [0, 1, 2, 4])
def test_bdma_broadcast_lines_in_any_item_width(dev: VirtualDevice, arena: Arena, line_size: int,
                                                misalign: int) -> None:
    """A value per surface repeated on every line (squeeze-excite's scale spread over a map: source
    line stride 0), copied in the widest items the sizes, strides and addresses allow: byte for byte
    a byte copy, whatever the alignment."""
    surfaces, lines = 6, 5
    d_line, d_surf = line_size + (misalign % 3) * 2, 0
    d_surf = lines * d_line + 8
    src_off = arena.alloc(surfaces * line_size + 16) + misalign
    rng = np.random.default_rng(line_size * 10 + misalign)
    arena.bo.array[src_off:src_off + surfaces * line_size] = rng.integers(0, 256, surfaces * line_size)
    dst_off = arena.alloc(surfaces * d_surf + 32) + (4 - misalign) % 4
    before = arena.bo.array[dst_off:dst_off + surfaces * d_surf].copy()
    bdma_op(dev, arena.iova + src_off, arena.iova + dst_off, arena.ctx, line_size=line_size, lines=lines,
            src_line_stride=0, dst_line_stride=d_line, surfaces=surfaces, src_surf_stride=line_size,
            dst_surf_stride=d_surf)
    assert_done(dev, done_bit("BDMA", 0))
    expect = before.copy()
    src = arena.bo.array[src_off:src_off + surfaces * line_size].reshape(surfaces, line_size)
    for s, li in itertools.product(range(surfaces), range(lines)):
        expect[s * d_surf + li * d_line:s * d_surf + li * d_line + line_size] = src[s]
    assert np.array_equal(arena.bo.array[dst_off:dst_off + surfaces * d_surf], expect)


def test_bdma_interleaved_copy_within_one_buffer(dev: VirtualDevice, arena: Arena) -> None:
    # Even lines to odd lines of the same region: strided, not overlapping.
    off = arena.alloc(8 * 32)
    region = arena.bo.array[off:off + 8 * 32].reshape(8, 32)
    region[:] = np.arange(8)[:, None] * 10 + np.arange(32)[None] % 7
    before = region.copy()
    bdma_op(dev, arena.iova + off, arena.iova + off + 32, arena.ctx, line_size=32, lines=4,
            src_line_stride=64, dst_line_stride=64)
    assert_done(dev, done_bit("BDMA", 0))
    expect = before.copy()
    expect[1::2] = before[0::2]
    assert np.array_equal(region, expect)


def test_bdma_address_above_4g_uses_hi_word() -> None:
    dev = VirtualDevice(parse_config(raw_config(blocks=["BDMA"], iova_base=5 << 32)), mode="deterministic")
    arena = Arena(dev, 8192)
    assert arena.iova >> 32 == 5
    src = arena.vector(np.arange(16, dtype=np.uint8))
    dst = arena.iova + arena.alloc(16)
    bdma_op(dev, src, dst, arena.ctx, line_size=16)
    assert_done(dev, done_bit("BDMA", 0))
    assert np.array_equal(arena.bo.array[dst - arena.iova:dst - arena.iova + 16], np.arange(16))


# -- CONV + SDP -------------------------------------------------------------------------------------------


def conv_size(n: int, k: int, s: int, pb: int, pa: int, d: int) -> int:
    return (n + pb + pa - d * (k - 1) - 1) // s + 1


def deconv_size(n: int, k: int, s: int, pb: int, pa: int, d: int, op: int) -> int:
    return s * (n - 1) + op + (k - 1) * d + 1 - pb - pa


def program_conv(dev: VirtualDevice, arena: Arena, x: Cube, w: np.ndarray, *, kernels: int,
                 out_hw: tuple[int, int], stride: tuple[int, int] = (1, 1),
                 pads: tuple[int, int, int, int] = (0, 0, 0, 0),
                 dilation: tuple[int, int] = (1, 1), groups: int = 1, deconv: bool = False,
                 out_pad: tuple[int, int] = (0, 0), group: int = 0, enable: bool = True,
                 wt_format: int = R.conv_weight_format_e.KCRS) -> None:
    """CONV registers; ``w`` is (K, C/g, kh, kw) for a convolution, (C, K/g, kh, kw) for a deconv;
    stored in memory tap-major when ``wt_format`` is RSKC."""
    stored = w.transpose(2, 3, 0, 1) if wt_format == R.conv_weight_format_e.RSKC else w
    program(dev, "CONV", group=group, ctx_id=arena.ctx, precision=PRECISION[x.dtype],
            mode=int(R.conv_mode_e.DECONV if deconv else R.conv_mode_e.DIRECT), src=x,
            wt_format=int(wt_format),
            wt_addr=arena.vector(np.ascontiguousarray(stored, dtype=x.dtype)), wt_kernels=kernels,
            wt_channels=w.shape[1],
            wt_height=w.shape[2], wt_width=w.shape[3], stride_x=stride[1], stride_y=stride[0],
            pad_left=pads[1], pad_right=pads[3], pad_top=pads[0], pad_bottom=pads[2], dilation_x=dilation[1],
            dilation_y=dilation[0], groups=groups, out_width=out_hw[1], out_height=out_hw[0],
            out_pad_x=out_pad[1], out_pad_y=out_pad[0])
    if enable:
        program(dev, "CONV", op_enable=1)


def program_sdp(dev: VirtualDevice, arena: Arena, dst: Cube, *, src: Cube | None = None,
                shape: tuple[int, int, int] | None = None, precision: int = FP32, group: int = 0,
                bias: np.ndarray | None = None, scale: np.ndarray | None = None,
                shift: np.ndarray | None = None,
                ew_op: int = EW.NONE, ew_mode: int = EW_MODE.CUBE, ew: np.ndarray | None = None,
                ew_swap: int = 0, act: int = ACT.NONE, alpha: float = 0.0, act_min: float = 0.0,
                act_max: float = 0.0, slope: np.ndarray | None = None, enable: bool = True) -> None:
    """Every SDP register; ``src`` None means flying mode (the cube of ``shape`` comes from CONV)."""
    pdt = np.float16 if precision == FP16 else np.float32
    flying = src is None
    if flying:
        assert shape is not None
        src = Cube(0, shape, 0, 0, np.dtype(pdt), 0)
    ew_addr = ew_line = ew_surf = 0
    if ew is not None:
        if ew_mode == EW_MODE.CUBE:
            # Padded lines and surfaces: the element-wise operand has its own strides.
            _, h, w = ew.shape
            size = np.dtype(pdt).itemsize
            cube = arena.put(ew.astype(pdt), line_stride=(w + 3) * size, surf_stride=(h + 1) * (w + 3) * size)
            ew_addr, ew_line, ew_surf = cube.addr, cube.line_stride, cube.surf_stride
        else:
            ew_addr = arena.vector(ew.astype(pdt))

    def vec(v: np.ndarray | None) -> int:
        return 0 if v is None else arena.vector(v.astype(pdt))

    program(dev, "SDP", group=group, ctx_id=arena.ctx, precision=precision,
            out_precision=PRECISION[dst.dtype],
            src_mode=int(R.sdp_src_mode_e.FLYING if flying else R.sdp_src_mode_e.MEMORY), src=src, dst=dst,
            bias_enable=int(bias is not None), bias_addr=vec(bias), bn_enable=int(scale is not None),
            scale_addr=vec(scale), shift_addr=vec(shift), ew_op=ew_op, ew_mode=ew_mode, ew_swap=ew_swap,
            ew_addr=ew_addr, ew_line_stride=ew_line, ew_surf_stride=ew_surf, act=act, act_alpha=alpha,
            act_min=act_min, act_max=act_max, prelu_addr=vec(slope))
    if enable:
        program(dev, "SDP", op_enable=1)


def sdp_ref(x: np.ndarray, *, bias: np.ndarray | None = None, scale: np.ndarray | None = None,
            shift: np.ndarray | None = None, ew_op: int = EW.NONE, ew: np.ndarray | None = None,
            ew_mode: int = EW_MODE.CUBE, ew_swap: int = 0, act: int = ACT.NONE, alpha: float = 0.0,
            act_min: float = 0.0, act_max: float = 0.0, slope: np.ndarray | None = None) -> np.ndarray:
    y = x.astype(np.float64)
    c = y.shape[0]
    if bias is not None:
        y = y + bias.reshape(c, 1, 1)
    if scale is not None:
        assert shift is not None
        y = y * scale.reshape(c, 1, 1) + shift.reshape(c, 1, 1)
    if ew_op != EW.NONE:
        assert ew is not None
        shapes: dict[int, tuple[int, ...]] = {EW_MODE.CUBE: ew.shape, EW_MODE.PER_CHANNEL: (c, 1, 1),
                                              EW_MODE.SCALAR: (1, 1, 1)}
        b = ew.reshape(shapes[ew_mode]).astype(np.float64)
        a, b = (np.broadcast_to(b, y.shape), y) if ew_swap else (y, b)
        ops: dict[int, Any] = {EW.ADD: np.add, EW.SUB: np.subtract, EW.MUL: np.multiply, EW.MAX: np.maximum,
                               EW.MIN: np.minimum, EW.DIV: np.divide}
        y = ops[ew_op](a, b)
    if act == ACT.RELU:
        y = np.maximum(y, 0)
    elif act == ACT.LEAKY_RELU:
        y = np.where(y > 0, y, alpha * y)
    elif act == ACT.PRELU:
        assert slope is not None
        y = np.where(y > 0, y, slope.reshape(c, 1, 1) * y)
    elif act == ACT.CLAMP:
        y = np.clip(y, act_min, act_max)
    elif act == ACT.SIGMOID:
        y = 1 / (1 + np.exp(-y))
    elif act == ACT.TANH:
        y = np.tanh(y)
    return y.astype(np.float32)


def conv_ref(x: np.ndarray, w: np.ndarray, *, stride: tuple[int, int] = (1, 1),
             pads: tuple[int, int, int, int] = (0, 0, 0, 0), dilation: tuple[int, int] = (1, 1),
             groups: int = 1) -> np.ndarray:
    return ort_node("Conv", {"x": x, "w": w}, strides=list(stride), pads=list(pads), dilations=list(dilation),
                    group=groups, kernel_shape=list(w.shape[2:]))


CONV_CASES = {
    # name: (C, H, W, K, kh, kw, stride, pads (t, l, b, r), dilation, groups)
    "basic3x3": (3, 6, 6, 4, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "padded": (3, 6, 6, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "stride2": (2, 7, 7, 3, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1),
    "asymmetric_pads": (2, 5, 6, 3, 3, 3, (1, 1), (0, 2, 1, 0), (1, 1), 1),
    "dilation2": (2, 8, 8, 3, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 1),
    "groups2": (4, 5, 5, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2),
    "depthwise": (4, 6, 6, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4),
    "depthwise_multiplier2": (3, 5, 5, 6, 3, 3, (2, 1), (1, 1, 1, 1), (1, 1), 3),
    "pointwise1x1": (5, 4, 4, 3, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "stride_larger_than_kernel": (2, 9, 9, 2, 2, 2, (3, 3), (0, 0, 0, 0), (1, 1), 1),
    "non_square": (2, 5, 9, 3, 2, 4, (1, 2), (1, 0, 0, 2), (2, 1), 1),
    "kernel_covers_input": (3, 3, 3, 2, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1),
}


@pytest.mark.parametrize("case", list(CONV_CASES), ids=list(CONV_CASES))
def test_conv_matches_onnx_conv(dev: VirtualDevice, arena: Arena, case: str) -> None:
    c, h, w, k, kh, kw, stride, pads, dil, groups = CONV_CASES[case]
    x = rand(c, h, w, seed=1)
    wt = rand(k, c // groups, kh, kw, seed=2)
    out_hw = (conv_size(h, kh, stride[0], pads[0], pads[2], dil[0]),
              conv_size(w, kw, stride[1], pads[1], pads[3], dil[1]))
    # The source with padded lines and surfaces, the destination packed.
    src = arena.put(x, line_stride=(w + 2) * 4, surf_stride=(h + 1) * (w + 2) * 4)
    dst = arena.cube((k, *out_hw))
    program_conv(dev, arena, src, wt, kernels=k, out_hw=out_hw, stride=stride, pads=pads, dilation=dil,
                 groups=groups)
    program_sdp(dev, arena, dst, shape=(k, *out_hw))
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    expect = conv_ref(x, wt, stride=stride, pads=pads, dilation=dil, groups=groups)
    assert expect.shape == (k, *out_hw)
    np.testing.assert_allclose(arena.get(dst), expect, rtol=RTOL32, atol=ATOL32)


RSKC_CASES = {
    # Tap-major weights: the shift-GEMM path from 16 input channels, the column-matrix paths below.
    "padded": (16, 9, 7, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    "stride2": (20, 11, 12, 5, 3, 3, (2, 2), (1, 0, 1, 2), (1, 1)),
    "dilation_non_square": (16, 10, 9, 4, 2, 3, (1, 2), (2, 1, 0, 1), (2, 2)),
    "few_channels": (3, 6, 6, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", list(RSKC_CASES), ids=list(RSKC_CASES))
def test_conv_with_tap_major_weights(dev: VirtualDevice, arena: Arena, case: str, precision: str) -> None:
    c, h, w, k, kh, kw, stride, pads, dil = RSKC_CASES[case]
    dt = np.float16 if precision == "fp16" else np.float32
    x = rand(c, h, w, seed=5).astype(dt)
    wt = rand(k, c, kh, kw, seed=6).astype(dt)
    bias = rand(k, seed=7)
    out_hw = (conv_size(h, kh, stride[0], pads[0], pads[2], dil[0]),
              conv_size(w, kw, stride[1], pads[1], pads[3], dil[1]))
    src = arena.put(x, line_stride=(w + 1) * x.itemsize, surf_stride=(h + 2) * (w + 1) * x.itemsize)
    dst = arena.cube((k, *out_hw), dtype=np.dtype(np.float32))
    program_conv(dev, arena, src, wt, kernels=k, out_hw=out_hw, stride=stride, pads=pads, dilation=dil,
                 wt_format=R.conv_weight_format_e.RSKC)
    program_sdp(dev, arena, dst, shape=(k, *out_hw), precision=FP16 if precision == "fp16" else FP32,
                bias=bias, act=ACT.RELU)
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    expect = np.maximum(conv_ref(x.astype(np.float32), wt.astype(np.float32), stride=stride, pads=pads,
                                 dilation=dil) + bias.reshape(k, 1, 1), 0)
    tol = (RTOL32, ATOL32) if precision == "fp32" else (2e-3, 2e-3)
    np.testing.assert_allclose(arena.get(dst), expect, rtol=tol[0], atol=tol[1])


SDP_AFTER_SHIFT_GEMM = {
    # What SDP does after a tap-major convolution: its bias and element-wise ADD are folded into the
    # accumulation; anything else runs after it as usual.
    "bias_residual_relu": dict(bias=True, ew_op=EW.ADD, ew_mode=EW_MODE.CUBE, act=ACT.RELU),
    "residual_only": dict(ew_op=EW.ADD, ew_mode=EW_MODE.CUBE),
    "per_channel_add_swapped": dict(ew_op=EW.ADD, ew_mode=EW_MODE.PER_CHANNEL, ew_swap=1),
    "scalar_add_clamp": dict(bias=True, ew_op=EW.ADD, ew_mode=EW_MODE.SCALAR, act=ACT.CLAMP),
    "batch_norm_not_folded": dict(bias=True, bn=True, ew_op=EW.ADD, ew_mode=EW_MODE.CUBE),
    "mul_not_folded": dict(bias=True, ew_op=EW.MUL, ew_mode=EW_MODE.CUBE, act=ACT.SIGMOID),
}


CONV_PATHS = {
    # name: (C, H, W, K, groups, weight format): each way the device computes a convolution
    "tap_major": (16, 8, 9, 5, 1, R.conv_weight_format_e.RSKC),
    "im2col": (16, 8, 9, 5, 1, R.conv_weight_format_e.KCRS),
    "wide_im2col": (3, 6, 40, 4, 1, R.conv_weight_format_e.KCRS),
    "depthwise": (6, 7, 9, 6, 6, R.conv_weight_format_e.KCRS),
    "depthwise_x2": (3, 7, 9, 6, 3, R.conv_weight_format_e.KCRS),
}


@pytest.mark.parametrize("path", list(CONV_PATHS))
@pytest.mark.parametrize("case", list(SDP_AFTER_SHIFT_GEMM), ids=list(SDP_AFTER_SHIFT_GEMM))
def test_sdp_after_each_convolution_path(dev: VirtualDevice, arena: Arena, case: str, path: str) -> None:
    """SDP's bias and element-wise ADD are added where the convolution writes its result; what SDP
    does beyond them runs after it as usual. The numbers are the same on every path."""
    spec = dict(SDP_AFTER_SHIFT_GEMM[case])
    c, h, w, k, groups, wt_format = CONV_PATHS[path]
    x, wt = rand(c, h, w, seed=8), rand(k, c // groups, 3, 3, seed=9)
    dims = (k, h, w)
    bias = rand(k, seed=10) if spec.pop("bias", False) else None
    scale = shift = None
    if spec.pop("bn", False):
        scale, shift = rand(k, seed=11), rand(k, seed=12)
    mode = spec.get("ew_mode", EW_MODE.CUBE)
    ew = {EW_MODE.CUBE: rand(*dims, seed=13), EW_MODE.PER_CHANNEL: rand(k, seed=13),
          EW_MODE.SCALAR: rand(1, seed=13)}[mode]
    if spec.get("act") == ACT.CLAMP:
        spec.update(act_min=-0.5, act_max=0.5)
    dst = arena.cube(dims)
    program_conv(dev, arena, arena.put(x), wt, kernels=k, out_hw=(h, w), pads=(1, 1, 1, 1),
                 groups=groups, wt_format=wt_format)
    program_sdp(dev, arena, dst, shape=dims, bias=bias, scale=scale, shift=shift, ew=ew, **spec)
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    expect = sdp_ref(conv_ref(x, wt, pads=(1, 1, 1, 1), groups=groups), bias=bias, scale=scale, shift=shift,
                     ew=ew, **spec)
    np.testing.assert_allclose(arena.get(dst), expect, rtol=RTOL32, atol=ATOL32)


@pytest.mark.parametrize("wt_format,ksize,c", [
    (R.conv_weight_format_e.RSKC, 3, 16),  # tap-major: bias and residual folded into the GEMMs
    (R.conv_weight_format_e.KCRS, 3, 16),  # direct into SDP's destination unless operands overlap it
    (R.conv_weight_format_e.KCRS, 1, 5),   # 1x1 as one matrix multiply
    (R.conv_weight_format_e.KCRS, 3, 3),
], ids=["rskc", "kcrs3x3", "kcrs1x1", "kcrs_c3"])
def test_residual_into_its_own_cube(dev: VirtualDevice, arena: Arena, wt_format: int, ksize: int,
                                    c: int) -> None:
    """y = relu(conv(x) + bias + y): SDP's destination is its element-wise operand, whichever
    path the convolution takes (the result must not land on the operand before SDP reads it)."""
    h, w, k = 6, 7, 4
    pad = ksize // 2
    x, wt = rand(c, h, w, seed=14), rand(k, c, ksize, ksize, seed=15)
    bias, y = rand(k, seed=16), rand(k, h, w, seed=17)
    cube = arena.put(y)
    program_conv(dev, arena, arena.put(x), wt, kernels=k, out_hw=(h, w), pads=(pad,) * 4,
                 wt_format=wt_format)
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32,
            src_mode=int(R.sdp_src_mode_e.FLYING), src=Cube(0, (k, h, w), 0, 0, np.dtype(np.float32), 0),
            dst=cube, bias_enable=1, bias_addr=arena.vector(bias), ew_op=EW.ADD, ew_mode=EW_MODE.CUBE,
            ew_addr=cube.addr, ew_line_stride=cube.line_stride, ew_surf_stride=cube.surf_stride,
            act=ACT.RELU, op_enable=1)
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    expect = np.maximum(conv_ref(x, wt, pads=(pad,) * 4) + bias.reshape(k, 1, 1) + y, 0)
    np.testing.assert_allclose(arena.get(cube), expect, rtol=RTOL32, atol=ATOL32)


def test_prelu_slopes_inside_the_destination(dev: VirtualDevice, arena: Arena) -> None:
    """SDP's PReLU slopes stored in the first elements of its own destination: read before written."""
    c, h, w, k = 3, 5, 5, 2
    x, wt = rand(c, h, w, seed=18), rand(k, c, 3, 3, seed=19)
    slopes = np.array([0.25, 0.5], np.float32)
    init = np.zeros((k, h, w), np.float32)
    init.reshape(-1)[:k] = slopes
    cube = arena.put(init)
    program_conv(dev, arena, arena.put(x), wt, kernels=k, out_hw=(h, w), pads=(1, 1, 1, 1))
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32,
            src_mode=int(R.sdp_src_mode_e.FLYING), src=Cube(0, (k, h, w), 0, 0, np.dtype(np.float32), 0),
            dst=cube, act=ACT.PRELU, prelu_addr=cube.addr, op_enable=1)
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    z = conv_ref(x, wt, pads=(1, 1, 1, 1))
    expect = np.where(z >= 0, z, z * slopes.reshape(k, 1, 1))
    np.testing.assert_allclose(arena.get(cube), expect, rtol=RTOL32, atol=ATOL32)


def test_conv_into_strided_destination_leaves_gaps(dev: VirtualDevice, arena: Arena) -> None:
    x, wt = rand(2, 4, 4, seed=3), rand(3, 2, 3, 3, seed=4)
    src = arena.put(x)
    dst = arena.cube((3, 2, 2), line_stride=5 * 4, surf_stride=3 * 5 * 4)
    program_conv(dev, arena, src, wt, kernels=3, out_hw=(2, 2))
    program_sdp(dev, arena, dst, shape=(3, 2, 2))
    np.testing.assert_allclose(arena.get(dst), conv_ref(x, wt), rtol=RTOL32, atol=ATOL32)
    raw = arena.raw(dst).view(np.uint32).reshape(-1)
    mask = np.ones(raw.size, bool)
    for ch, row in itertools.product(range(3), range(2)):
        start = (ch * 60 + row * 20) // 4
        mask[start:start + 2] = False
    assert (raw[mask] == 0xA5A5A5A5).all()


DECONV_CASES = {
    # name: (C, H, W, K, kh, kw, stride, pads, dilation, groups, output_padding)
    "stride2": (2, 3, 3, 3, 3, 3, (2, 2), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
    "pads_outpad": (3, 4, 3, 2, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, (1, 1)),
    "groups_dilation": (4, 3, 4, 6, 2, 3, (1, 2), (0, 1, 0, 0), (2, 1), 2, (0, 1)),
    "stride1": (2, 4, 4, 2, 2, 2, (1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
}


@pytest.mark.parametrize("case", list(DECONV_CASES), ids=list(DECONV_CASES))
def test_deconv_matches_onnx_conv_transpose(dev: VirtualDevice, arena: Arena, case: str) -> None:
    c, h, w, k, kh, kw, stride, pads, dil, groups, opad = DECONV_CASES[case]
    x = rand(c, h, w, seed=5)
    wt = rand(c, k // groups, kh, kw, seed=6)
    out_hw = (deconv_size(h, kh, stride[0], pads[0], pads[2], dil[0], opad[0]),
              deconv_size(w, kw, stride[1], pads[1], pads[3], dil[1], opad[1]))
    src = arena.put(x)
    dst = arena.cube((k, *out_hw))
    program_conv(dev, arena, src, wt, kernels=k, out_hw=out_hw, stride=stride, pads=pads, dilation=dil,
                 groups=groups, deconv=True, out_pad=opad)
    program_sdp(dev, arena, dst, shape=(k, *out_hw))
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    expect = ort_node("ConvTranspose", {"x": x, "w": wt}, strides=list(stride), pads=list(pads),
                      dilations=list(dil), group=groups, output_padding=list(opad), kernel_shape=[kh, kw])
    assert expect.shape == (k, *out_hw)
    np.testing.assert_allclose(arena.get(dst), expect, rtol=RTOL32, atol=ATOL32)


@pytest.mark.parametrize("out_dtype", [np.float16, np.float32])
def test_conv_fp16(dev: VirtualDevice, arena: Arena, out_dtype: Any) -> None:
    x = rand(3, 5, 5, seed=7, dtype=np.float16)
    wt = rand(4, 3, 3, 3, seed=8, dtype=np.float16) * np.float16(0.5)
    bias = rand(4, seed=9, dtype=np.float16)
    src = arena.put(x)
    dst = arena.cube((4, 5, 5), out_dtype)
    program_conv(dev, arena, src, wt, kernels=4, out_hw=(5, 5), pads=(1, 1, 1, 1))
    program_sdp(dev, arena, dst, shape=(4, 5, 5), precision=FP16, bias=bias, act=ACT.RELU)
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    out = arena.get(dst)
    assert out.dtype == out_dtype
    expect = sdp_ref(conv_ref(x.astype(np.float32), wt.astype(np.float32), pads=(1, 1, 1, 1)),
                     bias=bias.astype(np.float32), act=ACT.RELU)
    np.testing.assert_allclose(out.astype(np.float32), expect, rtol=TOL16, atol=TOL16)


# -- SDP features, flying (after a CONV) and from memory ---------------------------------------------------

SHAPE = (3, 4, 5)


def _positive(seed: int) -> np.ndarray:
    x: np.ndarray = (np.abs(rand(*SHAPE, seed=seed)) + 0.5).astype(np.float32)
    return x


SDP_CASES: dict[str, dict[str, Any]] = {
    "bias": {"bias": rand(3, seed=20)},
    "batch_norm": {"scale": rand(3, seed=21), "shift": rand(3, seed=22)},
    "bias_and_batch_norm": {"bias": rand(3, seed=23), "scale": rand(3, seed=24), "shift": rand(3, seed=25)},
    **{f"ew_{op.name.lower()}_{mode.name.lower()}": {
        "ew_op": op, "ew_mode": mode,
        "ew": {EW_MODE.CUBE: _positive(30), EW_MODE.PER_CHANNEL: _positive(31)[:, 0, 0].copy(),
               EW_MODE.SCALAR: np.array([1.75], np.float32)}[mode]}
       for op in (EW.ADD, EW.SUB, EW.MUL, EW.MAX, EW.MIN, EW.DIV)
       for mode in (EW_MODE.CUBE, EW_MODE.PER_CHANNEL, EW_MODE.SCALAR)},
    "ew_sub_swap_cube": {"ew_op": EW.SUB, "ew_mode": EW_MODE.CUBE, "ew": _positive(32), "ew_swap": 1},
    "ew_div_swap_per_channel": {"ew_op": EW.DIV, "ew_mode": EW_MODE.PER_CHANNEL,
                                "ew": np.array([2.0, -3.0, 0.5], np.float32), "ew_swap": 1},
    "ew_sub_swap_scalar": {"ew_op": EW.SUB, "ew_mode": EW_MODE.SCALAR, "ew": np.array([0.25], np.float32),
                           "ew_swap": 1},
    "relu": {"act": ACT.RELU},
    "leaky_relu": {"act": ACT.LEAKY_RELU, "alpha": 0.1},
    "prelu": {"act": ACT.PRELU, "slope": np.array([0.1, -0.5, 2.0], np.float32)},
    "clamp": {"act": ACT.CLAMP, "act_min": -0.5, "act_max": 0.75},
    "sigmoid": {"act": ACT.SIGMOID},
    "tanh": {"act": ACT.TANH},
    "all_stages": {"bias": rand(3, seed=26), "scale": rand(3, seed=27), "shift": rand(3, seed=28),
                   "ew_op": EW.MUL, "ew_mode": EW_MODE.PER_CHANNEL, "ew": rand(3, seed=29),
                   "act": ACT.LEAKY_RELU, "alpha": 0.2},
}


@pytest.mark.parametrize("source", ["flying", "memory"])
@pytest.mark.parametrize("case", list(SDP_CASES), ids=list(SDP_CASES))
def test_sdp(dev: VirtualDevice, arena: Arena, case: str, source: str) -> None:
    params = SDP_CASES[case]
    dst = arena.cube(SHAPE)
    if source == "flying":
        x = rand(2, 4, 5, seed=40)
        wt = rand(3, 2, 3, 3, seed=41)
        program_conv(dev, arena, arena.put(x), wt, kernels=3, out_hw=(4, 5), pads=(1, 1, 1, 1))
        program_sdp(dev, arena, dst, shape=SHAPE, **params)
        assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
        pre = conv_ref(x, wt, pads=(1, 1, 1, 1))
    else:
        pre = rand(*SHAPE, seed=42)
        src = arena.put(pre, line_stride=8 * 4, surf_stride=5 * 8 * 4)
        program_sdp(dev, arena, dst, src=src, **params)
        assert_done(dev, done_bit("SDP", 0))
    np.testing.assert_allclose(arena.get(dst), sdp_ref(pre, **params), rtol=RTOL32, atol=ATOL32)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize(("in_dtype", "out_dtype"), [(np.float32, np.float16), (np.float16, np.float32),
                                                     (np.float16, np.float16)])
def test_sdp_precision_conversion(dev: VirtualDevice, arena: Arena, in_dtype: Any, out_dtype: Any) -> None:
    x = (rand(*SHAPE, seed=50) * 3).astype(in_dtype)
    # Ties that round to even in float16, a value past float16's range (inf), a float16 subnormal.
    x.reshape(-1)[:4] = [1 + 2**-11, 1 + 3 * 2**-11, 70000 if in_dtype == np.float32 else 1, -1e-8]
    bias = np.array([0.5, -0.25, 2.0], np.float32).astype(in_dtype)
    src = arena.put(x)
    dst = arena.cube(SHAPE, out_dtype)
    program_sdp(dev, arena, dst, src=src, precision=PRECISION[np.dtype(in_dtype)], bias=bias)
    assert_done(dev, done_bit("SDP", 0))
    out = arena.get(dst)
    # Computed in float32, rounded once (to nearest even) to the output precision.
    expect = (x.astype(np.float32) + bias.astype(np.float32).reshape(3, 1, 1)).astype(out_dtype)
    assert out.dtype == out_dtype
    np.testing.assert_array_equal(out, expect)


def test_sdp_memory_mode_strided_destination(dev: VirtualDevice, arena: Arena) -> None:
    x = rand(*SHAPE, seed=51)
    src = arena.put(x)
    dst = arena.cube(SHAPE, line_stride=6 * 4, surf_stride=4 * 6 * 4 + 16)
    program_sdp(dev, arena, dst, src=src, act=ACT.TANH)
    np.testing.assert_allclose(arena.get(dst), np.tanh(x), rtol=RTOL32, atol=ATOL32)
    raw = arena.raw(dst).view(np.uint32)
    assert (raw == 0xA5A5A5A5).sum() == raw.size - x.size


def test_sdp_computes_nan_and_inf_as_ieee_arithmetic_does_without_warnings(dev: VirtualDevice,
                                                                           arena: Arena) -> None:
    """inf - inf, 0 * inf, overflow: the device computes them (NaN, inf) as hardware would; no numpy
    warning reaches the host, even where warnings are errors."""
    x = np.array([[[np.inf, -np.inf, np.nan, 3e38, 1.0, 0.0]]], np.float32)
    dst = arena.cube(x.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program_sdp(dev, arena, dst, src=arena.put(x), bias=np.array([-np.inf], np.float32),
                    ew_op=EW.MUL, ew_mode=EW_MODE.SCALAR, ew=np.array([0.0], np.float32), act=ACT.SIGMOID)
        assert_done(dev, done_bit("SDP", 0))
    with np.errstate(all="ignore"):
        want = 1 / (1 + np.exp(-((x + np.float32(-np.inf)) * np.float32(0.0))))
    np.testing.assert_array_equal(np.isnan(arena.get(dst)), np.isnan(want))


def test_conv_waits_for_its_sdp(dev: VirtualDevice, arena: Arena) -> None:
    x, wt = rand(2, 4, 4, seed=60), rand(2, 2, 3, 3, seed=61)
    dst = arena.cube((2, 2, 2))
    program_conv(dev, arena, arena.put(x), wt, kernels=2, out_hw=(2, 2))
    assert group_state(dev, "CONV", 0) == R.group_state_e.ENABLED
    assert status(dev) == 0
    assert (arena.raw(dst) == SENTINEL).all()
    program_sdp(dev, arena, dst, shape=(2, 2, 2))
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    assert group_state(dev, "CONV", 0) == R.group_state_e.IDLE
    assert group_state(dev, "SDP", 0) == R.group_state_e.IDLE
    np.testing.assert_allclose(arena.get(dst), conv_ref(x, wt), rtol=RTOL32, atol=ATOL32)


def test_sdp_flying_enabled_first_waits_for_conv(dev: VirtualDevice, arena: Arena) -> None:
    x, wt = rand(2, 4, 4, seed=62), rand(2, 2, 3, 3, seed=63)
    dst = arena.cube((2, 2, 2))
    program_sdp(dev, arena, dst, shape=(2, 2, 2), act=ACT.RELU)
    assert group_state(dev, "SDP", 0) == R.group_state_e.ENABLED
    assert status(dev) == 0
    program_conv(dev, arena, arena.put(x), wt, kernels=2, out_hw=(2, 2))
    assert_done(dev, done_bit("CONV", 0), done_bit("SDP", 0))
    np.testing.assert_allclose(arena.get(dst), np.maximum(conv_ref(x, wt), 0), rtol=RTOL32, atol=ATOL32)


# -- PDP ---------------------------------------------------------------------------------------------------


def pool_ref(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], pads: tuple[int, int, int, int],
             method: str, count_include_pad: bool, out_hw: tuple[int, int]) -> np.ndarray:
    """Windows clipped to the padded input; max/min over real elements; avg divides by the real
    elements, or with count_include_pad by the elements inside the padded region (PyTorch, onnxruntime)."""
    c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = kernel, stride, pads
    out = np.empty((c, *out_hw), np.float64)
    for i, j in itertools.product(range(out_hw[0]), range(out_hw[1])):
        hs, ws = i * sh - pt, j * sw - pl
        he, we = min(hs + kh, h + pb), min(ws + kw, w + pr)
        win = x[:, max(hs, 0):min(he, h), max(ws, 0):min(we, w)].astype(np.float64)
        if method == "max":
            out[:, i, j] = win.max(axis=(1, 2))
        elif method == "min":
            out[:, i, j] = win.min(axis=(1, 2))
        else:
            n = (he - hs) * (we - ws) if count_include_pad else win.shape[1] * win.shape[2]
            out[:, i, j] = win.sum(axis=(1, 2)) / n
    return out.astype(np.float32)


METHODS = {"max": R.pdp_method_e.MAX, "avg": R.pdp_method_e.AVG, "min": R.pdp_method_e.MIN}
POOL_CASES = {
    # name: (C, H, W, kernel, stride, pads (t, l, b, r), ceil)
    "2x2": (2, 6, 6, (2, 2), (2, 2), (0, 0, 0, 0), False),
    "3x3_s1_padded": (2, 5, 5, (3, 3), (1, 1), (1, 1, 1, 1), False),
    "3x3_s2_asymmetric": (3, 7, 6, (3, 3), (2, 2), (1, 0, 2, 1), False),
    "non_square": (2, 6, 7, (2, 3), (1, 2), (1, 1, 0, 2), False),
    "ceil_mode": (2, 6, 6, (3, 3), (2, 2), (0, 0, 0, 0), True),
    "ceil_mode_padded": (2, 6, 6, (3, 2), (2, 2), (1, 1, 1, 0), True),
}


@pytest.mark.parametrize(("method", "count_include_pad"), [("max", 0), ("min", 0), ("avg", 0), ("avg", 1)])
@pytest.mark.parametrize("case", list(POOL_CASES), ids=list(POOL_CASES))
def test_pdp(dev: VirtualDevice, arena: Arena, case: str, method: str, count_include_pad: int) -> None:
    c, h, w, kernel, stride, pads, ceil = POOL_CASES[case]
    spans = [(n + pads[a] + pads[a + 2] - kernel[a], stride[a]) for a, n in enumerate((h, w))]
    floor_hw = tuple(span // s + 1 for span, s in spans)
    ceil_hw = (-(-spans[0][0] // spans[0][1]) + 1, -(-spans[1][0] // spans[1][1]) + 1)
    floor_hw = (floor_hw[0], floor_hw[1])
    out_hw = ceil_hw if ceil else floor_hw
    assert (out_hw != floor_hw) == ceil, "a ceil case must round up"
    x = rand(c, h, w, seed=70)
    src = arena.put(x, line_stride=(w + 1) * 4)
    dst = arena.cube((c, *out_hw))
    pdp_op(dev, src, dst, arena.ctx, group=0, kernel=kernel, stride=stride, pads=pads, method=METHODS[method],
           count_include_pad=count_include_pad)
    assert_done(dev, done_bit("PDP", 0))
    expect = pool_ref(x, kernel, stride, pads, method, bool(count_include_pad), out_hw)
    np.testing.assert_allclose(arena.get(dst), expect, rtol=RTOL32, atol=ATOL32)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("ceil", [0, 1])
def test_pdp_avg_matches_onnx_average_pool(dev: VirtualDevice, arena: Arena, ceil: int,
                                           count_include_pad: int) -> None:
    x = rand(2, 5, 7, seed=71)
    kernel, stride, pads = (3, 3), (2, 2), (1, 1, 1, 1)
    expect = ort_node("AveragePool", {"x": x}, kernel_shape=list(kernel), strides=list(stride),
                      pads=list(pads), ceil_mode=ceil, count_include_pad=count_include_pad)
    src = arena.put(x)
    dst = arena.cube(expect.shape)
    pdp_op(dev, src, dst, arena.ctx, kernel=kernel, stride=stride, pads=pads, method=R.pdp_method_e.AVG,
           count_include_pad=count_include_pad)
    assert_done(dev, done_bit("PDP", 0))
    np.testing.assert_allclose(arena.get(dst), expect, rtol=RTOL32, atol=ATOL32)


def test_pdp_fp16(dev: VirtualDevice, arena: Arena) -> None:
    x = rand(2, 4, 4, seed=72, dtype=np.float16)
    src = arena.put(x)
    dst = arena.cube((2, 2, 2), np.float16)
    pdp_op(dev, src, dst, arena.ctx, method=R.pdp_method_e.AVG)
    assert_done(dev, done_bit("PDP", 0))
    expect = x.astype(np.float32).reshape(2, 2, 2, 2, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(arena.get(dst).astype(np.float32), expect, rtol=TOL16, atol=TOL16)


# -- CDP ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "alpha", "beta", "bias"), [(3, 1e-4, 0.75, 1.0), (5, 0.5, 0.6, 2.0),
                                                             (2, 0.3, 1.0, 1.5), (1, 1.0, 0.5, 1.0)])
def test_cdp_lrn_matches_onnx(dev: VirtualDevice, arena: Arena, size: int, alpha: float, beta: float,
                              bias: float) -> None:
    x = rand(6, 3, 4, seed=80) * 2
    src = arena.put(x, surf_stride=3 * 4 * 4 + 8)
    dst = arena.cube(x.shape)
    program(dev, "CDP", group=0, ctx_id=arena.ctx, precision=FP32, src=src, dst=dst, lrn_size=size,
            lrn_alpha=alpha, lrn_beta=beta, lrn_bias=bias, op_enable=1)
    assert_done(dev, done_bit("CDP", 0))
    np.testing.assert_allclose(arena.get(dst), lrn_ref(x, size, alpha, beta, bias), rtol=1e-5, atol=1e-5)
    if size % 2:  # onnxruntime implements odd sizes only
        expect = ort_node("LRN", {"x": x}, size=size, alpha=alpha, beta=beta, bias=bias)
        np.testing.assert_allclose(arena.get(dst), expect, rtol=1e-5, atol=1e-5)


def lrn_ref(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX LRN: the window of channel c is c - floor((size-1)/2) .. c + ceil((size-1)/2), clipped."""
    c = x.shape[0]
    x64 = x.astype(np.float64)
    out = np.empty_like(x64)
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + -(-(size - 1) // 2))
        square_sum = (x64[lo:hi + 1] ** 2).sum(axis=0)
        out[ch] = x64[ch] / (bias + alpha / size * square_sum) ** beta
    return out.astype(np.float32)


# -- RUBIK -------------------------------------------------------------------------------------------------


def rubik(dev: VirtualDevice, arena: Arena, mode: int, x: np.ndarray, out_shape: tuple[int, int, int], *,
          block: tuple[int, int] = (1, 1), dcr: int = 0, perm: int = 0,
          src_strides: tuple[int, int] | None = None, dst_strides: tuple[int, int] | None = None) -> Cube:
    ls, ss = src_strides or (None, None)
    src = arena.put(x, line_stride=ls, surf_stride=ss)
    ld, sd = dst_strides or (None, None)
    dst = arena.cube(out_shape, x.dtype, line_stride=ld, surf_stride=sd)
    program(dev, "RUBIK", group=0, ctx_id=arena.ctx, precision=PRECISION[x.dtype], mode=mode, src=src,
            dst=dst, block_x=block[1], block_y=block[0], dcr=dcr, perm=perm, op_enable=1)
    assert_done(dev, done_bit("RUBIK", 0))
    return dst


def depth_to_space_ref(x: np.ndarray, by: int, bx: int, dcr: bool) -> np.ndarray:
    c, h, w = x.shape
    co = c // (by * bx)
    out = np.empty((co, h * by, w * bx), x.dtype)
    for ch, y, xx in itertools.product(range(co), range(by), range(bx)):
        src = (y * bx + xx) * co + ch if dcr else (ch * by + y) * bx + xx
        out[ch, y::by, xx::bx] = x[src]
    return out


def space_to_depth_ref(x: np.ndarray, by: int, bx: int) -> np.ndarray:
    c, h, w = x.shape
    out = np.empty((c * by * bx, h // by, w // bx), x.dtype)
    for ch, y, xx in itertools.product(range(c), range(by), range(bx)):
        out[(y * bx + xx) * c + ch] = x[ch, y::by, xx::bx]
    return out


@pytest.mark.parametrize("dcr", [1, 0], ids=["DCR", "CRD"])
def test_rubik_contract_matches_onnx_depth_to_space(dev: VirtualDevice, arena: Arena, dcr: int) -> None:
    x = rand(8, 3, 2, seed=90)
    dst = rubik(dev, arena, R.rubik_mode_e.CONTRACT, x, (2, 6, 4), block=(2, 2), dcr=dcr)
    expect = ort_node("DepthToSpace", {"x": x}, blocksize=2, mode="DCR" if dcr else "CRD")
    np.testing.assert_array_equal(arena.get(dst), expect)


@pytest.mark.parametrize("dcr", [1, 0], ids=["DCR", "CRD"])
def test_rubik_contract_non_square_block(dev: VirtualDevice, arena: Arena, dcr: int) -> None:
    x = rand(12, 2, 3, seed=91)
    dst = rubik(dev, arena, R.rubik_mode_e.CONTRACT, x, (2, 6, 6), block=(3, 2), dcr=dcr,
                src_strides=(4 * 4, 4 * 4 * 3), dst_strides=(7 * 4, 7 * 4 * 6))
    np.testing.assert_array_equal(arena.get(dst), depth_to_space_ref(x, 3, 2, bool(dcr)))


def test_rubik_space_to_depth(dev: VirtualDevice, arena: Arena) -> None:
    x = rand(2, 4, 6, seed=92)
    dst = rubik(dev, arena, R.rubik_mode_e.SPACE_TO_DEPTH, x, (8, 2, 3), block=(2, 2))
    np.testing.assert_array_equal(arena.get(dst), ort_node("SpaceToDepth", {"x": x}, blocksize=2))
    dev2 = VirtualDevice("full")
    arena2 = Arena(dev2)
    y = rand(3, 6, 4, seed=93, dtype=np.float16)
    dst2 = rubik(dev2, arena2, R.rubik_mode_e.SPACE_TO_DEPTH, y, (3 * 3 * 2, 2, 2), block=(3, 2))
    np.testing.assert_array_equal(arena2.get(dst2), space_to_depth_ref(y, 3, 2))


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))), ids=str)
def test_rubik_transpose(dev: VirtualDevice, arena: Arena, perm: tuple[int, int, int]) -> None:
    x = rand(2, 3, 4, seed=94)
    code = perm[0] | perm[1] << 2 | perm[2] << 4
    out_shape = (x.shape[perm[0]], x.shape[perm[1]], x.shape[perm[2]])
    dst = rubik(dev, arena, R.rubik_mode_e.TRANSPOSE, x, out_shape, perm=code)
    np.testing.assert_array_equal(arena.get(dst), np.transpose(x, perm))


@pytest.mark.parametrize("mode", [R.rubik_mode_e.SPLIT, R.rubik_mode_e.MERGE], ids=["split", "merge"])
def test_rubik_split_merge_copy_between_strides(dev: VirtualDevice, arena: Arena, mode: int) -> None:
    x = rand(3, 4, 5, seed=95, dtype=np.float16)
    dst = rubik(dev, arena, mode, x, x.shape, src_strides=(8 * 2, 4 * 8 * 2 + 6),
                dst_strides=(6 * 2, 5 * 6 * 2))
    np.testing.assert_array_equal(arena.get(dst), x)
    raw = arena.raw(dst).view(np.uint16)
    assert (raw == 0xA5A5).sum() == raw.size - x.size
