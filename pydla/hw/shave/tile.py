"""One SHAVE tile: an RV32IMF core (the unicorn CPU emulator) and its windows.

The tile's address space holds only its windows: RT_WIN (the runtime kernel, read + execute), WIN_D
(the current kernel's code and read-only data, read + execute), WIN_E (the invocation's arguments
and read-write data, read + write, zeroed before every invocation), WIN_F (the tile's CMX slice,
read + write, the stack at its top), and the control page RT_CTRL, whose accesses call the device
model (unicorn's mmio_map). Any other access, an instruction RV32IMF lacks, ebreak / ecall, ``wfi``
(a tile has no interrupt for a kernel to wait for), or more than the instruction budget between two
accesses to the control page stops the tile with a :class:`ShaveFault`; the host never sees an
emulator error.

Every task starts from the same architectural state of the hart, whatever the task before it did
(an ``mret`` into user mode, CSRs, the rounding mode, registers): when a task ends (``task_done``)
the hart is reset (:meth:`Tile._reset_hart`: privilege machine mode, every CSR at its power-on value
but ``mstatus.FS`` on, every integer and FP register zero, ``sp`` at the top of WIN_F) and the
runtime kernel starts again at its entry, as after a START. The runtime kernel therefore keeps
nothing in registers from one task to the next (pydla's keeps nothing at all).

A runtime kernel that reads an empty FIFO or unfired barriers is stopped (emu_stop) and
:meth:`Tile.resume` later continues it at the same loop, which reads again: the tile sleeps instead
of spinning, and the order in which tiles run is the caller's (deterministic).

Usage::

    tile = Tile(0, config, cmx, iommu, barriers)
    tile.start(runtime_elf, stack_size)
    tile.push(Pushed(ctx, iova, 1)); tile.resume()     # ShaveFault when the tile stops with an error
"""

from __future__ import annotations

import collections
import importlib
import mmap
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.memory import Iommu
from pydla.hw.shave.barriers import Barriers
from pydla.hw.shave.elfload import check_entry, parse_elf
from pydla.hw.shave.faults import RUNTIME_KERNEL, E, ShaveFault
from pydla.hw.shave.tasks import Pushed, read_bytes, read_kernel_task
from pydla.hw.shave.tile_fast import FastEmulation
from pydla.hw.shave.traps import WfiGuard, emulator_fault, exception_fault, wfi_fault
from pydla.hw.shave.unlocked import Releaser
from pydla.hw.shave.watchdog import WATCHDOG
from pydla.target.shave import ShaveConfig

# The emulator's Python binding has no type information: it is used through Any.
unicorn: Any = importlib.import_module("unicorn")
rv: Any = importlib.import_module("unicorn.riscv_const")

State = R.shave_tile_state_e
UNTIL = 0xFFFFFFFC  # emu_start's end address: never executed (outside every window)
MSTATUS_FS = 1 << 13  # the F extension is off until mstatus.FS is set
GUARD_BYTES = 4096  # the unmapped page between a tile's data and its stack (one emulator page)
# Control page registers (byte offsets in shave_ctrl_page_t).
_PAGE = S.shave_ctrl_page_t
_POP, _WAIT, _PRODUCED, _CONSUMED, _DONE = (getattr(_PAGE, f).offset for f in (
    "fifo_pop", "barrier_wait", "barrier_produced", "barrier_consumed", "task_done"))
_TASK_FIELDS = {getattr(_PAGE, f).offset: f for f in (
    "task_entry", "task_args", "task_args_size", "task_wait_mask", "task_update_mask", "tile", "stack_size")}


def _buffer(size: int) -> tuple[mmap.mmap, npt.NDArray[np.uint8]]:
    """Page-aligned zeroed memory the emulator maps directly (mem_map_ptr): no copies in or out."""
    m = mmap.mmap(-1, size)
    return m, np.frombuffer(m, dtype=np.uint8)


def _halt_fault(pc: int, instruction_budget: int, time_budget_s: float) -> ShaveFault:
    """Why the emulation ended with no fault and no stop of the control page: a jump to UNTIL, or
    the budget (a wfi never runs: pydla.hw.shave.traps)."""
    if pc == UNTIL:
        return ShaveFault(E.FETCH_FAULT, f"jump to {pc:#x}", addr=pc, pc=pc)
    budget = f"{instruction_budget} instructions" if instruction_budget \
        else f"{time_budget_s * 1000:.0f} ms of emulation"
    return ShaveFault(E.BUDGET, f"ran past its budget of {budget}", pc=pc, addr=pc)


class Tile(FastEmulation):
    def __init__(self, index: int, config: ShaveConfig, cmx: npt.NDArray[np.uint8], iommu: Iommu,
                 barriers: Barriers) -> None:
        self.index = index
        self.config = config
        self.cmx = cmx
        self.iommu = iommu
        self.barriers = barriers
        self.fifo: collections.deque[Pushed] = collections.deque()
        self.uc: Any = None  # created at the first START (a device whose tiles nobody uses has none)
        self.state = State.IDLE
        self.pc = 0
        self.stack_size = 0
        self.done = 0
        self.error = E.NONE
        self.error_pc = self.error_addr = self.error_task = 0
        self.error_kernel = 0
        self.error_detail = ""  # the fault in words (the device log's); the error registers hold numbers
        self.task: S.ActKernelTask | None = None
        self.task_seq = 0
        self.wait_mask = 0
        self._loaded_kernel: bytes | None = None  # the ELF image WIN_D holds now
        self._cmx_maps: list[tuple[int, int]] = []  # WIN_F's mapped pieces (see _map_cmx)
        self._guard = 0
        self._kernel_extent = 0
        self._fault: ShaveFault | None = None
        self._stop: State | None = None  # why the emulator stopped, set by the control page
        self._restart = False  # a task ended: the hart is reset and the runtime starts again
        self._power_on: Any = None  # the hart's state as the emulator created it (context_save)
        self._entry_state: Any = None  # power-on, sp and mstatus.FS set, at the runtime's entry
        self._init_fast(config)  # high-level emulation (FastEmulation)
        # Told when a kernel starts (its entry point is read, its barriers fired) and ends:
        # (tile, task number, None | duration in ns, error): the device's trace (one track per tile).
        self.on_task: Callable[[int, int, int | None, int], None] | None = None
        self._task_t0 = 0
        # The budget: exact instructions (count, deterministic, slower) or emulation time (timeout).
        self.instruction_budget = config.instruction_budget
        self.time_budget_s = config.time_budget_ms / 1000
        self._init_unlocked()  # a threaded device's kernels compute without its lock (Unlocked)

    # -- the host's side -------------------------------------------------------------------------

    def start(self, runtime: bytes, stack_size: int) -> None:
        """Load the runtime kernel and make the tile runnable (ShaveFault when the image is bad).
        Tasks pushed before the START stay queued: the runtime kernel takes them first."""
        queued = list(self.fifo)
        self.halt()
        self.fifo.extend(queued)
        if stack_size % 16 or not 256 <= stack_size <= self.config.cmx_bytes // 2:
            raise ShaveFault(E.BAD_TASK, f"tile {self.index}: stack_size {stack_size} must be a multiple "
                                         f"of 16 in 256..{self.config.cmx_bytes // 2}", addr=stack_size)
        image = parse_elf(runtime, f"tile {self.index} runtime kernel", [(S.RT_WIN, S.RT_WIN_BYTES, False)])
        check_entry(image, image.entry, f"tile {self.index} runtime kernel")
        self._ensure_uc()
        self._map_cmx(stack_size)
        self._rt[:] = 0
        extent = 0
        for seg in image.segments:
            at = seg.vaddr - S.RT_WIN
            self._rt[at:at + len(seg.data)] = np.frombuffer(seg.data, dtype=np.uint8)
            extent = max(extent, at + len(seg.data))
        self._wfi.watch("runtime", S.RT_WIN, self._rt[:extent])
        self.uc.ctl_remove_cache(S.RT_WIN, S.RT_WIN + S.RT_WIN_BYTES)  # another runtime may have run before
        self._entry_state = self._hart_at(image.entry)
        self._reset_hart()
        self.pc = self._rt_entry = image.entry
        self.stack_size = stack_size
        self.state = State.RUNNING
        self._runtime_started(runtime)

    def _hart_at(self, entry: int) -> Any:
        """The hart's reset state for a runtime kernel entered at ``entry``: the power-on state
        (machine mode, every CSR, integer and FP register as the emulator created them), sp at the
        top of WIN_F, mstatus.FS on (the F extension), the PC at ``entry``."""
        uc = self.uc
        uc.context_restore(self._power_on)
        uc.reg_write(rv.UC_RISCV_REG_SP, S.WIN_F + self.config.cmx_bytes)
        uc.reg_write(rv.UC_RISCV_REG_MSTATUS, uc.reg_read(rv.UC_RISCV_REG_MSTATUS) | MSTATUS_FS)
        uc.reg_write(rv.UC_RISCV_REG_PC, entry)
        return uc.context_save()

    def _reset_hart(self) -> None:
        """The architectural reset of the hart (before every task and at START), so that nothing a
        kernel did to the privilege mode, the CSRs or the registers reaches the next task, of any
        context: the CPU state saved by :meth:`_hart_at` copied back (under 1 us); fflags, which
        the emulator keeps outside that state (measured: a restore leaves them as they were), set
        to 0 (2 us); and the emulator's TLB emptied (3 us): translations made while a kernel had
        turned on paging (satp) or MPRV, or changed the PMP, are not the reset hart's."""
        uc = self.uc
        uc.context_restore(self._entry_state)
        uc.reg_write(rv.UC_RISCV_REG_FFLAGS, 0)
        uc.ctl(unicorn.UC_CTL_TLB_FLUSH, unicorn.UC_CTL_IO_WRITE)

    def halt(self) -> None:
        """Stop the tile, empty its FIFO, clear its error (the host's HALT, a reset); never while
        it is ``busy`` (see Unlocked.abandon)."""
        self.fifo.clear()
        self.state = State.IDLE
        self.task = None
        self.wait_mask = 0
        self.done = self.task_seq = 0
        self._restart = False
        self._hle_compute = None
        self._task_t0 = 0
        self.error = E.NONE
        self.error_pc = self.error_addr = self.error_task = self.error_kernel = 0
        self.error_detail = ""

    def push(self, pushed: Pushed) -> None:
        if len(self.fifo) >= S.FIFO_DEPTH:
            raise ShaveFault(E.FIFO_FULL, f"tile {self.index}: push of {pushed.addr:#x} to a full FIFO "
                                          f"({S.FIFO_DEPTH} tasks)", addr=pushed.addr)
        self.fifo.append(pushed)

    def runnable(self) -> bool:
        if self.busy or self.stopping:  # it computes (another thread runs it), or is abandoned
            return False
        if self.state == State.RUNNING:
            return True
        if self.state == State.WAIT_FIFO:
            return bool(self.fifo)
        if self.state == State.WAIT_BARRIER:
            return self.barriers.ready(self.wait_mask)
        return False

    def resume(self, release: Releaser | None = None) -> None:
        """Run the tile until it sleeps (or, with an instruction budget, ends a task) or stops with
        an error (raised as ShaveFault after the tile's error registers are set). ``release``: the
        threaded worker's, to compute kernels without the device lock (pydla.hw.shave.unlocked)."""
        self._release = release
        try:
            while not self.stopping:
                if self._resume_fast():
                    return  # the shipped runtime kernel's loop, run in Python: the tile sleeps
                if not self._emulate() or self.instruction_budget:
                    return  # asleep; or (exact count) a task ended: the next one gets a fresh count
        finally:
            self._release = None

    def _emulate(self) -> bool:
        """One run of the machine code from ``self.pc``. True when a task ended with more queued (the
        hart was reset and the runtime kernel is at its entry again), False when the tile sleeps."""
        uc = self.uc
        self._fault = None
        self._stop = None
        self._restart = False
        self.state = State.RUNNING
        try:
            with self._computing():
                if self.instruction_budget:
                    uc.emu_start(self.pc, UNTIL, count=self.instruction_budget)
                else:
                    with WATCHDOG.watch(uc, self.time_budget_s):
                        uc.emu_start(self.pc, UNTIL)
        except unicorn.UcError as e:
            if self._fault is None:
                self._fault = emulator_fault(uc, e)
        if self.stopping:
            return False  # abandoned (a reset, HALT or START): what it did is no longer the tile's
        pc = uc.reg_read(rv.UC_RISCV_REG_PC)
        if self._fault is None and self._restart:
            self._reset_hart()
            self.pc = self._rt_entry
            self._machine_restarted()
            if not self.fifo:
                # Nothing to take: the runtime kernel, entered now, would only read fifo_pop and
                # sleep; it sleeps at its entry instead (one emulation fewer per task).
                self.state = State.WAIT_FIFO
                return False
            return True
        if self._fault is None and self._stop is None:
            self._fault = _halt_fault(pc, self.instruction_budget, self.time_budget_s)
        if self._fault is not None:
            self._stopped_by(self._fault, pc)
            raise self._fault
        self.pc = pc
        assert self._stop is not None
        self.state = self._stop
        self._machine_slept()
        return False

    # -- the emulator ---------------------------------------------------------------------------------

    def _ensure_uc(self) -> None:
        if self.uc is not None:
            return
        uc = unicorn.Uc(unicorn.UC_ARCH_RISCV, unicorn.UC_MODE_RISCV32)
        self._maps = [_buffer(S.RT_WIN_BYTES), _buffer(S.WIN_D_BYTES), _buffer(S.WIN_E_BYTES)]
        self._rt, self._win_d, self._win_e = (m[1] for m in self._maps)
        rx = unicorn.UC_PROT_READ | unicorn.UC_PROT_EXEC
        rw = unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE
        uc.mem_map_ptr(S.RT_WIN, S.RT_WIN_BYTES, rx, self._rt.ctypes.data)
        uc.mem_map_ptr(S.WIN_D, S.WIN_D_BYTES, rx, self._win_d.ctypes.data)
        uc.mem_map_ptr(S.WIN_E, S.WIN_E_BYTES, rw, self._win_e.ctypes.data)
        uc.mmio_map(S.RT_CTRL, 0x1000, self._locked_hook(self._ctrl_read), None,
                    self._locked_hook(self._ctrl_write), None)
        uc.hook_add(unicorn.UC_HOOK_MEM_INVALID, self._on_bad_access)
        uc.hook_add(unicorn.UC_HOOK_INTR, lambda uc, cause, _: self._fail(exception_fault(uc, cause)))
        self._wfi = WfiGuard(uc, lambda pc: self._fail(wfi_fault(pc)))
        self._power_on = uc.context_save()
        self.uc = uc

    def _map_cmx(self, stack_size: int) -> None:
        """Map WIN_F with an unmapped guard page below the stack (the stack rounded up to pages at
        the top of the slice): a kernel that overflows its configured stack faults there instead of
        overwriting its data. Remapped at every START (the stack size is latched then)."""
        uc, cmx_bytes = self.uc, self.config.cmx_bytes
        for start, size in self._cmx_maps:
            uc.mem_unmap(start, size)
        stack = -(-stack_size // GUARD_BYTES) * GUARD_BYTES
        data = cmx_bytes - stack - GUARD_BYTES
        rw = unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE
        self._cmx_maps = [(S.WIN_F + cmx_bytes - stack, stack)] + ([(S.WIN_F, data)] if data > 0 else [])
        for start, size in self._cmx_maps:
            uc.mem_map_ptr(start, size, rw, self.cmx.ctypes.data + start - S.WIN_F)
        self._guard = S.WIN_F + max(data, 0)

    def _fail(self, fault: ShaveFault) -> None:
        if self._fault is None:
            self._fault = fault
        self.uc.emu_stop()

    def _on_bad_access(self, uc: Any, access: int, address: int, size: int, value: int, _: Any) -> bool:
        pc = uc.reg_read(rv.UC_RISCV_REG_PC)
        if access in (unicorn.UC_MEM_WRITE_UNMAPPED, unicorn.UC_MEM_WRITE_PROT):
            error, what = E.WRITE_FAULT, "store to"
        elif access in (unicorn.UC_MEM_FETCH_UNMAPPED, unicorn.UC_MEM_FETCH_PROT):
            error, what = E.FETCH_FAULT, "instruction fetch from"
        else:
            error, what = E.READ_FAULT, "load from"
        window = "read-only memory" if access == unicorn.UC_MEM_WRITE_PROT else "outside the windows"
        if self._guard <= address < self._guard + GUARD_BYTES:
            window = f"the guard page below the stack: a stack overflow (stack_size {self.stack_size})"
        self._fault = self._fault or ShaveFault(error, f"{what} {address:#x} ({size} bytes), {window}",
                                                addr=address, pc=pc)
        return False  # the emulator stops with an error, caught in resume()

    def _ctrl_read(self, uc: Any, offset: int, size: int, _: Any) -> int:
        try:
            if size != 4 or offset % 4:
                raise self._bad_access("read", offset, size)
            if offset == _POP:
                return self._pop()
            if offset == _WAIT:
                if self.barriers.ready(self.wait_mask):
                    return 1
                self._sleep(State.WAIT_BARRIER)
                return 0
            field = _TASK_FIELDS.get(offset)
            if field == "tile":
                return self.index
            if field == "stack_size":
                return self.stack_size
            if field is None or self.task is None:
                raise self._bad_access("read", offset, size)
            inv = self.task.invocation
            if field == "task_entry" and not self._task_t0:
                self._task_started()
            values: dict[str, int] = {"task_entry": S.WIN_D + inv.entry_offset, "task_args": S.WIN_E,
                    "task_args_size": inv.args_size, "task_wait_mask": self.task.wait_mask,
                    "task_update_mask": self.task.update_mask}
            return values[field]
        except ShaveFault as fault:
            self._fail(fault)
            return 0

    def _ctrl_write(self, uc: Any, offset: int, size: int, value: int, _: Any) -> None:
        try:
            if size != 4 or offset % 4:
                raise self._bad_access("write", offset, size)
            who = f"tile {self.index} task {self.task_seq}"
            if offset == _WAIT:
                self.barriers.check_mask(value, "barrier_wait", who)
                self.wait_mask = value
            elif offset == _PRODUCED:
                if self._hle_compute is not None:
                    self._run_fast()
                self.barriers.produce(value, who)
            elif offset == _CONSUMED:
                self.barriers.consume(value, who)
            elif offset == _DONE and self.task is not None:
                if self._hle_compute is not None:
                    self._run_fast()
                self._task_finished()
                # The emulation stops: the hart is reset before the next task (resume), which also
                # gets a fresh budget (a new emulation).
                self._restart = True
                self.uc.emu_stop()
            else:
                raise self._bad_access("write", offset, size)
        except ShaveFault as fault:
            self._fail(fault)

    def _stopped_by(self, fault: ShaveFault, pc: int) -> None:
        """The tile stops with ``fault``: its error registers, and the task's end in the trace."""
        self._task_ended(int(fault.error))
        self.state = State.ERROR
        self.error = fault.error
        self.error_pc = fault.pc or pc
        self.error_addr = fault.addr & 0xFFFFFFFF
        self.error_task = self.task_seq
        self.error_kernel = self.task.invocation.kernel_id if self.task is not None else RUNTIME_KERNEL
        self.error_detail = fault.message

    def _task_finished(self) -> None:
        """The current task ended (its barriers updated): counted, and the tile has no task."""
        self._task_ended(0)
        self.done = (self.done + 1) & 0xFFFFFFFF
        self.task = None
        self.wait_mask = 0

    def _task_started(self) -> None:
        """The current task's kernel is called (its barriers fired): its start in the trace."""
        if self.on_task is not None:
            self.on_task(self.index, self.task_seq, None, 0)
            # Counted from after the start event's stamp (see VirtualDevice's operations): the span
            # a timeline draws from that stamp never ends past the task.
            self._task_t0 = time.perf_counter_ns()

    def _task_ended(self, error: int) -> None:
        if self._task_t0 and self.on_task is not None:
            self.on_task(self.index, self.task_seq, time.perf_counter_ns() - self._task_t0, error)
        self._task_t0 = 0

    def _bad_access(self, op: str, offset: int, size: int) -> ShaveFault:
        return ShaveFault(E.BAD_ACCESS, f"control page {op} of {size} bytes at offset {offset:#x}"
                          + ("" if self.task is not None else " with no current task"),
                          addr=S.RT_CTRL + offset, pc=self.uc.reg_read(rv.UC_RISCV_REG_PC))

    def _sleep(self, state: State) -> None:
        self._stop = state
        self.uc.emu_stop()

    # -- a task -------------------------------------------------------------------------------------

    def _pop(self) -> int:
        if self.task is not None:
            raise self._bad_access("read (fifo_pop before task_done)", _POP, 4)
        if self._restart:
            # A task ended and the emulator stops at the end of the current translation block: the
            # next task is taken after the hart's reset, never before.
            return 0
        if not self.fifo:
            self._sleep(State.WAIT_FIFO)
            return 0
        pushed = self.fifo.popleft()
        self.task_seq = pushed.seq
        task = read_kernel_task(self.iommu, pushed, self.index, self.barriers)
        self.task = task  # from here on, errors name its kernel
        self._load(task, pushed)
        return 1

    def _load(self, task: S.ActKernelTask, pushed: Pushed) -> None:
        """Map the invocation's windows: its kernel in WIN_D (unless already there), its arguments
        and data in a zeroed WIN_E."""
        inv = task.invocation
        what = f"kernel {inv.kernel_id} (task {pushed.seq})"
        elf = read_bytes(self.iommu, pushed.ctx, inv.kernel_addr, inv.kernel_size, f"{what} ELF image")
        if self._fast and self._load_fast(elf, inv, pushed, what):
            return
        if elf != self._loaded_kernel:
            self._stub_at = None
            rw_data = (S.WIN_E + S.ARGS_MAX_BYTES, S.WIN_E_BYTES - S.ARGS_MAX_BYTES, True)
            image = parse_elf(elf, what, [(S.WIN_D, S.WIN_D_BYTES, False), rw_data])
            self._win_d[:self._kernel_extent] = 0
            self._loaded_kernel = None
            extent = 0
            for seg in image.segments:
                if not seg.writable:
                    at = seg.vaddr - S.WIN_D
                    self._win_d[at:at + seg.memsz] = 0
                    self._win_d[at:at + len(seg.data)] = np.frombuffer(seg.data, dtype=np.uint8)
                    extent = max(extent, at + seg.memsz)
            self._kernel_extent = extent
            self._kernel_image = image
            self._loaded_kernel = elf
            self._wfi.watch("kernel", S.WIN_D, self._win_d[:extent])
            # The emulator caches translated code and does not see writes through the host's view of
            # its memory: drop what it translated from the previous kernel.
            self.uc.ctl_remove_cache(S.WIN_D, S.WIN_D + S.WIN_D_BYTES)
        check_entry(self._kernel_image, S.WIN_D + inv.entry_offset, what)
        self._win_e[:] = 0
        for seg in self._kernel_image.segments:
            if seg.writable:  # initial values of the kernel's RW data, every invocation
                at = seg.vaddr - S.WIN_E
                self._win_e[at:at + len(seg.data)] = np.frombuffer(seg.data, dtype=np.uint8)
        self._load_args(inv, pushed, what)

    def _load_args(self, inv: S.ActKernelInvocation, pushed: Pushed, what: str) -> bytes:
        args = b""
        if inv.args_size:
            args = read_bytes(self.iommu, pushed.ctx, inv.args_addr, inv.args_size, f"{what} arguments")
            self._win_e[:inv.args_size] = np.frombuffer(args, dtype=np.uint8)
        if inv.data_size:
            data = read_bytes(self.iommu, pushed.ctx, inv.data_addr, inv.data_size, f"{what} data")
            self._win_e[inv.data_offset:inv.data_offset + inv.data_size] = np.frombuffer(data, dtype=np.uint8)
        return args

    def close(self) -> None:
        if self.uc is not None:
            self.uc = None
            self._maps.clear()

