"""The command processor (:class:`CommandProcessor`, a part of :class:`~pydla.hw.device.VirtualDevice`
beside :mod:`pydla.hw.execution`): the device runs a whole prepared job from one doorbell write.

The driver writes a job's command buffer (:mod:`pydla.firmware.cmdbuf`, dla_task's ``command_buffer``
module) into device memory once, then per run writes GLB ``cp_base_lo/hi``, ``cp_ctx``, ``cp_size``
and ``cp_doorbell``. The command processor reads the buffer through the IOMMU (context ``cp_ctx``),
checks it (a malformed one ends the job with ``cp_status`` BAD_BUFFER, ``cp_error_field`` and
``cp_error_value`` naming what), and runs the operations in the buffer's order, one after the other,
each in the next register group of its block (its consumer bit), a CONV operation together with the
SDP operation its result flies to. Each operation's trace events, its block's completed-operation
count and, on failure, its block's ``s_error`` and the MMU fault registers are what the
per-operation path leaves. One interrupt (``intr_status`` bit 12) ends the job: ``cp_status`` DONE,
or FAILED with ``cp_failed_op`` the failing operation's index. ``cp_progress`` counts the commands
completed (the driver's hang check reads it).

What a run reuses: the parsed buffer and each operation's decoded work (:mod:`pydla.hw.decoded`),
kept by the buffer's address and bytes and stamped with the mapping generations of the contexts it
uses, so a repeated job neither walks registers nor decodes: on a deterministic device that neither
traces operations nor has a fault injected, it calls the decoded work in a row. The register groups
are written once per job, at its end, with what the per-operation path leaves in them (each group
holds the writes of the operations programmed into it, the last one's over the earlier ones'); an
operation decoded for the first time, or with a fault injected, has its image written before it runs
(the decode reads it). A failed job leaves the groups of the operations before the failing one as
they were (the per-operation path programs up to two operations a block ahead: their registers differ
after a failure, never after a job that completed).

Injected faults act as on the per-operation path: a hang stops the job with the block's group
RUNNING (the driver's watchdog resets it: a reset of a block the job uses abandons the job), an
injected error fails the operation. A deterministic device runs the job inside the doorbell write,
a threaded one on the command processor's own thread; a step device, which executes one operation
per ``step()``, has no command processor.

Usage::

    dev.reg_write(R.GLB_CP_BASE_LO, iova); dev.reg_write(R.GLB_CP_CTX, ctx)
    dev.reg_write(R.GLB_CP_SIZE, len(data)); dev.reg_write(R.GLB_CP_DOORBELL, 1)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.firmware.cmdbuf import MAX_BYTES, CmdBufError, Command, parse
from pydla.hw import blocks
from pydla.hw.execution import Execution, Work, take_faults
from pydla.hw.irq import InterruptLine
from pydla.hw.memory import MmuFault
from pydla.hw.state import IDLE, MMU_FAULT_BIT, OP_ENABLE, RUNNING, Block, DeviceState
from pydla.hw.trace_out import ERROR, LAYER, TraceOutput

CP_INTR_BIT = 12
JOBS_KEPT = 256  # parsed command buffers kept (by context, address and size); all dropped past it
DOORBELL = 3  # the effect a GLB write returns when it rang the doorbell (pydla.hw.regfile runs it)
_S = R.cp_status_e
_PRESENT = int(_S.PRESENT)
_CTX_WORD = (R.BDMA_D_CTX_ID - R.BDMA_S_STATUS) >> 2  # the same in every block window
_OP_ENABLE_WORD = OP_ENABLE >> 2
_MMU, _BAD_CONFIG = int(R.dla_hw_error_e.MMU_FAULT), int(R.dla_hw_error_e.BAD_CONFIG)
_NAMES = ("cp_base_lo", "cp_base_hi", "cp_ctx", "cp_size", "cp_doorbell", "cp_status", "cp_failed_op",
          "cp_progress", "cp_error_field", "cp_error_value")
_WRITABLE = {"cp_base_lo", "cp_base_hi", "cp_ctx", "cp_size", "cp_doorbell"}
Execute = Callable[[], None]


@dataclass
class _Job:
    """A parsed command buffer and what runs it: its units (a command, or a CONV command and its SDP
    one), their decoded work (None until decoded), the contexts' mapping generations they were decoded
    under, and the register state the whole job leaves per block."""

    data: bytes
    commands: tuple[Command, ...]
    units: list[tuple[int, ...]]
    ctx: list[int]  # per command: its image's d_ctx_id
    execs: list[Execute | None]
    generations: dict[int, int | None] = field(default_factory=dict)
    cleared: int = 0  # the decoded cache's clear count when decoded (a reset clears it)
    # where the buffer lies: (the mapping generation of cp_ctx, its buffer's bytes, offset in them)
    where: tuple[int | None, npt.NDArray[np.uint8], int] | None = None
    # per block index: (commands of it, [(parity, word indices, values)]) the job leaves in its groups
    final: dict[int, tuple[int, list[tuple[int, npt.NDArray[np.intp], npt.NDArray[np.uint32]]]]] = \
        field(default_factory=dict)


def _prepare(data: bytes, commands: tuple[Command, ...]) -> _Job:
    units: list[tuple[int, ...]] = []
    k = 0
    while k < len(commands):
        if commands[k].pair:
            units.append((k, k + 1))
            k += 2
        else:
            units.append((k,))
            k += 1
    ctx = []
    for c in commands:
        at = np.flatnonzero(c.words == _CTX_WORD)
        ctx.append(int(c.values[at[-1]]) if len(at) else 0)
    final = {}
    for b in {c.block for c in commands}:
        mine = [c for c in commands if c.block == b]
        groups = []
        for parity in (0, 1):
            merged: dict[int, int] = {}
            for c in mine[parity::2]:
                merged.update(zip(c.words.tolist(), c.values.tolist(), strict=True))
            if merged:
                groups.append((parity, np.array(list(merged), dtype=np.intp),
                               np.array(list(merged.values()), dtype=np.uint32)))
        final[b] = (len(mine), groups)
    return _Job(data, commands, units, ctx, [None] * len(units), final=final)


class CommandProcessor:
    """See the module docstring. ``present`` is False on a device whose configuration has none: its
    registers then read 0 and ignore writes."""

    def __init__(self, state: DeviceState, execution: Execution, irq: InterruptLine,
                 trace: TraceOutput) -> None:
        self._state = state
        self._lock = state.lock
        self._execution = execution
        self._irq = irq
        self._trace = trace
        # A step device executes one operation per step(): it has none (the per-operation path)
        self.present = state.config.command_processor and state.mode != "step"
        self.regs = dict.fromkeys(_NAMES, 0)
        self.busy = False  # a job runs (or hangs)
        self._epochs: list[tuple[Block, int]] = []  # the job's blocks and their epochs at its start
        self._rung = False  # threaded: the doorbell was written, the thread takes the job
        self._jobs: dict[tuple[int, int, int], _Job] = {}  # by (ctx, base, size)
        self.threaded = state.mode == "threaded"
        self.runs = self.decodes = 0  # jobs completed; units decoded (for tests and benchmarks)

    def glb_registers(self) -> dict[int, tuple[Callable[[], int], Callable[[int], int]]]:
        """The GLB cp_* registers: address -> (read, write); a write returns its effect."""
        out = {}
        for name in _NAMES:
            out[getattr(R, f"GLB_{name.upper()}")] = (self._reader(name), self._writer(name))
        return out

    def _reader(self, name: str) -> Callable[[], int]:
        regs = self.regs
        if name == "cp_status":
            return lambda: (regs[name] | _PRESENT) if self.present else 0
        return lambda: regs[name] if self.present else 0

    def _writer(self, name: str) -> Callable[[int], int]:
        regs = self.regs

        def write(value: int) -> int:
            if not self.present or name not in _WRITABLE:
                return 0
            if name != "cp_doorbell":
                regs[name] = value
                return 0
            if not value & 1 or (self.busy and not self._abandoned()):
                return 0  # ignored while a job runs
            self.busy = True
            regs["cp_status"], regs["cp_progress"], regs["cp_failed_op"] = int(_S.RUNNING), 0, 0
            regs["cp_error_field"] = regs["cp_error_value"] = 0
            self._epochs = []
            if self.threaded:
                self._rung = True
                self._state.cond.notify_all()
                return 0
            return DOORBELL
        return write

    def _abandoned(self) -> bool:
        """Under the lock: a reset of one of its blocks abandoned the job that runs (or hangs)."""
        for b, e in self._epochs:  # noqa: SIM110 (a loop: no generator call per job)
            if b.epoch != e:
                return True
        return False

    def start(self) -> None:
        """Threaded mode: the command processor's thread (once the device is built)."""
        if self.threaded and self.present:
            state = self._state
            t = threading.Thread(target=self._loop, daemon=True, name=f"pydla-dev{state.instance}-CP")
            t.start()
            state.threads.append(t)

    def _loop(self) -> None:
        state = self._state
        while True:
            with state.cond:
                while not self._rung and not state.closed:
                    state.cond.wait()
                if state.closed:
                    return
                self._rung = False
            self.run()

    # -- a job -----------------------------------------------------------------------------------

    def run(self) -> None:
        """Run the job the doorbell announced (see the module docstring); raise the interrupt."""
        with np.errstate(all="ignore"):  # IEEE arithmetic, as on the per-operation path
            ended = self._run()
        if ended:
            self._irq.signal()

    def _job(self) -> _Job | None:
        """Under the lock: the parsed buffer of the job the registers name, or None when it is
        malformed (cp_status BAD_BUFFER set)."""
        regs, state = self.regs, self._state
        ctx, size = regs["cp_ctx"], regs["cp_size"]
        base = regs["cp_base_lo"] | regs["cp_base_hi"] << 32
        try:
            if not 0 < size <= MAX_BYTES:  # before translating it (parse checks the header's size)
                raise CmdBufError(R.cp_field_e.SIZE, size, -1, f"must be 1..{MAX_BYTES} bytes")
            key = (ctx, base, size)
            job = self._jobs.get(key)
            generation = state.iommu.generation(ctx)
            where = job.where if job is not None else None
            if where is None or where[0] != generation:  # (else mapped as it was when last read)
                try:
                    bo, offset = state.iommu.translate(ctx, base, size)
                except MmuFault as e:
                    raise CmdBufError(R.cp_field_e.MEMORY, base & 0xFFFFFFFF, -1, str(e)) from None
                where = (generation, bo.array, offset)
            data = where[1][where[2]:where[2] + size].tobytes()
            if job is None or job.data != data:  # read anew every time: checked again when it changed
                job = _prepare(data, parse(data, set(state.blocks)))
                if len(self._jobs) >= JOBS_KEPT:
                    self._jobs.clear()
                self._jobs[key] = job
            job.where = where
            return job
        except CmdBufError as e:
            regs["cp_status"], regs["cp_error_field"] = int(_S.BAD_BUFFER), int(e.field)
            regs["cp_error_value"] = e.value & 0xFFFFFFFF
            regs["cp_failed_op"] = e.command & 0xFFFFFFFF
            state.log.append(f"command processor: bad command buffer: {e}")
            self._end(0)
            return None

    def _run(self) -> bool:
        """The job: True when it ended (its interrupt is due), False when it hangs or was abandoned."""
        state = self._state
        with self._lock:
            job = self._job()
            if job is None:
                return True
            blocks_of = state.blocks
            epochs: list[tuple[Block, int]] = []
            starts: dict[int, int] = {}
            injected = False  # a fault injected in one of its blocks
            for b in job.final:
                block = blocks_of[b]
                epochs.append((block, block.epoch))
                starts[b] = block.consumer
                injected = injected or bool(block.hangs or block.injected_errors)
            self._epochs = epochs
            iommu = state.iommu
            stale = job.cleared != state.decoded.cleared
            for c, g in job.generations.items():
                stale = stale or iommu.generation(c) != g
            if stale:
                job.cleared = state.decoded.cleared  # (a reset since: decoded anew)
                job.execs = [None] * len(job.units)
                job.generations = {}
            if not job.generations:
                job.generations = {c: iommu.generation(c) for c in set(job.ctx)}
            # A job decoded before, on a device that neither traces operations nor has a fault
            # injected, nor runs beside other threads: its work is called in a row, unlocked.
            fast = (not self.threaded and not state.trace_mask & (LAYER | ERROR) and None not in job.execs
                    and not injected)
        first = self._run_fast(job, starts) if fast else 0
        if first < 0:
            return True  # (done: _run_fast ended it)
        for u in range(first, len(job.units)):
            ended = self._run_unit(job, u)
            if ended is not None:
                return ended
        return self._done(job, starts)

    def _run_fast(self, job: _Job, starts: dict[int, int]) -> int:
        """Call the job's decoded work in a row; -1 when all of it ran (the job then ended: its
        registers, counts and status), else the unit that failed (it and those after it are left to
        the unit-by-unit path, which reports it)."""
        u = 0
        try:
            for execute in job.execs:
                execute()  # type: ignore[misc]
                u += 1
        except Exception:
            pass  # (run again unit by unit from u: what failed fails the same way, with its report)
        with self._lock:
            if u:
                self._count(job, job.units[:u] if u < len(job.units) else job.units)
            if u == len(job.units):
                self._done(job, starts)
                return -1
        return u

    def _count(self, job: _Job, units: list[tuple[int, ...]]) -> None:
        """Under the lock: ``units`` completed (their blocks' counts and consumer bits, cp_progress)."""
        state, blocks_of, commands = self._state, self._state.blocks, job.commands
        if units is job.units:  # all of them: the counts per block are known
            for b, (count, _) in job.final.items():
                block = blocks_of[b]
                block.consumer ^= count & 1
                block.ops_done += count
            done = len(commands)
        else:
            done = 0
            for unit in units:
                for k in unit:
                    block = blocks_of[commands[k].block]
                    block.consumer ^= 1
                    block.ops_done += 1
                done += len(unit)
        state.ops_done += done
        self.regs["cp_progress"] += done

    def _run_unit(self, job: _Job, u: int) -> bool | None:
        """Unit ``u`` of the job, as the per-operation path runs an operation (faults, trace events,
        registers); None when the job goes on, else what _run returns."""
        state, commands, unit = self._state, job.commands, job.units[u]
        involved = [(state.blocks[commands[k].block], k) for k in unit]
        with self._lock:
            if self._abandoned():
                return False  # reset meanwhile: the job is abandoned, no interrupt
            hang, injected = take_faults([b for b, _ in involved])
            groups = [b.consumer for b, _ in involved]
            execute = job.execs[u]
            if execute is None or hang or injected:  # programmed now: the registers it reads
                self._program(involved, groups, commands)
            tracing = state.trace_mask & LAYER
            started = 0
            if tracing:
                for (b, k), g in zip(involved, groups, strict=True):
                    self._trace.op_start(b.index, g, job.ctx[k])
                started = time.monotonic_ns()
            if hang:
                for (b, _), g in zip(involved, groups, strict=True):
                    b.state[g] = RUNNING
                state.log.append(f"{involved[0][0].kind.name} group {groups[0]}: hangs (injected)")
                return False  # the driver's watchdog finds it (cp_progress stops)
            partner = (involved[1][0], groups[1]) if len(involved) > 1 else None
            work = None
            if self.threaded:  # a reset waits for it to stop writing memory (pydla.hw.faults)
                b0 = involved[0][0]
                work = Work(b0, groups[0], partner, b0.epoch, False, 0,
                            partner[0].epoch if partner else 0, threading.get_ident())
                self._execution.running.append(work)
        error, detail, fault = injected, "injected error", None
        if not injected:
            try:
                if execute is None:
                    execute = job.execs[u] = state.decoded.get(involved[0][0], groups[0], partner)
                    self.decodes += 1
                execute()
            except MmuFault as e:
                error, detail, fault = _MMU, str(e), e
            except blocks.HwError as e:
                error, detail = int(e.code), e.detail
            except Exception as e:  # a device never throws into the host
                error, detail = _BAD_CONFIG, f"internal error: {type(e).__name__}: {e}"
        with self._lock:
            if work is not None:
                self._execution.running.remove(work)
                if self._execution.quiescing:
                    state.cond.notify_all()
            if self._abandoned():
                return False
            for (b, k), g in zip(involved, groups, strict=True):
                if tracing:
                    self._trace.op_end(b.index, g, job.ctx[k], time.monotonic_ns() - started, error)
                if error:
                    b.consumer = g ^ 1
                    b.error, b.error_group = error, g
                    if state.trace_mask & ERROR:
                        self._trace.error(b.index, error, fault.address if fault is not None else 0)
            if error:
                self._fail(commands[unit[0]], involved[0][0], groups[0], error, detail, fault)
                return True
            self._count(job, [unit])
        return None

    def _done(self, job: _Job, starts: dict[int, int]) -> bool:
        """Every unit ran: the registers the job leaves, cp_status DONE, its interrupt bit (False:
        a reset abandoned it meanwhile)."""
        with self._lock:
            if self._abandoned():
                return False
            self._leave_registers(job, starts)
            self.regs["cp_status"] = int(_S.DONE)
            self.runs += 1
            self._end(0)
        return True

    @staticmethod
    def _program(involved: list[tuple[Block, int]], groups: list[int], commands: tuple[Command, ...]) -> None:
        """Under the lock: the unit's images in their groups, as the per-operation path writes them."""
        for (b, k), g in zip(involved, groups, strict=True):
            c = commands[k]
            b.word_arrays[g][c.words] = c.values
            b.words[g][_OP_ENABLE_WORD] = 1
            b.producer = g

    def _leave_registers(self, job: _Job, starts: dict[int, int]) -> None:
        """Under the lock: each block's groups as the per-operation path leaves them after the job."""
        for b, (count, groups) in job.final.items():
            block, start = self._state.blocks[b], starts[b]
            for parity, words, values in groups:
                g = start ^ parity
                block.word_arrays[g][words] = values
                block.words[g][_OP_ENABLE_WORD] = 1
            block.producer = start ^ ((count - 1) & 1)
            block.state = [IDLE, IDLE]

    def _fail(self, command: Command, block: Block, group: int, error: int, detail: str,
              fault: MmuFault | None) -> None:
        state, regs = self._state, self.regs
        known = R.dla_hw_error_e._value2member_map_.get(error)
        state.log.append(f"{block.kind.name} group {group}: {known.name if known else error}: {detail}")
        if fault is not None:
            state.fault = (fault.address, fault.ctx, fault.block if fault.block is not None else block.index)
        regs["cp_status"], regs["cp_failed_op"] = int(_S.FAILED), command.op_index
        self._end(1 << MMU_FAULT_BIT if fault is not None else 0)

    def _end(self, extra_bits: int) -> None:
        """Under the lock: the job ended: its interrupt bit (and ``extra_bits``)."""
        self.busy = False
        self._state.intr_status |= 1 << CP_INTR_BIT | extra_bits
