"""conv2d (the CONV block's kernel) against onnxruntime running one Conv node, on ResNet-18's shapes.

Both sides get the same float32 input and weights and no bias. onnxruntime runs with
``intra_op_num_threads`` set to --threads (default 2) and its idle workers not spinning (the two
runtimes share the process and the cores; spinning workers would slow numpy's BLAS threads, and
barely change onnxruntime's own times); numpy's BLAS uses the threads it has (set
OPENBLAS_NUM_THREADS to pin it). pydla writes into a preallocated output, as the device does. The two
are timed in alternating blocks, each after a short sleep and one dropped run, so neither side pays
for the other's threads or caches; the medians and their ratio are printed per shape, and the ratio
of the summed medians over all shapes last.

Run: python bench/bench_conv.py [--repeats 7] [--block 5] [--threads 2] [--check]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

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


def _session(w: np.ndarray, stride: int, pad: int, threads: int, shape: list[int]) -> object:
    """A session running one Conv node with weights w (the anchor); onnx imported only here."""
    import onnxruntime as ort  # type: ignore[import-untyped]
    from onnx import TensorProto, helper, numpy_helper

    k = w.shape[2]
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[stride, stride],
                            pads=[pad] * 4)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "w")])
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
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
