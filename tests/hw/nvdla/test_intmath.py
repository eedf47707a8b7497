"""NVDLA's integer primitives against exact rational arithmetic."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from pydla.hw.nvdla.intmath import (
    saturate,
    shift_left_sat,
    shift_right_round,
    shift_right_round_sat,
    sign_extend,
    wrap,
)


def round_half_away(q: Fraction) -> int:
    m = math.floor(abs(q) + Fraction(1, 2))
    return m if q >= 0 else -m


def test_shift_right_round_is_round_half_away_from_zero() -> None:
    rnd = random.Random(1)
    xs, ss = [], []
    for _ in range(5000):
        xs.append(rnd.randint(-(1 << 62), 1 << 62) >> rnd.randint(0, 62))
        ss.append(rnd.randint(0, 70))
    # the ties and the extremes
    for s in range(1, 66):
        for x in (1 << (s - 1), -(1 << (s - 1)), 3 << (s - 1), -(3 << (s - 1))):
            if abs(x) <= 1 << 62:
                xs.append(x)
                ss.append(s)
    xs += [1 << 62, -(1 << 62), 0, -1, 1]
    ss += [63, 63, 5, 0, 1000]
    got = shift_right_round(np.array(xs), np.array(ss))
    for x, s, g in zip(xs, ss, got, strict=True):
        assert int(g) == round_half_away(Fraction(x, 1 << s)), (x, s)


def test_ties_differ_from_numpy_round_and_floor_shift() -> None:
    x = np.array([5, -5, 6, -6, 2, -2])
    assert shift_right_round(x, 2).tolist() == [1, -1, 2, -2, 1, -1]
    assert np.round(x / 4).tolist() != shift_right_round(x, 2).tolist()


def test_saturate_wrap_shift_left_sign_extend() -> None:
    assert saturate(np.array([128, -129, 5]), 8).tolist() == [127, -128, 5]
    assert shift_right_round_sat(np.array([1 << 40, -(1 << 40)]), 1, 32).tolist() == [2**31 - 1, -2**31]
    assert wrap(np.array([255, 128, -129, 1 << 33]), 8).tolist() == [-1, -128, 127, 0]
    vals = np.array([1, -1, 3, 0, 32767, -32768])
    got = shift_left_sat(vals, np.array([30, 31, 63, 63, 16, 16]), 32)
    assert got.tolist() == [1 << 30, -(1 << 31), 2**31 - 1, 0, 32767 << 16, -(1 << 31)]
    assert sign_extend(0xFF, 8) == -1 and sign_extend(0x7F, 8) == 127 and sign_extend(0x1F, 5) == -1


def test_negative_shift_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        shift_right_round(np.array([1]), -1)
