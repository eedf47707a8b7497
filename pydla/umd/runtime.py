"""IRuntime (seed 003): load a loadable, describe and bind its tensors, submit.

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

import threading
from pathlib import Path

from pydla.errors import DlaError, NvError
from pydla.hw.config import DeviceConfig
from pydla.loadable.container import Loadable, TensorDesc
from pydla.portability.interface import NvDlaFence, NvDlaMemHandle, NvDlaPort
from pydla.umd.cpu import CpuLibraries
from pydla.umd.runner import Runner
from pydla.umd.sync import ISync

PORTS = ("inprocess",)


class IRuntime:
    """The seed's runtime interface, on one device instance of a portability layer."""

    def __init__(self, port: NvDlaPort, device: int = 0, *, owns_port: bool = False,
                 timeout_ms: int = 10_000) -> None:
        self.port = port
        self._owns_port = owns_port
        self.device = device
        self.timeout_ms = timeout_ms
        self.handle = port.NvDlaOpen(device)
        self.loadable: Loadable | None = None
        self.runner: Runner | None = None
        self._inputs: list[TensorDesc] = []
        self._outputs: list[TensorDesc] = []
        self._lock = threading.Lock()
        self._closed = False
        self.libraries = CpuLibraries()

    def __enter__(self) -> IRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- devices ---------------------------------------------------------------------------------

    def getMaxDevices(self) -> int:
        return self.port.NvDlaGetMaxDevices()

    def getNumDevices(self) -> int:
        """Devices available: every instance of the configuration (all are virtual here)."""
        return self.port.NvDlaGetMaxDevices()

    # -- loading ---------------------------------------------------------------------------------

    def load(self, buf: bytes | bytearray | memoryview | str | Path) -> None:
        """Load a loadable (bytes, a memoryview, or a path): checked, weights uploaded once."""
        self._check_open()
        loadable = Loadable.open(buf)
        runner = Runner(self, loadable, libraries=self.libraries, timeout_ms=self.timeout_ms)
        with self._lock:
            if self.runner is not None:
                self.runner.close()
            self.loadable, self.runner = loadable, runner
            self._inputs = loadable.tensors("input")
            self._outputs = loadable.tensors("output")

    def unload(self) -> None:
        with self._lock:
            if self.runner is not None:
                self.runner.close()
            self.loadable = self.runner = None
            self._inputs, self._outputs = [], []

    def _loaded(self) -> Runner:
        self._check_open()
        if self.runner is None:
            raise DlaError(NvError.NotInitialized, "nothing is loaded: call load() first")
        return self.runner

    # -- tensors -----------------------------------------------------------------------------------

    def getNumInputTensors(self) -> int:
        self._loaded()
        return len(self._inputs)

    def getNumOutputTensors(self) -> int:
        self._loaded()
        return len(self._outputs)

    def _desc(self, tensors: list[TensorDesc], index: int, what: str) -> TensorDesc:
        self._loaded()
        if not isinstance(index, int) or not 0 <= index < len(tensors):
            raise DlaError(NvError.BadParameter, f"{what} tensor {index!r}: the network has {len(tensors)}")
        return tensors[index]

    def getInputTensorDesc(self, index: int) -> TensorDesc:
        return self._desc(self._inputs, index, "input")

    def getOutputTensorDesc(self, index: int) -> TensorDesc:
        return self._desc(self._outputs, index, "output")

    def _set(self, tensors: list[TensorDesc], index: int, desc: TensorDesc, what: str) -> None:
        current = self._desc(tensors, index, what)
        if desc != current:
            changed = [f for f in ("name", "dims", "data_type", "layout", "strides", "size", "offset")
                       if getattr(desc, f) != getattr(current, f)]
            raise DlaError(NvError.NotSupported,
                           f"set{what.capitalize()}TensorDesc({index}): {', '.join(changed)} cannot change: "
                           "the network was compiled for this dense layout; recompile for another")

    def setInputTensorDesc(self, index: int, desc: TensorDesc) -> None:
        self._set(self._inputs, index, desc, "input")

    def setOutputTensorDesc(self, index: int, desc: TensorDesc) -> None:
        self._set(self._outputs, index, desc, "output")

    # -- memory and binding ------------------------------------------------------------------------

    def allocateSystemMemory(self, size: int) -> NvDlaMemHandle:
        self._check_open()
        mem, _ = self.port.NvDlaGetMem(self.handle, size)
        return mem  # freed by freeSystemMemory, or with the session on close()

    def freeSystemMemory(self, mem: NvDlaMemHandle) -> None:
        self._check_open()
        self.port.NvDlaFreeMem(self.handle, mem)

    def bindInputTensor(self, index: int, mem: NvDlaMemHandle) -> None:
        desc = self.getInputTensorDesc(index)
        self._loaded().bind_input(desc.buffer, mem)

    def bindOutputTensor(self, index: int, mem: NvDlaMemHandle) -> None:
        desc = self.getOutputTensorDesc(index)
        self._loaded().bind_output(desc.buffer, mem)

    # -- running -----------------------------------------------------------------------------------

    def submit(self) -> None:
        """Run the network to completion (blocking); its error, or Timeout, raises."""
        self._loaded().run(self.timeout_ms)

    def submitNonBlocking(self, input_syncs: list[ISync] | None = None) -> list[ISync]:
        """Start the network once ``input_syncs`` are signaled; return the output syncs."""
        runner = self._loaded()
        semaphore = self.port.NvDlaCreateSemaphore(self.handle)
        out = ISync(self.port, semaphore, 1)
        pre = [s.fence for s in (input_syncs or [])]
        runner.execute_async(pre, NvDlaFence(semaphore, 1))
        return [out]

    def createSync(self) -> ISync:
        """An application-signaled sync (signal() releases submits that wait on it)."""
        self._check_open()
        return ISync(self.port, self.port.NvDlaCreateSemaphore(self.handle), 1)

    # -- lifetime ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DlaError(NvError.InvalidState, "the runtime was closed")

    def close(self) -> None:
        if self._closed:
            return
        self.unload()
        self._closed = True
        self.port.NvDlaClose(self.handle)
        if self._owns_port:
            close = getattr(self.port, "close", None)
            if callable(close):
                close()


def createRuntime(port: str | NvDlaPort = "inprocess", config: str | Path | DeviceConfig = "full",
                  device: int = 0, *, mode: str = "deterministic", timeout_ms: int = 10_000) -> IRuntime:
    """A runtime on device instance ``device`` of a new in-process port (or of ``port``).

    Usage: ``rt = pydla.createRuntime(config="small")``
    """
    if isinstance(port, str):
        if port != "inprocess":
            raise DlaError(NvError.NotSupported, f"port '{port}': available: {', '.join(PORTS)}")
        from pydla.portability.inprocess import InProcessPort

        return IRuntime(InProcessPort(config, mode=mode, default_timeout_ms=timeout_ms), device,
                        owns_port=True, timeout_ms=timeout_ms)
    return IRuntime(port, device, timeout_ms=timeout_ms)
