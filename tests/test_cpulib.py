"""pydla's CPU library through the seed's interface: library_init, lookup, the callable."""

from __future__ import annotations

import types

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.umd import cpulib


def _lookup(name: str):
    init = types.SimpleNamespace(lookup_fn=None)
    cpulib.library_init(init)
    found = types.SimpleNamespace(num_args=0, callable=None)
    init.lookup_fn(name, found)
    return found


def test_softmax_matches_numpy() -> None:
    found = _lookup("softmax")
    assert found.num_args == 6
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    out = np.zeros(10 * 4 + 8, np.uint8)
    found.callable([x.view(np.uint8).ravel(), out, 1, "2,5", "float32", "float32"])
    y = out[:40].view(np.float32).reshape(2, 5)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-6)
    assert (out[40:] == 0).all()


def test_lookup_of_a_missing_function_names_library_and_function() -> None:
    with pytest.raises(DlaError, match="no function 'gelu'") as e:
        _lookup("gelu")
    assert e.value.code == NvError.NotSupported


@pytest.mark.parametrize(("args", "fragment"), [
    ([np.zeros(8, np.uint8), np.zeros(40, np.uint8), 1, "2,5", "float32", "float32"], "holds 8 bytes"),
    ([np.zeros(40, np.uint8), np.zeros(40, np.uint8), 3, "2,5", "float32", "float32"], "axis 3"),
    ([np.zeros(40, np.uint8), np.zeros(40, np.uint8), 1, "2,x", "float32", "float32"], "not d0,d1"),
    ([np.zeros(40, np.uint8), np.zeros(40, np.uint8), 1, "2,5", "int8", "float32"], "dtype 'int8'"),
])
def test_bad_arguments_are_dlaerrors(args, fragment) -> None:
    with pytest.raises(DlaError, match=fragment):
        _lookup("softmax").callable(args)


def test_pad_and_resize_reject_bad_arguments() -> None:
    buf = np.zeros(4096, np.uint8)
    pad = _lookup("pad").callable
    with pytest.raises(DlaError, match="reflect pads"):
        pad([buf, buf, "1,1,2,2", "0,0,2,0,0,0,2,0", "reflect", 0.0, "float32", "float32"])
    with pytest.raises(DlaError, match="pad mode 'wrap'"):
        pad([buf, buf, "1,1,2,2", "0,0,1,0,0,0,1,0", "wrap", 0.0, "float32", "float32"])
    resize = _lookup("resize").callable
    with pytest.raises(DlaError, match="only H and W"):
        resize([buf, buf, "1,2,3,3", "1,4,3,3", "linear", "half_pixel", "floor", "float32", "float32"])
    with pytest.raises(DlaError, match="coordinate_transformation_mode 'tf_crop_and_resize'"):
        resize([buf, buf, "1,2,3,3", "1,2,6,6", "linear", "tf_crop_and_resize", "floor", "float32",
                "float32"])
