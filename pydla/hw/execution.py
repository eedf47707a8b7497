"""Execution of the virtual device's operations (:class:`Execution`, a part of
:class:`~pydla.hw.device.VirtualDevice`).

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

import collections
import threading
import time
from dataclasses import dataclass

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.hw import blocks
from pydla.hw.compute_units import ComputeUnits
from pydla.hw.irq import InterruptLine
from pydla.hw.memory import MmuFault
from pydla.hw.state import ENABLED, IDLE, MMU_FAULT_BIT, RUNNING, Block, DeviceState, done_bit, error_bit
from pydla.hw.trace_out import CTX_WORD, ERROR, LAYER, TraceOutput

# Asked for every enabled operation: plain ints, not enum members.
_SDP, _CONV = int(dla_block_e.SDP), int(dla_block_e.CONV)
_SRC_MODE_WORD = (R.SDP_D_SRC_MODE - R.SDP_S_STATUS) >> 2
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



def take_faults(involved: list[Block]) -> tuple[bool, int]:
    """Under the lock: the injected faults an operation on ``involved`` takes (one of each block's
    pending hangs; else the first pending injected error among them, 0 for none)."""
    hang = False
    for b in involved:
        if b.hangs > 0:
            b.hangs -= 1
            hang = True
    injected = 0
    if not hang:
        for b in involved:
            if b.injected_errors:
                injected = b.injected_errors.popleft()
                break
    return hang, injected

class Execution:
    """Running operations (a part of :class:`~pydla.hw.device.VirtualDevice`): the enabled ones in
    enable order (``pending``), those computing now (``running``), the block workers (threaded)."""

    def __init__(self, state: DeviceState, irq: InterruptLine, trace: TraceOutput,
                 units: ComputeUnits) -> None:
        self._state = state
        self._lock = state.lock
        self._blocks = state.blocks
        self._irq = irq
        self._trace = trace
        self._units = units
        # Enabled by the register file (appended, and the block's worker woken when threaded).
        self.pending: collections.deque[tuple[Block, int]] = collections.deque()
        self.running: list[Work] = []  # operations computing now (hung ones excluded)
        self.kicking = False  # a thread runs what is runnable (deterministic mode)
        self.quiescing = 0  # resets waiting on the state's cond: an operation's end notifies only then
        self.threaded = state.mode == "threaded"

    def start(self) -> None:
        """Threaded mode: start a worker thread per block (once the device is built)."""
        state = self._state
        if self.threaded:
            for block in self._blocks.values():
                t = threading.Thread(target=self._worker, args=(block,), daemon=True,
                                     name=f"pydla-dev{state.instance}-{block.kind.name}")
                t.start()
                state.threads.append(t)

    def step(self) -> bool:
        """In step mode, execute the next runnable operation, or else move the compute units to their
        next event; False when there is neither."""
        mode = self._state.mode
        if mode != "step":
            raise DlaError(NvError.InvalidState, f"step() needs mode 'step', not '{mode}'")
        with self._lock:
            work = self._take_runnable(None)
        if work is None:
            return self._units.step()  # then the compute units' next event, if any
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
        for i, (block, group) in enumerate(self.pending):
            if only is not None and block is not only:
                continue
            partner = self._runnable(block, group)
            if partner is False:
                continue
            del self.pending[i]
            block.state[group] = RUNNING
            involved = [block]
            if isinstance(partner, tuple):
                partner[0].state[partner[1]] = RUNNING
                self.pending.remove(partner)  # the flying SDP runs as part of this operation
                involved.append(partner[0])
            hang, injected = take_faults(involved)
            pair = partner if isinstance(partner, tuple) else None
            work = Work(block, group, pair, block.epoch, hang, injected,
                         pair[0].epoch if pair is not None else 0, threading.get_ident())
            if self._state.trace_mask & LAYER:
                for b in involved:
                    g = group if b is block else partner[1]  # type: ignore[index]
                    self._trace.op_start(b.index, g, b.words[g][CTX_WORD[b.index]])
                # After the start events are stamped, not before: a timeline draws the operation from
                # its start event for its duration, so a duration counted from an earlier reading
                # would end past the operation (by as long as the thread was preempted in between,
                # ms under load), over the block's next operation and out of its task.
                work.started_ns = time.monotonic_ns()
            if not hang:
                self.running.append(work)
            return work
        return None

    def run_runnable(self) -> None:
        """Deterministic mode: execute everything that is runnable, in enable order. The caller
        set ``kicking``; it is cleared under the lock only once nothing is runnable, so an
        operation enabled meanwhile by another thread is never left behind."""
        try:
            with np.errstate(all="ignore"):  # see _execute; set once for the whole run
                while True:
                    with self._lock:
                        work = self._take_runnable(None)
                        if work is None:
                            self.kicking = False
                            return
                    self._execute(work)
        except BaseException:
            with self._lock:
                self.kicking = False
            raise

    def _worker(self, block: Block) -> None:
        with np.errstate(all="ignore"):  # see _execute; this thread's setting, for its lifetime
            self._work_loop(block)

    def _work_loop(self, block: Block) -> None:
        state = self._state
        while True:
            with state.cond:
                work = None
                while not state.closed:
                    work = self._take_runnable(block)
                    if work is not None:
                        break
                    block.wake.wait()
                if state.closed:
                    return
            assert work is not None
            self._execute(work)

    def _execute(self, work: Work) -> None:
        state = self._state
        if work.hang:
            state.log.append(f"{work.block.kind.name} group {work.group}: hangs (injected)")
            return
        error, detail, fault = 0, "", None
        try:
            if work.injected:
                raise blocks.HwError(work.injected, "injected error")
            # The callers run this under np.errstate(all="ignore"): IEEE arithmetic, NaN and inf
            # flow on and no numpy warning reaches the host (set once per run, not per operation).
            state.decoded.get(work.block, work.group, work.partner)()
        except MmuFault as e:
            error, detail, fault = int(R.dla_hw_error_e.MMU_FAULT), str(e), e
        except blocks.HwError as e:
            error, detail = int(e.code), e.detail
        except Exception as e:  # a device never throws into the host: any bug becomes an error
            error, detail = int(R.dla_hw_error_e.BAD_CONFIG), f"internal error: {type(e).__name__}: {e}"
        with self._lock:
            self._complete(work, error, detail, fault)
            if self.quiescing:
                state.cond.notify_all()
            if self.threaded:
                self.wake(work.block)  # its other group may be next
                if work.partner is not None:
                    self.wake(work.partner[0])
        self._irq.signal()

    def _complete(self, work: Work, error: int, detail: str, fault: MmuFault | None) -> None:
        """Under the lock: mark the operation (and its flying partner) done or failed."""
        state = self._state
        self.running = [w for w in self.running if w is not work]
        parts = [(work.block, work.group, work.epoch)]
        if work.partner:
            parts.append((work.partner[0], work.partner[1], work.partner_epoch))
        if work.block.epoch != work.epoch and work.partner and work.partner[0].epoch == work.partner_epoch:
            # CONV was reset under its pair: the SDP half lost its input.
            error, detail, fault = int(R.dla_hw_error_e.NO_PRODUCER), "CONV reset during the pair", None
        tracing = state.trace_mask & (LAYER | ERROR)
        for block, group, epoch in parts:
            if block.epoch != epoch:
                continue  # this block was reset while the operation ran: its part is abandoned
            if tracing:
                self._trace_completion(block, group, work, error, fault)
            block.state[group] = IDLE
            block.consumer = group ^ 1
            if error:
                block.error, block.error_group = error, group
                state.intr_status |= error_bit(block.index, group)
            else:
                block.ops_done += 1
                state.ops_done += 1
                state.intr_status |= done_bit(block.index, group)
        if error:
            known = R.dla_hw_error_e._value2member_map_.get(error)
            name = known.name if known is not None else str(error)
            state.log.append(f"{work.block.kind.name} group {work.group}: {name}: {detail}")
            if fault is not None:
                block_index = fault.block if fault.block is not None else work.block.index
                state.fault = (fault.address, fault.ctx, block_index)
                state.intr_status |= 1 << MMU_FAULT_BIT

    def _trace_completion(self, block: Block, group: int, work: Work, error: int,
                          fault: MmuFault | None) -> None:
        mask = self._state.trace_mask
        if mask & LAYER and work.started_ns:
            self._trace.op_end(block.index, group, block.words[group][CTX_WORD[block.index]],
                               time.monotonic_ns() - work.started_ns, error)
        if error and mask & ERROR:
            self._trace.error(block.index, error, fault.address if fault is not None else 0)

    def wake(self, block: Block) -> None:
        """Under the lock: wake the worker of ``block``, and CONV's when SDP changed (a flying SDP
        operation is what lets a CONV operation start)."""
        block.wake.notify()
        if block.kind == dla_block_e.SDP:
            conv = self._blocks.get(int(dla_block_e.CONV))
            if conv is not None:
                conv.wake.notify()
