"""The device's pooling and LUT kernels against their anchors, on the shapes the benchmark networks
give them.

- pool: PDP's window over a whole map (squeeze-excite's global average in MobileNet-v3-small at
  128x128, MobileNet-v2's head at 224x224) as pydla computes it (``pool2d``: two reductions over a
  channels-last copy), against the separable passes every other window takes (the same window on an
  input one column wider, stride 2 along it: one window, the general path) and onnxruntime's
  GlobalAveragePool (one thread, not spinning);
- lut: SDP's lookup-table interpolation (pydla.hw.sdp's choice: the indexed interpolation for tables
  of 64 entries or more, np.interp a block of channels at a time below) against np.interp in one
  call, on float32 maps of MobileNet-v3-small's activation sizes, with tables of 2 (the compiler's
  HardSigmoid), 17, 65 and 257 entries.

- maxpool: PDP's general max window (3x3 stride 2: ResNet-18's at 224x224, SqueezeNet 1.1's
  ceil-mode ones at 128x128, ShuffleNet-v2's at 128x128) as pool2d computes it (down the columns
  from the input itself, then along the lines of Ho rows) against the kernel before (``_old_max_pool``
  below: the zero-padded copy of a block of channels, along all its lines first, then down the
  columns); outputs checked equal;
- bdma: BDMA's copy of squeeze-excite's per-channel scale onto every pixel (MobileNet-v3-small at
  128x128: 4-byte lines, source line stride 0) in the widest items the copy allows (pydla.hw.blocks'
  _widest) against the byte copy before; the bytes checked equal;
- pointwise: the CONV block's 1x1 convolution with SDP's bias folded in, as the device plans it
  (``plan_conv2d`` with ``out`` and a per-channel addend: one BLAS product prepared once, accumulated
  onto the bias), against the plan it replaced (numpy's matmul into the output, then the bias added
  in a pass of its own), on MobileNet-v2's 1x1 shapes at 224x224 and 32x32, MobileNet-v3-small's at
  128x128 and the encoder's projections (hidden 256, sequence 128). Outputs agree within float32
  rounding of the sum (the bias is added first, not last).

Each side is timed in alternating blocks (one dropped run, then --block timed ones, a short sleep
between blocks); medians are printed with the ratio pydla / anchor. Outputs are checked equal bit for
bit (pool against the separable passes, lut against np.interp) before timing.

Run: python bench/bench_kernels.py [--kernel pool|lut|maxpool|bdma|pointwise|all] [--repeats 7] [--block 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pydla.hw.compute import pool2d
from pydla.hw.lut import LUT_INDEXED_MIN_ENTRIES, Interpolator, interp_blocks

POOL_SHAPES = [(16, 32, 32), (96, 8, 8), (240, 8, 8), (144, 8, 8), (288, 4, 4), (576, 4, 4), (1280, 7, 7)]
LUT_SIZES = [(16, 64, 64), (240, 8, 8), (576, 4, 4), (72, 32, 32)]
LUT_ENTRIES = [2, 17, 65, 257]
# (C, H = W, pad, ceil mode) of 3x3 stride-2 max pools: ResNet-18 224, SqueezeNet 1.1 128, ShuffleNet-v2 128.
MAXPOOL_SHAPES = [(64, 112, 1, False), (64, 63, 0, True), (128, 31, 0, True), (256, 15, 0, True),
                  (24, 64, 1, False)]
# (C, K, H = W) of 1x1 convolutions: MobileNet-v2 at 224 (expand and project), at 32, MobileNet-v3-small
# at 128, the encoder's 256 -> 256 and 256 -> 1024 projections over 128 positions (a 1x128 map).
POINTWISE_SHAPES = [(16, 96, 112), (24, 144, 56), (144, 24, 56), (32, 192, 28), (192, 32, 28),
                    (64, 384, 14), (384, 64, 14), (960, 160, 7), (320, 1280, 7), (16, 96, 16), (144, 24, 8),
                    (576, 96, 1), (16, 72, 32), (96, 576, 4), (256, 256, 0), (256, 1024, 0)]


def _time(fns: dict[str, Callable[[], object]], repeats: int, block: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            time.sleep(0.02)
            fn()
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _global_pool_session(shape: tuple[int, ...]) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]
    from onnx import TensorProto, helper

    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    graph = helper.make_graph([node], "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def bench_pool(repeats: int, block: int) -> None:
    rng = np.random.default_rng(0)
    print(f"{'whole-map average':20} {'pydla us':>9} {'passes us':>10} {'ort us':>8} {'/passes':>8} "
          f"{'/ort':>7}")
    for c, h, w in POOL_SHAPES:
        wide = rng.standard_normal((c, h, w + 1)).astype(np.float32)
        x = wide[:, :, :w].copy()
        out = np.empty((c, 1, 1), np.float32)
        general = np.empty((c, 1, 1), np.float32)
        sess = _global_pool_session((1, c, h, w))
        feeds = {"x": x[None]}
        def whole(x: np.ndarray = x, out: np.ndarray = out, h: int = h, w: int = w) -> object:
            return pool2d(x, kernel=(h, w), stride=(1, 1), method="avg", out=out)

        def passes(wide: np.ndarray = wide, out: np.ndarray = general, h: int = h, w: int = w) -> object:
            return pool2d(wide, kernel=(h, w), stride=(1, 2), method="avg", out=out)

        def theirs(sess: Any = sess, feeds: dict[str, np.ndarray] = feeds) -> object:
            return sess.run(None, feeds)

        fns: dict[str, Callable[[], object]] = {"pydla": whole, "passes": passes, "ort": theirs}
        for fn in fns.values():
            fn()
        np.testing.assert_array_equal(out.view(np.uint32), general.view(np.uint32))
        med = _time(fns, repeats, block)
        print(f"{f'{c}x{h}x{w}':20} {med['pydla'] * 1e6:9.1f} {med['passes'] * 1e6:10.1f} "
              f"{med['ort'] * 1e6:8.1f} {med['pydla'] / med['passes']:7.2f}x "
              f"{med['pydla'] / med['ort']:6.2f}x")


def bench_lut(repeats: int, block: int) -> None:
    rng = np.random.default_rng(1)
    print(f"{'lut (entries, map)':24} {'pydla us':>9} {'interp us':>10} {'ratio':>7}")
    for entries in LUT_ENTRIES:
        grid = np.linspace(-3.0, 3.0, entries)
        table = rng.standard_normal(entries).astype(np.float32)
        indexed = Interpolator(table, -3.0, 3.0)
        for shape in LUT_SIZES:
            x = (rng.standard_normal(shape) * 2).astype(np.float32)
            ours, theirs = x.copy(), x.copy()

            def run_interp(y: np.ndarray = theirs, x: np.ndarray = x, grid: np.ndarray = grid,
                           table: np.ndarray = table) -> None:
                np.copyto(y, x)
                y[...] = np.interp(y, grid, table.astype(np.float64))

            def run_pydla(y: np.ndarray = ours, x: np.ndarray = x, entries: int = entries,
                          grid: np.ndarray = grid, table: np.ndarray = table,
                          indexed: Interpolator = indexed) -> None:
                if entries >= LUT_INDEXED_MIN_ENTRIES:
                    np.copyto(y, x)
                    indexed(y)
                else:
                    interp_blocks(x, grid, table.astype(np.float64), y)

            run_pydla()
            run_interp()
            np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
            med = _time({"pydla": run_pydla, "interp": run_interp}, repeats, block)
            label = f"{entries}, {'x'.join(map(str, shape))}"
            print(f"{label:24} {med['pydla'] * 1e6:9.1f} {med['interp'] * 1e6:10.1f} "
                  f"{med['pydla'] / med['interp']:6.2f}x")


def _old_max_pool(x: np.ndarray, pad: int, ho: int, res: np.ndarray) -> None:
    """pool2d's max 3x3 stride 2 before: per block of channels, a padded copy, 3 strided taps along
    all its lines, then 3 down the columns."""
    from pydla.hw.arrays import padded

    c = x.shape[0]
    hn = wn = (ho - 1) * 2 + 3
    block = max(1, min(c, (256 << 10) // (hn * wn * 4)))
    line_buf = np.empty((block, hn, ho), dtype=np.float32)
    for c0 in range(0, c, block):
        cb = min(block, c - c0)
        src = padded(x[c0:c0 + cb], pad, pad, hn, wn, -np.inf)
        line = line_buf[:cb]
        for j in range(3):
            view = src[:, :hn, j:j + (ho - 1) * 2 + 1:2]
            if j == 0:
                np.copyto(line, view)
            else:
                np.maximum(line, view, out=line)
        rb = res[c0:c0 + cb]
        for i in range(3):
            view = line[:, i:i + (ho - 1) * 2 + 1:2]
            if i == 0:
                np.copyto(rb, view)
            else:
                np.maximum(rb, view, out=rb)


def bench_maxpool(repeats: int, block: int) -> None:
    rng = np.random.default_rng(3)
    print(f"{'max pool 3x3 s2':24} {'new us':>9} {'old us':>9} {'ratio':>7}")
    total = {"new": 0.0, "old": 0.0}
    for c, h, pad, ceil in MAXPOOL_SHAPES:
        x = rng.standard_normal((c, h, h)).astype(np.float32)
        ho = (-(-(h + 2 * pad - 3) // 2) if ceil else (h + 2 * pad - 3) // 2) + 1
        ours, theirs = np.empty((c, ho, ho), np.float32), np.empty((c, ho, ho), np.float32)

        def run_new(x: np.ndarray = x, pad: int = pad, ho: int = ho, out: np.ndarray = ours) -> None:
            pool2d(x, kernel=(3, 3), stride=(2, 2), pads=(pad,) * 4, method="max", out_size=(ho, ho), out=out)

        def run_old(x: np.ndarray = x, pad: int = pad, ho: int = ho, out: np.ndarray = theirs) -> None:
            _old_max_pool(x, pad, ho, out)

        run_new()
        run_old()
        np.testing.assert_array_equal(ours, theirs)
        med = _time({"new": run_new, "old": run_old}, repeats, block)
        total["new"] += med["new"]
        total["old"] += med["old"]
        label = f"{c}x{h}x{h} p{pad}{' ceil' if ceil else ''}"
        print(f"{label:24} {med['new'] * 1e6:9.1f} {med['old'] * 1e6:9.1f} {med['new'] / med['old']:6.2f}x")
    print(f"{'all shapes':24} {total['new'] * 1e6:9.1f} {total['old'] * 1e6:9.1f} "
          f"{total['new'] / total['old']:6.2f}x")


def bench_bdma(repeats: int, block: int) -> None:
    from numpy.lib.stride_tricks import as_strided

    from pydla.hw.blocks import _widest

    print(f"{'bdma (surfaces, lines, 4)':26} {'new us':>9} {'bytes us':>9} {'ratio':>7}")
    for c, pixels in ((16, 1024), (96, 64), (240, 64), (288, 16), (576, 16)):
        values = np.random.default_rng(c).integers(0, 256, c * 4, dtype=np.uint8)
        ours, theirs = np.zeros(c * pixels * 4, np.uint8), np.zeros(c * pixels * 4, np.uint8)
        src = as_strided(values, (c, pixels, 4), (4, 0, 1))
        dst_new = as_strided(ours, (c, pixels, 4), (pixels * 4, 4, 1))
        dst_old = as_strided(theirs, (c, pixels, 4), (pixels * 4, 4, 1))
        wide_src, wide_dst = _widest(src, dst_new)

        def run_new(d: np.ndarray = wide_dst, s: np.ndarray = wide_src) -> None:
            np.copyto(d, s)

        def run_old(d: np.ndarray = dst_old, s: np.ndarray = src) -> None:
            np.copyto(d, s)

        run_new()
        run_old()
        np.testing.assert_array_equal(ours, theirs)
        med = _time({"new": run_new, "old": run_old}, repeats, block)
        print(f"{f'{c}, {pixels}, 4':26} {med['new'] * 1e6:9.1f} {med['old'] * 1e6:9.1f} "
              f"{med['new'] / med['old']:6.2f}x")


def bench_pointwise(repeats: int, block: int) -> None:
    from pydla.hw.conv import plan_conv2d

    rng = np.random.default_rng(2)
    print(f"{'1x1 (C -> K, map)':24} {'new us':>9} {'old us':>9} {'ratio':>7}  max |new - old| / max |old|")
    total = {"new": 0.0, "old": 0.0}
    for c, k, side in POINTWISE_SHAPES:
        h, w = (1, 128) if side == 0 else (side, side)
        x = rng.standard_normal((c, h, w)).astype(np.float32)
        wt = (rng.standard_normal((k, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        bias = rng.standard_normal((k, 1, 1)).astype(np.float32)
        ours, theirs = np.empty((k, h, w), np.float32), np.empty((k, h, w), np.float32)
        run_new = plan_conv2d(x, wt, out=ours, addends=[bias])
        xm, om, wm = x.reshape(c, h * w), theirs.reshape(k, h * w), wt[:, :, 0, 0]
        added = np.broadcast_to(bias, (k, h, w))

        def run_old(xm: np.ndarray = xm, om: np.ndarray = om, wm: np.ndarray = wm, res: np.ndarray = theirs,
                    added: np.ndarray = added) -> None:
            np.matmul(wm, xm, out=om)  # the plan before: numpy's product, then a pass for the bias
            np.add(res, added, out=res)

        run_new()
        run_old()
        err = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        assert err < 1e-5, err
        med = _time({"new": run_new, "old": run_old}, repeats, block)
        total["new"] += med["new"]
        total["old"] += med["old"]
        label = f"{c} -> {k}, {h}x{w}"
        print(f"{label:24} {med['new'] * 1e6:9.1f} {med['old'] * 1e6:9.1f} "
              f"{med['new'] / med['old']:6.2f}x  {err:.1e}")
    print(f"{'all shapes':24} {total['new'] * 1e6:9.1f} {total['old'] * 1e6:9.1f} "
          f"{total['new'] / total['old']:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", choices=("pool", "lut", "maxpool", "bdma", "pointwise", "all"),
                        default="all")
    parser.add_argument("--repeats", type=int, default=7, help="alternating blocks per side")
    parser.add_argument("--block", type=int, default=20, help="timed runs per block")
    args = parser.parse_args()
    if args.kernel in ("pool", "all"):
        bench_pool(args.repeats, args.block)
    if args.kernel in ("lut", "all"):
        bench_lut(args.repeats, args.block)
    if args.kernel in ("maxpool", "all"):
        bench_maxpool(args.repeats, args.block)
    if args.kernel in ("bdma", "all"):
        bench_bdma(args.repeats, args.block)
    if args.kernel in ("pointwise", "all"):
        bench_pointwise(args.repeats, args.block)


if __name__ == "__main__":
    main()
