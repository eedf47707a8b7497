"""SDP's LUT activation: descriptors (dla_lut_param_t), validation, programming and the numbers."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.loadable.taskbuilder import TaskBuilder
from tests.kmd.support import MakeKmd, per_operation_kmd

GRID = np.linspace(-4.0, 4.0, 33)


@pytest.fixture
def make_kmd(make_kmd: MakeKmd) -> MakeKmd:
    """These tests inspect the per-operation path (its register traffic, the engine's enable order):
    their devices have no command processor (tests/cmdproc compares the two paths)."""
    return per_operation_kmd(make_kmd)


def _build(entries: int = 33):
    tb = TaskBuilder()
    x, y = tb.cube("x", (2, 4, 5)), tb.cube("y", (2, 4, 5))
    grid = np.linspace(-4.0, 4.0, entries)
    index = tb.lut(np.tanh(grid), -4.0, 4.0)
    tb.sdp(x, y, act="lut", lut=index)
    return tb.build()


def _run(kmd, ctx, built, x):
    loaded = built.load(kmd, ctx)
    kmd.bo_array(ctx, loaded.handles["x"])[:] = x.view(np.uint8).ravel()
    kmd.submit(ctx, loaded.addresses, timeout_ms=2000).wait(5000)
    return kmd.bo_array(ctx, loaded.handles["y"]).view(np.float32).reshape(x.shape)


def test_lut_activation_interpolates_the_table(kmd_full) -> None:
    dev, kmd = kmd_full
    ctx = kmd.open_context()
    x = (np.random.default_rng(3).standard_normal((2, 4, 5)) * 3).astype(np.float32)
    x[0, 0, :3] = [-10.0, 10.0, 4.0]  # outside the range: the end values
    trace = dev.record_trace()
    y = _run(kmd, ctx, _build(), x)
    expected = np.interp(x, GRID, np.tanh(GRID))
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
    assert abs(y[0, 0, 0] - np.tanh(-4.0)) < 1e-6 and abs(y[0, 0, 1] - np.tanh(4.0)) < 1e-6
    written = {a.name: a.value for a in trace if a.op == "W"}
    assert written["SDP_D_ACT"] == R.sdp_act_e.LUT
    assert written["SDP_D_LUT_ENTRIES"] == 33


def _patch_lut(built, **fields):
    blob = bytearray(built.descriptors)
    offset = built.addresses[4][1]
    lut = T.dla_lut_param_t.from_buffer(blob, offset)
    for k, v in fields.items():
        setattr(lut, k, v)
    del lut
    built.descriptors = bytes(blob)
    return built


def _patch_sdp(built, **fields):
    blob = bytearray(built.descriptors)
    op = T.dla_sdp_op_desc_t.from_buffer(blob, built.addresses[2][1])
    for k, v in fields.items():
        setattr(op, k, v)
    del op
    built.descriptors = bytes(blob)
    return built


def _net(built, **fields):
    blob = bytearray(built.descriptors)
    net = T.dla_network_desc_t.from_buffer(blob, 0)
    for k, v in fields.items():
        setattr(net, k, v)
    del net
    built.descriptors = bytes(blob)
    return built


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        (lambda b: _patch_lut(b, entries=1), "entries = 1"),
        (lambda b: _patch_lut(b, entries=258), "entries = 258"),
        (lambda b: _patch_lut(b, start=5.0), "below end"),
        (lambda b: _patch_lut(b, end=float("nan")), "below end"),
        (lambda b: _patch_sdp(b, lut_index=1), "lut_index 1"),
        (lambda b: _patch_sdp(b, lut_index=-1), "lut_index -1"),
        (lambda b: _net(b, num_luts=0), "lut_index 0 is outside the 0 LUTs"),
        (lambda b: _net(b, num_luts=5000), "num_luts = 5000"),
        (lambda b: _net(b, num_luts=3), "LUTs (lut_data_index)"),
    ],
)
def test_lut_descriptors_are_validated(kmd_full, patch, fragment) -> None:
    dev, kmd = kmd_full
    ctx = kmd.open_context()
    built = patch(_build())
    loaded = built.load(kmd, ctx)
    trace = dev.record_trace()
    with pytest.raises(DlaError) as e:
        kmd.submit(ctx, loaded.addresses)
    assert fragment in str(e.value)
    assert e.value.code in (NvError.BadValue, NvError.InvalidSize)
    assert not [a for a in trace if a.op == "W"]


def test_builder_rejects_bad_luts() -> None:
    tb = TaskBuilder()
    with pytest.raises(DlaError, match=r"need 2\.\.257"):
        tb.lut([1.0], 0.0, 1.0)
    with pytest.raises(DlaError, match="start < end"):
        tb.lut([1.0, 2.0], 1.0, 1.0)
    x, y = tb.cube("x", (1, 1, 2)), tb.cube("y", (1, 1, 2))
    with pytest.raises(DlaError, match="needs lut="):
        tb.sdp(x, y, act="lut")


def test_lut_param_layout() -> None:
    assert T.dla_lut_param_t.table.offset == 16
    assert ctypes.sizeof(T.dla_lut_param_t) == 16 + 257 * 4 + 4
