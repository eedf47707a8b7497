"""The integer convolution's GEMMs: conv_int._gemm exact in float32 and float64 within the bound the
caller proves, as one product or as blocks of rows that BLAS runs on the calling thread; conv_gemm's
direct convolution (float32 slices, float64, the prepared weights and their cache) equal to the atoms
added in the hardware's order."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from pydla.hw.nvdla import cacc, conv, conv_gemm, conv_int, conv_params, conv_weights, surface
from pydla.hw.nvdla.conv_atoms import DirectAtoms
from pydla.hw.nvdla.conv_taps import Geometry, Taps
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.target import NV_FULL, NV_SMALL, NvdlaTarget


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


# -- the direct convolution's GEMM path (conv_gemm) against the atoms in the hardware's order -------------

def _reference(x: np.ndarray, w: np.ndarray, g: Geometry, pad_value: int, cf: int, truncate: int
               ) -> tuple[np.ndarray, int]:
    """conv_int's atom-by-atom sums (CSC's order, 48-bit saturation after each atom), delivered."""
    sums = conv_int.accumulate(DirectAtoms(Taps(x, g, pad_value), w, cf))
    out, saturated = cacc.deliver_int(sums, truncate)
    return out, saturated


def _geometry(x: np.ndarray, k: int, r: int, s: int, stride: tuple[int, int] = (1, 1),
              dilation: tuple[int, int] = (1, 1), pad: tuple[int, int, int, int] = (0, 0, 0, 0)) -> Geometry:
    n, c, h, wd = x.shape
    left, right, top, bottom = pad
    ow = (wd + left + right - ((s - 1) * dilation[0] + 1)) // stride[0] + 1
    oh = (h + top + bottom - ((r - 1) * dilation[1] + 1)) // stride[1] + 1
    return Geometry(batches=n, channel=c, height=h, width=wd, kernels=k, kernel_height=r, kernel_width=s,
                    stride_x=stride[0], stride_y=stride[1], dilation_x=dilation[0], dilation_y=dilation[1],
                    pad_left=left, pad_top=top, out_width=ow, out_height=oh)


def _prepared(w: np.ndarray, target: NvdlaTarget, prec: Precision) -> conv_gemm.PreparedWeights:
    raw = conv_weights.pack(w, target, prec)
    return conv_gemm.PreparedWeights.make(raw, *w.shape, target, prec)


# precision, (N, C, H, W), (K, R, S), stride, dilation, pad (l, r, t, b), weight range, data range
GEMM_CASES = [
    (Precision.INT8, (1, 512, 5, 5), (24, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 128, 128),  # float32 slices
    (Precision.INT8, (2, 70, 9, 8), (33, 3, 3), (2, 1), (1, 2), (2, 0, 1, 2), 128, 128),
    (Precision.INT8, (1, 3, 20, 20), (16, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 128, 128),
    (Precision.INT8, (1, 13, 6, 7), (11, 3, 3), (1, 1), (2, 3), (1, 0, 0, 1), 128, 128),  # dilation in x
    (Precision.INT8, (1, 64, 4, 4), (40, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 128, 128),
    (Precision.INT16, (1, 64, 6, 5), (17, 3, 2), (1, 2), (2, 1), (0, 2, 2, 0), 32768, 32768),  # float64
    (Precision.INT16, (1, 300, 4, 4), (9, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 40, 100),  # INT16 in slices
    (Precision.INT16, (1, 8, 3, 3), (8, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, 2),  # one float32 GEMM
]


@pytest.mark.parametrize(("prec", "shape", "kernel", "stride", "dilation", "pad", "w_lim", "x_lim"),
                         GEMM_CASES)
@pytest.mark.parametrize("truncate", [0, 5])
def test_gemm_path_equals_the_atoms_in_hardware_order(
        prec: Precision, shape: tuple[int, ...], kernel: tuple[int, int, int], stride: tuple[int, int],
        dilation: tuple[int, int], pad: tuple[int, int, int, int], w_lim: int, x_lim: int, truncate: int
) -> None:
    rng = np.random.default_rng(sum(shape) + sum(kernel) + truncate)
    x = rng.integers(-x_lim, x_lim, shape).astype(prec.dtype)
    k, r, s = kernel
    w = rng.integers(-w_lim, w_lim, (k, shape[1], r, s)).astype(prec.dtype)
    pad_value = int(rng.integers(-x_lim, x_lim))
    g = _geometry(x, k, r, s, stride, dilation, pad)
    prepared = _prepared(w, NV_FULL, prec)
    got = conv_gemm.convolve(x.transpose(0, 2, 3, 1), g, pad_value, prepared, truncate)
    assert got is not None
    out, saturated = got
    ref, ref_saturated = _reference(x, w, g, pad_value, 64, truncate)
    assert out.dtype == np.int32 and np.array_equal(out, ref) and saturated == ref_saturated


def test_int8_runs_in_float32_slices_each_below_2_24_whatever_the_weights() -> None:
    w = np.full((4, 512, 3, 3), -128, dtype=np.int8)  # the largest Σ|w| an INT8 kernel of 4608 can have
    w[1, ::3] = 127
    prepared = _prepared(w, NV_SMALL, Precision.INT8)
    slices = prepared.slices(128)
    assert slices is not None and len(slices) == 5  # 128 · 128 · 4608 = 2^26.2: five slices of <= 1023 rows
    assert slices[0][0] == 0 and slices[-1][1] == 4608
    assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))
    m = np.abs(prepared.matrix(np.float32).astype(np.int64))
    assert all(128 * int(m[a:b].sum(axis=0).max()) < conv_int.SGEMM_EXACT for a, b in slices)
    assert prepared.slices(1) == ((0, 4608),)  # small data: one GEMM
    x = np.full((1, 512, 3, 3), -128, dtype=np.int8)
    g = _geometry(x, 4, 3, 3)
    out = conv_gemm.convolve(x.transpose(0, 2, 3, 1), g, 0, prepared, 0)
    assert out is not None
    exact = (x.astype(np.int64).reshape(1, -1) @ w.astype(np.int64).reshape(4, -1).T).reshape(-1)
    assert out[0].reshape(-1).tolist() == exact.tolist() and abs(int(exact[0])) > 1 << 24


def test_int16_data_and_weights_take_float64() -> None:
    w = np.full((2, 64, 3, 3), 30000, dtype=np.int16)
    assert _prepared(w, NV_FULL, Precision.INT16).slices(30000) is None


def test_past_2_47_the_gemm_path_declines() -> None:
    w = np.full((1, 8192, 4, 4), -32768, dtype=np.int16)
    prepared = _prepared(w, NV_FULL, Precision.INT16)
    x = np.full((1, 4, 4, 8192), -32768, dtype=np.int16)
    g = Geometry(batches=1, channel=8192, height=4, width=4, kernels=1, kernel_height=4, kernel_width=4,
                 stride_x=1, stride_y=1, dilation_x=1, dilation_y=1, pad_left=0, pad_top=0, out_width=1,
                 out_height=1)
    assert conv_gemm.convolve(x, g, 0, prepared, 0) is None
    x[...] = -32767  # the bound 32767 · 2^32 is below 2^47: float64, exact
    got = conv_gemm.convolve(x, g, 0, prepared, 16)
    assert got is not None and got[1] == 0
    assert got[0].tolist() == [[[[round(32767 * 32768 * 131072 / 65536)]]]]


def test_the_padding_value_counts_in_the_bound_only_where_it_is_read() -> None:
    x = np.ones((1, 2, 2, 8), dtype=np.int8)
    assert conv_gemm.extreme(x, _geometry(x.transpose(0, 3, 1, 2), 1, 1, 1), -100) == 1
    assert conv_gemm.extreme(x, _geometry(x.transpose(0, 3, 1, 2), 1, 3, 3, pad=(1, 1, 1, 1)), -100) == 100
    # no padding, but the kernel reaches past the input on the right (pad_right, as CSC reads it)
    g = _geometry(x.transpose(0, 3, 1, 2), 1, 1, 2, pad=(0, 1, 0, 0))
    assert conv_gemm.extreme(x, g, -100) == 100


def _device_conv(cache: conv_gemm.WeightCache, mem: ByteMemory, params: conv_params.ConvParams) -> np.ndarray:
    """(N, OH, OW, K), as the reference."""
    return np.asarray(conv.execute(params, mem, NV_SMALL, weights=cache).to_sdp).transpose(0, 2, 3, 1)


def test_rewritten_weights_are_never_served_from_the_cache() -> None:
    """The cache keys a launch's prepared weights by its registers and checks the bytes at every run: the
    same registers with new weight bytes compute with the new weights."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 16, 5, 5))
    w = rng.integers(-128, 128, (8, 16, 3, 3))
    p = conv_params.direct(target=NV_SMALL, precision=Precision.INT8, width=5, height=5, channel=16,
                           kernels=8, kernel_width=3, kernel_height=3, data_addr=0x1000, weight_addr=0x20000,
                           pad=(1, 1, 1, 1))
    mem = ByteMemory(1 << 20)
    cube = surface.Cube(0x1000, 5, 5, 16, p.cdma.line_stride, p.cdma.surf_stride, Precision.INT8)
    surface.scatter(mem, cube, NV_SMALL, x[0].astype(np.int8), "x")
    mem.write(0x20000, conv_weights.pack(w, NV_SMALL, Precision.INT8))
    cache = conv_gemm.WeightCache()
    g = _geometry(x, 8, 3, 3, pad=(1, 1, 1, 1))
    first = _device_conv(cache, mem, p)
    assert np.array_equal(first, _reference(x, w, g, 0, 8, 0)[0])
    assert np.array_equal(_device_conv(cache, mem, p), first) and (cache.hits, cache.misses) == (1, 1)
    w2 = w.copy()
    w2[3, 7, 1, 2] += 1 if w2[3, 7, 1, 2] < 127 else -1  # one weight of one kernel changes by one
    mem.write(0x20000, conv_weights.pack(w2, NV_SMALL, Precision.INT8))
    second = _device_conv(cache, mem, p)
    assert (cache.hits, cache.misses, len(cache)) == (1, 2, 1)
    assert np.array_equal(second, _reference(x, w2, g, 0, 8, 0)[0]) and not np.array_equal(second, first)
    assert np.array_equal(second[..., [0, 1, 2, 4, 5, 6, 7]], first[..., [0, 1, 2, 4, 5, 6, 7]])


def test_the_cache_starts_again_past_its_capacity() -> None:
    cache = conv_gemm.WeightCache(capacity=3000)
    rng = np.random.default_rng(6)
    for i in range(3):
        w = rng.integers(-128, 128, (8, 16, 3, 3))
        raw = conv_weights.pack(w, NV_SMALL, Precision.INT8)
        cache.get(i, raw, lambda raw=raw: conv_gemm.PreparedWeights.make(raw, 8, 16, 3, 3, NV_SMALL,
                                                                          Precision.INT8))
    assert len(cache) == 1 and cache.misses == 3  # each entry is 2 x 1152 bytes: the second clears the first


@pytest.mark.parametrize("target", [NV_SMALL, NV_FULL, dataclasses.replace(NV_SMALL, name="atom4", atom=4)])
def test_channels_last_gather_and_scatter_are_the_cube_transposed(target: NvdlaTarget) -> None:
    """Whole atoms moved as 8-byte words (and as bytes where an atom is not whole words) give the same
    elements as the per-lane gather, and a channel-last scatter writes what a channel-first one does."""
    rng = np.random.default_rng(7)
    mem = ByteMemory(1 << 16)
    atom = target.atom
    cube = surface.Cube(0x100, 5, 3, 13, 8 * atom, 32 * atom, Precision.INT8, batch=2,
                        batch_stride=128 * atom)
    mem.write(0, rng.integers(0, 256, 1 << 16).astype(np.uint8))
    a = surface.gather_batches(mem, cube, target, "x", lanes=True)
    b = surface.gather_channels_last(mem, cube, target, "x")
    lanes = cube.lanes(target)
    assert b.shape == (2, 3, 5, lanes) and np.array_equal(a, b.transpose(0, 3, 1, 2))
    data = rng.integers(-128, 128, (2, 3, 5, lanes)).astype(np.int8)
    first, last = ByteMemory(1 << 16), ByteMemory(1 << 16)
    surface.scatter_batches(first, cube, target, np.ascontiguousarray(data.transpose(0, 3, 1, 2)), "y")
    surface.scatter_batches(last, cube, target, data.transpose(0, 3, 1, 2), "y")  # a channel-last view
    assert np.array_equal(first.data, last.data)
    assert np.array_equal(surface.gather_channels_last(last, cube, target, "y"), data)


@pytest.mark.parametrize(("rows", "cols", "by_rows"), [(4097, 96, True), (130, 96, True), (64, 96, False),
                                                    (49, 512, False), (300, 512, True), (30, 40, False)])
def test_large_products_are_shared_between_threads_and_stay_exact(rows: int, cols: int, by_rows: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(rows)
    a = rng.integers(-128, 128, (rows, 1024)).astype(np.float32)
    b = rng.integers(-128, 128, (1024, cols)).astype(np.float32)
    monkeypatch.setattr(conv_gemm, "host_workers", lambda: 2)
    monkeypatch.setattr(conv_gemm, "PARALLEL_MACS", 1)
    submitted: list[tuple[int, int]] = []
    real = conv_gemm.host_pool

    class Spy:
        def __init__(self, workers: int) -> None:
            self.pool = real(workers)

        def submit(self, fn: object, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> object:
            submitted.append(out.shape)
            return self.pool.submit(fn, a, b, out)  # type: ignore[arg-type]

    monkeypatch.setattr(conv_gemm, "host_pool", Spy)
    out = np.full((rows, cols), np.nan, dtype=np.float32)
    conv_gemm._matmul(a, b, out)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(out.astype(np.int64), exact)
    parts = min(3, (rows if by_rows else cols) // 64) or 1
    assert len(submitted) == parts - 1  # the caller computes the first block
    if by_rows:
        assert all(c == cols for _, c in submitted) and sum(r for r, _ in submitted) == rows - rows // parts
    else:
        assert all(r == rows for r, _ in submitted) and sum(c for _, c in submitted) == cols - cols // parts
