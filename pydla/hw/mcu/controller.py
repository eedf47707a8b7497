"""The microcontroller of a headed device: its GLB registers, its interrupt, where its firmware runs.

Registers (GLB, served through the device's ``glb_extra``): ``mcu_mbox_base_lo/hi``, ``mcu_mbox_ctx``
and ``mcu_mbox_size`` say where the mailbox is (writing the size makes the firmware take it, 0 lets
it go); ``mcu_doorbell`` wakes the firmware after the host added commands; ``mcu_status`` reads
RUNNING, ATTACHED and STOPPED (mcu_status_e) and, in bits 31:16, the device-API major version of the
firmware; ``mcu_reset`` restarts the firmware (a new boot, detached, nothing of the old one kept).
The firmware raises GLB intr_status bit 28 when it posted responses or events.

Interrupt routing: the blocks' done and error bits and the MMU fault (``FIRMWARE_INTR_BITS``) go to
the microcontroller; the host's interrupt handlers (``connect_irq`` on a headed device) are called
only when one of the host's bits (the mailbox, SHAVE, compute units) is pending, as a real interrupt
controller would route them: a block's completion does not interrupt the host.

Where the firmware runs follows the device's mode, as the blocks' execution does:

- ``threaded``: on the microcontroller's own thread; when the firmware is idle, the thread that rang
  the doorbell or raised a block's interrupt runs it at once instead (as the host KMD's bottom half
  runs on the interrupting thread: the simulation saves a thread handoff, nothing else changes);
- ``deterministic`` and ``step``: in the caller's thread, right after the register write that rang
  the doorbell (or attached, or reset) returns, and from the interrupt a block raises; so a headed
  KMD test is as reproducible as a headless one.

Fault injection: :meth:`Microcontroller.inject_hang` makes the firmware stop taking commands and
events (a hung firmware) until ``mcu_reset``. An internal error of the firmware (a bug) stops it with
STOPPED set, and never reaches the host or the device's threads.

Usage::

    dev = VirtualDevice("full-headed")       # dev.mcu is the microcontroller
    dev.mcu.flash(other_device_api_module)   # boot firmware built from another spec
"""

from __future__ import annotations

import collections
import threading
import traceback
from types import ModuleType
from typing import TYPE_CHECKING

from pydla.deviceapi.generated import device_api
from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.hw.mcu.board import Board, DlaBoard
from pydla.hw.mcu.firmware import Firmware
from pydla.hw.mcu.port import FIRMWARE_INTR_BITS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pydla.hw.device_view import McuHost

MAILBOX_BIT = 1 << 28
_RUNNING, _ATTACHED, _STOPPED = (int(R.mcu_status_e.RUNNING), int(R.mcu_status_e.ATTACHED),
                                 int(R.mcu_status_e.STOPPED))
_IDLE_WAIT_S = 0.05
_HOST_INTR_BITS = 0xFFFFFFFF & ~FIRMWARE_INTR_BITS


class Microcontroller:
    """See the module docstring. Made by the device when its configuration says ``headed``."""

    def __init__(self, device: McuHost, api: ModuleType = device_api) -> None:
        self.device = device
        self.api = api
        self._bus_write = device.reg_write  # the register bus itself (before the host's is wrapped)
        self.board = self._board()
        self._lock = threading.Lock()  # the registers and requests below
        self._wake = threading.Condition(self._lock)
        self._serving = threading.Lock()  # held while the firmware runs: one runner at a time
        self._work = False
        self._due = False
        self._kicks = 0  # doorbells and requests, counted: see _serve
        self._requests: collections.deque[tuple[str, int, int, int]] = collections.deque()
        self._mbox = [0, 0, 0, 0]  # base_lo, base_hi, ctx, size
        self.hung = False
        self.stopped: str | None = None
        self.attach_error: str | None = None
        self.firmware = Firmware(self.board, self._bus_write, api)
        self._closed = False
        self._wire_registers()
        # The host's handlers: called by _irq when a host bit is pending (see the module docstring).
        self._host_handlers: tuple[Callable[[], object], ...] = ()
        device_disconnect = device.disconnect_irq

        def connect_irq(handler: Callable[[], object]) -> None:
            with self._lock:
                self._host_handlers = (*self._host_handlers, handler)

        def disconnect_irq(handler: Callable[[], object]) -> None:
            with self._lock:
                if handler not in self._host_handlers:
                    device_disconnect(handler)
                    return
                handlers = list(self._host_handlers)
                handlers.remove(handler)
                self._host_handlers = tuple(handlers)

        device.connect_irq = connect_irq
        device.disconnect_irq = disconnect_irq
        self._thread: threading.Thread | None = None
        if device.mode == "threaded":
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"pydla-dev{device.instance}-mcu")
            self._thread.start()
        # The firmware runs right after the host's register write that needs it returns (the
        # device's lock is then free): the host's write is wrapped, on this device only. Threaded, an
        # idle firmware runs there too (the simulation's shortcut for a thread handoff); a busy one
        # is left to its own thread.
        self._wrap_host_writes()

    # -- how the microcontroller sits in the device (pydla's own: GLB mcu_*; overridden for NVDLA's) ----

    def _board(self) -> Board:
        return DlaBoard(self.device)

    def _wire_registers(self) -> None:
        """The registers in the device's GLB, and the device's interrupt to the controller."""
        device = self.device
        regs = {R.GLB_MCU_MBOX_BASE_LO: 0, R.GLB_MCU_MBOX_BASE_HI: 1, R.GLB_MCU_MBOX_CTX: 2,
                R.GLB_MCU_MBOX_SIZE: 3}
        for address, index in regs.items():
            device.glb_extra[address] = self._mbox_register(index)
        device.glb_extra[R.GLB_MCU_DOORBELL] = (lambda: 0, self._doorbell)
        device.glb_extra[R.GLB_MCU_STATUS] = (self.status, lambda v: 0)
        device.glb_extra[R.GLB_MCU_RESET] = (lambda: 0, self._reset_write)
        device.connect_irq(self._irq)

    def _wrap_host_writes(self) -> None:
        bus_write = self._bus_write

        def reg_write(address: int, value: int) -> None:
            bus_write(address, value)
            if self._due:
                self._due = False
                self._serve()

        bus_write_many = self.device.reg_write_many

        def reg_write_many(writes: Sequence[tuple[int, int]]) -> None:
            bus_write_many(writes)
            if self._due:
                self._due = False
                self._serve()

        self.device.reg_write = reg_write
        self.device.reg_write_many = reg_write_many

    def _post_mailbox_interrupt(self) -> None:
        """The firmware posted: the host's mailbox interrupt (GLB intr_status bit 28)."""
        self._bus_write(R.GLB_INTR_SET, MAILBOX_BIT)

    # -- registers (called under the device's lock: they only record and wake) -------------------------

    def status(self) -> int:
        value = _RUNNING | int(self.firmware.api.VERSION[0]) << 16
        if self.firmware.mailbox is not None:
            value |= _ATTACHED
        if self.stopped is not None:
            value = (value & ~_RUNNING) | _STOPPED
        return value

    def _mbox_register(self, index: int) -> tuple[Callable[[], int], Callable[[int], int]]:
        def read() -> int:
            return self._mbox[index]

        def write(value: int) -> int:
            return self._mbox_write(index, value)

        return read, write

    def _mbox_write(self, index: int, value: int) -> int:
        self._mbox[index] = value
        if index == 3:
            base = self._mbox[0] | self._mbox[1] << 32
            self._request(("attach", base, self._mbox[2], value))
        return 0

    def _doorbell(self, value: int) -> int:
        if value & 1:
            self._kick()
        return 0

    def _reset_write(self, value: int) -> int:
        if value & 1:
            self._request(("reset", 0, 0, 0))
        return 0

    def _request(self, request: tuple[str, int, int, int]) -> None:
        with self._lock:
            self._requests.append(request)
        self._kick()

    def _kick(self) -> None:
        self._kicks += 1  # before _work: _serve relies on the order
        self._work = True
        self._due = True
        if self._thread is not None:
            with self._wake:
                self._wake.notify()

    # -- the interrupt and the firmware's runs ------------------------------------------------------

    def _irq(self) -> None:
        """The device raised its interrupt: the firmware's ISR takes the block bits routed to it, the
        host's handlers the host's bits."""
        device = self.device
        pending = device.intr_status & ~device.intr_mask
        if pending & FIRMWARE_INTR_BITS:
            self._firmware_irq()
        if pending & _HOST_INTR_BITS:
            for handler in self._host_handlers:
                handler()

    def _firmware_irq(self) -> None:
        firmware = self.firmware
        isr = firmware.isr
        if isr is not None and not self.hung and self.stopped is None:
            isr()
        firmware.irqs += 1  # after the ISR recorded it, before _work: _serve relies on the order
        self._work = True
        if not self._serve() and self._thread is not None:
            with self._wake:
                self._wake.notify()

    def _serve(self, wait_s: float = 0.0) -> bool:
        """Run the firmware until it has nothing left to do, unless another thread runs it (then
        that one sees the work: it looks again after letting go). False when it could not run it.
        ``wait_s``: how long to wait for the other thread (the microcontroller's own thread waits,
        rather than spin while a host or device thread runs the firmware)."""
        ran = False
        while self._work:
            if not self._serving.acquire(timeout=wait_s) if wait_s else not self._serving.acquire(False):
                return ran
            posted = False
            try:
                while self._work:
                    self._work = False
                    kicks = self._kicks
                    posted |= self._step()
                    if self._work and self._kicks == kicks and self.firmware.settled():
                        # Only interrupts came meanwhile, and the step's events pass took them (a
                        # block that ends while the firmware programs it): no second step. Cleared,
                        # then checked again: a doorbell or interrupt in between sets it back.
                        self._work = False
                        if self._kicks != kicks or not self.firmware.settled():
                            self._work = True
            finally:
                self._serving.release()
            if posted:
                # Raised once the firmware is free: the host's handlers may call back into it.
                self._post_mailbox_interrupt()
            ran = True
        return ran

    def _step(self) -> bool:
        requests: list[tuple[str, int, int, int]] = []
        if self._requests:  # (most steps have none: no lock taken)
            with self._lock:
                requests = list(self._requests)
                self._requests.clear()
        for kind, base, ctx, size in requests:
            if kind == "reset":
                self._reboot(self.api)
            elif size:
                self.attach_error = self.firmware.attach(base, ctx, size)
            else:  # the host detached (its driver closed): the firmware's command buffers go too
                self.firmware.mailbox = None
                self.firmware.cmdbufs.close()
        if self.hung or self.stopped is not None:
            return False
        try:
            posted = self.firmware.step()
        except Exception as e:  # a bug in the firmware stops it; it never throws into a caller
            self.stopped = f"{type(e).__name__}: {e}"
            self.board.log(f"mcu: the firmware stopped: {self.stopped}; "
                           + traceback.format_exc(limit=3).replace("\n", " | "))
            posted = False
        return posted

    def _reboot(self, api: ModuleType) -> None:
        self.firmware.cmdbufs.close()  # the old firmware's command buffers go with it
        self.firmware = Firmware(self.board, self._bus_write, api)
        self.hung = False
        self.stopped = None
        self.attach_error = None

    def _loop(self) -> None:
        while True:
            with self._wake:
                if not self._work and not self._closed:
                    self._wake.wait(_IDLE_WAIT_S)
            if self._closed:
                return
            self._serve(wait_s=_IDLE_WAIT_S)

    # -- for driver developers and tests ------------------------------------------------------------

    def inject_hang(self) -> None:
        """The firmware stops taking commands and events, as if stuck, until ``mcu_reset``."""
        self.hung = True

    def flash(self, api: ModuleType, timeout_s: float = 5.0) -> None:
        """Boot firmware built from device-API module ``api`` (a generated ``device_api``), detached
        from any mailbox: the next boots run it too."""
        if not self._serving.acquire(timeout=timeout_s):
            raise DlaError(NvError.Timeout, f"the firmware did not stop to be flashed within {timeout_s} s")
        try:
            self.api = api
            self._reboot(api)
        finally:
            self._serving.release()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
