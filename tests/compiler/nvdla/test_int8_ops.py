"""The INT8 back end's operations on pydla's NVDLA device, bit for bit against the pure-integer numpy
reference (pydla.compiler.nvdla.reference), on random data: convolutions (kernels, strides, pads,
dilation, channel counts off the atom, zero points, per-kernel requantization, ReLU), the SDP from
memory (Add with one input per element, rescale, ReLU), the PDP (max and average, padded), and the
layouts against the device's own packers."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.compiler.nvdla import requant
from pydla.compiler.nvdla.layout import pack_feature, pack_weights, unpack_feature, unpack_weights
from pydla.compiler.nvdla.plan import Alu, Buffer, ConvOp, PdpOp, Plan, Ref, SdpOp, Stage
from pydla.compiler.nvdla.reference import run_reference
from pydla.errors import DlaError
from tests.compiler.nvdla.device import run_on_device


def _conv_plan(
    rng: np.random.Generator,
    c: int,
    k: int,
    hw: tuple[int, int],
    kernel: int,
    stride: int,
    pad: int,
    dilation: int,
    z_in: int,
    z_out: int,
    relu: bool,
) -> Plan:
    h, w = hw
    weights = rng.integers(-128, 128, (k, c, kernel, kernel)).astype(np.int8)
    acc_bound = np.abs(weights.astype(np.int64)).sum(axis=(1, 2, 3)) * 128.0
    r = rng.uniform(0.5, 2.0, k) / np.sqrt(acc_bound) / 8
    bias = rng.integers(-(1 << 14), 1 << 14, k)
    x1, x2, cvt = requant.conv_stages(r, bias, acc_bound, z_out, relu)
    oh = (h + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    plan = Plan()
    plan.add_buffer(Buffer("x", (c, h, w), "input"))
    plan.add_buffer(Buffer("y", (k, oh, ow), "output"))
    plan.ops.append(
        ConvOp(
            Ref("x"),
            weights,
            SdpOp(None, Ref("y"), x1=x1, x2=x2, cvt=cvt),
            stride=(stride, stride),
            dilation=(dilation, dilation),
            pads=(pad,) * 4,
            pad_value=z_in,
        )
    )
    return plan


CONVS = [  # channels, kernels, (h, w), kernel, stride, pad, dilation, z_in, z_out, relu
    (3, 8, (9, 7), 3, 1, 1, 1, -5, 0, True),
    (16, 13, (8, 8), 3, 2, 1, 1, 20, -128, False),
    (20, 24, (5, 6), 1, 1, 0, 1, 0, 7, True),
    (9, 16, (11, 11), 5, 2, 2, 1, -128, -3, False),
    (8, 8, (10, 10), 3, 1, 2, 2, 3, 0, False),
    (64, 40, (4, 4), 3, 1, 1, 1, -20, -128, True),
]


@pytest.mark.parametrize("case", CONVS, ids=[f"conv{i}" for i in range(len(CONVS))])
def test_a_convolution_with_its_requantization_is_bit_exact(case: tuple) -> None:
    rng = np.random.default_rng(hash(case) % 2**32)
    plan = _conv_plan(rng, *case)
    x = rng.integers(-128, 128, plan.buffers["x"].shape).astype(np.int8)
    expected = run_reference(plan, {"x": x})["y"]
    got = run_on_device(plan, {"x": x})["y"].reshape(expected.shape)
    assert np.array_equal(got, expected)
    assert len(np.unique(expected)) > 16  # not a saturated or constant output


def test_the_requantization_is_within_one_step_of_the_exact_product() -> None:
    rng = np.random.default_rng(7)
    plan = _conv_plan(rng, 16, 16, (8, 8), 3, 1, 1, 1, 5, -9, False)
    x = rng.integers(-128, 128, (16, 8, 8)).astype(np.int8)
    op = plan.ops[0]
    assert isinstance(op, ConvOp)
    from pydla.compiler.nvdla.reference import conv_sums

    got = run_reference(plan, {"x": x})["y"].astype(np.int64)
    # the wanted value from the parameters' exact rational multiplier and bias
    x1, x2, cvt = op.sdp.x1, op.sdp.x2, op.sdp.cvt
    assert x1 is not None and x2 is not None and x1.alu is not None and x2.alu is not None
    m1, m2 = np.asarray(x1.mul, np.float64), np.asarray(x2.mul, np.float64)
    bias_hi = np.asarray(x1.alu.operand, np.float64) * 2.0**x1.alu.shift
    bias_lo = np.asarray(x2.alu.operand, np.float64) * 2.0**x2.alu.shift * 2.0**x1.truncate / m1
    r = m1 * m2 * cvt.scale / 2.0 ** (x1.truncate + cvt.shift)
    acc = conv_sums(x.astype(np.int64), op).astype(np.float64)
    exact = (acc + (bias_hi + bias_lo)[:, None, None]) * r[
        :, None, None
    ] - cvt.offset * cvt.scale / 2.0**cvt.shift
    inside = np.abs(exact) < 127
    assert np.abs(got - np.round(exact))[inside].max() <= 1
    assert np.mean(got[inside] == np.round(exact)[inside]) > 0.99


def _sdp_plan(op: SdpOp, shape: tuple[int, int, int]) -> Plan:
    plan = Plan()
    plan.add_buffer(Buffer("a", shape, "input", bind_id=0))
    plan.add_buffer(Buffer("b", shape, "input", bind_id=1))
    plan.add_buffer(Buffer("y", shape, "output"))
    plan.ops.append(op)
    return plan


@pytest.mark.parametrize(
    "ra, za, rb, zb, zo", [(0.7, -10, 0.9, 5, -128), (1.9, 0, 0.3, 12, 3), (1.0, -128, 1.0, -128, 0)]
)
def test_an_add_of_two_int8_tensors_is_bit_exact_and_within_one_step(
    ra: float, za: int, rb: float, zb: int, zo: int
) -> None:
    rng = np.random.default_rng(3)
    shape = (20, 5, 7)
    src, x1, x2, cvt = requant.add_stages(Ref("a"), Ref("b"), ra, za, rb, zb, zo)
    plan = _sdp_plan(SdpOp(src, Ref("y"), x1=x1, x2=x2, cvt=cvt), shape)
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
    expected = run_reference(plan, {"a": a, "b": b})["y"]
    assert np.array_equal(run_on_device(plan, {"a": a, "b": b})["y"].reshape(shape), expected)
    exact = (a.astype(np.float64) - za) * ra + (b.astype(np.float64) - zb) * rb + zo
    assert np.abs(expected - np.clip(np.round(exact), -128, 127)).max() <= 1


@pytest.mark.parametrize(
    "ratio, z_in, z_out, relu", [(0.37, 4, -128, False), (2.5, -20, 10, True), (1.0, 7, 7, True)]
)
def test_a_rescale_and_relu_on_the_sdp_are_bit_exact(ratio: float, z_in: int, z_out: int, relu: bool) -> None:
    rng = np.random.default_rng(4)
    shape = (12, 6, 6)
    if ratio == 1.0 and z_in == z_out:
        stage, cvt = requant.relu_stage(z_in)
    else:
        stage, cvt = requant.rescale_stage(ratio, z_in, z_out)
        stage = Stage(stage.alu, stage.mul, stage.truncate, relu)
    plan = _sdp_plan(SdpOp(Ref("a"), Ref("y"), x1=stage, cvt=cvt), shape)
    a = rng.integers(-128, 128, shape).astype(np.int8)
    expected = run_reference(plan, {"a": a, "b": a})["y"]
    assert np.array_equal(run_on_device(plan, {"a": a, "b": a})["y"].reshape(shape), expected)
    real = (a.astype(np.float64) - z_in) * ratio
    if relu:
        real = np.maximum(real, 0)
    assert np.abs(expected - np.clip(np.round(real) + z_out, -128, 127)).max() <= 1


@pytest.mark.parametrize(
    "mode, kernel, stride, pads, pad_value",
    [
        ("max", (3, 3), (2, 2), (1, 1, 1, 1), 0),
        ("max", (2, 2), (2, 2), (0, 0, 0, 0), 0),
        ("avg", (3, 3), (1, 1), (1, 1, 1, 1), -7),
        ("avg", (7, 7), (1, 1), (0, 0, 0, 0), 0),
        ("avg", (2, 3), (2, 1), (0, 1, 0, 0), 5),
    ],
)
def test_pooling_on_the_pdp_is_bit_exact(
    mode: str,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    pad_value: int,
) -> None:
    rng = np.random.default_rng(5)
    c, h, w = 12, 7, 7
    left, right, top, bottom = pads
    oh, ow = (h + top + bottom - kernel[1]) // stride[1] + 1, (w + left + right - kernel[0]) // stride[0] + 1
    plan = Plan()
    plan.add_buffer(Buffer("x", (c, h, w), "input"))
    plan.add_buffer(Buffer("y", (c, oh, ow), "output"))
    plan.ops.append(PdpOp(Ref("x"), Ref("y"), mode, kernel, stride, pads, pad_value))
    x = rng.integers(-128, 128, (c, h, w)).astype(np.int8)
    expected = run_reference(plan, {"x": x})["y"]
    assert np.array_equal(run_on_device(plan, {"x": x})["y"].reshape(expected.shape), expected)
    if mode == "max" and not any(pads):
        assert np.array_equal(expected, x[:, : oh * 2, : ow * 2].reshape(c, oh, 2, ow, 2).max(axis=(2, 4)))


def test_operations_chained_through_memory_and_channel_offsets_are_bit_exact() -> None:
    """Two convolutions writing halves of one buffer (a concatenation), a grouped convolution reading
    a channel range, an add reading what an earlier SDP wrote, a pooling of the result."""
    rng = np.random.default_rng(6)
    plan = Plan()
    plan.add_buffer(Buffer("x", (8, 6, 6), "input"))
    plan.add_buffer(Buffer("cat", (16, 6, 6)))
    plan.add_buffer(Buffer("g", (8, 6, 6)))
    plan.add_buffer(Buffer("s", (8, 6, 6)))
    plan.add_buffer(Buffer("y", (8, 3, 3), "output"))
    bound = np.full(8, 8 * 9 * 128 * 128.0)
    for c0 in (0, 8):
        x1, x2, cvt = requant.conv_stages(np.full(8, 1 / 300.0), np.zeros(8, np.int64), bound, 0, True)
        w = rng.integers(-128, 128, (8, 8, 3, 3)).astype(np.int8)
        plan.ops.append(
            ConvOp(Ref("x"), w, SdpOp(None, Ref("cat", c0, 8), x1=x1, x2=x2, cvt=cvt), pads=(1,) * 4)
        )
    x1, x2, cvt = requant.conv_stages(np.full(8, 1 / 200.0), np.zeros(8, np.int64), bound, -3, False)
    plan.ops.append(
        ConvOp(
            Ref("cat", 8, 8),
            rng.integers(-128, 128, (8, 8, 3, 3)).astype(np.int8),
            SdpOp(None, Ref("g"), x1=x1, x2=x2, cvt=cvt),
            pads=(1,) * 4,
        )
    )
    src, a1, a2, acvt = requant.add_stages(Ref("cat", 0, 8), Ref("g"), 0.6, 0, 0.8, -3, 0)
    plan.ops.append(SdpOp(src, Ref("s"), x1=a1, x2=a2, cvt=acvt))
    plan.ops.append(PdpOp(Ref("s"), Ref("y"), "max", (2, 2), (2, 2)))
    x = rng.integers(-128, 128, (8, 6, 6)).astype(np.int8)
    expected = run_reference(plan, {"x": x})["y"]
    assert np.array_equal(run_on_device(plan, {"x": x})["y"].reshape(expected.shape), expected)
    assert len(np.unique(expected)) > 10


def test_a_stage_the_firmware_would_truncate_by_a_stale_shift_is_refused() -> None:
    plan = _sdp_plan(SdpOp(Ref("a"), Ref("y"), x1=Stage(alu=Alu("sum", 3))), (8, 2, 2))
    with pytest.raises(DlaError, match="X1 stage, or one that truncates, must multiply"):
        run_on_device(plan, {"a": np.zeros((8, 2, 2), np.int8), "b": np.zeros((8, 2, 2), np.int8)})


def test_layouts_match_the_device_packers() -> None:
    from pydla.hw.nvdla import conv_weights
    from pydla.hw.nvdla.precision import Precision
    from pydla.hw.nvdla.target import NV_FULL, NV_SMALL

    rng = np.random.default_rng(8)
    for target in (NV_SMALL, NV_FULL):
        kf, cf = conv_weights.groups(target, Precision.INT8)
        w = rng.integers(-128, 128, (37, 70, 3, 2)).astype(np.int8)
        raw = pack_weights(w, kf, cf)
        assert len(raw) % 128 == 0
        device = conv_weights.pack(w, target, Precision.INT8).tobytes()
        assert raw[: len(device)] == device
        assert np.array_equal(unpack_weights(raw, w.shape, kf, cf), w)
    x = rng.integers(-128, 128, (13, 3, 5)).astype(np.int8)
    raw = pack_feature(x, 8)
    assert len(raw) == 2 * 3 * 5 * 8 and np.array_equal(unpack_feature(raw, x.shape, 8), x)
    assert raw[8:16] == bytes(np.int8(x[:8, 0, 1]).tobytes())  # channels within the atom, then x


def test_requantization_parameters_fit_their_registers() -> None:
    with pytest.raises(DlaError, match="must be positive"):
        requant.normalized(0.0)
    m, t = requant.normalized(0.001234)
    assert 1 << 14 <= m < 1 << 15 and abs(m / 2**t / 0.001234 - 1) < 2**-14
    r = np.array([1e-3, 2.5e-3, 7e-4, 1.1e-3])
    snapped, unit = requant.snap_multipliers(r)
    x1, x2, cvt = requant.conv_stages(snapped, np.array([5, -70000, 0, 123456]), np.full(4, 1e6), 0, False,
                                      unit)
    assert isinstance(x1.mul, np.ndarray) and isinstance(x2.mul, np.ndarray)
    got = x1.mul.astype(float) * x2.mul * cvt.scale / 2.0 ** (x1.truncate + cvt.shift)
    assert np.allclose(got, snapped, rtol=1e-12)  # snapped multipliers are represented exactly
    assert np.all(np.abs(snapped / r - 1) < 2e-3)


@pytest.mark.parametrize(
    "k, c, kernel, grouped",
    [(8, 2, 32, False), (16, 520, 3, False), (64, 64, 3, True), (12, 3, 7, False)],
)
def test_the_reference_convolution_sums_are_exact(k: int, c: int, kernel: int, grouped: bool) -> None:
    """The reference adds at most 1024 products in float32 at a time: exact at the extremes (1024
    products of -128 x -128 make 2**24, 2 x 32 x 32 of them 2**25), and for block-diagonal kernels."""
    from pydla.compiler.nvdla.reference import conv_sums

    rng = np.random.default_rng(k + c)
    for extreme in (True, False):
        if extreme:
            w = np.full((k, c, kernel, kernel), -128, np.int8)
        else:
            w = rng.integers(-128, 128, (k, c, kernel, kernel)).astype(np.int8)
        if grouped:  # 8 groups of 8 channels
            w *= np.kron(np.eye(8, dtype=np.int8), np.ones((k // 8, c // 8), np.int8))[:, :, None, None]
        size = kernel + 3
        x = np.full((c, size, size), -128, np.int64) if extreme else rng.integers(-128, 128, (c, size, size))
        op = ConvOp(Ref("x"), w, SdpOp(None, Ref("y")), stride=(1, 2), pads=(1, 0, 2, 1), pad_value=-128)
        xp = np.full((c, size + 3, size + 1), -128, np.int64)
        xp[:, 2 : 2 + size, 1 : 1 + size] = x
        oh, ow = (size + 3 - kernel) // 2 + 1, size + 1 - kernel + 1
        expected = np.zeros((k, oh, ow), np.int64)
        wi = w.astype(np.int64)
        for i in range(kernel):
            for j in range(kernel):
                window = xp[:, i : i + 2 * (oh - 1) + 1 : 2, j : j + ow]
                expected += np.einsum("kc,chw->khw", wi[:, :, i, j], window)
        expected = np.clip(expected, -(2**31), 2**31 - 1)
        assert np.array_equal(conv_sums(x, op), expected)
