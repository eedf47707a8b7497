"""The KMD's compute-unit API (a part of :class:`~pydla.kmd.driver.Kmd`, which its ``cu_*`` methods
call): executions by execution model (:mod:`pydla.kmd.cu_sched`), CU contexts, register access, and
the streams of AP_CTRL_NONE units.

Usage::

    kmd.compute_units                        # the IP_LAYOUT (CuDesc), from the port's device info
    ex = kmd.cu_submit(ctx, "noop_hs", [])   # HS / CHAIN units only
    ex.wait(1000)
    kmd.cu_stream_write(ctx, "scale", data, timeout_ms=1000)
    out = kmd.cu_stream_read(ctx, "scale", len(data), timeout_ms=1000)
    kmd.cu_open_context(ctx, "scale", exclusive=True)        # xclOpenContext
    kmd.cu_reg_write(ctx, "scale", 0x10, 0x40000000)         # xclRegWrite (scale = 2.0)
    kmd.cu_reg_read(ctx, "scale", 0x10)                      # xclRegRead
    kmd.cu_close_context(ctx, "scale")                       # xclCloseContext

**CU contexts** (XRT's xclOpenContext): a client context opens a unit *shared* (several may) or
*exclusive* (only while no other context has it open, shared or exclusive; and no other context can
open it meanwhile: NvError Busy). Register reads and writes (xclRegRead / xclRegWrite) are allowed
only under an exclusive context (NvError InvalidState otherwise, which the Linux port answers with
EPERM), at a 4-byte-aligned offset inside the unit's register block. While a context holds a unit
exclusively, other contexts' executions of it are refused (Busy): the holder owns its registers.

**The DLA engine's unit.** On a device without a microcontroller the driver's engine scheduler is
the engine's controller, so the engine unit's control block is the driver's: a context may open it
(shared or exclusive) and, exclusive, read it; writes are refused (NotSupported). CTRL reads
ap_start while a task runs, ap_idle when none does, ap_ready while the engine takes another task
(fewer in flight than its pipeline depth); the argument registers (a 64-bit slot per argidx from
0x10, low word first) hold the scalar arguments of the running task (see ``Kmd.submit``).
"""

from __future__ import annotations

import threading

from pydla.errors import DlaError, NvError
from pydla.firmware.engine_api import EngineApi
from pydla.firmware.interface import CuDesc, KmdDeviceInfo
from pydla.kmd.context import ContextTable
from pydla.kmd.cu import AP_IDLE, AP_READY, AP_START, ARGS, CTRL, CTX, REGS_END, CuArg, CuExecution, CuUnit
from pydla.kmd.cu_sched import CuScheduler
from pydla.kmd.job import Fence
from pydla.kmd.lock import OwnedLock
from pydla.kmd.port import KmdPortability

MAX_STREAM_BYTES = 1 << 26  # one stream read or write


class KmdComputeUnits:
    """A part of :class:`~pydla.kmd.driver.Kmd`, whose ``cu_*`` methods call it; see the module
    docstring. It shares the driver's lock and open contexts."""

    def __init__(self, port: KmdPortability, info: KmdDeviceInfo, cus: CuScheduler, engine: EngineApi,
                 lock: OwnedLock | threading.RLock, contexts: ContextTable) -> None:
        self.port = port
        self.info = info
        self.cus = cus
        self.engine = engine
        self.lock = lock
        self.contexts = contexts

    @property
    def compute_units(self) -> tuple[CuDesc, ...]:
        """The device's IP_LAYOUT, as the port described it."""
        return self.info.compute_units

    def submit(self, ctx: int, cu: str, args: list[CuArg], *, timeout_ms: int | None = None,
                  pre_fences: list[Fence] | None = None,
                  post_fences: list[Fence] | None = None) -> CuExecution:
        """Queue one execution of compute unit ``cu`` (``kernel:instance`` or the instance) for
        context ``ctx`` with argument words ``args`` (ints, and :class:`~pydla.kmd.cu.CuBuffer` for
        the device address of a buffer of ``ctx``). It starts by the unit's execution model once its
        pre-fences are reached; it signals (or fails) its post-fences when it ends."""
        with self.lock:
            self.contexts.check_open()
            u = self.cus.unit(cu)
            if u.exclusive is not None and u.exclusive != ctx:
                raise DlaError(NvError.Busy, f"compute unit '{u.desc.name}' is held exclusively by context "
                                             f"{u.exclusive}")
            return self.cus.submit(self.contexts.get(ctx), cu, args, timeout_ms, pre_fences, post_fences)

    # -- CU contexts and register access (XRT's xclOpenContext, xclRegRead, xclRegWrite) -----------

    def open_context(self, ctx: int, cu: str, *, exclusive: bool) -> None:
        """Open a CU context on unit ``cu`` for ``ctx``, exclusive or shared (see the module docstring)."""
        if type(exclusive) is not bool:
            raise DlaError(NvError.BadParameter, f"exclusive {exclusive!r} must be True or False")
        with self.lock:
            self.contexts.check_open()
            self.contexts.get(ctx)
            u = self.cus.unit(cu)
            if ctx == u.exclusive or ctx in u.shared:
                raise DlaError(NvError.InvalidState, f"context {ctx} already has a CU context on "
                                                     f"'{u.desc.name}'")
            if u.exclusive is not None or (exclusive and u.shared):
                holder = (f"context {u.exclusive} holds it exclusively" if u.exclusive is not None
                          else f"context(s) {', '.join(map(str, sorted(u.shared)))} hold it shared")
                raise DlaError(NvError.Busy, f"compute unit '{u.desc.name}': cannot open it "
                                             f"{'exclusive' if exclusive else 'shared'}: {holder}")
            if exclusive:
                u.exclusive = ctx
            else:
                u.shared.add(ctx)

    def close_context(self, ctx: int, cu: str) -> None:
        """Close ``ctx``'s CU context on unit ``cu`` (xclCloseContext)."""
        with self.lock:
            u = self.cus.unit(cu)
            if u.exclusive == ctx:
                u.exclusive = None
            elif ctx in u.shared:
                u.shared.discard(ctx)
            else:
                raise DlaError(NvError.InvalidState, f"context {ctx} has no CU context on '{u.desc.name}'")

    def reg_read(self, ctx: int, cu: str, offset: int) -> int:
        """Read the register at ``offset`` of unit ``cu`` (xclRegRead): an exclusive context only."""
        with self.lock:
            u = self._reg_unit(ctx, cu, offset, "read")
            if u.desc.engine:
                return self._engine_register(offset)
            return self.port.dla_reg_read(u.desc.base + offset)

    def reg_write(self, ctx: int, cu: str, offset: int, value: int) -> None:
        """Write ``value`` to the register at ``offset`` of unit ``cu`` (xclRegWrite): exclusive only."""
        if type(value) is not int or not 0 <= value <= 0xFFFFFFFF:
            raise DlaError(NvError.BadParameter, f"register value {value!r} must be 0..0xffffffff")
        with self.lock:
            u = self._reg_unit(ctx, cu, offset, "write")
            if u.desc.engine:
                raise DlaError(NvError.NotSupported,
                               f"register write of compute unit '{u.desc.name}': it is the DLA engine, whose "
                               "control block is the driver's engine scheduler (read it; submit tasks)")
            self.port.dla_reg_write(u.desc.base + offset, value)

    def _engine_register(self, offset: int) -> int:
        """The engine unit's control block as the driver keeps it (see the module docstring)."""
        engine = self.engine
        head = engine.current
        if offset == CTRL:
            value = AP_START if head is not None else AP_IDLE
            return value | (AP_READY if len(engine.inflight) < engine.depth else 0)
        if head is None or not ARGS <= offset < CTX:
            return 0
        slot, word = divmod(offset - int(ARGS), 8)
        for argidx, value in head.task.scalars:
            if argidx == slot:
                return value >> (8 * word) & 0xFFFFFFFF
        return 0

    def _reg_unit(self, ctx: int, cu: str, offset: int, what: str) -> CuUnit:
        self.contexts.check_open()
        self.contexts.get(ctx)
        u = self.cus.unit(cu)
        if u.exclusive != ctx:
            raise DlaError(NvError.InvalidState,
                           f"register {what} of compute unit '{u.desc.name}' needs an exclusive CU context "
                           f"(xclOpenContext); context {ctx} has "
                           f"{'a shared one' if ctx in u.shared else 'none'}")
        limit = min(REGS_END, u.desc.window)
        if type(offset) is not int or not 0 <= offset < limit or offset % 4:
            raise DlaError(NvError.BadParameter,
                           f"register {what} of compute unit '{u.desc.name}': offset {offset!r} must be a "
                           f"multiple of 4 in 0..{limit - 4:#x}")
        return u

    def release(self, ctx: int) -> None:
        """Under the driver's lock, ``ctx`` closing: its CU contexts go."""
        for u in self.cus.all_units:
            u.shared.discard(ctx)
            if u.exclusive == ctx:
                u.exclusive = None

    def stream_write(self, ctx: int, cu: str, data: bytes, *, timeout_ms: int) -> None:
        """Write all of ``data`` into AP_CTRL_NONE unit ``cu``'s input stream within ``timeout_ms``."""
        u = self._stream_unit(ctx, cu, len(data) if isinstance(data, (bytes, bytearray, memoryview)) else -1,
                              timeout_ms, "write")
        self.port.dla_cu_stream_write(u.desc, bytes(data), timeout_ms / 1000)

    def stream_read(self, ctx: int, cu: str, nbytes: int, *, timeout_ms: int) -> bytes:
        """Read exactly ``nbytes`` of AP_CTRL_NONE unit ``cu``'s output stream within ``timeout_ms``."""
        u = self._stream_unit(ctx, cu, nbytes if type(nbytes) is int else -1, timeout_ms, "read")
        return self.port.dla_cu_stream_read(u.desc, nbytes, timeout_ms / 1000)

    def _stream_unit(self, ctx: int, cu: str, nbytes: int, timeout_ms: int, what: str) -> CuUnit:
        """The stream's unit, every argument checked (the wait itself runs without the driver's lock)."""
        with self.lock:
            self.contexts.check_open()
            self.contexts.get(ctx)
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
