"""SHAVE tiles of the virtual device (the VPUX software layers): RV32IMF cores running kernel ELFs.

A configuration with ``"shave": {"tiles": N, ...}`` (:mod:`pydla.target.shave`) gets N tiles, a
DMA engine between device memory and the tiles' CMX slices, and physical barriers. Each tile runs
machine code with the unicorn emulator (RISC-V RV32IMF stands in for the SHAVE ISA) and sees only
its windows (pydla/deviceapi/specs/shave.yaml): WIN_D (kernel code + RO data), WIN_E (arguments +
RW data), WIN_F (its CMX slice; its stack at the top), RT_WIN (the runtime kernel) and RT_CTRL
(its control page). Modules: :mod:`.tile` (a core and its windows), :mod:`.dma`, :mod:`.barriers`,
:mod:`.tasks` (descriptors in device memory), :mod:`.elfload`, :mod:`.faults`, :mod:`.system` (the
registers and the scheduler), :mod:`.part` (the device part), :mod:`.unlocked` (a threaded device's
kernels compute without its lock). The kernels themselves (the shipped
ones, building them, the interface a kernel is called through) are :mod:`pydla.kernels`.

The protocol a KMD follows (registers of dla_regs ``shave_regs_t`` at SHAVE_TILES = 0x7800, and
device memory only; every descriptor address is an IOVA in the context written to SHAVE_CTX, which
is latched with each push and START):

1. Read SHAVE_TILES, SHAVE_BARRIERS, SHAVE_CMX_BYTES (0 tiles: no SHAVE; its registers are bus
   errors). Write SHAVE_CTX.
2. Per tile t: write the runtime kernel's ELF (pydla's is ``pydla/kernels/shipped/runtime.elf``;
   a loadable may carry another, linked at RT_WIN) into device memory; SHAVE_Tt_RT_ADDR_LO/HI,
   SHAVE_Tt_RT_SIZE, SHAVE_Tt_STACK_SIZE (the tile's stack, VPURT.Graph's stack_configuration, a
   multiple of 16 bytes, 256 .. cmx_bytes / 2, at the top of WIN_F, rounded up to 4 KiB pages; the
   page below it is an unmapped guard, so kernel data must end below WIN_F + cmx_bytes - stack - 4
   KiB, and a stack overflow is a WRITE_FAULT there); then SHAVE_Tt_CTRL = 1 (START). The tile runs
   its runtime kernel, which sleeps on the empty FIFO (SHAVE_Tt_STATE = WAIT_FIFO).
3. Configure each barrier used: SHAVE_BAR_SELECT = b; SHAVE_BAR_CONFIG = producers | consumers << 16
   (the tasks that update / wait on it). A barrier fires when its producers are done and resets to
   this configuration when its consumers are done, so it can be used again. SHAVE_BAR_NOTIFY: the
   barriers whose firing interrupts the host (typically one updated by the last task). Selecting a
   barrier the device does not have and configuring it is reported as a DMA error (BAD_BARRIER):
   the task lists that would use it must not run.
4. Write the descriptors into device memory: ActKernelTask (an ActKernelInvocation: the kernel's
   ELF image, its entry offset in WIN_D, the argument buffer copied to WIN_E, an optional RW data
   section copied to WIN_E + data_offset, the tile, a kernel id; plus wait / update barrier masks)
   and DmaTask (a strided copy DDR <-> a tile's WIN_F, with its masks). Push them in task-list
   order: SHAVE_Tt_PUSH_LO then SHAVE_Tt_PUSH_HI (the write of HI pushes) for a tile's ACT_SHAVE
   list, SHAVE_DMA_PUSH_LO / HI for the DMA list. Each FIFO holds FIFO_DEPTH tasks
   (SHAVE_Tt_LEVEL, SHAVE_DMA_LEVEL say how many wait); a push to a full one is error FIFO_FULL.
5. Wait for the interrupt (GLB intr_status bit 29; SHAVE_INTR_STATUS bit 17: a notify barrier fired
   (SHAVE_BAR_FIRED says which; write 1s to clear), bit t: tile t stopped with an error, bit 16:
   the DMA did), with a timeout: the device never hangs the host, but a task list whose barriers
   never fire waits forever. Clear both (write 1s to SHAVE_INTR_STATUS, then to GLB bit 29): bit 29
   is set again only by a new SHAVE_INTR_STATUS bit. SHAVE_Tt_DONE and SHAVE_DMA_DONE count
   completed tasks (progress).
6. On an error: SHAVE_Tt_ERROR (shave_error_e), _ERROR_PC, _ERROR_ADDR, _ERROR_KERNEL (the task's
   kernel_id; 0xFFFFFFFF: the runtime kernel), _ERROR_TASK (the push number); SHAVE_DMA_ERROR,
   _ERROR_TASK, _ERROR_ADDR_LO/HI. Recover with SHAVE_RESET = 1 (every tile halted, FIFOs emptied,
   barriers unconfigured: reconfigure and START again) or SHAVE_Tt_CTRL = 2 (HALT) for one tile.
   A device reset (GLB reset bit 31) resets the SHAVE tiles too.

Shipped kernels (``pydla/kernels/shipped/*.elf``, sources in ``shipped/src``,
:func:`pydla.kernels.build.kernel_elf`): the runtime kernel, ``clamp`` (ClampParams, as the VPUX
software layers' example), ``softmax`` (SoftmaxParams), ``activation`` (ActivationParams: exp,
sigmoid, tanh, erf, gelu) and ``layernorm`` (LayerNormParams). A kernel's
ActKernelInvocation.entry_offset is its ELF's e_entry - WIN_D.

Execution: in ``deterministic`` and ``step`` modes the tiles and the DMA run inside the register
write that lets them progress (a push, a START, a barrier configuration), in a fixed order (the
DMA's ready tasks, then tile 0, 1, ...; a tile runs until its runtime kernel sleeps on an empty
FIFO or unfired barriers, and with an exact instruction budget also after each task), so that a
run is reproducible to the register write. In ``threaded`` mode a SHAVE worker thread runs them in
the same order, beside the host, and a kernel computes with the device lock released. A kernel
runs within its budget (``instruction_budget`` or ``time_budget_ms``, :mod:`pydla.target.shave`).
"""
