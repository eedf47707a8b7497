"""Why a SHAVE tile or the SHAVE DMA stops: :class:`ShaveFault`, raised inside the device model and
turned into error registers and an interrupt (never out of the device).

Usage: ``raise ShaveFault(E.BAD_TASK, "ActKernelTask.args_size 40000 > ARGS_MAX_BYTES", addr=iova)``
"""

from __future__ import annotations

from pydla.deviceapi.generated.dla_regs import shave_error_e as E

__all__ = ["RUNTIME_KERNEL", "E", "ShaveFault"]

RUNTIME_KERNEL = 0xFFFFFFFF  # error_kernel when the runtime kernel itself failed


class ShaveFault(Exception):
    """An error of a tile or of the DMA: its shave_error_e, the address (see shave_error_e), and a
    message for the device log naming the field and the value."""

    def __init__(self, error: E, message: str, *, addr: int = 0, pc: int = 0) -> None:
        super().__init__(f"{error.name}: {message}")
        self.error = error
        self.message = message
        self.addr = addr & 0xFFFFFFFFFFFFFFFF
        self.pc = pc & 0xFFFFFFFF
