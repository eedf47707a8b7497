"""The runner (seed 000): executes a loadable's run recipe through a portability layer.

Runs are grouped into runlists of contiguous NPU or CPU runs, executed in order. Buffers with a size
in the recipe (internal, weights) are created by the runner when it is built (weights uploaded from
the loadable once); external buffers (inputs, outputs) are bound by name. Each NPU run's control code
is patched once for the address list the runner builds (descriptor sections first, then the run's
arguments in order); CPU runs call functions of CPU libraries with their arguments in argidx order.

Usage::

    runner = Runner(port, handle, loadable)
    runner.bind_input("in0", mem); runner.bind_output("out0", mem2)
    runner.execute(timeout_ms=10_000)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.elf.controlcode import FIXED_ENTRIES, SECTIONS
from pydla.errors import DlaError, NvError
from pydla.loadable.container import Loadable
from pydla.loadable.recipe import Run
from pydla.portability.interface import NvDlaFence, NvDlaMemHandle, NvDlaPort, NvDlaTask
from pydla.umd.cpu import CpuFunction, CpuLibraries


@dataclass
class _Npu:
    run: Run
    descriptors: list[NvDlaMemHandle]


@dataclass
class _Cpu:
    run: Run
    function: CpuFunction


class Runner:
    """See the module docstring. Safe to execute from several threads (runs are serialised)."""

    def __init__(self, port: NvDlaPort, handle: Any, loadable: Loadable,
                 libraries: CpuLibraries | None = None, timeout_ms: int = 10_000) -> None:
        self.port = port
        self.handle = handle
        self.lo = loadable
        self.timeout_ms = timeout_ms
        self.libraries = libraries or CpuLibraries()
        self._lock = threading.Lock()
        self.owned: dict[str, NvDlaMemHandle] = {}
        self.bound: dict[str, NvDlaMemHandle] = {}
        self.steps: list[_Npu | _Cpu] = []
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self) -> None:
        for name, buf in self.lo.recipe.buffers.items():
            if buf.size is None:
                continue
            mem, data = self.port.NvDlaGetMem(self.handle, buf.size)
            self.owned[name] = mem
            if buf.type == "weight":
                data[:] = np.frombuffer(self.lo.weights(name), dtype=np.uint8)
        for run in self.lo.recipe.runs:
            if run.where == "cpu":
                cpu = self.lo.recipe.cpus[run.name]
                function = self.libraries.lookup(cpu.library_path, run.name)
                given = len(run.arguments) + len(run.constants)
                if given != function.num_args:
                    raise DlaError(NvError.CountMismatch,
                                   f"cpu run '{run.name}': {given} arguments, the function takes "
                                   f"{function.num_args}")
                self.steps.append(_Cpu(run, function))
                continue
            code = self.lo.control_code(run.name)
            parts = code.patch({a.argidx: FIXED_ENTRIES + i for i, a in enumerate(run.arguments)})
            mems = []
            for section in SECTIONS:
                blob = parts[section] or b"\0" * 8
                mem, view = self.port.NvDlaGetMem(self.handle, len(blob))
                view[:] = np.frombuffer(blob, dtype=np.uint8)
                mems.append(mem)
            self.steps.append(_Npu(run, mems))

    # -- binding ----------------------------------------------------------------------------------

    def _bind(self, name: str, mem: NvDlaMemHandle, kinds: tuple[str, ...]) -> None:
        buf = self.lo.recipe.buffers.get(name)
        if buf is None or buf.type not in kinds:
            names = [n for n, b in self.lo.recipe.buffers.items() if b.type in kinds]
            raise DlaError(NvError.BadParameter, f"no {'/'.join(kinds)} buffer '{name}' (there are: "
                                                 f"{', '.join(names)})")
        need = self.lo.memory[name].size
        if mem.size < need:
            raise DlaError(NvError.InvalidSize, f"buffer '{name}' needs {need} bytes, the memory bound to it "
                                                f"has {mem.size}")
        self.bound[name] = mem

    def bind_input(self, name: str, mem: NvDlaMemHandle) -> None:
        self._bind(name, mem, ("input", "inout"))

    def bind_output(self, name: str, mem: NvDlaMemHandle) -> None:
        self._bind(name, mem, ("output", "inout"))

    def _mem(self, name: str, bound: dict[str, NvDlaMemHandle]) -> NvDlaMemHandle:
        mem = bound.get(name) or self.owned.get(name)
        if mem is None:
            kind = self.lo.recipe.buffers[name].type
            raise DlaError(NvError.InvalidState, f"{kind} buffer '{name}' is not bound")
        return mem

    # -- execution --------------------------------------------------------------------------------

    def execute(self, timeout_ms: float | None = None,
                bound: dict[str, NvDlaMemHandle] | None = None) -> None:
        """Run the recipe to its end (blocking), with the current bindings (or ``bound``)."""
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        bindings = dict(self.bound) if bound is None else bound
        with self._lock:
            for step in self.steps:
                if isinstance(step, _Cpu):
                    self._cpu(step, bindings)
                    continue
                sem = self.port.NvDlaCreateSemaphore(self.handle)
                fence = NvDlaFence(sem, 1)
                self.port.NvDlaSubmit(self.handle, [self._task(step, [], [fence], bindings)])
                self.port.NvDlaWaitFence(fence, timeout)

    def execute_async(self, pre: list[NvDlaFence], post: NvDlaFence) -> None:
        """Start the recipe once ``pre`` are reached; reach ``post`` when it is done (or fail it).
        NPU-only recipes are chained on the device's fences; with CPU runs a thread runs them. The
        bindings are those at the time of the call (later binds do not change a started run)."""
        bindings = dict(self.bound)
        if all(isinstance(s, _Npu) for s in self.steps):
            with self._lock:
                fences = pre
                for i, step in enumerate(self.steps):
                    assert isinstance(step, _Npu)
                    last = i == len(self.steps) - 1
                    out = post if last else NvDlaFence(self.port.NvDlaCreateSemaphore(self.handle), 1)
                    self.port.NvDlaSubmit(self.handle, [self._task(step, fences, [out], bindings)])
                    fences = [out]
            return

        def work() -> None:
            try:
                for fence in pre:
                    self.port.NvDlaWaitFence(fence, self.timeout_ms)
                self.execute(bound=bindings)
                self.port.NvDlaSignalFence(post)
            except DlaError as e:
                self.port.NvDlaFailFence(post, e)
            except Exception as e:  # a CPU library's bug must reach the waiter, not vanish
                self.port.NvDlaFailFence(post, DlaError(NvError.ResourceError, f"{type(e).__name__}: {e}"))

        threading.Thread(target=work, daemon=True, name="pydla-runner").start()

    def _task(self, step: _Npu, pre: list[NvDlaFence], post: list[NvDlaFence],
              bound: dict[str, NvDlaMemHandle]) -> NvDlaTask:
        addresses = [(mem, 0) for mem in step.descriptors]
        addresses += [(self._mem(a.name, bound), a.offset) for a in step.run.arguments]
        return NvDlaTask(addresses, pre_fences=list(pre), post_fences=list(post), timeout_ms=self.timeout_ms)

    def _cpu(self, step: _Cpu, bound: dict[str, NvDlaMemHandle]) -> None:
        args: list[Any] = [None] * step.function.num_args
        for a in step.run.arguments:
            if not 0 <= a.argidx < len(args):
                raise DlaError(NvError.BadValue, f"cpu run '{step.run.name}': argidx {a.argidx}")
            view = self._mem(a.name, bound).bytes_view()
            size = a.size if a.size is not None else view.size - a.offset
            if a.offset + size > view.size:
                raise DlaError(NvError.InvalidSize, f"cpu run '{step.run.name}': argument '{a.name}' "
                                                    f"[{a.offset}, +{size}) is outside its {view.size} bytes")
            args[a.argidx] = view[a.offset:a.offset + size]
        for c in step.run.constants:
            if not 0 <= c.argidx < len(args):
                raise DlaError(NvError.BadValue, f"cpu run '{step.run.name}': argidx {c.argidx}")
            args[c.argidx] = c.value
        step.function.callable(args)

    def close(self) -> None:
        for mem in list(self.owned.values()):
            self.port.NvDlaFreeMem(self.handle, mem)
        self.owned.clear()
        for step in self.steps:
            if isinstance(step, _Npu):
                for mem in step.descriptors:
                    self.port.NvDlaFreeMem(self.handle, mem)
        self.steps.clear()
