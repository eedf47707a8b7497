"""The integer convolution's GEMM (conv_int._gemm): exact in float32 and float64 within the bound the
caller proves, as one product or as blocks of rows that BLAS runs on the calling thread."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.hw.nvdla import conv_int
from pydla.hw.nvdla.conv_atoms import DirectAtoms
from pydla.hw.nvdla.conv_taps import Geometry, Taps


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


@pytest.mark.parametrize(("channels", "cf"), [(128, 64), (64, 64), (20, 64), (100, 64), (96, 32)])
def test_weight_matrix_is_the_atoms_weights_in_order(channels: int, cf: int) -> None:
    rng = np.random.default_rng(channels)
    w = rng.integers(-128, 128, (12, channels, 3, 2)).astype(np.int8)
    x = np.zeros((1, channels, 4, 4), np.int8)
    g = Geometry(batches=1, channel=channels, height=4, width=4, kernels=12, kernel_height=3, kernel_width=2,
                 stride_x=1, stride_y=1, dilation_x=1, dilation_y=1, pad_left=0, pad_top=0, out_width=3,
                 out_height=2)
    atoms = DirectAtoms(Taps(x, g, 0), w, cf)
    joined = np.concatenate([atoms.weights(a) for a in range(atoms.count)], axis=1).T
    assert np.array_equal(conv_int._weight_matrix(atoms), joined)
