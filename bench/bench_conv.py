"""conv2d (the CONV block's kernel) against onnxruntime running one Conv node, on ResNet-18's shapes
(or, with --depthwise, on depthwise shapes).

Both sides get the same float32 input and weights and no bias. onnxruntime runs with
``intra_op_num_threads`` set to --threads (default 2) and its idle workers not spinning (the two
runtimes share the process and the cores; spinning workers would slow numpy's BLAS threads, and
barely change onnxruntime's own times); numpy's BLAS uses the threads it has (set
OPENBLAS_NUM_THREADS to pin it). pydla writes into a preallocated output, as the device does. The two
are timed in alternating blocks, each after a short sleep and one dropped run, so neither side pays
for the other's threads or caches; the medians and their ratio are printed per shape, and the ratio
of the summed medians over all shapes last.

--depthwise: MobileNet-v2's depthwise convolutions at 224x224 (3x3, stride 1 and 2, pads 1; each
shape with the number of layers that have it), MobileNet-v3-large's 5x5 ones and MobileNet-v3-small's
at 128x128, timed four ways in alternating blocks: conv2d as it is ("new"), conv2d with its
column-matrix kernel on every map ("column": the channels-last kernel for maps of at most 64 output
pixels, pydla.hw.depthwise_last, turned off), conv2d with the depthwise kernel it had before
(``_old_depthwise`` below, kept here as the anchor: per block of channels, the taps' im2col of the
zero-padded input in the wide layout, then a batched matmul and a crop), and onnxruntime's Conv with
group = C. Per shape: the medians and their ratios; then the sums over MobileNet-v2's depthwise layers
(each shape's median times its layer count) and over all shapes. --bias adds a per-channel bias on all
three sides (what the device's convolutions get from SDP).

--shift: the tap-major (RSKC) convolutions the compiler gives ResNet-18 at 224x224 and SqueezeNet
1.1 at 128x128 (one group, at least 16 input channels, lines wide enough), with a per-channel bias
as SDP folds it: the device's plan made at decode (pydla.hw.conv_shift.plan_shift_gemm: own padded
input and accumulator, prepared BLAS calls) against conv2d_shift_gemm made on each call (what the
device ran before), checked equal bit for bit.

Run: python bench/bench_conv.py [--depthwise [--bias] | --shift] [--repeats 7] [--block 5] [--threads 2]
     [--check]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from pydla.hw import conv, conv_depthwise, conv_gemm
from pydla.hw.arrays import ITEM, F32Array, FloatArray, scratch
from pydla.hw.compute import conv2d

# (name, C, H, W, K, kernel, stride, pad): every distinct conv of ResNet-18 at 224x224.
SHAPES = [
    ("stem 3x224x224 7x7 s2 p3 -> 64", 3, 224, 224, 64, 7, 2, 3),
    ("64x56x56 3x3 s1 p1 -> 64", 64, 56, 56, 64, 3, 1, 1),
    ("64x56x56 3x3 s2 p1 -> 128", 64, 56, 56, 128, 3, 2, 1),
    ("64x56x56 1x1 s2 -> 128", 64, 56, 56, 128, 1, 2, 0),
    ("128x28x28 3x3 s1 p1 -> 128", 128, 28, 28, 128, 3, 1, 1),
    ("128x28x28 3x3 s2 p1 -> 256", 128, 28, 28, 256, 3, 2, 1),
    ("256x14x14 3x3 s1 p1 -> 256", 256, 14, 14, 256, 3, 1, 1),
    ("256x14x14 3x3 s2 p1 -> 512", 256, 14, 14, 512, 3, 2, 1),
    ("512x7x7 3x3 s1 p1 -> 512", 512, 7, 7, 512, 3, 1, 1),
]

# (name, C, H = W, kernel, stride, pad, layers): MobileNet-v2's depthwise convolutions at 224x224 with
# the number of its layers of each shape, then MobileNet-v3-large's 5x5 ones (not counted in the total).
DEPTHWISE_SHAPES = [
    ("v2 32x112x112 3x3 s1", 32, 112, 3, 1, 1, 1),
    ("v2 96x112x112 3x3 s2", 96, 112, 3, 2, 1, 1),
    ("v2 144x56x56 3x3 s1", 144, 56, 3, 1, 1, 1),
    ("v2 144x56x56 3x3 s2", 144, 56, 3, 2, 1, 1),
    ("v2 192x28x28 3x3 s1", 192, 28, 3, 1, 1, 2),
    ("v2 192x28x28 3x3 s2", 192, 28, 3, 2, 1, 1),
    ("v2 384x14x14 3x3 s1", 384, 14, 3, 1, 1, 4),
    ("v2 576x14x14 3x3 s1", 576, 14, 3, 1, 1, 2),
    ("v2 576x14x14 3x3 s2", 576, 14, 3, 2, 1, 1),
    ("v2 960x7x7 3x3 s1", 960, 7, 3, 1, 1, 3),
    ("v3 72x56x56 5x5 s2", 72, 56, 5, 2, 2, 0),
    ("v3 120x28x28 5x5 s1", 120, 28, 5, 1, 2, 0),
    ("v3 672x14x14 5x5 s2", 672, 14, 5, 2, 2, 0),
    ("v3 960x7x7 5x5 s1", 960, 7, 5, 1, 2, 0),
    # MobileNet-v3-small's at 128x128 (small maps: the channels-last kernel's).
    ("v3s 88x16x16 3x3 s1", 88, 16, 3, 1, 1, 0),
    ("v3s 96x16x16 5x5 s2", 96, 16, 5, 2, 2, 0),
    ("v3s 240x8x8 5x5 s1", 240, 8, 5, 1, 2, 0),
    ("v3s 120x8x8 5x5 s1", 120, 8, 5, 1, 2, 0),
    ("v3s 288x8x8 5x5 s2", 288, 8, 5, 2, 2, 0),
    ("v3s 576x4x4 5x5 s1", 576, 4, 5, 1, 2, 0),
]

_OLD_DEPTHWISE_BLOCK_BYTES = 4 << 20


def _old_depthwise(x: FloatArray, w32: F32Array, stride: tuple[int, int], pads: tuple[int, int],
                   dilation: tuple[int, int], res: F32Array, adds: Sequence[FloatArray] = ()) -> None:
    """conv.py's depthwise kernel before the flattened-plane one (the benchmark's anchor), verbatim
    but for its workspace keys: per block of channels, the stride phases of the zero-padded input, a
    column matrix of the kh*kw taps (each one contiguous run of a phase plane, Wo + (kw-1)*dw // sw
    columns per line), one batched matmul, and a crop of the extra columns into res."""
    c = x.shape[0]
    k, _, kh, kw = w32.shape
    m = k // c
    sh, sw = stride
    dh, dw = dilation
    ho, wo = res.shape[1:]
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    n = ho * wq
    count = kh * kw
    biases = [b for b in (conv_depthwise.per_channel(a) for a in adds) if b is not None]
    rest = [a for a in adds if conv_depthwise.per_channel(a) is None]
    rows = count + 1 if biases else count
    taps = scratch("old-dw-taps", (c, m, rows))
    taps[:, :, :count] = w32.reshape(c, m, count)
    if biases:
        np.sum(biases, axis=0, out=taps[:, :, count].reshape(k), dtype=np.float32)
    block = max(1, min(c, _OLD_DEPTHWISE_BLOCK_BYTES // ((rows + m) * n * ITEM)))
    cols_buf = scratch("old-dw-cols", (block, rows, n))
    if biases:
        cols_buf[:, count] = 1.0
    prod_buf = scratch("old-dw-prod", (block, m, n))
    for c0 in range(0, c, block):
        cb = min(block, c - c0)
        planes = conv_gemm.phase_planes(x[c0:c0 + cb], pads[0], pads[1], stride, (kh, kw), dilation,
                                        hq + 1, wq)
        cols = cols_buf[:cb]
        for i in range(kh):
            qi, a = divmod(i * dh, sh)
            for j in range(kw):
                qj, b = divmod(j * dw, sw)
                start = qi * wq + qj
                np.copyto(cols[:, i * kw + j], planes[a * sw + b, :, start:start + n])
        prod = prod_buf[:cb]
        np.matmul(taps[c0:c0 + cb], cols, out=prod)
        lo, hi = c0 * m, (c0 + cb) * m
        conv_gemm.store(res[lo:hi], prod.reshape(cb * m, ho, wq)[:, :, :wo], [a[lo:hi] for a in rest])


def _session(w: np.ndarray, stride: int, pad: int, threads: int, shape: list[int], group: int = 1,
             bias: np.ndarray | None = None) -> object:
    """A session running one Conv node with weights w (and bias) (the anchor); onnx imported only here."""
    import onnxruntime as ort  # type: ignore[import-untyped]
    from onnx import TensorProto, helper, numpy_helper

    k = w.shape[2]
    inits = [numpy_helper.from_array(w, "w")]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias is not None else []), ["y"],
                            kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _time_blocks(fns: dict[str, Callable[[], object]], repeats: int, block: int,
                 settle: float) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            # Both thread pools spin-wait for a while after a call; let the other side's go idle.
            time.sleep(settle)
            fn()  # dropped: warms caches
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="alternating blocks per side")
    parser.add_argument("--block", type=int, default=5, help="timed runs per block")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    parser.add_argument("--settle", type=float, default=0.2,
                        help="seconds of sleep before each block, for the other side's threads to idle")
    parser.add_argument("--check", action="store_true", help="also check the results agree")
    parser.add_argument("--depthwise", action="store_true",
                        help="depthwise shapes (MobileNet-v2, v3): new kernel, old kernel and onnxruntime")
    parser.add_argument("--only", default="",
                        help="with --depthwise: only the shapes whose name holds one of these "
                        "comma-separated parts (e.g. v3s,7x7)")
    parser.add_argument("--bias", action="store_true", help="with --depthwise: add a per-channel bias")
    parser.add_argument("--shift", action="store_true",
                        help="tap-major shapes: the planned shift-GEMM against the per-call one")
    args = parser.parse_args()
    if args.depthwise:
        _bench_depthwise(args)
        return
    if args.shift:
        _bench_shift(args)
        return

    rng = np.random.default_rng(0)
    total = {"pydla": 0.0, "onnxruntime": 0.0}
    print(f"{'shape':34} {'pydla ms':>9} {'ort ms':>9} {'ratio':>7}")
    for name, c, h, w_, k, kernel, stride, pad in SHAPES:
        x = rng.standard_normal((1, c, h, w_), dtype=np.float32)
        w = rng.standard_normal((k, c, kernel, kernel), dtype=np.float32)
        sess = _session(w, stride, pad, args.threads, [1, c, h, w_])
        ho = (h + 2 * pad - kernel) // stride + 1
        out = np.empty((k, ho, ho), dtype=np.float32)
        feeds = {"x": x}

        def run_pydla(x: np.ndarray = x, w: np.ndarray = w, stride: int = stride, pad: int = pad,
                      out: np.ndarray = out) -> object:
            return conv2d(x[0], w, stride=(stride, stride), pads=(pad,) * 4, out=out)

        def run_ort(sess: object = sess, feeds: dict[str, np.ndarray] = feeds) -> object:
            return sess.run(None, feeds)  # type: ignore[attr-defined]

        if args.check:
            ref = run_ort()[0][0]  # type: ignore[index]
            run_pydla()
            np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
        medians = _time_blocks({"pydla": run_pydla, "onnxruntime": run_ort}, args.repeats, args.block,
                               args.settle)
        for side in total:
            total[side] += medians[side]
        ratio = medians["pydla"] / medians["onnxruntime"]
        print(f"{name:34} {medians['pydla'] * 1e3:9.3f} {medians['onnxruntime'] * 1e3:9.3f} {ratio:6.2f}x")
    print(f"{'all shapes (sum of medians)':34} {total['pydla'] * 1e3:9.3f} {total['onnxruntime'] * 1e3:9.3f} "
          f"{total['pydla'] / total['onnxruntime']:6.2f}x")


# (name, C, H = W, K, stride): the tap-major 3x3 convolutions (pads 1) of ResNet-18 at 224 and
# SqueezeNet 1.1 at 128 (its fire modules' expand 3x3: squeeze channels in, pads 1).
SHIFT_SHAPES = [
    ("r18 64x56x56 -> 64", 64, 56, 64, 1),
    ("r18 64x56x56 s2 -> 128", 64, 56, 128, 2),
    ("r18 128x28x28 -> 128", 128, 28, 128, 1),
    ("r18 128x28x28 s2 -> 256", 128, 28, 256, 2),
    ("r18 256x14x14 -> 256", 256, 14, 256, 1),
    ("r18 256x14x14 s2 -> 512", 256, 14, 512, 2),
    ("sq 16x31x31 -> 64", 16, 31, 64, 1),
    ("sq 32x15x15 -> 128", 32, 15, 128, 1),
]


def _bench_shift(args: argparse.Namespace) -> None:
    from pydla.hw.conv_shift import plan_shift_gemm

    rng = np.random.default_rng(5)
    total = {"planned": 0.0, "per call": 0.0}
    print(f"{'tap-major 3x3, pads 1, bias':34} {'planned ms':>10} {'per call ms':>11} {'ratio':>7}")
    for name, c, h, k, stride in SHIFT_SHAPES:
        x = rng.standard_normal((c, h, h)).astype(np.float32)
        w = np.ascontiguousarray(rng.standard_normal((k, c, 3, 3)).astype(np.float32).transpose(2, 3, 0, 1))
        wt = w.transpose(2, 3, 0, 1)  # (K, C, 3, 3) over tap-major memory
        bias = rng.standard_normal((k, 1, 1)).astype(np.float32)
        ho = (h + 2 - 3) // stride + 1
        planned = plan_shift_gemm(x, wt, (stride, stride), (1, 1, 1, 1), (1, 1), (ho, ho), [bias])
        assert planned is not None

        def per_call(x: np.ndarray = x, wt: np.ndarray = wt, stride: int = stride,
                     bias: np.ndarray = bias) -> object:
            return conv.conv2d_shift_gemm(x, wt, stride=(stride, stride), pads=(1, 1, 1, 1), addends=[bias])

        np.testing.assert_array_equal(planned(), per_call())  # type: ignore[arg-type]
        medians = _time_blocks({"planned": planned, "per call": per_call}, args.repeats, args.block, 0.02)
        for side in total:
            total[side] += medians[side]
        print(f"{name:34} {medians['planned'] * 1e3:10.3f} {medians['per call'] * 1e3:11.3f} "
              f"{medians['planned'] / medians['per call']:6.2f}x")
    print(f"{'all shapes':34} {total['planned'] * 1e3:10.3f} {total['per call'] * 1e3:11.3f} "
          f"{total['planned'] / total['per call']:6.2f}x")


def _bench_depthwise(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    sides = ("new", "column", "old", "onnxruntime")
    v2 = dict.fromkeys(sides, 0.0)
    every = dict.fromkeys(sides, 0.0)
    print(f"{'shape':22} {'layers':>6} {'new ms':>8} {'col ms':>8} {'old ms':>8} {'ort ms':>8} "
          f"{'new/col':>8} {'new/old':>8} {'new/ort':>8} {'old/ort':>8}")
    for name, c, h, kernel, stride, pad, layers in DEPTHWISE_SHAPES:
        if args.only and not any(part in name for part in args.only.split(",")):
            continue
        x = rng.standard_normal((1, c, h, h), dtype=np.float32)
        w = rng.standard_normal((c, 1, kernel, kernel), dtype=np.float32)
        bias = rng.standard_normal(c, dtype=np.float32) if args.bias else None
        adds = [bias.reshape(c, 1, 1)] if bias is not None else []
        sess = _session(w, stride, pad, args.threads, [1, c, h, h], group=c, bias=bias)
        ho = (h + 2 * pad - kernel) // stride + 1
        out_new = np.empty((c, ho, ho), dtype=np.float32)
        out_old = np.empty((c, ho, ho), dtype=np.float32)
        out_col = np.empty((c, ho, ho), dtype=np.float32)
        feeds = {"x": x}

        def run(out: np.ndarray, impl: Callable[..., None] | None = None, x: np.ndarray = x,
                w: np.ndarray = w, stride: int = stride, pad: int = pad,
                adds: list[np.ndarray] = adds, small: int = conv_depthwise.CHANNELS_LAST_PIXELS) -> None:
            saved, saved_small = conv.depthwise, conv_depthwise.CHANNELS_LAST_PIXELS
            if impl is not None:
                conv.depthwise = impl
            conv_depthwise.CHANNELS_LAST_PIXELS = small
            try:
                conv2d(x[0], w, stride=(stride, stride), pads=(pad,) * 4, groups=x.shape[1], out=out,
                       addends=adds)
            finally:
                conv.depthwise, conv_depthwise.CHANNELS_LAST_PIXELS = saved, saved_small

        def run_ort(sess: object = sess, feeds: dict[str, np.ndarray] = feeds) -> object:
            return sess.run(None, feeds)  # type: ignore[attr-defined]

        fns: dict[str, Callable[[], object]] = {
            "new": lambda out=out_new: run(out),
            "column": lambda out=out_col: run(out, small=0),
            "old": lambda out=out_old: run(out, _old_depthwise),
            "onnxruntime": run_ort,
        }
        if args.check:
            ref = run_ort()[0][0]  # type: ignore[index]
            fns["new"]()
            fns["old"]()
            fns["column"]()
            np.testing.assert_allclose(out_new, out_old, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out_new, out_col, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out_new, ref, rtol=1e-4, atol=1e-4)
        med = _time_blocks(fns, args.repeats, args.block, args.settle)
        for side in sides:
            v2[side] += med[side] * layers
            every[side] += med[side]
        print(f"{name:22} {layers:6d} {med['new'] * 1e3:8.3f} {med['column'] * 1e3:8.3f} "
              f"{med['old'] * 1e3:8.3f} {med['onnxruntime'] * 1e3:8.3f} {med['new'] / med['column']:7.2f}x "
              f"{med['new'] / med['old']:7.2f}x "
              f"{med['new'] / med['onnxruntime']:7.2f}x {med['old'] / med['onnxruntime']:7.2f}x")
    for label, tot in (("MobileNet-v2 layers", v2), ("all shapes, once each", every)):
        print(f"{label:22} {'':6} {tot['new'] * 1e3:8.3f} {tot['column'] * 1e3:8.3f} {tot['old'] * 1e3:8.3f} "
              f"{tot['onnxruntime'] * 1e3:8.3f} {tot['new'] / tot['column']:7.2f}x "
              f"{tot['new'] / tot['old']:7.2f}x "
              f"{tot['new'] / tot['onnxruntime']:7.2f}x {tot['old'] / tot['onnxruntime']:7.2f}x")


if __name__ == "__main__":
    main()
