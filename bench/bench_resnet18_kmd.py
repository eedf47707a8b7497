"""ResNet-18 (224x224, fp32, batch 1, random weights) on the virtual device through the KMD,
against onnxruntime running the same network, in one run.

Until the compiler lands, the network is built twice by hand from the same weights: an ONNX model
with ``onnx.helper`` (batch norm folded into the convolutions) for onnxruntime, and a task with
:class:`~pydla.loadable.taskbuilder.TaskBuilder` (each convolution fused with its bias, residual add and
ReLU in SDP; max and global average pooling in PDP; the classifier as a 1x1 convolution). The
pydla time is submit-to-done of one task: descriptor validation, scheduling, and the device's
computation in deterministic mode. Both use the machine's cores (onnxruntime with as many threads as
OpenBLAS). Medians of several runs; the ratio is pydla / onnxruntime (goal: 1.5x).

Run: python bench/bench_resnet18_kmd.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.loadable.taskbuilder import Cube, TaskBuilder
from pydla.target.config import DeviceConfig, load_config


class Net:
    """The weights, and both builders fed layer by layer."""

    def __init__(self, seed: int = 0, tap_major: bool = True, config: DeviceConfig | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.tap_major = tap_major
        self.config = config or load_config("full")  # its speed rules, as the compiler reads them
        self.weights: dict[str, np.ndarray] = {}
        self.stored: dict[str, np.ndarray] = {}
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.tb = TaskBuilder()
        self.count = 0

    def conv(self, x: Cube, xname: str, k: int, kernel: int, stride: int, pad: int, relu: bool,
             residual: tuple[Cube, str] | None = None) -> tuple[Cube, str]:
        from onnx import helper, numpy_helper

        i = self.count
        self.count += 1
        c = x.shape[0]
        w = (self.rng.standard_normal((k, c, kernel, kernel)) * np.sqrt(2.0 / (c * kernel * kernel)))
        w = w.astype(np.float32)
        b = (self.rng.standard_normal(k) * 0.1).astype(np.float32)
        self.weights[f"w{i}"], self.weights[f"b{i}"] = w, b
        self.stored[f"b{i}"] = b
        ho = (x.shape[1] + 2 * pad - kernel) // stride + 1
        wo = (x.shape[2] + 2 * pad - kernel) // stride + 1
        out = self.tb.cube(f"t{i}", (k, ho, wo))
        # The compiler's choice (pydla.compiler.lower): tap-major for layers of enough channels and
        # wide enough lines, by the device configuration's speed rules.
        fmt = ("rskc" if self.tap_major and kernel > 1 and c >= self.config.tap_major_min_channels
               and self.config.tap_major_pays(kernel, 1, stride, wo) else "kcrs")
        # The device's memory holds tap-major weights when the convolution is told so.
        self.stored[f"w{i}"] = np.ascontiguousarray(w.transpose(2, 3, 0, 1)) if fmt == "rskc" else w
        op = self.tb.conv(x, self.tb.weights(f"w{i}", w.shape), weight_shape=w.shape,
                          stride=(stride, stride), pads=(pad, pad, pad, pad), weight_format=fmt)
        self.tb.sdp(op, out, bias=self.tb.weights(f"b{i}", (k,)), act="relu" if relu else "none",
                    ew=residual[0] if residual else None, ew_op="add")
        self.inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        name = f"t{i}"
        conv_out = name if residual is None and not relu else f"c{i}"
        self.nodes.append(helper.make_node("Conv", [xname, f"w{i}", f"b{i}"], [conv_out],
                                           strides=[stride, stride], pads=[pad] * 4))
        if residual is not None:
            added = name if not relu else f"a{i}"
            self.nodes.append(helper.make_node("Add", [conv_out, residual[1]], [added]))
            conv_out = added
        if relu:
            self.nodes.append(helper.make_node("Relu", [conv_out], [name]))
        return out, name


def build(net: Net) -> tuple[Any, dict[str, Any]]:
    from onnx import TensorProto, helper

    tb = net.tb
    x = tb.cube("input", (3, 224, 224))
    y, yname = net.conv(x, "input", 64, 7, 2, 3, True)
    p = tb.cube("pool", (64, 56, 56))
    tb.pdp(y, p, kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1), method="max")
    net.nodes.append(helper.make_node("MaxPool", [yname], ["pool"], kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1]))
    cur, cname = p, "pool"
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            if stride != 1 or cur.shape[0] != width:
                skip, sname = net.conv(cur, cname, width, 1, stride, 0, False)
            else:
                skip, sname = cur, cname
            h, hname = net.conv(cur, cname, width, 3, stride, 1, True)
            cur, cname = net.conv(h, hname, width, 3, 1, 1, True, residual=(skip, sname))
    g = tb.cube("gap", (512, 1, 1))
    tb.pdp(cur, g, kernel=(7, 7), stride=(1, 1), method="avg")
    net.nodes.append(helper.make_node("GlobalAveragePool", [cname], ["gap"]))
    logits, lname = net.conv(g, "gap", 1000, 1, 1, 0, False)
    graph = helper.make_graph(
        net.nodes, "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info(lname, TensorProto.FLOAT, [1, 1000, 1, 1])],
        net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, {"output": logits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kcrs", action="store_true",
                        help="keep every convolution's weights in ONNX order (no tap-major shift-GEMM)")
    args = parser.parse_args()
    import onnxruntime as ort

    net = Net(tap_major=not args.kcrs)
    model, outs = build(net)
    threads = os.cpu_count() or 1
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = net.rng.standard_normal((3, 224, 224)).astype(np.float32)

    dev = VirtualDevice("full", mode="deterministic")
    kmd = Kmd(VirtualDevicePort(dev))
    ctx = kmd.open_context()
    t0 = time.perf_counter()
    built = net.tb.build()
    loaded = built.load(kmd, ctx)
    build_ms = (time.perf_counter() - t0) * 1e3
    for name, value in {"input": x, **net.stored}.items():
        kmd.bo_array(ctx, loaded.handles[name])[:value.nbytes] = value.view(np.uint8).ravel()
    out_name = outs["output"].buffer

    def run_pydla() -> np.ndarray:
        kmd.submit(ctx, loaded.addresses, timeout_ms=600_000).wait(600_000)
        return kmd.bo_array(ctx, loaded.handles[out_name]).view(np.float32)[:1000].copy()

    def run_ort() -> np.ndarray:
        return np.asarray(sess.run(None, {"input": x[None]})[0]).ravel()

    got, ref = run_pydla(), run_ort()
    err = float(np.abs(got - ref).max() / (np.abs(ref).max() + 1e-12))
    times: dict[str, list[float]] = {"pydla": [], "onnxruntime": []}
    for _ in range(args.repeats):
        for name, fn in (("pydla", run_pydla), ("onnxruntime", run_ort)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            time.sleep(0.05)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"ResNet-18 224x224 fp32: {len(built.operations)} device operations, "
          f"task built in {build_ms:.0f} ms")
    print(f"max relative error against onnxruntime: {err:.2e}")
    print(f"pydla (KMD + virtual device): {med['pydla']:8.1f} ms (median of {args.repeats})")
    print(f"onnxruntime ({threads} threads): {med['onnxruntime']:8.1f} ms")
    print(f"ratio pydla / onnxruntime: {med['pydla'] / med['onnxruntime']:.2f}x (goal <= 1.5)")
    kmd.close()
    dev.close()


if __name__ == "__main__":
    main()
