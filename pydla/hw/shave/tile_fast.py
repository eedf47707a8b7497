"""The ``fast`` emulation mode's part of a SHAVE tile (:class:`pydla.hw.shave.tile.Tile`).

Two levels, both only for code that is byte for byte what pydla ships (:mod:`pydla.hw.shave.hle`):

- a shipped kernel's invocation runs as its numpy equivalent: the runtime kernel calls a bare
  return in its place, and the equivalent computes when the runtime kernel reports the task's
  barriers (``barrier_produced``);
- while the tile runs pydla's own runtime kernel, its loop (take the next task from the FIFO, wait
  for its barriers, call the kernel, update the barriers, report the task done) runs in Python as
  well, so that a task of a shipped kernel costs no emulation at all.

Anything else runs on the emulator, errors included: a task whose descriptor, ELF or arguments the
equivalents do not take is left at the head of the FIFO and the runtime kernel's machine code is
started at its entry (it keeps no state between tasks, so that is where its loop would be), and it
runs until it sleeps on an empty FIFO again. So every fault the device reports is the machine code's.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.hw.memory import Iommu
from pydla.hw.shave import hle
from pydla.hw.shave.barriers import Barriers
from pydla.hw.shave.faults import E, ShaveFault
from pydla.hw.shave.tasks import Pushed, read_bytes, read_kernel_task
from pydla.hw.shave.unlocked import Unlocked
from pydla.target.shave import FAST, ShaveConfig

RET = (0x00008067).to_bytes(4, "little")  # jalr x0, 0(ra): the entry of a kernel run by its equivalent
State = R.shave_tile_state_e


class FastEmulation(Unlocked):
    """The fast mode's state and steps, mixed into the tile (whose attributes it uses); a kernel's
    equivalent computes without a threaded device's lock (Unlocked)."""

    # The tile's (pydla.hw.shave.tile.Tile).
    index: int
    config: ShaveConfig
    cmx: npt.NDArray[np.uint8]
    iommu: Iommu
    barriers: Barriers
    fifo: collections.deque[Pushed]
    uc: Any
    state: State
    pc: int
    task: S.ActKernelTask | None
    task_seq: int
    wait_mask: int
    instruction_budget: int
    _rt_entry: int
    _guard: int
    _win_d: npt.NDArray[np.uint8]
    _win_e: npt.NDArray[np.uint8]
    _kernel_extent: int
    _loaded_kernel: bytes | None


    if TYPE_CHECKING:  # the tile's methods these steps use
        def _load_args(self, inv: S.ActKernelInvocation, pushed: Pushed, what: str) -> bytes: ...
        def _reset_hart(self) -> None: ...
        def _task_started(self) -> None: ...
        def _stopped_by(self, fault: ShaveFault, pc: int) -> None: ...
        def _task_finished(self) -> None: ...

    def _init_fast(self, config: ShaveConfig) -> None:
        self._fast = config.emulation == FAST
        self._hle_compute: hle.Compute | None = None
        self._hle_plans: dict[tuple[bytes, int], Any] = {}  # (ELF, entry): its equivalent's planner
        self._hle_computes: dict[tuple[bytes, bytes, int], hle.Compute | None] = {}  # (ELF, WIN_E, CMX)
        self._stub_at: int | None = None  # where WIN_D holds the bare return (no kernel loaded since)
        self._python_runtime = False  # the tile runs pydla's runtime kernel (its loop may run in Python)
        self._machine = False  # the runtime's machine code is mid-way (not asleep on an empty FIFO)
        self.fast_invocations = 0  # invocations the equivalents computed (tests and benches read it)

    # -- the kernels' equivalents ---------------------------------------------------------------------

    def _fast_compute(self, elf: bytes, inv: S.ActKernelInvocation, pushed: Pushed, what: str
                      ) -> hle.Compute | None:
        """The computation that replaces the invocation (its arguments loaded in WIN_E), or None."""
        key_plan = (elf, inv.entry_offset)
        plan = self._hle_plans.get(key_plan, False)
        if plan is False:
            if len(self._hle_plans) >= 16:
                self._hle_plans.clear()
            plan = self._hle_plans[key_plan] = hle.find(elf, inv.entry_offset)
        if plan is None or inv.entry_offset + 4 > S.WIN_D_BYTES:
            return None
        self._win_e[:] = 0  # the kernel's RW data is its own business: the equivalent has none
        args = self._load_args(inv, pushed, what)
        # The plan depends on WIN_E (arguments, dims, strides) and the CMX data's extent only: the
        # views it made stay valid while those are the same (a prepared job's repeated runs).
        key = (elf, self._win_e[:max(inv.args_size, inv.data_offset + inv.data_size)].tobytes()
               + inv.data_offset.to_bytes(4, "little") + inv.entry_offset.to_bytes(4, "little"), self._guard)
        if key in self._hle_computes:
            return self._hle_computes[key]
        compute: hle.Compute | None = plan(args, hle.Memory(self._win_e, self.cmx, self._guard - S.WIN_F))
        if len(self._hle_computes) >= 64:
            self._hle_computes.clear()
        self._hle_computes[key] = compute
        return compute

    def _load_fast(self, elf: bytes, inv: S.ActKernelInvocation, pushed: Pushed, what: str) -> bool:
        """For the runtime kernel's machine code: plan the invocation's equivalent; True when it runs
        so (its entry point is then a bare return), False to run the kernel's machine code."""
        compute = self._fast_compute(elf, inv, pushed, what)
        if compute is None:
            return False  # not covered: the tile loads the kernel (and WIN_E again)
        at = inv.entry_offset
        if self._stub_at != at:
            self._win_d[at:at + 4] = np.frombuffer(RET, dtype=np.uint8)
            self._kernel_extent = max(self._kernel_extent, at + 4)
            self._loaded_kernel = None  # WIN_D no longer holds a whole kernel
            self.uc.ctl_remove_cache(S.WIN_D + at, S.WIN_D + at + 4)
            self._stub_at = at
        self._hle_compute = compute
        return True

    def _run_fast(self) -> None:
        compute, self._hle_compute = self._hle_compute, None
        assert compute is not None
        try:
            compute()
        except Exception as e:  # a defect of the equivalent: reported, never hidden as a result
            raise ShaveFault(E.BAD_TASK, f"high-level emulation of the kernel failed: {e!r} (run it "
                                         "with shave.emulation 'exact')") from e
        self.fast_invocations += 1

    # -- the runtime kernel's loop ----------------------------------------------------------------------

    def _runtime_started(self, runtime: bytes) -> None:
        """A START with ``runtime``: its loop runs in Python when it is pydla's own (fast mode, no
        exact instruction budget, which counts the runtime kernel's instructions too)."""
        self._python_runtime = (self._fast and not self.instruction_budget
                                and hle.is_shipped_runtime(runtime))
        self._machine = False

    def _machine_slept(self) -> None:
        """The runtime's machine code stopped: asleep on an empty FIFO, with no task, it holds no
        state, so its loop may go on in Python."""
        if self.state == State.WAIT_FIFO and self.task is None:
            self._machine = False

    def _machine_restarted(self) -> None:
        """A task of the machine code ended: the hart was reset and the runtime kernel is at its
        entry, holding nothing, so its loop may go on in Python."""
        self._machine = False

    def _resume_fast(self) -> bool:
        """Run the runtime kernel's loop in Python while every task is one the equivalents take;
        True when the tile sleeps (an empty FIFO, unfired barriers), False when the machine code
        must go on (then started at the runtime's entry, the task at the FIFO's head untaken)."""
        if not self._python_runtime or self._machine:
            return False
        while True:
            if self.task is None:
                if not self.fifo:
                    self.state = State.WAIT_FIFO
                    return True
                if not self._take_fast(self.fifo[0]):
                    return self._to_machine()
            if self.wait_mask and not self.barriers.ready(self.wait_mask):
                self.state = State.WAIT_BARRIER
                return True
            self.state = State.RUNNING
            task = self.task
            assert task is not None
            who = f"tile {self.index} task {self.task_seq}"
            self._task_started()
            try:
                with self._computing():  # the numpy body, without the lock (threaded device)
                    self._run_fast()
                if self.stopping:
                    return True  # a reset or HALT abandoned the task: its result is discarded
                self.barriers.produce(task.update_mask, who)
                self.barriers.consume(task.wait_mask, who)
            except ShaveFault as fault:
                if self.stopping:
                    return True  # abandoned: its fault is not the tile's either
                self._stopped_by(fault, self._rt_entry)
                raise
            self._task_finished()

    def _take_fast(self, pushed: Pushed) -> bool:
        """Take the task at the FIFO's head if its equivalent computes it; False (nothing taken)
        when anything about it is not for the fast path: the machine code then takes it."""
        try:
            task = read_kernel_task(self.iommu, pushed, self.index, self.barriers)
            inv = task.invocation
            elf = read_bytes(self.iommu, pushed.ctx, inv.kernel_addr, inv.kernel_size, "kernel ELF image")
            compute = self._fast_compute(elf, inv, pushed, f"kernel {inv.kernel_id} (task {pushed.seq})")
        except ShaveFault:
            return False
        if compute is None:
            return False
        self.fifo.popleft()
        self.task_seq = pushed.seq
        self.task = task
        self.wait_mask = task.wait_mask
        self._hle_compute = compute
        return True

    def _to_machine(self) -> bool:
        """Hand the loop to the runtime kernel's machine code, from its entry."""
        self._machine = True
        self._reset_hart()
        self.pc = self._rt_entry
        self.state = State.RUNNING
        return False


