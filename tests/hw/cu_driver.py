"""A small host-side driver of compute units over register reads and writes (what a KMD does), for
the compute-unit tests: HS waits for ap_done before the next start; CHAIN starts while ap_ready is
set and acknowledges each ap_done with ap_continue."""

from __future__ import annotations

import time
from collections.abc import Callable

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice

AP_START, AP_DONE, AP_IDLE, AP_READY, AP_CONTINUE = 1, 2, 4, 8, 16
CTRL, GIE, IER, ISR, ARGS = 0x0, 0x4, 0x8, 0xC, 0x10
CTX, ERROR, ERROR_EXEC, EXECS = 0xF00, 0xF04, 0xF08, 0xF0C


def base(dev: VirtualDevice, name: str) -> int:
    cu = dev.config.compute_unit(name)
    assert cu is not None
    return cu.m_base_address


def run_requests(dev: VirtualDevice, name: str, count: int,
                 write_args: Callable[[int, int], None] | None = None, timeout_s: float = 20.0) -> None:
    """Run ``count`` executions of unit ``name`` by polling CTRL; ``write_args(base, i)`` programs
    request ``i`` before its start."""
    cu = dev.config.compute_unit(name)
    assert cu is not None
    b, chain = cu.m_base_address, cu.m_ip_control == "AP_CTRL_CHAIN"
    started = done = 0
    deadline = time.monotonic() + timeout_s
    while done < count:
        assert time.monotonic() < deadline, f"{name}: {done} of {count} done"
        ctrl = dev.reg_read(b + CTRL)
        if ctrl & AP_DONE:
            done += 1
            if chain:
                dev.reg_write(b + CTRL, AP_CONTINUE)
        elif started < count and ctrl & AP_READY:
            if write_args is not None:
                write_args(b, started)
            dev.reg_write(b + CTRL, AP_START)
            started += 1
        elif dev.mode == "threaded":
            time.sleep(20e-6)  # let the unit's worker thread run (a driver would wait on the interrupt)


def sequence(dev: VirtualDevice, name: str) -> str:
    """START and DONE events as XRT's documentation writes them: START1=>DONE1=>..."""
    return "=>".join(str(e) for e in dev.cu_events(name) if e.kind in ("START", "DONE"))


def write_addr(dev: VirtualDevice, address: int, value: int) -> None:
    dev.reg_write(address, value & 0xFFFFFFFF)
    dev.reg_write(address + 4, value >> 32)


def clear_cu_interrupts(dev: VirtualDevice) -> list[int]:
    """An ISR: which units interrupt (GLB cu_intr_status), their ISR cleared (read, write back:
    toggle on write), then their GLB bits; returns the interrupt ids."""
    status = dev.reg_read(R.GLB_CU_INTR_STATUS)
    ids = [i for i in range(32) if status >> i & 1]
    for cu in dev.config.ip_layout:
        if cu.m_interrupt_id in ids and not cu.is_engine:
            isr = dev.reg_read(cu.m_base_address + ISR)
            dev.reg_write(cu.m_base_address + ISR, isr)
    dev.reg_write(R.GLB_CU_INTR_STATUS, status)
    return ids
