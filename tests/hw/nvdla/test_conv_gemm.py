"""The integer convolution's GEMM (conv_int._gemm): exact in float32 and float64 within the bound the
caller proves, as one product or as blocks of rows that BLAS runs on the calling thread."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.hw.nvdla import conv_int


@pytest.mark.parametrize(("dtype", "low", "high"), [(np.float32, -128, 128), (np.float64, -32768, 32768)])
@pytest.mark.parametrize("rows", [64, 61, 3])
def test_gemm_is_exact_whole_or_in_row_blocks(dtype: type, low: int, high: int, rows: int) -> None:
    rng = np.random.default_rng(rows)
    k, n = 1152, 32
    cols = rng.integers(low, high, (rows, k)).astype(np.int16)
    w = rng.integers(low, high, (n, k)).astype(np.int16).T  # a transposed view, as accumulate passes it
    if dtype is np.float32:  # the caller's bound: |x| * sum|w| < 2^24
        w = (w // 16).astype(np.int8)
        cols = (cols // 2).astype(np.int8)
    exact = cols.astype(np.int64) @ w.astype(np.int64)
    assert np.abs(cols).max() * np.abs(w).sum(axis=0).max() < (conv_int.SGEMM_EXACT if dtype is np.float32
                                                                 else conv_int.DGEMM_EXACT)
    got = conv_int._gemm(cols, w, dtype)
    assert got.dtype == np.int64 and np.array_equal(got, exact)


def test_only_mid_sized_products_are_cut_into_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    real = np.matmul

    def spy(a: np.ndarray, b: np.ndarray, **kw: object) -> np.ndarray:
        calls.append(a.shape)
        return real(a, b, **kw)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(np, "matmul", spy)
    cols, w = np.ones((64, 1152), np.int8), np.ones((1152, 32), np.int8)
    assert conv_int.SINGLE_THREAD_MACS < 64 * 1152 * 32 <= conv_int.SPLIT_MACS
    assert np.array_equal(conv_int._gemm(cols, w, np.float32), np.full((64, 32), 1152))
    rows = conv_int.SINGLE_THREAD_MACS // (1152 * 32)
    assert calls == [(rows, 1152)] * (64 // rows) + [(64 % rows, 1152)]
    calls.clear()
    conv_int._gemm(cols[:4], w, np.float32)  # small: one product (the @ operator, not np.matmul)
    assert calls == []
