"""Custom SHAVE kernels run on numpy arrays through the whole stack: :class:`ShaveKernel` (exported as
``pydla.ShaveKernel``) wraps one call of a kernel ELF in a loadable with one SHAVE task list
(:func:`loadable`) and runs it with a :class:`pydla.Session`, following the argument convention of
:mod:`pydla.kernels`.

Usage::

    k = pydla.ShaveKernel("scale_add.elf")                  # path or ELF bytes
    y = k(x, params=struct.pack("<ff", 2.0, 1.0))           # one output, shaped and typed like x
    y, = k.run([x], outputs=[(x.shape, np.float32)], params=b"...")
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.kernels.build import runtime_elf
from pydla.kernels.image import KernelImage, check_elf, read_elf
from pydla.kernels.invocation import CUSTOM_KERNEL_ID, Spec, buffer_name, params_bytes, plan_invocation
from pydla.kernels.memref import DEFAULT_STACK
from pydla.loadable.shave_task import task_list
from pydla.loadable.taskbuilder import Ref

__all__ = ["ShaveKernel", "loadable"]

CACHED_LOADABLES = 8  # per kernel: distinct (shapes, dtypes, params) kept loaded


def _nbytes(spec: Spec) -> int:
    return int(np.prod(spec[0], dtype=np.int64)) * spec[1].itemsize


def loadable(image: KernelImage, inputs: Sequence[Spec], outputs: Sequence[Spec], params: bytes, *,
             config: str = "full", stack: int = DEFAULT_STACK, name: str = "kernel") -> bytes:
    """A loadable running ``image`` once on tensors ``in0``.. ``out0``.. (see the module docstring).

    Usage: ``pydla.Session(loadable(image, [((8,), f32)], [((8,), f32)], params)).run({"in0": x})``
    """
    from pydla.loadable.container import NUMPY_TYPES, LoadableWriter
    from pydla.target.config import load_config

    cfg = load_config(config)
    if cfg.shave is None or cfg.shave.tiles == 0:
        raise DlaError(NvError.NotSupported, f"kernel '{name}': device configuration '{cfg.name}' has no "
                                             "SHAVE tiles (use 'full')")
    shave = cfg.shave
    inv = plan_invocation(image, inputs, outputs, params, shave.cmx_bytes, f"kernel '{name}'", stack)
    runtime = runtime_elf()
    kernel = buffer_name(name)
    codes = {d: t for t, d in NUMPY_TYPES.items()}
    ins = [Ref(f"in{i}", 0, _nbytes(spec)) for i, spec in enumerate(inputs)]
    outs = [Ref(f"out{i}", 0, _nbytes(spec)) for i, spec in enumerate(outputs)]
    sb = task_list(shave.tiles, shave.cmx_bytes, shave.barriers, Ref("shave_runtime", 0, len(runtime)),
                   Ref(kernel, 0, len(image.elf)), image, inv, ins, outs, kernel_id=CUSTOM_KERNEL_ID,
                   name=name)
    built = sb.build()
    lw = LoadableWriter(cfg.name)
    lw.add_weights("shave_runtime", runtime)
    lw.add_weights(kernel, image.elf)
    buffers: list[dict[str, Any]] = []
    for i, ref in enumerate([*ins, *outs]):
        kind = "input" if i < len(ins) else "output"
        lw.add_memory(ref.buffer, kind, ref.size)
        buffers.append({"name": ref.buffer, "type": kind})
    for weight, size in (("shave_runtime", len(runtime)), (kernel, len(image.elf))):
        lw.add_memory(weight, "weight", size)
        buffers.append({"name": weight, "type": "weight", "size": size})
    names = [b["name"] for b in buffers]
    for i, (shape, dtype) in enumerate(inputs):
        lw.add_tensor(f"in{i}", names.index(f"in{i}"), tuple(shape), int(codes[dtype]), "input", i)
    for i, (shape, dtype) in enumerate(outputs):
        lw.add_tensor(f"out{i}", names.index(f"out{i}"), tuple(shape), int(codes[dtype]), "output", i)
    arguments = {n: i for i, n in enumerate(b for b in built.buffers if b != "descriptors")}
    lw.add_control_code("task0", built.control_code(arguments))
    lw.set_recipe({"header": {"device": cfg.name, "version": "1.0.0"},
                   "resources": {"buffers": buffers,
                                 "kernels": [{"name": "task0", "instance": "dla", "ctrlcode": "task0"}]},
                   "execution": {"runs": [{"name": "task0", "where": "npu", "arguments": [
                       {"name": n, "argidx": i} for n, i in arguments.items()]}]}})
    return lw.build()


class ShaveKernel:
    """A custom SHAVE kernel ELF run on numpy arrays through the runtime (a loadable with one SHAVE
    task list, submitted like any network), following the argument convention of
    :mod:`pydla.kernels`. Loadables are built and loaded once per (shapes, dtypes, params) and kept
    (the last few), so repeated calls cost one run each.

    Usage::

        with pydla.ShaveKernel("scale_add.elf") as k:
            y = k(x, params=np.array([2.0, 1.0], np.float32))     # y = 2 x + 1
            a, b = k.run([x, z], outputs=[(x.shape, np.float32)] * 2)

    Parameters:
        elf: the kernel's ELF (a path, or its bytes), built with ``pydla kernel build``.
        entry: the function to enter instead of the ELF's entry point (needs an unstripped ELF).
        config: the device configuration; it must have SHAVE tiles ("full").
        port, timeout_ms: as :class:`pydla.Session`.
        stack_bytes: the tile's stack (default 8 KiB; a multiple of 16).
    """

    def __init__(self, elf: str | os.PathLike[str] | bytes, *, entry: str | None = None, config: str = "full",
                 port: str | None = None, timeout_ms: int = 60_000, stack_bytes: int = DEFAULT_STACK) -> None:
        data, self.name = read_elf(elf)
        self.image = check_elf(data, f"kernel '{self.name}'", entry)
        self.config, self.port, self.timeout_ms, self.stack_bytes = config, port, timeout_ms, stack_bytes
        self._sessions: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, *inputs: Any, params: Any = None, output: Spec | None = None) -> np.ndarray:
        """One output (``output``: (shape, dtype); default: input 0's)."""
        return self.run(inputs, [output] if output is not None else None, params)[0]

    def run(self, inputs: Sequence[Any], outputs: Sequence[tuple[Sequence[int], Any]] | None = None,
            params: Any = None) -> list[np.ndarray]:
        """Call the kernel once: ``inputs`` (arrays), ``outputs`` ((shape, dtype) each; default one
        like input 0), ``params`` (bytes, a ctypes object or a numpy array) after the MemRefData.
        Returns the outputs' arrays."""
        what = f"kernel '{self.name}'"
        arrays = [np.ascontiguousarray(x) for x in inputs]
        if outputs is None:
            if not arrays:
                raise DlaError(NvError.BadParameter, f"{what}: no inputs, so give outputs=[(shape, dtype)]")
            outputs = [(arrays[0].shape, arrays[0].dtype)]
        out_specs: list[Spec] = []
        for k, spec in enumerate(outputs):
            try:
                shape, dtype = spec
                out_specs.append((tuple(int(d) for d in shape), np.dtype(dtype)))
            except (TypeError, ValueError):
                raise DlaError(NvError.BadParameter,
                               f"{what}: output {k} is {spec!r}, not (shape, dtype)") from None
        in_specs: list[Spec] = [(a.shape, a.dtype) for a in arrays]
        raw = params_bytes(params, what)
        key = (tuple(in_specs), tuple(out_specs), raw)
        with self._lock:
            session = self._session(key, in_specs, out_specs, raw)
            try:
                result = session.run({f"in{i}": a for i, a in enumerate(arrays)})
            except DlaError as e:  # a fault of the kernel, as the driver reports it: say whose
                raise DlaError(e.code, f"{what}: {e.message}") from e
        return [np.array(result[f"out{i}"]) for i in range(len(out_specs))]

    def _session(self, key: tuple[Any, ...], inputs: list[Spec], outputs: list[Spec], params: bytes) -> Any:
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            return session
        from pydla.session import Session

        blob = loadable(self.image, inputs, outputs, params, config=self.config, stack=self.stack_bytes,
                        name=self.name)
        session = Session(blob, port=self.port, config=self.config, timeout_ms=self.timeout_ms)
        self._sessions[key] = session
        while len(self._sessions) > CACHED_LOADABLES:
            self._sessions.popitem(last=False)[1].close()
        return session

    def close(self) -> None:
        """Close the runtimes of the loadables kept loaded."""
        with self._lock:
            while self._sessions:
                self._sessions.popitem()[1].close()

    def __enter__(self) -> ShaveKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
