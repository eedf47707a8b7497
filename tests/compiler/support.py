"""Running a compiled loadable's NPU task through the KMD (what the UMD's runner will do), and
building one-node and small ONNX models to compare against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from pydla.elf.controlcode import FIXED_ENTRIES, SECTIONS
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.kmd.port import AddressEntry
from pydla.loadable.container import Loadable


def run_loadable(blob: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    lo = Loadable.open(blob)
    dev = VirtualDevice(lo.device)
    kmd = Kmd(dev)
    try:
        ctx = kmd.open_context()
        handles = {}
        for name, m in lo.memory.items():
            handles[name] = kmd.bo_create(ctx, m.size)
            if m.kind == "weight":
                kmd.bo_array(ctx, handles[name])[:] = np.frombuffer(lo.weights(name), np.uint8)
        for t in lo.tensors("input"):
            data = np.ascontiguousarray(feeds[t.name], dtype=np.float32).view(np.uint8).ravel()
            kmd.bo_array(ctx, handles[t.buffer])[t.offset:t.offset + data.size] = data
        for run in lo.recipe.runs:
            if run.where == "cpu":
                _cpu_run(kmd, ctx, handles, lo.recipe.cpus[run.name].library_path, run)
                continue
            code = lo.control_code(run.name)
            parts = code.patch({a.argidx: FIXED_ENTRIES + i for i, a in enumerate(run.arguments)})
            addresses = []
            for section in SECTIONS:
                data = parts[section] or b"\0" * 8
                h = kmd.bo_create(ctx, len(data))
                kmd.bo_array(ctx, h)[:] = np.frombuffer(data, np.uint8)
                addresses.append(AddressEntry(h))
            addresses += [AddressEntry(handles[a.name], a.offset) for a in run.arguments]
            kmd.submit(ctx, addresses, timeout_ms=60_000).wait(120_000)
        out = {}
        for t in lo.tensors("output"):
            raw = kmd.bo_array(ctx, handles[t.buffer])[t.offset:t.offset + t.size]
            out[t.name] = raw.view(np.float32).reshape(t.dims).copy()
        return out
    finally:
        kmd.close()
        dev.close()


def _cpu_run(kmd: Kmd, ctx: int, handles: dict[str, int], library_path: str, run: Any) -> None:
    """A CPU run as the seed describes it: library_init, lookup, call with args in argidx order."""
    import importlib.util
    import types
    from pathlib import Path

    import pydla

    path = Path(pydla.__file__).parent / library_path
    spec = importlib.util.spec_from_file_location("cpulib_under_test", path)
    assert spec is not None and spec.loader is not None
    lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    init = types.SimpleNamespace(lookup_fn=None)
    lib.library_init(init)
    found = types.SimpleNamespace(num_args=0, callable=None)
    init.lookup_fn(run.name, found)
    args: list[Any] = [None] * found.num_args
    for a in run.arguments:
        whole = kmd.bo_array(ctx, handles[a.name])
        args[a.argidx] = whole[a.offset:a.offset + (a.size or whole.size - a.offset)]
    for c in run.constants:
        args[c.argidx] = c.value
    found.callable(args)


def model(nodes: list[Any], inputs: dict[str, tuple[int, ...]], outputs: list[str],
          inits: dict[str, np.ndarray] | None = None, opset: int = 13) -> Any:
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v.astype(np.float32) if v.dtype == np.float64 else v, k)
         for k, v in (inits or {}).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def reference(m: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))
