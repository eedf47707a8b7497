"""pydla.Session.run of a one-convolution model against onnxruntime's InferenceSession.run of the same
model: what an application pays per call for the whole stack, from its numpy input to its numpy output.

The model is one 1x1 Conv, 8 -> 8 channels, on a 1x8x4x4 float32 input (``--shape`` changes it), the
network of bench/bench_submit.py's ``--op conv``. Both sessions are made once; then each call gives the
input as a dict and gets the output as a new array, as an application does:
- pydla: ``Session.run(None, {"x": x})`` (configuration ``--config``, default ``full``; deterministic
  device, in-process port): input checks, the copy into device memory, the UMD runner, the port, the
  KMD, the device computing, the interrupt, the copy out;
- onnxruntime: ``InferenceSession.run(None, {"x": x})`` (CPUExecutionProvider, default options).
Blocks of the two alternate (``--repeats`` blocks of ``--block`` calls each, timed call by call after
an untimed call); the medians and the ratio are printed, with the goal of the performance issue
(<= 4x). The outputs are compared before the timing. ``--profile N`` counts the Python calls per
``Session.run`` with cProfile and prints where they go (the layers above the port, and below it).

Run: python bench/bench_session_call.py [--repeats 9] [--block 300] [--config full] [--profile 2000]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np
from bench_submit import _model, _onnxruntime, _profiled, _time_each  # bench/: on sys.path

import pydla

GOAL = 4.0  # Session.run / onnxruntime run, medians


def _layer(filename: str) -> str:
    parts = filename.replace("\\", "/").split("/pydla/")
    return parts[-1].split("/")[0].removesuffix(".py") if len(parts) > 1 else ""


def _calls(run: Any, n: int) -> tuple[float, list[tuple[str, float]]]:
    """Python calls per run, and the calls per run by layer: the pydla module or package a function
    is in; a call of numpy or a builtin counts for the layer that made it."""
    layers: dict[str, int] = {}
    for (filename, _line, _name), (_cc, calls, _tt, _ct, callers) in _profiled(run, n).items():
        layer = _layer(filename)
        if layer:
            layers[layer] = layers.get(layer, 0) + calls
            continue
        for (caller_file, _l, _n), caller_calls in callers.items():
            # a caller's entry is (primitive calls, calls, ...) or, for some, only a count
            count = caller_calls[1] if isinstance(caller_calls, tuple) else caller_calls
            key = (_layer(caller_file) or "numpy's own Python") + " (numpy, builtins)"
            layers[key] = layers.get(key, 0) + count
    total = sum(layers.values())
    return total / n, sorted(((k, v / n) for k, v in layers.items()), key=lambda kv: -kv[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="alternating blocks per side")
    parser.add_argument("--block", type=int, default=300, help="timed calls per block")
    parser.add_argument("--shape", default="1,8,4,4", help="input shape N,C,H,W")
    parser.add_argument("--config", default="full", help="pydla configuration (default: full)")
    parser.add_argument("--profile", type=int, default=2000, metavar="N",
                        help="Session.run calls profiled after the timing, to count Python calls (0: skip)")
    args = parser.parse_args()
    if args.repeats < 1 or args.block < 1 or args.profile < 0:
        parser.error("--repeats and --block must be >= 1, --profile >= 0")
    shape = tuple(int(s) for s in args.shape.split(","))
    model = _model("conv", shape)
    blob = model.SerializeToString()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    feed = {"x": x}
    ort_session = _onnxruntime(model)
    with pydla.Session(blob, config=args.config) as session:
        np.testing.assert_allclose(session.run(None, feed)[0], ort_session.run(None, feed)[0],
                                   rtol=1e-4, atol=1e-5, err_msg="pydla against onnxruntime")
        sides = {"pydla Session.run": lambda: session.run(None, feed),
                 "onnxruntime run": lambda: ort_session.run(None, feed)}
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.repeats):
            for name, fn in sides.items():
                fn()  # untimed: the other side's block may have evicted this one's caches
                times[name] += _time_each(fn, args.block)
        med = {name: statistics.median(ts) * 1e6 for name, ts in times.items()}
        ratio = med["pydla Session.run"] / med["onnxruntime run"]
        print(f"one 1x1 Conv on {'x'.join(map(str, shape))}, configuration {args.config!r}, "
              f"{args.repeats} x {args.block} calls per side, medians:")
        for name, us in med.items():
            print(f"  {name:<20} {us:8.1f} us")
        print(f"  ratio {ratio:.2f}x (goal <= {GOAL:g}: {'met' if ratio <= GOAL else 'NOT met'})")
        if args.profile:
            per_run, layers = _calls(sides["pydla Session.run"], args.profile)
            print(f"Python calls per Session.run (cProfile, {args.profile} runs): {per_run:.0f}")
            for layer, calls in layers:
                print(f"  {layer:<32} {calls:6.1f}")


if __name__ == "__main__":
    main()
