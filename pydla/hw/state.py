"""The state the parts of the virtual device share (:mod:`pydla.hw.device` creates it).

The device is one object made of parts, each in its own module and each a base class of
:class:`~pydla.hw.device.VirtualDevice`: the register file the host reads and writes
(:mod:`pydla.hw.regfile`), the execution of operations and the interrupt line
(:mod:`pydla.hw.execution`), fault injection and reset (:mod:`pydla.hw.faults`). They call one
another as methods of the one object, so that a register access costs no call more than it did
when they were one class; this base declares what they share, for the type checker.

Usage::

    class Part(DeviceState):
        def method(self) -> None:
            with self._lock: ...
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pydla.hw.decoded import DecodedCache
from pydla.hw.memory import DeviceMemory, Iommu
from pydla.target.config import DeviceConfig

if TYPE_CHECKING:
    from pydla.hw.cu.unit import ComputeUnit
    from pydla.hw.execution import Work
    from pydla.hw.regfile import Block, RegAccess


class DeviceState:
    """Declarations only: :meth:`VirtualDevice.__init__` sets every attribute."""

    config: DeviceConfig
    instance: int
    mode: str
    memory: DeviceMemory
    iommu: Iommu
    _where: dict[int, tuple[Block | None, int] | None]
    _word_targets: dict[bytes, tuple[Block, npt.NDArray[np.intp]] | None]
    _lock: threading.RLock
    _cond: threading.Condition
    _quiescing: int
    _blocks: dict[int, Block]
    _pending: collections.deque[tuple[Block, int]]
    _running: list[Work]
    _irq_handlers: list[Callable[[], object]]
    _kicking: bool
    _closed: bool
    intr_mask: int
    intr_status: int
    fault: tuple[int, int, int]
    ops_done: int
    bus_errors: int
    log: collections.deque[str]
    trace: list[RegAccess] | None
    _precisions: tuple[int, ...]
    decoded: DecodedCache
    _threads: list[threading.Thread]
    _names: dict[int, str]  # register names for the trace (the units' included)
    # GLB registers served by a part of the device (the microcontroller's, the trace ring's):
    # address -> (read, write); a write returns what it changed (0, or a status change to act on).
    glb_extra: dict[int, tuple[Callable[[], int], Callable[[int], int]]]
    trace_mask: int  # the trace_class_e classes written now (pydla.hw.trace_out)
    # compute units (pydla.hw.compute_units)
    _cus: list[ComputeUnit]
    _cu_bases: list[int]
    _cu_by_name: dict[str, ComputeUnit]
    _cu_hz: float
    _cu_t0: float
    _cu_clock: int
    _cu_poll: tuple[int, int] | None
    cu_intr_status: int
    _cu_workers: set[int]

    if TYPE_CHECKING:
        # What one part calls of another (defined there; nothing here at run time).

        def _run_runnable(self) -> None: ...  # execution
        def _raise_irq(self) -> None: ...  # execution
        def _wake(self, block: Block) -> None: ...  # execution
        def _reset(self, bits: int) -> None: ...  # faults
        def _cu_read(self, address: int) -> tuple[int, None]: ...  # compute_units
        def _cu_write(self, address: int, value: int) -> tuple[None, int]: ...  # compute_units
        def _cu_read_status(self) -> int: ...  # compute_units
        def _cu_ack(self, value: int) -> int: ...  # compute_units
        def _cu_step(self) -> bool: ...  # compute_units
        def _cu_reset(self) -> None: ...  # compute_units
        def trace_op_start(self, block_index: int, group: int, ctx: int) -> None: ...  # trace_out
        def trace_op_end(self, block_index: int, group: int, ctx: int, duration_ns: int,
                         error: int) -> None: ...  # trace_out
        def trace_error(self, block_index: int, error: int, fault_address: int) -> None: ...  # trace_out
        def trace_interrupt(self, status: int, mask: int) -> None: ...  # trace_out
        def trace_reg_write(self, address: int, value: int, block_index: int,
                            group: int) -> None: ...  # trace_out
        def trace_cu(self, unit: int, execution: int, duration_ns: int | None,
                     error: int = 0) -> None: ...  # trace_out
