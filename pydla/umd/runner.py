"""The runner: executes a run recipe (as XRT's runner does) through a portability layer.

The recipe comes from a loadable or from a standalone recipe JSON file that names external files
(:mod:`pydla.loadable.recipe_file`). Runs are grouped into runlists of contiguous NPU or CPU runs,
executed in order. Buffers the runner creates (in a standalone recipe, as in XRT's runner: every
buffer with a size or a file, whatever its type; in a loadable, internal buffers and weights) are made
when it is built, initial contents uploaded once; the others are bound by name, and a created buffer
that may be bound (any but an internal one) is replaced by the memory bound to it. Each NPU run's
control code is patched once for the address list the runner builds (descriptor sections first, then
the run's arguments in order, each the bound memory at the argument's offset); CPU runs call functions
of CPU libraries with their arguments in argidx order. Every argument's offset and size is checked
against the memory it lands in before anything is submitted.

Usage (the XRT runner's API)::

    rt = pydla.createRuntime()
    runner = Runner(rt, "recipe.json")            # or a loadable path, or a Loadable
    runner.bind_input("ifm", rt.allocateSystemMemory(4096))
    runner.bind_output("ofm", out_mem)
    runner.execute()                              # starts
    runner.wait()                                 # its error, or Timeout, raises here
    runner.memory("tmp")                          # a buffer the runner created, to read
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pydla.elf.controlcode import ControlCode
from pydla.errors import DlaError, NvError
from pydla.loadable.container import Loadable
from pydla.loadable.recipe import BIND_INPUT_TYPES, BIND_OUTPUT_TYPES, Argument, Recipe, Run
from pydla.loadable.recipe_file import RecipeFile
from pydla.portability.interface import (
    NvDlaDeviceInfo,
    NvDlaFence,
    NvDlaMemHandle,
    NvDlaPort,
    NvDlaPreparedTask,
    NvDlaTask,
)
from pydla.umd.cpu import CpuFunction, CpuLibraries
from pydla.umd.runner_cu import CuStep, unit_of_run

if TYPE_CHECKING:
    from pydla.trace.host import HostTrace


class RecipeSource(Protocol):
    """What the runner needs of a recipe's container (a Loadable, or a RecipeFile)."""

    source: str
    recipe: Recipe

    def control_code(self, kernel: str) -> ControlCode: ...
    def created_size(self, name: str) -> int | None: ...
    def initial_contents(self, name: str) -> bytes | memoryview | None: ...
    def external_size(self, name: str) -> int | None: ...
    def check_device(self, config: Any) -> None: ...


class Device(Protocol):
    """Where a runner runs: device instance ``device`` of a port, opened (``handle``, from NvDlaOpen).
    An IRuntime is one."""

    port: NvDlaPort
    device: int
    handle: Any


@dataclass
class _Npu:
    run: Run
    descriptors: list[NvDlaMemHandle]
    # The task prepared for the bindings ``prepared_with`` (a snapshot from Runner._bindings): a
    # run with the same bindings submits it again; new bindings prepare anew.
    prepared: NvDlaPreparedTask | None = None
    prepared_with: dict[str, NvDlaMemHandle] | None = None
    # The run's constants: scalar arguments of the engine's compute unit, (argidx, value)
    scalars: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Cpu:
    run: Run
    function: CpuFunction


def open_recipe(recipe: RecipeSource | str | Path | bytes | bytearray | memoryview, *,
                allow_unsafe_paths: bool = False) -> RecipeSource:
    """A recipe source: a ``.json`` path is a standalone recipe, anything else a loadable."""
    if isinstance(recipe, (str, Path)):
        if Path(recipe).suffix.lower() == ".json":
            return RecipeFile(recipe, allow_unsafe_paths=allow_unsafe_paths)
        return Loadable.open(recipe)
    if isinstance(recipe, (bytes, bytearray, memoryview)):
        return Loadable.open(recipe)
    return recipe


class Runner:
    """See the module docstring. Safe to execute from several threads (runs are serialised)."""

    def __init__(self, device: Device, recipe: RecipeSource | str | Path | bytes | bytearray | memoryview,
                 *, libraries: CpuLibraries | None = None, timeout_ms: int = 10_000,
                 allow_unsafe_paths: bool = False) -> None:
        self.port = device.port
        self.handle = device.handle
        self.lo = open_recipe(recipe, allow_unsafe_paths=allow_unsafe_paths)
        self._info: NvDlaDeviceInfo | None = None  # what the port says of the device, if it does
        self._check_device(device.device)
        self.timeout_ms = timeout_ms
        self.libraries = libraries or CpuLibraries(allow_unsafe_paths=allow_unsafe_paths)
        self._lock = threading.Lock()
        self.owned: dict[str, NvDlaMemHandle] = {}
        self.bound: dict[str, NvDlaMemHandle] = {}
        self._snapshot: dict[str, NvDlaMemHandle] | None = None  # see _bindings
        self.steps: list[_Npu | _Cpu | CuStep] = []
        self._pending: NvDlaFence | None = None
        self._timeline: Any = None  # the semaphore of blocking runs (see run)
        # While traced (pydla.trace): each step's span on the host's timeline.
        self.tracer: HostTrace | None = None
        self._tick = 0
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _check_device(self, select: int) -> None:
        """NvError NotSupported, before anything is made, when the device lacks a block the recipe's
        operations use; nothing is checked on a port that does not report what its device is."""
        try:
            info = self.port.NvDlaGetDeviceInfo(select)
        except DlaError as e:
            if e.code == NvError.NotSupported:
                return
            raise
        self.lo.check_device(info)
        self._info = info

    def _create(self) -> None:
        for name in self.lo.recipe.buffers:
            size = self.lo.created_size(name)
            if size is None:
                continue
            mem, data = self.port.NvDlaGetMem(self.handle, size)
            self.owned[name] = mem
            initial = self.lo.initial_contents(name)
            if initial is not None:
                data[:len(initial)] = np.frombuffer(initial, dtype=np.uint8)
        for run in self.lo.recipe.runs:
            self._check_static(run)
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
            unit = unit_of_run(run, self.lo.recipe.kernels.get(run.name), self._info)
            if unit is not None:  # XRT's xrt::run on that kernel: its control code is not used
                step = CuStep(run, unit)
                assert self._info is not None
                step.check(self._info)
                self.steps.append(step)
                continue
            scalars = _scalars(run)
            code = self.lo.control_code(run.name)
            parts = code.patch({a.argidx: code.fixed_entries + i for i, a in enumerate(run.arguments)})
            mems = []
            for section in code.layout:
                blob = parts[section] or b"\0" * 8
                mem, view = self.port.NvDlaGetMem(self.handle, len(blob))
                view[:] = np.frombuffer(blob, dtype=np.uint8)
                mems.append(mem)
            self.steps.append(_Npu(run, mems, scalars=scalars))

    def _check_static(self, run: Run) -> None:
        """Arguments of created buffers are checked once, here; bound ones at each execute."""
        for a in run.arguments:
            size = self.lo.created_size(a.name)
            if size is not None:
                _check_range(run, a, size)

    # -- binding ----------------------------------------------------------------------------------

    def _bind(self, name: str, mem: NvDlaMemHandle, kinds: tuple[str, ...], method: str) -> None:
        buf = self.lo.recipe.buffers.get(name)
        if buf is None or buf.type not in kinds:
            names = ", ".join(n for n, b in self.lo.recipe.buffers.items() if b.type in kinds)
            what = "no buffer" if buf is None else f"{buf.type} buffer"
            why = " (the runner's own, never bound)" if buf is not None and buf.type == "internal" else ""
            raise DlaError(NvError.BadParameter, f"{method}: {what} '{name}'{why}; {method} binds "
                                                 f"{', '.join(kinds)} buffers (here: {names or 'none'})")
        if not self.port.NvDlaMemGetSize(mem):
            raise DlaError(NvError.BadParameter, f"{self._buffer_name(name)}: the memory is not this "
                                                 "runtime's, or was freed: allocate it with "
                                                 "allocateSystemMemory")
        # A created buffer keeps its size when memory is bound in its place (runs were checked
        # against it); XRT asks for the same size, pydla for at least as much.
        need = self.lo.external_size(name) or self.lo.created_size(name)
        if need is not None and mem.size < need:
            raise DlaError(NvError.InvalidSize, f"buffer '{name}' needs {need} bytes, the memory bound to it "
                                                f"has {mem.size}")
        for run in self.lo.recipe.runs:
            for a in run.arguments:
                if a.name == name:
                    _check_range(run, a, mem.size)
        self.bound[name] = mem
        self._snapshot = None

    def unbind(self, name: str) -> None:
        """Forget what is bound to buffer ``name`` (nothing bound: nothing happens)."""
        if self.bound.pop(name, None) is not None:
            self._snapshot = None

    def bind_input(self, name: str, mem: NvDlaMemHandle) -> None:
        """Bind memory to buffer ``name``: an input, inout, weight, spill or unknown buffer (its size
        is checked against every use). A buffer the runner created is then replaced by ``mem``."""
        self._bind(name, mem, BIND_INPUT_TYPES, "bind_input")

    def bind_output(self, name: str, mem: NvDlaMemHandle) -> None:
        """Bind memory to buffer ``name``: an output, inout, spill or unknown buffer (its size is
        checked against every use). A buffer the runner created is then replaced by ``mem``."""
        self._bind(name, mem, BIND_OUTPUT_TYPES, "bind_output")

    def memory(self, name: str) -> NvDlaMemHandle:
        """The memory buffer ``name`` uses now: what is bound to it, else what the runner created
        (how an application reads an output the recipe gave a size and it did not bind)."""
        if name not in self.lo.recipe.buffers:
            raise DlaError(NvError.BadParameter, f"no buffer '{name}' (there are: "
                                                 f"{', '.join(self.lo.recipe.buffers)})")
        return self._mem(name, self.bound)

    def _mem(self, name: str, bound: dict[str, NvDlaMemHandle]) -> NvDlaMemHandle:
        mem = bound.get(name) or self.owned.get(name)
        if mem is None:
            kind = self.lo.recipe.buffers[name].type
            how = "bind_output" if kind == "output" else "bind_input"
            raise DlaError(NvError.InvalidState, f"{kind} buffer '{name}' is not bound (it has no size "
                                                 f"in the recipe: {how} memory to it)")
        return mem

    def _check_live(self, bindings: dict[str, NvDlaMemHandle]) -> None:
        """Before a run: no buffer is bound to memory freed since it was bound (the port would only
        say that a handle is not its session's, in the middle of preparing a task)."""
        for name, mem in bindings.items():
            if name in self.bound and not self.port.NvDlaMemGetSize(mem):
                raise DlaError(NvError.InvalidState, f"{self._buffer_name(name)} is bound to memory that was "
                                                     "freed: bind it again")

    def _buffer_name(self, name: str) -> str:
        """How a message names buffer ``name``: the loadable's tensor bound to it, as the runtime API
        numbers them ("input tensor 0 ('image')"), else the recipe's buffer ("input buffer 'ifm'")."""
        tensors = getattr(self.lo, "tensors", None)
        for direction in ("input", "output"):
            for i, t in enumerate(tensors(direction) if callable(tensors) else ()):
                if getattr(t, "buffer", None) == name:
                    return f"{direction} tensor {i} ('{t.name}')"
        return f"{self.lo.recipe.buffers[name].type} buffer '{name}'"

    def _bindings(self) -> dict[str, NvDlaMemHandle]:
        """A snapshot of the bindings, complete (every external buffer a run uses is bound). The
        same object until a binding changes (never modified: runs in flight hold it)."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = dict(self.bound)
            for run in self.lo.recipe.runs:
                for a in run.arguments:
                    self._mem(a.name, snapshot)
            self._snapshot = snapshot
        return snapshot

    # -- execution (the XRT runner's execute / wait) ---------------------------------------------------

    def execute(self) -> None:
        """Start the recipe with the current bindings; :meth:`wait` for it. One execution at a time."""
        if self._pending is not None:
            raise DlaError(NvError.InvalidState, "the runner is executing: wait() before executing again")
        fence = NvDlaFence(self.port.NvDlaCreateSemaphore(self.handle), 1)
        self.execute_async([], fence)
        self._pending = fence

    def wait(self, timeout_ms: float | None = None) -> None:
        """Wait for the execution :meth:`execute` started; its error, or Timeout, raises."""
        fence = self._pending
        if fence is None:
            raise DlaError(NvError.InvalidState, "nothing to wait for: execute() first")
        try:
            self.port.NvDlaWaitFence(fence, self.timeout_ms if timeout_ms is None else timeout_ms)
        except DlaError as e:
            if e.code == NvError.Timeout:
                raise  # still running: wait() again
            self._finish_pending(fence)  # it failed: that execution is over
            raise
        self._finish_pending(fence)

    def _finish_pending(self, fence: NvDlaFence) -> None:
        self._pending = None
        self._release(fence.semaphore)

    def run(self, timeout_ms: float | None = None, bound: dict[str, NvDlaMemHandle] | None = None) -> None:
        """Run the recipe to its end in the calling thread, with the current bindings (or ``bound``)."""
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        bindings = self._bindings() if bound is None else bound
        self._check_live(bindings)
        if self.tracer is not None:
            self._run_traced(self.tracer, timeout, bindings)
            return
        with self._lock:
            for step in self.steps:
                if isinstance(step, _Cpu):
                    self._cpu(step, bindings)
                    continue
                # One timeline for the blocking runs (they are serialised): each step reaches the
                # next value. A port then makes one semaphore per runner, not one per run; after a
                # failure (which marks a semaphore failed for good) a fresh timeline starts.
                if self._timeline is None:
                    self._timeline, self._tick = self.port.NvDlaCreateSemaphore(self.handle), 0
                self._tick += 1
                fence = NvDlaFence(self._timeline, self._tick)
                try:
                    self._submit(step, bindings, [], fence)
                    self.port.NvDlaWaitFence(fence, timeout)
                except BaseException:
                    self._timeline = None
                    self._release(fence.semaphore)
                    raise

    def _run_traced(self, tracer: HostTrace, timeout: float, bindings: dict[str, NvDlaMemHandle]) -> None:
        """:meth:`run`, each step a span on the host's timeline: the NPU steps' submits and fence
        waits, the CPU runs. A step is submitted on a fresh semaphore (tracing is not the fast path)."""
        with self._lock:
            for step in self.steps:
                name = step.run.name
                if isinstance(step, _Cpu):
                    with tracer.span(f"cpu {name}", "cpu", step=name):
                        self._cpu(step, bindings)
                    continue
                semaphore = self.port.NvDlaCreateSemaphore(self.handle)
                fence = NvDlaFence(semaphore, 1)
                try:
                    with tracer.span(f"npu {name}", "npu", step=name):
                        call = "NvDlaSubmitCu" if isinstance(step, CuStep) else "NvDlaSubmitPrepared"
                        with tracer.span(call, "umd", step=name):
                            self._submit(step, bindings, [], fence)
                        with tracer.span("NvDlaWaitFence", "fence", step=name):
                            self.port.NvDlaWaitFence(fence, timeout)
                finally:
                    self._release(semaphore)

    def execute_async(self, pre: list[NvDlaFence], post: NvDlaFence, keep: object = None,
                      bindings: dict[str, NvDlaMemHandle] | None = None) -> None:
        """Start the recipe once ``pre`` are reached; reach ``post`` when it is done (or fail it).
        NPU-only recipes are chained on the device's fences; with CPU runs a thread runs them, which
        holds ``keep`` (the owners of the fences' semaphores) until it is done. The bindings are
        those at the time of the call (later binds do not change a started run), or ``bindings``
        (a snapshot taken earlier: :meth:`bindings_snapshot`)."""
        bindings = self._bindings() if bindings is None else bindings
        self._check_live(bindings)
        if not any(isinstance(s, _Cpu) for s in self.steps):
            with self._lock:
                fences = pre
                for i, step in enumerate(self.steps):
                    assert not isinstance(step, _Cpu)
                    last = i == len(self.steps) - 1
                    out = post if last else NvDlaFence(self.port.NvDlaCreateSemaphore(self.handle), 1)
                    try:
                        self._submit(step, bindings, fences, out)
                    except BaseException:
                        if out is not post:
                            self._release(out.semaphore)
                        raise
                    finally:
                        if fences is not pre:  # an intermediate: the submitted tasks hold it now
                            self._release(fences[0].semaphore)
                    fences = [out]
            return

        def work(_keep: object) -> None:  # the thread's argument holds ``keep`` until it ends
            try:
                for fence in pre:
                    self.port.NvDlaWaitFence(fence, self.timeout_ms)
                self.run(bound=bindings)
                self.port.NvDlaSignalFence(post)
            except DlaError as e:
                self.port.NvDlaFailFence(post, e)
            except Exception as e:  # a CPU library's bug must reach the waiter, not vanish
                self.port.NvDlaFailFence(post, DlaError(NvError.ResourceError, f"{type(e).__name__}: {e}"))

        threading.Thread(target=work, args=(keep,), daemon=True, name="pydla-runner").start()

    def bindings_snapshot(self) -> dict[str, NvDlaMemHandle]:
        """The current bindings, complete (for a run started later with them)."""
        return self._bindings()

    def _release(self, semaphore: Any) -> None:
        """Destroy a semaphore of ours; submitted tasks that use it keep working."""
        self.port.NvDlaDestroySemaphore(semaphore)

    def _submit(self, step: _Npu | CuStep, bound: dict[str, NvDlaMemHandle], pre: list[NvDlaFence],
                post: NvDlaFence) -> None:
        """Submit one device step: a prepared DLA task, or a start of its compute unit."""
        if isinstance(step, CuStep):
            def mem_of(a: Argument) -> tuple[NvDlaMemHandle, int, int]:
                mem = self._mem(a.name, bound)
                return (mem, *_check_range(step.run, a, mem.size))

            self.port.NvDlaSubmitCu(self.handle, step.unit, step.arguments(mem_of), pre, [post],
                                    timeout_ms=self.timeout_ms)
            return
        self.port.NvDlaSubmitPrepared(self.handle, self._prepared(step, bound), pre, [post],
                                      timeout_ms=self.timeout_ms)

    def _prepared(self, step: _Npu, bound: dict[str, NvDlaMemHandle]) -> NvDlaPreparedTask:
        """Under the lock: the step's task prepared for ``bound`` (made once per bindings)."""
        if step.prepared is None or step.prepared_with is not bound:
            addresses: list[tuple[NvDlaMemHandle, int] | tuple[NvDlaMemHandle, int, int]]
            addresses = [(mem, 0) for mem in step.descriptors]
            for a in step.run.arguments:
                mem = self._mem(a.name, bound)
                start, end = _check_range(step.run, a, mem.size)
                addresses.append((mem, start) if a.size is None else (mem, start, end - start))
            prepared = self.port.NvDlaPrepareTask(self.handle, NvDlaTask(addresses, scalars=step.scalars))
            if step.prepared is not None:
                self.port.NvDlaReleaseTask(self.handle, step.prepared)
            step.prepared, step.prepared_with = prepared, bound
        return step.prepared

    def _cpu(self, step: _Cpu, bound: dict[str, NvDlaMemHandle]) -> None:
        args: list[Any] = [None] * step.function.num_args
        for a in step.run.arguments:
            if not 0 <= a.argidx < len(args):
                raise DlaError(NvError.BadValue, f"cpu run '{step.run.name}': argidx {a.argidx}")
            view = self._mem(a.name, bound).bytes_view()
            start, end = _check_range(step.run, a, view.size)
            args[a.argidx] = view[start:end]
        for c in step.run.constants:
            if not 0 <= c.argidx < len(args):
                raise DlaError(NvError.BadValue, f"cpu run '{step.run.name}': argidx {c.argidx}")
            args[c.argidx] = c.value
        step.function.callable(args)

    def close(self) -> None:
        """Free what the runner holds. Resumable: after an error (Busy: a job in flight still uses
        a buffer) a later call frees what is left, never the same thing twice."""
        timeline, self._timeline = self._timeline, None
        if timeline is not None:
            self._release(timeline)
        while self.owned:
            name = next(iter(self.owned))
            self.port.NvDlaFreeMem(self.handle, self.owned[name])
            del self.owned[name]
        for step in self.steps:
            if isinstance(step, _Npu):
                prepared, step.prepared, step.prepared_with = step.prepared, None, None
                if prepared is not None:
                    self.port.NvDlaReleaseTask(self.handle, prepared)
                while step.descriptors:
                    self.port.NvDlaFreeMem(self.handle, step.descriptors[-1])
                    step.descriptors.pop()
        self.steps.clear()


def _scalars(run: Run) -> list[tuple[int, int]]:
    """The constants of an NPU run as scalar arguments of the engine's compute unit: integers only
    (XRT's DPU takes its opcode and sentinels so); the driver checks their argidx and range."""
    scalars = []
    for c in run.constants:
        if c.type != "int" or type(c.value) is not int:
            raise DlaError(NvError.NotSupported,
                           f"npu run '{run.name}': constant at argidx {c.argidx} is a {c.type}: the DLA "
                           "engine's compute unit takes integer scalar arguments only")
        scalars.append((c.argidx, c.value))
    return scalars


def _check_range(run: Run, a: Argument, available: int) -> tuple[int, int]:
    """The byte range [start, end) of argument ``a`` in a buffer of ``available`` bytes."""
    size = a.size if a.size is not None else available - a.offset
    if a.offset > available or size < 0 or a.offset + size > available:
        shown = "the rest" if a.size is None else f"{size} bytes"
        raise DlaError(NvError.InvalidSize,
                       f"{run.where} run '{run.name}': argument '{a.name}' (argidx {a.argidx}) at offset "
                       f"{a.offset}, {shown}, is outside its buffer of {available} bytes")
    return a.offset, a.offset + size
