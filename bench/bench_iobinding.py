"""IOBinding against Session.run, in one run: what binding the inputs and outputs in device memory once
saves per run (Session.run copies each input in and each output out; run_with_iobinding copies
nothing), on models whose time is in moving their tensors.

Models (fp32, built here with onnx.helper): ``relu`` (y = relu(x), 1x64x224x224: 12.8 MB in, 12.8 MB
out, almost no compute), ``conv1x1`` (a 1x1 convolution 64 -> 64 channels on 112x112), and the demo
CNN (1x3x32x32 in, 1x10 out: copies are nothing there). For each, blocks of the two ways alternate
(each block: one untimed run, then --block timed ones); medians over all timed runs are quoted, and
the ratio run_with_iobinding / run (below 1: the binding is faster). onnxruntime's own ratio on the
CPU provider is printed beside it, for reference (its CPU provider copies nothing either way). The
outputs of the two ways are checked to be equal.

Run: python bench/bench_iobinding.py [--repeats 7] [--block 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def relu_model() -> tuple[Any, dict[str, np.ndarray]]:
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "relu",
                         [h.make_tensor_value_info("x", 1, [1, 64, 224, 224])],
                         [h.make_tensor_value_info("y", 1, [1, 64, 224, 224])])
    x = np.random.default_rng(0).standard_normal((1, 64, 224, 224)).astype(np.float32)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), {"x": x}


def conv_model() -> tuple[Any, dict[str, np.ndarray]]:
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(1)
    w = nh.from_array(rng.standard_normal((64, 64, 1, 1)).astype(np.float32) * 0.1, "w")
    graph = h.make_graph([h.make_node("Conv", ["x", "w"], ["y"])], "conv1x1",
                         [h.make_tensor_value_info("x", 1, [1, 64, 112, 112])],
                         [h.make_tensor_value_info("y", 1, [1, 64, 112, 112])], [w])
    x = rng.standard_normal((1, 64, 112, 112)).astype(np.float32)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), {"x": x}


def demo_model() -> tuple[Any, dict[str, np.ndarray]]:
    from pydla.demo import build_demo_model

    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return build_demo_model(), {"input": x}


def timed(ways: dict[str, Callable[[], None]], repeats: int, block: int) -> dict[str, float]:
    """Median seconds of each way, blocks of them alternating."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, run in ways.items():
            run()
            for _ in range(block):
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
            time.sleep(0.05)
    return {name: statistics.median(t) for name, t in times.items()}


def bench(name: str, model: Any, feeds: dict[str, np.ndarray], repeats: int, block: int) -> None:
    import onnxruntime as ort  # type: ignore[import-untyped]

    import pydla

    blob = model.SerializeToString()
    with pydla.InferenceSession(blob) as sess:
        binding = sess.io_binding()
        values = {}
        for n, a in feeds.items():
            values[n] = sess.create_ortvalue_from_shape_and_type(a.shape, a.dtype, "pydla")
            values[n].update_inplace(a)
            binding.bind_ortvalue_input(n, values[n])
        for t in sess.get_outputs():
            binding.bind_output(t.name)
        sess.run_with_iobinding(binding)
        copied = sess.run(None, feeds)
        for got, want in zip(binding.copy_outputs_to_cpu(), copied, strict=True):
            if not np.array_equal(got, want):
                print(f"{name}: the outputs of run_with_iobinding and run differ", file=sys.stderr)
                sys.exit(1)
        ours = timed({"run": lambda: sess.run(None, feeds),
                      "iobinding": lambda: sess.run_with_iobinding(binding)}, repeats, block)
    ref = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    ort_binding = ref.io_binding()
    for n, a in feeds.items():
        ort_binding.bind_cpu_input(n, a)
    for t in ref.get_outputs():
        ort_binding.bind_output(t.name)
    theirs = timed({"run": lambda: ref.run(None, feeds),
                    "iobinding": lambda: ref.run_with_iobinding(ort_binding)}, repeats, block)
    moved = sum(a.nbytes for a in feeds.values()) + sum(a.nbytes for a in copied)
    print(f"{name:<9} {moved / 1e6:7.1f} MB moved per run: pydla run {ours['run'] * 1e3:8.2f} ms, "
          f"run_with_iobinding {ours['iobinding'] * 1e3:8.2f} ms, "
          f"ratio {ours['iobinding'] / ours['run']:.2f}x "
          f"(onnxruntime {theirs['run'] * 1e3:.2f} / {theirs['iobinding'] * 1e3:.2f} ms, ratio "
          f"{theirs['iobinding'] / theirs['run']:.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--block", type=int, default=5)
    args = parser.parse_args()
    for name, make in (("relu", relu_model), ("conv1x1", conv_model), ("demo", demo_model)):
        model, feeds = make()
        bench(name, model, feeds, args.repeats, args.block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
