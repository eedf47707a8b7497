"""The UMD portability layer of the NVDLA runtime API: what an integrator implements to put pydla's
UMD on an OS or a device. Names and meaning follow the NVDLA portability layer; out-parameters of
the C API are return values, and failures raise DlaError.

An implementation provides every method of :class:`NvDlaPort`. pydla ships an in-process port
(:mod:`pydla.portability.inprocess`: direct calls into a KMD in the same process); a port over real
ioctls is another implementation of the same class. Everything above this interface (the UMD) must
not know which port it runs on.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.errors import DlaError, NvError


class NvDlaEngineSelect(enum.IntEnum):
    """Which device instance NvDlaOpen opens (implementation defined: instance numbers)."""

    DLA0 = 0
    DLA1 = 1
    DLA2 = 2
    DLA3 = 3


class NvDlaHeap(enum.IntEnum):
    """Where NvDlaGetMem allocates. This implementation has device memory only."""

    DRAM = 0
    SRAM = 1


class NvDlaMemHandle(abc.ABC):
    """A buffer from NvDlaGetMem: its bytes as numpy, read/write, size and device address."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Bytes in the buffer."""

    @property
    @abc.abstractmethod
    def device_address(self) -> int:
        """Where the device sees it (for diagnostics; descriptors use address-list indices)."""

    @abc.abstractmethod
    def bytes_view(self) -> npt.NDArray[np.uint8]:
        """The buffer's bytes as a writable numpy array (the host's mapping)."""

    def array(self, dtype: Any = np.uint8, shape: tuple[int, ...] | None = None,
              offset: int = 0) -> npt.NDArray[Any]:
        """A numpy view of the buffer as ``dtype`` of ``shape`` from byte ``offset``."""
        dt = np.dtype(dtype)
        raw = self.bytes_view()
        count = (raw.size - offset) // dt.itemsize if shape is None else int(np.prod(shape))
        if offset < 0 or count < 0 or offset + count * dt.itemsize > raw.size:
            what = (f"{tuple(shape)} {dt} = {count * dt.itemsize} bytes" if shape is not None
                    else f"{dt} from offset {offset}")
            at = f" at offset {offset}" if offset and shape is not None else ""
            raise DlaError(NvError.InvalidSize, f"array: {what}{at} does not fit the {raw.size}-byte buffer")
        view: npt.NDArray[Any] = raw[offset:offset + count * dt.itemsize].view(dt)
        return view if shape is None else view.reshape(shape)


@dataclass(frozen=True)
class NvDlaDeviceInfo:
    """What :meth:`NvDlaPort.NvDlaGetDeviceInfo` reports of a device instance: which it is (of how
    many), its configuration's name, version register, functional blocks, precisions and memory,
    and the names ("kernel:instance") of its compute units (its IP_LAYOUT; empty when a port or an
    older daemon does not say).

    Usage: ``port.NvDlaGetDeviceInfo(0).has_block("PDP")``
    """

    instance: int
    instances: int
    name: str
    hw_version: int
    blocks: tuple[dla_block_e, ...]
    precisions: tuple[dla_precision_e, ...]
    memory_bytes: int
    compute_units: tuple[str, ...] = ()
    # Per unit of ``compute_units``, the names of the arguments a start takes (the model's
    # declaration, XRT's kernel metadata); None, or a tuple shorter than ``compute_units``: not known.
    compute_unit_arguments: tuple[tuple[str, ...] | None, ...] = ()
    # The unit of ``compute_units`` that is the DLA engine itself (its tasks go through NvDlaSubmit,
    # not NvDlaSubmitCu); None: the device declares none, or the port does not say.
    engine_unit: str | None = None

    def has_compute_unit(self, name: str) -> bool:
        """Whether a compute unit answers to ``name``: its instance, its kernel or "kernel:instance"."""
        return self._unit_index(name) is not None

    def compute_unit(self, name: str) -> str | None:
        """The "kernel:instance" name of the unit answering to ``name`` (see has_compute_unit)."""
        i = self._unit_index(name)
        return None if i is None else self.compute_units[i]

    def compute_unit_args(self, name: str) -> tuple[str, ...] | None:
        """The arguments a start of the unit called ``name`` takes, when the port says (else None)."""
        i = self._unit_index(name)
        return None if i is None or i >= len(self.compute_unit_arguments) else self.compute_unit_arguments[i]

    def _unit_index(self, name: str) -> int | None:
        return next((i for i, cu in enumerate(self.compute_units) if name in (cu, *cu.split(":", 1))), None)

    def has_block(self, block: dla_block_e | str) -> bool:
        """Whether the device has ``block`` (a dla_block_e or its name, in any case)."""
        if isinstance(block, str):
            return block.upper() in (b.name for b in self.blocks)
        return block in self.blocks

    def has_precision(self, precision: dla_precision_e | str) -> bool:
        """Whether the device computes in ``precision`` (a dla_precision_e or its name)."""
        if isinstance(precision, str):
            return precision.upper() in (p.name for p in self.precisions)
        return precision in self.precisions


@dataclass(frozen=True)
class NvDlaTrace:
    """What :meth:`NvDlaPort.NvDlaTraceStart` returns: the port's own ``handle`` of the trace, and the
    device's number of the context the starting handle runs in (its operations' ``context_id`` in
    the trace's events; -1 when the port does not say)."""

    handle: Any
    context_id: int = -1


@dataclass(frozen=True)
class NvDlaFence:
    """A sync point: ``semaphore`` (from :meth:`NvDlaPort.NvDlaCreateSemaphore`) reaching ``value``."""

    semaphore: Any
    value: int


@dataclass
class NvDlaTask:
    """One task to submit: its address list (entry 0 is the network descriptor) and the fences it
    waits for and signals. An entry is ``(mem, offset)`` (from ``offset`` to the end of ``mem``) or
    ``(mem, offset, size)`` (a sub-buffer: the task may use only those bytes). ``scalars``: the
    task's scalar arguments as ``(argidx, value)`` integer pairs, which the driver puts in the
    argument registers of the DLA engine's compute unit (XRT's scalar kernel arguments, such as the
    DPU opcode of XRT's run recipe); a device that declares no engine unit refuses them.
    ``nvdla_interface``: for a task of an NVDLA Loadable on an NVDLA configuration, the firmware
    interface version (major, minor, sub) of its network-descriptor blob (it chooses the descriptor
    layouts); None for pydla's own tasks."""

    address_list: list[tuple[NvDlaMemHandle, int] | tuple[NvDlaMemHandle, int, int]]
    pre_fences: list[NvDlaFence] = field(default_factory=list)
    post_fences: list[NvDlaFence] = field(default_factory=list)
    priority: int = 0
    timeout_ms: int | None = None
    scalars: list[tuple[int, int]] = field(default_factory=list)
    nvdla_interface: tuple[int, int, int] | None = None


@dataclass
class NvDlaPreparedTask:
    """What :meth:`NvDlaPort.NvDlaPrepareTask` returns: ``task`` (its address list, checked once)
    and the port's own handle to the prepared form (None for ports without one)."""

    task: NvDlaTask
    handle: Any = None


@dataclass(frozen=True)
class NvDlaTaskStatus:
    """What NvDlaSubmit reports per task: its id, for diagnostics and NvDlaTaskWait."""

    task_id: int
    handle: Any


NvDlaCuArg = int | tuple[NvDlaMemHandle, int] | tuple[NvDlaMemHandle, int, int]
"""One argument of :meth:`NvDlaPort.NvDlaSubmitCu`: a 32-bit word, or a buffer as in NvDlaTask."""


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
        return NvDlaPreparedTask(NvDlaTask(list(checked.address_list),
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
        _check_range(mem, offset, size, "NvDlaMemMap")
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
        _check_range(mem, offset, size, "NvDlaMemRead")
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
        _check_range(mem, offset, data.size, "NvDlaMemWrite")
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


def check_free_args(mem: NvDlaMemHandle, pData: Any, size: Any, what: str = "NvDlaFreeMem") -> None:  # noqa: N803
    """NvDlaFreeMem's ``pData`` and ``size`` against the allocation of ``mem``: ``pData`` must
    start where the buffer's host view starts (the view NvDlaGetMem returned, or a view of the
    same bytes), ``size`` must be the size allocated; None is not checked. Else BadParameter."""
    if size is not None and (type(size) is not int or size != mem.size):
        raise DlaError(NvError.BadParameter, f"{what}: size {size!r} is not the {mem.size} bytes allocated")
    if pData is None:
        return
    try:
        address = np.frombuffer(pData, np.uint8).__array_interface__["data"][0]
    except (TypeError, ValueError, AttributeError, BufferError):
        raise DlaError(NvError.BadParameter, f"{what}: pData {type(pData).__name__} is not the host view "
                                             "NvDlaGetMem returned (a buffer)") from None
    expected = mem.bytes_view().__array_interface__["data"][0]
    if address != expected:
        raise DlaError(NvError.BadParameter, f"{what}: pData at 0x{address:x} is not the host view "
                                             f"NvDlaGetMem returned for this memory (at 0x{expected:x})")


def check_task(task: Any, what: str) -> NvDlaTask:
    """``task`` if it is an NvDlaTask whose address list is a list or tuple and whose scalars are a
    list of ``(argidx, value)`` integer pairs (their values are the driver's to judge); else
    BadParameter."""
    if not isinstance(task, NvDlaTask) or not isinstance(task.address_list, (list, tuple)):
        raise DlaError(NvError.BadParameter, f"{what}: an NvDlaTask with an address list, not {task!r:.80}")
    scalars = task.scalars
    if not isinstance(scalars, (list, tuple)) or not all(
            isinstance(s, tuple) and len(s) == 2 and type(s[0]) is int and type(s[1]) is int
            for s in scalars):
        raise DlaError(NvError.BadParameter, f"{what}: scalars must be a list of (argidx, value) integer "
                                             f"pairs, not {scalars!r:.80}")
    return task


def check_prepared_submit(prepared: Any, pre_fences: Any, post_fences: Any, priority: Any,
                          timeout_ms: Any, what: str) -> None:
    """The arguments of NvDlaSubmitPrepared, by type (their values are the driver's to judge; each
    fence is checked where the port resolves it)."""
    if not isinstance(prepared, NvDlaPreparedTask):
        raise DlaError(NvError.BadParameter, f"{what}: not from NvDlaPrepareTask: {prepared!r:.80}")
    for fences, name in ((pre_fences, "pre_fences"), (post_fences, "post_fences")):
        if not isinstance(fences, (list, tuple)):
            raise DlaError(NvError.BadParameter, f"{what}: {name} must be a list of NvDlaFence, "
                                                 f"not {fences!r:.80}")
    if type(priority) is not int:
        raise DlaError(NvError.BadParameter, f"{what}: priority {priority!r} is not an integer")
    if timeout_ms is not None and type(timeout_ms) is not int:
        raise DlaError(NvError.BadParameter, f"{what}: timeout_ms {timeout_ms!r} is not an integer")


def memory_handle_error(what: str, *, freed: bool) -> DlaError:
    """The error for a memory handle a port cannot use, worded one way by every port: one of this
    session's that was freed ("the memory was already freed"), or one that never was this session's.

    Usage: ``raise memory_handle_error("NvDlaFreeMem", freed=mem.session is session)``
    """
    if freed:
        return DlaError(NvError.BadParameter, f"{what}: the memory was already freed (NvDlaFreeMem)")
    return DlaError(NvError.BadParameter, f"{what}: memory handle is not one of this session's")


MAX_TIMEOUT_MS = 3_600_000  # the driver's limit on a job's timeout (an hour)


def check_timeout_ms(value: Any, what: str, *, minimum: int = 1, maximum: int = MAX_TIMEOUT_MS) -> int:
    """A timeout in milliseconds as the API takes it: an int (a numpy integer too; not a bool, a
    float or a string) in ``minimum..maximum``; else BadParameter naming ``what`` (the parameter as
    the caller wrote it, e.g. "Session: timeout_ms") and the value.

    Usage: ``timeout_ms = check_timeout_ms(timeout_ms, "createRuntime: timeout_ms")``
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DlaError(NvError.BadParameter, f"{what} {value!r} is not an integer (milliseconds)")
    if not minimum <= value <= maximum:
        raise DlaError(NvError.BadParameter, f"{what} {value}: {minimum}..{maximum} (milliseconds)")
    return int(value)


def check_cu_args(args: Any, what: str) -> list[NvDlaCuArg]:
    """NvDlaSubmitCu's ``args``, by type: each an int of 32 bits (negative ones as int32), or a
    ``(mem, offset)`` / ``(mem, offset, size)`` tuple of a memory handle and ints (whose values and
    owner the port and the driver check). Else BadParameter naming the argument."""
    if not isinstance(args, (list, tuple)):
        raise DlaError(NvError.BadParameter, f"{what}: args must be a list, not {type(args).__name__}")
    for i, arg in enumerate(args):
        if type(arg) is int:
            if not -(1 << 31) <= arg < 1 << 32:
                raise DlaError(NvError.BadParameter, f"{what}: argument {i}: {arg} does not fit 32 bits")
        elif (not isinstance(arg, tuple) or len(arg) not in (2, 3) or not isinstance(arg[0], NvDlaMemHandle)
              or any(type(v) is not int for v in arg[1:])):
            raise DlaError(NvError.BadParameter,
                           f"{what}: argument {i}: {arg!r:.80} is neither a 32-bit int nor (mem, offset) / "
                           "(mem, offset, size) of NvDlaGetMem memory")
    return list(args)


def _check_range(mem: NvDlaMemHandle, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > mem.size:
        raise DlaError(NvError.InvalidSize,
                       f"{what}: offset {offset} + size {size} is outside the {mem.size}-byte buffer")
