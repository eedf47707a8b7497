"""SDP's LUT activation programmed through registers: interpolation, clamping, bad tables."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from tests.hw.regs import FP32, SENTINEL, Arena, done_bit, error_bit, program, status


@pytest.fixture
def dev() -> Any:
    device = VirtualDevice("full", mode="deterministic")
    yield device
    device.close()


def _lut_op(dev: VirtualDevice, arena: Arena, x: np.ndarray, table: np.ndarray, start: float, end: float,
            entries: int | None = None) -> Any:
    src, dst = arena.put(x), arena.cube(x.shape)
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32, src_mode=0,
            src=src, dst=dst, act=int(R.sdp_act_e.LUT), lut_addr=arena.vector(table.astype(np.float32)),
            lut_entries=len(table) if entries is None else entries, lut_start=start, lut_end=end,
            op_enable=1)
    return dst


def test_lut_interpolates_and_clamps(dev: VirtualDevice) -> None:
    arena = Arena(dev)
    grid = np.linspace(-2.0, 2.0, 9)
    table = grid**3
    x = np.array([[[-5.0, -2.0, -1.25, 0.0, 0.3, 1.99, 2.0, 7.0]]], np.float32)
    dst = _lut_op(dev, arena, x, table, -2.0, 2.0)
    assert status(dev) & done_bit("SDP", 0)
    np.testing.assert_allclose(arena.get(dst), np.interp(x, grid, table).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize(("entries", "start", "end", "detail"), [
    (1, -1.0, 1.0, "LUT of 1 entries"),
    (258, -1.0, 1.0, "LUT of 258 entries"),
    (4, 1.0, 1.0, "LUT range"),
    (4, float("nan"), 1.0, "LUT range"),
])
def test_bad_lut_is_a_bad_config(dev: VirtualDevice, entries: int, start: float, end: float,
                                 detail: str) -> None:
    arena = Arena(dev)
    dst = _lut_op(dev, arena, np.ones((1, 2, 2), np.float32), np.arange(4.0), start, end, entries)
    assert status(dev) & error_bit("SDP", 0)
    assert dev.reg_read(R.SDP_S_ERROR) == R.dla_hw_error_e.BAD_CONFIG
    assert detail in dev.log[-1]
    assert (arena.raw(dst) == SENTINEL).all()
