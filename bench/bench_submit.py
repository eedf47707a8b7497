"""IRuntime.submit() round trip of a one-operation network, in-process, against onnxruntime's run.

The network is one ONNX Relu (default) or one 1x1 Conv on a small float32 tensor (1x8x4x4 unless
--shape says otherwise), compiled with pydla.compiler.compile_model and loaded once into a runtime
from pydla.createRuntime() (deterministic device mode, and again with mode="threaded"); the input and
output tensors are allocated and bound once, then rt.submit() is timed call by call: UMD runner,
portability layer, KMD validation and scheduling, the virtual device computing, the interrupt, the
fence wait. The anchors, measured in the same run and in alternating blocks with the submits:
- onnxruntime's InferenceSession.run of the same one-node ONNX model (CPUExecutionProvider, default
  SessionOptions, so onnxruntime's default intra-op threads; the input fed as a dict each call);
- a bare Python function call (timed in batches of --batch calls, since one call is shorter than
  the clock's resolution; the time per call is printed);
- a thread handoff round trip: queue.Queue ping-pong with a worker thread (put, the worker gets and
  puts back, get), the least a submit that hands work to another thread can cost.
Medians and p90 are printed, with the ratios to the anchors. Goals, each printed with met / NOT met:
in-process submit / onnxruntime run <= 8x (medians), for the deterministic and the threaded mode;
and (the performance issue's) a threaded submit costs at most a deterministic one plus two thread
handoffs (to the device's thread and back), all three measured in this run.

After the timing, --profile-submits deterministic submits (default 2000) run under cProfile, and the
number of Python-level calls per submit is printed: the sum of every function's call count in pstats
(primitive and recursive calls alike) divided by the number of submits (for information: the
performance issue dropped its goal for it, the per-operation figures measure what it stood for).

--per-op runs the device without its command processor (the per-operation path, the reference).

Run: python bench/bench_submit.py [--repeats 7] [--block 200] [--op relu|conv] [--shape 1,8,4,4]
                                  [--profile-submits 2000] [--per-op]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import queue
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pydla

GOAL_ORT_RATIO = 8.0  # in-process submit / onnxruntime InferenceSession.run, medians
GOAL_HANDOFFS = 2  # threaded submit <= deterministic submit + this many thread handoffs


def _weights(shape: tuple[int, ...]) -> np.ndarray:
    c = shape[1]
    return np.random.default_rng(0).standard_normal((c, c, 1, 1)).astype(np.float32)


def _expected(op: str, x: np.ndarray) -> np.ndarray:
    """What the one-node network computes, in numpy."""
    if op == "relu":
        relu: np.ndarray = np.maximum(x, 0)
        return relu
    conv: np.ndarray = np.einsum("kc,nchw->nkhw", _weights(x.shape)[:, :, 0, 0], x)
    return conv


def _model(op: str, shape: tuple[int, ...]) -> Any:
    """A one-node ONNX model (onnx imported only here)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = []
    if op == "relu":
        node = helper.make_node("Relu", ["x"], ["y"])
    else:
        inits = [numpy_helper.from_array(_weights(shape), "w")]
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], op, [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def device_config(per_op: bool) -> Any:
    """The "full" configuration, without its command processor when ``per_op`` (the per-operation
    path: the engine programs, enables and completes each operation from the host)."""
    import dataclasses

    from pydla.target.config import load_config
    config = load_config("full")
    return dataclasses.replace(config, command_processor=False) if per_op else config


def _runtime(blob: bytes, mode: str, shape: tuple[int, ...],
             per_op: bool = False) -> tuple[Any, Callable[[], np.ndarray]]:
    """A runtime with ``blob`` loaded and its tensors bound once; and a function reading the output."""
    rt = pydla.createRuntime(config=device_config(per_op), mode=mode)
    rt.load(blob)
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    mem_in, mem_out = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
    mem_in.array(np.float32, d_in.dims)[...] = np.random.default_rng(1).standard_normal(shape)
    rt.bindInputTensor(0, mem_in)
    rt.bindOutputTensor(0, mem_out)
    return rt, lambda: mem_out.array(np.float32, d_out.dims).copy()


class _PingPong:
    """A worker thread answering each item put on ``ask`` by putting it on ``answer``."""

    def __init__(self) -> None:
        self.ask: queue.Queue[object] = queue.Queue()
        self.answer: queue.Queue[object] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, daemon=True, name="bench-pingpong")
        self.thread.start()

    def _serve(self) -> None:
        while (item := self.ask.get()) is not None:
            self.answer.put(item)

    def round_trip(self) -> None:
        self.ask.put(1)
        self.answer.get()

    def close(self) -> None:
        self.ask.put(None)
        self.thread.join()


def _noop() -> None:
    pass


def _time_each(fn: Callable[[], object], n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _time_batched(fn: Callable[[], object], n: int, batch: int) -> list[float]:
    times = []
    loop = range(batch)
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in loop:
            fn()
        times.append((time.perf_counter() - t0) / batch)
    return times


def _onnxruntime(model: Any) -> Any:
    """An onnxruntime session of ``model``: CPUExecutionProvider, default SessionOptions."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    return ort.InferenceSession(model.SerializeToString(), ort.SessionOptions(),
                                providers=["CPUExecutionProvider"])


def _profiled(run: Callable[[], object], n: int) -> dict[Any, tuple[int, int, float, float, Any]]:
    """cProfile's statistics of ``n`` calls of ``run``: (file, line, function) -> (primitive calls,
    calls, own time, cumulative time, callers)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        run()
    profiler.disable()
    stats: dict[Any, tuple[int, int, float, float, Any]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    return stats


def _calls_per_submit(submit: Callable[[], object], n: int) -> float:
    """Python calls per ``submit()``: cProfile over ``n`` submits, every call counted (primitive or not)."""
    return sum(v[1] for v in _profiled(submit, n).values()) / n


def _p90(ts: list[float]) -> float:
    return statistics.quantiles(ts, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="alternating blocks per measurement")
    parser.add_argument("--block", type=int, default=200, help="timed calls per block")
    parser.add_argument("--batch", type=int, default=1000, help="bare calls per timing of the call anchor")
    parser.add_argument("--op", choices=("relu", "conv"), default="relu", help="the one operation")
    parser.add_argument("--shape", default="1,8,4,4", help="input shape N,C,H,W")
    parser.add_argument("--settle", type=float, default=0.05, help="seconds of sleep before each block")
    parser.add_argument("--per-op", action="store_true",
                        help="the per-operation path: the device without its command processor")
    parser.add_argument("--profile-submits", type=int, default=2000, metavar="N",
                        help="deterministic submits profiled with cProfile after the timing, to count the "
                        "Python calls per submit (0: skip)")
    args = parser.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    if args.profile_submits < 0:
        parser.error("--profile-submits must be >= 0")

    from pydla.compiler.api import compile_model

    model = _model(args.op, shape)
    blob = compile_model(model).blob
    x_check = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ort_session = _onnxruntime(model)
    ort_feed = {"x": x_check}
    np.testing.assert_allclose(ort_session.run(None, ort_feed)[0], _expected(args.op, x_check), rtol=1e-4,
                               atol=1e-5, err_msg="onnxruntime")
    runtimes = {mode: _runtime(blob, mode, shape, args.per_op) for mode in ("deterministic", "threaded")}
    pingpong = _PingPong()
    calls_per_submit: float | None = None
    try:
        for mode, (rt, output) in runtimes.items():
            rt.submit()  # warm up, and check the network computes
            np.testing.assert_allclose(output(), _expected(args.op, x_check), rtol=1e-4, atol=1e-5,
                                       err_msg=mode)
        fns: dict[str, Callable[[int], list[float]]] = {
            "bare function call": lambda n: _time_batched(_noop, n, args.batch),
            "thread handoff (queue ping-pong)": lambda n: _time_each(pingpong.round_trip, n),
            "submit, deterministic": lambda n: _time_each(runtimes["deterministic"][0].submit, n),
            "submit, threaded": lambda n: _time_each(runtimes["threaded"][0].submit, n),
            "onnxruntime run": lambda n: _time_each(lambda: ort_session.run(None, ort_feed), n),
        }
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.repeats):
            for name, fn in fns.items():
                time.sleep(args.settle)
                fn(max(1, args.block // 20))  # dropped: warms caches and wakes threads
                times[name] += fn(args.block)
        if args.profile_submits:
            calls_per_submit = _calls_per_submit(runtimes["deterministic"][0].submit, args.profile_submits)
    finally:
        pingpong.close()
        for rt, _ in runtimes.values():
            rt.close()

    med = {name: statistics.median(ts) for name, ts in times.items()}
    call, handoff = med["bare function call"], med["thread handoff (queue ping-pong)"]
    ort_run = med["onnxruntime run"]
    print(f"one {args.op} on {'x'.join(map(str, shape))} float32, {args.repeats} blocks of {args.block} "
          "timed calls each")
    print(f"{'':34} {'median':>11} {'p90':>11} {'/ call':>9} {'/ handoff':>9} {'/ ort run':>9}")
    for name, ts in times.items():
        print(f"{name:34} {med[name] * 1e6:8.2f} us {_p90(ts) * 1e6:8.2f} us "
              f"{med[name] / call:8.0f}x {med[name] / handoff:8.2f}x {med[name] / ort_run:8.2f}x")
    for mode in ("deterministic", "threaded"):
        ratio = med[f"submit, {mode}"] / ort_run
        verdict = "met" if ratio <= GOAL_ORT_RATIO else "NOT met"
        print(f"goal in-process submit / onnxruntime run <= {GOAL_ORT_RATIO:.0f}x, {mode}: {ratio:.2f}x: "
              f"{verdict}")
    bound = med["submit, deterministic"] + GOAL_HANDOFFS * handoff
    verdict = "met" if med["submit, threaded"] <= bound else "NOT met"
    print(f"goal threaded submit <= deterministic + {GOAL_HANDOFFS} thread handoffs: "
          f"{med['submit, threaded'] * 1e6:.2f} us against {bound * 1e6:.2f} us: {verdict}")
    if calls_per_submit is not None:
        print(f"Python calls per submit: {calls_per_submit:.1f} "
              f"(cProfile, {args.profile_submits} deterministic submits)")


if __name__ == "__main__":
    main()
