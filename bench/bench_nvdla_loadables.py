"""NVIDIA's regression loadables on the NVDLA configurations against the same work in pydla's own format.

Each NVDLA Loadable of the regression folder runs through the whole stack (createRuntime on its
configuration, the NVDLA runner, the KMD, the firmware's NVDLA front-end, the NVDLA device) and is
timed per ``submit()``; the same operation on the same shapes is built as an ONNX model, compiled for
pydla's ``full`` configuration and timed the same way, in alternating blocks of the same run. The
issue's goal: an NVDLA Loadable runs at least as fast as the same work in pydla's format (ratio <= 1).

    python bench/bench_nvdla_loadables.py [--folder ../shared/nvdla-regression] [--runs 200] [--split]

``--split`` then says where an NVDLA Loadable's submit spends its CPU time (this thread's, so other
processes on a loaded machine do not count), each part without the parts it calls: the UMD's runner,
the KMD with the firmware's scheduling, the firmware's NVDLA register programming, the device's
register file, the device's launch (decoding, the on-the-fly pipeline) and the block kernel.
"""

from __future__ import annotations

import argparse
import fnmatch
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import pydla
from pydla.compiler.api import compile_model

F = TensorProto.FLOAT


def _model(node: Any, x: tuple[int, ...], y: tuple[int, ...], inits: list[Any] | None = None) -> Any:
    graph = helper.make_graph([node], "same_work", [helper.make_tensor_value_info("x", F, list(x))],
                              [helper.make_tensor_value_info("y", F, list(y))], initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def same_work(test: str) -> Any:
    """The ONNX model doing what the regression test's DLA task does, on its shapes."""
    rng = np.random.default_rng(0)
    if test.startswith("CONV_D"):  # 3x3 direct convolution 128 -> 32 on 8x8, padding 1, then ReLU
        w = numpy_helper.from_array(rng.standard_normal((32, 128, 3, 3)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["y"])]
        graph = helper.make_graph(nodes, "same_work", [helper.make_tensor_value_info("x", F, [1, 128, 8, 8])],
                                  [helper.make_tensor_value_info("y", F, [1, 32, 8, 8])], initializer=[w])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if test.startswith("PDP"):
        pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1])
        return _model(pool, (1, 32, 8, 8), (1, 32, 8, 8))
    if test.startswith("SDP"):
        return _model(helper.make_node("Relu", ["x"], ["y"]), (1, 32, 8, 8), (1, 32, 8, 8))
    if test.startswith("CDP"):
        return _model(helper.make_node("LRN", ["x"], ["y"], size=3), (1, 32, 8, 8), (1, 32, 8, 8))
    return None


def runner(model: Any, config: str) -> tuple[Callable[[], None], Any]:
    """A submit of ``model`` (bytes or a path) on ``config``, its inputs and outputs bound."""
    rt = pydla.createRuntime(config=config)
    rt.load(model)
    for i in range(rt.getNumInputTensors()):
        rt.bindInputTensor(i, rt.allocateSystemMemory(max(rt.getInputTensorDesc(i).size, 1)))
    for i in range(rt.getNumOutputTensors()):
        rt.bindOutputTensor(i, rt.allocateSystemMemory(max(rt.getOutputTensorDesc(i).size, 1)))
    return rt.submit, rt


def timed(call: Callable[[], None], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


class Split:
    """Exclusive CPU time per part: each wrapped function's time minus that of the wrapped functions it
    calls."""

    def __init__(self) -> None:
        self.acc: defaultdict[str, float] = defaultdict(float)
        self._stack: list[float] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        inner_call = getattr(owner, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            self._stack.append(0.0)
            try:
                return inner_call(*args, **kwargs)
            finally:
                nested = self._stack.pop()
                spent = time.thread_time() - t0
                self.acc[label] += spent - nested
                if self._stack:
                    self._stack[-1] += spent

        setattr(owner, name, timed_call)


PARTS = ("UMD runner", "KMD + scheduling", "firmware registers", "device registers", "device launch",
         "block kernel")


def split(model: bytes, config: str, runs: int) -> dict[str, float]:
    """Microseconds of CPU per submit of NVDLA Loadable ``model`` in each part of ``PARTS``, ``other``
    (the portability layer, fences) and ``total``, on a runtime made with the parts wrapped."""
    from pydla.firmware.engine import Engine
    from pydla.firmware.nvdla.processors import NvdlaProcessors
    from pydla.hw.nvdla.engine import NvdlaEngine
    from pydla.hw.nvdla_device import NvdlaDevice
    from pydla.kmd.driver import Kmd
    from pydla.umd.nvdla_runner import NvdlaRunner

    wrapped = [(NvdlaRunner, "run", PARTS[0]), (Kmd, "submit_prepared", PARTS[1]), (Kmd, "poll", PARTS[1]),
               *((Engine, n, PARTS[1]) for n in ("dla_execute_task", "dla_isr_handler",
                                                 "dla_process_events")),
               *((NvdlaProcessors, n, PARTS[2]) for n in ("program", "enable", "isr", "start_task",
                                                         "consumer_group")),
               *((NvdlaDevice, n, PARTS[3]) for n in ("reg_write_words", "reg_write_many", "reg_write",
                                                     "reg_read")),
               (NvdlaEngine, "run", PARTS[4]), (NvdlaEngine, "_execute", PARTS[5])]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in wrapped]
    s = Split()
    try:
        for owner, name, label in wrapped:
            s.wrap(owner, name, label)
        submit, rt = runner(model, config)
        for _ in range(3):
            submit()
        s.acc.clear()
        t0 = time.thread_time()
        for _ in range(runs):
            submit()
        total = time.thread_time() - t0
        rt.close()
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
    out = {part: 1e6 * s.acc[part] / runs for part in PARTS}
    out["total"] = 1e6 * total / runs
    out["other"] = out["total"] - sum(out[p] for p in PARTS)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "nvdla-regression")
    ap.add_argument("--runs", type=int, default=200, help="submits per block")
    ap.add_argument("--blocks", type=int, default=5, help="alternating blocks per side")
    ap.add_argument("--split", action="store_true", help="then where an NVDLA submit's CPU time goes")
    ap.add_argument("--only", default="*", help="the tests whose names match this pattern (fnmatch)")
    args = ap.parse_args()
    if not args.folder.is_dir():
        print(f"{args.folder}: no regression folder (--folder)")
        return 1
    print(f"{'test':<20} {'config':<9} {'NVDLA Loadable':>15} {'pydla format':>13} {'ratio':>7}")
    ratios = []
    splits: dict[str, dict[str, float]] = {}
    for fbuf in sorted(args.folder.glob("*/*_fbuf")):
        test = fbuf.name.removesuffix("_fbuf")
        onnx_model = same_work(test)
        if onnx_model is None or not fnmatch.fnmatch(test, args.only):
            continue
        suffix = test.rsplit("_", 1)[-1]
        config = {"small": "nv_small", "large": "nv_large"}.get(suffix, "nv_full")
        nv_submit, nv_rt = runner(fbuf.read_bytes(), config)
        own_submit, own_rt = runner(compile_model(onnx_model).blob, "full")
        nv_times: list[float] = []
        own_times: list[float] = []
        for _ in range(args.blocks):  # alternating, so both see the same machine
            nv_times += timed(nv_submit, args.runs)
            own_times += timed(own_submit, args.runs)
        if args.split:
            splits[test] = split(fbuf.read_bytes(), config, args.runs)
        nv_rt.close()
        own_rt.close()
        nv, own = statistics.median(nv_times), statistics.median(own_times)
        ratios.append(nv / own)
        print(f"{test:<20} {config:<9} {1e6 * nv:>12.1f} us {1e6 * own:>10.1f} us {nv / own:>6.2f}x")
    if not ratios:
        print("no test of a known kind in the folder")
        return 1
    worst = max(ratios)
    print(f"median ratio {statistics.median(ratios):.2f}x, worst {worst:.2f}x; goal <= 1.0x: "
          f"{'met' if worst <= 1.0 else 'NOT met'}")
    if splits:
        print("\nCPU time of an NVDLA Loadable's submit (us, each part without what it calls):")
        columns = (*PARTS, "other")
        print(f"{'test':<20} {'total':>7} " + " ".join(f"{p:>18}" for p in columns))
        for test, parts in splits.items():
            print(f"{test:<20} {parts['total']:>7.0f} " + " ".join(f"{parts[p]:>18.0f}" for p in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
