"""Running SHAVE task lists: the SHAVE protocol of the device (pydla.hw.shave) driven by the KMD.

:class:`ShaveEngine` runs the validated lists (:class:`~pydla.firmware.shave.ShaveList`) that the driver's
job queue hands it, one job at a time and never beside a DLA task (the driver holds one back until
the engine is idle, and starts nothing behind it), with the same fences, priorities, timeouts,
prepared jobs and aborts as DLA tasks. It sits beside the engine scheduler, on the host in both
modes: headed, the microcontroller's firmware leaves the SHAVE interrupt (GLB bit 29) to the host.

A job, in the order of the protocol:

1. SHAVE_CTX = the job's context (latched with every START and push);
2. each tile the list uses runs its runtime kernel with the list's stack: a tile already running the
   same runtime (buffer, context, IOVA, size) with the same stack, idle in WAIT_FIFO, is kept (a
   reset or an error halts it: it is started again); a tile whose CMX slice a DMA task of the list
   touches while it runs another list's runtime is halted (the DMA would write under its stack);
3. each barrier the list uses is configured (producers | consumers << 16), SHAVE_BAR_FIRED cleared
   for them, SHAVE_BAR_NOTIFY = notify_mask;
4. the device descriptors (ActKernelTask, DmaTask, built and resolved at load) are copied into a
   buffer of the KMD's own, mapped in the job's context (the client has no handle to it: what was
   validated is what the device reads), and pushed in list order;
5. the job ends on GLB bit 29: SHAVE_INTR_STATUS is cleared, then GLB bit 29; bit 17 with every
   notify barrier fired and the DONE counters advanced by the list's task counts completes it; a
   tile or DMA error bit fails it with a DlaError naming the tile, the task, the kernel id, the PC,
   the address and the error (shave_error_e), after which the tiles are reset (SHAVE_RESET) and the
   next job starts them again.

A list whose barriers never fire is caught by the driver's watchdog (its progress is the DONE
counters) and recovered through the ladder: SHAVE_RESET, and the device reset if a tile stays busy.

The tiles are also compute units (``shave:tileN``): a list owns every tile it uses from its start to
its end, and the driver holds it back while a unit's execution owns one (:meth:`ShaveEngine.claim`,
:mod:`pydla.kmd.tile_owner`).

Usage (the driver does this)::

    shave = ShaveEngine(port, wake=engine.wake)
    run = shave.dla_execute_task(task, graph, on_finish)
    shave.dla_process_events()
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.firmware.engine_api import EngineApi, RunState
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import CpuAddress, ShaveCaps, TaskDesc
from pydla.firmware.shave import ShaveList, usable_cmx
from pydla.firmware.trace import TASK_END, TASK_START, end_status, trace_task
from pydla.kmd.bo import BufferObject
from pydla.kmd.port import KmdPortability
from pydla.kmd.shave_errors import ERROR_CODES, WHY, error_name, instruction_name
from pydla.kmd.tile_owner import LIST, TileOwners

E = R.shave_error_e
State = R.shave_tile_state_e
SHAVE_INTR_BIT = 29  # GLB intr_status: the SHAVE tiles interrupt (see SHAVE_INTR_STATUS)
DMA_ERROR_BIT, NOTIFY_BIT = 16, 17
TILE_STRIDE = R.SHAVE_T1_CTRL - R.SHAVE_T0_CTRL
START, HALT = 1, 2
RUNTIME_KERNEL = 0xFFFFFFFF  # error_kernel when the runtime kernel itself failed
MIN_BUFFER = 4096


def treg(tile: int, name: str) -> int:
    """The address of tile ``tile``'s register ``name`` (shave_tile_regs_t)."""
    return R.REGISTERS[f"SHAVE_T0_{name.upper()}"] + tile * TILE_STRIDE


def read_caps(port: KmdPortability) -> ShaveCaps | None:
    """The device's SHAVE tiles, from its registers (protocol step 1); None when it has none."""
    tiles = port.dla_reg_read(R.SHAVE_TILES)
    if not tiles:
        return None
    return ShaveCaps(tiles, port.dla_reg_read(R.SHAVE_BARRIERS), port.dla_reg_read(R.SHAVE_CMX_BYTES))


class ShaveRun(RunState):
    """One execution of a SHAVE task list."""

    __slots__ = ("aborted", "dla_run", "dma_done0", "done0", "fired", "list_ended", "lst", "traced")

    def __init__(self, task: TaskDesc, graph: TaskGraph,
                 on_finish: Callable[[RunState], None] | None) -> None:
        super().__init__(task, graph, on_finish)
        assert graph.shave is not None
        self.lst: ShaveList = graph.shave
        self.done0: dict[int, int] = {}  # tile -> its DONE counter when the list was pushed
        self.dma_done0 = 0
        self.fired = 0  # notify barriers seen fired
        self.traced = False  # its task_start was recorded (pydla.kmd.trace)
        self.aborted = False
        # A task with DLA operations beside its list: the engine scheduler's run of them, and whether
        # the list's notify barriers fired (the task ends when both did).
        self.dla_run: RunState | None = None
        self.list_ended = False


class ShaveEngine:
    """See the module docstring. Called under the driver's lock (its ISR excepted)."""

    live_progress = True  # progress() reads the DONE counters: current at every poll

    def __init__(self, port: KmdPortability, caps: ShaveCaps | None, wake: Callable[[], None]) -> None:
        self.port = port
        self.caps = caps
        self._wake = wake
        self.current: ShaveRun | None = None
        self.irq_pending = False  # the ISR saw a SHAVE interrupt (read by the driver's poll loop)
        self._irq_lock = threading.Lock()
        # tile -> (ctx, runtime buffer handle, IOVA, size, stack) of the runtime it was started with
        self._tiles: dict[int, tuple[int, int, int, int, int]] = {}
        # ctx -> the KMD's descriptor buffer there: (buffer, IOVA, the image it holds)
        self._buffers: dict[int, tuple[BufferObject, int, bytes | None]] = {}
        self.stats = {"jobs": 0, "tile_starts": 0, "tile_reuses": 0, "errors": 0, "resets": 0}
        self.trace_tasks = False  # the device's trace ring records tasks (set by pydla.kmd.trace)
        self.owners = TileOwners()  # shared with the compute units' scheduler (CuScheduler.share_tiles)
        self.owners.wake[LIST] = wake
        # The engine scheduler that runs the DLA operations of a task beside its list (set by the
        # driver; None: such a task is refused).
        self.dla: EngineApi | None = None

    # -- the tiles' owner ---------------------------------------------------------------------------

    def claim(self, job_id: int, graph: TaskGraph) -> bool:
        """The tiles of ``graph``'s list for job ``job_id``, before :meth:`dla_execute_task`: False
        while a compute unit's execution owns one (or asked first); the driver then holds the job and
        asks again when woken. They are the list's until it ends."""
        return graph.shave is None or self.owners.acquire(LIST, list_tiles(graph.shave), f"task {job_id}")

    def unclaim(self, graph: TaskGraph) -> None:
        """A held job that claimed its tiles in vain was dropped (its context closed)."""
        if graph.shave is not None:
            self.owners.withdraw(LIST, list_tiles(graph.shave))

    # -- the engine calls the driver makes -----------------------------------------------------------

    def dla_execute_task(self, task: TaskDesc, graph: TaskGraph,
                         on_finish: Callable[[RunState], None] | None = None) -> ShaveRun:
        """Program and push the list of ``graph`` (validated for ``task``); it ends in
        :meth:`dla_process_events`."""
        if self.current is not None:
            raise DlaError(NvError.Busy, f"SHAVE task {self.current.task.task_id} is still running")
        lst = graph.shave
        if lst is None or self.caps is None:
            if lst is not None:
                self.owners.release(LIST, list_tiles(lst))
            raise DlaError(NvError.NotSupported,
                           f"task {task.task_id}: not a SHAVE task list, or no SHAVE tiles")
        if graph.operations and self.dla is None:
            self.owners.release(LIST, list_tiles(lst))
            raise DlaError(NvError.NotSupported, f"task {task.task_id}: DLA operations beside a SHAVE list, "
                                                 "but no engine scheduler runs them here")
        run = ShaveRun(task, graph, on_finish)
        run.list_ended = not lst.notify_mask  # (every task of it leads into a DLA operation)
        self.current = run
        self.stats["jobs"] += 1
        if self.trace_tasks:
            run.traced = True
            trace_task(self.port, task, TASK_START, len(lst.acts) + len(lst.dmas) + len(graph.operations))
        try:
            iova = self._descriptors(task.ctx, lst)
            self.port.dla_reg_write(R.SHAVE_CTX, task.ctx)
            self._start_tiles(run)
            writes = []
            for b, (producers, consumers) in lst.barriers.items():
                writes += [(R.SHAVE_BAR_SELECT, b), (R.SHAVE_BAR_CONFIG, producers | consumers << 16)]
            # A notify bit of an earlier list that arrived after it ended must not end this one.
            # The barriers DLA operations wait on notify too: their firing wakes the engine scheduler.
            writes += [(R.SHAVE_BAR_FIRED, _mask(lst.barriers)),
                       (R.SHAVE_BAR_NOTIFY, lst.notify_mask | lst.dla_waits),
                       (R.SHAVE_INTR_STATUS, 1 << NOTIFY_BIT)]
            self.port.dla_reg_write_many(writes)
            read = self.port.dla_reg_read
            run.done0 = {t: read(treg(t, "done")) for t in lst.tiles}
            run.dma_done0 = read(R.SHAVE_DMA_DONE) if lst.dmas else 0
            pushes = []
            for a in lst.acts:
                at = iova + lst.act_offset(a.index)
                pushes += [(treg(a.tile, "push_lo"), at & 0xFFFFFFFF), (treg(a.tile, "push_hi"), at >> 32)]
            for d in lst.dmas:
                at = iova + lst.dma_offset(d.index)
                pushes += [(R.SHAVE_DMA_PUSH_LO, at & 0xFFFFFFFF), (R.SHAVE_DMA_PUSH_HI, at >> 32)]
            self.port.dla_reg_write_many(pushes)
            if graph.operations:  # then the DLA operations, beside the list (they share its barriers)
                assert self.dla is not None
                run.dla_run = self.dla.dla_execute_task(task, graph, lambda dla: self._dla_ended(run, dla))
        except DlaError as e:
            self._fail(run, e)
        return run

    def _dla_ended(self, run: ShaveRun, dla: RunState) -> None:
        """The DLA operations of ``run`` ended: it fails with them, or ends if its list did."""
        if run.finished:
            return
        if dla.error is not None:
            self._fail(run, dla.error)
        elif run.list_ended:
            self._finish(run, None)

    def isr(self) -> None:
        """The interrupt handler: note a SHAVE interrupt for the bottom half (no register access
        when no list runs: the DLA engine's interrupts are none of its business)."""
        run = self.current
        if run is None:
            return
        if run.dla_run is not None and not self.port.dla_reg_read(R.GLB_INTR_STATUS) >> SHAVE_INTR_BIT & 1:
            return  # the DLA operations beside the list interrupt too: theirs are the engine's
        with self._irq_lock:
            self.irq_pending = True
        self._wake()

    def pending_events(self) -> int:
        return 1 if self.irq_pending else 0

    def dla_process_events(self) -> int:
        """Act on a SHAVE interrupt: end the running list if it ended or failed. Returns 1 if there
        was one."""
        with self._irq_lock:
            if not self.irq_pending:
                return 0
            self.irq_pending = False
        run = self.current
        if run is None:
            return 1
        status = self._take_status()
        if status & ~(1 << NOTIFY_BIT):
            self._fail(run, self._error(run, status))
        elif status & 1 << NOTIFY_BIT:
            self._notified(run)
        return 1

    def abort(self, run: RunState, error: DlaError) -> None:
        """Stop ``run`` (a timeout, its context closing): the tiles are reset, and it fails."""
        if isinstance(run, ShaveRun) and run is self.current:
            run.aborted = True
            self._fail(run, error)

    def progress(self, run: RunState) -> int | None:
        """Tasks of ``run`` completed so far (the DONE counters), and its DLA operations."""
        if not isinstance(run, ShaveRun) or run.finished:
            return None
        return self._completed(run) + (run.dla_run.completed if run.dla_run is not None else 0)

    def describe_stuck(self, run: RunState) -> str:
        """Where the list stands: each tile's state and tasks done, the DMA's, the barriers fired."""
        if not isinstance(run, ShaveRun):
            return "not a SHAVE task list"
        lst, read = run.lst, self.port.dla_reg_read
        parts = []
        for t in lst.tiles:
            state = read(treg(t, "state"))
            name = State(state).name if state in State._value2member_map_ else str(state)
            done = (read(treg(t, "done")) - run.done0.get(t, 0)) & 0xFFFFFFFF
            parts.append(f"tile {t} {name}, {done} of {len(lst.tile_acts(t))} kernel tasks done")
        if lst.dmas:
            done = (read(R.SHAVE_DMA_DONE) - run.dma_done0) & 0xFFFFFFFF
            parts.append(f"DMA {done} of {len(lst.dmas)} tasks done")
        fired = read(R.SHAVE_BAR_FIRED)
        parts.append(f"barriers fired {_bits(fired & _mask(lst.barriers))} of {sorted(lst.barriers)}, "
                     f"notify {_bits(lst.notify_mask)}")
        if run.dla_run is not None and self.dla is not None and not run.dla_run.finished:
            parts.append(f"DLA operations: {self.dla.describe_stuck(run.dla_run)}")
        return "; ".join(parts)

    def reset(self) -> list[str]:
        """SHAVE_RESET (the recovery ladder's rung for a SHAVE job); the tiles still busy after it."""
        self._reset()
        read = self.port.dla_reg_read
        assert self.caps is not None
        busy = [f"SHAVE tile {t}" for t in range(self.caps.tiles)
                if read(treg(t, "state")) != State.IDLE or read(treg(t, "level"))]
        if read(R.SHAVE_DMA_LEVEL):
            busy.append("SHAVE DMA")
        return busy

    def forget_context(self, ctx: int) -> None:
        """Context ``ctx`` closes: free the KMD's buffer there, forget tiles started from it."""
        held = self._buffers.pop(ctx, None)
        if held is not None:
            self.port.dla_unmap(ctx, held[1])
            self.port.dla_free(held[0])
        self._tiles = {t: k for t, k in self._tiles.items() if k[0] != ctx}

    def device_was_reset(self) -> None:
        """The whole device was reset (the tiles with it): they are started again when next used."""
        self._tiles.clear()

    def close(self) -> None:
        for ctx in list(self._buffers):
            self.forget_context(ctx)

    # -- internals ---------------------------------------------------------------------------------

    def _descriptors(self, ctx: int, lst: ShaveList) -> int:
        """The IOVA of the KMD's buffer in ``ctx``, holding ``lst``'s device descriptors."""
        held = self._buffers.get(ctx)
        size = len(lst.image)
        if held is None or held[0].size < size:
            if held is not None:  # too small: replaced (no list runs, none reads it)
                self.port.dla_unmap(ctx, held[1])
                self.port.dla_free(held[0])
                del self._buffers[ctx]
            bo = self.port.dla_alloc(max(MIN_BUFFER, 1 << (size - 1).bit_length()))
            try:
                iova = self.port.dla_map(ctx, bo)
            except DlaError:
                self.port.dla_free(bo)
                raise
            held = (bo, iova, None)
        bo, iova, image = held
        if image is not lst.image:  # the same graph's image is there already (no one else writes it)
            self.port.dla_data_write(lst.image, CpuAddress(bo, 0, bo.size), 0)
        self._buffers[ctx] = (bo, iova, lst.image)
        return iova

    def _start_tiles(self, run: ShaveRun) -> None:
        lst, ctx = run.lst, run.task.ctx
        write, read = self.port.dla_reg_write, self.port.dla_reg_read
        handle, rt_iova, rt_size = lst.runtime
        for t in lst.tiles:
            key = (ctx, handle, rt_iova, rt_size, lst.stacks[t])
            if self._tiles.get(t) == key and read(treg(t, "state")) == State.WAIT_FIFO:
                self.stats["tile_reuses"] += 1
                continue
            self._tiles.pop(t, None)
            self.port.dla_reg_write_many([
                (treg(t, "rt_addr_lo"), rt_iova & 0xFFFFFFFF), (treg(t, "rt_addr_hi"), rt_iova >> 32),
                (treg(t, "rt_size"), rt_size), (treg(t, "stack_size"), lst.stacks[t]),
                (treg(t, "ctrl"), HALT | START)])
            self.stats["tile_starts"] += 1
            if read(treg(t, "state")) != State.ERROR:
                self._tiles[t] = key
        assert self.caps is not None
        for d in lst.dmas:  # a DMA into a tile running another list's runtime: halt that tile first
            if d.tile not in lst.tiles and d.tile in self._tiles:
                room = usable_cmx(self.caps.cmx_bytes, self._tiles[d.tile][4])
                if d.cmx_offset + d.cmx_extent > room:
                    write(treg(d.tile, "ctrl"), HALT)
                    del self._tiles[d.tile]

    def _take_status(self) -> int:
        """Read and clear SHAVE_INTR_STATUS, then GLB bit 29; again while bits arrive in between."""
        read, write = self.port.dla_reg_read, self.port.dla_reg_write
        status = 0
        for _ in range(8):
            now = read(R.SHAVE_INTR_STATUS)
            if not now:
                break
            status |= now
            write(R.SHAVE_INTR_STATUS, now)
            write(R.GLB_INTR_STATUS, 1 << SHAVE_INTR_BIT)
        return status

    def _completed(self, run: ShaveRun) -> int:
        read = self.port.dla_reg_read
        done = sum((read(treg(t, "done")) - d0) & 0xFFFFFFFF for t, d0 in run.done0.items())
        if run.lst.dmas:
            done += (read(R.SHAVE_DMA_DONE) - run.dma_done0) & 0xFFFFFFFF
        return done

    def _notified(self, run: ShaveRun) -> None:
        lst = run.lst
        fired = self.port.dla_reg_read(R.SHAVE_BAR_FIRED)
        woke = fired & lst.dla_waits
        if woke and self.dla is not None and run.dla_run is not None:
            self.port.dla_reg_write(R.SHAVE_BAR_FIRED, woke)  # (seen: a later firing notifies again)
            self.dla.barriers_fired()
            if run.finished:
                return
        run.fired |= fired & lst.notify_mask
        if run.fired != lst.notify_mask or run.list_ended:
            return  # another notify barrier is still to fire
        run.completed = self._completed(run)
        total = len(lst.acts) + len(lst.dmas)
        # (No unit execution runs on its tiles meanwhile (pydla.kmd.tile_owner): the counters are its own.)
        if run.completed < total:
            self._fail(run, DlaError(NvError.ResourceError,
                                     f"task {run.task.task_id}: the SHAVE list's notify barriers fired with "
                                     f"{run.completed} of its {total} tasks done: "
                                     f"{self.describe_stuck(run)}"))
            return
        self.port.dla_reg_write(R.SHAVE_BAR_FIRED, _mask(lst.barriers))
        run.list_ended = True
        if run.dla_run is None or run.dla_run.finished:
            self._finish(run, None)

    def _error(self, run: ShaveRun, status: int) -> DlaError:
        """The DlaError for the error bits of ``status``: the first failing tile's, else the DMA's."""
        read, lst = self.port.dla_reg_read, run.lst
        where = f"task {run.task.task_id}"
        for t in range(self.caps.tiles if self.caps else 0):
            if not status >> t & 1:
                continue
            code, pc, addr, kernel, seq = (read(treg(t, n)) for n in ("error", "error_pc", "error_addr",
                                                                        "error_kernel", "error_task"))
            acts = lst.tile_acts(t)
            done = (read(treg(t, "done")) - run.done0.get(t, 0)) & 0xFFFFFFFF
            if seq == 0:  # not running code: the KMD's START or push was refused
                which = "the start of its runtime kernel or a push"
            elif kernel == RUNTIME_KERNEL or not acts:
                which = "its runtime kernel"
            elif done < len(acts):
                which = f"{acts[done].name}"
            else:
                which = f"kernel_id {kernel}"
            kernel_id = "" if seq == 0 else \
                f"kernel_id {kernel if kernel != RUNTIME_KERNEL else 'runtime'}, "
            insn = instruction_name(addr) if code in (E.ILLEGAL_INSTRUCTION, E.TRAP) else ""
            named, why = (f" ({insn})", WHY.get(addr, "")) if insn else ("", "")
            # What names the fault comes first (a port may carry only the first 192 bytes).
            message = (f"{where}: SHAVE tile {t} stopped with {error_name(code)}{named} in {which}: "
                       f"{kernel_id}pc {pc:#x}, address {addr:#x}{why}")
            return DlaError(ERROR_CODES.get(code, NvError.ResourceError), message)
        if status >> DMA_ERROR_BIT & 1:
            code = read(R.SHAVE_DMA_ERROR)
            addr = read(R.SHAVE_DMA_ERROR_ADDR_LO) | read(R.SHAVE_DMA_ERROR_ADDR_HI) << 32
            done = (read(R.SHAVE_DMA_DONE) - run.dma_done0) & 0xFFFFFFFF
            which = lst.dmas[done].name if done < len(lst.dmas) else "the barrier setup"
            return DlaError(ERROR_CODES.get(code, NvError.ResourceError),
                            f"{where}: SHAVE DMA stopped with {error_name(code)} in {which}: "
                            f"address {addr:#x}")
        return DlaError(NvError.ResourceError,
                        f"{where}: SHAVE interrupt status {status:#x} is not one the KMD knows")

    def _reset(self) -> None:
        write = self.port.dla_reg_write
        write(R.SHAVE_RESET, 1)
        write(R.SHAVE_INTR_STATUS, 0xFFFFFFFF)
        write(R.GLB_INTR_STATUS, 1 << SHAVE_INTR_BIT)
        with self._irq_lock:
            self.irq_pending = False
        self._tiles.clear()
        self.stats["resets"] += 1

    def _fail(self, run: ShaveRun, error: DlaError) -> None:
        if run.finished:
            return
        dla = run.dla_run
        if dla is not None and not dla.finished and self.dla is not None:
            run.finished = True  # (the DLA part's end, told below, finds it ended)
            self.dla.abort(dla, error)  # its blocks are reset
        self.stats["errors"] += 1
        self._reset()  # the tiles are started again by the next job
        self._finish(run, error)

    def _finish(self, run: ShaveRun, error: DlaError | None) -> None:
        run.error = error
        run.finished = True
        if self.current is run:
            self.current = None
        self.owners.release(LIST, list_tiles(run.lst))  # (after the reset of a failed list)
        if run.traced:
            trace_task(self.port, run.task, TASK_END, end_status(error, run.aborted))
        if run.on_finish is not None:
            run.on_finish(run)


def list_tiles(lst: ShaveList) -> set[int]:
    """The tiles ``lst`` uses: those it runs kernels on, and those its DMA tasks reach."""
    return set(lst.tiles) | {d.tile for d in lst.dmas}


def _mask(barriers: dict[int, tuple[int, int]]) -> int:
    mask = 0
    for b in barriers:
        mask |= 1 << b
    return mask


def _bits(mask: int) -> list[int]:
    return [b for b in range(mask.bit_length()) if mask >> b & 1]
