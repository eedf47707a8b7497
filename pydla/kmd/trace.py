"""The device's trace ring, from the driver's side: set it up, read it while the device runs, stop it.

The driver puts the ring in a buffer of a context of its own (so that no client can map or free
it), writes its header, and points the device at it (GLB ``trace_*`` registers; see
:mod:`pydla.hw.trace_out` for what the device writes). One ring per device at a time: a second
start while one is attached is refused (Busy), the device's registers saying so.

Reading does not stop the device. :meth:`KmdTrace.snapshot` copies the ring and then reads the
live header again: entries the device overwrote while the copy was taken are cut off (the copy's
``tail`` moves past them), so the bytes returned always decode as a consistent ring
(:func:`pydla.deviceapi.trace.read_ring`), with what was lost counted in its ``dropped`` and in the
reader's ``lost_bytes``.

Usage::

    trace = KmdTrace(kmd, size=1 << 20, mask=LAYER | INTERRUPT)
    ...                                        # run work
    ring = trace.snapshot()                    # bytes of a ring; read_ring(ring, trace_api.API)
    trace.stop()

Tasks: the engine schedulers (:class:`pydla.firmware.engine.Engine`, on the host or the
microcontroller, and :class:`pydla.kmd.shave_run.ShaveEngine`) have the device record a task's start
and end (:func:`pydla.firmware.trace.trace_task`) only while their ``trace_tasks`` flag is set: a
trace with the TASK class sets it on the host's engines, and the firmware sets its own from the
device's mask at each submit. Untraced, a task costs no register access more.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import trace as T
from pydla.deviceapi.generated.headers import trace_ring_header_t
from pydla.deviceapi.trace import HEADER_SIZE, TraceRing
from pydla.errors import DlaError, NvError

if TYPE_CHECKING:
    from pydla.kmd.driver import Kmd

MIN_RING = 4096
MAX_RING = 1 << 28
ALL_CLASSES = sum(int(c) for c in R.trace_class_e)
TASK_CLASS = int(R.trace_class_e.TASK)


def check_trace_args(size: int, mask: int) -> None:
    if type(size) is not int or not MIN_RING <= size <= MAX_RING or size % 8:
        raise DlaError(NvError.BadParameter, f"trace ring size {size!r}: a multiple of 8, {MIN_RING}.."
                                             f"{MAX_RING} bytes")
    if type(mask) is not int or mask & ~ALL_CLASSES or not mask:
        names = ", ".join(f"{c.name} ({int(c)})" for c in R.trace_class_e)
        raise DlaError(NvError.BadParameter, f"trace mask {mask!r}: a non-zero combination of {names}")


class KmdTrace:
    """A trace ring of the driver's on its device. See the module docstring."""

    def __init__(self, kmd: Kmd, *, size: int, mask: int) -> None:
        check_trace_args(size, mask)
        self.kmd = kmd
        self.size = size
        self.mask = mask
        self._lock = threading.Lock()
        port = kmd.port
        if port.dla_reg_read(R.GLB_TRACE_SIZE):
            raise DlaError(NvError.Busy, "the device already writes a trace ring (another trace is running): "
                                         "stop it first")
        self.ctx = kmd.open_context()
        try:
            handle = kmd.bo_create(self.ctx, size)
            self.iova = kmd.bo_iova(self.ctx, handle)
            self._memory = kmd.bo_array(self.ctx, handle)
            ring = TraceRing.create(size - HEADER_SIZE, T.API)
            self._memory[:len(ring.buffer)] = np.frombuffer(ring.buffer, np.uint8)
            setup = ((R.GLB_TRACE_BASE_LO, self.iova & 0xFFFFFFFF), (R.GLB_TRACE_BASE_HI, self.iova >> 32),
                     (R.GLB_TRACE_CTX, self.ctx), (R.GLB_TRACE_MASK, mask), (R.GLB_TRACE_SIZE, size))
            for reg, value in setup:  # the size last: writing it starts tracing
                port.dla_reg_write(reg, value)
            if port.dla_reg_read(R.GLB_TRACE_SIZE) != size:
                raise DlaError(NvError.ResourceError, "the device refused the trace ring")
        except BaseException:
            kmd.close_context(self.ctx)
            raise
        self._set_task_flags(bool(mask & TASK_CLASS))
        self.stopped = False
        self._final: bytes | None = None

    def snapshot(self) -> bytes:
        """The ring's bytes now, consistent (see the module docstring). After :meth:`stop`: the last."""
        with self._lock:
            if self._final is not None:
                return self._final
            return self._copy()

    def _copy(self) -> bytes:
        copy = bytearray(self._memory.tobytes())
        taken = trace_ring_header_t.from_buffer(copy)
        live = trace_ring_header_t.from_buffer_copy(self._memory[:HEADER_SIZE].tobytes())
        if live.tail > taken.tail:
            # The device dropped entries while they were copied: start past them. The dropped count
            # grows by what it dropped meanwhile (the live header's count).
            taken.tail = min(live.tail, taken.head)
            taken.dropped = live.dropped
        return bytes(copy)

    def stop(self) -> bytes:
        """Stop tracing, free the ring, and return its last contents (idempotent)."""
        with self._lock:
            if self._final is not None:
                return self._final
            self._set_task_flags(False)
            self.kmd.port.dla_reg_write(R.GLB_TRACE_SIZE, 0)
            self._final = self._copy()
            self.stopped = True
        with contextlib.suppress(DlaError):  # a closed driver released the context with the rest
            self.kmd.close_context(self.ctx)
        return self._final

    def _set_task_flags(self, on: bool) -> None:
        """Tell the host's engine schedulers whether to record their tasks (see the module docstring;
        a headed device's engine is the firmware's, which reads the device's mask itself)."""
        for engine in (self.kmd.engine, getattr(self.kmd, "shave", None)):
            if hasattr(engine, "trace_tasks"):  # (the headed proxy has none)
                setattr(engine, "trace_tasks", on)  # noqa: B010 (an attribute the engine API does not declare)
