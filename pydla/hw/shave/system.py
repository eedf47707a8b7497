"""The SHAVE system of one device: its tiles, DMA engine and barriers behind the SHAVE registers.

:meth:`ShaveSystem.read` and :meth:`ShaveSystem.write` take register addresses (dla_regs SHAVE_*);
a write that can let work progress (a push, a START, a barrier configured) runs the scheduler:
the DMA's head task, then each tile in index order, again until nothing can progress. A tile runs
until its runtime kernel sleeps (empty FIFO, unfired barrier; with an instruction budget, also
after each task), so the order of events depends only on the register writes and memory:
deterministic.

An error stops its tile (or the DMA), sets its error registers and a bit of ``intr_status``; the
caller raises the device's interrupt line (GLB intr_status bit 29) when :meth:`write` says so.

Usage::

    shave = ShaveSystem(config.shave, iommu)
    raised = shave.write(R.SHAVE_T0_CTRL, 1)
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.memory import Iommu
from pydla.hw.shave.barriers import Barriers
from pydla.hw.shave.dma import Dma
from pydla.hw.shave.faults import E, ShaveFault
from pydla.hw.shave.tasks import Pushed, read_bytes
from pydla.target.shave import ShaveConfig

if TYPE_CHECKING:  # the tile imports the emulator: only devices with tiles do
    from pydla.hw.shave.tile import Tile
    from pydla.hw.shave.unlocked import Releaser

BASE = R.SHAVE_TILES
TILE_STRIDE = R.SHAVE_T1_CTRL - R.SHAVE_T0_CTRL
DMA_INTR_BIT, NOTIFY_INTR_BIT = 16, 17
START, HALT = 1, 2
MAX_RUNTIME_BYTES = 1 << 20
# A tile register's offset from its tile's ctrl -> its name in shave_tile_regs_t.
_TILE_REGS = {R.REGISTERS[f"SHAVE_T0_{n.upper()}"] - R.SHAVE_T0_CTRL: n for n in (
    "ctrl", "state", "rt_addr_lo", "rt_addr_hi", "rt_size", "stack_size", "push_lo", "push_hi", "level",
    "done", "error", "error_pc", "error_addr", "error_kernel", "error_task")}


_PROGRESS = frozenset({R.SHAVE_DMA_PUSH_HI, R.SHAVE_BAR_CONFIG, R.SHAVE_BAR_PRODUCE, R.SHAVE_BAR_CONSUME})


class _TileRegs:
    """What the host wrote for one tile (the tile model holds the rest)."""

    def __init__(self) -> None:
        self.rt_addr_lo = self.rt_addr_hi = self.rt_size = self.stack_size = 0
        self.push_lo = 0


class ShaveSystem:
    def __init__(self, config: ShaveConfig, iommu: Iommu, log: Callable[[str], None] = print,
                 on_task: Callable[[int, int, int | None, int], None] | None = None) -> None:
        """``on_task(tile, task, duration_ns or None at its start, error)``: told as each kernel task
        starts and ends (the device's trace)."""
        from pydla.hw.shave.tile import Tile  # imports the emulator: only for devices with tiles

        self.config = config
        self.iommu = iommu
        self.log = log
        self.barriers = Barriers(config.barriers)
        self._cmx: list[tuple[mmap.mmap, npt.NDArray[np.uint8]] | None] = [None] * config.tiles
        self.tiles = [Tile(i, config, self._cmx_view(i), iommu, self.barriers) for i in range(config.tiles)]
        for tile in self.tiles:
            tile.on_task = on_task
        self.dma = Dma(iommu, self.barriers, self.cmx, config.tiles, config.cmx_bytes)
        self._used = False  # the CMX slices were written since the last reset
        self.raises = 0  # how often a bit of intr_status was set that was clear (see run)
        # Threaded device (pydla.hw.shave.part): wait, with the lock released, until ``done()``;
        # False after its timeout. Without a device thread no tile computes outside a call here.
        self.wait_idle: Callable[[Callable[[], bool]], bool] = lambda done: done()
        self.reset()

    def _cmx_view(self, tile: int) -> npt.NDArray[np.uint8]:
        # Anonymous memory: the kernel only backs the pages a kernel or DMA touches.
        m = mmap.mmap(-1, self.config.cmx_bytes)
        self._cmx[tile] = (m, np.frombuffer(m, dtype=np.uint8))
        return self._cmx[tile][1]  # type: ignore[index]

    def cmx(self, tile: int) -> npt.NDArray[np.uint8]:
        """Tile ``tile``'s CMX slice (WIN_F) as bytes: for the DMA, and for tests and debuggers."""
        return self.tiles[tile].cmx

    def reset(self) -> None:
        self._stop(self.tiles)
        self.ctx = 0
        self.intr_status = 0
        self.bar_select = 0
        self.dma_push_lo = 0
        self.push_seq = 0
        self.barriers.reset()
        self.dma.reset()
        self.regs = [_TileRegs() for _ in self.tiles]
        for tile in self.tiles:
            tile.halt()
            if self._used:  # fresh slices are zero already (and untouched pages cost nothing)
                tile.cmx[:] = 0
        self._used = False

    def close(self) -> None:
        self._stop(self.tiles)
        for tile in self.tiles:
            tile.close()

    def _stop(self, tiles: list[Tile]) -> None:
        """Before a reset, HALT or START of ``tiles``: what one computes outside the lock (threaded
        device) is abandoned, and this returns once it stopped touching the tile (as a DLA block's
        reset waits for its abandoned operation): an emulation is stopped, a kernel body ends."""
        for tile in tiles:
            tile.abandon()
        if not self.wait_idle(lambda: not any(t.busy for t in tiles)):
            self.log("SHAVE: a reset waited in vain for an abandoned kernel to stop computing")
        for tile in tiles:  # the caller halts or restarts them now, under the lock it holds
            tile.stopping = False

    def _flag(self, bits: int) -> None:
        """Set ``bits`` of intr_status, counting a bit newly set (the line is raised for it)."""
        if bits & ~self.intr_status:
            self.raises += 1
        self.intr_status |= bits

    # -- registers --------------------------------------------------------------------------------

    def read(self, address: int) -> int | None:
        """A SHAVE register's value; None for an address that is not one (a bus error)."""
        tile_regs = self._tile_reg(address)
        if tile_regs is not None:
            index, name = tile_regs
            t, regs = self.tiles[index], self.regs[index]
            values = {"state": int(t.state), "level": len(t.fifo), "done": t.done, "error": int(t.error),
                      "error_pc": t.error_pc, "error_addr": t.error_addr, "error_kernel": t.error_kernel,
                      "error_task": t.error_task}
            return values[name] if name in values else getattr(regs, name, 0)
        b = self.barriers
        return {
            R.SHAVE_TILES: self.config.tiles, R.SHAVE_BARRIERS: self.config.barriers,
            R.SHAVE_CMX_BYTES: self.config.cmx_bytes, R.SHAVE_CTX: self.ctx,
            R.SHAVE_INTR_STATUS: self.intr_status, R.SHAVE_RESET: 0, R.SHAVE_BAR_SELECT: self.bar_select,
            R.SHAVE_BAR_CONFIG: (b.producers[self.bar_select] | b.consumers[self.bar_select] << 16)
            if self.bar_select < b.count else 0,
            R.SHAVE_BAR_STATE: b.state(self.bar_select) if self.bar_select < b.count else 0,
            R.SHAVE_BAR_FIRED: b.fired, R.SHAVE_BAR_NOTIFY: b.notify, R.SHAVE_BAR_PRODUCE: 0,
            R.SHAVE_BAR_CONSUME: 0, R.SHAVE_BAR_READY: b.fired_now,
            R.SHAVE_DMA_PUSH_LO: self.dma_push_lo, R.SHAVE_DMA_PUSH_HI: 0,
            R.SHAVE_DMA_LEVEL: len(self.dma.fifo), R.SHAVE_DMA_DONE: self.dma.done,
            R.SHAVE_DMA_ERROR: self.dma.error, R.SHAVE_DMA_ERROR_TASK: self.dma.error_task,
            R.SHAVE_DMA_ERROR_ADDR_LO: self.dma.error_addr & 0xFFFFFFFF,
            R.SHAVE_DMA_ERROR_ADDR_HI: self.dma.error_addr >> 32,
        }.get(address)

    def write(self, address: int, value: int, run: bool = True) -> bool | None:
        """Apply a write and (``run``) run what it lets run. True when a new intr_status bit was set
        (raise the interrupt line); None for an address that is not a register (a bus error)."""
        before = self.intr_status
        self._used = True
        tile_regs = self._tile_reg(address)
        if tile_regs is not None:
            self._write_tile(*tile_regs, value)
        elif address == R.SHAVE_CTX:
            self.ctx = value
        elif address == R.SHAVE_INTR_STATUS:
            self.intr_status &= ~value
            before = self.intr_status
        elif address == R.SHAVE_RESET:
            if value & 1:
                self.reset()
                before = 0
        elif address == R.SHAVE_BAR_SELECT:
            self.bar_select = value
        elif address == R.SHAVE_BAR_CONFIG:
            if self.bar_select < self.barriers.count:
                self.barriers.configure(self.bar_select, value & 0xFFFF, value >> 16)
            else:  # a bad barrier configuration: the DMA reports it (no task runs on a bad setup)
                self._dma_fault(ShaveFault(E.BAD_BARRIER, f"bar_config of barrier {self.bar_select}: the "
                                                          f"device has {self.barriers.count}",
                                           addr=self.bar_select), 0)
        elif address == R.SHAVE_BAR_FIRED:
            self.barriers.fired &= ~value
        elif address == R.SHAVE_BAR_NOTIFY:
            self.barriers.notify = value & self.barriers.all_mask
        elif address in (R.SHAVE_BAR_PRODUCE, R.SHAVE_BAR_CONSUME):
            ready = self.barriers.fired_now
            # The engine scheduler ends (or starts) a DLA operation that updates (waits on) barriers:
            # as a task's end would. A barrier beyond the device's or one produced or consumed more
            # often than configured is the DMA's error, as a bad configuration is.
            try:
                self.barriers.check_mask(value, "bar_produce" if address == R.SHAVE_BAR_PRODUCE
                                         else "bar_consume", "the engine scheduler")
                if address == R.SHAVE_BAR_PRODUCE:
                    self.barriers.produce(value, "a DLA operation")
                else:
                    self.barriers.consume(value, "a DLA operation")
            except ShaveFault as fault:
                self._dma_fault(fault, 0)
            if self.barriers.notified:  # (run() says so too; a write with run=False must not lose it)
                self.barriers.notified = False
                self._flag(1 << NOTIFY_INTR_BIT)
            if self.barriers.fired_now & ~ready == 0:
                return bool(self.intr_status & ~before)  # no barrier fired: nothing may start
        elif address == R.SHAVE_DMA_PUSH_LO:
            self.dma_push_lo = value
        elif address == R.SHAVE_DMA_PUSH_HI:
            self.push_seq += 1
            try:
                self.dma.push(Pushed(self.ctx, self.dma_push_lo | value << 32, self.push_seq))
            except ShaveFault as fault:
                self._dma_fault(fault, self.push_seq)
        elif self.read(address) is None:
            return None
        # Only a push, a START or a barrier configuration lets a tile or the DMA progress: the other
        # registers (addresses, selects, clears) run nothing, at no cost per write.
        if run and (address in _PROGRESS or (tile_regs is not None and tile_regs[1] in ("ctrl", "push_hi"))):
            self.run()
        return bool(self.intr_status & ~before)

    def _tile_reg(self, address: int) -> tuple[int, str] | None:
        index, offset = divmod(address - R.SHAVE_T0_CTRL, TILE_STRIDE)
        if not 0 <= index < self.config.tiles or offset not in _TILE_REGS:
            return None
        return index, _TILE_REGS[offset]

    def _write_tile(self, index: int, name: str, value: int) -> None:
        tile, regs = self.tiles[index], self.regs[index]
        if name == "ctrl":
            if value & (HALT | START):
                self._stop([tile])
            if value & HALT:
                tile.halt()
                self.intr_status &= ~(1 << index)
            if value & START:
                try:
                    addr = regs.rt_addr_lo | regs.rt_addr_hi << 32
                    if not 0 < regs.rt_size <= MAX_RUNTIME_BYTES:
                        raise ShaveFault(E.BAD_ELF, f"tile {index}: rt_size {regs.rt_size} must be "
                                                    f"1..{MAX_RUNTIME_BYTES}", addr=regs.rt_size)
                    image = read_bytes(self.iommu, self.ctx, addr, regs.rt_size,
                                       f"tile {index} runtime kernel")
                    tile.start(image, regs.stack_size)
                except ShaveFault as fault:
                    self._tile_fault(index, fault)
        elif name == "push_hi":
            self.push_seq += 1
            try:
                tile.push(Pushed(self.ctx, regs.push_lo | value << 32, self.push_seq))
            except ShaveFault as fault:
                self._tile_fault(index, fault)
        elif name in ("rt_addr_lo", "rt_addr_hi", "rt_size", "stack_size", "push_lo"):
            setattr(regs, name, value)

    # -- running -------------------------------------------------------------------------------------

    def run(self, release: Releaser | None = None) -> None:
        """Run the DMA and the tiles until none can progress. ``release`` (the threaded device's
        worker): the tiles compute their kernels with the device lock released (Tile.resume); a
        bit set in intr_status meanwhile is counted in ``raises`` (the host may clear bits then)."""
        progress = True
        while progress:
            progress = False
            try:
                while self.dma.step():
                    progress = True
            except ShaveFault as fault:
                self._dma_fault(fault, self.dma.fifo[0].seq if self.dma.fifo else 0)
            for tile in self.tiles:
                if tile.runnable():
                    progress = True
                    try:
                        tile.resume(release)
                    except ShaveFault as fault:
                        self._tile_fault(tile.index, fault, recorded=True)
            if self.barriers.notified:
                self.barriers.notified = False
                self._flag(1 << NOTIFY_INTR_BIT)

    def run_task(self, index: int, ctx: int, addr: int) -> str | None:
        """Run the ActKernelTask at ``addr`` (context ``ctx``) on tile ``index`` now, to its end:
        what the tile does as an AP_CTRL_HS compute unit (pydla.hw.cu.shave_tile). The tile must run
        its runtime kernel and be idle (its FIFO empty), and the task must wait on no barrier.
        Returns None when the task ended, else why not (the tile's error, in words)."""
        tile = self.tiles[index]
        if tile.state != R.shave_tile_state_e.WAIT_FIFO or tile.fifo:
            return (f"tile {index} is not idle in its runtime kernel (state {tile.state.name}, "
                    f"{len(tile.fifo)} task(s) queued): start it, and let it finish its list first")
        done = tile.done
        self.push_seq += 1
        try:
            tile.push(Pushed(ctx, addr, self.push_seq))
        except ShaveFault as fault:
            self._tile_fault(index, fault)
            return self.error_text(index)
        self.run()
        if tile.error:
            return self.error_text(index)
        if tile.done == done:
            return (f"tile {index}: the task at {addr:#x} did not end: it waits on barriers (a task "
                    "run as a compute unit must have wait_mask 0)")
        return None

    def _tile_fault(self, index: int, fault: ShaveFault, recorded: bool = False) -> None:
        tile = self.tiles[index]
        if not recorded:  # a fault of the host's request, not of running code
            tile.state = tile.state.ERROR
            tile.error = fault.error
            tile.error_pc = fault.pc
            tile.error_addr = fault.addr & 0xFFFFFFFF
            tile.error_task = 0
            tile.error_kernel = 0
            tile.error_detail = fault.message
        self._flag(1 << index)
        self.log(f"SHAVE tile {index}: {fault} (kernel {tile.error_kernel:#x}, pc {tile.error_pc:#x}, "
                 f"address {tile.error_addr:#x})")

    def _dma_fault(self, fault: ShaveFault, seq: int) -> None:
        if not self.dma.error:
            self.dma.error = int(fault.error)
            self.dma.error_task = seq
            self.dma.error_addr = fault.addr
        self._flag(1 << DMA_INTR_BIT)
        self.log(f"SHAVE DMA: {fault}")

    def error_text(self, index: int) -> str:
        """The error of tile ``index`` in words (for logs and tests)."""
        t = self.tiles[index]
        detail = f": {t.error_detail}" if t.error_detail else ""
        return (f"tile {index}: {E(t.error).name}, kernel {t.error_kernel:#x}, task {t.error_task}, "
                f"pc {t.error_pc:#x}, address {t.error_addr:#x}{detail}")
