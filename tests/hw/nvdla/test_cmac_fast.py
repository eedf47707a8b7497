"""The fast FP16 MAC cell (pydla.hw.nvdla.cmac_fast) against the Booth-multiplier cell (cmac_fp16, itself
checked against NVIDIA's C model in test_conv_fp16), and the facts its exactness rests on."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.hw.nvdla import cmac_fast
from pydla.hw.nvdla.cmac_fp16 import booth, mac_atom
from tests.hw.nvdla.test_conv_fp16 import fp16_mix


def _carry(neg: np.ndarray, w: np.ndarray, d: np.ndarray, k: int) -> np.ndarray:
    """floor(P / 2^k) minus the Booth multiplier's truncated product (k <= 16: no compensation bits)."""
    prod = np.where(neg, -1, 1) * w.astype(np.int64) * d.astype(np.int64)
    return (prod >> k) - booth(neg, w.astype(np.uint32), d.astype(np.uint32), np.full(w.shape, k, np.int64))


def test_k4_never_carries_in_all_512_cases() -> None:
    """The carry of a shift by 4 depends on d mod 16, w mod 16 and the sign only: every case is 0."""
    i = np.arange(512)
    w, d, neg = i >> 5, (i >> 1) & 15, (i & 1).astype(bool)
    assert not _carry(neg, w, d, 4).any()


def test_carries_depend_on_the_low_bits_only() -> None:
    """The carry for a shift by k is the same for any operands with the same low k bits (the carry-save
    adders carry upwards only): the table of the 2^17 low-byte cases serves every 14-bit operand."""
    rng = np.random.default_rng(3)
    n = 100_000
    w = rng.integers(0, 1 << 14, n)
    d = rng.integers(0, 1 << 14, n)
    neg = rng.random(n) < 0.5
    table = cmac_fast.carry8_table()
    got = table[((w & 255) << 9) | ((d & 255) << 1) | neg]
    assert (got == _carry(neg, w, d, 8)).all()
    assert set(np.unique(got).tolist()) == {0, 1}  # the carries exist: a plain floor would be wrong
    for k in (12, 16):
        hi_w = rng.integers(0, 1 << 14, n) & ~((1 << k) - 1)
        hi_d = rng.integers(0, 1 << 14, n) & ~((1 << k) - 1)
        low = (1 << k) - 1
        assert (_carry(neg, w, d, k) == _carry(neg, (w & low) | hi_w, (d & low) | hi_d, k)).all()


@pytest.mark.parametrize("seed", range(6))
def test_fast_cell_equals_the_booth_cell(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(20):
        p, k, lanes = int(rng.integers(1, 20)), int(rng.integers(1, 20)), int(rng.integers(1, 65))
        spread = int(rng.integers(0, 12))
        x, w = fp16_mix(rng, (p, lanes), spread), fp16_mix(rng, (k, lanes), spread)
        e0, m0 = mac_atom(x[:, None, :], w[None])
        e1, m1 = cmac_fast.mac(cmac_fast.data_operands(x), cmac_fast.weight_operands(w))
        assert (e0 == e1).all() and (m0 == m1).all()


def test_operands_in_any_memory_order() -> None:
    """Data that arrive as a transposed view (as CSC's taps do) give the same sums as a C-ordered copy."""
    rng = np.random.default_rng(9)
    x = fp16_mix(rng, (64, 30), 4).T  # (30, 64) in Fortran order
    w = fp16_mix(rng, (7, 64), 4)
    e0, m0 = mac_atom(np.ascontiguousarray(x)[:, None, :], w[None])
    e1, m1 = cmac_fast.mac(cmac_fast.data_operands(x), cmac_fast.weight_operands(w))
    assert (e0 == e1).all() and (m0 == m1).all()


def test_uint32_booth_equals_the_reference_booth() -> None:
    rng = np.random.default_rng(31)
    n = 100_000
    w = rng.integers(0, 1 << 14, n).astype(np.uint32)
    d = rng.integers(0, 1 << 14, n).astype(np.uint32)
    neg = rng.random(n) < 0.5
    k = rng.integers(0, 8, n).astype(np.int64) * 4
    assert (cmac_fast.booth_lanes(neg, w, d, k) == booth(neg, w, d, k)).all()
