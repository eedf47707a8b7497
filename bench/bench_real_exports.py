"""Real exported models through pydla.Session against onnxruntime, in one run: torchvision's
MobileNet-v3-small, ShuffleNet-v2 x1.0, SqueezeNet 1.1, MobileNet-v2 and ResNet-18 at 1x3x128x128,
and a 4-layer transformer encoder (torch.nn.TransformerEncoder: hidden 256, 4 heads, feed-forward
1024, Gelu, sequence 128), each exported by torch.onnx twice: by the TorchScript exporter and by the
dynamo exporter (``dynamo=True``), opset 17, random weights (seed 0), batch 1.

Two steps, because torch and torchvision are not pydla's dependencies (and torchvision needs a
torch build of its own):

    python bench/bench_real_exports.py export DIR   # with a Python that has torch and torchvision
    python bench/bench_real_exports.py run DIR      # with pydla's (onnxruntime needed: the [onnx] extra)

``export`` writes DIR/<model>[_dynamo].onnx. On this project's machines torch 2.14.1 with
torchvision 0.29.1 work together (``pip install torch==2.14.1 torchvision==0.29.1`` in a venv of
its own: some 5.5 GB). ``run`` compiles each file with ``pydla.Session`` (the time is printed),
compares its output with onnxruntime's (largest difference relative to the largest output value),
then times blocks of ``--block`` runs of each side alternating, ``--repeats`` times, after an untimed
run; it prints the medians and the ratio, against the performance issue's goal for real exports
(<= 4x onnxruntime each).

onnxruntime's intra-op threads spin after each run by default; on a machine shared with other
work (2 cores, load 8) that slowed the pydla block timed after it up to 2x and onnxruntime itself
2.5x (MobileNet-v3-small: onnxruntime 3.9 ms spinning, 1.5 ms not). ``--no-spin`` turns it off
(session.intra_op.allow_spinning 0) for figures that measure the two sides and not the machine.

Run: python bench/bench_real_exports.py run DIR [--repeats 5] [--block 3] [--only NAME ...] [--no-spin]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

GOAL = 4.0  # pydla / onnxruntime, each real export
TOLERANCE = 1e-4  # largest difference / largest |output|
VISION = ("mobilenet_v3_small", "shufflenet_v2_x1_0", "squeezenet1_1", "mobilenet_v2", "resnet18")


def export(folder: Path) -> None:
    """Write the models (needs torch and torchvision)."""
    try:
        import torch
        import torchvision  # type: ignore[import-untyped]
    except ImportError as e:
        sys.exit(f"export needs torch and torchvision ({e}); on this project's machines, in a venv of its "
                 "own: pip install torch==2.14.1 torchvision==0.29.1 onnx onnxscript")
    folder.mkdir(parents=True, exist_ok=True)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, activation="gelu",
                                                     batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)

        def forward(self, x: Any) -> Any:
            return self.encoder(x)

    for dynamo in (False, True):
        for name in (*VISION, "encoder"):
            torch.manual_seed(0)
            if name == "encoder":
                model, x = Encoder(), torch.randn(1, 128, 256)
            else:
                model, x = getattr(torchvision.models, name)(), torch.randn(1, 3, 128, 128)
            path = folder / f"{name}{'_dynamo' if dynamo else ''}.onnx"
            torch.onnx.export(model.eval(), (x,), str(path), opset_version=17, dynamo=dynamo,
                              input_names=["input"], output_names=["output"])
            print(f"wrote {path}", flush=True)


def _time_block(fn: Any, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def run(folder: Path, repeats: int, block: int, only: list[str], spin: bool = True) -> int:
    """Compile, compare and time every model in ``folder``; 1 if one failed or disagreed."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    import pydla

    paths = sorted(p for p in folder.glob("*.onnx") if not only or p.stem in only)
    if not paths:
        sys.exit(f"no .onnx files in {folder}{' named ' + ', '.join(only) if only else ''}: "
                 "write them with `export` first")
    failed = 0
    print(f"{'model':<32} {'compile':>8} {'difference':>10} {'pydla':>10} {'onnxruntime':>12} {'ratio':>7}")
    for path in paths:
        try:
            options = ort.SessionOptions()
            if not spin:
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            theirs = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            spec = theirs.get_inputs()[0]
            shape = [d if isinstance(d, int) else 1 for d in spec.shape]
            feed = {spec.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
            t0 = time.perf_counter()
            ours = pydla.Session(str(path))
            compile_s = time.perf_counter() - t0
            with ours:
                got, want = ours.run(None, feed)[0], theirs.run(None, feed)[0]
                difference = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
                times: dict[str, list[float]] = {"pydla": [], "onnxruntime": []}
                for _ in range(repeats):
                    for side, session in (("pydla", ours), ("onnxruntime", theirs)):
                        session.run(None, feed)
                        times[side].append(_time_block(lambda s=session, f=feed: s.run(None, f), block))
        except Exception as e:  # a model that fails is reported, and the others still run
            failed += 1
            print(f"{path.stem:<32} FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        med = {side: statistics.median(ts) * 1e3 for side, ts in times.items()}
        ratio = med["pydla"] / med["onnxruntime"]
        ok = difference <= TOLERANCE
        failed += not ok
        mark = "" if ok else "!"
        print(f"{path.stem:<32} {compile_s:7.2f}s {difference:10.1e}{mark} {med['pydla']:8.2f} ms "
              f"{med['onnxruntime']:9.2f} ms {ratio:6.2f}x  (goal <= {GOAL:g}: "
              f"{'met' if ratio <= GOAL else 'NOT met'})", flush=True)
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_export = sub.add_parser("export", help="write the models (needs torch and torchvision)")
    p_export.add_argument("folder", type=Path)
    p_run = sub.add_parser("run", help="compile, compare and time the models of FOLDER")
    p_run.add_argument("folder", type=Path)
    p_run.add_argument("--repeats", type=int, default=5, help="alternating blocks per side")
    p_run.add_argument("--block", type=int, default=3, help="timed runs per block")
    p_run.add_argument("--only", nargs="*", default=[], help="model file names without .onnx")
    p_run.add_argument("--no-spin", action="store_true",
                       help="onnxruntime's threads wait without spinning after a run (on a shared "
                            "machine their spinning slows the pydla block after it, and onnxruntime)")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder)
        return
    if args.repeats < 1 or args.block < 1:
        parser.error("--repeats and --block must be >= 1")
    sys.exit(run(args.folder, args.repeats, args.block, args.only, spin=not args.no_spin))


if __name__ == "__main__":
    main()
