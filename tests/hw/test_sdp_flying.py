"""SDP's flying fast path (pydla.hw.sdp._flying): the activation from the convolution's result into
the destination, in place when they share memory, as ``execute`` computes it; anything else left to
``execute``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pydla.hw import sdp
from pydla.hw.compute import CLIP_MIN_SIZE


def _relu() -> Callable[[Any, Any], object]:
    act = sdp._f32_activation("relu", 0.0, 0.0, CLIP_MIN_SIZE)
    assert act is not None
    return act


def test_into_another_array_and_again_on_new_data() -> None:
    rng = np.random.default_rng(0)
    calls: list[object] = []
    dst = np.full((3, 4, 5), np.nan, np.float32)
    flying = rng.standard_normal((3, 4, 5)).astype(np.float32)
    run = sdp._flying(lambda f, folded: calls.append(f), _relu(), dst, (3, 4, 5), plain=False)
    for _ in range(2):
        run(flying, True)
        np.testing.assert_array_equal(dst, np.maximum(flying, 0))
        flying[...] = rng.standard_normal(flying.shape)  # the same array, new values: the next run
    assert calls == []


def test_in_place_when_the_result_is_the_destination_or_overlaps_it() -> None:
    rng = np.random.default_rng(1)
    memory = rng.standard_normal(80).astype(np.float32)
    want = np.maximum(memory[:60], 0).reshape(3, 4, 5)
    dst = memory[:60].reshape(3, 4, 5)
    same = memory[:60].reshape(3, 4, 5)  # another view of the same memory, as the device makes
    sdp._flying(lambda f, folded: None, _relu(), dst, (3, 4, 5), plain=True)(same, False)
    np.testing.assert_array_equal(dst, want)
    memory2 = rng.standard_normal(80).astype(np.float32)
    flying = memory2[10:70].reshape(3, 4, 5)  # overlapping dst = memory2[:60], shifted
    want2 = np.maximum(flying, 0).copy()
    dst2 = memory2[:60].reshape(3, 4, 5)
    sdp._flying(lambda f, folded: None, _relu(), dst2, (3, 4, 5), plain=True)(flying, True)
    np.testing.assert_array_equal(dst2, want2)


def test_what_it_does_not_do_goes_to_execute() -> None:
    calls: list[tuple[object, bool]] = []
    dst = np.zeros((2, 2, 2), np.float32)
    run = sdp._flying(lambda f, folded: calls.append((f, folded)), _relu(), dst, (2, 2, 2), plain=False)
    run(None, False)  # no CONV result: execute reports it
    x = np.ones((2, 2, 2), np.float32)
    run(x, False)  # a bias or element-wise op not folded: execute applies it
    wrong = np.ones((2, 2, 3), np.float32)
    run(wrong, True)  # dims that do not agree: execute reports them
    assert [c[0] is None for c in calls] == [True, False, False] and calls[2][0] is wrong
    assert (dst == 0).all()
