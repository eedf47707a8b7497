"""Compute units for applications: XRT's ``xrt::kernel`` / ``xrt::run`` over the portability layer.

A :class:`ComputeUnit` names one unit of the device's IP_LAYOUT (``kernel:instance``, the instance,
or the kernel). ``start(*args)`` queues one execution and returns an :class:`~pydla.umd.sync.ISync`
that its end reaches (XRT's ``xrt::run``: ``wait(timeout_ms)`` raises the execution's error);
calling the unit starts it and waits with the runtime's timeout. Arguments go in the unit's order:
an int is one 32-bit word, a memory handle from ``rt.allocateSystemMemory`` (or ``(mem, offset)`` /
``(mem, offset, size)`` for part of one) is its device address. AP_CTRL_NONE units are never
started: they run on their streams (``write_stream`` / ``read_stream``). Register access
(XRT's xclRegRead / xclRegWrite) needs an exclusive CU context: ``open(exclusive=True)``.

Usage::

    vadd = pydla.ComputeUnit(rt, "vadd")
    vadd(a_mem, b_mem, out_mem, 1024)              # start + wait
    sync = vadd.start(a_mem, b_mem, out_mem, 1024)  # an ISync
    sync.wait(1000)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.portability.interface import NvDlaCuArg, NvDlaMemHandle
from pydla.umd.sync import ISync

if TYPE_CHECKING:
    from pydla.umd.runtime import IRuntime


class ComputeUnit:
    """One compute unit of ``rt``'s device, by ``name`` (XRT's ``xrt::kernel(device, uuid, name)``).
    A name the device does not have: NvError NotSupported, listing the units it has.

    Usage: ``pydla.ComputeUnit(rt, "vadd")(a, b, out, 1024)``
    """

    def __init__(self, rt: IRuntime, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise DlaError(NvError.BadParameter, f"ComputeUnit: name {name!r} must be a non-empty string")
        self.rt = rt
        self.port = rt.port
        self.name = name
        self.arguments: tuple[str, ...] | None = None  # what a start takes, when the device says
        try:
            info = self.port.NvDlaGetDeviceInfo(rt.device)
        except DlaError as e:
            if e.code != NvError.NotSupported:
                raise
            return  # a port that cannot say: the driver refuses an unknown unit at the first use
        if not info.has_compute_unit(name):
            raise DlaError(NvError.NotSupported, f"ComputeUnit: device {rt.device} ('{info.name}') has no "
                                                 f"compute unit {name!r} (it has: "
                                                 f"{', '.join(info.compute_units) or 'none'})")
        self.arguments = info.compute_unit_args(name)

    def __repr__(self) -> str:
        return f"ComputeUnit({self.name!r})"

    # -- executions (xrt::run) ---------------------------------------------------------------------

    def start(self, *args: Any, timeout_ms: int | None = None, wait_for: Sequence[ISync] = ()) -> ISync:
        """Queue one execution with ``args`` (see the module) once every sync of ``wait_for`` is
        signaled; return the ISync its end reaches. ``timeout_ms``: how long it may run before the
        driver declares it hung (None: the driver's default). Refusals raise here: an AP_CTRL_NONE
        unit or the DLA engine's (NotSupported), a unit another holds exclusively (Busy), an
        argument of another type or another runtime's memory (BadParameter).

        Usage: ``vadd.start(a, b, out, 1024).wait(1000)``
        """
        if self.arguments is not None and len(args) != len(self.arguments):
            raise DlaError(NvError.BadParameter,
                           f"ComputeUnit '{self.name}'.start: {len(args)} argument(s) given; it takes "
                           f"{len(self.arguments)} ({', '.join(self.arguments) or 'none'})")
        words = [_argument(a, i, self.name) for i, a in enumerate(args)]
        pre = []
        for i, s in enumerate(wait_for):
            if not isinstance(s, ISync):
                raise DlaError(NvError.BadParameter, f"ComputeUnit '{self.name}'.start: wait_for[{i}] is "
                                                     f"{type(s).__name__}, not an ISync")
            pre.append(s.fence)
        sync = self.rt.createSync()  # its end signals it
        self.port.NvDlaSubmitCu(self.rt.handle, self.name, words, pre, [sync.fence], timeout_ms=timeout_ms)
        return sync

    def __call__(self, *args: Any, timeout_ms: int | None = None) -> None:
        """Start one execution and wait for it (up to the runtime's timeout); raise its error.

        Usage: ``vadd(a, b, out, 1024)``
        """
        self.start(*args, timeout_ms=timeout_ms).wait(self.rt.timeout_ms)

    # -- CU contexts and registers (xclOpenContext / xclRegRead / xclRegWrite) ------------------------

    def open(self, exclusive: bool = True) -> ComputeUnit:
        """Open a CU context on the unit: ``exclusive`` (registers become reachable; others' starts
        are refused with Busy while it is held) or shared. Returns the unit, so that
        ``with kernel.open(): ...`` closes it again.

        Usage: ``kernel.open(exclusive=True); kernel.write_register(0x10, v); kernel.close()``
        """
        self.rt._check_open()
        self.port.NvDlaOpenCuContext(self.rt.handle, self.name, exclusive)
        return self

    def close(self) -> None:
        """Close the CU context from :meth:`open` (xclCloseContext)."""
        self.port.NvDlaCloseCuContext(self.rt.handle, self.name)

    def __enter__(self) -> ComputeUnit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_register(self, offset: int) -> int:
        """The 32-bit register at byte ``offset`` of the unit's window (an exclusive context only).

        Usage: ``kernel.read_register(0x10)``
        """
        return self.port.NvDlaRegRead(self.rt.handle, self.name, offset)

    def write_register(self, offset: int, value: int) -> None:
        """Write the 32-bit register at ``offset`` (an exclusive context only).

        Usage: ``kernel.write_register(0x10, 0x40000000)``
        """
        self.port.NvDlaRegWrite(self.rt.handle, self.name, offset, value)

    # -- streams (AP_CTRL_NONE units) ----------------------------------------------------------------

    def write_stream(self, data: bytes | bytearray | memoryview, timeout_ms: int | None = None) -> None:
        """Write all of ``data`` into the unit's input stream within ``timeout_ms`` (the runtime's
        timeout by default); NvError Timeout otherwise.

        Usage: ``scale.write_stream(np.arange(4, dtype=np.float32).tobytes(), 1000)``
        """
        self.port.NvDlaStreamWrite(self.rt.handle, self.name, bytes(data), self._timeout(timeout_ms))

    def read_stream(self, nbytes: int, timeout_ms: int | None = None) -> bytes:
        """Read exactly ``nbytes`` of the unit's output stream within ``timeout_ms``.

        Usage: ``out = np.frombuffer(scale.read_stream(16, 1000), np.float32)``
        """
        return self.port.NvDlaStreamRead(self.rt.handle, self.name, nbytes, self._timeout(timeout_ms))

    def _timeout(self, timeout_ms: int | None) -> int:
        return self.rt.timeout_ms if timeout_ms is None else timeout_ms


def _argument(arg: Any, index: int, name: str) -> NvDlaCuArg:
    """One start argument as the port takes it: a bare memory handle is the whole buffer; numpy
    integers are ints; a bool is refused (a flag is a word: pass 0 or 1)."""
    if isinstance(arg, NvDlaMemHandle):
        return (arg, 0)
    if isinstance(arg, np.integer):
        return int(arg)
    if type(arg) is int or isinstance(arg, tuple):
        return arg  # the port checks a tuple's members
    raise DlaError(NvError.BadParameter,
                   f"ComputeUnit '{name}'.start: argument {index} is {type(arg).__name__} {arg!r:.40}: "
                   "an int (a 32-bit word), a memory handle, or (mem, offset[, size])")


__all__ = ["ComputeUnit"]
