"""How compile time grows with the size of the graph: pydla's compiler against onnxruntime's
session creation for the same model, in one run.

The model is a chain of N residual blocks built here with onnx.helper (Conv 3x3 -> Relu ->
Add(block input), 8 channels of 8x8, random weights: small, so that the graph's size and not its
weights is measured). pydla compiles it at two sizes (1,000 and 10,000 blocks by default); the
anchor is onnxruntime's InferenceSession creation for the same serialized model, which checks,
optimizes and plans the graph as a compiler does. Printed: the compile time per ONNX node at each
size and their ratio (goal <= 1.3: compile time grows linearly with the graph), the total for the
larger model (goal < 10 s at 10,000 blocks), and pydla / onnxruntime at each size. Medians of
--repeats runs of the smaller model and --big-repeats of the larger, the two sizes alternating.

Run: python bench/bench_compile_scaling.py [--small 1000] [--big 10000] [--repeats 3] [--big-repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pydla.compiler.api import compile_model

CHANNELS, SIZE = 8, 8
PER_NODE_RATIO_GOAL = 1.3
BIG_TOTAL_GOAL_S = 10.0


def chain(blocks: int, seed: int = 0) -> Any:
    """N blocks of Conv 3x3 (with bias) -> Relu -> Add(the block's input), opset 13, batch 1."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "input"
    for i in range(blocks):
        w = (rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) * 0.05).astype(np.float32)
        b = (rng.standard_normal(CHANNELS) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                   name=f"conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Add", [f"r{i}", x], [f"a{i}"], name=f"add{i}")]
        x = f"a{i}"
    shape = [1, CHANNELS, SIZE, SIZE]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def ort_session(model: Any) -> Callable[[], object] | None:
    """Creating onnxruntime's session for ``model`` (None without onnxruntime)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    data = model.SerializeToString()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # one core, as pydla's compiler uses
    return lambda: ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Goals: per-node ratio <= 1.3, larger model < 10 s.")
    parser.add_argument("--small", type=int, default=1000, help="blocks of the smaller model (default 1000)")
    parser.add_argument("--big", type=int, default=10000, help="blocks of the larger model (default 10000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the smaller model (median quoted)")
    parser.add_argument("--big-repeats", type=int, default=3, help="runs of the larger model (median quoted)")
    args = parser.parse_args()
    models = {blocks: chain(blocks) for blocks in (args.small, args.big)}
    repeats = {args.small: args.repeats, args.big: args.big_repeats}
    times: dict[int, list[float]] = {blocks: [] for blocks in models}
    anchors: dict[int, list[float]] = {blocks: [] for blocks in models}
    # The two sizes alternate, round by round, so that a busy spell of the machine weighs on both.
    for round_ in range(max(repeats.values())):
        for blocks, model in models.items():
            if round_ < repeats[blocks]:
                times[blocks].append(timed(lambda: compile_model(model)))  # noqa: B023 (called at once)
                create = ort_session(model)
                if create is not None:
                    anchors[blocks].append(timed(create))
    per_node: dict[int, float] = {}
    for blocks, model in models.items():
        nodes = len(model.graph.node)
        total = statistics.median(times[blocks])
        per_node[blocks] = total / nodes
        anchor = statistics.median(anchors[blocks]) if anchors[blocks] else None
        versus = (f"; onnxruntime session {anchor * 1e3:8.0f} ms, pydla / onnxruntime {total / anchor:5.1f}x"
                  if anchor else "; onnxruntime not installed")
        print(f"{blocks:6d} blocks ({nodes:6d} nodes): compile {total * 1e3:8.0f} ms median, "
              f"{per_node[blocks] * 1e6:6.1f} us per node{versus}")
    ratio = per_node[args.big] / per_node[args.small]
    big_total = statistics.median(times[args.big])
    ok_ratio = ratio <= PER_NODE_RATIO_GOAL
    ok_total = big_total < BIG_TOTAL_GOAL_S or args.big != 10000
    print(f"per-node time {args.big} / {args.small} blocks: {ratio:.2f} (goal <= {PER_NODE_RATIO_GOAL}: "
          f"{'met' if ok_ratio else 'NOT met'})")
    print(f"total for {args.big} blocks: {big_total:.2f} s (goal < {BIG_TOTAL_GOAL_S:.0f} s at 10000 blocks: "
          f"{'met' if ok_total else 'NOT met'})")
    return 0 if ok_ratio and ok_total else 1


if __name__ == "__main__":
    sys.exit(main())
