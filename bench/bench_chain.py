"""Marginal cost of one device operation: a chain of N 1x1 convolutions against a chain of 1.

Each network is a chain of 1x1 Conv nodes (C -> C channels, no bias) on a small float32 tensor
(1x8x4x4 unless --shape says otherwise), compiled with pydla.compiler.compile_model and run through
``IRuntime.submit()`` with its tensors bound once (deterministic device unless --mode says
otherwise), and through onnxruntime's ``InferenceSession.run`` of the same model. Each chain's run is
timed in alternating blocks (so load on the machine falls on both alike); the marginal cost per
convolution is ``(median(chain N) - median(chain 1)) / (N - 1)``, for pydla and for onnxruntime, and
their ratio is printed against the command-processor issue's goal (<= 4x).

The device operations per block are printed too: the compiler must keep the chain as N convolutions
(a fused chain would measure nothing); each feeds its SDP on the fly (CONV -> SDP, as NVDLA does).

--profile K runs K submits of the long chain under cProfile after the timing and prints the functions
with the most own time per operation: where a device operation's cost goes.

The device is "full" with its command processor (a prepared job runs from one doorbell write);
--per-op runs it without (the per-operation path: one host round trip per device operation).

Run: python bench/bench_chain.py [--length 101] [--repeats 7] [--block 30] [--mode deterministic]
                                 [--shape 1,8,4,4] [--profile 200] [--per-op]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_submit import _time_each, device_config  # bench/ is the script's folder: on sys.path

import pydla

GOAL_RATIO = 4.0  # pydla's marginal cost per convolution / onnxruntime's, medians


def _weights(c: int, i: int) -> np.ndarray:
    # Scaled so that the values stay of order 1 along a long chain.
    w = np.random.default_rng(i).standard_normal((c, c, 1, 1)).astype(np.float32)
    return w / np.float32(np.sqrt(c))


def _model(length: int, shape: tuple[int, ...]) -> Any:
    """A chain of ``length`` 1x1 convolutions (onnx imported only here)."""
    from onnx import TensorProto, helper, numpy_helper

    c = shape[1]
    nodes, inits = [], []
    for i in range(length):
        inits.append(numpy_helper.from_array(_weights(c, i), f"w{i}"))
        out = "y" if i == length - 1 else f"t{i}"
        src = f"t{i - 1}" if i else "x"
        nodes.append(helper.make_node("Conv", [src, f"w{i}"], [out], kernel_shape=[1, 1]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, f"chain{length}", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _expected(length: int, x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64)
    for i in range(length):
        y = np.einsum("kc,nchw->nkhw", _weights(x.shape[1], i)[:, :, 0, 0].astype(np.float64), y)
    return y


class _Chain:
    """One chain: the compiled model loaded into a runtime with its tensors bound, and onnxruntime's."""

    def __init__(self, length: int, shape: tuple[int, ...], mode: str, per_op: bool = False) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]

        from pydla.compiler.api import compile_model

        model = _model(length, shape)
        compiled = compile_model(model)
        self.length = length
        self.rt = pydla.createRuntime(config=device_config(per_op), mode=mode)
        self.rt.load(compiled.blob)
        d_in, d_out = self.rt.getInputTensorDesc(0), self.rt.getOutputTensorDesc(0)
        mem_in, mem_out = self.rt.allocateSystemMemory(d_in.size), self.rt.allocateSystemMemory(d_out.size)
        self.x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        mem_in.array(np.float32, d_in.dims)[...] = self.x
        self.rt.bindInputTensor(0, mem_in)
        self.rt.bindOutputTensor(0, mem_out)
        self.output = lambda: mem_out.array(np.float32, d_out.dims).copy()
        self.ort = ort.InferenceSession(model.SerializeToString(), ort.SessionOptions(),
                                        providers=["CPUExecutionProvider"])
        self.feed = {"x": self.x}
        self.operations = dict(compiled.operations)  # device operations per block

    def check(self) -> None:
        self.rt.submit()
        want = _expected(self.length, self.x)
        np.testing.assert_allclose(self.output(), want, rtol=1e-3, atol=1e-4,
                                   err_msg=f"pydla chain {self.length}")
        np.testing.assert_allclose(self.ort.run(None, self.feed)[0], want, rtol=1e-3, atol=1e-4,
                                   err_msg=f"onnxruntime chain {self.length}")

    def ort_run(self) -> None:
        self.ort.run(None, self.feed)


def _profile(chain: _Chain, submits: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(submits):
        chain.rt.submit()
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    per_op = submits * chain.length
    raw: dict[Any, tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:25]
    total = sum(v[2] for v in raw.values())
    calls = sum(v[1] for v in raw.values())
    print(f"\ncProfile, {submits} submits of the chain of {chain.length}: {total / per_op * 1e6:.1f} us own "
          f"time per operation in all (profiled), {calls / per_op:.0f} Python calls "
          f"per operation")
    print(f"{'own us/op':>10} {'calls/op':>9}  function")
    for (path, line, name), (_, calls, own, _, _) in rows:
        where = f"{path.rsplit('/pydla/', 1)[-1]}:{line}" if "/pydla/" in path else path.rsplit("/", 1)[-1]
        print(f"{own / per_op * 1e6:10.2f} {calls / per_op:9.2f}  {name} ({where})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=101, help="convolutions in the long chain")
    parser.add_argument("--repeats", type=int, default=7, help="alternating blocks per measurement")
    parser.add_argument("--block", type=int, default=30, help="timed runs per block")
    parser.add_argument("--mode", choices=("deterministic", "threaded"), default="deterministic",
                        help="the device's execution mode")
    parser.add_argument("--shape", default="1,8,4,4", help="input shape N,C,H,W")
    parser.add_argument("--per-op", action="store_true",
                        help="the per-operation path: the device without its command processor")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="after the timing, profile K submits of the long chain (0: skip)")
    args = parser.parse_args()
    if args.length < 2:
        parser.error("--length must be at least 2")
    shape = tuple(int(s) for s in args.shape.split(","))
    short, long = _Chain(1, shape, args.mode, args.per_op), _Chain(args.length, shape, args.mode, args.per_op)
    for chain in (short, long):
        chain.check()
    path = "per operation (no command processor)" if args.per_op else "command processor"
    print(f"chains of 1x1 Conv on {'x'.join(map(str, shape))}, {args.mode} device, {path}: device operations "
          f"{short.operations} and {long.operations}")
    if long.operations.get("CONV", 0) - short.operations.get("CONV", 0) != args.length - 1:
        print("warning: the compiler did not keep one device operation per convolution")
    fns: dict[str, Callable[[], object]] = {
        "pydla chain 1": short.rt.submit, f"pydla chain {args.length}": long.rt.submit,
        "onnxruntime chain 1": short.ort_run, f"onnxruntime chain {args.length}": long.ort_run,
    }
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            times[name].extend(_time_each(fn, args.block))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, m in med.items():
        print(f"{name:>26}: median {m * 1e6:9.1f} us")
    n = args.length - 1
    marginal_pydla = (med[f"pydla chain {args.length}"] - med["pydla chain 1"]) / n
    marginal_ort = (med[f"onnxruntime chain {args.length}"] - med["onnxruntime chain 1"]) / n
    ratio = marginal_pydla / marginal_ort
    print(f"marginal cost per convolution: pydla {marginal_pydla * 1e6:.1f} us, onnxruntime "
          f"{marginal_ort * 1e6:.2f} us: {ratio:.1f}x (goal <= {GOAL_RATIO:g}x: "
          f"{'met' if ratio <= GOAL_RATIO else 'NOT met'})")
    if args.profile:
        _profile(long, args.profile)


if __name__ == "__main__":
    main()
