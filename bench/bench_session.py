"""ResNet-18 and a MobileNet-v2-shaped network through ``pydla.Session.run`` against onnxruntime, in
one run.

Both networks are built here with ``onnx.helper`` (224x224, fp32, batch 1, random weights, batch
norm after every convolution as exported from a framework), compiled by pydla's compiler, and run
through the whole stack (Session -> IRuntime -> runner -> in-process port -> KMD -> virtual device,
deterministic mode). onnxruntime runs the same model with as many intra-op threads as the machine
has cores (OpenBLAS, which the device's convolutions use, does the same). Runs of the two alternate;
medians are quoted; the ratio is pydla / onnxruntime (goal: <= 1.5x). The outputs are compared.

With ``--size 32`` the same networks take a 32x32 input: 1/49th of the arithmetic, so what remains
is mostly the cost of each device operation (the goal is judged at 224).

Run: python bench/bench_session.py [--model resnet18|mobilenetv2|all] [--repeats 7] [--size 224]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

GOAL = 1.5


class Builder:
    """Nodes and initializers of a convolutional network, NCHW, with random (He-scaled) weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.n = 0

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def const(self, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name("w")
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv_bn(self, x: str, c: int, k: int, kernel: int, stride: int = 1, groups: int = 1,
                act: str | None = "relu") -> str:
        from onnx import helper

        fan_in = c // groups * kernel * kernel
        w = self.rng.standard_normal((k, c // groups, kernel, kernel)) * np.sqrt(2.0 / fan_in)
        conv = self._name("conv")
        self.nodes.append(helper.make_node("Conv", [x, self.const(w)], [conv], kernel_shape=[kernel, kernel],
                                           strides=[stride, stride], pads=[kernel // 2] * 4, group=groups))
        bn = self._name("bn")
        scale = 1 + 0.1 * self.rng.standard_normal(k)
        bias = 0.1 * self.rng.standard_normal(k)
        mean = 0.1 * self.rng.standard_normal(k)
        var = 1 + 0.1 * np.abs(self.rng.standard_normal(k))
        params = [self.const(p) for p in (scale, bias, mean, var)]
        self.nodes.append(helper.make_node("BatchNormalization", [conv, *params], [bn], epsilon=1e-5))
        if act is None:
            return bn
        out = self._name(act)
        if act == "relu":
            self.nodes.append(helper.make_node("Relu", [bn], [out]))
        else:  # relu6
            bounds = [self.const(np.array(0.0)), self.const(np.array(6.0))]
            self.nodes.append(helper.make_node("Clip", [bn, *bounds], [out]))
        return out

    def add(self, a: str, b: str, relu: bool) -> str:
        from onnx import helper

        out = self._name("add")
        self.nodes.append(helper.make_node("Add", [a, b], [out]))
        if not relu:
            return out
        r = self._name("relu")
        self.nodes.append(helper.make_node("Relu", [out], [r]))
        return r

    def head(self, x: str, c: int, classes: int = 1000) -> str:
        from onnx import helper

        gap, flat, out = self._name("gap"), self._name("flat"), "logits"
        self.nodes += [helper.make_node("GlobalAveragePool", [x], [gap]),
                       helper.make_node("Flatten", [gap], [flat])]
        w = self.rng.standard_normal((classes, c)) * np.sqrt(1.0 / c)
        operands = [flat, self.const(w), self.const(np.zeros(classes))]
        self.nodes.append(helper.make_node("Gemm", operands, [out], transB=1))
        return out

    def model(self, name: str, size: int) -> Any:
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])
        y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])
        graph = helper.make_graph(self.nodes, name, [x], [y], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        return m


def resnet18(size: int = 224) -> Any:
    from onnx import helper

    b = Builder(0)
    x = b.conv_bn("input", 3, 64, 7, 2)
    pool = b._name("pool")
    b.nodes.append(helper.make_node("MaxPool", [x], [pool], kernel_shape=[3, 3], strides=[2, 2],
                                    pads=[1] * 4))
    x, c = pool, 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage and not block else 1
            skip = b.conv_bn(x, c, width, 1, stride, act=None) if stride != 1 or c != width else x
            h = b.conv_bn(x, c, width, 3, stride)
            h = b.conv_bn(h, width, width, 3, act=None)
            x, c = b.add(h, skip, relu=True), width
    b.head(x, c)
    return b.model("resnet18", size)


def mobilenetv2(size: int = 224) -> Any:
    b = Builder(1)
    x = b.conv_bn("input", 3, 32, 3, 2, act="relu6")
    c = 32
    # (expansion t, output channels, repeats n, first stride s), as in the paper's Table 2.
    for t, out, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                         (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            h = b.conv_bn(x, c, c * t, 1, act="relu6") if t != 1 else x
            h = b.conv_bn(h, c * t, c * t, 3, stride, groups=c * t, act="relu6")
            h = b.conv_bn(h, c * t, out, 1, act=None)
            x = b.add(h, x, relu=False) if stride == 1 and c == out else h
            c = out
    x = b.conv_bn(x, c, 1280, 1, act="relu6")
    b.head(x, 1280)
    return b.model("mobilenetv2", size)


def measure(name: str, model: Any, repeats: int) -> float:
    import onnxruntime as ort  # type: ignore[import-untyped]

    import pydla

    threads = os.cpu_count() or 1
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    t0 = time.perf_counter()
    sess = pydla.Session(model)
    setup_ms = (time.perf_counter() - t0) * 1e3
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ours = sess.run({"input": x})["logits"]
    theirs = ref.run(None, {"input": x})[0]
    err = float(np.abs(ours - theirs).max() / (np.abs(theirs).max() + 1e-12))
    times: dict[str, list[float]] = {"pydla": [], "onnxruntime": []}
    for _ in range(repeats):
        for who, fn in (("pydla", lambda: sess.run({"input": x})),
                        ("onnxruntime", lambda: ref.run(None, {"input": x}))):
            t0 = time.perf_counter()
            fn()
            times[who].append(time.perf_counter() - t0)
            time.sleep(0.05)
    sess.close()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    ratio = med["pydla"] / med["onnxruntime"]
    print(f"{name} {shape[2]}x{shape[3]}: compile + load {setup_ms:.0f} ms; max relative error {err:.1e}")
    print(f"  pydla Session.run   {med['pydla']:8.1f} ms  (median of {repeats})")
    print(f"  onnxruntime         {med['onnxruntime']:8.1f} ms  ({threads} threads)")
    print(f"  ratio {ratio:.2f}x (goal <= {GOAL}): {'met' if ratio <= GOAL else 'NOT met'}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("resnet18", "mobilenetv2", "all"), default="all")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    args = parser.parse_args()
    if not 32 <= args.size <= 1024:
        parser.error("--size must be 32..1024")
    os.environ.setdefault("PYDLA_CACHE_DIR", tempfile.mkdtemp(prefix="pydla-bench-"))
    chosen = ("resnet18", "mobilenetv2") if args.model == "all" else (args.model,)
    builders = {"resnet18": resnet18, "mobilenetv2": mobilenetv2}
    ratios = [measure(name, builders[name](args.size), args.repeats) for name in chosen]
    sys.exit(0 if all(r <= GOAL for r in ratios) else 1)


if __name__ == "__main__":
    main()
