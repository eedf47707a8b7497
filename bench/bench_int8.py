"""INT8 on NVDLA (nv_small), in one run: the goals of the INT8 issue, printed.

1. Speed: a QDQ ResNet-18 (random weights, batch norm folded by the quantizer; made with
   onnxruntime.quantization, static, per-channel weights, over 8 calibration inputs) compiled into an
   INT8 NVDLA Loadable, run through ``pydla.Session`` on the nv_small device, against onnxruntime
   running the same QDQ model: medians of --repeats runs, the ratio pydla / onnxruntime (goal <= 2x),
   and the largest difference of the outputs in the output's quantization steps (goal: 1).
2. Accuracy: MobileNet-v2 and ResNet-18 (random weights, bench_session.py's), calibrated by pydla over
   --calibration inputs (--method), compiled for nv_small; top-1 agreement of the INT8 network with
   the FP32 model on --inputs inputs drawn like the calibration set (goal >= 98%), beside onnxruntime's
   own INT8 of the same network (quantize_static over the same calibration inputs). The INT8 results
   come from the integer reference (pydla.compiler.nvdla.reference), which the device equals bit for
   bit: the first --device-checks inputs also run on the device and are compared byte for byte (the
   device takes seconds per run of these networks, the reference a fraction).

Inputs are smooth random images (tests/compiler/nvdla/models.py ``images``), not a data set: no data
set can be fetched here, and the networks' weights are random.

Run: python bench/bench_int8.py [--size 224] [--acc-size 64] [--repeats 5] [--inputs 500]
     [--calibration 32] [--method minmax|percentile|entropy] [--device-checks 3] [--skip-speed]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def _session(blob: bytes) -> Any:
    import pydla

    path = Path(tempfile.mkdtemp()) / "model.nvdla"
    path.write_bytes(blob)
    return pydla.Session(str(path), config="nv_small")


def speed(size: int, repeats: int) -> None:
    import bench_session as b
    import onnxruntime as ort

    from pydla.compiler.api import compile_model
    from pydla.compiler.nvdla.compile import dequantize, quantize
    from tests.compiler.nvdla.models import images, qdq_model

    model = b.resnet18(size)
    shape = (3, size, size)
    with tempfile.TemporaryDirectory() as d:
        q = qdq_model(model, images(8, shape), Path(d) / "resnet18_qdq.onnx")
    t0 = time.perf_counter()
    result = compile_model(q, config="nv_small")
    compile_s = time.perf_counter() - t0
    inb, outb = result.plan.role("input")[0], result.plan.role("output")[0]
    sess = _session(result.blob)
    so = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    ours, theirs, steps = [], [], 0.0
    for x in images(repeats + 1, shape, seed=21):
        xq = quantize(x[0], inb.scale, inb.zero_point)[None]
        t = time.perf_counter()
        y = sess.run(None, {"input": xq})[0]
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        expected = so.run(None, {"input": x})[0]
        theirs.append(time.perf_counter() - t)
        got = dequantize(y, outb.scale, outb.zero_point).ravel()
        steps = max(steps, float(np.abs(got - expected.ravel()).max() / outb.scale))
    mine, ort_ms = statistics.median(ours[1:]) * 1e3, statistics.median(theirs[1:]) * 1e3
    ratio = mine / ort_ms
    ops = ", ".join(f"{k} {v}" for k, v in sorted(result.operations.items()))
    print(f"QDQ ResNet-18 {size}x{size} on nv_small ({ops}; compiled in {compile_s:.1f} s): "
          f"pydla {mine:.1f} ms, onnxruntime {ort_ms:.2f} ms, ratio {ratio:.1f}x (goal 2x: "
          f"{'met' if ratio <= 2 else 'NOT met'}); outputs within {steps:.0f} step(s) of onnxruntime's "
          f"(goal 1: {'met' if steps <= 1 + 1e-4 else 'NOT met'})")


def accuracy(name: str, size: int, inputs: int, calibration: int, method: str, device_checks: int) -> None:
    import bench_session as b
    import onnxruntime as ort

    from pydla.compiler.api import compile_model
    from pydla.compiler.nvdla.compile import dequantize, quantize
    from pydla.compiler.nvdla.reference import run_reference
    from tests.compiler.nvdla.models import images

    model = getattr(b, name)(size)
    shape = (3, size, size)
    feeds = [{"input": x} for x in images(calibration, shape)]
    result = compile_model(model, config="nv_small", calibration=feeds, calibration_method=method)
    inb, outb = result.plan.role("input")[0], result.plan.role("output")[0]
    f = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # the anchor: onnxruntime's own INT8 of the same network (quantize_static, per-channel weights,
    # min-max over the same calibration inputs), against the same FP32 results
    from tests.compiler.nvdla.models import qdq_model

    with tempfile.TemporaryDirectory() as d:
        qdq = qdq_model(model, images(calibration, shape), Path(d) / "q.onnx")
    g = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = _session(result.blob) if device_checks else None
    agree, anchor, checked, rel = 0, 0, 0, []
    t0 = time.perf_counter()
    for i, x in enumerate(images(inputs, shape, seed=1000)):
        xq = quantize(x[0], inb.scale, inb.zero_point)
        q = run_reference(result.plan, {"input": xq})[outb.name]
        if sess is not None and i < device_checks:
            dev = np.asarray(sess.run(None, {"input": xq[None]})[0]).reshape(q.shape)
            if not np.array_equal(dev, q):
                raise SystemExit(f"{name}: the device differs from the reference on input {i}")
            checked += 1
        y = dequantize(q, outb.scale, outb.zero_point).ravel()
        expected = f.run(None, {"input": x})[0].ravel()
        agree += int(np.argmax(y) == np.argmax(expected))
        anchor += int(np.argmax(g.run(None, {"input": x})[0]) == np.argmax(expected))
        rel.append(float(np.abs(y - expected).max() / np.abs(expected).max()))
    share = 100.0 * agree / inputs
    print(f"{name} {size}x{size}, calibrated ({method}, {calibration} inputs): top-1 agreement with FP32 "
          f"{agree}/{inputs} = {share:.1f}% (goal 98%: {'met' if share >= 98 else 'NOT met'}; onnxruntime's "
          f"own INT8 of it: {100.0 * anchor / inputs:.1f}%); "
          f"median max relative error {statistics.median(rel):.3f}; device == reference on {checked} "
          f"input(s); {time.perf_counter() - t0:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=224, help="ResNet-18's input size for the speed goal")
    p.add_argument("--acc-size", type=int, default=64, help="the input size of the accuracy goal's networks")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--inputs", type=int, default=500)
    p.add_argument("--calibration", type=int, default=32)
    p.add_argument("--method", default="minmax", choices=("minmax", "percentile", "entropy"))
    p.add_argument("--device-checks", type=int, default=3)
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--nets", default="mobilenetv2,resnet18")
    args = p.parse_args()
    if not args.skip_speed:
        speed(args.size, args.repeats)
    for name in args.nets.split(","):
        if name:
            accuracy(name, args.acc_size, args.inputs, args.calibration, args.method, args.device_checks)


if __name__ == "__main__":
    main()
