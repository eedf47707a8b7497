"""plan_conv2d decides once and computes on the data of each call: the same numbers as conv2d, for
every path (1x1 product, depthwise, im2col, wide im2col, shift-GEMM), after the input, the weights
and the addends changed."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.hw.conv import conv2d, plan_conv2d

CASES = [  # (C, H, W), (K, kh, kw), stride, pads, groups, weights tap-major
    ((8, 6, 6), (16, 1, 1), (1, 1), (0, 0, 0, 0), 1, False),     # the 1x1 product
    ((8, 6, 6), (16, 1, 1), (2, 2), (0, 0, 0, 0), 1, False),     # strided 1x1: im2col
    ((12, 9, 9), (12, 3, 3), (1, 1), (1, 1, 1, 1), 12, False),   # depthwise
    ((12, 9, 9), (24, 3, 3), (2, 2), (1, 0, 1, 2), 12, False),   # depthwise, two per channel
    ((4, 7, 40), (6, 3, 3), (1, 1), (1, 1, 1, 1), 1, False),     # wide maps
    ((4, 7, 7), (6, 3, 3), (1, 2), (0, 1, 2, 0), 2, False),      # grouped im2col
    ((16, 8, 8), (8, 3, 3), (1, 1), (1, 1, 1, 1), 1, True),      # shift-GEMM (tap-major weights)
]


def _weights(rng: np.random.Generator, k: int, cg: int, kh: int, kw: int, tap_major: bool) -> np.ndarray:
    values = rng.standard_normal((k, cg, kh, kw)).astype(np.float32)
    if not tap_major:
        return values
    store = np.ascontiguousarray(values.transpose(2, 3, 0, 1))  # (kh, kw, K, C) in memory
    return store.transpose(2, 3, 0, 1)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("with_out", [True, False])
@pytest.mark.parametrize("with_addends", [True, False])
def test_plan_matches_conv2d_on_new_data(case: tuple, with_out: bool, with_addends: bool) -> None:
    (c, h, wd), (k, kh, kw), stride, pads, groups, tap_major = case
    rng = np.random.default_rng(abs(hash((case, with_out, with_addends))) % 2**32)
    x = rng.standard_normal((c, h, wd)).astype(np.float32)
    w = _weights(rng, k, c // groups, kh, kw, tap_major)
    ho = (h + pads[0] + pads[2] - kh) // stride[0] + 1
    wo = (wd + pads[1] + pads[3] - kw) // stride[1] + 1
    bias = rng.standard_normal((k, 1, 1)).astype(np.float32)
    residual = rng.standard_normal((k, ho, wo)).astype(np.float32)
    addends = [bias, residual] if with_addends else []
    out = np.full((k, ho, wo), np.nan, np.float32) if with_out else None
    kwargs = {"stride": stride, "pads": pads, "groups": groups}
    run = plan_conv2d(x, w, out=out, addends=addends, **kwargs)
    for _ in range(2):
        got = run().copy()
        want = conv2d(x, w, addends=addends, **kwargs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        if out is not None:
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        # new data in the same memory: the plan must compute from it
        x[...] = rng.standard_normal(x.shape)
        w[...] = rng.standard_normal(w.shape)
        bias[...] = rng.standard_normal(bias.shape)
        residual[...] = rng.standard_normal(residual.shape)


def test_float32_result_without_out_for_float16_input() -> None:
    x = np.random.default_rng(0).standard_normal((4, 5, 5)).astype(np.float16)
    w = np.random.default_rng(1).standard_normal((3, 4, 3, 3)).astype(np.float16)
    assert plan_conv2d(x, w, float32_result=True)().dtype == np.float32
    assert plan_conv2d(x, w)().dtype == np.float16


def _reference_1x1(x: np.ndarray, w: np.ndarray, addends: list[np.ndarray]) -> np.ndarray:
    want = np.einsum("kc,chw->khw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    for a in addends:
        want = want + a
    return want


@pytest.mark.parametrize("shape", [(8, 6, 6, 16), (1, 1, 1, 1), (3, 1, 7, 1), (17, 5, 3, 9), (64, 2, 2, 5)])
@pytest.mark.parametrize("n_addends", [0, 1, 2])
def test_prepared_1x1_product_accumulates_onto_the_addends(shape: tuple[int, int, int, int],
                                                           n_addends: int) -> None:
    """The 1x1 plan with ``out``: one prepared BLAS product onto the addends' sum, against a float64
    reference (independent of conv2d, which runs the same plan), on new data in the same memory."""
    from pydla.hw import blas

    c, h, wd, k = shape
    rng = np.random.default_rng(c * 1000 + k * 10 + n_addends)
    x = rng.standard_normal((c, h, wd)).astype(np.float32)
    w = rng.standard_normal((k, c, 1, 1)).astype(np.float32)
    addends = [rng.standard_normal((k, 1, 1)).astype(np.float32),
               rng.standard_normal((k, h, wd)).astype(np.float32)][:n_addends]
    out = np.full((k, h, wd), np.nan, np.float32)
    run = plan_conv2d(x, w, out=out, addends=addends)
    if blas.SGEMM is not None:
        assert run.__qualname__.startswith("_pointwise")  # the prepared path, not numpy's matmul
    for _ in range(3):
        assert run() is out
        np.testing.assert_allclose(out, _reference_1x1(x, w, addends), rtol=1e-5, atol=1e-5 * np.sqrt(c))
        x[...] = rng.standard_normal(x.shape)
        w[...] = rng.standard_normal(w.shape)
        for a in addends:
            a[...] = rng.standard_normal(a.shape)


def test_1x1_plan_with_out_overlapping_the_weights_takes_numpys_product() -> None:
    """BLAS must not write where it reads: an ``out`` inside the weights' memory is declined by the
    prepared product, and numpy's (which copies what overlaps) computes it."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 2, 2)).astype(np.float32)
    memory = rng.standard_normal(64).astype(np.float32)
    w = memory[:16].reshape(4, 4, 1, 1)
    out = memory[8:24].reshape(4, 2, 2)  # overlaps w's last two kernels
    want = _reference_1x1(x, w.copy(), [])
    run = plan_conv2d(x, w, out=out)
    assert not run.__qualname__.startswith("_pointwise")
    np.testing.assert_allclose(run(), want, rtol=1e-5, atol=1e-5)
