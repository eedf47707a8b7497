"""The SDP's fused integer data path (sdp_fused) against the stage-by-stage reference (sdp_int), element
for element, over the whole range of the registers and of the 32-bit data: random registers from
hypothesis, data with the extremes of int32 included, per-kernel and per-element operands."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pydla.hw.nvdla import sdp, sdp_fused
from pydla.hw.nvdla.intmath import I64
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import SRC_MEM, SRC_REG, SdpParams, SdpX, SdpY

LANES, H, W = 16, 5, 3
SHIFTS = st.one_of(st.integers(0, 4), st.integers(0, 63))  # small shifts often: ties reach the output
I32_EDGES = [-(1 << 31), (1 << 31) - 1, -1, 0, 1, -(1 << 30), 1 << 30]


@st.composite
def x_stage(draw: st.DrawFn) -> SdpX:
    return SdpX(bypass=draw(st.integers(0, 1)), alu_bypass=draw(st.integers(0, 1)),
                alu_algo=draw(st.integers(0, 3)), alu_src=draw(st.sampled_from([SRC_REG, SRC_MEM])),
                alu_shift_value=draw(SHIFTS), alu_operand=draw(st.integers(0, 0xFFFF)),
                mul_bypass=draw(st.integers(0, 1)), mul_prelu=draw(st.sampled_from([0, 0, 0, 1])),
                mul_src=draw(st.sampled_from([SRC_REG, SRC_MEM])), mul_shift_value=draw(SHIFTS),
                mul_operand=draw(st.integers(0, 0xFFFF)), relu_bypass=draw(st.integers(0, 1)))


def _operands(rng: np.random.Generator, per_element: bool) -> tuple[I64, I64]:
    shape = (LANES, H, W) if per_element else (LANES, 1, 1)
    alu = rng.integers(-(1 << 15), 1 << 15, shape)
    mul = rng.integers(-(1 << 15), 1 << 15, shape)
    for a in (alu, mul):  # the 16-bit extremes somewhere
        a.reshape(-1)[:2] = [-(1 << 15), (1 << 15) - 1]
    return alu, mul


def _data(rng: np.random.Generator, scale_bits: int, channels_last: bool) -> np.ndarray:
    x = rng.integers(-(1 << scale_bits), 1 << scale_bits, (1, LANES, H, W)).astype(np.int32)
    x.reshape(-1)[:len(I32_EDGES)] = I32_EDGES
    if channels_last:  # as the convolution hands it over: a transposed view of (N, H, W, lanes)
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    return x


@settings(max_examples=300, deadline=None)
@given(bs=x_stage(), bn=x_stage(), cvt_offset=st.one_of(st.just(0), st.integers(0, 0xFFFFFFFF)),
       cvt_scale=st.one_of(st.integers(1, 3), st.integers(0, 0xFFFF)), cvt_shift=SHIFTS,
       pout=st.sampled_from([Precision.INT8, Precision.INT16]),
       scale_bits=st.sampled_from([2, 4, 12, 20, 31]), per_element=st.booleans(), channels_last=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_fused_equals_the_stages(bs: SdpX, bn: SdpX, cvt_offset: int, cvt_scale: int, cvt_shift: int,
                                 pout: Precision, scale_bits: int, per_element: bool, channels_last: bool,
                                 seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = SdpParams(width=W - 1, height=H - 1, channel=LANES - 1, in_precision=0, proc_precision=int(pout),
                  out_precision=int(pout), flying_mode=1, bs=bs, bn=bn, cvt_offset=cvt_offset,
                  cvt_scale=cvt_scale, cvt_shift=cvt_shift)
    ops = {"bs": _operands(rng, per_element), "bn": _operands(rng, not per_element)}
    data = _data(rng, scale_bits, channels_last)
    want, _ = sdp._int_datapath(data.astype(np.int64), p, ops, pout, fused=False)
    got, unequal = sdp._int_datapath(data, p, ops, pout)
    assert got.dtype == want.dtype == pout.dtype and not unequal
    assert np.array_equal(got, want)
    prelu = any(not s.bypass and not s.mul_bypass and s.mul_prelu for s in (bs, bn))
    assert sdp_fused.fusable(p, pout) is not prelu


def test_what_is_not_fused() -> None:
    base = SdpParams(width=0, height=0, channel=0, in_precision=0, proc_precision=0, out_precision=0)
    assert sdp_fused.fusable(base, Precision.INT8)
    assert not sdp_fused.fusable(base, Precision.FP16)
    assert not sdp_fused.fusable(SdpParams(width=0, height=0, channel=0, in_precision=0, proc_precision=0,
                                           out_precision=0, ew=SdpY(bypass=0)), Precision.INT8)
    prelu = SdpX(bypass=0, mul_bypass=0, mul_prelu=1)
    assert not sdp_fused.fusable(SdpParams(width=0, height=0, channel=0, in_precision=0, proc_precision=0,
                                           out_precision=0, bn=prelu), Precision.INT8)


@pytest.mark.parametrize(("shift", "want"), [(1, [3, -3, 3, -3, 4, -4, 0, 1 << 15, -(1 << 15)]),
                                           (0, [5, -5, 6, -6, 7, -7, 0, 1 << 16, -(1 << 16)]),
                                           (63, [0] * 9)])
def test_rounding_ties_go_away_from_zero_and_the_widest_shift_gives_0(shift: int, want: list[int]) -> None:
    stage = SdpX(bypass=0, mul_bypass=1, mul_shift_value=shift)
    p = SdpParams(width=8, height=0, channel=0, in_precision=1, proc_precision=1, out_precision=1,
                  flying_mode=1, bs=stage, cvt_scale=1)
    data = np.array([5, -5, 6, -6, 7, -7, 0, 1 << 16, -(1 << 16)], dtype=np.int32).reshape(1, 1, 1, 9)
    ops = {"bs": (np.zeros(1, np.int64),) * 2, "bn": (np.zeros(1, np.int64),) * 2}
    got, _ = sdp._int_datapath(data, p, ops, Precision.INT16)
    want_sat = [max(-(1 << 15), min((1 << 15) - 1, v)) for v in want]
    assert got.reshape(-1).tolist() == want_sat
    ref, _ = sdp._int_datapath(data.astype(np.int64), p, ops, Precision.INT16, fused=False)
    assert ref.reshape(-1).tolist() == want_sat


def test_each_x_stage_saturates_to_exactly_32_bits() -> None:
    """x + 1 past int32's top (and x - 1 past its bottom) saturates; the converter's offset then brings the
    saturated value to 0, so a saturation off by one shows in the output."""
    for top, op, offset in ((True, 1, (1 << 31) - 1), (False, 0xFFFF, 1 << 31)):
        stage = SdpX(bypass=0, alu_bypass=0, alu_algo=2, alu_operand=op)
        p = SdpParams(width=0, height=0, channel=7, in_precision=0, proc_precision=0, out_precision=0,
                      flying_mode=1, bs=stage, cvt_offset=offset, cvt_scale=1)
        data = np.full((1, 8, 1, 1), (1 << 31) - 1 if top else -(1 << 31), dtype=np.int32)
        ops = {"bs": (np.zeros((8, 1, 1), np.int64),) * 2, "bn": (np.zeros((8, 1, 1), np.int64),) * 2}
        got, _ = sdp._int_datapath(data, p, ops, Precision.INT8)
        want, _ = sdp._int_datapath(data.astype(np.int64), p, ops, Precision.INT8, fused=False)
        assert got.reshape(-1).tolist() == want.reshape(-1).tolist() == [0] * 8
