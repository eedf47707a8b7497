"""The Linux port's trace methods (a part of :class:`~pydla.portability.linux.LinuxPort`): the
device's trace ring through the daemon's TRACE_START / TRACE_READ / TRACE_STOP (uAPI 2.8).

Usage::

    trace = port.NvDlaTraceStart(h, 1 << 20, 0x3)
    ring = port.NvDlaTraceRead(h, trace)          # bytes of a consistent ring
    port.NvDlaTraceStop(h, trace)
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.portability.interface import NvDlaTrace

if TYPE_CHECKING:
    from pydla.portability.linux import LinuxDevice


@dataclass
class _LinuxTrace:
    device: LinuxDevice
    handle: int
    size: int
    final: bytes | None = None


class LinuxTraceMethods:
    """Mixed into :class:`~pydla.portability.linux.LinuxPort` (which provides ``_device``)."""

    if TYPE_CHECKING:
        def _device(self, h: Any) -> LinuxDevice: ...

    def NvDlaTraceStart(self, h: Any, size: int, mask: int) -> NvDlaTrace:
        device = self._device(h)
        if device.daemon_version[:2] < (2, 8):
            version = ".".join(map(str, device.daemon_version))
            raise DlaError(NvError.NotSupported, f"NvDlaTraceStart: the daemon speaks uAPI {version}; "
                                                 "tracing needs 2.8 (run the same pydla on both sides)")
        for name, value in (("size", size), ("mask", mask)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
                raise DlaError(NvError.BadParameter,
                               f"NvDlaTraceStart: {name} {value!r} must be 0..0xffffffff")
        out = device.ioctl(U.dla_ioctl_e.TRACE_START, U.dla_trace_start_t(size=size, mask=mask))
        return NvDlaTrace(_LinuxTrace(device, int(out.trace), size), int(out.context_id))

    def _mine(self, h: Any, trace: Any, what: str) -> _LinuxTrace:
        device = self._device(h)
        mine = trace.handle if isinstance(trace, NvDlaTrace) else None
        if not isinstance(mine, _LinuxTrace) or mine.device is not device:
            raise DlaError(NvError.BadParameter, f"{what}: not a trace this handle started: {trace!r:.60}")
        return mine

    def _copy(self, mine: _LinuxTrace, nr: int) -> bytes:
        buf = ctypes.create_string_buffer(mine.size)
        out = mine.device.ioctl(nr, U.dla_trace_read_t(trace=mine.handle, data=ctypes.addressof(buf),
                                                       size=mine.size))
        return buf.raw[:min(int(out.written), mine.size)]

    def NvDlaTraceRead(self, h: Any, trace: NvDlaTrace) -> bytes:
        mine = self._mine(h, trace, "NvDlaTraceRead")
        if mine.final is not None:
            return mine.final
        return self._copy(mine, U.dla_ioctl_e.TRACE_READ)

    def NvDlaTraceStop(self, h: Any, trace: NvDlaTrace) -> bytes:
        mine = self._mine(h, trace, "NvDlaTraceStop")
        if mine.final is None:
            mine.final = self._copy(mine, U.dla_ioctl_e.TRACE_STOP)
        return mine.final
