"""Compile time of a ResNet-50-shaped ONNX model, and load time and resident memory of a loadable
with about 100 MB of weights.

The model is generated here with onnx.helper (random weights, batch norm after every convolution as
exported models have it; no download). Goals: compile <= 2 s; load <= 20 ms with the weights not
copied (resident memory grows by far less than the weights' size). Medians of several runs.

Run: python bench/bench_compile.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pydla.compiler.api import compile_model
from pydla.loadable.container import Loadable


def resnet50(rng: np.random.Generator, width: int = 1) -> object:
    nodes, inits = [], []
    count = [0]

    def conv(x: str, c_in: int, c_out: int, k: int, s: int, relu: bool, residual: str | None = None) -> str:
        i = count[0]
        count[0] += 1
        w = (rng.standard_normal((c_out, c_in, k, k)) * np.sqrt(2 / (c_in * k * k))).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        for name, value in (("g", np.ones(c_out)), ("b", np.zeros(c_out)), ("m", np.zeros(c_out)),
                            ("v", np.ones(c_out))):
            inits.append(numpy_helper.from_array(value.astype(np.float32), f"{name}{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], strides=[s, s], pads=[k // 2] * 4))
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}", f"g{i}", f"b{i}", f"m{i}", f"v{i}"],
                                      [f"n{i}"]))
        out = f"n{i}"
        if residual is not None:
            nodes.append(helper.make_node("Add", [out, residual], [f"a{i}"]))
            out = f"a{i}"
        if relu:
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"]))
            out = f"r{i}"
        return out

    x = conv("input", 3, 64, 7, 2, True)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    x, c = "pool", 64
    for stage, (mid, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            s = 2 if stage > 0 and b == 0 else 1
            skip = conv(x, c, mid * 4, 1, s, False) if b == 0 else x
            h = conv(x, c, mid, 1, 1, True)
            h = conv(h, mid, mid, 3, s, True)
            x = conv(h, mid, mid * 4, 1, 1, True, residual=skip)
            c = mid * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    fc = (rng.standard_normal((1000, c)) * 0.01).astype(np.float32)
    inits += [numpy_helper.from_array(fc, "fc"), numpy_helper.from_array(np.zeros(1000, np.float32), "fcb")]
    nodes.append(helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "resnet50",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    model = resnet50(rng)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        result = compile_model(model)
        times.append(time.perf_counter() - t0)
    ops = sum(result.operations.values())
    print(f"ResNet-50 compile: {statistics.median(times) * 1e3:7.0f} ms median ({ops} device operations, "
          f"{result.weights_bytes / 1e6:.1f} MB weights; goal <= 2000 ms)")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet50.dla"
        path.write_bytes(result.blob)
        del result
        size_mb = path.stat().st_size / 1e6
        loads, grown = [], []
        for _ in range(max(5, args.repeats)):
            os.sync()
            before = rss_kb()
            t0 = time.perf_counter()
            lo = Loadable.open(path)
            loads.append(time.perf_counter() - t0)
            grown.append(rss_kb() - before)
            weights = lo.weights("weights")
            assert type(weights.obj).__name__ == "mmap"
            del lo, weights
        print(f"load of a {size_mb:.0f} MB loadable: {statistics.median(loads) * 1e3:6.2f} ms median "
              f"(goal <= 20 ms); resident memory grew {statistics.median(grown) / 1024:.1f} MB "
              f"(weights are {size_mb:.0f} MB: mapped, not copied)")


if __name__ == "__main__":
    main()
