"""Execution of the virtual device's operations, and its interrupt line.

Execution modes:

- ``deterministic``: an operation executes inside the register write that makes it runnable (the
  write of ``d_op_enable``), in the order operations were enabled; the interrupt is raised in that
  same call. A KMD test is then reproducible to the register write.
- ``step``: enabling queues the operation; :meth:`~pydla.hw.device.VirtualDevice.step` executes one.
- ``threaded``: one thread per block, running beside the host as hardware does, blocks in parallel.

A block runs its two register groups in turn, starting with group 0 (``s_pointer`` consumer bit).
CONV results fly to SDP: a CONV operation runs once the SDP group that is next in turn is enabled in
flying mode, and the pair completes together. An operation computes from its decoded form
(:mod:`pydla.hw.decoded`); whatever goes wrong becomes the block's error and an interrupt, never an
exception into the host.

Usage::

    dev = VirtualDevice("full", mode="step")
    dev.reg_write(R.BDMA_D_OP_ENABLE, 1)
    while dev.step():
        pass
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.hw import blocks
from pydla.hw.memory import MmuFault
from pydla.hw.regfile import ENABLED, IDLE, MMU_FAULT_BIT, RUNNING, SDP_SRC_MODE, Block, done_bit, error_bit
from pydla.hw.state import DeviceState
from pydla.hw.trace_out import CTX_WORD, ERROR, INTERRUPT, LAYER

# Asked for every enabled operation: plain ints, not enum members.
_SDP, _CONV = int(dla_block_e.SDP), int(dla_block_e.CONV)
_SRC_MODE_WORD = SDP_SRC_MODE >> 2
_FLYING = int(R.sdp_src_mode_e.FLYING)


@dataclass
class Work:
    """An operation taken to run: its block and group, its flying partner, what it was injected with."""

    block: Block
    group: int
    partner: tuple[Block, int] | None
    epoch: int
    hang: bool
    injected: int
    partner_epoch: int = 0
    thread: int = 0  # threading.get_ident() of the one computing it
    started_ns: int = 0  # when it was taken, while the device traces (pydla.hw.trace_out)


class Execution(DeviceState):
    """Running operations and raising the interrupt (a part of :class:`~pydla.hw.device.VirtualDevice`)."""

    def connect_irq(self, handler: Callable[[], object]) -> None:
        """Call ``handler`` (with no lock of the device held) whenever an unmasked status bit is set."""
        with self._lock:
            self._irq_handlers.append(handler)

    def disconnect_irq(self, handler: Callable[[], object]) -> None:
        with self._lock:
            self._irq_handlers.remove(handler)

    def step(self) -> bool:
        """In step mode, execute the next runnable operation, or else move the compute units to their
        next event; False when there is neither."""
        if self.mode != "step":
            raise DlaError(NvError.InvalidState, f"step() needs mode 'step', not '{self.mode}'")
        with self._lock:
            work = self._take_runnable(None)
        if work is None:
            return self._cu_step()  # then the compute units' next event, if any
        with np.errstate(all="ignore"):  # see _execute
            self._execute(work)
        return True

    def idle(self) -> bool:
        """No group of any block is enabled or running."""
        with self._lock:
            return all(s == IDLE for b in self._blocks.values() for s in b.state)

    def _runnable(self, block: Block, group: int) -> tuple[Block, int] | bool | None:
        """False if (block, group) cannot run now; else its flying partner (or None)."""
        if block.state[group] != ENABLED or block.consumer != group:
            return False
        kind = block.index
        if kind == _SDP and block.words[group][_SRC_MODE_WORD] == _FLYING:
            return False  # runs with its CONV operation
        if kind == _CONV:
            sdp = self._blocks.get(_SDP)
            if sdp is None:
                return False
            g = sdp.consumer
            if sdp.state[g] != ENABLED or sdp.words[g][_SRC_MODE_WORD] != _FLYING:
                return False
            return sdp, g
        return None

    def _take_runnable(self, only: Block | None) -> Work | None:
        """Under the lock: the first enabled operation that can run, marked RUNNING."""
        for i, (block, group) in enumerate(self._pending):
            if only is not None and block is not only:
                continue
            partner = self._runnable(block, group)
            if partner is False:
                continue
            del self._pending[i]
            block.state[group] = RUNNING
            involved = [block]
            if isinstance(partner, tuple):
                partner[0].state[partner[1]] = RUNNING
                self._pending.remove(partner)  # the flying SDP runs as part of this operation
                involved.append(partner[0])
            hang = False
            for b in involved:
                if b.hangs > 0:
                    b.hangs -= 1
                    hang = True
            injected = 0
            for b in involved:
                if b.injected_errors and not hang and not injected:
                    injected = b.injected_errors.popleft()
            pair = partner if isinstance(partner, tuple) else None
            work = Work(block, group, pair, block.epoch, hang, injected,
                         pair[0].epoch if pair is not None else 0, threading.get_ident())
            if self.trace_mask & LAYER:
                for b in involved:
                    g = group if b is block else partner[1]  # type: ignore[index]
                    self.trace_op_start(b.index, g, b.words[g][CTX_WORD[b.index]])
                # After the start events are stamped, not before: a timeline draws the operation from
                # its start event for its duration, so a duration counted from an earlier reading
                # would end past the operation (by as long as the thread was preempted in between,
                # ms under load), over the block's next operation and out of its task.
                work.started_ns = time.monotonic_ns()
            if not hang:
                self._running.append(work)
            return work
        return None

    def _run_runnable(self) -> None:
        """Deterministic mode: execute everything that is runnable, in enable order. The caller
        set ``_kicking``; it is cleared under the lock only once nothing is runnable, so an
        operation enabled meanwhile by another thread is never left behind."""
        try:
            with np.errstate(all="ignore"):  # see _execute; set once for the whole run
                while True:
                    with self._lock:
                        work = self._take_runnable(None)
                        if work is None:
                            self._kicking = False
                            return
                    self._execute(work)
        except BaseException:
            with self._lock:
                self._kicking = False
            raise

    def _worker(self, block: Block) -> None:
        with np.errstate(all="ignore"):  # see _execute; this thread's setting, for its lifetime
            self._work_loop(block)

    def _work_loop(self, block: Block) -> None:
        while True:
            with self._cond:
                work = None
                while not self._closed:
                    work = self._take_runnable(block)
                    if work is not None:
                        break
                    block.wake.wait()
                if self._closed:
                    return
            assert work is not None
            self._execute(work)

    def _execute(self, work: Work) -> None:
        if work.hang:
            self.log.append(f"{work.block.kind.name} group {work.group}: hangs (injected)")
            return
        error, detail, fault = 0, "", None
        try:
            if work.injected:
                raise blocks.HwError(work.injected, "injected error")
            # The callers run this under np.errstate(all="ignore"): IEEE arithmetic, NaN and inf
            # flow on and no numpy warning reaches the host (set once per run, not per operation).
            self.decoded.get(work.block, work.group, work.partner)()
        except MmuFault as e:
            error, detail, fault = int(R.dla_hw_error_e.MMU_FAULT), str(e), e
        except blocks.HwError as e:
            error, detail = int(e.code), e.detail
        except Exception as e:  # a device never throws into the host: any bug becomes an error
            error, detail = int(R.dla_hw_error_e.BAD_CONFIG), f"internal error: {type(e).__name__}: {e}"
        with self._lock:
            self._complete(work, error, detail, fault)
            if self._quiescing:
                self._cond.notify_all()
            if self._threads:
                self._wake(work.block)  # its other group may be next
                if work.partner is not None:
                    self._wake(work.partner[0])
        self._raise_irq()

    def _complete(self, work: Work, error: int, detail: str, fault: MmuFault | None) -> None:
        """Under the lock: mark the operation (and its flying partner) done or failed."""
        self._running = [w for w in self._running if w is not work]
        parts = [(work.block, work.group, work.epoch)]
        if work.partner:
            parts.append((work.partner[0], work.partner[1], work.partner_epoch))
        if work.block.epoch != work.epoch and work.partner and work.partner[0].epoch == work.partner_epoch:
            # CONV was reset under its pair: the SDP half lost its input.
            error, detail, fault = int(R.dla_hw_error_e.NO_PRODUCER), "CONV reset during the pair", None
        tracing = self.trace_mask & (LAYER | ERROR)
        for block, group, epoch in parts:
            if block.epoch != epoch:
                continue  # this block was reset while the operation ran: its part is abandoned
            if tracing:
                self._trace_completion(block, group, work, error, fault)
            block.state[group] = IDLE
            block.consumer = group ^ 1
            if error:
                block.error, block.error_group = error, group
                self.intr_status |= error_bit(block.index, group)
            else:
                block.ops_done += 1
                self.ops_done += 1
                self.intr_status |= done_bit(block.index, group)
        if error:
            known = R.dla_hw_error_e._value2member_map_.get(error)
            name = known.name if known is not None else str(error)
            self.log.append(f"{work.block.kind.name} group {work.group}: {name}: {detail}")
            if fault is not None:
                block_index = fault.block if fault.block is not None else work.block.index
                self.fault = (fault.address, fault.ctx, block_index)
                self.intr_status |= 1 << MMU_FAULT_BIT

    def _trace_completion(self, block: Block, group: int, work: Work, error: int,
                          fault: MmuFault | None) -> None:
        if self.trace_mask & LAYER and work.started_ns:
            self.trace_op_end(block.index, group, block.words[group][CTX_WORD[block.index]],
                              time.monotonic_ns() - work.started_ns, error)
        if error and self.trace_mask & ERROR:
            self.trace_error(block.index, error, fault.address if fault is not None else 0)

    def _wake(self, block: Block) -> None:
        """Under the lock: wake the worker of ``block``, and CONV's when SDP changed (a flying SDP
        operation is what lets a CONV operation start)."""
        block.wake.notify()
        if block.kind == dla_block_e.SDP:
            conv = self._blocks.get(int(dla_block_e.CONV))
            if conv is not None:
                conv.wake.notify()

    def _irq_pending(self) -> bool:
        return bool(self.intr_status & ~self.intr_mask & 0xFFFFFFFF)

    def _raise_irq(self) -> None:
        with self._lock:
            if not self._irq_pending():
                return
            handlers = list(self._irq_handlers)
            if self.trace_mask & INTERRUPT:
                self.trace_interrupt(self.intr_status, self.intr_mask)
        for handler in handlers:
            handler()
