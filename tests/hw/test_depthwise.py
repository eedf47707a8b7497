"""Depthwise convolution (conv2d with one input channel per group, pydla.hw.conv_depthwise) against a
direct reference: a float64 sum over the kernel taps of shifted, strided windows of the zero-padded
input, written out here with numpy slicing and nothing of pydla's.

Random geometries cover strides 1..3, dilations 1..2, asymmetric pads, kernels 1x1..5x5 (square or
not), channel multipliers, float32 and float16 data, addends (a bias, a scalar, a residual, pairs) and
outputs (new, dense, strided views, float16). The tolerance is float32 rounding of the sum: 1e-5 of
the sum of the terms' magnitudes (1e-3 when the result is rounded to float16).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from pydla.hw import conv_depthwise
from pydla.hw.arrays import scratch
from pydla.hw.compute import conv2d

SENTINEL = 1234.5


def _geometry(h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int],
              pads: tuple[int, int, int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = kernel, stride, pads, dilation
    return (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1


def _reference(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pads: tuple[int, int, int, int],
               dilation: tuple[int, int], adds: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The depthwise convolution plus addends in float64, and the same sum over the terms' magnitudes
    (the scale of float32 rounding errors)."""
    c, h, wd = x.shape
    k, _, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, pads, dilation
    ho, wo = _geometry(h, wd, (kh, kw), stride, pads, dilation)
    xp = np.zeros((c, h + pt + pb, wd + pl + pr))
    xp[:, pt:pt + h, pl:pl + wd] = x
    xp = np.repeat(xp, k // c, axis=0)  # output channel o reads input channel o // (k // c)
    w64 = w.astype(np.float64)
    out, mag = np.zeros((k, ho, wo)), np.zeros((k, ho, wo))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i * dh:i * dh + (ho - 1) * sh + 1:sh, j * dw:j * dw + (wo - 1) * sw + 1:sw]
            out += w64[:, 0, i, j, None, None] * win
            mag += np.abs(w64[:, 0, i, j, None, None] * win)
    for a in adds:
        out = out + a.astype(np.float64)
        mag = mag + np.abs(a.astype(np.float64))
    return out, mag


def _check(ours: np.ndarray, ref: np.ndarray, mag: np.ndarray, what: str = "") -> None:
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    rel = 1e-3 if ours.dtype == np.float16 else 1e-5
    err = np.abs(ours.astype(np.float64) - ref)
    bound = rel * mag + 1e-6
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"{what}: |error| {err[worst]:.3g} > {bound[worst]:.3g} at {worst} "
                                  f"(ours {ours[worst]}, reference {ref[worst]})")


def _strided_out(shape: tuple[int, int, int], dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A view with padded lines and gaps between surfaces into a sentinel-filled buffer, the buffer,
    and the mask of the view's elements in it."""
    c, h, w = shape
    line, surface = w + 3, (h + 1) * (w + 3) + 2
    buf = np.full(c * surface + 9, SENTINEL, dtype=dtype)
    out = as_strided(buf[4:], shape, (surface * buf.itemsize, line * buf.itemsize, buf.itemsize))
    ids = np.arange(buf.size)
    mask = np.zeros(buf.size, dtype=bool)
    mask[as_strided(ids[4:], shape, (surface * ids.itemsize, line * ids.itemsize, ids.itemsize))] = True
    return out, buf, mask


def _poison_scratch() -> None:
    """NaN in the depthwise kernel's workspace slots: what a call does not write must not matter."""
    for key in ("dw-cols", "dw-planes", "dw-prod", "dw-taps"):
        scratch(key, (1 << 18,)).fill(np.nan)


ADDENDS = ("none", "bias", "scalar", "cube", "cube_fp16", "bias+cube", "bias+scalar")
OUTS = ("new", "dense", "strided", "strided_fp16")


def _random_case(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    kh, kw = (int(v) for v in rng.choice([1, 2, 3, 3, 5], 2))
    if rng.random() < 0.5:
        kw = kh
    stride = tuple(int(v) for v in rng.choice([1, 1, 2, 2, 3], 2))
    dilation = tuple(int(v) for v in rng.choice([1, 1, 2], 2))
    pads = tuple(int(v) for v in rng.integers(0, 4, 4))
    span_h, span_w = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    h = int(rng.integers(max(1, span_h - pads[0] - pads[2]), 20))
    w = int(rng.integers(max(1, span_w - pads[1] - pads[3]), 20))
    return {
        "c": int(rng.integers(1, 9)), "h": h, "w": w, "multiplier": int(rng.choice([1, 1, 1, 2, 3])),
        "kernel": (kh, kw), "stride": stride, "pads": pads, "dilation": dilation,
        "dtype": np.float16 if rng.random() < 0.3 else np.float32,
        "addends": ADDENDS[seed % len(ADDENDS)], "out": OUTS[(seed // len(ADDENDS)) % len(OUTS)],
    }


def _addends(kind: str, shape: tuple[int, int, int], rng: np.random.Generator) -> list[np.ndarray]:
    k, ho, wo = shape
    make = {
        "bias": lambda: rng.standard_normal((k, 1, 1)).astype(np.float32),
        "scalar": lambda: rng.standard_normal((1, 1, 1)).astype(np.float32),
        "cube": lambda: rng.standard_normal((k, ho, wo)).astype(np.float32),
        "cube_fp16": lambda: rng.standard_normal((k, ho, wo)).astype(np.float16),
    }
    return [] if kind == "none" else [make[part]() for part in kind.split("+")]


def _run(x: np.ndarray, w: np.ndarray, case: dict[str, Any], adds: list[np.ndarray],
         out_kind: str) -> np.ndarray:
    kwargs: dict[str, Any] = {"stride": case["stride"], "pads": case["pads"], "dilation": case["dilation"],
                              "groups": x.shape[0], "addends": adds}
    shape = (w.shape[0], *_geometry(x.shape[1], x.shape[2], case["kernel"], case["stride"], case["pads"],
                                    case["dilation"]))
    if out_kind == "new":
        y = conv2d(x, w, **kwargs)
        assert y.dtype == x.dtype and y.flags.c_contiguous
        return y
    if out_kind == "dense":
        out = np.full(shape, np.nan, dtype=np.float32)
        assert conv2d(x, w, out=out, **kwargs) is out
        return out
    out, buf, mask = _strided_out(shape, np.float16 if out_kind == "strided_fp16" else np.float32)
    assert conv2d(x, w, out=out, **kwargs) is out
    assert np.all(buf[~mask] == np.asarray(SENTINEL, dtype=buf.dtype)), "wrote outside out"
    return out


@pytest.mark.parametrize("seed", range(120))
def test_random_depthwise_matches_direct_sum(seed: int) -> None:
    case = _random_case(seed)
    rng = np.random.default_rng(1000 + seed)
    c, k = case["c"], case["c"] * case["multiplier"]
    x = rng.standard_normal((c, case["h"], case["w"])).astype(case["dtype"])
    w = rng.standard_normal((k, 1, *case["kernel"])).astype(case["dtype"])
    shape = (k, *_geometry(case["h"], case["w"], case["kernel"], case["stride"], case["pads"],
                           case["dilation"]))
    adds = _addends(case["addends"], shape, rng)
    ref, mag = _reference(x, w, case["stride"], case["pads"], case["dilation"], adds)
    _poison_scratch()
    _check(_run(x, w, case, adds, case["out"]), ref, mag, str(case))


# (C, H = W, kernel, stride, pad): MobileNet-v2's and -v3's depthwise geometries, fewer channels.
MOBILENET = [(8, 112, 3, 1, 1), (8, 112, 3, 2, 1), (16, 56, 3, 1, 1), (16, 56, 3, 2, 1), (24, 28, 3, 1, 1),
             (24, 28, 3, 2, 1), (48, 14, 3, 1, 1), (64, 14, 3, 2, 1), (96, 7, 3, 1, 1), (16, 56, 5, 2, 2),
             (24, 28, 5, 1, 2), (48, 14, 5, 2, 2), (96, 7, 5, 1, 2)]


@pytest.mark.parametrize(("c", "size", "kernel", "stride", "pad"), MOBILENET)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_mobilenet_shapes_with_bias(c: int, size: int, kernel: int, stride: int, pad: int,
                                    dtype: Any) -> None:
    rng = np.random.default_rng(c * size + kernel)
    x = rng.standard_normal((c, size, size)).astype(dtype)
    w = rng.standard_normal((c, 1, kernel, kernel)).astype(dtype)
    case = {"stride": (stride, stride), "pads": (pad,) * 4, "dilation": (1, 1), "kernel": (kernel, kernel)}
    shape = (c, *_geometry(size, size, (kernel, kernel), (stride, stride), (pad,) * 4, (1, 1)))
    adds = _addends("bias", shape, rng)
    ref, mag = _reference(x, w, (stride, stride), (pad,) * 4, (1, 1), adds)
    for out_kind in ("dense", "strided"):
        _poison_scratch()
        _check(_run(x, w, case, adds, out_kind), ref, mag, out_kind)


@pytest.mark.parametrize(("c", "size", "kernel", "stride", "pad"), MOBILENET[::3])
def test_mobilenet_shapes_match_onnxruntime(c: int, size: int, kernel: int, stride: int, pad: int) -> None:
    """The same against onnxruntime's Conv with group = C (and its bias input)."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(size + kernel)
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = rng.standard_normal((c, 1, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=[pad] * 4, group=c)
    graph = helper.make_graph([node], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {"x": x})[0][0]
    ours = conv2d(x[0], w, stride=(stride, stride), pads=(pad,) * 4, groups=c, addends=[b.reshape(c, 1, 1)])
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


GEOMETRIES = {  # (C, H, W, multiplier, kernel, stride, pads, dilation)
    "3x3_s1_p1": (6, 13, 11, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3_s2_asym": (5, 14, 15, 1, (3, 3), (2, 2), (0, 1, 2, 0), (1, 1)),
    "5x3_s12_dil": (4, 17, 12, 2, (5, 3), (1, 2), (2, 0, 3, 1), (2, 1)),
    "2x4_s3_dil2": (3, 19, 21, 1, (2, 4), (3, 3), (1, 2, 0, 3), (2, 2)),
    "pads_wider_than_x": (3, 6, 5, 1, (3, 3), (1, 1), (4, 7, 3, 6), (1, 1)),
}


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_results_do_not_depend_on_blocks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    c, h, w_, m, kernel, stride, pads, dilation = GEOMETRIES[name]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((c, h, w_)).astype(np.float32)
    w = rng.standard_normal((c * m, 1, *kernel)).astype(np.float32)
    kwargs: dict[str, Any] = {"stride": stride, "pads": pads, "dilation": dilation, "groups": c}
    whole = conv2d(x, w, **kwargs)
    ref, mag = _reference(x, w, stride, pads, dilation, [])
    _check(whole, ref, mag)
    for budget in (1, 4 * h * w_ * (kernel[0] * kernel[1] + 1) * 2 + 4):  # one channel; two, ragged
        monkeypatch.setattr(conv_depthwise, "BLOCK_BYTES", budget)
        _poison_scratch()
        np.testing.assert_allclose(conv2d(x, w, **kwargs), whole, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_input_views(name: str) -> None:
    """x as channels of a bigger array, with padded lines, reversed, float16 with padded lines: the
    same results (lines that are not packed go through a copy of each stride phase)."""
    c, h, w_, m, kernel, stride, pads, dilation = GEOMETRIES[name]
    rng = np.random.default_rng(8)
    x = rng.standard_normal((c, h, w_)).astype(np.float32)
    w = rng.standard_normal((c * m, 1, *kernel)).astype(np.float32)
    kwargs: dict[str, Any] = {"stride": stride, "pads": pads, "dilation": dilation, "groups": c}
    ref, mag = _reference(x, w, stride, pads, dilation, [])
    big = rng.standard_normal((c + 3, h + 2, w_ + 5)).astype(np.float32)
    big[2:2 + c, 1:1 + h, 3:3 + w_] = x
    flipped = np.ascontiguousarray(x[:, ::-1, ::-1])[:, ::-1, ::-1]
    half = big.astype(np.float16)[2:2 + c, 1:1 + h, 3:3 + w_]
    for what, view in (("channel slice", np.ascontiguousarray(big[:, 1:1 + h, 3:3 + w_])[2:2 + c]),
                       ("padded lines", big[2:2 + c, 1:1 + h, 3:3 + w_]), ("reversed", flipped)):
        np.testing.assert_array_equal(view, x)
        _poison_scratch()
        _check(conv2d(view, w, **kwargs), ref, mag, what)
    ref16, mag16 = _reference(half, w, stride, pads, dilation, [])
    _poison_scratch()
    _check(conv2d(half, w, **kwargs), ref16, mag16, "float16, padded lines")


def test_out_may_be_the_input() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 9, 10)).astype(np.float32)
    w = rng.standard_normal((5, 1, 3, 3)).astype(np.float32)
    ref, mag = _reference(x, w, (1, 1), (1, 1, 1, 1), (1, 1), [])
    buf = x.copy()
    assert conv2d(buf, w, pads=(1, 1, 1, 1), groups=5, out=buf) is buf
    _check(buf, ref, mag)


def test_geometries_in_turn_share_the_workspace() -> None:
    """Calls of different geometries one after the other (each zeroes what it does not write once,
    in the same workspace slots) give each one's own results."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((6, 12, 12)).astype(np.float32)
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    cases = [((1, 1), (1, 1, 1, 1)), ((1, 1), (0, 0, 0, 0)), ((2, 2), (1, 1, 1, 1)), ((1, 1), (2, 0, 0, 2)),
             ((1, 1), (1, 1, 1, 1)), ((2, 1), (0, 2, 1, 0))]
    refs = [_reference(x, w, s, p, (1, 1), []) for s, p in cases]
    for _ in range(2):
        for (s, p), (ref, mag) in zip(cases, refs, strict=True):
            _check(conv2d(x, w, stride=s, pads=p, groups=6), ref, mag, f"stride {s} pads {p}")
