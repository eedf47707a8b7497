"""The device's numerical kernels against onnxruntime running one-node ONNX models.

Our arrays are the N=1 slice of ONNX's NCHW tensors. float32 results must match to ~1e-4, float16
ones (computed in float32, rounded once) to ~1e-2 of a float32 reference on the same float16 values.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from pydla import DlaError, NvError
from pydla.hw import compute, conv, conv_depthwise, conv_gemm
from pydla.hw.compute import (
    activation,
    conv2d,
    conv_output_size,
    deconv2d,
    depth_to_space,
    eltwise,
    global_pool,
    lrn,
    pool2d,
    rubik_contract,
    scale_bias,
    space_to_depth,
    transpose_chw,
)

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F32_TOL = (1e-4, 1e-4)  # (rtol, atol)
F16_TOL = (1e-2, 1e-2)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _ort_graph(nodes: list[Any], x: np.ndarray, inits: dict[str, np.ndarray] | None = None,
               extra: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Run a graph whose input "x" is our (C, H, W) array with a batch axis, output "y"; return y[0]."""
    feeds = {"x": x[None].astype(np.float32)}
    for name, value in (extra or {}).items():
        feeds[name] = value.astype(np.float32)
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v.astype(np.float32), n) for n, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every onnxruntime that knows opset 17 loads
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    y: np.ndarray = np.asarray(sess.run(["y"], feeds)[0], dtype=np.float32)
    return y.reshape(y.shape[1:])


def _ort(op: str, x: np.ndarray, inits: dict[str, np.ndarray] | None = None, **attrs: Any) -> np.ndarray:
    node = helper.make_node(op, ["x", *(inits or {})], ["y"], **attrs)
    return _ort_graph([node], x, inits)


def _close(ours: np.ndarray, ref: np.ndarray, tol: tuple[float, float] = F32_TOL) -> None:
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    np.testing.assert_allclose(ours.astype(np.float32), ref, rtol=tol[0], atol=tol[1])


def _padded_lines(a: np.ndarray, extra: int = 5, gap: int = 3) -> np.ndarray:
    """The same values as a, in a view with padded lines and gaps between surfaces (a bigger buffer)."""
    c, h, w = a.shape
    line = w + extra
    surface = h * line + gap
    buf = np.full(c * surface + 16, np.nan, dtype=a.dtype)
    item = a.itemsize
    view = as_strided(buf[7:], (c, h, w), (surface * item, line * item, item))
    view[...] = a
    return view


def _sentinel_out(shape: tuple[int, int, int], dtype: Any = np.float32, sentinel: float = 1234.5,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A strided out view into a sentinel-filled buffer, the buffer, and a mask of the view's elements."""
    c, h, w = shape
    line, surface = w + 3, (h + 2) * (w + 3) + 1
    buf = np.full(c * surface + 20, sentinel, dtype=dtype)
    item = buf.itemsize
    strides = (surface * item, line * item, item)
    out = as_strided(buf[5:], shape, strides)
    ids = np.arange(buf.size)
    mask = np.zeros(buf.size, dtype=bool)
    mask[as_strided(ids[5:], shape, (surface * ids.itemsize, line * ids.itemsize, ids.itemsize))] = True
    return out, buf, mask


def _assert_untouched(buf: np.ndarray, mask: np.ndarray, sentinel: float = 1234.5) -> None:
    assert np.all(buf[~mask] == np.asarray(sentinel, dtype=buf.dtype))


# -- conv_output_size ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "expected"), [
    ((224, 7, 2, 3, 3, 1), 112),
    ((56, 3, 1, 1, 1, 1), 56),
    ((56, 1, 2, 0, 0, 1), 28),
    ((13, 3, 1, 2, 2, 2), 13),
    ((10, 3, 3, 0, 1, 1), 3),
    ((5, 5, 1, 0, 0, 1), 1),
    ((7, 2, 3, 0, 0, 1), 2),
])
def test_conv_output_size(args: tuple[int, ...], expected: int) -> None:
    assert conv_output_size(*args) == expected


@pytest.mark.parametrize("args", [(4, 5, 1, 0, 0, 1), (8, 3, 0, 0, 0, 1), (8, 3, 1, -1, 0, 1),
                                  (5, 3, 1, 0, 0, 3)])
def test_conv_output_size_rejects_bad_geometry(args: tuple[int, ...]) -> None:
    with pytest.raises(DlaError) as e:
        conv_output_size(*args)
    assert e.value.code == NvError.BadParameter


# -- CONV -------------------------------------------------------------------------------------------------

# (C, H, W, K, kh, kw, stride, pads (t, l, b, r), dilation, groups)
CONV_CASES = {
    "3x3_pad1": (8, 10, 12, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "stride2_asym_pads": (6, 11, 9, 5, 3, 3, (2, 2), (0, 1, 2, 1), (1, 1), 1),
    "dilation2": (4, 13, 13, 6, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 1),
    "dilation_stride_mixed": (5, 15, 12, 4, 3, 2, (2, 1), (1, 0, 2, 1), (2, 3), 1),
    "groups2": (8, 9, 10, 6, 3, 3, (1, 2), (1, 0, 1, 0), (1, 1), 2),
    "groups4_unpadded": (8, 9, 10, 12, 2, 3, (1, 1), (0, 0, 0, 0), (1, 1), 4),
    "depthwise": (8, 12, 12, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 8),
    "depthwise_s2_dil_asym": (6, 13, 11, 6, 3, 3, (2, 2), (2, 1, 0, 2), (2, 1), 6),
    "depthwise_unpadded": (5, 9, 8, 5, 3, 2, (1, 2), (0, 0, 0, 0), (1, 1), 5),
    "depthwise_multiplier2": (4, 9, 9, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4),
    "1x1": (16, 7, 9, 12, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "1x1_stride2": (16, 8, 9, 12, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1),
    "1x1_groups4": (16, 7, 9, 8, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 4),
    "1x1_padded": (3, 5, 6, 4, 1, 1, (1, 1), (1, 0, 0, 2), (1, 1), 1),
    "stride_larger_than_kernel": (3, 17, 15, 4, 2, 2, (3, 3), (0, 0, 0, 0), (1, 1), 1),
    "nonsquare": (5, 8, 20, 7, 2, 5, (1, 2), (1, 2, 0, 3), (1, 1), 1),
    "stem_7x7_s2_p3": (3, 32, 30, 8, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1),
    "kernel_covers_input": (4, 5, 6, 3, 5, 6, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "floor_drops_tail": (2, 10, 10, 3, 3, 3, (4, 3), (0, 1, 2, 0), (1, 1), 1),
    "wide_map": (4, 6, 40, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "wide_map_stride2_stem": (3, 9, 70, 5, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1),
    "wide_map_groups_dilated": (4, 7, 45, 6, 3, 2, (1, 1), (2, 0, 1, 3), (2, 3), 2),
    "wide_map_stride3_unpadded": (2, 8, 110, 3, 4, 5, (2, 3), (0, 0, 0, 0), (1, 2), 1),
    "wide_map_dilation_skips_phases": (2, 9, 70, 3, 3, 3, (2, 2), (2, 2, 2, 2), (2, 2), 1),
    "depthwise_stride_gt_kernel": (3, 10, 11, 3, 2, 2, (3, 3), (1, 0, 0, 1), (1, 1), 3),
}


@pytest.fixture(params=["auto", "wide", "strided"])
def im2col(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a conv test with conv2d choosing its im2col, then with each im2col forced."""
    if request.param == "wide":
        monkeypatch.setattr(conv_gemm, "WIDE_MIN_WIDTH", 0)
        monkeypatch.setattr(conv_gemm, "WIDE_MAX_EXTRA", float("inf"))
    elif request.param == "strided":
        monkeypatch.setattr(conv_gemm, "WIDE_MIN_WIDTH", 1 << 30)
    return str(request.param)


def _conv_ref(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pads: tuple[int, int, int, int],
              dilation: tuple[int, int], groups: int) -> np.ndarray:
    t, left, b, r = pads
    return _ort("Conv", x.astype(np.float32), {"w": w.astype(np.float32)},
                kernel_shape=list(w.shape[2:]), strides=list(stride), pads=[t, left, b, r],
                dilations=list(dilation), group=groups)


@pytest.mark.parametrize("case", CONV_CASES.values(), ids=CONV_CASES.keys())
def test_conv2d_matches_onnxruntime(case: tuple[Any, ...], im2col: str) -> None:
    c, h, w_, k, kh, kw, stride, pads, dilation, groups = case
    x = _rand(c, h, w_, seed=1)
    w = _rand(k, c // groups, kh, kw, seed=2)
    ref = _conv_ref(x, w, stride, pads, dilation, groups)
    ours = conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups)
    assert ours.dtype == np.float32 and ours.flags.c_contiguous
    _close(ours, ref)
    # The same into a float32 out with packed lines (the direct-GEMM path) and into a strided one.
    dense = np.full(ref.shape, np.nan, dtype=np.float32)
    assert conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups, out=dense) is dense
    _close(dense, ref)
    out, buf, mask = _sentinel_out(ref.shape)
    conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups, out=out)
    _close(out, ref)
    _assert_untouched(buf, mask)


@pytest.mark.parametrize("name", ["3x3_pad1", "stride2_asym_pads", "depthwise", "1x1", "groups2"])
def test_conv2d_float16(name: str, im2col: str) -> None:
    c, h, w_, k, kh, kw, stride, pads, dilation, groups = CONV_CASES[name]
    x = _rand(c, h, w_, seed=3).astype(np.float16)
    w = (_rand(k, c // groups, kh, kw, seed=4) * 0.5).astype(np.float16)
    ref = _conv_ref(x, w, stride, pads, dilation, groups)
    ours = conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups)
    assert ours.dtype == np.float16
    _close(ours, ref, F16_TOL)
    # float32 input into a float16 out: computed in float32, rounded on store.
    out, buf, mask = _sentinel_out(ref.shape, np.float16)
    conv2d(x.astype(np.float32), w, stride=stride, pads=pads, dilation=dilation, groups=groups, out=out)
    _close(out, ref, F16_TOL)
    _assert_untouched(buf, mask)


def test_conv2d_in_several_im2col_chunks(monkeypatch: pytest.MonkeyPatch, im2col: str) -> None:
    # A budget of a few rows forces the chunked loop; results must not depend on it.
    x, w = _rand(6, 23, 19, seed=5), _rand(10, 3, 3, 3, seed=6)
    ref = _conv_ref(x, w, (1, 2), (1, 1, 2, 0), (1, 1), 2)
    monkeypatch.setattr(conv_gemm, "IM2COL_BYTES", 6 * 9 * 9 * 4 * 3)
    _close(conv2d(x, w, stride=(1, 2), pads=(1, 1, 2, 0), groups=2), ref)
    out, buf, mask = _sentinel_out(ref.shape)
    conv2d(x, w, stride=(1, 2), pads=(1, 1, 2, 0), groups=2, out=out)
    _close(out, ref)
    _assert_untouched(buf, mask)


ADDEND_KINDS = {
    "bias": lambda k, ho, wo, rng: rng.standard_normal((k, 1, 1)).astype(np.float32),
    "scalar": lambda k, ho, wo, rng: rng.standard_normal((1, 1, 1)).astype(np.float32),
    "cube": lambda k, ho, wo, rng: rng.standard_normal((k, ho, wo)).astype(np.float32),
    "cube_fp16": lambda k, ho, wo, rng: rng.standard_normal((k, ho, wo)).astype(np.float16),
}


@pytest.mark.parametrize("kinds", [("bias",), ("scalar",), ("cube",), ("bias", "cube"), ("bias", "scalar"),
                                   ("cube_fp16", "bias")])
@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv2d_addends(name: str, kinds: tuple[str, ...]) -> None:
    """What SDP folds into a convolution (its bias, a residual: see blocks.sdp_addends) is added
    exactly once, on every path (a per-channel addend of a depthwise convolution is one more tap)."""
    c, h, w_, k, kh, kw, stride, pads, dilation, groups = CONV_CASES[name]
    x, w = _rand(c, h, w_, seed=21), _rand(k, c // groups, kh, kw, seed=22)
    ref = _conv_ref(x, w, stride, pads, dilation, groups)
    rng = _rng(23)
    adds = [ADDEND_KINDS[kind](*ref.shape, rng) for kind in kinds]
    expected = ref + sum(a.astype(np.float32) for a in adds)
    out, buf, mask = _sentinel_out(ref.shape)
    conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups, out=out, addends=adds)
    _close(out, expected)
    _assert_untouched(buf, mask)
    _close(conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups, addends=adds), expected)


@pytest.mark.parametrize("name", ["depthwise", "depthwise_s2_dil_asym", "depthwise_multiplier2"])
def test_depthwise_in_channel_blocks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    c, h, w_, k, kh, kw, stride, pads, dilation, groups = CONV_CASES[name]
    x, w = _rand(c, h, w_, seed=13), _rand(k, 1, kh, kw, seed=14)
    ref = _conv_ref(x, w, stride, pads, dilation, groups)
    monkeypatch.setattr(conv_depthwise, "BLOCK_BYTES", 1)  # one channel per block
    out, buf, mask = _sentinel_out(ref.shape)
    conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups, out=out)
    _close(out, ref)
    _assert_untouched(buf, mask)
    monkeypatch.setattr(conv_depthwise, "BLOCK_BYTES", 3 * 4 * h * (w_ + 4))  # a ragged last block
    _close(conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups), ref)


@pytest.mark.parametrize("name", ["3x3_pad1", "1x1", "depthwise", "groups2", "stride_larger_than_kernel"])
def test_conv2d_strided_inputs_give_the_same_result(name: str, im2col: str) -> None:
    c, h, w_, k, kh, kw, stride, pads, dilation, groups = CONV_CASES[name]
    x = _rand(c, h, w_, seed=7)
    w = _rand(k, c // groups, kh, kw, seed=8)
    kwargs: dict[str, Any] = {"stride": stride, "pads": pads, "dilation": dilation, "groups": groups}
    expected = conv2d(x, w, **kwargs)
    big = _rand(c + 5, h, w_, seed=9)
    big[2:2 + c] = x
    channel_slice = big[2:2 + c]                    # surfaces farther apart than one surface
    every_other = np.repeat(x, 2, axis=0)[::2]      # surface stride of two surfaces
    lines = _padded_lines(x)                        # padded line stride, gaps between surfaces
    column_slice = np.pad(x, ((0, 0), (0, 0), (2, 3)))[:, :, 2:2 + w_]
    for view in (channel_slice, every_other, lines, column_slice):
        np.testing.assert_array_equal(view, x)
        np.testing.assert_allclose(conv2d(view, w, **kwargs), expected, rtol=1e-6, atol=1e-6)
    # Non-contiguous weights too.
    w_f = np.asfortranarray(w)
    np.testing.assert_allclose(conv2d(x, w_f, **kwargs), expected, rtol=1e-6, atol=1e-6)


def test_conv2d_out_overlapping_the_input_is_safe() -> None:
    x, w = _rand(4, 6, 6, seed=10), _rand(4, 4, 3, 3, seed=11)
    expected = conv2d(x, w, pads=(1, 1, 1, 1))
    buf = x.copy()
    conv2d(buf, w, pads=(1, 1, 1, 1), out=buf)
    np.testing.assert_allclose(buf, expected, rtol=1e-6, atol=1e-6)
    wd = _rand(4, 1, 3, 3, seed=12)
    expected = conv2d(x, wd, pads=(1, 1, 1, 1), groups=4)
    buf = x.copy()
    conv2d(buf, wd, pads=(1, 1, 1, 1), groups=4, out=buf)
    np.testing.assert_allclose(buf, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("x_shape", "w_shape", "kwargs"), [
    ((4, 5, 5), (3, 3, 3, 3), {}),                              # channels mismatch
    ((4, 5, 5), (3, 2, 3, 3), {"groups": 3}),                   # groups do not divide C
    ((4, 5, 5), (3, 4, 3), {}),                                 # 3-D weights
    ((4, 5), (3, 4, 1, 1), {}),                                 # 2-D input
    ((4, 5, 5), (3, 4, 3, 3), {"stride": (0, 1)}),
    ((4, 5, 5), (3, 4, 3, 3), {"pads": (0, -1, 0, 0)}),
    ((4, 2, 2), (3, 4, 3, 3), {}),                              # kernel bigger than the input
    ((4, 5, 5), (3, 4, 3, 3), {"stride": (1,)}),
    ((4, 5, 5), (3, 4, 3, 3), {"pads": (1, 1)}),
    ((4, 5, 5), (3, 4, 3, 3), {"dilation": "ab"}),
])
def test_conv2d_rejects_bad_parameters(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                       kwargs: dict[str, Any]) -> None:
    with pytest.raises(DlaError) as e:
        conv2d(np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32), **kwargs)
    assert e.value.code == NvError.BadParameter


def test_conv2d_rejects_bad_out_and_dtype() -> None:
    x, w = np.zeros((2, 4, 4), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(DlaError, match="out: shape"):
        conv2d(x, w, out=np.zeros((3, 3, 3), np.float32))
    with pytest.raises(DlaError, match="float32 or float16"):
        conv2d(x.astype(np.float64), w)
    with pytest.raises(DlaError, match="read-only"):
        ro = np.zeros((3, 2, 2), np.float32)
        ro.flags.writeable = False
        conv2d(x, w, out=ro)


# -- ConvTranspose --------------------------------------------------------------------------------------

# (C, H, W, K, kh, kw, stride, pads, dilation, groups, output_padding)
DECONV_CASES = {
    "s2_k3_p1_op1": (6, 5, 7, 4, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, (1, 1)),
    "s2_k2": (4, 6, 5, 3, 2, 2, (2, 2), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
    "s2_k4_p1_asym": (5, 4, 6, 6, 4, 4, (2, 2), (1, 2, 1, 0), (1, 1), 1, (0, 0)),
    "groups2": (6, 5, 5, 4, 3, 3, (2, 1), (1, 0, 1, 1), (1, 1), 2, (1, 0)),
    "depthwise": (4, 5, 6, 4, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 4, (0, 1)),
    "dilation_nonsquare": (3, 4, 5, 5, 2, 3, (3, 2), (0, 1, 1, 0), (2, 2), 1, (2, 1)),
    "stride1": (5, 6, 6, 3, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, (0, 0)),
}


@pytest.mark.parametrize("case", DECONV_CASES.values(), ids=DECONV_CASES.keys())
def test_deconv2d_matches_onnxruntime(case: tuple[Any, ...]) -> None:
    c, h, w_, k, kh, kw, stride, pads, dilation, groups, op = case
    x = _rand(c, h, w_, seed=20)
    w = _rand(c, k // groups, kh, kw, seed=21)
    ref = _ort("ConvTranspose", x, {"w": w}, kernel_shape=[kh, kw], strides=list(stride),
               pads=list(pads), dilations=list(dilation), group=groups, output_padding=list(op))
    kwargs: dict[str, Any] = {"stride": stride, "pads": pads, "dilation": dilation, "groups": groups,
                              "output_padding": op}
    ours = deconv2d(x, w, **kwargs)
    assert ours.flags.c_contiguous
    _close(ours, ref)
    out, buf, mask = _sentinel_out(ref.shape)
    deconv2d(_padded_lines(x), w, **kwargs, out=out)
    _close(out, ref)
    _assert_untouched(buf, mask)
    ours16 = deconv2d(x.astype(np.float16), w.astype(np.float16), **kwargs)
    assert ours16.dtype == np.float16
    ref16 = _ort("ConvTranspose", x.astype(np.float16).astype(np.float32),
                 {"w": w.astype(np.float16).astype(np.float32)}, kernel_shape=[kh, kw],
                 strides=list(stride), pads=list(pads), dilations=list(dilation), group=groups,
                 output_padding=list(op))
    _close(ours16, ref16, F16_TOL)


def test_deconv2d_rejects_bad_parameters() -> None:
    x = np.zeros((4, 3, 3), np.float32)
    with pytest.raises(DlaError):
        deconv2d(x, np.zeros((3, 2, 3, 3), np.float32))
    with pytest.raises(DlaError):
        deconv2d(x, np.zeros((4, 2, 2, 2), np.float32), pads=(2, 2, 2, 2))


# -- PDP ------------------------------------------------------------------------------------------------

# (C, H, W, kernel, stride, pads)
POOL_CASES = {
    "3x3_s2_p1": (4, 11, 12, (3, 3), (2, 2), (1, 1, 1, 1)),
    "2x2_s2": (3, 8, 10, (2, 2), (2, 2), (0, 0, 0, 0)),
    "asym_pads_nonsquare": (5, 9, 13, (2, 4), (1, 3), (1, 0, 0, 2)),
    "stride_gt_kernel": (2, 13, 11, (2, 2), (3, 3), (0, 1, 1, 0)),
    "odd_tail": (3, 10, 7, (3, 3), (2, 2), (0, 0, 0, 0)),
}


def _pool_ref(op: str, x: np.ndarray, kernel: Any, stride: Any, pads: Any, **attrs: Any) -> np.ndarray:
    return _ort(op, x, kernel_shape=list(kernel), strides=list(stride), pads=list(pads), **attrs)


@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES.values(), ids=POOL_CASES.keys())
def test_max_and_min_pool(case: tuple[Any, ...], ceil: int) -> None:
    c, h, w_, kernel, stride, pads = case
    x = _rand(c, h, w_, seed=30)
    ref = _pool_ref("MaxPool", x, kernel, stride, pads, ceil_mode=ceil)
    out_size = ref.shape[1:] if ceil else None
    _close(pool2d(x, kernel=kernel, stride=stride, pads=pads, method="max", out_size=out_size), ref)
    ref_min = -_pool_ref("MaxPool", -x, kernel, stride, pads, ceil_mode=ceil)
    ours_min = pool2d(x, kernel=kernel, stride=stride, pads=pads, method="min", out_size=out_size)
    _close(ours_min, ref_min)
    ours16 = pool2d(x.astype(np.float16), kernel=kernel, stride=stride, pads=pads, method="max",
                    out_size=out_size)
    assert ours16.dtype == np.float16
    _close(ours16, ref, F16_TOL)


def _average_pool_by_definition(x: np.ndarray, kernel: Any, stride: Any, pads: Any,
                                out_size: tuple[int, ...]) -> np.ndarray:
    """AveragePool with count_include_pad, window by window: the sum over the window's elements
    inside the input, divided by the number of its positions inside the padded input."""
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = kernel, stride, pads
    c, h, w = x.shape
    out = np.zeros((c, *out_size), np.float32)
    for i in range(out_size[0]):
        for j in range(out_size[1]):
            y0, x0 = i * sh - pt, j * sw - pl
            rows = range(max(y0, 0), min(y0 + kh, h))
            cols = range(max(x0, 0), min(x0 + kw, w))
            count = (min(y0 + kh, h + pb) - max(y0, -pt)) * (min(x0 + kw, w + pr) - max(x0, -pl))
            window = x[:, rows.start:rows.stop, cols.start:cols.stop]
            out[:, i, j] = window.sum(axis=(1, 2)) / max(count, 1)
    return out


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES.values(), ids=POOL_CASES.keys())
def test_average_pool(case: tuple[Any, ...], ceil: int, count_include_pad: int) -> None:
    c, h, w_, kernel, stride, pads = case
    x = _rand(c, h, w_, seed=31)
    ref = _pool_ref("AveragePool", x, kernel, stride, pads, ceil_mode=ceil,
                    count_include_pad=count_include_pad)
    out_size = ref.shape[1:] if ceil else None
    if ceil and count_include_pad:
        # A ceil-mode window that hangs past the padded input: onnxruntime 1.23 (the last release
        # for Python 3.10) divides by the whole kernel; 1.32, PyTorch and pydla by the positions
        # inside the padded input. The brute-force definition decides.
        ref = _average_pool_by_definition(x, kernel, stride, pads, ref.shape[1:])
    ours = pool2d(x, kernel=kernel, stride=stride, pads=pads, method="avg",
                  count_include_pad=bool(count_include_pad), out_size=out_size)
    _close(ours, ref)
    out, buf, mask = _sentinel_out(ref.shape, np.float16)
    pool2d(_padded_lines(x.astype(np.float16)), kernel=kernel, stride=stride, pads=pads, method="avg",
           count_include_pad=bool(count_include_pad), out_size=out_size, out=out)
    _close(out, ref, F16_TOL)
    _assert_untouched(buf, mask)


def test_ceil_mode_changes_the_output_size_in_these_cases() -> None:
    # Guards the ceil-mode tests above against testing nothing: the clipped windows exist.
    for c, h, w_, kernel, stride, pads in POOL_CASES.values():
        floor = _pool_ref("MaxPool", np.zeros((c, h, w_), np.float32), kernel, stride, pads, ceil_mode=0)
        ceil = _pool_ref("MaxPool", np.zeros((c, h, w_), np.float32), kernel, stride, pads, ceil_mode=1)
        if floor.shape != ceil.shape:
            break
    else:
        pytest.fail("no pooling case has a ceil-mode window")


@pytest.mark.parametrize("method", ["max", "avg", "min"])
def test_pool2d_in_channel_blocks(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _rand(7, 11, 12, seed=33)
    kwargs: dict[str, Any] = {"kernel": (3, 2), "stride": (2, 2), "pads": (1, 0, 1, 1), "method": method,
                              "count_include_pad": True, "out_size": (6, 7)}
    expected = pool2d(x, **kwargs)
    for block_bytes in (1, 3 * 13 * 14 * 4):  # one channel per block; blocks of 3 with a ragged end
        monkeypatch.setattr(compute, "_POOL_BLOCK_BYTES", block_bytes)
        np.testing.assert_array_equal(pool2d(x, **kwargs), expected)


def test_pool2d_writes_strided_out_only() -> None:
    x = _rand(3, 12, 12, seed=32)
    expected = pool2d(x, kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1), method="max")
    out, buf, mask = _sentinel_out(expected.shape)
    pool2d(x[:, :, :], kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1), method="max", out=out)
    np.testing.assert_array_equal(out, expected)
    _assert_untouched(buf, mask)


def test_pool2d_rejects_bad_parameters() -> None:
    x = np.zeros((2, 4, 4), np.float32)
    with pytest.raises(DlaError):
        pool2d(x, kernel=(3, 3), stride=(1, 1), method="median")  # type: ignore[arg-type]
    with pytest.raises(DlaError):
        pool2d(x, kernel=(2, 2), stride=(2, 2), out_size=(4, 4))


@pytest.mark.parametrize(("method", "op"), [("avg", "GlobalAveragePool"), ("max", "GlobalMaxPool")])
def test_global_pool(method: str, op: str) -> None:
    x = _rand(6, 7, 9, seed=33)
    ref = _ort(op, x)
    _close(global_pool(x, method), ref)  # type: ignore[arg-type]
    out, buf, mask = _sentinel_out((6, 1, 1))
    global_pool(_padded_lines(x), method, out=out)  # type: ignore[arg-type]
    _close(out, ref)
    _assert_untouched(buf, mask)
    ours16 = global_pool(x.astype(np.float16), method)  # type: ignore[arg-type]
    assert ours16.dtype == np.float16
    _close(ours16, ref, F16_TOL)


# -- CDP ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "alpha", "beta", "bias"), [(5, 1e-4, 0.75, 1.0), (3, 0.5, 0.5, 2.0),
                                                              (4, 0.3, 0.75, 1.0), (1, 0.2, 1.0, 1.5),
                                                              (9, 0.1, 0.6, 1.0)])
def test_lrn(size: int, alpha: float, beta: float, bias: float) -> None:
    x = _rand(7, 5, 6, seed=34) * 3
    if size % 2:
        ref = _ort("LRN", x, size=size, alpha=alpha, beta=beta, bias=bias)
    else:
        # onnxruntime takes odd sizes only (and onnx.reference's LRN loops over the batch axis, not
        # channels), so the even window is checked against the spec's formula in float64.
        x64, sq = x.astype(np.float64), np.zeros(x.shape)
        for ch in range(x.shape[0]):
            lo, hi = max(0, ch - (size - 1) // 2), min(x.shape[0], ch + size // 2 + 1)
            sq[ch] = np.sum(x64[lo:hi] ** 2, axis=0)
        ref = (x64 / (bias + alpha / size * sq) ** beta).astype(np.float32)
    _close(lrn(x, size=size, alpha=alpha, beta=beta, bias=bias), ref)
    out, buf, mask = _sentinel_out(x.shape, np.float16)
    lrn(x[:, :, :].astype(np.float16), size=size, alpha=alpha, beta=beta, bias=bias, out=out)
    _close(out, ref, F16_TOL)
    _assert_untouched(buf, mask)


# -- SDP ------------------------------------------------------------------------------------------------


def _activation_cases() -> list[tuple[str, dict[str, Any], str, dict[str, np.ndarray], dict[str, Any]]]:
    slope = np.linspace(-0.5, 0.5, 6).astype(np.float32)
    return [
        ("none", {}, "Identity", {}, {}),
        ("relu", {}, "Relu", {}, {}),
        ("leaky_relu", {"alpha": 0.1}, "LeakyRelu", {}, {"alpha": 0.1}),
        ("prelu", {"slope": slope}, "PRelu", {"slope": slope.reshape(6, 1, 1)}, {}),
        ("prelu", {"alpha": 0.25}, "PRelu", {"slope": np.full((1, 1, 1), 0.25, np.float32)}, {}),
        ("clamp", {"clip_min": -0.5, "clip_max": 0.75}, "Clip",
         {"lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}, {}),
        ("clamp", {"clip_min": 0.0, "clip_max": 6.0}, "Clip",
         {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}, {}),
        ("sigmoid", {}, "Sigmoid", {}, {}),
        ("tanh", {}, "Tanh", {}, {}),
    ]


@pytest.mark.parametrize(("kind", "kwargs", "op", "inits", "attrs"), _activation_cases(),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(_activation_cases())])
def test_activation(kind: str, kwargs: dict[str, Any], op: str, inits: dict[str, np.ndarray],
                    attrs: dict[str, Any]) -> None:
    x = _rand(6, 5, 7, seed=35) * 4
    x[0, 0, :3] = [-100.0, 100.0, 0.0]  # sigmoid / tanh saturation
    ref = _ort(op, x, inits, **attrs)
    _close(activation(x, kind, **kwargs), ref)
    # In place, through a strided view.
    view = _padded_lines(x)
    assert activation(view, kind, **kwargs, out=view) is view
    _close(view, ref)
    ours16 = activation(x.astype(np.float16), kind, **kwargs)
    assert ours16.dtype == np.float16
    _close(ours16, ref, F16_TOL)


def test_activation_rejects_bad_parameters() -> None:
    x = np.zeros((3, 2, 2), np.float32)
    with pytest.raises(DlaError):
        activation(x, "gelu")
    with pytest.raises(DlaError):
        activation(x, "prelu", slope=np.ones(4, np.float32))
    with pytest.raises(DlaError):
        activation(x, "clamp", clip_min=1.0, clip_max=0.0)


@pytest.mark.parametrize(("op", "onnx_op"), [("add", "Add"), ("sub", "Sub"), ("mul", "Mul"),
                                            ("max", "Max"), ("min", "Min"), ("div", "Div")])
@pytest.mark.parametrize("b_shape", [(5, 4, 6), (5, 1, 1), (1, 1, 1)])
def test_eltwise(op: str, onnx_op: str, b_shape: tuple[int, int, int]) -> None:
    a = _rand(5, 4, 6, seed=36)
    b = _rand(*b_shape, seed=37)
    if op == "div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    node = helper.make_node(onnx_op, ["x", "b"], ["y"])
    ref = _ort_graph([node], a, {"b": b[None]})
    _close(eltwise(a, b, op), ref)  # type: ignore[arg-type]
    out, buf, mask = _sentinel_out(a.shape)
    eltwise(_padded_lines(a), b, op, out=out)  # type: ignore[arg-type]
    _close(out, ref)
    _assert_untouched(buf, mask)
    # In place on a float16 a, computed in float32.
    a16 = a.astype(np.float16)
    ref16 = _ort_graph([node], a16.astype(np.float32), {"b": b[None]})
    eltwise(a16, b, op, out=a16)  # type: ignore[arg-type]
    _close(a16, ref16, F16_TOL)


def test_eltwise_rejects_non_broadcastable_b() -> None:
    with pytest.raises(DlaError):
        eltwise(np.zeros((3, 2, 2), np.float32), np.zeros((2, 1, 1), np.float32), "add")
    with pytest.raises(DlaError):
        eltwise(np.zeros((3, 2, 2), np.float32), np.zeros((3, 4, 4), np.float32), "add")
    with pytest.raises(DlaError):
        eltwise(np.zeros((3, 2, 2), np.float32), np.zeros((3, 2, 2), np.float32), "pow")  # type: ignore[arg-type]


@pytest.mark.parametrize("which", ["both", "scale", "bias", "neither"])
def test_scale_bias(which: str) -> None:
    x = _rand(6, 5, 4, seed=38)
    scale = _rand(6, seed=39) if which in ("both", "scale") else None
    bias = _rand(6, seed=40) if which in ("both", "bias") else None
    nodes = [helper.make_node("Mul", ["x", "s"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    s = np.ones(6, np.float32) if scale is None else scale
    b = np.zeros(6, np.float32) if bias is None else bias
    ref = _ort_graph(nodes, x, {"s": s.reshape(1, 6, 1, 1), "b": b.reshape(1, 6, 1, 1)})
    _close(scale_bias(x, scale, bias), ref)
    out, buf, mask = _sentinel_out(x.shape)
    scale_bias(_padded_lines(x), scale, bias, out=out)
    _close(out, ref)
    _assert_untouched(buf, mask)
    x16 = x.astype(np.float16)
    ours16 = scale_bias(x16, scale, bias, out=x16)
    assert ours16 is x16
    _close(ours16, ref, F16_TOL)


# -- RUBIK ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("block", [2, 3])
def test_depth_to_space(mode: str, block: int) -> None:
    x = _rand(2 * block * block, 4, 5, seed=41)
    ref = _ort("DepthToSpace", x, blocksize=block, mode=mode)
    np.testing.assert_array_equal(depth_to_space(x, block, block, mode), ref)  # type: ignore[arg-type]
    out, buf, mask = _sentinel_out(ref.shape)
    depth_to_space(_padded_lines(x), block, block, mode, out=out)  # type: ignore[arg-type]
    np.testing.assert_array_equal(out, ref)
    _assert_untouched(buf, mask)


@pytest.mark.parametrize("block", [2, 3])
def test_space_to_depth(block: int) -> None:
    x = _rand(3, 4 * block, 2 * block, seed=42)
    ref = _ort("SpaceToDepth", x, blocksize=block)
    np.testing.assert_array_equal(space_to_depth(x, block, block), ref)
    out, buf, mask = _sentinel_out(ref.shape, np.float16)
    space_to_depth(_padded_lines(x), block, block, out=out)
    np.testing.assert_array_equal(out, ref.astype(np.float16))
    _assert_untouched(buf, mask, 1234.5)


def test_non_square_blocks_round_trip_and_contract() -> None:
    x = _rand(4, 6, 10, seed=43)
    packed = space_to_depth(x, 3, 2)
    assert packed.shape == (24, 2, 5)
    np.testing.assert_array_equal(depth_to_space(packed, 3, 2, "DCR"), x)
    # Each output pixel comes from the channel the DCR formula names.
    y = depth_to_space(packed, 3, 2, "CRD")
    c, h, w, by, bx = 1, 1, 3, 2, 1
    assert y[c, h * 3 + by, w * 2 + bx] == packed[(c * 3 + by) * 2 + bx, h, w]
    np.testing.assert_array_equal(rubik_contract(packed, 2, 3), depth_to_space(packed, 3, 2, "DCR"))
    with pytest.raises(DlaError):
        depth_to_space(x, 3, 3)
    with pytest.raises(DlaError):
        space_to_depth(x, 4, 2)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_transpose_chw(perm: tuple[int, int, int]) -> None:
    x = _rand(3, 4, 5, seed=44)
    ref = _ort("Transpose", x[None][0], perm=[0, *(p + 1 for p in perm)])
    ours = transpose_chw(x, perm)
    assert ours.flags.c_contiguous
    np.testing.assert_array_equal(ours, ref)
    out, buf, mask = _sentinel_out(ref.shape)
    transpose_chw(_padded_lines(x), perm, out=out)
    np.testing.assert_array_equal(out, ref)
    _assert_untouched(buf, mask)
    with pytest.raises(DlaError):
        transpose_chw(x, (0, 0, 1))


# -- shift-GEMM (tap-major weights) ---------------------------------------------------------------------

SHIFT_CASES = [
    # (C, H, W, K, kh, kw, stride, pads, dilation)
    (16, 9, 8, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (24, 12, 11, 5, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1)),
    (16, 10, 13, 4, 2, 5, (1, 3), (0, 2, 1, 2), (2, 1)),
    (32, 7, 7, 8, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1)),
]


def _tap_major(w: np.ndarray) -> np.ndarray:
    """The same weights as a (K, C, kh, kw) view of (kh, kw, K, C) memory."""
    return np.ascontiguousarray(w.transpose(2, 3, 0, 1)).transpose(2, 3, 0, 1)


@pytest.mark.skipif(conv.SGEMM is None, reason="numpy's BLAS sgemm was not found")
@pytest.mark.parametrize("case", SHIFT_CASES)
def test_shift_gemm_matches_the_reference(case: tuple[Any, ...]) -> None:
    c, h, w_, k, kh, kw, stride, pads, dil = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((c, h, w_)).astype(np.float32)
    w = rng.standard_normal((k, c, kh, kw)).astype(np.float32)
    wt = _tap_major(w)
    assert conv.shift_gemm_applies(wt, 1) and not conv.shift_gemm_applies(w, 1)
    got = conv.conv2d_shift_gemm(x, wt, stride=stride, pads=pads, dilation=dil)
    expect = _conv_ref(x, w, stride, pads, dil, 1)
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
    out = np.full((k, *expect.shape[1:]), np.nan, np.float32)
    conv2d(x, wt, stride=stride, pads=pads, dilation=dil, out=out)  # conv2d takes the same path
    np.testing.assert_array_equal(out, got)


def test_tap_major_weights_without_blas_take_the_column_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conv, "SGEMM", None)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 16, 3, 3)).astype(np.float32)
    assert not conv.shift_gemm_applies(_tap_major(w), 1)
    np.testing.assert_allclose(conv2d(x, _tap_major(w), pads=(1, 1, 1, 1)),
                               _conv_ref(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), rtol=1e-4, atol=1e-4)
    with pytest.raises(DlaError, match="not tap-major"):
        conv.conv2d_shift_gemm(x, _tap_major(w))


@pytest.mark.skipif(conv.SGEMM is None, reason="numpy's BLAS sgemm was not found")
def test_sgemm_refuses_operands_outside_their_arrays() -> None:
    sgemm = conv.SGEMM
    assert sgemm is not None
    a = np.ones((2, 3), np.float32)
    b = np.ones(20, np.float32)
    c = np.zeros((2, 4), np.float32)
    sgemm.gemm(a, b, 0, 8, 4, c, accumulate=False)
    assert (c == 3).all()
    with pytest.raises(ValueError, match="outside"):
        sgemm.gemm(a, b, 10, 8, 4, c, accumulate=False)  # the last row would end at 30 > 20
    with pytest.raises(ValueError, match="outside"):
        sgemm.gemm(a, b, 0, 3, 4, c, accumulate=False)  # rows closer than their length
    with pytest.raises(ValueError, match="C-contiguous"):
        sgemm.gemm(a, b, 0, 8, 4, np.zeros((4, 2), np.float32).T, accumulate=False)
