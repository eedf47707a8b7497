"""How the KMD names a SHAVE tile's or DMA's error (shave_error_e) in the DlaError it raises: the
error's name, its NvError code, and the refused instruction a tile's error address holds."""

from __future__ import annotations

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import NvError

E = R.shave_error_e
ERROR_CODES: dict[int, NvError] = {
    E.READ_FAULT: NvError.InvalidAddress, E.WRITE_FAULT: NvError.InvalidAddress,
    E.FETCH_FAULT: NvError.InvalidAddress, E.MMU_FAULT: NvError.InvalidAddress,
    E.ILLEGAL_INSTRUCTION: NvError.BadValue, E.TRAP: NvError.BadValue, E.BAD_ELF: NvError.BadValue,
    E.BAD_TASK: NvError.BadValue, E.BAD_BARRIER: NvError.BadValue, E.BAD_ACCESS: NvError.BadValue,
    E.BUDGET: NvError.Timeout, E.FIFO_FULL: NvError.ResourceError,
}


def error_name(code: int) -> str:
    return E(code).name if code in E._value2member_map_ else f"error {code}"


# The system instructions a tile's error_addr may hold (ILLEGAL_INSTRUCTION and TRAP: its bits).
WFI = 0x10500073
_SYSTEM = {WFI: "wfi", 0x30200073: "mret", 0x10200073: "sret", 0x00200073: "uret", 0x00000073: "ecall",
           0x00100073: "ebreak"}
WHY = {WFI: "; a SHAVE kernel may not use wfi: it has no interrupt to wait for (its barriers fired before "
             "the runtime kernel called it)",
        0x00100073: "; an ebreak is a kernel's assert (KERNEL_CHECK)"}
_CSR_OPS = {1: "csrrw", 2: "csrrs", 3: "csrrc", 5: "csrrwi", 6: "csrrsi", 7: "csrrci"}


def instruction_name(word: int) -> str:
    """What the RV32 instruction ``word`` is, when it is one a kernel is refused ("" otherwise):
    the system instructions by name, a CSR access with its CSR number."""
    if word in _SYSTEM:
        return _SYSTEM[word]
    if word & 0x7F == 0x73 and word >> 12 & 7 in _CSR_OPS:
        return f"{_CSR_OPS[word >> 12 & 7]} of CSR {word >> 20:#05x}"
    return ""
