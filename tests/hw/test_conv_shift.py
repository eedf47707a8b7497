"""plan_shift_gemm (the device's tap-major convolution planned at decode) against conv2d_shift_gemm
made on each call: the same bits, on new data in the same memory, with 0, 1 or 2 addends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pydla.hw import conv
from pydla.hw.conv_shift import plan_shift_gemm

pytestmark = pytest.mark.skipif(conv.SGEMM is None, reason="numpy's BLAS sgemm was not found")

CASES = [
    # (C, H, W, K, kh, kw, stride, pads, dilation)
    (16, 9, 8, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (24, 12, 11, 5, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1)),  # stride 2: four phase planes
    (16, 10, 13, 4, 2, 5, (1, 3), (0, 2, 1, 2), (2, 1)),  # odd sizes, dilation, uneven pads
    (32, 7, 7, 8, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1)),
    (16, 5, 5, 3, 3, 3, (3, 2), (0, 0, 0, 0), (1, 2)),  # no padding, a stride above the kernel's reach
    (17, 1, 9, 2, 1, 3, (1, 1), (0, 1, 0, 1), (1, 1)),  # one line
]


def _tap_major(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w.transpose(2, 3, 0, 1)).transpose(2, 3, 0, 1)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("n_addends", [0, 1, 2])
@pytest.mark.parametrize("x_dtype", [np.float32, np.float16])
def test_plan_gives_the_bits_of_the_per_call_kernel(case: tuple[Any, ...], n_addends: int,
                                                    x_dtype: type) -> None:
    c, h, wd, k, kh, kw, stride, pads, dil = case
    rng = np.random.default_rng(c + kh * 10 + n_addends)
    x = rng.standard_normal((c, h, wd)).astype(x_dtype)
    w = _tap_major(rng.standard_normal((k, c, kh, kw)).astype(np.float32))
    ho = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // stride[0] + 1
    wo = (wd + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // stride[1] + 1
    addends = [rng.standard_normal((k, 1, 1)).astype(np.float32),
               rng.standard_normal((k, ho, wo)).astype(np.float32)][:n_addends]
    run = plan_shift_gemm(x, w, stride, pads, dil, (ho, wo), addends)
    assert run is not None
    for _ in range(3):
        want = conv.conv2d_shift_gemm(x, w, stride=stride, pads=pads, dilation=dil, addends=addends)
        got = run()
        assert got.shape == (k, ho, wo)
        np.testing.assert_array_equal(got, want)
        x[...] = rng.standard_normal(x.shape)
        w[...] = rng.standard_normal(w.shape)
        for a in addends:
            a[...] = rng.standard_normal(a.shape)


def test_what_cannot_be_planned_is_left_to_the_per_call_kernel() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 6, 6)).astype(np.float32)
    w16 = _tap_major(rng.standard_normal((4, 16, 3, 3)).astype(np.float16))
    assert plan_shift_gemm(x, w16, (1, 1), (1, 1, 1, 1), (1, 1), (6, 6)) is None  # float16 weights
    w = _tap_major(rng.standard_normal((4, 16, 3, 3)).astype(np.float32))
    wrong = np.zeros((5, 1, 1), np.float32)  # 5 channels for 4 kernels
    assert plan_shift_gemm(x, w, (1, 1), (1, 1, 1, 1), (1, 1), (6, 6), [wrong]) is None


def test_the_plans_buffers_are_bounded_and_released(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from pydla.hw import conv_shift

    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 6, 6)).astype(np.float32)
    w = _tap_major(rng.standard_normal((4, 16, 3, 3)).astype(np.float32))
    before = conv_shift.held_bytes()
    first = plan_shift_gemm(x, w, (1, 1), (1, 1, 1, 1), (1, 1), (6, 6))
    assert first is not None
    one = conv_shift.held_bytes() - before
    assert one == (16 * 9 * 8 + 4 * 6 * 8) * 4  # planes (one spare line) and accumulator
    monkeypatch.setattr(conv_shift, "HELD_LIMIT_BYTES", before + one + one // 2)
    assert plan_shift_gemm(x, w, (1, 1), (1, 1, 1, 1), (1, 1), (6, 6)) is None  # past the bound
    del first
    gc.collect()
    assert conv_shift.held_bytes() == before
    assert plan_shift_gemm(x, w, (1, 1), (1, 1, 1, 1), (1, 1), (6, 6)) is not None
