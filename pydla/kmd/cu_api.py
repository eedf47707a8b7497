"""The KMD's compute-unit API (a part of :class:`~pydla.kmd.driver.Kmd`): executions by execution
model (:mod:`pydla.kmd.cu_sched`), and the streams of AP_CTRL_NONE units.

Usage::

    kmd.compute_units                        # the IP_LAYOUT (CuDesc), from the port's device info
    ex = kmd.cu_submit(ctx, "noop_hs", [])   # HS / CHAIN units only
    ex.wait(1000)
    kmd.cu_stream_write(ctx, "scale", data, timeout_ms=1000)
    out = kmd.cu_stream_read(ctx, "scale", len(data), timeout_ms=1000)
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pydla.errors import DlaError, NvError
from pydla.kmd.cu import CuArg, CuExecution
from pydla.kmd.cu_sched import CuScheduler, CuUnit
from pydla.kmd.job import Fence
from pydla.kmd.port import CuDesc, KmdDeviceInfo, KmdPortability

if TYPE_CHECKING:
    from pydla.kmd.context import Context

MAX_STREAM_BYTES = 1 << 26  # one stream read or write


class KmdComputeUnits:
    """Mixed into :class:`~pydla.kmd.driver.Kmd` (which provides the attributes declared here)."""

    port: KmdPortability
    info: KmdDeviceInfo
    cus: CuScheduler
    _lock: threading.RLock

    if TYPE_CHECKING:
        def _check_open(self) -> None: ...  # the driver's
        def _context(self, ctx: int) -> Context: ...  # the driver's

    @property
    def compute_units(self) -> tuple[CuDesc, ...]:
        """The device's IP_LAYOUT, as the port described it."""
        return self.info.compute_units

    def cu_submit(self, ctx: int, cu: str, args: list[CuArg], *, timeout_ms: int | None = None,
                  pre_fences: list[Fence] | None = None,
                  post_fences: list[Fence] | None = None) -> CuExecution:
        """Queue one execution of compute unit ``cu`` (``kernel:instance`` or the instance) for
        context ``ctx`` with argument words ``args`` (ints, and :class:`~pydla.kmd.cu.CuBuffer` for
        the device address of a buffer of ``ctx``). It starts by the unit's execution model once its
        pre-fences are reached; it signals (or fails) its post-fences when it ends."""
        with self._lock:
            self._check_open()
            return self.cus.submit(self._context(ctx), cu, args, timeout_ms, pre_fences, post_fences)

    def cu_stream_write(self, ctx: int, cu: str, data: bytes, *, timeout_ms: int) -> None:
        """Write all of ``data`` into AP_CTRL_NONE unit ``cu``'s input stream within ``timeout_ms``."""
        u = self._stream_unit(ctx, cu, len(data) if isinstance(data, (bytes, bytearray, memoryview)) else -1,
                              timeout_ms, "write")
        self.port.dla_cu_stream_write(u.desc, bytes(data), timeout_ms / 1000)

    def cu_stream_read(self, ctx: int, cu: str, nbytes: int, *, timeout_ms: int) -> bytes:
        """Read exactly ``nbytes`` of AP_CTRL_NONE unit ``cu``'s output stream within ``timeout_ms``."""
        u = self._stream_unit(ctx, cu, nbytes if type(nbytes) is int else -1, timeout_ms, "read")
        return self.port.dla_cu_stream_read(u.desc, nbytes, timeout_ms / 1000)

    def _stream_unit(self, ctx: int, cu: str, nbytes: int, timeout_ms: int, what: str) -> CuUnit:
        """The stream's unit, every argument checked (the wait itself runs without the driver's lock)."""
        with self._lock:
            self._check_open()
            self._context(ctx)
            u = self.cus.unit(cu)
        if u.desc.control != "NONE":
            raise DlaError(NvError.NotSupported,
                           f"compute unit '{u.desc.name}' is AP_CTRL_{u.desc.control}: only AP_CTRL_NONE "
                           "units have streams")
        if not 0 <= nbytes <= MAX_STREAM_BYTES:
            raise DlaError(NvError.BadParameter,
                           f"stream {what} of {nbytes if nbytes >= 0 else 'a non-bytes value'}: "
                           f"0..{MAX_STREAM_BYTES} bytes")
        if type(timeout_ms) is not int or not 0 < timeout_ms <= 3_600_000:
            raise DlaError(NvError.BadParameter,
                           f"stream {what} timeout_ms {timeout_ms!r} must be 1..3600000")
        return u
