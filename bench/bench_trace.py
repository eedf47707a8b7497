"""What tracing costs: a network's run time traced (the device's ring with the default event classes,
the host's spans) against untraced, in the same run, alternating blocks; and the ring's bytes per
device operation (how long a ring lasts).

The network is the demo CNN (examples' demo model) unless --model names an ONNX file. Medians of
--repeats blocks of --runs runs each. No goal is set; the figure says what a trace perturbs.

Run: python bench/bench_trace.py [--model m.onnx] [--runs 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pydla
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model
from pydla.trace import Capture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="an ONNX model (default: the demo CNN)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.model:
        import onnx

        model = onnx.load(args.model)
    else:
        model = build_demo_model()
    blob = compile_model(model).blob
    sess = pydla.Session(blob)
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in sess.inputs}
    for _ in range(5):
        sess.run(feeds)

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(args.runs):
            sess.run(feeds)
        return (time.perf_counter() - t0) / args.runs

    plain, traced, ring_bytes, ops = [], [], [], 0
    for i in range(args.repeats):
        for mode in (("plain", "traced") if i % 2 == 0 else ("traced", "plain")):
            if mode == "plain":
                plain.append(block())
                continue
            capture = Capture(sess.runtime, size=64 << 20)
            traced.append(block())
            result = capture.finish()
            ops = len(result.ops)
            events = result.contents.events
            used = result.contents.head - (events[0].position if events else 0)
            ring_bytes.append(used / max(1, ops))
    sess.close()
    p, t = statistics.median(plain) * 1e3, statistics.median(traced) * 1e3
    print(f"untraced run: {p:.3f} ms (median of {args.repeats} blocks of {args.runs})")
    print(f"traced run:   {t:.3f} ms")
    print(f"traced / untraced: {t / p:.2f}x; {ops} device operations per block, "
          f"{statistics.median(ring_bytes):.0f} ring bytes per operation")


if __name__ == "__main__":
    main()
