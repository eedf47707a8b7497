"""The engine scheduler (as in the NVDLA firmware): ``dla_engine_init``, ``dla_execute_task``,
``dla_isr_handler``, ``dla_process_events``.

Scheduling, per block: operations are programmed in their chain order into the block's register
groups as soon as a group is free (so up to two per block are in flight), and each is enabled once
its dependency count reaches zero. Programming, enabling and completing an operation are the
events OP_PROGRAMMED, OP_ENABLED and OP_COMPLETED; each decrements the dependency count of the
consumers that wait for it. Blocks run in parallel wherever the graph allows.

``dla_isr_handler`` only reads and clears the interrupt status and records events;
``dla_process_events`` runs outside interrupt context, under the engine lock, and acts on them.

Per-submit state (dependency counters, group assignment, progress) lives in a :class:`TaskRun`; the
:class:`~pydla.kmd.graph.TaskGraph` is never modified, so a task runs any number of times.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.kmd.graph import TaskGraph, load_task
from pydla.kmd.port import DeviceCaps, KmdPortability, TaskDesc
from pydla.kmd.program import ERROR, POINTER, STATUS, enable_operation, program_operation

WAITING, PROGRAMMED, ENABLED, DONE = range(4)
MMU_FAULT_BIT = 31
BLOCKS = tuple(dla_block_e(b) for b in range(len(dla_block_e)))  # by index, without Enum's call
_BLOCK_RANGE = range(len(BLOCKS))
# The events as plain ints (an IntEnum's attribute lookup and comparison cost more, at every event).
_OP_PROGRAMMED, _OP_ENABLED, _OP_COMPLETED = (int(T.dla_event_e.OP_PROGRAMMED), int(T.dla_event_e.OP_ENABLED),
                                              int(T.dla_event_e.OP_COMPLETED))

ERROR_CODES = {
    int(R.dla_hw_error_e.MMU_FAULT): NvError.InvalidAddress,
    int(R.dla_hw_error_e.BAD_CONFIG): NvError.BadValue,
    int(R.dla_hw_error_e.UNSUPPORTED): NvError.NotSupported,
    int(R.dla_hw_error_e.NO_PRODUCER): NvError.InvalidState,
}


@dataclass(slots=True)
class HwEvent:
    """What the ISR found: an operation of ``block`` in ``group`` completed or failed."""

    block: int
    group: int
    failed: bool


class TaskRun:
    """The state of one execution of a task graph (made at every submit: kept lean)."""

    __slots__ = (
        "busy",
        "chain_pos",
        "completed",
        "deps",
        "enable_order",
        "error",
        "finished",
        "graph",
        "group_of",
        "next_group",
        "on_finish",
        "ready",
        "state",
        "task",
    )

    def __init__(self, task: TaskDesc, graph: TaskGraph,
                 on_finish: Callable[[TaskRun], None] | None = None) -> None:
        n = len(graph.operations)
        self.task = task
        self.graph = graph
        self.on_finish = on_finish
        self.deps = list(graph.dependency_counts)
        self.state = [WAITING] * n
        self.group_of = [-1] * n
        # Per block of the graph: the operation in each register group, the position in its chain,
        # the group it programs next.
        self.busy: dict[dla_block_e, list[int | None]] = {b: [None, None] for b in graph.blocks}
        self.chain_pos: dict[dla_block_e, int] = dict.fromkeys(graph.blocks, 0)
        self.next_group: dict[dla_block_e, int] = dict.fromkeys(graph.blocks, 0)
        self.ready: collections.deque[int] = collections.deque()
        self.completed = 0
        self.enable_order: list[int] = []
        self.error: DlaError | None = None
        self.finished = False

    def operation_in(self, block: dla_block_e, group: int) -> int | None:
        busy = self.busy.get(block)
        return None if busy is None else busy[group]


class Engine:
    """The engine scheduler of one device, driving it through a :class:`KmdPortability`."""

    def __init__(self, port: KmdPortability, config: DeviceCaps) -> None:
        self.port = port
        self.config = config
        self._lock = threading.RLock()
        self._events_lock = threading.Lock()
        self._events: collections.deque[HwEvent] = collections.deque()
        self.events_arrived = threading.Condition(self._events_lock)
        self.current: TaskRun | None = None
        # Whether a thread may wait in wait_for_events (a driver's bottom half): the ISR notifies
        # only then. Set before that thread starts.
        self.listening = False
        self.mmu_fault: tuple[int, int, int] | None = None
        self._initialised = False

    # -- the NVDLA engine scheduler's entry points -----------------------------------------------

    def dla_engine_init(self, priv_data: object = None) -> int:
        """Reset the device's interrupt state and hook up the ISR. Called once, at probe time."""
        with self._lock:
            if self._initialised:
                return 0
            self.port.dla_reg_write(R.GLB_INTR_MASK, 0)
            self.port.dla_reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)
            self.port.connect_interrupt(self.dla_isr_handler)
            self._initialised = True
            return 0

    def dla_execute_task(self, task: TaskDesc, graph: TaskGraph | None = None,
                         on_finish: Callable[[TaskRun], None] | None = None) -> TaskRun:
        """Validate (unless ``graph`` is the validated graph of ``task``) and start ``task``."""
        if not self._initialised:
            raise DlaError(NvError.NotInitialized, "dla_engine_init was not called")
        if graph is None:
            graph = load_task(self.port, task, self.config)
        with self._lock:
            if self.current is not None and not self.current.finished:
                raise DlaError(NvError.Busy,
                               f"task {self.current.task.task_id} is still running on this device")
            run = TaskRun(task, graph, on_finish)
            for block in graph.blocks:
                # A block runs its groups in turn and remembers where it stopped (the consumer bit);
                # the first group this task programs must be the one the block runs next.
                run.next_group[block] = self.port.dla_reg_read(POINTER[block]) >> 16 & 1
            self.current = run
            self._schedule_or_fail(run)
            return run

    def dla_isr_handler(self) -> int:
        """Read and clear the interrupt status; record what completed or failed.

        The events lock is held from reading the status to recording the events, so an abort (which
        resets the blocks, then drops their recorded events under this lock) never misses an event
        read before its reset: no event of an aborted run reaches the next one."""
        with self._events_lock:
            return self._isr_locked()

    def _isr_locked(self) -> int:
        status = self.port.dla_reg_read(R.GLB_INTR_STATUS)
        if not status:
            return 0
        self.port.dla_reg_write(R.GLB_INTR_STATUS, status)
        if status >> MMU_FAULT_BIT & 1:
            lo = self.port.dla_reg_read(R.GLB_MMU_FAULT_ADDR_LO)
            hi = self.port.dla_reg_read(R.GLB_MMU_FAULT_ADDR_HI)
            ctx = self.port.dla_reg_read(R.GLB_MMU_FAULT_CTX)
            blk = self.port.dla_reg_read(R.GLB_MMU_FAULT_BLOCK)
            self.mmu_fault = ((hi << 32) | lo, ctx, blk)
        events = []
        for b in _BLOCK_RANGE:
            if not status >> (2 * b) & 0x30003:
                continue  # no done or error bit of this block: the common case, checked once
            for g in (0, 1):
                if status >> (2 * b + g) & 1:
                    events.append(HwEvent(b, g, False))
                if status >> (16 + 2 * b + g) & 1:
                    events.append(HwEvent(b, g, True))
        self._events.extend(events)
        if self.listening:
            self.events_arrived.notify_all()
        return 0

    def dla_process_events(self) -> int:
        """Act on the recorded events: complete operations, program and enable what became ready.
        Returns the number of events processed."""
        with self._lock:
            count = 0
            while True:
                with self._events_lock:
                    if not self._events:
                        return count
                    event = self._events.popleft()
                count += 1
                run = self.current
                if run is None or run.finished:
                    continue
                self._handle(run, event)

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
        if index is None:
            return  # a group this run does not use (a stale bit after a reset)
        op = run.graph.operations[index]
        if event.failed:
            code = self.port.dla_reg_read(ERROR[block])
            name = R.dla_hw_error_e(code).name if code in R.dla_hw_error_e._value2member_map_ else code
            message = f"task {run.task.task_id}: {op.name} failed on the device: {name}"
            if code == R.dla_hw_error_e.MMU_FAULT and self.mmu_fault is not None:
                addr, ctx, _ = self.mmu_fault
                message += f" (access to {addr:#x} outside the mappings of context {ctx})"
            self._fail(run, DlaError(ERROR_CODES.get(code, NvError.ResourceError), message))
            return
        run.state[index] = DONE
        run.busy[block][event.group] = None
        run.completed += 1
        self._signal(run, index, _OP_COMPLETED)
        if run.completed == len(run.graph.operations):
            self._finish(run)
            return
        self._schedule_or_fail(run)

    def _schedule_or_fail(self, run: TaskRun) -> None:
        """Programming resolves addresses: a problem there fails this run, never the engine."""
        try:
            self._schedule(run)
        except DlaError as e:
            self._fail(run, e)

    def _signal(self, run: TaskRun, index: int, event: int) -> None:
        deps, state, ready = run.deps, run.state, run.ready
        for c in run.graph.operations[index].consumers:
            if c.event != event:
                continue
            deps[c.index] -= 1
            if deps[c.index] == 0 and state[c.index] == PROGRAMMED:
                ready.append(c.index)

    def _schedule(self, run: TaskRun) -> None:
        """Program every operation that has a free group; enable every one that is ready. (Run at
        every event of every job: the run's state is read into locals once.)"""
        graph, port, task = run.graph, self.port, run.task
        ops, chains, programs = graph.operations, graph.chains, graph.programs
        busy, chain_pos, next_group = run.busy, run.chain_pos, run.next_group
        deps, state, ready, group_of = run.deps, run.state, run.ready, run.group_of
        progress = True
        while progress and not run.finished:
            progress = False
            for block in graph.blocks:
                chain, groups = chains[block], busy[block]
                pos = chain_pos[block]
                while pos < len(chain):
                    g = next_group[block]
                    if groups[g] is not None:
                        break
                    index = chain[pos]
                    op = ops[index]
                    program_operation(port, task, op, g, programs)
                    groups[g] = index
                    group_of[index] = g
                    next_group[block] = g ^ 1
                    pos += 1
                    chain_pos[block] = pos
                    state[index] = PROGRAMMED
                    if deps[index] == 0:
                        ready.append(index)
                    if op.consumers:
                        self._signal(run, index, _OP_PROGRAMMED)
                    progress = True
            while ready and not run.finished:
                index = ready.popleft()
                op = ops[index]
                state[index] = ENABLED
                run.enable_order.append(index)
                enable_operation(port, op, group_of[index])
                if op.consumers:
                    self._signal(run, index, _OP_ENABLED)
                progress = True

    def _finish(self, run: TaskRun) -> None:
        run.finished = True
        if run.on_finish is not None:
            run.on_finish(run)

    def _fail(self, run: TaskRun, error: DlaError) -> None:
        """Stop ``run``: reset the blocks it used (abandoning their groups) and finish it."""
        if run.finished:
            return
        run.error = error
        mask = 0
        for b in run.graph.blocks:
            mask |= 1 << int(b)
        self.port.dla_reg_write(R.GLB_RESET, mask)
        with self._events_lock:
            self._events = collections.deque(e for e in self._events if not mask >> e.block & 1)
        self._finish(run)

    def abort(self, run: TaskRun, error: DlaError) -> None:
        """Abort ``run`` (a timeout, a context being closed): its blocks are reset."""
        with self._lock:
            self._fail(run, error)

    def describe_stuck(self, run: TaskRun) -> str:
        """Which operations were running or waiting, read from the blocks' status registers."""
        with self._lock:
            running, waiting = [], []
            for b in run.graph.blocks:
                status = self.port.dla_reg_read(STATUS[b])
                for g in (0, 1):
                    state = status >> (16 * g) & 3
                    index = run.busy[b][g]
                    if index is None:
                        continue
                    name = f"{run.graph.operations[index].name} in group {g}"
                    if state == R.group_state_e.RUNNING:
                        running.append(name)
                    elif state == R.group_state_e.ENABLED:
                        waiting.append(name)
            parts = []
            if running:
                parts.append("running and not finishing: " + ", ".join(running))
            if waiting:
                parts.append("enabled and waiting: " + ", ".join(waiting))
            unprogrammed = len(run.graph.operations) - run.completed - len(running) - len(waiting)
            parts.append(f"{run.completed} of {len(run.graph.operations)} operations completed")
            if unprogrammed > 0 and not running:
                parts.append(f"{unprogrammed} not started")
            return "; ".join(parts)
