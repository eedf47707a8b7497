"""IRuntime (the NVDLA runtime API): load a loadable, describe and bind its tensors, submit.

Usage::

    import pydla
    with pydla.createRuntime() as rt:
        rt.load("model.dla")
        desc = rt.getInputTensorDesc(0)
        x = rt.allocateSystemMemory(desc.size)
        x.array(np.float32, desc.dims)[...] = data
        y = rt.allocateSystemMemory(rt.getOutputTensorDesc(0).size)
        rt.bindInputTensor(0, x); rt.bindOutputTensor(0, y)
        rt.submit()
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from pydla.errors import DlaError, NvError, WaitTimeout
from pydla.loadable.container import Loadable, TensorDesc
from pydla.portability.interface import NvDlaMemHandle, NvDlaPort, check_timeout_ms
from pydla.umd.closing import close_quietly, interrupted
from pydla.umd.cpu import CpuLibraries
from pydla.umd.layouts import Staging, check_layout
from pydla.umd.nvdla_runner import NvdlaRunner, NvdlaTensorDesc, open_nvdla_loadable
from pydla.umd.nvdla_tensor import NvdlaLayouts
from pydla.umd.runner import Runner
from pydla.umd.sync import ISync

log = logging.getLogger("pydla")


class IRuntime:
    """The NVDLA runtime API's IRuntime, on one device instance of a portability layer.

    Usage: ``rt = pydla.createRuntime(); rt.load("model.dla"); rt.getInputTensorDesc(0)``
    """

    def __init__(self, port: NvDlaPort, device: int = 0, *, owns_port: bool = False,
                 timeout_ms: int = 10_000) -> None:
        self.port = port
        self._owns_port = owns_port
        self.device = device
        self.timeout_ms = check_timeout_ms(timeout_ms, "IRuntime: timeout_ms")
        self.handle = port.NvDlaOpen(device)
        self.loadable: Loadable | None = None
        self.runner: Runner | None = None
        self.nvdla: NvdlaRunner | None = None  # an NVDLA Loadable's runner, when one is loaded
        self._nvdla_layouts: NvdlaLayouts | None = None  # ... and the tensor layouts the application set
        self._inputs: list[TensorDesc] = []
        self._outputs: list[TensorDesc] = []
        self._staging: dict[tuple[str, int], Staging] = {}  # tensors in the application's own layout
        self._lock = threading.Lock()
        self._staging_lock = threading.Lock()  # a run through staging buffers is one at a time
        # Non-blocking runs not known to have ended: their output sync and the memory they use. A run
        # that waits for other syncs has not reached the KMD yet, so only this knows its memory is
        # in use (freeSystemMemory answers Busy for it).
        self._runs: list[tuple[ISync, list[NvDlaMemHandle]]] = []
        self._closed = False
        self.libraries = CpuLibraries()

    def __enter__(self) -> IRuntime:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        close_quietly(lambda: self.close(cancel=interrupted(exc_type)), exc_type)

    # -- devices ---------------------------------------------------------------------------------

    def getMaxDevices(self) -> int:
        """The number of device instances the hardware configuration has (the port's
        NvDlaGetMaxDevices), whether or not they can be opened now; instances are numbered
        0..getMaxDevices()-1 (``createRuntime(device=i)``).

        Usage: ``rt.getMaxDevices()`` -> 2 for the "full" configuration
        """
        return self.port.NvDlaGetMaxDevices()

    def getNumDevices(self) -> int:
        """The number of those devices that are available: this runtime's own device and each
        other instance the port opens now (as the NVDLA runtime counts them, by opening each; an
        instance that fails to open, e.g. a missing device file, is not counted). At most
        :meth:`getMaxDevices`.

        Usage: ``rt.getNumDevices()`` -> 2 when both instances of "full" can be opened
        """
        self._check_open()
        available = 0
        for instance in range(self.port.NvDlaGetMaxDevices()):
            if instance == self.device:  # open already: this runtime holds it
                available += 1
                continue
            try:
                handle = self.port.NvDlaOpen(instance)
            except DlaError as e:
                log.info("getNumDevices: device %d is not available: %s", instance, e)
                continue
            available += 1
            try:
                self.port.NvDlaClose(handle)
            except DlaError as e:  # counted: it opened; closing trouble is the port's to log
                log.warning("getNumDevices: closing device %d: %s", instance, e)
        return available

    # -- loading ---------------------------------------------------------------------------------

    def load(self, buf: bytes | bytearray | memoryview | str | Path, *, name: str | None = None) -> None:
        """Load a loadable (bytes, a memoryview, or a path): checked, weights uploaded once. ``name``
        is what errors call it (default: the path, or "loadable")."""
        self._check_open()
        nvdla = open_nvdla_loadable(buf, name)
        if nvdla is not None:
            self._load_nvdla(*nvdla)
            return
        loadable = Loadable.open(buf, name)
        runner = Runner(self, loadable, libraries=self.libraries, timeout_ms=self.timeout_ms)
        with self._lock:
            try:
                self._drop_staging()
                if self.runner is not None:
                    self.runner.close()
            except BaseException:
                # The old one stays (Busy: a job in flight uses its memory): the new one's memory is
                # freed now, else each refused load() would leak a loadable's worth of buffers.
                runner.close()
                raise
            self._drop_nvdla()
            self.loadable, self.runner = loadable, runner
            self._inputs = loadable.tensors("input")
            self._outputs = loadable.tensors("output")
        log.info("loaded %s: %d inputs, %d outputs, %d runs, format %s, device config '%s'", loadable.source,
                 len(self._inputs), len(self._outputs), len(loadable.recipe.runs),
                 ".".join(map(str, loadable.format_version)), loadable.device)

    def _load_nvdla(self, lo: Any, source: str) -> None:
        """An NVDLA Loadable: its own runner (pydla.umd.nvdla_runner) takes the place of the recipe's."""
        runner = NvdlaRunner(self, lo, timeout_ms=self.timeout_ms, source=source)
        with self._lock:
            try:
                self._drop_staging()
                if self.runner is not None:
                    self.runner.close()
                self._drop_nvdla()
            except BaseException:
                runner.close()
                raise
            self.loadable = self.runner = None
            self._inputs, self._outputs = [], []
            self.nvdla = runner
            self._nvdla_layouts = NvdlaLayouts(self, runner)
        log.info("loaded %s: NVDLA Loadable %s, %d tasks, %d inputs, %d outputs", source, lo.version,
                 len(lo.task_list), len(runner.inputs), len(runner.outputs))

    def _drop_nvdla(self) -> None:
        if self._nvdla_layouts is not None:
            self._nvdla_layouts.close()
            self._nvdla_layouts = None
        if self.nvdla is not None:
            self.nvdla.close()
            self.nvdla = None

    def unload(self) -> None:
        with self._lock:
            self._drop_nvdla()
            self._drop_staging()
            if self.runner is not None:
                self.runner.close()
            self.loadable = self.runner = None
            self._inputs, self._outputs = [], []

    def _unload_when_idle(self, deadline: float) -> None:
        """Unload, waiting while a job in flight still uses a buffer (Busy) until ``deadline``."""
        nap = 0.001
        while True:
            try:
                self.unload()
                return
            except DlaError as e:
                if e.code != NvError.Busy:
                    raise
                if time.monotonic() >= deadline:
                    log.warning("close(): a run still in flight after %d ms is cancelled (%s)",
                                self.timeout_ms, e.message)
                    return
            time.sleep(nap)
            nap = min(nap * 2, 0.05)

    def _drop_staging(self, key: tuple[str, int] | None = None) -> None:
        for k in [key] if key is not None else list(self._staging):
            staging = self._staging.pop(k, None) if k is not None else None
            if staging is not None and not self._closed:
                self.port.NvDlaFreeMem(self.handle, staging.dense)

    def _loaded(self) -> Runner:
        self._check_open()
        if self.runner is None:
            raise DlaError(NvError.NotInitialized, "nothing is loaded: call load() first")
        return self.runner

    # -- tensors -----------------------------------------------------------------------------------

    def getNumInputTensors(self) -> int:
        if self.nvdla is not None:
            return len(self.nvdla.inputs)
        self._loaded()
        return len(self._inputs)

    def getNumOutputTensors(self) -> int:
        if self.nvdla is not None:
            return len(self.nvdla.outputs)
        self._loaded()
        return len(self._outputs)

    def _nvdla_desc(self, tensors: list[NvdlaTensorDesc], index: int, what: str) -> NvdlaTensorDesc:
        if not isinstance(index, int) or not 0 <= index < len(tensors):
            raise DlaError(NvError.BadParameter, f"{what} tensor {index!r}: the NVDLA Loadable has "
                                                 f"{len(tensors)}")
        return tensors[index]

    def _desc(self, tensors: list[TensorDesc], index: int, what: str) -> TensorDesc:
        self._loaded()
        if not isinstance(index, int) or not 0 <= index < len(tensors):
            raise DlaError(NvError.BadParameter, f"{what} tensor {index!r}: the network has {len(tensors)}")
        return tensors[index]

    def getInputTensorDesc(self, index: int) -> Any:
        """The input's descriptor: the network's, or the layout the application set (for an NVDLA
        Loadable, an :class:`~pydla.umd.nvdla_runner.NvdlaTensorDesc` from its tensor_desc_list)."""
        if self.nvdla is not None and self._nvdla_layouts is not None:
            return self._nvdla_layouts.desc("input", index,
                                            self._nvdla_desc(self.nvdla.inputs, index, "input"))
        staging = self._staging.get(("input", index))
        return staging.desc if staging else self._desc(self._inputs, index, "input")

    def getOutputTensorDesc(self, index: int) -> Any:
        """The output's descriptor: the network's, or the layout the application set (for an NVDLA
        Loadable, an :class:`~pydla.umd.nvdla_runner.NvdlaTensorDesc`)."""
        if self.nvdla is not None and self._nvdla_layouts is not None:
            return self._nvdla_layouts.desc("output", index,
                                            self._nvdla_desc(self.nvdla.outputs, index, "output"))
        staging = self._staging.get(("output", index))
        return staging.desc if staging else self._desc(self._outputs, index, "output")

    def _set(self, tensors: list[TensorDesc], index: int, desc: TensorDesc, what: str) -> None:
        if self.nvdla is not None and self._nvdla_layouts is not None:
            # NVDLA Loadable: another line, surface or batch stride (pydla.umd.nvdla_tensor.NvdlaLayouts)
            nvdla_tensors = self.nvdla.inputs if what == "input" else self.nvdla.outputs
            with self._lock:
                self._nvdla_layouts.set(what, index, self._nvdla_desc(nvdla_tensors, index, what), desc)
            return
        network = self._desc(tensors, index, what)
        if not isinstance(desc, TensorDesc):
            raise DlaError(NvError.BadParameter, f"set{what.capitalize()}TensorDesc({index}): a TensorDesc "
                                                 f"is expected, not {type(desc).__name__}")
        check_layout(network, desc, f"set{what.capitalize()}TensorDesc({index})")
        if network.size == 0 and desc != network:
            raise DlaError(NvError.BadParameter,
                           f"set{what.capitalize()}TensorDesc({index}): '{network.name}' of dims "
                           f"{network.dims} is empty: it has no layout to change")
        runner = self._loaded()
        with self._lock:
            self._drop_staging((what, index))
            runner.unbind(network.buffer)  # bind again after a layout change
            if desc == network:
                return
            dense, _ = self.port.NvDlaGetMem(self.handle, network.size)
            self._staging[(what, index)] = Staging(desc, network, dense)
            (runner.bind_input if what == "input" else runner.bind_output)(network.buffer, dense)

    def setInputTensorDesc(self, index: int, desc: TensorDesc) -> None:
        """Use another arrangement of the same tensor (strides, layout, offset, size; never dims or
        data type); the runtime converts it around each run. Bind the tensor again afterwards."""
        self._set(self._inputs, index, desc, "input")

    def setOutputTensorDesc(self, index: int, desc: TensorDesc) -> None:
        """As :meth:`setInputTensorDesc`, for an output."""
        self._set(self._outputs, index, desc, "output")

    # -- memory and binding ------------------------------------------------------------------------

    def allocateSystemMemory(self, size: int) -> NvDlaMemHandle:
        self._check_open()
        if size == 0 and type(size) is int:
            raise DlaError(NvError.BadParameter, "allocateSystemMemory(0): no memory has 0 bytes; a tensor "
                                                 "of size 0 (a dimension of 0) needs none: leave it unbound")
        mem, _ = self.port.NvDlaGetMem(self.handle, size)
        return mem  # freed by freeSystemMemory, or with the session on close()

    def freeSystemMemory(self, mem: NvDlaMemHandle) -> None:
        """Free memory from :meth:`allocateSystemMemory` (NvError Busy while a run uses it, also one
        of :meth:`submitNonBlocking` still waiting for its ``wait_for`` syncs)."""
        self._check_open()
        with self._lock:
            self._forget_ended_runs()
            if any(m is mem for _, mems in self._runs for m in mems):
                raise DlaError(NvError.Busy, "freeSystemMemory: the memory is bound to a run still in flight "
                                             "(submitNonBlocking): wait for its sync first")
        self.port.NvDlaFreeMem(self.handle, mem)

    def _forget_ended_runs(self) -> None:
        """Drop the non-blocking runs that have ended from ``_runs`` (the caller holds ``_lock``)."""
        self._runs = [(sync, mems) for sync, mems in self._runs if not _ended(sync)]

    def _bind_staged(self, staging: Staging, mem: NvDlaMemHandle, what: str) -> None:
        d = staging.desc
        if mem.size < d.offset + d.size:
            raise DlaError(NvError.InvalidSize, f"{what} '{d.name}': its layout needs {d.offset + d.size} "
                                                f"bytes (offset {d.offset} + size {d.size}), the memory "
                                                f"has {mem.size}")
        staging.user = mem

    def bindInputTensor(self, index: int, mem: NvDlaMemHandle) -> None:
        if self.nvdla is not None:
            if self._nvdla_layouts is None or not self._nvdla_layouts.bind("input", index, mem):
                self.nvdla.bind_input(index, mem)
            return
        desc = self.getInputTensorDesc(index)
        staging = self._staging.get(("input", index))
        if staging is not None:
            self._bind_staged(staging, mem, "input")
        else:
            self._loaded().bind_input(desc.buffer, mem)

    def bindOutputTensor(self, index: int, mem: NvDlaMemHandle) -> None:
        if self.nvdla is not None:
            if self._nvdla_layouts is None or not self._nvdla_layouts.bind("output", index, mem):
                self.nvdla.bind_output(index, mem)
            return
        desc = self.getOutputTensorDesc(index)
        staging = self._staging.get(("output", index))
        if staging is not None:
            self._bind_staged(staging, mem, "output")
        else:
            self._loaded().bind_output(desc.buffer, mem)

    # -- running -----------------------------------------------------------------------------------

    def submit(self) -> None:
        """Run the network to completion (blocking); its error, or Timeout, raises."""
        if self.nvdla is not None:
            self._check_open()
            if self._nvdla_layouts is not None:
                self._nvdla_layouts.run(self.nvdla, self.timeout_ms)
            else:
                self.nvdla.run(self.timeout_ms)
            return
        runner = self._loaded()
        staged = list(self._staging.values())
        if not staged:
            runner.run(self.timeout_ms)
            return
        with self._staging_lock:
            self._run_staged(runner, staged)

    def _run_staged(self, runner: Runner, staged: list[Staging]) -> None:
        for s in staged:
            if s.network.direction.name == "INPUT":
                s.to_network()
        runner.run(self.timeout_ms)
        for s in staged:
            if s.network.direction.name == "OUTPUT":
                s.from_network()

    def submitNonBlocking(self, outputSyncs: list[ISync] | None = None, *,  # noqa: N803 (the API's name)
                          wait_for: list[ISync] | None = None) -> list[ISync]:
        """Start the network (once every sync in ``wait_for`` is signaled) and return at once.
        As in the NVDLA runtime API, the output syncs are appended to ``outputSyncs`` when a list is
        given; they are returned too. ``wait(timeout_ms)`` on one returns when the run has ended.

        Usage: ``syncs = []; rt.submitNonBlocking(syncs); syncs[0].wait(1000)``;
        ``(b,) = rt.submitNonBlocking(wait_for=[a])`` (starts after ``a``)
        """
        if outputSyncs is not None and not isinstance(outputSyncs, list):
            raise DlaError(NvError.BadParameter, f"submitNonBlocking: outputSyncs must be a list the output "
                                                 f"syncs are appended to, not {type(outputSyncs).__name__}")
        if wait_for is not None and (not isinstance(wait_for, list | tuple)
                                     or not all(isinstance(s, ISync) for s in wait_for)):
            raise DlaError(NvError.BadParameter, f"submitNonBlocking: wait_for must be a list of ISync, "
                                                 f"not {wait_for!r}")
        syncs = self._submit_non_blocking(list(wait_for or []))
        if outputSyncs is not None:
            outputSyncs.extend(syncs)
        return syncs

    def _submit_non_blocking(self, syncs: list[ISync]) -> list[ISync]:
        if self.nvdla is not None:
            return [self._submit_nvdla_non_blocking(self.nvdla, syncs)]
        runner = self._loaded()
        out = self.createSync()  # the run's end signals it
        pre = [s.fence for s in syncs]
        post = out.fence
        staged = [Staging(s.desc, s.network, s.dense, s.user) for s in self._staging.values()]
        uses = [*runner.bound.values(), *(m for s in staged for m in (s.dense, s.user) if m is not None)]
        with self._lock:
            self._forget_ended_runs()
            self._runs.append((out, uses))
        foreign = [s for s in syncs if s.port is not self.port]
        if not staged and not foreign:
            runner.execute_async(pre, post, keep=(syncs, out))  # chained on the device's fences
            return [out]
        # The host waits: for conversions between the fences and the run, or for another runtime's
        # syncs (their semaphores are not this port's to hand to the driver; the run then chains on
        # this port's own fences, with the bindings of now).
        bindings = None if staged else runner.bindings_snapshot()

        def work(_keep: object) -> None:
            try:
                for sync in syncs if staged else foreign:  # each on its own port
                    sync.wait(self.timeout_ms)
                if bindings is not None:
                    runner.execute_async([s.fence for s in syncs if s.port is self.port], post, keep=_keep,
                                         bindings=bindings)
                    return
                with self._staging_lock:
                    self._run_staged(runner, staged)
                self.port.NvDlaSignalFence(post)
            except DlaError as e:
                self.port.NvDlaFailFence(post, e)
            except Exception as e:  # reach the waiter, never vanish
                self.port.NvDlaFailFence(post, DlaError(NvError.ResourceError, f"{type(e).__name__}: {e}"))

        # The thread's argument holds the syncs until it is done, so their semaphores live as long.
        threading.Thread(target=work, args=((syncs, out),), daemon=True, name="pydla-submit-wait").start()
        return [out]

    def _submit_nvdla_non_blocking(self, runner: NvdlaRunner, syncs: list[ISync]) -> ISync:
        """An NVDLA Loadable's run on a thread (its tasks are synchronous, as in NVIDIA's runtime): it
        waits for ``syncs``, runs, and signals (or fails) the returned sync."""
        self._check_open()
        out = self.createSync()
        post = out.fence
        layouts = self._nvdla_layouts

        def work(_keep: object) -> None:
            try:
                for sync in syncs:
                    sync.wait(self.timeout_ms)
                if layouts is not None:
                    layouts.run(runner, self.timeout_ms)
                else:
                    runner.run(self.timeout_ms)
                self.port.NvDlaSignalFence(post)
            except DlaError as e:
                self.port.NvDlaFailFence(post, e)
            except Exception as e:  # reach the waiter, never vanish
                self.port.NvDlaFailFence(post, DlaError(NvError.ResourceError, f"{type(e).__name__}: {e}"))

        threading.Thread(target=work, args=((syncs, out),), daemon=True, name="pydla-nvdla-submit").start()
        return out

    def createSync(self) -> ISync:
        """An application-signaled sync (signal() releases submits that wait on it)."""
        self._check_open()
        return ISync(self.port, self.port.NvDlaCreateSemaphore(self.handle), 1, owned=True)

    # -- lifetime ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DlaError(NvError.InvalidState, "the runtime was closed")

    def close(self, *, cancel: bool = False) -> None:
        """Wait for runs still in flight (up to ``timeout_ms``), cancel what is left, free
        everything and close the device. ``cancel=True`` cancels runs in flight at once, without
        waiting (what a ``with`` block ended by Ctrl-C does). Idempotent."""
        if self._closed:
            return
        try:
            if not cancel:
                self._unload_when_idle(time.monotonic() + self.timeout_ms / 1000)
        finally:
            # Closing the device aborts whatever is still queued or running (its syncs fail, so no
            # waiter hangs) and frees what the unload could not.
            self._closed = True
            self.port.NvDlaClose(self.handle)
        if self._owns_port:
            close = getattr(self.port, "close", None)
            if callable(close):
                close()


def _ended(sync: ISync) -> bool:
    """Whether the run behind ``sync`` has ended (signaled or failed), without waiting."""
    try:
        sync.wait(0)
    except WaitTimeout:
        return False  # the wait's own time ran out: the run is pending
    except DlaError:
        return True  # the run failed (with its own error, which may be a Timeout too: a hung job)
    return True
