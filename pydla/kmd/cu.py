"""Compute-unit executions of the KMD: what a client submits to a CU and what it waits on.

A client names a compute unit of the device's IP_LAYOUT (``kernel:instance`` or the instance) and
gives its argument words: an ``int`` is one 32-bit word, a :class:`CuBuffer` is two (the low and
high halves of a device address in the submitting context, resolved and bounds-checked here, as XRT
passes a buffer object to ``clSetKernelArg``). The scheduler (:mod:`pydla.kmd.cu_sched`) starts it by
the unit's execution model.

Usage::

    ex = kmd.cu_submit(ctx, "vadd", [CuBuffer(a), CuBuffer(b), CuBuffer(out), n], timeout_ms=1000)
    ex.wait(1000)
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CuDesc
from pydla.kmd.bo import BufferObject
from pydla.kmd.job import COMPLETED, FAILED, QUEUED, RUNNING, Fence
from pydla.kmd.port import KmdPortability

if TYPE_CHECKING:
    from pydla.kmd.context import Context

_F = {f[0]: getattr(R.cu_ctrl_regs_t, f[0]).offset for f in R.cu_ctrl_regs_t._fields_}
CTRL, GIE, IER, ISR, ARGS = _F["ctrl"], _F["gie"], _F["ier"], _F["isr"], _F["args"]
CTX, ERROR, ERROR_EXEC, FAULT_LO, FAULT_HI = (_F["ctx"], _F["error"], _F["error_exec"], _F["fault_addr_lo"],
                                              _F["fault_addr_hi"])
REGS_END = R.cu_ctrl_regs_t.SIZE  # the control block, arguments and the device's own registers
MAX_ARG_WORDS = (CTX - ARGS) // 4
AP_START, AP_DONE, AP_IDLE, AP_READY, AP_CONTINUE = (int(R.cu_ctrl_e.AP_START), int(R.cu_ctrl_e.AP_DONE),
                                                     int(R.cu_ctrl_e.AP_IDLE), int(R.cu_ctrl_e.AP_READY),
                                                     int(R.cu_ctrl_e.AP_CONTINUE))
ISR_DONE, ISR_READY = 1, 2
CU_ERRORS = {int(R.dla_hw_error_e.MMU_FAULT): NvError.InvalidAddress,
             int(R.dla_hw_error_e.BAD_CONFIG): NvError.BadValue,
             int(R.dla_hw_error_e.UNSUPPORTED): NvError.NotSupported}


MAX_SCALARS = 64  # scalar arguments of one DLA task (the engine unit's argument registers)
_U64 = (1 << 64) - 1


def engine_unit(info: object) -> CuDesc | None:
    """The DLA engine's own entry of the device's IP_LAYOUT (``info.compute_units``), if declared."""
    return next((cu for cu in getattr(info, "compute_units", ()) if cu.engine), None)


def check_scalars(info: object, scalars: Sequence[tuple[int, int]], what: str) -> tuple[tuple[int, int], ...]:
    """The scalar arguments of a DLA task, checked: ``(argidx, value)`` pairs, each argidx once and
    inside the engine unit's argument registers (a 64-bit slot each, low word at 0x10 + 8 * argidx),
    each value a 64-bit integer (a negative one is stored in two's complement); sorted by argidx.
    NotSupported on a device whose IP_LAYOUT declares no engine unit."""
    if not scalars:
        return ()
    engine = engine_unit(info)
    if engine is None:
        raise DlaError(NvError.NotSupported,
                       f"{what}: scalar arguments go to the DLA engine's compute unit, and device "
                       f"'{getattr(info, 'name', '?')}' declares none (no IP_LAYOUT entry with model "
                       "'engine')")
    if not isinstance(scalars, (list, tuple)) or len(scalars) > MAX_SCALARS:
        raise DlaError(NvError.BadParameter, f"{what}: scalar arguments must be a list of at most "
                                             f"{MAX_SCALARS} (argidx, value) pairs")
    slots = (min(CTX, engine.window) - ARGS) // 8
    checked: dict[int, int] = {}
    for item in scalars:
        if (not isinstance(item, tuple) or len(item) != 2 or type(item[0]) is not int
                or type(item[1]) is not int):
            raise DlaError(NvError.BadParameter,
                           f"{what}: scalar argument {item!r} must be an (argidx, value) pair of integers")
        argidx, value = item
        if not 0 <= argidx < slots:
            raise DlaError(NvError.BadParameter,
                           f"{what}: scalar argidx {argidx} is outside the argument registers of compute "
                           f"unit '{engine.name}' (0..{slots - 1})")
        if argidx in checked:
            raise DlaError(NvError.BadParameter, f"{what}: scalar argidx {argidx} given twice")
        if not -(1 << 63) <= value <= _U64:
            raise DlaError(NvError.BadParameter,
                           f"{what}: scalar argidx {argidx}: value {value} does not fit 64 bits")
        checked[argidx] = value & _U64
    return tuple(sorted(checked.items()))


@dataclass(frozen=True)
class CuBuffer:
    """A buffer argument: the device address of buffer ``handle`` plus ``offset`` in the submitting
    context, as two argument words (low, high). ``size``: the bytes from ``offset`` the unit may use
    (to the end of the buffer by default); it must lie inside the buffer."""

    handle: int
    offset: int = 0
    size: int | None = None


CuArg = int | CuBuffer


def encode_args(context: Context, cu: CuDesc, args: Sequence[CuArg]) -> tuple[list[int], list[BufferObject]]:
    """The argument words and the buffer objects they use; every value checked and named."""
    words: list[int] = []
    bos: list[BufferObject] = []
    if not isinstance(args, (list, tuple)):
        raise DlaError(NvError.BadParameter, f"compute unit '{cu.name}': args must be a list, not {args!r}")
    for i, arg in enumerate(args):
        where = f"compute unit '{cu.name}': argument {i}"
        if isinstance(arg, CuBuffer):
            buf = context.buffers.get(arg.handle) if type(arg.handle) is int else None
            if buf is None:
                raise DlaError(NvError.BadParameter,
                               f"{where}: handle {arg.handle!r} is not a buffer of context {context.ctx}")
            size = buf.bo.size
            if type(arg.offset) is not int or not 0 <= arg.offset < size:
                raise DlaError(NvError.BadParameter,
                               f"{where}: offset {arg.offset!r} is outside buffer {arg.handle} "
                               f"({size} bytes)")
            if arg.size is not None and (type(arg.size) is not int or not 0 < arg.size <= size - arg.offset):
                raise DlaError(NvError.InvalidSize,
                               f"{where}: size {arg.size!r} at offset {arg.offset} is outside buffer "
                               f"{arg.handle} ({size} bytes)")
            address = buf.iova + arg.offset
            words += [address & 0xFFFFFFFF, address >> 32]
            bos.append(buf.bo)
        elif type(arg) is int and -(1 << 31) <= arg < (1 << 32):
            words.append(arg & 0xFFFFFFFF)  # a negative int32 is its two's complement
        else:
            raise DlaError(NvError.BadParameter,
                           f"{where}: {arg!r} is neither a 32-bit integer nor a CuBuffer")
    if len(words) > MAX_ARG_WORDS:
        raise DlaError(NvError.BadParameter,
                       f"compute unit '{cu.name}': {len(words)} argument words; at most {MAX_ARG_WORDS}")
    return words, bos


class ExecutionWaiter(Protocol):
    """What an execution needs of its scheduler (:class:`pydla.kmd.cu_sched.CuScheduler`): a wait."""

    def wait_for(self, ex: CuExecution, timeout_ms: float) -> None: ...


class CuExecution:
    """One submitted execution of a compute unit. ``wait`` returns when it completed and raises its
    error when it failed (NvError Timeout when it hung; the device's error otherwise). The methods
    after ``wait`` are the scheduler's."""

    def __init__(self, sched: ExecutionWaiter, exec_id: int, cu: CuDesc, context: Context, words: list[int],
                 bos: list[BufferObject], timeout_ms: int, pre_fences: list[Fence] | None,
                 post_fences: list[Fence] | None) -> None:
        self.sched = sched
        self.exec_id = exec_id
        self.cu = cu
        self.context = context
        self.words = words
        self.bos = bos
        self.timeout_ms = timeout_ms
        self.pre_fences = list(pre_fences or [])
        self.post_fences = list(post_fences or [])
        self.state = QUEUED
        self.error: DlaError | None = None
        self.submitted_at = time.monotonic()
        self.started_at = 0.0
        self.finished_at = 0.0
        self.deadline = 0.0
        self._event = threading.Event()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def blocked(self) -> DlaError | bool:
        """A pre-fence's failure, True while a pre-fence is not reached, False when it may start."""
        for sem, value in self.pre_fences:
            if sem.error is not None and not sem.reached(value):
                return DlaError(sem.error.code, f"execution {self.exec_id} of '{self.cu.name}' never ran: "
                                                f"its pre-fence failed: {sem.error.message}")
            if not sem.reached(value):
                return True
        return False

    def wait(self, timeout_ms: float | None = None) -> None:
        """Wait for the end (``timeout_ms``: its own timeout by default); raise its error if it failed."""
        self.sched.wait_for(self, self.timeout_ms if timeout_ms is None else timeout_ms)
        if self.error is not None:
            raise self.error

    def wait_done(self, seconds: float) -> None:
        """Sleep until the execution ends or ``seconds`` pass."""
        self._event.wait(seconds)

    def finish(self, error: DlaError | None) -> None:
        """Under the scheduler's lock: the terminal state, the post-fences, the waiters."""
        if self._event.is_set():
            return
        self.error = error
        self.state = FAILED if error is not None else COMPLETED
        self.finished_at = time.monotonic()
        for sem, value in self.post_fences:
            if error is None:
                sem.signal(value)
            else:
                sem.fail(error)
        self._event.set()

    def __repr__(self) -> str:
        return f"CuExecution({self.exec_id}, {self.cu.name!r}, {self.state})"


def read_unit_error(port: KmdPortability, cu: CuDesc, ex: CuExecution) -> DlaError | None:
    """After ``ex``'s ap_done was read: the unit's error register says how it ended (None: it
    completed), and is cleared (write to clear: the next execution's error is its own)."""
    code = port.dla_reg_read(cu.base + ERROR)
    if not code:
        return None
    number = port.dla_reg_read(cu.base + ERROR_EXEC)
    fault = port.dla_reg_read(cu.base + FAULT_LO) | port.dla_reg_read(cu.base + FAULT_HI) << 32
    port.dla_reg_write(cu.base + ERROR, 0)
    known = {int(e): e.name for e in R.dla_hw_error_e}
    detail = f" (access to {fault:#x} outside the mappings of context {ex.context.ctx})" \
        if code == R.dla_hw_error_e.MMU_FAULT else ""
    return DlaError(CU_ERRORS.get(code, NvError.ResourceError),
                    f"execution {ex.exec_id} of compute unit '{cu.name}' failed on the device: "
                    f"{known.get(code, str(code))}{detail} (the unit's execution {number})")


@dataclass(eq=False)  # compared and hashed by identity (a unit is in the map under two names)
class CuUnit:
    """The scheduler's state of one unit: queued requests, and those started and not yet done
    (in start order)."""

    desc: CuDesc
    queue: collections.deque[CuExecution] = field(default_factory=collections.deque)
    inflight: collections.deque[CuExecution] = field(default_factory=collections.deque)
    ready: bool = False  # GIE/IER written since the last reset
    started: int = 0
    completed: int = 0
    failed: int = 0
    hangs: int = 0
    exclusive: int | None = None  # the client context holding its CU context exclusively
    shared: set[int] = field(default_factory=set)  # those holding shared CU contexts


__all__ = ["COMPLETED", "FAILED", "QUEUED", "RUNNING", "CuArg", "CuBuffer", "CuExecution", "CuUnit"]
