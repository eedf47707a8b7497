"""The trace ring the device writes (a part of :class:`~pydla.hw.device.VirtualDevice`).

The host (the KMD, for whoever asked to trace) puts a ring in device memory, writes its header
(:meth:`pydla.deviceapi.trace.TraceRing.create`'s layout), and tells the device where it is through
the GLB registers ``trace_base_lo/hi``, ``trace_ctx`` and ``trace_size`` (writing the size starts
tracing, 0 stops); ``trace_mask`` (``trace_class_e`` bits) says which classes of events are written.
The device then appends, as it works and without stopping, the events of the ``trace`` contract:
``op_start``/``op_end`` of each block's operation (class LAYER), ``cu_start``/``cu_end`` of each
compute-unit execution (LAYER), ``interrupt`` at each rise of the interrupt line (INTERRUPT),
``error`` for a failed operation (ERROR), ``reg_write`` for each register write it takes
(REG_WRITE). Timestamps are the host's monotonic clock in ns (the virtual device shares it), so host
and device events fall on one timeline. When the ring is full the oldest entries are dropped and
counted in its header; the host reads it whenever it likes (``read_ring``).

A ring the device cannot use (not mapped in that context, a header that is not a trace ring of this
contract, a size smaller than the header says) is refused: nothing is written and the device log
says why. Tracing costs one attribute test per event site while it is off.

Usage (the host's side, through registers)::

    dev.reg_write(R.GLB_TRACE_BASE_LO, iova & 0xFFFFFFFF); dev.reg_write(R.GLB_TRACE_BASE_HI, iova >> 32)
    dev.reg_write(R.GLB_TRACE_CTX, ctx); dev.reg_write(R.GLB_TRACE_MASK, 0xFF)
    dev.reg_write(R.GLB_TRACE_SIZE, size)          # starts
"""

from __future__ import annotations

import time
from typing import Any

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import trace as T
from pydla.deviceapi.generated.device_api import dla_block_e, dla_status_e
from pydla.deviceapi.trace import HEADER_SIZE, TraceRing, read_ring
from pydla.errors import DlaError
from pydla.hw.memory import MmuFault
from pydla.hw.state import DeviceState

TASK, LAYER, REG_WRITE, INTERRUPT, ERROR, LOG = (int(c) for c in R.trace_class_e)
ALL_CLASSES = TASK | LAYER | REG_WRITE | INTERRUPT | ERROR | LOG
_STATUS_OF_ERROR = {int(R.dla_hw_error_e.MMU_FAULT): dla_status_e.MMU_FAULT}
_REGS = ("trace_base_lo", "trace_base_hi", "trace_ctx", "trace_size", "trace_mask")
# Per block (dla_block_e index): the word of its D group holding d_ctx_id (an operation's context).
CTX_WORD = {int(b): (getattr(R, f"{b.name}_D_CTX_ID") - 0x1000 * (int(b) + 1)) >> 2
            for b in dla_block_e if hasattr(R, f"{b.name}_D_CTX_ID")}


class TraceOutput(DeviceState):
    """The device's side of the trace ring. See the module docstring."""

    trace_mask: int
    _trace_ring: TraceRing | None
    _trace_regs: dict[str, int]
    _trace_seq: list[int]

    def _init_trace(self) -> None:
        self.trace_mask = 0  # the classes written now: 0 while no ring is attached
        self._trace_ring = None
        self._trace_regs = dict.fromkeys(_REGS, 0)
        self._trace_seq = [0] * 8
        for name in _REGS:
            address = getattr(R, f"GLB_{name.upper()}")
            self.glb_extra[address] = (self._trace_reader(name), self._trace_writer(name))

    def _trace_reader(self, name: str) -> Any:
        return lambda: self._trace_regs[name]

    def _trace_writer(self, name: str) -> Any:
        def write(value: int) -> int:
            self._trace_regs[name] = value
            if name == "trace_size":
                self._trace_attach(value)
            elif name == "trace_mask":
                self.trace_mask = value & ALL_CLASSES if self._trace_ring is not None else 0
            return 0
        return write

    def _trace_attach(self, size: int) -> None:
        """Under the lock: take the ring the registers describe (size 0: stop)."""
        self._trace_ring, self.trace_mask = None, 0
        if size == 0:
            return
        r = self._trace_regs
        base = r["trace_base_hi"] << 32 | r["trace_base_lo"]
        if size < HEADER_SIZE:
            self.log.append(f"trace ring at {base:#x}: refused: {size} bytes is less than its header")
            return
        try:
            bo, offset = self.iommu.translate(r["trace_ctx"], base, size)
            buffer = bo.array[offset:offset + size].data  # a writable memoryview: written in place
            read_ring(buffer, T.API)  # the header is a ring of this contract that fits the buffer
            self._trace_ring = TraceRing(buffer, T.API)
        except MmuFault as e:
            self.log.append(f"trace ring at {base:#x}: refused: {e}")
            return
        except DlaError as e:
            self.log.append(f"trace ring at {base:#x}: refused: {e.message}")
            return
        self.trace_mask = r["trace_mask"] & ALL_CLASSES
        self.log.append(f"trace ring at {base:#x} in context {r['trace_ctx']}: {size} bytes")

    def _trace_reset(self) -> None:
        """A device reset stops tracing (the registers read 0 again)."""
        self._trace_ring, self.trace_mask = None, 0
        self._trace_regs = dict.fromkeys(_REGS, 0)

    # -- what the device writes (under the device lock) ----------------------------------------------

    def _trace_put(self, record: Any) -> None:
        ring = self._trace_ring
        if ring is not None:
            ring.emit(record, time.monotonic_ns())

    def trace_op_start(self, block_index: int, group: int, ctx: int) -> None:
        seq = self._trace_seq[block_index]
        self._trace_seq[block_index] = (seq + 1) & 0xFFFFFFFF
        self._trace_put(T.op_start(seq=seq, context_id=ctx & 0xFFFF, block=block_index, group=group))

    def trace_op_end(self, block_index: int, group: int, ctx: int, duration_ns: int, error: int) -> None:
        seq = (self._trace_seq[block_index] - 1) & 0xFFFFFFFF
        self._trace_put(T.op_end(duration_ns=duration_ns, seq=seq, hw_error=error, context_id=ctx & 0xFFFF,
                                 block=block_index, group=group))

    def trace_error(self, block_index: int, error: int, fault_address: int) -> None:
        status = _STATUS_OF_ERROR.get(error, dla_status_e.ERROR)
        self._trace_put(T.error(task_id=0, fault_address=fault_address, status=status, op_index=0xFFFF,
                                block=block_index))

    def trace_interrupt(self, status: int, mask: int) -> None:
        self._trace_put(T.interrupt(status=status, mask=mask))

    def trace_reg_write(self, address: int, value: int, block_index: int, group: int) -> None:
        self._trace_put(T.reg_write(address=address, value=value, block=block_index, group=group))

    def trace_cu(self, unit: int, execution: int, duration_ns: int | None, error: int = 0) -> None:
        if duration_ns is None:
            self._trace_put(T.cu_start(execution=execution, unit=unit))
        else:
            self._trace_put(T.cu_end(duration_ns=duration_ns, execution=execution, hw_error=error, unit=unit))
