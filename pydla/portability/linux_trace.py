"""The Linux port's traces (a part of :class:`~pydla.portability.linux.LinuxPort`): the
device's trace ring through the daemon's TRACE_START / TRACE_READ / TRACE_STOP (uAPI 2.8).

Usage::

    trace = port.NvDlaTraceStart(h, 1 << 20, 0x3)      # -> port.traces.start(device, ...)
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
    from pydla.portability.linux_device import LinuxDevice


@dataclass
class _LinuxTrace:
    device: LinuxDevice
    handle: int
    size: int
    final: bytes | None = None


class LinuxTraces:
    """The traces of one port's open device files; every method takes an open device."""

    def start(self, device: LinuxDevice, size: int, mask: int) -> NvDlaTrace:
        """NvDlaTraceStart."""
        device.needs((2, 8), "NvDlaTraceStart", "tracing needs")
        for name, value in (("size", size), ("mask", mask)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
                raise DlaError(NvError.BadParameter,
                               f"NvDlaTraceStart: {name} {value!r} must be 0..0xffffffff")
        out = device.ioctl(U.dla_ioctl_e.TRACE_START, U.dla_trace_start_t(size=size, mask=mask))
        return NvDlaTrace(_LinuxTrace(device, int(out.trace), size), int(out.context_id))

    @staticmethod
    def _mine(device: LinuxDevice, trace: Any, what: str) -> _LinuxTrace:
        mine = trace.handle if isinstance(trace, NvDlaTrace) else None
        if not isinstance(mine, _LinuxTrace) or mine.device is not device:
            raise DlaError(NvError.BadParameter, f"{what}: not a trace this handle started: {trace!r:.60}")
        return mine

    @staticmethod
    def _copy(mine: _LinuxTrace, nr: int) -> bytes:
        buf = ctypes.create_string_buffer(mine.size)
        out = mine.device.ioctl(nr, U.dla_trace_read_t(trace=mine.handle, data=ctypes.addressof(buf),
                                                       size=mine.size))
        return buf.raw[:min(int(out.written), mine.size)]

    def read(self, device: LinuxDevice, trace: NvDlaTrace) -> bytes:
        """NvDlaTraceRead: a consistent copy of the ring (the final one once stopped)."""
        mine = self._mine(device, trace, "NvDlaTraceRead")
        if mine.final is not None:
            return mine.final
        return self._copy(mine, U.dla_ioctl_e.TRACE_READ)

    def stop(self, device: LinuxDevice, trace: NvDlaTrace) -> bytes:
        """NvDlaTraceStop: the ring's last copy (idempotent)."""
        mine = self._mine(device, trace, "NvDlaTraceStop")
        if mine.final is None:
            mine.final = self._copy(mine, U.dla_ioctl_e.TRACE_STOP)
        return mine.final
