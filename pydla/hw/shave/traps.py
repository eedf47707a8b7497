"""How a SHAVE tile's emulator stops become :class:`ShaveFault`: RISC-V exceptions (unicorn's
interrupt hook), the emulator's own errors (ebreak and ecall come as invalid instructions), and
``wfi``, which the tile refuses.

**wfi.** A kernel runs once the runtime kernel has waited for its barriers (the VPUX software
layers' runtime kernel: it takes the task from the FIFO, waits its barriers, launches it); a tile
defines no interrupt that a kernel could wait for, and the runtime kernel waits through its control
page (a read of ``fifo_pop`` or ``barrier_wait`` puts the tile to sleep). A ``wfi`` would wait
forever on a real tile (or be a no-op, which RISC-V also allows): the tile refuses it with
ILLEGAL_INSTRUCTION, its bits in error_addr, before it executes. The emulator itself would halt
the hart at a wfi and return as if the budget had run out: :class:`WfiGuard` puts a code hook on the
wfi words of the images the tile loads (its code windows are read-only, so no other word runs).

Usage::

    guard = WfiGuard(uc, on_wfi=lambda pc: ...)
    guard.watch("kernel", WIN_D, win_d_bytes[:extent])     # after loading an image there
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.hw.shave.faults import E, ShaveFault

unicorn: Any = importlib.import_module("unicorn")
rv: Any = importlib.import_module("unicorn.riscv_const")

EBREAK, ECALL = 0x00100073, 0x00000073  # traps the emulator reports as invalid instructions
WFI = 0x10500073

# RISC-V exception causes (mcause) -> the tile's error, and their names for the device log.
CAUSES = {0: E.FETCH_FAULT, 1: E.FETCH_FAULT, 12: E.FETCH_FAULT, 2: E.ILLEGAL_INSTRUCTION,
          3: E.TRAP, 8: E.TRAP, 9: E.TRAP, 11: E.TRAP, 4: E.READ_FAULT, 5: E.READ_FAULT, 13: E.READ_FAULT,
          6: E.WRITE_FAULT, 7: E.WRITE_FAULT, 15: E.WRITE_FAULT}
CAUSE_NAMES = {0: "misaligned instruction address", 1: "instruction access fault", 2: "illegal instruction",
               3: "ebreak", 4: "misaligned load", 5: "load access fault", 6: "misaligned store",
               7: "store access fault", 8: "ecall (from user mode)", 9: "ecall (from supervisor mode)",
               11: "ecall", 12: "instruction page fault (a kernel turned paging on)",
               13: "load page fault (a kernel turned paging on)",
               15: "store page fault (a kernel turned paging on)"}


def word_at(uc: Any, address: int) -> int:
    """The 32-bit word the hart sees at ``address`` (0 where nothing is mapped)."""
    try:
        return int.from_bytes(uc.mem_read(address, 4), "little")
    except unicorn.UcError:
        return 0


def exception_fault(uc: Any, cause: int) -> ShaveFault:
    """The fault of RISC-V exception ``cause``, seen by unicorn's interrupt hook. unicorn 2.1 sets
    neither mepc nor mtval and reports the PC after the 4-byte instruction that trapped (measured
    for illegal instructions, ecall and page faults; tests/hw/shave/test_faults.py checks it): mepc
    and mtval hold what a kernel wrote there, if anything."""
    pc = (uc.reg_read(rv.UC_RISCV_REG_PC) - 4) & 0xFFFFFFFF
    error = CAUSES.get(cause, E.ILLEGAL_INSTRUCTION)
    addr = word_at(uc, pc) if error in (E.ILLEGAL_INSTRUCTION, E.TRAP) else 0  # the instruction's bits
    what = CAUSE_NAMES.get(cause, f"exception cause {cause}")
    return ShaveFault(error, f"{what} at pc {pc:#x}", addr=addr, pc=pc)


def emulator_fault(uc: Any, e: Any) -> ShaveFault:
    """An error the emulator raised without a hook seeing it first: ebreak and ecall come here as
    invalid instructions, told apart by the instruction word at the PC."""
    pc = uc.reg_read(rv.UC_RISCV_REG_PC)
    word = word_at(uc, pc)
    if word in (EBREAK, ECALL):
        name = "ebreak (a kernel's assert)" if word == EBREAK else "ecall"
        return ShaveFault(E.TRAP, f"{name} at pc {pc:#x}", addr=word, pc=pc)
    error = {unicorn.UC_ERR_READ_UNMAPPED: E.READ_FAULT, unicorn.UC_ERR_WRITE_UNMAPPED: E.WRITE_FAULT,
             unicorn.UC_ERR_FETCH_UNMAPPED: E.FETCH_FAULT, unicorn.UC_ERR_WRITE_PROT: E.WRITE_FAULT,
             unicorn.UC_ERR_FETCH_PROT: E.FETCH_FAULT, unicorn.UC_ERR_INSN_INVALID: E.ILLEGAL_INSTRUCTION,
             }.get(e.errno, E.ILLEGAL_INSTRUCTION)
    return ShaveFault(error, f"emulator: {e} at pc {pc:#x} (instruction {word:#010x})", addr=word, pc=pc)


def wfi_fault(pc: int) -> ShaveFault:
    return ShaveFault(E.ILLEGAL_INSTRUCTION,
                      f"wfi at pc {pc:#x}: a tile has no interrupt for a kernel to wait for (the runtime "
                      "kernel waits for a task's barriers before it calls the kernel)", addr=WFI, pc=pc)


class WfiGuard:
    """Code hooks on the wfi words of the images in a tile's code windows: ``on_wfi(pc)`` is called
    before one executes. One hook per window, over its first to its last wfi word (none when it has
    none, so ordinary code pays nothing); the hook checks the word, so a hook left over from an
    earlier image never fires on another instruction."""

    def __init__(self, uc: Any, on_wfi: Callable[[int], None]) -> None:
        self.uc = uc
        self._on_wfi = on_wfi
        self._hooks: dict[str, Any] = {}

    def watch(self, window: str, base: int, image: npt.NDArray[np.uint8]) -> None:
        """``image`` is what window ``window`` (at ``base``) holds now. Call before the emulator
        translates it (drop its cached code after)."""
        old = self._hooks.pop(window, None)
        if old is not None:
            self.uc.hook_del(old)
        words = image[:len(image) // 4 * 4].view("<u4")
        at = np.flatnonzero(words == WFI)
        if at.size:
            first, last = base + 4 * int(at[0]), base + 4 * int(at[-1])
            self._hooks[window] = self.uc.hook_add(unicorn.UC_HOOK_CODE, self._hook, begin=first,
                                                   end=last + 3)

    def _hook(self, uc: Any, address: int, size: int, _: Any) -> None:
        if word_at(uc, address) == WFI:
            self._on_wfi(address)
