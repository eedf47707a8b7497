"""Headed against headless, in one run: the same work with the engine scheduler in the host's KMD
(``full``) and on the device's microcontroller behind the device-API mailbox (``full-headed``).

1. Submit round trip: IRuntime.submit() of a one-operation network (one ONNX Relu on 1x8x4x4,
   compiled once), in-process, in deterministic and in threaded device mode; the input and output
   bound once, then each submit timed. Headed adds: the address list written to the mailbox, the
   command encoded and put in the ring, the doorbell, the firmware decoding it, checking the list and
   the descriptors (its cache), the task_done event and the mailbox interrupt back.
2. ResNet-18 (224x224 fp32, the network of bench/bench_resnet18_kmd.py) submitted through the KMD,
   deterministic mode: one task of some 60 operations.
3. MobileNet-v2 32x32 (bench/bench_session.py's network) through ``pydla.Session.run``, deterministic
   mode: some hundred small operations, where the per-operation cost shows.

Blocks of headless and headed submits alternate; medians (and p90 for the round trip) are printed
with the ratio headed / headless. The outputs of both modes are compared bit for bit. The goals of
the performance issue: <= 2.0x on the submit round trip, <= 1.1x on each network; each ratio is
printed with met / NOT met.

Run: python bench/bench_headed.py [--repeats 5] [--block 200] [--skip-resnet] [--skip-mobilenet]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import pydla

CONFIGS = ("full", "full-headed")
GOAL = 2.0  # the submit round trip, headed / headless
GOAL_NETWORK = 1.1  # ResNet-18, MobileNet-v2 32x32


def _relu_model() -> Any:
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _runtime(blob: bytes, config: str, mode: str) -> tuple[Any, Callable[[], bytes]]:
    rt = pydla.createRuntime(config=config, mode=mode)
    rt.load(blob)
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    mem_in, mem_out = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
    mem_in.array(np.float32, d_in.dims)[...] = np.random.default_rng(1).standard_normal(d_in.dims)
    rt.bindInputTensor(0, mem_in)
    rt.bindOutputTensor(0, mem_out)
    return rt, lambda: mem_out.array(np.float32, d_out.dims).tobytes()


def submit_round_trip(repeats: int, block: int) -> dict[str, float]:
    from pydla.compiler.api import compile_model

    blob = bytes(compile_model(_relu_model()).blob)
    ratios = {}
    for mode in ("deterministic", "threaded"):
        runtimes = {c: _runtime(blob, c, mode) for c in CONFIGS}
        times: dict[str, list[float]] = {c: [] for c in CONFIGS}
        for rt, _ in runtimes.values():
            for _ in range(50):
                rt.submit()  # warm: caches, threads
        for _ in range(repeats):
            for c, (rt, _) in runtimes.items():
                for _ in range(block):
                    t0 = time.perf_counter()
                    rt.submit()
                    times[c].append(time.perf_counter() - t0)
        outputs = {c: read() for c, (_, read) in runtimes.items()}
        assert outputs["full"] == outputs["full-headed"], "headed and headless outputs differ"
        med = {c: statistics.median(t) * 1e6 for c, t in times.items()}
        p90 = {c: sorted(t)[int(0.9 * len(t))] * 1e6 for c, t in times.items()}
        ratio = med["full-headed"] / med["full"]
        ratios[mode] = ratio
        print(f"submit round trip, {mode:13}: headless {med['full']:7.1f} us (p90 {p90['full']:7.1f}), "
              f"headed {med['full-headed']:7.1f} us (p90 {p90['full-headed']:7.1f}); "
              f"headed / headless {ratio:.2f}x (goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'})")
        for rt, _ in runtimes.values():
            rt.close()
    return ratios


def resnet18(repeats: int) -> float:
    from pydla.composition.virtual_port import VirtualDevicePort
    from pydla.hw.device import VirtualDevice
    from pydla.kmd.driver import Kmd

    path = Path(__file__).with_name("bench_resnet18_kmd.py")
    spec = importlib.util.spec_from_file_location("bench_resnet18_kmd", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    net = module.Net()
    _, outs = module.build(net)
    built = net.tb.build()
    x = net.rng.standard_normal((3, 224, 224)).astype(np.float32)
    runs: dict[str, Callable[[], bytes]] = {}
    closers = []
    for config in CONFIGS:
        dev = VirtualDevice(config, mode="deterministic")
        kmd = Kmd(VirtualDevicePort(dev))
        ctx = kmd.open_context()
        loaded = built.load(kmd, ctx)
        for name, value in {"input": x, **net.stored}.items():
            kmd.bo_array(ctx, loaded.handles[name])[:value.nbytes] = value.view(np.uint8).ravel()
        out = loaded.handles[outs["output"].buffer]

        def run(kmd: Kmd = kmd, ctx: int = ctx, loaded: Any = loaded, out: int = out) -> bytes:
            kmd.submit(ctx, loaded.addresses, timeout_ms=600_000).wait(600_000)
            return kmd.bo_array(ctx, out).view(np.float32)[:1000].tobytes()

        runs[config] = run
        closers.append((kmd, dev))
    results = {c: run() for c, run in runs.items()}
    assert results["full"] == results["full-headed"], "ResNet-18: headed and headless outputs differ"
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for _ in range(repeats):
        for c, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[c].append(time.perf_counter() - t0)
    med = {c: statistics.median(t) * 1e3 for c, t in times.items()}
    ratio = med["full-headed"] / med["full"]
    print(f"ResNet-18 through the KMD ({len(built.operations)} operations, deterministic): headless "
          f"{med['full']:.1f} ms, headed {med['full-headed']:.1f} ms; headed / headless {ratio:.2f}x "
          f"(goal <= {GOAL_NETWORK}: {'met' if ratio <= GOAL_NETWORK else 'NOT met'}; outputs identical)")
    for kmd, dev in closers:
        kmd.close()
        dev.close()
    return ratio


def mobilenet_v2_32(repeats: int, block: int = 5) -> float:
    from bench_session import mobilenetv2  # bench/ is the script's folder: on sys.path

    model = mobilenetv2(32)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    name = model.graph.input[0].name
    sessions = {c: pydla.Session(model, config=c) for c in CONFIGS}
    try:
        results = {c: s.run(None, {name: x})[0].tobytes() for c, s in sessions.items()}
        assert results["full"] == results["full-headed"], "MobileNet-v2: headed and headless outputs differ"
        times: dict[str, list[float]] = {c: [] for c in CONFIGS}
        for _ in range(repeats):
            for c, s in sessions.items():
                s.run(None, {name: x})  # untimed: the other side's block ran last
                for _ in range(block):
                    t0 = time.perf_counter()
                    s.run(None, {name: x})
                    times[c].append(time.perf_counter() - t0)
    finally:
        for s in sessions.values():
            s.close()
    med = {c: statistics.median(t) * 1e3 for c, t in times.items()}
    ratio = med["full-headed"] / med["full"]
    print(f"MobileNet-v2 32x32 through Session.run (deterministic): headless {med['full']:.2f} ms, headed "
          f"{med['full-headed']:.2f} ms; headed / headless {ratio:.2f}x (goal <= {GOAL_NETWORK}: "
          f"{'met' if ratio <= GOAL_NETWORK else 'NOT met'}; outputs identical)")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--skip-resnet", action="store_true")
    parser.add_argument("--skip-mobilenet", action="store_true")
    args = parser.parse_args()
    submit_round_trip(args.repeats, args.block)
    if not args.skip_resnet:
        resnet18(args.repeats)
    if not args.skip_mobilenet:
        mobilenet_v2_32(args.repeats)


if __name__ == "__main__":
    main()
