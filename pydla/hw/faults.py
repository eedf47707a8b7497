"""Fault injection and reset of the virtual device (:class:`Faults`, a part of
:class:`~pydla.hw.device.VirtualDevice`).

A driver developer makes the next operations of a block hang (:meth:`Faults.inject_hang`),
fail with an error code (:meth:`Faults.inject_error`), or makes the block ignore its reset
bit so that only a device reset recovers it (:meth:`Faults.inject_wedge`). The GLB reset
register resets blocks (a bit per block) or the whole device (``DEVICE_RESET_BIT``): their groups go
idle, their pending enables and injected faults are dropped, an operation they were computing is
abandoned (its result discarded), and the reset returns once such an operation has stopped writing
memory. A device reset also resets the compute units, the SHAVE tiles and stops the trace ring.

Usage::

    dev.inject_hang("SDP")
    dev.reg_write(R.GLB_RESET, 1 << int(dla_block_e.SDP))
"""

from __future__ import annotations

import collections
import threading
import time

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.hw.compute_units import ComputeUnits
from pydla.hw.execution import Execution, Work
from pydla.hw.shave.part import ShaveTiles
from pydla.hw.state import Block, DeviceState, done_bit, error_bit
from pydla.hw.trace_out import TraceOutput

DEVICE_RESET_BIT = 31
RESET_QUIESCE_S = 30.0  # the longest a reset waits for an abandoned operation to stop computing


class Faults:
    """Fault injection and reset (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

    def __init__(self, state: DeviceState, execution: Execution, units: ComputeUnits, tiles: ShaveTiles,
                 trace: TraceOutput) -> None:
        self._state = state
        self._lock = state.lock
        self._execution = execution
        self._units = units
        self._tiles = tiles
        self._trace = trace

    def inject_hang(self, block: dla_block_e | str, count: int = 1) -> None:
        """The next ``count`` operations of ``block`` start and never finish (until a reset)."""
        with self._lock:
            self.block(block).hangs += count

    def inject_wedge(self, block: dla_block_e | str) -> None:
        """``block`` ignores its own bit of the reset register (a wedged block): a block reset leaves
        it as it is (busy, with its injected hangs); only a device reset brings it back."""
        with self._lock:
            self.block(block).wedged = True

    def inject_error(self, block: dla_block_e | str, code: int = int(R.dla_hw_error_e.BAD_CONFIG)) -> None:
        """The next operation of ``block`` fails with ``code`` (a dla_hw_error_e)."""
        if code not in R.dla_hw_error_e._value2member_map_ or code == R.dla_hw_error_e.NONE:
            raise DlaError(NvError.BadParameter,
                           f"inject_error code {code}: use a dla_hw_error_e other than NONE")
        with self._lock:
            self.block(block).injected_errors.append(code)

    def block(self, which: dla_block_e | str | int) -> Block:
        """The block ``which`` names (a dla_block_e, its name or its index)."""
        kind = dla_block_e[which.upper()] if isinstance(which, str) else dla_block_e(which)
        block = self._state.blocks.get(int(kind))
        if block is None:
            raise DlaError(NvError.NotSupported,
                           f"device config '{self._state.config.name}' has no {kind.name} block")
        return block

    def reset(self, bits: int) -> None:
        """Under the lock: GLB reset written with ``bits`` (see the module docstring)."""
        state, execution = self._state, self._execution
        device = bool(bits >> DEVICE_RESET_BIT & 1)
        blocks = state.blocks.values()
        targets = list(blocks) if device else [b for b in blocks if bits >> b.index & 1 and not b.wedged]
        for block in targets:
            block.wedged = False
            block.epoch += 1
            block.reset()
            block.hangs = 0
            block.injected_errors.clear()
            state.intr_status &= ~(done_bit(block.index, 0) | done_bit(block.index, 1)
                                   | error_bit(block.index, 0) | error_bit(block.index, 1))
        execution.pending = collections.deque((b, g) for b, g in execution.pending if b not in targets)
        if device:
            state.intr_status = 0
            state.fault = (0, 0, 0)
            self._units.reset()  # compute units are reset with the device (they have no reset bit)
        state.decoded.clear()  # a decode is a function of registers and mappings; a reset starts over
        state.log.append(f"reset of {', '.join(b.kind.name for b in targets) or 'nothing'}")
        state.cond.notify_all()
        for block in blocks:
            block.wake.notify()
        # As a hardware reset quiesces the block's DMA, the reset returns only once an operation the
        # blocks were computing has stopped writing memory (a numpy kernel cannot be interrupted
        # midway; its result is then discarded as abandoned). Not from the computing thread itself.
        deadline = time.monotonic() + RESET_QUIESCE_S
        while any(self._abandoned(w, targets) for w in execution.running):
            if any(w.thread == threading.get_ident() for w in execution.running):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                state.log.append("reset: an abandoned operation is still computing")
                break
            execution.quiescing += 1
            try:
                state.cond.wait(left)
            finally:
                execution.quiescing -= 1
        if device:
            self._tiles.reset()  # the SHAVE tiles are reset with the device (SHAVE_RESET alone)
            self._trace.reset()  # and tracing stops (its registers read 0)

    @staticmethod
    def _abandoned(work: Work, targets: list[Block]) -> bool:
        if work.block in targets and work.block.epoch != work.epoch:
            return True
        return work.partner is not None and work.partner[0] in targets \
            and work.partner[0].epoch != work.partner_epoch
