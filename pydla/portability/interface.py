"""The UMD portability layer of the NVDLA runtime API: what an integrator implements to put pydla's
UMD on an OS or a device. Names and meaning follow the NVDLA portability layer; out-parameters of
the C API are return values, and failures raise DlaError.

An implementation provides every method of :class:`NvDlaPort`. Its data types
(:mod:`pydla.portability.interface_types`) and the argument checks ports share
(:mod:`pydla.portability.interface_checks`) are imported from here too. pydla ships an in-process port
(:mod:`pydla.portability.inprocess`: direct calls into a KMD in the same process); a port over real
ioctls is another implementation of the same class. Everything above this interface (the UMD) must
not know which port it runs on.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.portability.interface_checks import (
    MAX_TIMEOUT_MS,
    check_cu_args,
    check_free_args,
    check_prepared_submit,
    check_range,
    check_task,
    check_timeout_ms,
    memory_handle_error,
)
from pydla.portability.interface_types import (
    NvDlaCuArg,
    NvDlaDeviceInfo,
    NvDlaEngineSelect,
    NvDlaFence,
    NvDlaHeap,
    NvDlaMemHandle,
    NvDlaPreparedTask,
    NvDlaTask,
    NvDlaTaskStatus,
    NvDlaTrace,
)

__all__ = [
    "MAX_TIMEOUT_MS", "NvDlaCuArg", "NvDlaDeviceInfo", "NvDlaEngineSelect", "NvDlaFence", "NvDlaHeap",
    "NvDlaMemHandle", "NvDlaPort", "NvDlaPreparedTask", "NvDlaTask", "NvDlaTaskStatus", "NvDlaTrace",
    "check_cu_args", "check_free_args", "check_prepared_submit", "check_range", "check_task",
    "check_timeout_ms", "memory_handle_error",
]


class NvDlaPort(abc.ABC):
    """The NVDLA portability layer's NvDla* functions, as methods of one port instance."""

    @abc.abstractmethod
    def NvDlaOpen(self, select: NvDlaEngineSelect | int) -> Any:
        """Open device instance ``select`` and a session (a context) on it; return NvDlaHandle."""

    @abc.abstractmethod
    def NvDlaClose(self, h: Any) -> None:
        """Close the session: its pending tasks are aborted and its memory freed."""

    @abc.abstractmethod
    def NvDlaSubmit(self, h: Any, tasks: list[NvDlaTask]) -> list[NvDlaTaskStatus]:
        """Submit ``tasks`` (validated before anything reaches the device); return their status."""

    # -- prepared tasks: pydla's addition for the run-again path; these defaults submit the task as
    # NvDlaSubmit does, so a port needs to implement them only to be faster --------------------

    def NvDlaPrepareTask(self, h: Any, task: NvDlaTask) -> NvDlaPreparedTask:
        """Check ``task``'s address list once and keep what the port and the driver can (the
        driver's validated copy of the descriptors); submit it with :meth:`NvDlaSubmitPrepared` any
        number of times. The fences, priority and timeout of ``task`` are not part of it.

        Usage::

            p = port.NvDlaPrepareTask(h, NvDlaTask(addresses))
            port.NvDlaSubmitPrepared(h, p, [], [fence])
        """
        checked = check_task(task, "NvDlaPrepareTask")
        return NvDlaPreparedTask(NvDlaTask(list(checked.address_list), scalars=list(checked.scalars),
                                           nvdla_interface=checked.nvdla_interface))

    def NvDlaSubmitPrepared(self, h: Any, prepared: NvDlaPreparedTask, pre_fences: list[NvDlaFence],
                            post_fences: list[NvDlaFence], *, priority: int = 0,
                            timeout_ms: int | None = None) -> NvDlaTaskStatus:
        """Submit a task from :meth:`NvDlaPrepareTask`, waiting for ``pre_fences`` and reaching
        ``post_fences``, as NvDlaSubmit would submit it."""
        check_prepared_submit(prepared, pre_fences, post_fences, priority, timeout_ms, "NvDlaSubmitPrepared")
        task = NvDlaTask(prepared.task.address_list, list(pre_fences), list(post_fences), priority,
                         timeout_ms, list(prepared.task.scalars), prepared.task.nvdla_interface)
        return self.NvDlaSubmit(h, [task])[0]

    def NvDlaReleaseTask(self, h: Any, prepared: NvDlaPreparedTask) -> None:
        """Forget a prepared task (tasks already submitted from it run on). Idempotent."""
        if not isinstance(prepared, NvDlaPreparedTask):
            raise DlaError(NvError.BadParameter,
                           f"NvDlaReleaseTask: not from NvDlaPrepareTask: {prepared!r:.80}")

    @abc.abstractmethod
    def NvDlaGetMem(self, h: Any, size: int, heap: NvDlaHeap = NvDlaHeap.DRAM,
                    flags: int = 0) -> tuple[NvDlaMemHandle, npt.NDArray[np.uint8]]:
        """Allocate, pin and map ``size`` bytes the device can reach; return the handle and the
        host's view of the bytes (pData)."""

    @abc.abstractmethod
    def NvDlaFreeMem(self, h: Any, mem: NvDlaMemHandle, pData: Any = None,  # noqa: N803 (the API's name)
                     size: int | None = None) -> None:
        """Free memory from NvDlaGetMem. As in the NVDLA portability layer, ``pData`` (the host
        view NvDlaGetMem returned) and ``size`` (the size allocated) may be given: they must match
        that allocation (:func:`check_free_args`), else NvError BadParameter; None skips each check.
        NvError Busy while a submitted task still uses the memory (it stays usable).

        Usage: ``mem, data = port.NvDlaGetMem(h, 64); port.NvDlaFreeMem(h, mem, data, 64)``
        (or ``port.NvDlaFreeMem(h, mem)``)
        """

    @abc.abstractmethod
    def NvDlaCreateSemaphore(self, h: Any, value: int = 0) -> Any:
        """A timeline semaphore for NvDlaFence (pydla's addition: the NVDLA portability layer leaves
        fences to the port)."""

    @abc.abstractmethod
    def NvDlaDestroySemaphore(self, semaphore: Any) -> None:
        """Release a semaphore from NvDlaCreateSemaphore. Tasks already submitted with it are not
        affected (they hold what they need); any later use of it raises DlaError BadParameter.
        Idempotent, and a no-op once its device was closed (closing releases everything)."""

    @abc.abstractmethod
    def NvDlaWaitFence(self, fence: NvDlaFence, timeout_ms: float) -> None:
        """Block until ``fence`` is reached; after ``timeout_ms``, :class:`~pydla.errors.WaitTimeout`
        (NvError Timeout: the fence may still be reached); the error of a failed task that was to
        signal it."""

    @abc.abstractmethod
    def NvDlaSignalFence(self, fence: NvDlaFence) -> None:
        """Reach ``fence`` from the host (an application's ISync.signal)."""

    @abc.abstractmethod
    def NvDlaFailFence(self, fence: NvDlaFence, error: DlaError) -> None:
        """The host work that was to reach ``fence`` failed: its waiters get ``error``."""

    @abc.abstractmethod
    def NvDlaGetSemaphoreValue(self, semaphore: Any) -> int:
        """The current value of a semaphore from NvDlaCreateSemaphore."""

    @abc.abstractmethod
    def NvDlaGetMaxDevices(self) -> int:
        """Device instances the configuration has (0..n-1 for NvDlaOpen); IRuntime.getNumDevices
        counts those that open."""

    def NvDlaGetDeviceInfo(self, select: NvDlaEngineSelect | int) -> NvDlaDeviceInfo:
        """What device instance ``select`` is and can do (pydla's addition). A port that cannot tell
        raises NvError NotSupported (this default); the UMD then checks nothing ahead and leaves
        the refusal of what the device lacks to the driver.

        Usage::

            info = port.NvDlaGetDeviceInfo(0)
            if not info.has_block("RUBIK"): ...
        """
        raise DlaError(NvError.NotSupported, f"NvDlaGetDeviceInfo: {type(self).__name__} does not report "
                                             "device information")

    # -- compute units (XRT's xclOpenContext / xclRegRead / xclRegWrite / xclCloseContext and the
    # streams of AP_CTRL_NONE units); a port without them raises NotSupported (these defaults) ---

    def NvDlaOpenCuContext(self, h: Any, cu: str, exclusive: bool) -> None:
        """Open a CU context on compute unit ``cu`` (``kernel:instance``, the instance, or its index in
        the IP_LAYOUT, XRT's cu_index) for the handle ``h``: ``exclusive`` only while no other
        handle has one on it (NvError Busy). The other compute-unit calls take ``cu`` the same ways.

        Usage::

            port.NvDlaOpenCuContext(h, "scale", exclusive=True)
            port.NvDlaRegWrite(h, "scale", 0x10, 0x40000000)
            port.NvDlaCloseCuContext(h, "scale")
        """
        raise DlaError(NvError.NotSupported,
                       f"NvDlaOpenCuContext: {type(self).__name__} has no compute units")

    def NvDlaCloseCuContext(self, h: Any, cu: str) -> None:
        """Close ``h``'s CU context on ``cu``."""
        raise DlaError(NvError.NotSupported,
                       f"NvDlaCloseCuContext: {type(self).__name__} has no compute units")

    def NvDlaRegRead(self, h: Any, cu: str, offset: int) -> int:
        """The 32-bit register at ``offset`` of ``cu``'s window: under an exclusive CU context only
        (NvError InvalidState otherwise), at a 4-byte-aligned offset inside it (BadParameter)."""
        raise DlaError(NvError.NotSupported, f"NvDlaRegRead: {type(self).__name__} has no compute units")

    def NvDlaRegWrite(self, h: Any, cu: str, offset: int, value: int) -> None:
        """Write a 32-bit register of ``cu``: the rules of :meth:`NvDlaRegRead`."""
        raise DlaError(NvError.NotSupported, f"NvDlaRegWrite: {type(self).__name__} has no compute units")

    def NvDlaSubmitCu(self, h: Any, cu: str, args: list[NvDlaCuArg], pre_fences: list[NvDlaFence],
                      post_fences: list[NvDlaFence], *, timeout_ms: int | None = None) -> NvDlaTaskStatus:
        """Start one execution of compute unit ``cu`` (XRT's ``xrt::run::start``) for handle ``h``
        once ``pre_fences`` are reached; it reaches ``post_fences`` when it ends (or fails them with
        its error: NvDlaWaitFence raises it). ``args`` are the unit's arguments in order: an int is
        one 32-bit word (-2^31..2^32-1), ``(mem, offset)`` or ``(mem, offset, size)`` a buffer of
        ``h``'s from NvDlaGetMem, passed as its device address (two words), as NvDlaTask's address
        list spells them. ``timeout_ms``: how long it may run (None: the driver's default).
        Refusals: NotSupported for an AP_CTRL_NONE unit (use its streams) or the DLA engine's own
        unit; Busy while another handle holds ``cu`` exclusively; BadParameter for an unknown unit,
        an argument of the wrong type, or a buffer that is not ``h``'s.

        Usage::

            port.NvDlaSubmitCu(h, "vadd", [(a, 0), (b, 0), (out, 0), 1024], [], [NvDlaFence(sem, 1)])
            port.NvDlaWaitFence(NvDlaFence(sem, 1), 1000)
        """
        raise DlaError(NvError.NotSupported, f"NvDlaSubmitCu: {type(self).__name__} has no compute units")

    def NvDlaStreamWrite(self, h: Any, cu: str, data: bytes, timeout_ms: int) -> None:
        """Write all of ``data`` into AP_CTRL_NONE unit ``cu``'s input stream within ``timeout_ms``
        (NvError Timeout otherwise, saying how much went in)."""
        raise DlaError(NvError.NotSupported, f"NvDlaStreamWrite: {type(self).__name__} has no streams")

    def NvDlaStreamRead(self, h: Any, cu: str, nbytes: int, timeout_ms: int) -> bytes:
        """Read exactly ``nbytes`` of ``cu``'s output stream within ``timeout_ms``."""
        raise DlaError(NvError.NotSupported, f"NvDlaStreamRead: {type(self).__name__} has no streams")

    # -- memory access: the same for every port whose memory handles have a host view ------------

    # -- the device's trace ring (pydla's addition; the device and its firmware write it) ----------

    def NvDlaTraceStart(self, h: Any, size: int, mask: int) -> NvDlaTrace:
        """Have the device write a trace ring of ``size`` bytes with the event classes ``mask``
        (``trace_class_e`` bits of the register map) for handle ``h``; returns the trace, for
        :meth:`NvDlaTraceRead` and :meth:`NvDlaTraceStop`. One per device at a time (Busy).

        Usage::

            trace = port.NvDlaTraceStart(h, 1 << 20, 0x3)   # TASK | LAYER
            ring = port.NvDlaTraceRead(h, trace)            # bytes: pydla.deviceapi.trace.read_ring
            port.NvDlaTraceStop(h, trace)
        """
        raise DlaError(NvError.NotSupported,
                       f"NvDlaTraceStart: {type(self).__name__} cannot trace the device")

    def NvDlaTraceRead(self, h: Any, trace: NvDlaTrace) -> bytes:
        """The trace ring's bytes now (a consistent copy; the device goes on writing)."""
        raise DlaError(NvError.NotSupported, f"NvDlaTraceRead: {type(self).__name__} cannot trace the device")

    def NvDlaTraceStop(self, h: Any, trace: NvDlaTrace) -> bytes:
        """Stop the trace; its last bytes. Idempotent."""
        raise DlaError(NvError.NotSupported, f"NvDlaTraceStop: {type(self).__name__} cannot trace the device")

    def NvDlaMemMap(self, mem: NvDlaMemHandle, offset: int, size: int, flags: int = 0) -> memoryview:
        """Map ``size`` bytes from ``offset`` into the process; return the view (pVirtAddr)."""
        check_range(mem, offset, size, "NvDlaMemMap")
        if size == 0:
            raise DlaError(NvError.BadParameter, "NvDlaMemMap: size must be greater than 0")
        return memoryview(mem.bytes_view()[offset:offset + size].data)

    def NvDlaMemUnmap(self, mem: NvDlaMemHandle, addr: memoryview, length: int) -> None:
        """Unmap a view from NvDlaMemMap; ``length`` must be the mapped size."""
        if len(addr) != length:
            raise DlaError(NvError.BadParameter,
                           f"NvDlaMemUnmap: length {length}, the mapping has {len(addr)}")
        addr.release()

    def NvDlaMemRead(self, mem: NvDlaMemHandle, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` of ``mem`` (pDst becomes the return value)."""
        check_range(mem, offset, size, "NvDlaMemRead")
        return bytes(mem.bytes_view()[offset:offset + size])

    def NvDlaMemWrite(self, mem: NvDlaMemHandle, offset: int, src: Any, size: int | None = None) -> None:
        """Write ``src`` (bytes-like or a numpy array) at ``offset`` of ``mem``: its first ``size``
        bytes (the NVDLA runtime API's ``Size``; all of it when None).

        Usage: ``port.NvDlaMemWrite(mem, 0, header, 16)``
        """
        try:
            if isinstance(src, np.ndarray):
                if src.dtype.hasobject:
                    raise TypeError(f"a {src.dtype} array holds Python objects, not bytes")
                data = np.ascontiguousarray(src).view(np.uint8).ravel()
            else:
                data = np.ascontiguousarray(np.asarray(memoryview(src))).reshape(-1).view(np.uint8)
        except (TypeError, ValueError) as e:
            raise DlaError(NvError.BadParameter, f"NvDlaMemWrite: src is not bytes-like: {e}") from None
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= data.size:
                raise DlaError(NvError.BadParameter, f"NvDlaMemWrite: size {size!r} must be 0..{data.size} "
                                                     f"(the bytes src holds)")
            data = data[:size]
        check_range(mem, offset, data.size, "NvDlaMemWrite")
        mem.bytes_view()[offset:offset + data.size] = data

    def NvDlaMemGetSize(self, mem: NvDlaMemHandle) -> int:
        """The bytes in ``mem`` (the NVDLA runtime API's ``NvU64 NvDlaMemGetSize(NvDlaMemHandle
        hMem)``), or 0 when ``mem`` is not a live memory handle of this port: not a memory handle at
        all, freed (NvDlaFreeMem), of a closed handle (NvDlaClose), or another port's. It never
        raises: as the API's NvU64 says, 0 is the answer for "no such memory". This default knows
        only what every handle tells, whether its bytes can still be reached; a port that can tell
        its own handles from others' overrides it (the bundled ports do; the conformance suite
        checks all four cases).

        Usage::

            mem, data = port.NvDlaGetMem(h, 4096)
            port.NvDlaMemGetSize(mem)        # 4096
            port.NvDlaFreeMem(h, mem)
            port.NvDlaMemGetSize(mem)        # 0
        """
        if not isinstance(mem, NvDlaMemHandle):
            return 0
        try:
            mem.bytes_view()  # DlaError once freed or closed
            return int(mem.size)
        except DlaError:
            return 0

    # -- system services ------------------------------------------------------------------------

    def NvDlaDebugPrintf(self, fmt: str, *args: Any) -> None:
        import sys

        sys.stderr.write(fmt % args if args else fmt)

    def NvDlaAlloc(self, size: int) -> bytearray:
        if size < 0:
            raise DlaError(NvError.BadParameter, f"NvDlaAlloc: size {size}")
        return bytearray(size)

    def NvDlaFree(self, ptr: bytearray | None) -> None:
        """Freeing None is fine (the NVDLA portability layer's rule); Python frees the rest when the
        last reference goes, so this only checks what it was given."""
        if ptr is not None and not isinstance(ptr, bytearray):
            raise DlaError(NvError.BadParameter, f"NvDlaFree: {type(ptr).__name__} is not from NvDlaAlloc")

    def NvDlaSleepMS(self, msec: int) -> None:
        import time

        time.sleep(max(0, msec) / 1000)

    def NvDlaGetTimeMS(self) -> int:
        """Milliseconds of a monotonic clock, wrapping at 2^32 as the NVDLA portability layer's NvU32."""
        import time

        return int(time.monotonic() * 1000) & 0xFFFFFFFF
