"""The Linux port's compute units (a part of :class:`~pydla.portability.linux.LinuxPort`; uAPI 2.5):
CU contexts (XRT's xclOpenContext / xclCloseContext), register access (xclRegRead / xclRegWrite) and
the streams of AP_CTRL_NONE units, each an ioctl on the handle's device file; the device's IP_LAYOUT
(:meth:`compute_units`); and executions (NvDlaSubmitCu: CU_SUBMIT, uAPI 2.6),
whose completion reaches their post-fences.

The daemon answers a refusal with an errno and its reason (LAST_ERROR); here it becomes the NvError the
in-process port raises for the same call: EBUSY -> Busy (another file holds the unit), EPERM ->
InvalidState (no exclusive context, a second one, a close without one), EOPNOTSUPP -> NotSupported (the
DLA engine's unit; a stream of a unit that is not AP_CTRL_NONE), ENOENT / EINVAL -> BadParameter,
ETIMEDOUT -> Timeout.

A stream call moves at most MAX_STREAM_BYTES per ioctl and waits at most the daemon's MAX_WAIT_MS
(GET_PARAM): larger transfers are repeated in pieces, each with the time that is left. A piece that
runs out of the daemon's time while the caller's remains is not repeated: the KMD's stream calls move
all the bytes or time out, and one that timed out may have moved part of them, so the call raises
Timeout saying so (never a silent duplicate or gap).

Usage::

    port.NvDlaOpenCuContext(h, "scale", exclusive=True)     # -> port.cu.open_context(device, ...)
    port.NvDlaRegWrite(h, "scale", 0x10, 0x40000000)
    port.compute_units(0)        # the IP_LAYOUT, as the daemon's KMD has it
"""

from __future__ import annotations

import ctypes
import errno
import time
from typing import TYPE_CHECKING, Any, Protocol

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CuDesc
from pydla.portability.interface import NvDlaEngineSelect, NvDlaFence, NvDlaTaskStatus, check_cu_args
from pydla.portability.linux_handle import cu_ioctl
from pydla.portability.linux_handle import query_compute_units as query_compute_units
from pydla.uapi.ioctl import INLINE_FENCES, MAX_CU_ARGS, MAX_STREAM_TIMEOUT_MS

if TYPE_CHECKING:
    from pydla.portability.linux_buffers import LinuxBuffers
    from pydla.portability.linux_device import LinuxDevice
    from pydla.portability.linux_syncs import LinuxSyncs

NAME_BYTES = 64


class CuPort(Protocol):
    """What the compute units use of their port (:class:`~pydla.portability.linux.LinuxPort`): its
    buffers and syncs parts, and a device file opened for a question."""

    @property
    def buffers(self) -> LinuxBuffers: ...
    @property
    def syncs(self) -> LinuxSyncs: ...
    def probe(self, select: NvDlaEngineSelect | int, what: str) -> LinuxDevice: ...

def _ref(cu: Any, what: str) -> dict[str, Any]:
    """The name/index fields naming ``cu`` (a name, or an index into :meth:`compute_units`)."""
    if isinstance(cu, str):
        raw = cu.encode("utf-8", "surrogatepass") if cu else b""
        if not cu or len(raw) >= NAME_BYTES or "\0" in cu:
            raise DlaError(NvError.BadParameter, f"{what}: compute unit name {cu!r} must be "
                                                 f"1..{NAME_BYTES - 1} bytes of UTF-8 without NUL")
        return {"name": raw, "index": 0}
    if isinstance(cu, bool) or not isinstance(cu, int) or not 0 <= cu < 1 << 32:
        raise DlaError(NvError.BadParameter, f"{what}: compute unit {cu!r}: a name or an index")
    return {"name": b"", "index": cu}


def _u32(value: Any, what: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
        raise DlaError(NvError.BadParameter, f"{what}: {field} {value!r} must be 0..0xffffffff")
    return value


class LinuxComputeUnits:
    """The compute units of one port's open device files; every method takes an open device."""

    def __init__(self, port: CuPort) -> None:
        self.port = port
        self.buffers, self.syncs = port.buffers, port.syncs

    def compute_units(self, select: int) -> tuple[CuDesc, ...]:
        """Device instance ``select``'s IP_LAYOUT as its KMD in the daemon has it (NUM_CUS, CU_QUERY):
        the same records the in-process port's ``kmd.compute_units`` holds. A daemon older than
        uAPI 2.5 reports none."""
        device = self.port.probe(select, "compute_units")
        try:
            return query_compute_units(device)
        finally:
            device.close()

    def open_context(self, device: LinuxDevice, cu: str, exclusive: bool) -> None:
        what = "NvDlaOpenCuContext"
        device.needs((2, 5), what, "compute units need")
        if type(exclusive) is not bool:
            raise DlaError(NvError.BadParameter, f"{what}: exclusive {exclusive!r} must be True or False")
        flags = int(U.dla_cu_flags_e.EXCLUSIVE) if exclusive else 0
        cu_ioctl(device, U.dla_ioctl_e.CU_OPEN, U.dla_cu_context_t(**_ref(cu, what), flags=flags))
        device.cu_contexts.add(cu)

    def close_context(self, device: LinuxDevice, cu: str) -> None:
        what = "NvDlaCloseCuContext"
        device.needs((2, 5), what, "compute units need")
        device.cu_contexts.discard(cu)
        cu_ioctl(device, U.dla_ioctl_e.CU_CLOSE, U.dla_cu_context_t(**_ref(cu, what)))

    def reg_read(self, device: LinuxDevice, cu: str, offset: int) -> int:
        what = "NvDlaRegRead"
        device.needs((2, 5), what, "compute units need")
        args = U.dla_cu_reg_t(**_ref(cu, what), offset=_u32(offset, what, "offset"))
        return int(cu_ioctl(device, U.dla_ioctl_e.CU_REG_READ, args).value)

    def reg_write(self, device: LinuxDevice, cu: str, offset: int, value: int) -> None:
        what = "NvDlaRegWrite"
        device.needs((2, 5), what, "compute units need")
        args = U.dla_cu_reg_t(**_ref(cu, what), offset=_u32(offset, what, "offset"),
                              value=_u32(value, what, "register value"))
        cu_ioctl(device, U.dla_ioctl_e.CU_REG_WRITE, args)

    # -- executions ------------------------------------------------------------------------------

    def submit(self, device: LinuxDevice, cu: str, args: list[Any], pre_fences: list[NvDlaFence],
               post_fences: list[NvDlaFence], *, timeout_ms: int | None = None) -> NvDlaTaskStatus:
        """NvDlaSubmitCu: one CU_SUBMIT, the arguments in an array the daemon reads during the
        call, the fences (at most 4 each) in the struct."""
        what = f"NvDlaSubmitCu {cu!r:.70}"
        device.needs((2, 5), what, "compute units need")
        device.needs((2, 6), what, "starting compute units needs")
        checked = check_cu_args(args, what)
        if len(checked) > MAX_CU_ARGS:
            raise DlaError(NvError.BadParameter, f"{what}: {len(checked)} arguments (at most {MAX_CU_ARGS})")
        for fences, name in ((pre_fences, "pre_fences"), (post_fences, "post_fences")):
            if not isinstance(fences, (list, tuple)) or len(fences) > INLINE_FENCES:
                raise DlaError(NvError.BadParameter, f"{what}: {name} must be a list of at most "
                                                     f"{INLINE_FENCES} NvDlaFence")
        if timeout_ms is not None and (type(timeout_ms) is not int or not 0 < timeout_ms < 1 << 32):
            raise DlaError(NvError.BadParameter,
                           f"{what}: timeout_ms {timeout_ms!r} must be 1..2^32-1 or None")
        array = (U.dla_cu_arg_t * max(1, len(checked)))()
        for i, arg in enumerate(checked):
            if isinstance(arg, tuple):
                mem = self.buffers.mem(device, arg[0], f"{what} argument {i}")
                size = arg[2] if len(arg) == 3 else 0
                if len(arg) == 3 and size <= 0:  # 0 would mean "to the end" in the uAPI
                    raise DlaError(NvError.BadParameter, f"{what} argument {i}: size {size}")
                if not 0 <= arg[1] < 1 << 64:
                    raise DlaError(NvError.BadParameter, f"{what} argument {i}: offset {arg[1]}")
                array[i] = U.dla_cu_arg_t(kind=U.dla_cu_arg_kind_e.BUFFER, value=mem.handle, offset=arg[1],
                                          size=size)
            else:
                array[i] = U.dla_cu_arg_t(kind=U.dla_cu_arg_kind_e.WORD, value=arg & 0xFFFFFFFF)
        a = U.dla_cu_submit_t(**_ref(cu, what), num_args=len(checked), args=ctypes.addressof(array),
                              num_pre_fences=len(pre_fences), num_post_fences=len(post_fences),
                              timeout_ms=timeout_ms or 0)
        self.syncs.inline_fences(a, pre_fences, post_fences)
        done = cu_ioctl(device, U.dla_ioctl_e.CU_SUBMIT, a)  # the daemon reads the array during the call
        if done.completed:
            self.syncs.note_completed(post_fences)
        return NvDlaTaskStatus(int(done.exec_id), None)

    # -- streams ---------------------------------------------------------------------------------

    def stream_write(self, device: LinuxDevice, cu: str, data: bytes, timeout_ms: int) -> None:
        what = "NvDlaStreamWrite"
        device.needs((2, 5), what, "compute units need")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise DlaError(NvError.BadParameter, f"{what}: data must be bytes, not {type(data).__name__}")
        raw = bytes(data)
        buf = ctypes.create_string_buffer(raw, max(1, len(raw)))
        self._stream(device, U.dla_ioctl_e.CU_STREAM_WRITE, cu, buf, len(raw), timeout_ms, what)

    def stream_read(self, device: LinuxDevice, cu: str, nbytes: int, timeout_ms: int) -> bytes:
        what = "NvDlaStreamRead"
        device.needs((2, 5), what, "compute units need")
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 <= nbytes <= 1 << 31:
            raise DlaError(NvError.BadParameter, f"{what}: nbytes {nbytes!r} must be 0..2^31")
        buf = ctypes.create_string_buffer(max(1, nbytes))
        self._stream(device, U.dla_ioctl_e.CU_STREAM_READ, cu, buf, nbytes, timeout_ms, what)
        return buf.raw[:nbytes]

    def _stream(self, device: LinuxDevice, nr: int, cu: Any, buf: Any, size: int, timeout_ms: int,
                what: str) -> None:
        """Move ``size`` bytes of ``buf`` in pieces of at most MAX_STREAM_BYTES (see the module)."""
        ref = _ref(cu, what)
        limit = MAX_STREAM_TIMEOUT_MS
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= limit:
            raise DlaError(NvError.BadParameter, f"{what}: timeout_ms {timeout_ms!r} must be 1..{limit}")
        if size == 0:
            return  # nothing to move (the in-process port's answer too, for an AP_CTRL_NONE unit)
        piece_max = device.param(U.dla_param_e.MAX_STREAM_BYTES)
        deadline = time.monotonic() + timeout_ms / 1000
        done = 0
        while done < size:
            piece = min(piece_max, size - done)
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            args = U.dla_cu_stream_t(**ref, timeout_ms=min(left_ms, MAX_STREAM_TIMEOUT_MS),
                                     data=ctypes.addressof(buf) + done, size=piece)
            try:
                if device.ioctl(nr, args, again=(errno.EAGAIN,)) is None:
                    self._again(device, nr, args)
            except DlaError as e:
                if e.code == NvError.Timeout:
                    max_wait = device.param(U.dla_param_e.MAX_WAIT_MS)  # asked only to explain
                    cut = (f" (the daemon waits at most {max_wait} ms per call; the piece that ran "
                           "out may have moved in part)") if left_ms > max_wait else ""
                    raise DlaError(NvError.Timeout, f"{what} '{cu}': {done} of {size} bytes within "
                                                    f"{timeout_ms} ms{cut}: {e.message}") from None
                raise
            done += piece

    @staticmethod
    def _again(device: LinuxDevice, nr: int, args: Any) -> Any:
        """EAGAIN (the file's WAITs and stream calls are at its quota): retry for up to a second."""
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            time.sleep(0.002)
            done = device.ioctl(nr, args, again=(errno.EAGAIN,))
            if done is not None:
                return done
        return device.ioctl(nr, args)

