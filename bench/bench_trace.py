"""What tracing costs: a network's run time traced (the device's ring with the default event classes,
the host's spans) against untraced, in the same run, alternating blocks; and the ring's bytes per
device operation (how long a ring lasts).

The network is the demo CNN (examples' demo model) unless --model names an ONNX file. Medians of
--repeats blocks of --runs runs each, traced and untraced blocks alternating (which goes first
alternates too): on a noisy machine many short blocks give a steadier median than a few long ones,
and the ratio printed is the median of each pair's ratio.
The issue's goal: traced / untraced <= 1.2x with register writes off (the default classes;
--reg-writes adds them, one event per register write, for information).

Run: python bench/bench_trace.py [--model m.onnx] [--runs 5] [--repeats 101] [--reg-writes]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pydla
from pydla.compiler.api import compile_model
from pydla.demo import build_demo_model
from pydla.deviceapi.generated import dla_regs as R
from pydla.trace import Capture
from pydla.trace.capture import DEFAULT_MASK

REG_WRITE_CLASS = int(R.trace_class_e.REG_WRITE)

GOAL = 1.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="an ONNX model (default: the demo CNN)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=101)
    parser.add_argument("--reg-writes", action="store_true", help="trace register writes too")
    args = parser.parse_args()
    if args.model:
        import onnx

        model = onnx.load(args.model)
    else:
        model = build_demo_model()
    blob = compile_model(model).blob
    # Two sessions of the same network, one traced from start to end: short blocks of runs on each,
    # alternating, so that the machine's drift falls on both sides alike.
    plain_sess, traced_sess = pydla.Session(blob), pydla.Session(blob)
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in plain_sess.inputs}
    for sess in (plain_sess, traced_sess):
        for _ in range(5):
            sess.run(feeds)
    mask = DEFAULT_MASK | (REG_WRITE_CLASS if args.reg_writes else 0)
    capture = Capture(traced_sess.runtime, size=256 << 20, mask=mask)
    traced_sess.run(feeds)  # the capture's first run: its ring's first pages

    runs: int = args.runs

    def block(sess: pydla.Session) -> float:
        t0 = time.perf_counter()
        for _ in range(runs):
            sess.run(feeds)
        return (time.perf_counter() - t0) / runs

    plain: list[float] = []
    traced: list[float] = []
    for i in range(args.repeats):
        for mode in (("plain", "traced") if i % 2 == 0 else ("traced", "plain")):
            if mode == "plain":
                plain.append(block(plain_sess))
            else:
                traced.append(block(traced_sess))
    result = capture.finish()
    ops = len(result.ops) // (args.repeats * args.runs + 1)
    events = result.contents.events
    used = result.contents.head - (events[0].position if events else 0)
    ring_bytes = used / max(1, len(result.ops))
    plain_sess.close()
    traced_sess.close()
    p, t = statistics.median(plain) * 1e3, statistics.median(traced) * 1e3
    print(f"untraced run: {p:.3f} ms (median of {args.repeats} blocks of {args.runs} runs)")
    print(f"traced run:   {t:.3f} ms")
    # The ratio of each traced block to the untraced block measured beside it, then their median:
    # drift on a shared machine falls on both blocks of a pair.
    ratio = statistics.median(a / b for a, b in zip(traced, plain, strict=True))
    goal = "register writes on: no goal" if args.reg_writes else \
        f"goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'}"
    print(f"traced / untraced: {ratio:.2f}x ({goal}); {ops} device operations per run, "
          f"{ring_bytes:.0f} ring bytes per operation")


if __name__ == "__main__":
    main()
