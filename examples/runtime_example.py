"""The NVDLA runtime API, step by step, on the demo model: create a runtime, load a loadable,
describe its tensors, allocate and bind memory, run blocking (submit) and non-blocking
(submitNonBlocking, then wait on its sync), close.

Run: python examples/runtime_example.py [model.dla]   (from any directory; without an argument the
demo model next to this script is compiled first, as `pydla compile examples/demo_model.onnx` does)
"""

import sys
from pathlib import Path

import numpy as np

import pydla
from pydla.compiler.api import compile_model

if len(sys.argv) > 1:
    loadable: bytes | Path = Path(sys.argv[1])
else:
    loadable = compile_model(Path(__file__).with_name("demo_model.onnx")).blob

rt = pydla.createRuntime()  # the in-process port: driver and virtual device in this process
try:
    print(f"devices: {rt.getNumDevices()} available of {rt.getMaxDevices()}")
    rt.load(loadable)
    d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
    print(f"input {d_in.name} {d_in.dims} ({d_in.size} bytes), output {d_out.name} {d_out.dims}")

    x_mem = rt.allocateSystemMemory(d_in.size)
    y_mem = rt.allocateSystemMemory(d_out.size)
    rt.bindInputTensor(0, x_mem)
    rt.bindOutputTensor(0, y_mem)
    x = np.random.default_rng(0).standard_normal(d_in.dims).astype(np.float32)
    x_mem.array(np.float32, d_in.dims)[...] = x

    rt.submit()  # blocking
    blocking = y_mem.array(np.float32, d_out.dims).copy()
    print("submit:", " ".join(f"{p:.6f}" for p in blocking.ravel()))

    y_mem.array(np.float32, d_out.dims)[...] = 0
    syncs: list[pydla.ISync] = []
    rt.submitNonBlocking(syncs)  # returns at once; the list gets the output sync
    syncs[0].wait(10_000)  # milliseconds; raises the run's error, or Timeout
    non_blocking = y_mem.array(np.float32, d_out.dims)
    print("submitNonBlocking:", " ".join(f"{p:.6f}" for p in non_blocking.ravel()))
    print("same result:", bool(np.array_equal(blocking, non_blocking)))

    rt.freeSystemMemory(x_mem)
    rt.freeSystemMemory(y_mem)
finally:
    rt.close()
