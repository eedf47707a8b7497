"""Real-world convolutional networks through ``pydla.Session.run`` against onnxruntime, in one run.

All networks are built here with ``onnx.helper`` (fp32, NCHW, batch 1, fixed-seed random weights),
compiled by pydla's compiler, and run through the whole stack (Session -> IRuntime -> runner ->
in-process port -> KMD -> virtual device, deterministic mode):
- resnet18, mobilenetv2 (opset 13, 224x224 by default): batch norm after every convolution, as
  exported from a framework that keeps it; goals pydla / onnxruntime: ResNet-18 <= 1.3x (its time is
  in large matrix products), MobileNet-v2 <= 2.0x at 224x224 and <= 2.5x at 32x32;
- mobilenetv3small, squeezenet11, shufflenetv2 (opset 17, 128x128 by default), in torchvision's
  layouts as torch.onnx exports them in eval mode: batch norm folded into the convolutions' weights
  and biases; HardSwish, and squeeze-excite as GlobalAveragePool -> 1x1 Conv -> Relu -> 1x1 Conv ->
  HardSigmoid -> Mul (MobileNet-v3-small); fire modules with Concat and ceil-mode MaxPool
  (SqueezeNet 1.1); Split, depthwise convolutions, Concat and the Reshape -> Transpose -> Reshape
  channel shuffle (ShuffleNet-v2 x1.0); goals pydla / onnxruntime: MobileNet-v3-small <= 4x,
  SqueezeNet and ShuffleNet <= 2.0x;
- encoder: a 4-layer pre-norm transformer encoder (hidden 256, 4 heads, sequence 128, batch 1) in
  the node patterns torch.onnx exports (tests/compiler/exporter_models.py: token and position
  embeddings, an additive attention mask, LayerNormalization, Softmax, Gelu), its dynamic
  dimensions fixed with ``input_shapes``; goal pydla / onnxruntime <= 2.5x. On the default
  configuration Softmax, LayerNormalization and Gelu run on the SHAVE tiles.
Each network's CPU runs (what splits its NPU work) are counted and printed with it.
onnxruntime runs the same model with as many intra-op threads as the machine has cores (OpenBLAS,
which the device's convolutions use, does the same). Blocks of runs of the two alternate (each
block: one untimed run, then --block timed ones; 50 ms apart, so that neither runs in the other's
wake); medians over all timed runs are quoted;
the ratio is pydla / onnxruntime, printed with its goal and met / NOT met. The outputs are checked
to agree (allclose, tolerance relative to the output's largest magnitude). A network pydla's
compiler or runtime refuses (DlaError) is printed as "refused: <message>" and counts as not met.
The exit status is 0 when every chosen network meets its goal.

With ``--threads N`` both sides compute on at most N threads: onnxruntime's intra-op pool and the
BLAS library numpy and pydla's device share (OPENBLAS_NUM_THREADS, set by re-running this script
with it when it differs). OpenBLAS's threads wait for each other by spinning and yielding, and when
the cores are taken by other processes a product's threads meet only after their turns come
(measured with a load average of 9 on 2 cores: SqueezeNet 1.1 at 128x128 640 ms a run with 2 BLAS
threads, 40 ms with 1), while onnxruntime's pool (spinning off here) barely notices: the device
therefore uses as many BLAS threads as the cores other processes leave idle (PYDLA_BLAS_THREADS,
``auto`` by default; see pydla.hw.blas_threads), and the figures of a loaded machine with the
default threads are those of one BLAS thread.

With ``--size 32`` every chosen network takes a 32x32 input: what remains is mostly the cost of each
device operation (MobileNet-v2 is judged against its 32x32 goal there; the others at their default
size only).

Run: python bench/bench_session.py [--model NAME|all | --nets NAME,NAME,...] [--repeats 7] [--block 3]
     [--size N] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# The performance issue's goals, pydla / onnxruntime (medians)
GOAL_RESNET = 1.3  # its time is in large matrix products
GOAL_MOBILENET = 2.0
GOAL_MOBILENET_32 = 2.5  # what remains at 32x32 is the cost per operation
GOAL_MOBILENET_V3 = 4.0  # its depthwise arithmetic in numpy alone is about 3x
GOAL_SMALL = 2.0  # SqueezeNet 1.1, ShuffleNet-v2
GOAL_ENCODER = 2.5
RTOL = 1e-3  # outputs agree: |pydla - onnxruntime| <= RTOL * (|onnxruntime| + max |onnxruntime|)


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

    def const_int(self, values: list[int]) -> str:
        """An int64 initializer (a shape, split sizes)."""
        from onnx import numpy_helper

        name = self._name("shape")
        self.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
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

    def node(self, op: str, inputs: list[str], kind: str | None = None, **attrs: Any) -> str:
        """One node of one output; its output's name."""
        from onnx import helper

        out = self._name(kind or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def act(self, x: str, act: str | None) -> str:
        """``x`` through ``act``: None, "relu", "hardswish" or "hardsigmoid" (torch's: x/6 + 1/2)."""
        if act is None:
            return x
        if act == "relu":
            return self.node("Relu", [x])
        if act == "hardswish":
            return self.node("HardSwish", [x])
        return self.node("HardSigmoid", [x], alpha=1.0 / 6, beta=0.5)

    def conv(self, x: str, c: int, k: int, kernel: int, stride: int = 1, groups: int = 1,
             pad: int | None = None, act: str | None = "relu") -> str:
        """A convolution with a bias, as torch.onnx exports Conv2d + BatchNorm2d in eval mode (the batch
        norm folded into the weights and the bias), then ``act``."""
        fan_in = c // groups * kernel * kernel
        w = self.rng.standard_normal((k, c // groups, kernel, kernel)) * np.sqrt(2.0 / fan_in)
        bias = 0.1 * self.rng.standard_normal(k)
        p = kernel // 2 if pad is None else pad
        y = self.node("Conv", [x, self.const(w), self.const(bias)], kernel_shape=[kernel, kernel],
                      strides=[stride, stride], pads=[p] * 4, group=groups, dilations=[1, 1])
        return self.act(y, act)

    def gemm(self, x: str, c: int, k: int, out: str | None = None) -> str:
        """torch's Linear: Gemm with transB=1."""
        from onnx import helper

        w = self.rng.standard_normal((k, c)) * np.sqrt(1.0 / c)
        y = out or self._name("gemm")
        operands = [x, self.const(w), self.const(0.01 * self.rng.standard_normal(k))]
        self.nodes.append(helper.make_node("Gemm", operands, [y], alpha=1.0, beta=1.0, transB=1))
        return y

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

    def model(self, name: str, size: int, opset: int = 13) -> Any:
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])
        y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])
        graph = helper.make_graph(self.nodes, name, [x], [y], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
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


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding (ops.misc._make_divisible)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def mobilenetv3small(size: int = 128) -> Any:
    """torchvision's mobilenet_v3_small: inverted residuals with squeeze-excite and hard-swish."""
    b = Builder(3)
    x = b.conv("input", 3, 16, 3, 2, act="hardswish")
    c = 16
    # (kernel, expanded channels, output channels, squeeze-excite, activation, stride): torchvision's
    # _mobilenet_v3_conf("mobilenet_v3_small").
    for kernel, exp, out, se, act, stride in (
            (3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
            (5, 96, 40, True, "hardswish", 2), (5, 240, 40, True, "hardswish", 1),
            (5, 240, 40, True, "hardswish", 1), (5, 120, 48, True, "hardswish", 1),
            (5, 144, 48, True, "hardswish", 1), (5, 288, 96, True, "hardswish", 2),
            (5, 576, 96, True, "hardswish", 1), (5, 576, 96, True, "hardswish", 1)):
        h = b.conv(x, c, exp, 1, act=act) if exp != c else x
        h = b.conv(h, exp, exp, kernel, stride, groups=exp, act=act)
        if se:
            squeeze = _make_divisible(exp // 4)
            s = b.node("GlobalAveragePool", [h], "gap")
            s = b.conv(s, exp, squeeze, 1, act="relu")
            s = b.conv(s, squeeze, exp, 1, act="hardsigmoid")
            h = b.node("Mul", [s, h])
        h = b.conv(h, exp, out, 1, act=None)
        x = b.add(h, x, relu=False) if stride == 1 and c == out else h
        c = out
    x = b.conv(x, c, 6 * c, 1, act="hardswish")
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "gap")], axis=1)
    x = b.act(b.gemm(x, 6 * c, 1024), "hardswish")  # the classifier's Dropout is gone in eval mode
    b.gemm(x, 1024, 1000, out="logits")
    return b.model("mobilenetv3small", size, opset=17)


def squeezenet11(size: int = 128) -> Any:
    """torchvision's squeezenet1_1: fire modules, ceil-mode max pooling, a convolutional classifier."""
    from onnx import helper

    b = Builder(4)

    def pool(x: str) -> str:
        return b.node("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[0] * 4, ceil_mode=1)

    def fire(x: str, c: int, squeeze: int, expand: int) -> str:
        s = b.conv(x, c, squeeze, 1)
        return b.node("Concat", [b.conv(s, squeeze, expand, 1), b.conv(s, squeeze, expand, 3)], axis=1)

    x = pool(b.conv("input", 3, 64, 3, 2, pad=0))
    x = pool(fire(fire(x, 64, 16, 64), 128, 16, 64))
    x = pool(fire(fire(x, 128, 32, 128), 256, 32, 128))
    x = fire(fire(x, 256, 48, 192), 384, 48, 192)
    x = fire(fire(x, 384, 64, 256), 512, 64, 256)
    x = b.conv(x, 512, 1000, 1)  # the classifier's Dropout is gone in eval mode
    gap = b.node("GlobalAveragePool", [x], "gap")
    b.nodes.append(helper.make_node("Flatten", [gap], ["logits"], axis=1))
    return b.model("squeezenet11", size, opset=17)


def shufflenetv2(size: int = 128) -> Any:
    """torchvision's shufflenet_v2_x1_0: channel split, depthwise branches, Concat, channel shuffle."""
    from onnx import helper

    b = Builder(5)
    side = -(-size // 2)  # after conv1
    side = -(-side // 2)  # after the max pool

    def shuffle(x: str, c: int) -> str:
        # channel_shuffle(x, 2): view(n, 2, c/2, h, w) -> transpose(1, 2) -> view(n, -1, h, w); the
        # shapes are constants once torch.onnx has folded x.size().
        x = b.node("Reshape", [x, b.const_int([1, 2, c // 2, side, side])])
        x = b.node("Transpose", [x], perm=[0, 2, 1, 3, 4])
        return b.node("Reshape", [x, b.const_int([1, -1, side, side])])

    x = b.conv("input", 3, 24, 3, 2)
    x = b.node("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    c = 24
    for out, repeats in ((116, 4), (232, 8), (464, 4)):
        half = out // 2
        for i in range(repeats):
            stride = 2 if i == 0 else 1
            if stride == 2:  # both branches take the whole input; branch1 halves it too
                side = -(-side // 2)
                left = b.conv(b.conv(x, c, c, 3, 2, groups=c, act=None), c, half, 1)
                right, c_right = x, c
            else:  # x1, x2 = x.chunk(2, dim=1): x1 passes through, x2 takes branch2
                left, right, c_right = b._name("split"), b._name("split"), half
                sizes = b.const_int([half, half])
                b.nodes.append(helper.make_node("Split", [x, sizes], [left, right], axis=1))
            # branch2: 1x1 conv + relu, depthwise 3x3 (no activation), 1x1 conv + relu
            right = b.conv(right, c_right, half, 1)
            right = b.conv(right, half, half, 3, stride, groups=half, act=None)
            right = b.conv(right, half, half, 1)
            x = shuffle(b.node("Concat", [left, right], axis=1), out)
            c = out
    x = b.conv(x, c, 1024, 1)
    x = b.node("ReduceMean", [x], axes=[2, 3], keepdims=0)  # x.mean([2, 3])
    b.gemm(x, 1024, 1000, out="logits")
    return b.model("shufflenetv2", size, opset=17)


# name -> (builder, default input size, goal for pydla / onnxruntime)
def encoder(size: int = 128) -> Any:
    """The transformer encoder; ``size`` is its sequence length."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tests.compiler.exporter_models import bert_encoder

    return bert_encoder(layers=4, d=256, heads=4, vocab=1000, positions=size)


NETWORKS: dict[str, tuple[Callable[[int], Any], int, float]] = {
    "resnet18": (resnet18, 224, GOAL_RESNET),
    "mobilenetv2": (mobilenetv2, 224, GOAL_MOBILENET),
    "mobilenetv3small": (mobilenetv3small, 128, GOAL_MOBILENET_V3),
    "squeezenet11": (squeezenet11, 128, GOAL_SMALL),
    "shufflenetv2": (shufflenetv2, 128, GOAL_SMALL),
    "encoder": (encoder, 128, GOAL_ENCODER),
}


def feeds_of(name: str, model: Any, size: int) -> tuple[dict[str, np.ndarray], dict[str, tuple[int, ...]]]:
    """The inputs of a run and the shapes that fix the model's dynamic dimensions."""
    rng = np.random.default_rng(2)
    if name == "encoder":
        shape = (1, size)
        return ({"input_ids": rng.integers(0, 1000, shape).astype(np.int64),
                 "attention_mask": np.ones(shape, np.int64)}, {"input_ids": shape, "attention_mask": shape})
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    return {"input": rng.standard_normal(shape).astype(np.float32)}, {}


def measure(name: str, model: Any, repeats: int, goal: float, block: int = 3, size: int = 0,
            threads: int | None = None) -> float | None:
    """Print pydla against onnxruntime on ``model``; the ratio, or None when pydla refuses the model."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    import pydla
    from pydla.compiler.api import compile_model

    threads = threads or os.cpu_count() or 1
    feeds, input_shapes = feeds_of(name, model, size)
    first = next(iter(feeds.values())).shape
    what = f"{name} {first[2]}x{first[3]}" if len(first) == 4 else f"{name} {'x'.join(map(str, first))}"
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    theirs = ref.run(None, feeds)[0]
    t0 = time.perf_counter()
    try:
        cpu_runs = compile_model(model, input_shapes=input_shapes or None).cpu_runs
        sess = pydla.Session(model, input_shapes=input_shapes or None)
    except pydla.DlaError as e:
        print(f"{what}: refused: {e}")
        print(f"  ratio - (goal <= {goal}): NOT met")
        return None
    try:
        setup_ms = (time.perf_counter() - t0) * 1e3
        try:
            ours = next(iter(sess.run(feeds).values()))
        except pydla.DlaError as e:
            print(f"{what}: refused: {e}")
            print(f"  ratio - (goal <= {goal}): NOT met")
            return None
        scale = float(np.abs(theirs).max())
        err = float(np.abs(ours - theirs).max() / (scale + 1e-12))
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=RTOL * scale,
                                   err_msg=f"{name}: pydla vs onnxruntime")
        times: dict[str, list[float]] = {"pydla": [], "onnxruntime": []}
        runs: tuple[tuple[str, Callable[[], object]], ...] = (
            ("pydla", lambda: sess.run(feeds)), ("onnxruntime", lambda: ref.run(None, feeds)))
        for _ in range(repeats):
            for who, fn in runs:
                fn()  # each block starts warm: one run dropped, then ``block`` timed
                for _ in range(block):
                    t0 = time.perf_counter()
                    fn()
                    times[who].append(time.perf_counter() - t0)
                time.sleep(0.05)  # the other's threads and caches settle between blocks
    finally:
        sess.close()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    ratio = med["pydla"] / med["onnxruntime"]
    ops = sorted({str(r.get("op", "?")) for r in cpu_runs})
    print(f"{what}: compile (twice) + load {setup_ms:.0f} ms; max relative error {err:.1e}; "
          f"{len(cpu_runs)} CPU runs{' (' + ', '.join(ops) + ')' if ops else ''}")
    print(f"  pydla Session.run   {med['pydla']:8.1f} ms  (median of {repeats} blocks of {block})")
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "as set")
    print(f"  onnxruntime         {med['onnxruntime']:8.1f} ms  ({threads} threads; BLAS threads {blas})")
    print(f"  ratio {ratio:.2f}x (goal <= {goal}): {'met' if ratio <= goal else 'NOT met'}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", choices=(*NETWORKS, "all"), default="all",
                       help="one network, or all of them (the default)")
    which.add_argument("--nets", help=f"a comma-separated subset of {','.join(NETWORKS)}")
    parser.add_argument("--repeats", type=int, default=7, help="alternating blocks of each (default 7)")
    parser.add_argument("--block", type=int, default=3,
                        help="timed runs per block, after one untimed warm-up run (default 3)")
    parser.add_argument("--size", type=int, default=None,
                        help="input height and width for every chosen network (default: each network's "
                        + ", ".join(f"{n} {NETWORKS[n][1]}" for n in NETWORKS) + ")")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of each side: onnxruntime's and the BLAS library's (default: "
                        "onnxruntime as many as the machine has cores, BLAS as it is set)")
    args = parser.parse_args()
    if args.size is not None and not 32 <= args.size <= 1024:
        parser.error("--size must be 32..1024")
    if args.threads is not None:
        if not 1 <= args.threads <= 256:
            parser.error("--threads must be 1..256")
        if os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
            # BLAS reads its thread count when it loads: run again with it set.
            os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
            os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.nets is not None:
        chosen = [n.strip() for n in args.nets.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in NETWORKS]
        if unknown or not chosen:
            parser.error(f"--nets: unknown {','.join(unknown) or '(empty)'}; "
                         f"choose from {','.join(NETWORKS)}")
    else:
        chosen = list(NETWORKS) if args.model == "all" else [args.model]
    os.environ.setdefault("PYDLA_CACHE_DIR", tempfile.mkdtemp(prefix="pydla-bench-"))
    met = []
    for name in chosen:
        build, size, goal = NETWORKS[name]
        if name == "mobilenetv2" and args.size == 32:
            goal = GOAL_MOBILENET_32
        ratio = measure(name, build(args.size or size), args.repeats, goal, args.block, args.size or size,
                        args.threads)
        met.append(ratio is not None and ratio <= goal)
    sys.exit(0 if all(met) else 1)

if __name__ == "__main__":
    main()
