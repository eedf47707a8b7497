"""Fuzzing the SHAVE tiles with kernels: mutated kernel ELFs and hand-written hostile payloads.

A kernel is what a user hands :class:`pydla.ShaveKernel`: an ELF whose code runs on a tile. Here each
one runs through the whole stack (its loadable, the UMD, the KMD's SHAVE task list, the tile's
machine code, never its numpy equivalent) on one device that lives across every case, and must

- end as a :class:`~pydla.errors.DlaError` naming what went wrong, or run;
- leave the device usable: right after it, a canary kernel gives the right bits, on the same tile.

The canary (:func:`canary_kernel`) multiplies by a factor with the dynamic rounding mode, after
reading ``mstatus`` (illegal outside machine mode) and checking that the CSRs a kernel can leave
behind are at their reset values (an ``ebreak`` otherwise): a privilege mode, a CSR, a rounding mode
or a translation left by the previous kernel shows as a fault or as other bits.

There is no RISC-V compiler here: the payloads are RV32 machine code from a tiny encoder
(:data:`HOSTILE`: privilege changes, CSR writes of every class of CSR number, ``wfi``, ``ecall``,
``ebreak``, loads and stores outside the windows, jumps outside the code window, endless loops),
wrapped in an ELF32 executable by :func:`kernel_image`.

Usage::

    target = shave_kernel_target()           # a pydla.testing.fuzz Target
    report = run_campaign([target], cases=500)
    with ShaveBench() as bench:
        bench.run_payload("mret")            # DlaError (FETCH_FAULT ...) or None
        bench.check_canary()
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError
from pydla.testing.fuzz import Target

# -- a tiny RV32 encoder ---------------------------------------------------------------------------

ZERO, RA, SP, GP, TP, T0, T1, T2, S0, S1, A0, A1, A2 = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
T3, T4 = 28, 29
RET = 0x00008067  # jalr x0, 0(ra)
MRET, SRET, URET, WFI = 0x30200073, 0x10200073, 0x00200073, 0x10500073
ECALL, EBREAK = 0x00000073, 0x00100073
LOOP = 0x0000006F  # jal x0, 0: itself, forever
CSRRW, CSRRS, CSRRC = 1, 2, 3
MSTATUS, MISA, MIE, MTVEC = 0x300, 0x301, 0x304, 0x305
MSCRATCH, MEPC, MCAUSE, MIP = 0x340, 0x341, 0x342, 0x344
SEPC, SATP, PMPCFG0, PMPADDR0, FRM, FCSR = 0x141, 0x180, 0x3A0, 0x3B0, 0x002, 0x003
MSTATUS_MPRV, MSTATUS_FS = 1 << 17, 3 << 13


def _i(imm: int, rs1: int, f3: int, rd: int, op: int) -> int:
    return (imm & 0xFFF) << 20 | rs1 << 15 | f3 << 12 | rd << 7 | op


def _s(imm: int, rs2: int, rs1: int, f3: int, op: int) -> int:
    return (imm >> 5 & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | f3 << 12 | (imm & 0x1F) << 7 | op


def addi(rd: int, rs1: int, imm: int) -> int:
    return _i(imm, rs1, 0, rd, 0x13)


def lw(rd: int, rs1: int, imm: int) -> int:
    return _i(imm, rs1, 2, rd, 0x03)


def sw(rs2: int, rs1: int, imm: int) -> int:
    return _s(imm, rs2, rs1, 2, 0x23)


def flw(fd: int, rs1: int, imm: int) -> int:
    return _i(imm, rs1, 2, fd, 0x07)


def fsw(fs: int, rs1: int, imm: int) -> int:
    return _s(imm, fs, rs1, 2, 0x27)


def fmul_s(fd: int, fs1: int, fs2: int, rm: int = 7) -> int:
    """fmul.s; rm 7: the dynamic rounding mode (frm)."""
    return 0x08 << 25 | fs2 << 20 | fs1 << 15 | rm << 12 | fd << 7 | 0x53


def and_(rd: int, rs1: int, rs2: int) -> int:
    return rs2 << 20 | rs1 << 15 | 7 << 12 | rd << 7 | 0x33


def jalr(rd: int, rs1: int, imm: int = 0) -> int:
    return _i(imm, rs1, 0, rd, 0x67)


def branch(f3: int, rs1: int, rs2: int, offset: int) -> int:
    """beq (f3 0), bne (1)... to ``offset`` bytes from this instruction."""
    o = offset & 0x1FFF
    return ((o >> 12 & 1) << 31 | (o >> 5 & 0x3F) << 25 | rs2 << 20 | rs1 << 15 | f3 << 12
            | (o >> 1 & 0xF) << 8 | (o >> 11 & 1) << 7 | 0x63)


def jal(rd: int, offset: int) -> int:
    o = offset & 0x1FFFFF
    return ((o >> 20 & 1) << 31 | (o >> 1 & 0x3FF) << 21 | (o >> 11 & 1) << 20 | (o >> 12 & 0xFF) << 12
            | rd << 7 | 0x6F)


def csr(f3: int, rd: int, number: int, rs1: int) -> int:
    """csrrw (f3 1), csrrs (2), csrrc (3); 5..7 their immediate forms (``rs1`` the immediate)."""
    return _i(number, rs1, f3, rd, 0x73)


def li(rd: int, value: int) -> list[int]:
    """Load a 32-bit constant: lui + addi (or one addi)."""
    value &= 0xFFFFFFFF
    signed = value - (1 << 32) if value >> 31 else value
    if -2048 <= signed < 2048:
        return [addi(rd, ZERO, signed)]
    hi = (value + 0x800) >> 12 & 0xFFFFF
    lo = (value - (hi << 12)) & 0xFFF
    return [hi << 12 | rd << 7 | 0x37] + ([addi(rd, rd, lo)] if lo else [])


def kernel_image(words: Sequence[int], *, data: bytes = b"") -> bytes:
    """An ELF32 RISC-V executable: ``words`` at WIN_D (read + execute, entered at its first word),
    and ``data`` (if any) as a writable segment in WIN_E after the argument area."""
    code = b"".join(struct.pack("<I", w & 0xFFFFFFFF) for w in words)
    segments = [(S.WIN_D, code, 5)] + ([(S.WIN_E + S.ARGS_MAX_BYTES, data, 6)] if data else [])
    offset = 52 + 32 * len(segments)
    headers, body = b"", b""
    for vaddr, blob, flags in segments:
        headers += struct.pack("<IIIIIIII", 1, offset + len(body), vaddr, vaddr, len(blob), len(blob),
                               flags, 4)
        body += blob
    ehdr = struct.pack("<16sHHIIIIIHHHHHH", b"\x7fELF\x01\x01\x01" + bytes(9), 2, 243, 1, S.WIN_D, 52, 0,
                       0x4, 52, 32, len(segments), 0, 0, 0)  # e_flags: the single-float ABI
    return ehdr + headers + body


# -- the canary ----------------------------------------------------------------------------------------

# CSRs the canary requires at their reset values (a kernel may write every one of them).
_CHECKED = (MSCRATCH, MTVEC, MIE, MIP, MEPC, SATP, PMPCFG0, FCSR)


def canary_kernel() -> bytes:
    """y[i] = x[i] * factor (float32, the dynamic rounding mode) for the n elements of the
    argument convention of :mod:`pydla.kernels` (MemRefData in at 0, out at 32, params n and factor
    at 64). It first reads mstatus (illegal outside machine mode), requires MPRV off and FS on, and
    the CSRs of ``_CHECKED`` zero: an ebreak otherwise."""
    words = [csr(CSRRS, T3, MSTATUS, ZERO), *li(T4, MSTATUS_MPRV), and_(T4, T3, T4)]
    fail_if_set = [len(words)]  # branches to the ebreak (bne t4, zero), written below
    words += [0, *li(T4, MSTATUS_FS), and_(T4, T3, T4)]
    fail_if_zero = len(words)  # beq t4, zero
    words.append(0)
    for number in _CHECKED:
        words.append(csr(CSRRS, T4, number, ZERO))
        fail_if_set.append(len(words))
        words.append(0)
    words += [lw(T0, A0, 0), lw(T1, A0, 32), lw(T2, A0, 64), flw(1, A0, 68)]
    loop = len(words)
    words += [branch(0, T2, ZERO, 8 * 4), flw(0, T0, 0), fmul_s(0, 0, 1), fsw(0, T1, 0),
              addi(T0, T0, 4), addi(T1, T1, 4), addi(T2, T2, -1)]
    words.append(jal(ZERO, (loop - len(words)) * 4))
    words.append(RET)
    at = len(words)
    words.append(EBREAK)
    for i in fail_if_set:
        words[i] = branch(1, T4, ZERO, (at - i) * 4)
    words[fail_if_zero] = branch(0, T4, ZERO, (at - fail_if_zero) * 4)
    return kernel_image(words)


# -- hostile payloads ----------------------------------------------------------------------------------

def _csr_write(number: int, value: int) -> list[int]:
    """Write ``value`` to CSR ``number``, read it back, return."""
    return [*li(T0, value), csr(CSRRW, T1, number, T0), csr(CSRRS, T2, number, ZERO), RET]


def _jump(to: int) -> list[int]:
    return [*li(T0, to), jalr(ZERO, T0)]


# One CSR number of each class (the top bits: access and privilege; then standard and custom).
CSR_CLASSES = {
    "user_fp": FCSR, "user_counter_ro": 0xC00, "user_custom": 0x800, "supervisor": 0x100,
    "supervisor_stvec": 0x105, "supervisor_satp": SATP, "supervisor_custom": 0x5C0, "hypervisor": 0x600,
    "machine_mstatus": MSTATUS, "machine_misa": MISA, "machine_medeleg": 0x302, "machine_mie": MIE,
    "machine_mtvec": MTVEC, "machine_mscratch": MSCRATCH, "machine_mepc": MEPC, "machine_mcause": MCAUSE,
    "machine_mip": MIP, "machine_pmpcfg0": PMPCFG0, "machine_pmpaddr0": PMPADDR0, "machine_mcycle": 0xB00,
    "machine_mcountinhibit": 0x320, "machine_custom": 0x7C0, "machine_ro_mvendorid": 0xF11,
    "debug_tselect": 0x7A0, "debug_dcsr": 0x7B0,
}
HOSTILE: dict[str, list[int]] = {
    "mret": [MRET],
    "mret_to_user": [csr(CSRRW, ZERO, MEPC, RA), MRET],  # back to the runtime kernel in user mode
    "sret": [SRET],
    "sret_to_user": [csr(CSRRW, ZERO, SEPC, RA), SRET],
    "uret": [URET],
    "wfi": [WFI, RET],
    "ecall": [ECALL, RET],
    "ebreak": [EBREAK],
    "frm_towards_zero": [csr(5, ZERO, FRM, 1), RET],  # csrrwi frm, 1: left for the next kernel
    "fp_off": [*li(T0, MSTATUS_FS), csr(CSRRC, ZERO, MSTATUS, T0), RET],
    "paging_and_mprv": [*li(T0, 1 << 31 | S.WIN_F >> 12), csr(CSRRW, ZERO, SATP, T0),
                        *li(T0, MSTATUS_MPRV), csr(CSRRS, ZERO, MSTATUS, T0), lw(T1, SP, -4), RET],
    "pmp_lockout": [*li(T0, 0xFFFFFFFF), csr(CSRRW, ZERO, PMPADDR0, T0), *li(T0, 0x88),
                    csr(CSRRW, ZERO, PMPCFG0, T0), RET],  # locked TOR entry, no access, for everyone
    "interrupts_on": [*li(T0, 0xFFFFFFFF), csr(CSRRW, ZERO, MIE, T0), csr(CSRRW, ZERO, MIP, T0),
                      csr(6, ZERO, MSTATUS, 8), RET],  # csrrsi mstatus, MIE
    "trap_vector": [*li(T0, S.WIN_D + 16), csr(CSRRW, ZERO, MTVEC, T0), ECALL, RET, RET],
    "clobber_saved": [*[addi(r, ZERO, -1) for r in (GP, TP, S0, S1, *range(18, 28))], RET],
    "load_null": [lw(T0, ZERO, 0), RET],
    "load_top": [lw(T0, ZERO, -16), RET],
    "load_misaligned": [*li(T0, S.WIN_E + 1), lw(T1, T0, 0), RET],
    "store_code": [*li(T0, S.WIN_D), sw(ZERO, T0, 0), RET],
    "store_runtime": [*li(T0, S.RT_WIN), sw(ZERO, T0, 0), RET],
    "store_far": [*li(T0, 0x40000000), sw(ZERO, T0, 0), RET],
    "store_ctrl_unknown": [*li(T0, S.RT_CTRL + 0x800), sw(ZERO, T0, 0), RET],
    "pop_from_kernel": [*li(T0, S.RT_CTRL), lw(T1, T0, 0), RET],
    "jump_args": _jump(S.WIN_E),
    "jump_cmx": _jump(S.WIN_F),
    "jump_null": _jump(0),
    "jump_runtime": _jump(S.RT_WIN),
    "jump_top": _jump(0xFFFFFFFC),
    "loop": [LOOP],
    "stack_forever": [addi(SP, SP, -16), sw(ZERO, SP, 0), jal(ZERO, -8)],
    **{f"csr_{name}_ones": _csr_write(number, 0xFFFFFFFF) for name, number in CSR_CLASSES.items()},
    **{f"csr_{name}_zero": _csr_write(number, 0) for name, number in CSR_CLASSES.items()},
}


# -- running kernels ---------------------------------------------------------------------------------

class ShaveBench:
    """One in-process device (every kernel's machine code emulated, a short time budget) and a
    runtime per kernel on it; the canary's runtime stays loaded. Close it (or use ``with``)."""

    def __init__(self, *, mode: str = "deterministic", time_budget_ms: int = 50, tdr_ms: int = 500,
                 elements: int = 64) -> None:
        from pydla.platform import Platform, createRuntime
        from pydla.portability.inprocess import InProcessPort
        from pydla.target.config import load_config

        full = load_config("full")
        assert full.shave is not None
        config = dataclasses.replace(full, shave=dataclasses.replace(
            full.shave, emulation="exact", time_budget_ms=time_budget_ms))
        self.timeout_ms = 4 * tdr_ms
        self.port = InProcessPort(platform=Platform(config, mode=mode, default_timeout_ms=self.timeout_ms,
                                                    tdr_ms=tdr_ms))
        self._runtime: Callable[[], Any] = lambda: createRuntime(self.port, timeout_ms=self.timeout_ms)
        self.x = np.random.default_rng(5).standard_normal(elements).astype(np.float32) * 100
        self.factor = np.float32(1 / 3)  # inexact products: the rounding mode shows
        self.params = struct.pack("<If", elements, self.factor)
        self._canary = self._loaded(canary_kernel())
        self.expected = self.x * self.factor  # numpy: round to nearest even

    def _loaded(self, elf: bytes) -> tuple[Any, Any, Any]:
        from pydla.kernels.image import check_elf
        from pydla.shave_kernel import loadable

        spec = (self.x.shape, self.x.dtype)
        blob = loadable(check_elf(elf, "fuzzed kernel"), [spec], [spec], self.params, name="fuzzed")
        rt = self._runtime()
        try:
            rt.load(blob)
            mems = [rt.allocateSystemMemory(self.x.nbytes) for _ in range(2)]
            rt.bindInputTensor(0, mems[0])
            rt.bindOutputTensor(0, mems[1])
        except BaseException:
            rt.close()
            raise
        return rt, mems[0], mems[1]

    def run(self, elf: bytes) -> np.ndarray:
        """Run kernel ``elf`` once on the bench's input; its output (DlaError when it faults)."""
        rt, src, dst = self._loaded(elf)
        try:
            src.array(np.float32)[:] = self.x
            rt.submit()
            return np.array(dst.array(np.float32))
        finally:
            rt.close()

    def run_payload(self, name: str) -> DlaError | None:
        """Hostile payload ``name``: its DlaError, or None when it ran."""
        try:
            self.run(kernel_image(HOSTILE[name]))
        except DlaError as e:
            return e
        return None

    def check_canary(self, after: str = "the previous kernel") -> None:
        """The canary, on the same tile: RuntimeError when the device is not usable (its error, or
        other bits than numpy's)."""
        rt, src, dst = self._canary
        src.array(np.float32)[:] = self.x
        try:
            rt.submit()
        except DlaError as e:
            raise RuntimeError(f"the device is not usable after {after}: the canary kernel failed: "
                               f"{e.message}") from None
        got = dst.array(np.float32)
        if got.tobytes() != self.expected.tobytes():
            wrong = int(np.count_nonzero(got.view(np.uint32) != self.expected.view(np.uint32)))
            raise RuntimeError(f"the device is not usable after {after}: the canary kernel gave {wrong} "
                               f"wrong elements of {got.size}")

    def close(self) -> None:
        self._canary[0].close()
        self.port.close()

    def __enter__(self) -> ShaveBench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shave_kernel_target(bench: ShaveBench | None = None) -> Target:
    """The fuzz target (:class:`pydla.testing.fuzz.Target`) ``shave-kernel``: the seeds are the
    hostile payloads and the shipped kernels; each mutated kernel runs (a DlaError is the refusal
    the campaign counts), then the canary must give the right bits (a RuntimeError otherwise, which
    the campaign reports as a finding)."""
    from pydla.kernels.build import kernel_elf

    held = bench if bench is not None else ShaveBench()
    seeds = [kernel_image(words) for words in HOSTILE.values()]
    seeds += [kernel_elf(name) for name in ("clamp", "activation", "softmax")] + [canary_kernel()]

    def check(data: bytes) -> None:
        try:
            held.run(data)
        finally:
            held.check_canary("this input")

    return Target("shave-kernel", seeds, check)


__all__ = ["CSR_CLASSES", "HOSTILE", "ShaveBench", "canary_kernel", "kernel_image", "shave_kernel_target"]
