"""The faster kernels of the device's arithmetic against what they replace: SDP's indexed LUT
interpolation (bit for bit np.interp), PDP's whole-map window (bit for bit pool2d's separable
passes) and the channels-last depthwise convolution on small maps (within float32 rounding of the
sum, as the column-matrix kernel)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw import conv_depthwise, lut
from pydla.hw.arrays import scratch
from pydla.hw.compute import conv2d, pool2d
from pydla.hw.device import VirtualDevice
from pydla.hw.lut import Interpolator
from tests.hw.regs import FP32, Arena, done_bit, program, status
from tests.hw.test_depthwise import _check, _reference

# -- LUT --------------------------------------------------------------------------------------------


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _lut_points(rng: np.random.Generator, start: float, end: float, n: int) -> np.ndarray:
    """Random points around the grid, the grid points themselves and their float32 neighbours (where
    an estimated interval is off by one), and the special values."""
    grid = np.linspace(start, end, n).astype(np.float32)
    span = end - start
    parts = [rng.uniform(start - span / 4, end + span / 4, 600).astype(np.float32), grid,
             np.nextafter(grid, np.float32(np.inf)), np.nextafter(grid, np.float32(-np.inf)),
             np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, start, end], np.float32)]
    return np.concatenate(parts)


@pytest.mark.parametrize("seed", range(40))
def test_indexed_lut_is_np_interp_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([2, 3, 17, 64, 65, 200, 257]))
    start = float(np.float32(rng.uniform(-20, 10)))
    end = float(np.float32(start + rng.choice([1e-3, 0.5, 6.0, 300.0])))
    table = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
    table[rng.integers(n, size=2)] = rng.choice([0.0, -0.0])  # signed zeros keep their sign
    x = _lut_points(rng, start, end, n)
    ref = np.interp(x, np.linspace(start, end, n), table.astype(np.float64)).astype(np.float32)
    ours = x.copy()
    Interpolator(table, start, end)(ours)
    np.testing.assert_array_equal(_bits(ours), _bits(ref))


def test_indexed_lut_on_views_blocks_and_bad_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strided map, maps longer than a block, a table holding NaN or inf (np.interp decides), an
    empty map, and the table read on every call (device memory may change between runs)."""
    monkeypatch.setattr(lut, "_BLOCK", 37)
    rng = np.random.default_rng(5)
    grid = np.linspace(-3.0, 3.0, 100)
    table = rng.standard_normal(100).astype(np.float32)
    run = Interpolator(table, -3.0, 3.0)
    base = rng.uniform(-4, 4, (3, 9, 14)).astype(np.float32)
    before = base.copy()
    view = base[:, ::2, 1::3]
    expect = np.interp(view, grid, table.astype(np.float64)).astype(np.float32)
    run(view)
    np.testing.assert_array_equal(_bits(view), _bits(expect))
    mask = np.ones(base.shape, bool)
    mask[:, ::2, 1::3] = False
    np.testing.assert_array_equal(base[mask], before[mask])  # only the view's elements written
    table[7] = np.nan
    table[50] = np.inf
    x = rng.uniform(-4, 4, 500).astype(np.float32)
    with np.errstate(invalid="ignore"):
        expect = np.interp(x, grid, table.astype(np.float64)).astype(np.float32)
    ours = x.copy()
    with np.errstate(invalid="ignore"):
        run(ours)
    np.testing.assert_array_equal(_bits(ours), _bits(expect))
    empty = np.empty((2, 0, 3), np.float32)
    run(empty)
    assert empty.shape == (2, 0, 3)


def test_sdp_long_lut_through_registers_is_np_interp() -> None:
    """A 257-entry table programmed through SDP's registers takes the indexed way, bit for bit."""
    dev = VirtualDevice("full", mode="deterministic")
    try:
        arena = Arena(dev)
        rng = np.random.default_rng(9)
        grid = np.linspace(-8.0, 8.0, 257)
        table = np.tanh(grid).astype(np.float32)
        x = rng.uniform(-10, 10, (4, 16, 16)).astype(np.float32)
        src, dst = arena.put(x), arena.cube(x.shape)
        program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32, src_mode=0,
                src=src, dst=dst, act=int(R.sdp_act_e.LUT), lut_addr=arena.vector(table),
                lut_entries=257, lut_start=-8.0, lut_end=8.0, op_enable=1)
        assert status(dev) & done_bit("SDP", 0)
        expect = np.interp(x, grid, table.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(_bits(arena.get(dst)), _bits(expect))
    finally:
        dev.close()


# -- whole-map pooling ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["avg", "max", "min"])
@pytest.mark.parametrize(("c", "h", "w"), [(240, 8, 8), (576, 4, 4), (7, 1, 1), (5, 33, 3), (3, 200, 9)])
def test_whole_map_pool_is_the_separable_passes_bit_for_bit(method: Any, c: int, h: int, w: int) -> None:
    """pool2d with the window the whole map against pool2d over the same window taken the general
    way (an input one column wider, stride 2 along it: one window, not the whole map)."""
    rng = np.random.default_rng(c * h * w)
    wide = (rng.standard_normal((c, h, w + 1)) * 100).astype(np.float32)
    wide[0, 0, 0] = np.nan
    x = wide[:, :, :w]
    general = pool2d(wide, kernel=(h, w), stride=(1, 2), method=method)
    assert general.shape == (c, 1, 1)
    ours = pool2d(x, kernel=(h, w), stride=(1, 1), method=method)
    np.testing.assert_array_equal(_bits(ours), _bits(general))
    assert np.isnan(ours[0, 0, 0])
    half = pool2d(x.astype(np.float16), kernel=(h, w), stride=(3, 3), method=method)
    ref16 = pool2d(wide.astype(np.float16), kernel=(h, w), stride=(1, 2), method=method)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half.view(np.uint16), ref16.view(np.uint16))


def test_whole_map_pool_writes_a_strided_out_only() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5, 5)).astype(np.float32)
    buf = np.full(40, 7.0, np.float32)
    out = as_strided(buf[1:], (6, 1, 1), (24, 4, 4))
    assert pool2d(x, kernel=(5, 5), stride=(1, 1), method="avg", out=out) is out
    np.testing.assert_array_equal(out[:, 0, 0], pool2d(np.pad(x, ((0, 0), (0, 0), (0, 1))), kernel=(5, 5),
                                                       stride=(1, 2), method="avg")[:, 0, 0])
    untouched = np.ones(40, bool)
    untouched[1:37:6] = False
    assert (buf[untouched] == 7.0).all()


# -- channels-last depthwise ------------------------------------------------------------------------


def _poison() -> None:
    for key in ("dw-last-in", "dw-last-taps", "dw-last-acc", "dw-last-term"):
        scratch(key, (1 << 16,)).fill(np.nan)


@pytest.mark.parametrize("seed", range(30))
def test_channels_last_depthwise_agrees_with_the_column_matrix_kernel(seed: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Small maps with strides, dilations, asymmetric pads, float16 input, a bias, a residual: both
    kernels within float32 rounding of the float64 sum; the channels-last one taken for them."""
    rng = np.random.default_rng(seed)
    c = int(rng.integers(1, 40))
    kh, kw = (int(v) for v in rng.choice([1, 3, 5], 2))
    stride = tuple(int(v) for v in rng.choice([1, 2], 2))
    dilation = tuple(int(v) for v in rng.choice([1, 1, 2], 2))
    pads = tuple(int(v) for v in rng.integers(0, 3, 4))
    h = int(rng.integers(max(1, dilation[0] * (kh - 1) + 1 - pads[0] - pads[2]), 11))
    w = int(rng.integers(max(1, dilation[1] * (kw - 1) + 1 - pads[1] - pads[3]), 11))
    x = rng.standard_normal((c, h, w)).astype(np.float16 if seed % 4 == 3 else np.float32)
    wt = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
    ho = (h + pads[0] + pads[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + pads[1] + pads[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    adds = []
    if seed % 3 != 0:
        adds.append(np.broadcast_to(rng.standard_normal((c, 1, 1)).astype(np.float32), (c, ho, wo)))
    if seed % 2:
        adds.append(rng.standard_normal((c, ho, wo)).astype(np.float32))
    ref, mag = _reference(x, wt, stride, pads, dilation, adds)  # type: ignore[arg-type]
    taken = []
    real = conv_depthwise.depthwise_channels_last
    monkeypatch.setattr(conv_depthwise, "depthwise_channels_last", lambda *a: taken.append(1) or real(*a))
    kwargs: dict[str, Any] = {"stride": stride, "pads": pads, "dilation": dilation, "groups": c}
    for limit in (1 << 20, 0):  # every map channels-last, then none
        monkeypatch.setattr(conv_depthwise, "CHANNELS_LAST_PIXELS", limit)
        _poison()
        out = np.full((c, ho, wo), np.nan, np.float32)
        assert conv2d(x, wt, out=out, addends=adds, **kwargs) is out
        _check(out, ref, mag, f"limit {limit}")
    assert taken == [1]
    monkeypatch.setattr(conv_depthwise, "CHANNELS_LAST_PIXELS", 64)
    _check(conv2d(x, wt, addends=adds, **kwargs), ref, mag, "default")  # x's dtype
    assert len(taken) == (2 if ho * wo <= 64 else 1)


def test_channels_last_depthwise_into_a_strided_out() -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((12, 7, 7)).astype(np.float32)
    wt = rng.standard_normal((12, 1, 3, 3)).astype(np.float32)
    buf = np.full(12 * 64 + 5, 3.0, np.float32)
    out = as_strided(buf[2:], (12, 7, 7), (64 * 4, 9 * 4, 4))
    assert conv2d(x, wt, pads=(1, 1, 1, 1), groups=12, out=out) is out
    ref, mag = _reference(x, wt, (1, 1), (1, 1, 1, 1), (1, 1), [])
    _check(out, ref, mag)
    mask = np.ones(buf.size, bool)
    ids = as_strided(np.arange(buf.size)[2:], (12, 7, 7), (64 * 8, 9 * 8, 8))
    mask[ids.reshape(-1)] = False
    assert (buf[mask] == 3.0).all()


# -- SDP from float32 memory ------------------------------------------------------------------------

_UFUNC = {R.sdp_ew_op_e.ADD: np.add, R.sdp_ew_op_e.SUB: np.subtract, R.sdp_ew_op_e.MUL: np.multiply,
          R.sdp_ew_op_e.MAX: np.maximum, R.sdp_ew_op_e.MIN: np.minimum, R.sdp_ew_op_e.DIV: np.divide}


def _sdp_memory(dev: VirtualDevice, arena: Arena, src: Any, dst: Any, **regs: Any) -> None:
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=FP32, out_precision=FP32,
            src_mode=int(R.sdp_src_mode_e.MEMORY), src=src, dst=dst, **regs)
    program(dev, "SDP", op_enable=1)
    assert status(dev) & done_bit("SDP", 0)


@pytest.mark.parametrize("where", ["apart", "in_place", "operand_is_destination"])
@pytest.mark.parametrize("act", ["none", "relu", "clamp"])
@pytest.mark.parametrize("op", list(_UFUNC), ids=[op.name for op in _UFUNC])
@pytest.mark.parametrize("mode", ["cube", "per_channel", "scalar"])
def test_sdp_element_wise_from_memory_bit_for_bit(op: Any, mode: str, act: str, where: str) -> None:
    """The element-wise stage straight from float32 memory into float32 memory: the float32 op on
    the source and the operand as they lie, then the activation, bit for bit (zeros, NaN and
    division by zero included), wherever the destination lies."""
    dev = VirtualDevice("full", mode="deterministic")
    try:
        arena = Arena(dev)
        rng = np.random.default_rng(int(op) * 7 + len(mode))
        shape = (3, 4, 5)
        x = rng.standard_normal(shape).astype(np.float32)
        x[0, 0, :3] = [0.0, np.nan, -0.0]
        y = rng.standard_normal(shape).astype(np.float32)
        y[0, 0, 3] = 0.0
        operand = {"cube": y, "per_channel": y[:, :1, :1], "scalar": y[:1, :1, :1]}[mode]
        src = arena.put(x, line_stride=8 * 4)
        regs: dict[str, Any] = {"ew_op": int(op), "ew_mode": int(getattr(R.sdp_ew_mode_e, mode.upper()))}
        if mode == "cube":
            ew = arena.put(y, line_stride=6 * 4)
            regs.update(ew_addr=ew.addr, ew_line_stride=ew.line_stride, ew_surf_stride=ew.surf_stride)
        else:
            regs["ew_addr"] = arena.vector(operand.reshape(-1))
        dst = arena.cube(shape)
        if where == "in_place":
            dst = src
        elif where == "operand_is_destination" and mode == "cube":
            dst = ew
        act_regs = {"none": {}, "relu": {"act": int(R.sdp_act_e.RELU)},
                    "clamp": {"act": int(R.sdp_act_e.CLAMP), "act_min": -0.5, "act_max": 0.75}}[act]
        _sdp_memory(dev, arena, src, dst, **regs, **act_regs)
        with np.errstate(divide="ignore", invalid="ignore"):
            expect = _UFUNC[op](x, operand, dtype=np.float32)
        if act == "relu":
            expect = np.maximum(expect, np.float32(0))
        elif act == "clamp":
            expect = np.clip(expect, np.float32(-0.5), np.float32(0.75))
        np.testing.assert_array_equal(_bits(arena.get(dst)), _bits(expect))
    finally:
        dev.close()


@pytest.mark.parametrize("entries", [2, 257])
@pytest.mark.parametrize("where", ["apart", "in_place"])
def test_sdp_lut_from_memory_bit_for_bit(entries: int, where: str) -> None:
    dev = VirtualDevice("full", mode="deterministic")
    try:
        arena = Arena(dev)
        rng = np.random.default_rng(entries)
        x = rng.uniform(-5, 5, (2, 6, 7)).astype(np.float32)
        table = rng.standard_normal(entries).astype(np.float32)
        src = arena.put(x, line_stride=9 * 4)
        dst = src if where == "in_place" else arena.cube(x.shape)
        _sdp_memory(dev, arena, src, dst, act=int(R.sdp_act_e.LUT), lut_addr=arena.vector(table),
                    lut_entries=entries, lut_start=-3.0, lut_end=3.0)
        expect = np.interp(x, np.linspace(-3.0, 3.0, entries), table.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(_bits(arena.get(dst)), _bits(expect))
    finally:
        dev.close()


def test_np_interp_in_blocks_of_channels(monkeypatch: pytest.MonkeyPatch) -> None:
    """SDP's short tables: np.interp a block of channels at a time, into another array or in place,
    on strided views; the same bits as one call."""
    monkeypatch.setattr(lut, "INTERP_BLOCK", 50)  # blocks of 2 channels of 5x5, a ragged last one
    rng = np.random.default_rng(4)
    base = rng.uniform(-4, 4, (7, 6, 8)).astype(np.float32)
    x = base[:, :5, 1:6]
    grid, fp = np.linspace(-3.0, 3.0, 2), np.array([0.0, 1.0])
    expect = np.interp(x, grid, fp).astype(np.float32)
    out = np.full((7, 5, 5), np.nan, np.float32)
    lut.interp_blocks(x, grid, fp, out)
    np.testing.assert_array_equal(_bits(out), _bits(expect))
    lut.interp_blocks(x, grid, fp, x)
    np.testing.assert_array_equal(_bits(x), _bits(expect))


# -- PDP max / min windows ----------------------------------------------------------------------------


def _window_reference(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                      pads: tuple[int, int, int, int], out_hw: tuple[int, int], method: str) -> np.ndarray:
    """Each window's max (min) over the input padded with -inf (+inf), one window at a time."""
    kh, kw = kernel
    ho, wo = out_hw
    fill = -np.inf if method == "max" else np.inf
    extra_h = max(0, (ho - 1) * stride[0] + kh - (x.shape[1] + pads[0] + pads[2]))
    extra_w = max(0, (wo - 1) * stride[1] + kw - (x.shape[2] + pads[1] + pads[3]))
    p = np.pad(x.astype(np.float32), ((0, 0), (pads[0], pads[2] + extra_h), (pads[1], pads[3] + extra_w)),
               constant_values=fill)
    pick = np.max if method == "max" else np.min
    out = np.empty((x.shape[0], ho, wo), np.float32)
    for r in range(ho):
        for q in range(wo):
            y0, x0 = r * stride[0], q * stride[1]
            out[:, r, q] = pick(p[:, y0:y0 + kh, x0:x0 + kw], axis=(1, 2))
    return out


EXTREME_CASES = [  # (C, H, W), kernel, stride, pads, ceil mode
    ((64, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1), False),  # ResNet-18's
    ((5, 63, 63), (3, 3), (2, 2), (0, 0, 0, 0), True),  # SqueezeNet's, ceil: the last window hangs over
    ((3, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), False),
    ((4, 7, 9), (3, 2), (1, 3), (2, 1, 2, 1), True),  # odd sizes, a stride larger than the kernel width
    ((2, 5, 5), (5, 5), (1, 1), (4, 4, 4, 4), False),  # windows almost all padding
    ((3, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), False),
    ((2, 9, 4), (4, 1), (3, 1), (3, 0, 3, 0), True),
    ((7, 6, 13), (3, 5), (2, 4), (0, 2, 1, 4), True),
]


@pytest.mark.parametrize("case", EXTREME_CASES)
@pytest.mark.parametrize("method", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_max_min_pool_matches_each_window(case: tuple, method: str, dtype: type) -> None:
    """pool2d's max/min path (down the columns from x, then along the lines; no padded copy) against
    each window's extreme over the padded input: equal values, with the outputs written in place."""
    shape, kernel, stride, pads, ceil = case
    rng = np.random.default_rng(sum(shape) + kernel[0] * 7 + stride[1])
    x = rng.standard_normal(shape).astype(dtype)
    sizes = []
    for n, k, s, lo, hi in ((shape[1], kernel[0], stride[0], pads[0], pads[2]),
                            (shape[2], kernel[1], stride[1], pads[1], pads[3])):
        sizes.append((-(-(n + lo + hi - k) // s) if ceil else (n + lo + hi - k) // s) + 1)
    out_hw = (sizes[0], sizes[1])
    want = _window_reference(x, kernel, stride, pads, out_hw, method)
    out = np.full((shape[0], *out_hw), np.nan, dtype)
    got = pool2d(x, kernel=kernel, stride=stride, pads=pads, method=method,  # type: ignore[arg-type]
                 out_size=out_hw, out=out)
    assert got is out
    np.testing.assert_array_equal(out, want.astype(dtype))
    # again, on other data in the same arrays (the buffers are reused between calls)
    x[...] = rng.standard_normal(shape)
    pool2d(x, kernel=kernel, stride=stride, pads=pads, method=method, out_size=out_hw, out=out)  # type: ignore[arg-type]
    want = _window_reference(x, kernel, stride, pads, out_hw, method)
    np.testing.assert_array_equal(out, want.astype(dtype))
