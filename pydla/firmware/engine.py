"""The engine scheduler (as in the NVDLA firmware): ``dla_engine_init``, ``dla_execute_task``,
``dla_isr_handler``, ``dla_process_events``.

Scheduling, per block: operations are programmed in their chain order into the block's register
groups as soon as a group is free (so up to two per block are in flight), and each is enabled once
its dependency count reaches zero. Programming, enabling and completing an operation are the
events OP_PROGRAMMED, OP_ENABLED and OP_COMPLETED; each decrements the dependency count of the
consumers that wait for it. Blocks run in parallel wherever the graph allows.

An operation of a task with a SHAVE list beside it (the VPUX per-variant barriers) is enabled only
once its wait barriers fired (``SHAVE_BAR_READY``; it consumes them, ``SHAVE_BAR_CONSUME``) and
produces its update barriers when it completes (``SHAVE_BAR_PRODUCE``); one that must wait is held
until :meth:`Engine.barriers_fired` (the KMD's SHAVE engine takes the notify interrupt; headed, its
doorbell brings the firmware's event pass here).

``dla_isr_handler`` only reads and clears the interrupt status and records events;
``dla_process_events`` runs outside interrupt context, under the engine lock, and acts on them.

Per-submit state (dependency counters, group assignment, progress) lives in a :class:`TaskRun`; the
:class:`~pydla.firmware.graph.TaskGraph` is never modified, so a task runs any number of times.

**The engine as a compute unit.** The device's IP_LAYOUT declares the DLA engine as a compute unit
with an execution model (XRT's AP_CTRL_HS or AP_CTRL_CHAIN). Under AP_CTRL_CHAIN with pipeline depth
``n``, up to ``n`` tasks are in flight: the first (the *head*) runs; each later one is *gated*: it
programs its operations into the register groups the tasks before it have left free (a block's
groups are taken in turn, so it starts on a block only once the tasks before it have programmed all
of theirs there), but enables none until every task before it has ended. Programming the next task
thus overlaps the current one's computing, results are as if the tasks ran one after another (a
task may read what the one before it wrote), and tasks end in submission order. AP_CTRL_HS (or no
engine entry) is depth 1: one task at a time. When a task fails, its blocks are reset and the gated
tasks behind it start their programming again; a gated task that is aborted resets nothing (it
never enabled an operation).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.firmware import cp_submit
from pydla.firmware.engine_api import RunState
from pydla.firmware.engine_api import engine_depth as engine_depth  # pydla.kmd.headed imports it here
from pydla.firmware.engine_watch import EngineWatch
from pydla.firmware.graph import TaskGraph, load_task
from pydla.firmware.interface import DeviceCaps, FirmwarePortability, TaskDesc
from pydla.firmware.processors import CP_EVENT, HwEvent, block_mask, processors_for
from pydla.firmware.processors import DEVICE_RESET_BIT as DEVICE_RESET_BIT  # pydla.kmd.recovery, headed
from pydla.firmware.task_run import DONE as DONE  # (tests and the headed firmware import these here)
from pydla.firmware.task_run import ENABLED as ENABLED
from pydla.firmware.task_run import PROGRAMMED as PROGRAMMED
from pydla.firmware.task_run import TaskRun as TaskRun
from pydla.firmware.trace import TASK_END, TASK_START, end_status, trace_task

BLOCKS = tuple(dla_block_e(b) for b in range(len(dla_block_e)))  # by index, without Enum's call
# The events as plain ints (an IntEnum's attribute lookup and comparison cost more, at every event).
_OP_PROGRAMMED, _OP_ENABLED, _OP_COMPLETED = (int(T.dla_event_e.OP_PROGRAMMED), int(T.dla_event_e.OP_ENABLED),
                                              int(T.dla_event_e.OP_COMPLETED))

ERROR_CODES = {int(R.dla_hw_error_e.MMU_FAULT): NvError.InvalidAddress, int(R.dla_hw_error_e.BAD_CONFIG):
               NvError.BadValue, int(R.dla_hw_error_e.UNSUPPORTED): NvError.NotSupported,
               int(R.dla_hw_error_e.NO_PRODUCER): NvError.InvalidState}


class Engine:
    """The engine scheduler of one device, driving it through a :class:`FirmwarePortability`: on the host
    (headless) or in the device's microcontroller firmware (headed, :mod:`pydla.hw.mcu`)."""

    # The thread that raised the interrupt may run the driver's bottom half (see Kmd._irq_thread).
    bottom_half_on_irq = True
    # run.completed is current at every poll (the watchdog may read it each time).
    live_progress = True

    def __init__(self, port: FirmwarePortability, config: DeviceCaps) -> None:
        self.port = port
        self.config = config
        # How the blocks are programmed: pydla's register map, or NVDLA's (pydla.firmware.nvdla)
        self.hw = processors_for(config)
        self._lock = threading.RLock()
        # What the driver's watchdog asks (busy blocks, stuck operations, resets), read from the device
        self.watch = EngineWatch(port, config, self.hw, self._lock)
        self._events_lock = threading.Lock()
        self._events: collections.deque[HwEvent] = collections.deque()
        self.events_arrived = threading.Condition(self._events_lock)
        self.depth = min(engine_depth(config), self.hw.max_depth)
        # The tasks in flight, in submission order: the head runs, the others are gated.
        self.inflight: list[TaskRun] = []
        # Which run holds each block's register groups (runs share the device's groups).
        self._owner: dict[dla_block_e, list[TaskRun | None]] = {b: [None, None] for b in BLOCKS}
        # The engine unit's executions as XRT's execution models describe them: ("START", task id)
        # when a task is taken, ("DONE", task id) when it ends, in order.
        self.cu_events: collections.deque[tuple[str, int]] = collections.deque(maxlen=256)
        # Whether a thread may wait in wait_for_events (a driver's bottom half): the ISR notifies
        # only then. Set before that thread starts.
        self.listening = False
        self.mmu_fault: tuple[int, int, int] | None = None
        self.on_device_reset: Callable[[str], None] | None = None  # unused: the watchdog resets here
        # Whether the device's trace ring records tasks (set by the host's trace, or the firmware):
        # tested once per task, so an untraced task writes no register more.
        self.trace_tasks = False
        self._aborting: TaskRun | None = None  # the run abort() stops (its task_end says ABORTED)
        self.holding = False  # an operation waits for barriers (barriers_fired)
        self.cp = False  # the device has a command processor (pydla.firmware.cp_submit)
        # What this engine last wrote to cp_base/cp_ctx/cp_size (they keep their values): a job of the
        # same buffer then writes only the doorbell. Forgotten at every reset the engine makes.
        self.cp_written: tuple[int, int, int] | None = None
        self._initialised = False

    # -- the NVDLA engine scheduler's entry points -----------------------------------------------

    def dla_engine_init(self, priv_data: object = None) -> int:
        """Reset the device's interrupt state and hook up the ISR. Called once, at probe time."""
        with self._lock:
            if self._initialised:
                return 0
            self.hw.init(self.port)
            self.cp = cp_submit.present(self.port, self.hw)
            self.port.connect_interrupt(self.dla_isr_handler)
            self._initialised = True
            return 0

    def dla_execute_task(self, task: TaskDesc, graph: TaskGraph | None = None,
                         on_finish: Callable[[RunState], None] | None = None) -> TaskRun:
        """Validate (unless ``graph`` is the validated graph of ``task``) and start ``task``."""
        if not self._initialised:
            raise DlaError(NvError.NotInitialized, "dla_engine_init was not called")
        if graph is None:
            graph = load_task(self.port, task, self.config)
        with self._lock:
            if len(self.inflight) >= self.depth:
                head = self.inflight[0]
                what = (f"task {head.task.task_id} is still running" if self.depth == 1 else
                        f"{self.depth} tasks (the engine's pipeline depth) are in flight, the first task "
                        f"{head.task.task_id}")
                raise DlaError(NvError.Busy, f"{what} on this device")
            run = TaskRun(task, graph, on_finish)
            if self.cp and task.command_buffer is not None and graph.shave is None and graph.operations:
                run.cp = 1  # one doorbell when its turn comes (_schedule), one interrupt at its end
            if self.inflight:  # behind another task: where it may start in each block depends on it
                run.gated = True
                self.inflight.append(run)
                for block in graph.blocks:
                    run.next_group[block] = self._first_group(run, block)
            else:  # alone: each block's next group (its consumer bit), as dla_execute_task reads it
                self.inflight.append(run)
                next_group, hw = run.next_group, self.hw
                hw.start_task(self.port, graph.blocks, task.ctx)
                for block in graph.blocks:
                    next_group[block] = hw.consumer_group(self.port, block)
            self.cu_events.append(("START", task.task_id))
            # before its operations: in deterministic mode they run in _schedule
            # (a task with a SHAVE list beside its operations: the KMD's SHAVE engine records it)
            if self.trace_tasks and self.hw.has_trace and graph.shave is None:
                run.traced = True
                trace_task(self.port, task, TASK_START, len(graph.operations))
            self._schedule_or_fail(run)
            return run

    @property
    def current(self) -> TaskRun | None:
        """The task that runs now (the head of those in flight), or None."""
        return self.inflight[0] if self.inflight else None

    def idle(self) -> bool:
        return not self.inflight

    def dla_isr_handler(self) -> int:
        """Read and clear the interrupt status; record what completed or failed.

        The events lock is held from reading the status to recording the events, so an abort (which
        resets the blocks, then drops their recorded events under this lock) never misses an event
        read before its reset: no event of an aborted run reaches the next one."""
        with self._events_lock:
            events, fault = self.hw.isr(self.port)
            if fault is not None:
                self.mmu_fault = fault
            if events:
                self._events.extend(events)
                if self.listening:
                    self.events_arrived.notify_all()
        return 0

    def dla_process_events(self) -> int:
        """Act on the recorded events: complete operations, program and enable what became ready.
        Returns the number of events processed."""
        with self._lock:
            if self.holding:  # (headed: the host's doorbell after a barrier fired brings it here)
                self.barriers_fired()
            count = 0
            while True:
                with self._events_lock:
                    if not self._events:
                        return count
                    event = self._events.popleft()
                count += 1
                if event.block == CP_EVENT:
                    self._cp_ended()
                    continue
                run = self._owner[BLOCKS[event.block]][event.group]
                if run is None or run.finished:
                    continue
                self._handle(run, event)
                if self.inflight[1:]:  # a gated run may program into the groups this event freed
                    self._schedule_gated()

    # -- scheduling ---------------------------------------------------------------------------------

    def pending_events(self) -> int:
        return len(self._events)  # one read of a deque's length: atomic

    def wait_for_events(self, timeout: float) -> None:
        """Sleep until the ISR records an event, :meth:`wake` is called, or ``timeout`` seconds pass."""
        with self.events_arrived:
            if not self._events:
                self.events_arrived.wait(timeout)

    def wake(self) -> None:
        with self.events_arrived:
            self.events_arrived.notify_all()

    def _handle(self, run: TaskRun, event: HwEvent) -> None:
        block = BLOCKS[event.block]
        index = run.busy[block][event.group]
        if index is None or run.state[index] != ENABLED:
            return  # a group this run does not run (a stale bit after a reset, a gated run's group)
        op = run.graph.operations[index]
        if event.event != _OP_COMPLETED:  # NVDLA's CDMA_WT_DONE / CDMA_DT_DONE: consumers may wait for it
            if op.consumers:
                run.signal(index, event.event)
                self._schedule_or_fail(run)
            return
        if event.failed:
            self._op_failed(run, index)
            return
        shave = run.graph.shave
        if shave is not None and shave.op_updates[index]:  # its barriers: SHAVE tasks may start
            self.port.dla_reg_write(R.SHAVE_BAR_PRODUCE, shave.op_updates[index])
        run.state[index] = DONE
        run.busy[block][event.group] = None
        self._owner[block][event.group] = None
        run.completed += 1
        run.signal(index, _OP_COMPLETED)
        if run.completed == len(run.graph.operations):
            self._finish(run)
            return
        self._schedule_or_fail(run)

    def _op_failed(self, run: TaskRun, index: int) -> None:
        """Operation ``index`` of ``run`` failed on the device (its block's S_ERROR says why)."""
        op = run.graph.operations[index]
        code = self.hw.error_code(self.port, op.block)
        name = R.dla_hw_error_e(code).name if code in R.dla_hw_error_e._value2member_map_ else code
        message = f"task {run.task.task_id}: {op.name} failed on the device: {name}"
        fault = 0
        if code == R.dla_hw_error_e.MMU_FAULT and self.mmu_fault is not None:
            fault, ctx, _ = self.mmu_fault
            message += f" (access to {fault:#x} outside the mappings of context {ctx})"
        run.failed = (index, code, fault)
        self._fail(run, DlaError(ERROR_CODES.get(code, NvError.ResourceError), message))

    def _cp_ended(self) -> None:
        """The command processor's job ended: its run completed, or failed at the operation the
        device names (the same error as the per-operation path's), or its buffer was refused."""
        inflight = self.inflight
        run = inflight[0] if inflight else None  # (the one rung is the head: runs behind it wait)
        if run is None or run.cp != 2 or run.finished:
            return  # a stale bit (its run was aborted meanwhile)
        status = cp_submit.status(self.port)
        index = cp_submit.failed_op(self.port) if status != cp_submit.DONE else 0
        n = len(run.graph.operations)
        if status == cp_submit.DONE:
            run.state = [DONE] * n
            run.completed = n
            self._finish(run)
        elif status == cp_submit.FAILED and index < n:
            self._op_failed(run, index)
        elif status == cp_submit.FAILED:
            self._fail(run, DlaError(NvError.ResourceError, f"task {run.task.task_id}: the device reports "
                                                            f"operation {index} failed, of {n}"))
        elif status == cp_submit.BAD_BUFFER:
            self._fail(run, cp_submit.bad_buffer(self.port, run, index))

    def _schedule_or_fail(self, run: TaskRun) -> None:
        """Programming resolves addresses: a problem there fails this run, never the engine."""
        try:
            self._schedule(run)
        except DlaError as e:
            self._fail(run, e)
            return
        if not run.graph.operations and not run.gated and not run.finished:
            self._finish(run)  # an NVDLA network of no operation: complete once its turn comes

    def _schedule_gated(self) -> None:
        """Let the gated runs program into the groups that became free."""
        for run in self.inflight[1:]:
            if run.gated and not run.finished:
                self._schedule_or_fail(run)

    def _first_group(self, run: TaskRun, block: dla_block_e) -> int:
        """The group ``run`` programs first in ``block``: where the nearest run before it that uses the
        block stops, once that run has programmed all of its operations there (-1 until then); with no
        such run, the group the block runs next (its consumer bit: a block runs its groups in turn)."""
        before = None
        for other in self.inflight:
            if other is run:
                break
            if block in other.busy:
                before = other
        if before is None:
            return self.hw.consumer_group(self.port, block)
        if before.chain_pos[block] < len(before.graph.chains[block]):
            return -1
        return before.next_group[block]

    def _schedule(self, run: TaskRun) -> None:
        """Program every operation that has a free group; enable every one that is ready. (Run at
        every event of every job: the run's state is read into locals once.)"""
        if run.cp:  # the device's command processor runs it all, from one doorbell
            if run.cp == 1 and not run.gated and not run.finished:
                run.cp = 2
                cp_submit.ring(self.port, run, self.cp_written)
                self.cp_written = run.task.command_buffer
            return
        graph, port, task = run.graph, self.port, run.task
        ops, chains, programs = graph.operations, graph.chains, graph.programs
        busy, chain_pos, next_group = run.busy, run.chain_pos, run.next_group
        deps, state, ready, group_of = run.deps, run.state, run.ready, run.group_of
        owner, hw = self._owner, self.hw
        waits = graph.shave.op_waits if graph.shave is not None else None
        progress = True
        while progress and not run.finished:
            progress = False
            for block in graph.blocks:
                chain, groups, holders = chains[block], busy[block], owner[block]
                pos = chain_pos[block]
                if next_group[block] < 0 and pos < len(chain):  # gated: where it starts is known now?
                    next_group[block] = self._first_group(run, block)
                while pos < len(chain):
                    g = next_group[block]
                    if g < 0 or holders[g] is not None:
                        break
                    index = chain[pos]
                    op = ops[index]
                    other = groups[g ^ 1]
                    if not hw.ready(op, None if other is None else ops[other]):
                        break
                    hw.program(port, task, op, g, programs)
                    groups[g] = index
                    holders[g] = run
                    group_of[index] = g
                    next_group[block] = g ^ 1
                    pos += 1
                    chain_pos[block] = pos
                    state[index] = PROGRAMMED
                    if deps[index] == 0:
                        ready.append(index)
                    if op.consumers:
                        run.signal(index, _OP_PROGRAMMED)
                    progress = True
            while ready and not run.finished and not run.gated:
                index = ready.popleft()
                if waits is not None and waits[index] and not self._take_barriers(run, index, waits[index]):
                    continue  # held until its barriers fire (barriers_fired)
                op = ops[index]
                state[index] = ENABLED
                run.enable_order.append(index)
                if hw.enable(port, op, group_of[index]):  # done at once (an empty BDMA operation)
                    with self._events_lock:
                        self._events.append(HwEvent(int(op.block), group_of[index], False))
                if op.consumers:
                    run.signal(index, _OP_ENABLED)
                progress = True

    def _take_barriers(self, run: TaskRun, index: int, wait: int) -> bool:
        """Whether operation ``index``'s wait barriers fired: it then consumes them, else is held."""
        if self.port.dla_reg_read(R.SHAVE_BAR_READY) & wait != wait:
            run.held.append(index)
            self.holding = True
            return False
        self.port.dla_reg_write(R.SHAVE_BAR_CONSUME, wait)
        return True

    def barriers_fired(self) -> None:
        """Barriers DLA operations wait on fired (the KMD's SHAVE engine saw it): look at those held."""
        with self._lock:
            self.holding = False
            for run in self.inflight:
                if run.held and not run.finished:
                    run.ready.extend(run.held)
                    run.held.clear()
                    self._schedule_or_fail(run)

    def _finish(self, run: TaskRun) -> None:
        run.finished = True
        inflight = self.inflight
        if inflight and inflight[0] is run:
            del inflight[0]
        elif run in inflight:
            inflight.remove(run)
        if run.error is not None:  # a run that completed released each group as it completed
            run.release_groups(self._owner)
        self.cu_events.append(("DONE", run.task.task_id))
        if run.traced:
            trace_task(self.port, run.task, TASK_END, end_status(run.error, self._aborting is run))
        if run.on_finish is not None:
            run.on_finish(run)
        if inflight and inflight[0].gated:
            head = inflight[0]  # every task before it ended: it may enable its operations
            head.gated = False
            self._schedule_or_fail(head)
        if inflight[1:]:
            self._schedule_gated()

    def _fail(self, run: TaskRun, error: DlaError) -> None:
        """Stop ``run``: reset the blocks it used (abandoning their groups) and finish it. A gated run
        enabled nothing: nothing is reset, and the runs after it program again."""
        if run.finished:
            return
        run.error = error
        if run.gated:
            later = self.inflight[self.inflight.index(run) + 1:] if run in self.inflight else []
        else:
            mask = block_mask(run.graph.blocks)
            self.cp_written = None
            self.hw.reset(self.port, run.graph.blocks)
            with self._events_lock:
                self._events = collections.deque(e for e in self._events if not mask >> e.block & 1)
            later = [r for r in self.inflight if r is not run]  # the reset undid their programming
        for other in later:
            other.release_groups(self._owner)
            other.restart()
        self._finish(run)

    def abort(self, run: RunState, error: DlaError) -> None:
        """Abort ``run`` (a timeout, a context being closed): its blocks are reset."""
        assert isinstance(run, TaskRun)
        with self._lock:
            self._aborting = run
            try:
                self._fail(run, error)
            finally:
                self._aborting = None

    # -- what the driver's watchdog asks of an engine (pydla.kmd.recovery; the headed proxy answers
    # the same through messages) ---------------------------------------------------------------------

    def progress(self, run: RunState) -> int | None:
        """Operations of ``run`` completed so far (the command processor's commands, for its run)."""
        if isinstance(run, TaskRun) and run.cp == 2 and not run.finished:
            return cp_submit.progress(self.port)
        return run.completed

    def reset_blocks(self, blocks: Sequence[dla_block_e]) -> list[dla_block_e]:
        """Reset ``blocks`` (the GLB reset register, a bit per block); those still busy after it."""
        self.cp_written = None
        return self.watch.reset_blocks(blocks)

    def reset_device(self) -> list[dla_block_e]:
        """Reset the whole device; the blocks still busy after it."""
        self.cp_written = None
        return self.watch.reset_device()

    def close(self) -> None:
        """Nothing to release (the headed proxy detaches its mailbox)."""

    def describe_stuck(self, run: RunState) -> str:
        """Which operations were running or waiting, read from the blocks' status registers."""
        assert isinstance(run, TaskRun)
        return self.watch.describe_stuck(run)
