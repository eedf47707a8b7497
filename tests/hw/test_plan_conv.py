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
