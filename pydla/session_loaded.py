"""A :class:`pydla.Session`'s network loaded for one set of input shapes, in a device context of its
own (a runtime on the session's port): a model with dynamic axes has one per input shapes it ran
with (the session keeps the most recently used ones), any other model exactly one.

It owns the memory its runs use by default, knows which memory the runtime has bound now (a binding
of the application's may have bound its own), and frees the device values the application dropped.

Usage (by the session)::

    loaded = Loaded(port, device, timeout_ms, blob, "model.dla")
    loaded.bind(loaded.in_mems, loaded.out_mems)     # rebinds only what changed
    loaded.runtime.submit()
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.loadable.container import NUMPY_TYPES
from pydla.model_info import TensorInfo
from pydla.portability.interface import NvDlaMemHandle, NvDlaPort
from pydla.umd.nvdla_tensor import DenseStaging, dtype_of
from pydla.umd.runtime import IRuntime

if TYPE_CHECKING:
    from pydla.ort_values import OrtValue

Mems = list[NvDlaMemHandle | None]


class Loaded:
    """See the module docstring. ``inputs`` / ``outputs`` have the loaded network's shapes;
    ``in_mems`` / ``out_mems`` are its own memory (None for an empty tensor: nothing to bind)."""

    def __init__(self, port: NvDlaPort, device: int, timeout_ms: int, blob: bytes, name: str | None) -> None:
        self.runtime = IRuntime(port, device, timeout_ms=timeout_ms)
        self.closed = False
        # The device values in this context that the application may still hold (OrtValues): while
        # one lives, the session keeps this network loaded. Values gone leave their memory here.
        self.users: weakref.WeakSet[OrtValue] = weakref.WeakSet()
        self._to_free: list[NvDlaMemHandle] = []
        try:
            rt = self.runtime
            rt.load(blob, name=name)
            self.nvdla: DenseStaging | None = None
            if rt.nvdla is not None:  # an NVDLA Loadable: dense arrays, converted around each run
                self._load_nvdla(rt)
                return
            in_descs = [rt.getInputTensorDesc(i) for i in range(rt.getNumInputTensors())]
            out_descs = [rt.getOutputTensorDesc(i) for i in range(rt.getNumOutputTensors())]
            self.inputs = [TensorInfo(d.name, d.dims, NUMPY_TYPES[d.data_type]) for d in in_descs]
            self.outputs = [TensorInfo(d.name, d.dims, NUMPY_TYPES[d.data_type]) for d in out_descs]
            # An empty tensor (a dimension of 0) has no bytes: no memory, nothing to bind or copy.
            self.in_mems: Mems = [rt.allocateSystemMemory(d.size) if d.size else None for d in in_descs]
            self.out_mems: Mems = [rt.allocateSystemMemory(d.size) if d.size else None for d in out_descs]
            self._bound_in: Mems = [None] * len(in_descs)
            self._bound_out: Mems = [None] * len(out_descs)
            self._own_views()
            self.bind(self.in_mems, self.out_mems)
        except BaseException as e:
            self.close(cancel=isinstance(e, KeyboardInterrupt))
            raise

    def _load_nvdla(self, rt: IRuntime) -> None:
        self.nvdla = DenseStaging(rt)
        self.inputs = [TensorInfo(d.name, DenseStaging.shape(d), dtype_of(d)) for d in self.nvdla.inputs]
        self.outputs = [TensorInfo(d.name, DenseStaging.shape(d), dtype_of(d)) for d in self.nvdla.outputs]
        sizes = [[int(np.prod(d.dims)) * dtype_of(d).itemsize for d in ds]
                 for ds in (self.nvdla.inputs, self.nvdla.outputs)]
        self.in_mems = [rt.allocateSystemMemory(n) if n else None for n in sizes[0]]
        self.out_mems = [rt.allocateSystemMemory(n) if n else None for n in sizes[1]]
        self._bound_in, self._bound_out = list(self.in_mems), list(self.out_mems)
        self._own_views()

    def _own_views(self) -> None:
        # Its own memory is never freed before the network is: its views are made once, not at
        # every run (a run's copies in and out go through them).
        self.in_views = [self.array(m, t) for m, t in zip(self.in_mems, self.inputs, strict=True)]
        self.out_views = [self.array(m, t) for m, t in zip(self.out_mems, self.outputs, strict=True)]

    def submit(self) -> None:
        """Run the network with the memory bound now."""
        if self.nvdla is None:
            self.runtime.submit()
            return
        ins = {i: m for i, m in enumerate(self._bound_in) if m is not None}
        outs = {i: m for i, m in enumerate(self._bound_out) if m is not None}
        self.nvdla.run(ins, outs)

    @property
    def pinned(self) -> bool:
        """Whether the application holds a device value of this context (so it stays loaded)."""
        return any(True for _ in self.users)

    def bind(self, ins: Mems, outs: Mems) -> None:
        """Have the runtime use ``ins`` and ``outs`` (rebinding only those that changed)."""
        rt = self.runtime
        if self.nvdla is not None:  # dense memory: converted to the device buffers at submit()
            self._bound_in = [m if m is not None else b for m, b in zip(ins, self._bound_in, strict=True)]
            self._bound_out = [m if m is not None else b for m, b in zip(outs, self._bound_out, strict=True)]
            return
        for i, mem in enumerate(ins):
            if mem is not None and mem is not self._bound_in[i]:
                rt.bindInputTensor(i, mem)
                self._bound_in[i] = mem
        for i, mem in enumerate(outs):
            if mem is not None and mem is not self._bound_out[i]:
                rt.bindOutputTensor(i, mem)
                self._bound_out[i] = mem

    def array(self, mem: NvDlaMemHandle | None, t: TensorInfo) -> np.ndarray:
        """The tensor ``t`` in ``mem`` (an empty array for an empty tensor)."""
        shape = tuple(int(d) for d in t.shape if d is not None)
        return np.empty(shape, t.dtype) if mem is None else mem.array(t.dtype, shape)

    def allocate(self, shape: tuple[int, ...],
                 dtype: np.dtype[Any]) -> tuple[NvDlaMemHandle | None, np.ndarray]:
        """Device memory for an array of ``shape`` and ``dtype``, and its view (no memory for an
        empty array)."""
        self.collect()
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size == 0:
            return None, np.empty(shape, dtype)
        mem = self.runtime.allocateSystemMemory(size)
        return mem, mem.array(dtype, shape)

    def defer_free(self, mem: NvDlaMemHandle) -> None:
        """Free ``mem`` at the next call (a value's finalizer calls this, from any thread)."""
        self._to_free.append(mem)

    def collect(self) -> None:
        """Free the memory of the device values gone (the caller holds the session's lock)."""
        while self._to_free:
            mem = self._to_free.pop()
            if self.closed:
                continue
            for bound in (self._bound_in, self._bound_out):
                for i, m in enumerate(bound):
                    if m is mem:  # bound still: the runtime's binding goes with it
                        bound[i] = None
            try:
                self.runtime.freeSystemMemory(mem)
            except DlaError as e:
                if e.code != NvError.InvalidState:
                    raise

    def close(self, *, cancel: bool = False) -> None:
        """Free everything (``cancel``: runs in flight are cancelled at once)."""
        if self.closed:
            return
        self.closed = True
        self._to_free.clear()
        self.runtime.close(cancel=cancel)
