"""The KMD's compute-unit scheduler: XRT's kernel execution models, driven through the port.

- **AP_CTRL_HS**: one execution outstanding per unit; the next request's arguments and ap_start are
  written once ap_done was read: START1=>DONE1=>START2=>DONE2...
- **AP_CTRL_CHAIN**: the unit's input queue is kept filled: a request's arguments and ap_start are
  written as soon as ap_start reads 0 (the previous start was taken, HLS's ap_ready handshake: a
  level ap_start waits until the unit is ready) while fewer than ``pipeline_depth`` are
  outstanding; each ap_done is acknowledged with ap_continue; completions come in order.
- **AP_CTRL_NONE**: never started; a submit naming it is refused (its streams are the interface).

A unit wired to an interrupt (``m_int_enable`` 1) gets GIE and IER (done and ready) at its first
use; the ISR reads GLB cu_intr_status, clears each unit's ISR (toggle on write) and the GLB bits, and
runs the bottom half itself when the scheduler is free (else the service thread does). A unit with
``m_int_enable`` 0 is polled: by the waiting thread, or by the service thread in threaded mode.
The ISR is connected only when a unit is first used, so the DLA task path pays nothing for units
nobody drives.

**Recovery.** An execution is hung when it has not completed ``min(timeout_ms, tdr_ms)`` after its
start (a unit reports no partial progress). It fails with NvError Timeout naming the unit and its
CTRL; what else the unit had in flight fails with it; the context is guilty (its queued executions
on that unit are aborted, its hang count grows, and it is banned after ``ban_after`` hangs, as for
jobs). Compute units have no reset bit: the device reset is the one that clears them, so no new
execution starts anywhere until nothing else is in flight and the DLA engine is idle; then the
driver resets the device (:meth:`JobScheduler.reset_device_if_idle`) and the units are set up again.

**SHAVE tiles.** A ``shave_tile`` unit's executions run on a tile that the KMD's SHAVE task lists use
too: the unit owns the tile while an execution is in flight (and after one hung, until the device
reset), and an execution waits, queued, while a list owns it or asked for it first
(:mod:`pydla.kmd.tile_owner`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import KmdDeviceInfo
from pydla.kmd.bo import BufferObject
from pydla.kmd.context import Context, check_not_banned
from pydla.kmd.cu import (
    AP_CONTINUE,
    AP_DONE,
    AP_START,
    ARGS,
    CTRL,
    CTX,
    GIE,
    IER,
    ISR,
    ISR_DONE,
    ISR_READY,
    RUNNING,
    CuArg,
    CuExecution,
    CuUnit,
    encode_args,
    read_unit_error,
)
from pydla.kmd.job import Fence, check_job_args
from pydla.kmd.port import KmdPortability
from pydla.kmd.recovery import DEVICE_RESET_BIT
from pydla.kmd.tile_owner import LIST, UNIT, TileOwners

log = logging.getLogger("pydla.kmd")
POLL_NAP_S = 0.0002  # threaded mode: how often a polled unit with work in flight is looked at
IDLE_NAP_S = 0.05
MAX_STEPS = 64  # register handshakes per unit per service call (bounded work under the lock)
MAX_QUEUED = 4096  # queued executions per unit


class CuScheduler:
    """The compute units of one device (see the module docstring). ``reset_device(fn)`` is the
    driver's: it calls ``fn`` under the driver's lock when the DLA engine is idle (True if it did)."""

    def __init__(self, port: KmdPortability, info: KmdDeviceInfo, *, tdr_ms: int, ban_after: int,
                 default_timeout_ms: int, reset_device: Callable[[Callable[[], None]], bool]) -> None:
        self.port = port
        self.mode = info.mode
        self.tdr_ms = tdr_ms
        self.ban_after = ban_after
        self.default_timeout_ms = default_timeout_ms
        self._reset_device = reset_device
        self.units: dict[str, CuUnit] = {}  # by m_name and by instance
        self.all_units: tuple[CuUnit, ...] = tuple(CuUnit(desc) for desc in info.compute_units)  # each once
        self._by_id: dict[int, CuUnit] = {}
        for u in self.all_units:
            desc = u.desc
            self.units[desc.name] = self.units[desc.instance] = u
            if desc.int_enable and not desc.engine:
                self._by_id[desc.interrupt_id] = u
        self._lock = threading.RLock()
        self._servicing = False
        self._irq_connected = False
        self._next_id = 1
        self._reset_wanted = ""  # why a device reset is due ("" none)
        self.device_resets = 0
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.owners = TileOwners()  # the SHAVE tiles' owners, the lists' too once shared (share_tiles)

    def share_tiles(self, owners: TileOwners, drive_lists: Callable[[], None]) -> None:
        """The SHAVE tiles' owners, shared with the SHAVE task lists: a ``shave_tile`` unit's
        executions take turns with them (woken through this scheduler's thread or its waiters);
        ``drive_lists`` is the driver's poll, which a waiter calls where no thread runs it."""
        self.owners = owners
        owners.wake[UNIT] = self._kick.set
        owners.drive[LIST] = drive_lists

    # -- the driver's entry points ---------------------------------------------------------------

    def unit(self, name: str) -> CuUnit:
        u = self.units.get(name) if isinstance(name, str) else None
        if u is None:
            names = ", ".join(sorted({v.desc.name for v in self.units.values()})) or "none"
            raise DlaError(NvError.BadParameter, f"compute unit {name!r} is not in the device's IP_LAYOUT "
                                                 f"(it has: {names})")
        return u

    def submit(self, context: Context, name: str, args: list[CuArg], timeout_ms: int | None,
               pre_fences: list[Fence] | None, post_fences: list[Fence] | None) -> CuExecution:
        """Under the driver's lock (``context`` is open): check, queue and start if the unit allows."""
        timeout_ms = check_job_args(0, timeout_ms, self.default_timeout_ms)
        u = self.unit(name)
        desc = u.desc
        if desc.engine:
            raise DlaError(NvError.NotSupported, f"compute unit '{desc.name}' is the DLA engine: it runs "
                                                 "tasks (submit a task), not CU executions")
        if desc.control == "NONE":
            raise DlaError(NvError.NotSupported,
                           f"compute unit '{desc.name}' is AP_CTRL_NONE: it runs continuously on its "
                           "streams and is never started; use its streams (and register writes under an "
                           "exclusive context for its scalars)")
        check_not_banned(context)
        words, bos = encode_args(context, desc, args)
        with self._lock:
            if self._closed:
                raise DlaError(NvError.InvalidState, "the driver was closed")
            if len(u.queue) >= MAX_QUEUED:
                raise DlaError(NvError.Busy, f"compute unit '{desc.name}' has {MAX_QUEUED} executions queued")
            ex = CuExecution(self, self._next_id, desc, context, words, bos, timeout_ms, pre_fences,
                             post_fences)
            self._next_id += 1
            for sem, _ in ex.pre_fences:
                sem.add_listener(self._fence_moved)
            u.queue.append(ex)
            self._setup(u)
            self._service(u)
        self._after()
        return ex

    def wait_for(self, ex: CuExecution, timeout_ms: float) -> None:
        """Wait for ``ex`` to end; NvError Timeout after ``timeout_ms``. Outside threaded mode the
        waiting thread drives the unit (a deterministic device moves its clock when polled)."""
        if not 0 <= timeout_ms <= 3_600_000:
            raise DlaError(NvError.BadParameter, f"timeout_ms {timeout_ms!r} must be 0..3600000")
        deadline = time.monotonic() + timeout_ms / 1000
        u = self.units[ex.cu.name]
        while not ex.done:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DlaError(NvError.Timeout,
                               f"execution {ex.exec_id} of compute unit '{ex.cu.name}' did not finish within "
                               f"{timeout_ms} ms (it is {ex.state}; the driver declares it hung "
                               f"{min(ex.timeout_ms, self.tdr_ms)} ms after its start)")
            if self.mode == "threaded":
                ex.wait_done(min(left, IDLE_NAP_S))
                continue
            with self._lock:
                self._service(u)
                self._check_deadlines()
            self._after()
            if not ex.done and u.desc.shave_tile is not None and LIST in self.owners.drive:
                self.owners.drive[LIST]()  # a list that owns the tile ends in the driver's bottom half
            if self.mode == "step" and not ex.done:
                time.sleep(min(left, 0.001))  # the device's owner steps it

    def poll(self) -> None:
        """Outside threaded mode: service every unit with work, and check deadlines (what the
        service thread does in threaded mode); the driver's poll calls it. Never blocks."""
        # Unlocked first look: a device whose units nobody uses costs the driver's poll nothing more
        # (a unit given work meanwhile is seen on the next poll).
        if self.mode == "threaded" or not any(u.queue or u.inflight for u in self.all_units):
            return
        with self._lock:
            units = [u for u in self.all_units if u.queue or u.inflight]  # each unit once
            for u in units:
                self._service(u)
            self._check_deadlines()
        self._after()

    def check_deadlines(self) -> None:
        """Step mode, for any caller of the driver: declare the executions past their deadline hung
        (no unit is serviced: the device's owner moves it). Never blocks."""
        if self.mode == "threaded" or not any(u.inflight for u in self.all_units):
            return
        with self._lock:
            self._check_deadlines()
        self._after()

    def busy_with(self, bo: BufferObject) -> bool:
        """A queued or running execution uses ``bo`` (it may not be destroyed)."""
        with self._lock:
            return any(b is bo for u in self.all_units for q in (u.queue, u.inflight)
                       for ex in q for b in ex.bos)

    def forget_context(self, context: Context) -> None:
        """Under the driver's lock, the context closing: its executions fail. Those in flight stay in
        their unit's order until their done is read (the unit still holds them)."""
        error = DlaError(NvError.InvalidState, f"context {context.ctx} was closed")
        with self._lock:
            for u in self.all_units:
                for ex in [e for e in u.queue if e.context is context]:
                    u.queue.remove(ex)
                    self._end(ex, error)
                for ex in u.inflight:
                    if ex.context is context:
                        self._end(ex, error)
                self._tile_wait_ended(u)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            error = DlaError(NvError.InvalidState, "the driver was closed")
            for u in self.all_units:
                for ex in list(u.queue) + list(u.inflight):
                    self._end(ex, error)
                u.queue.clear()
                u.inflight.clear()
                self._tile_wait_ended(u)
            self.owners.release(UNIT)
            if self._irq_connected:
                self.port.disconnect_interrupt(self._isr)
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def stats(self) -> dict[str, object]:
        with self._lock:
            units = {u.desc.name: {"control": u.desc.control, "queued": len(u.queue),
                                   "inflight": len(u.inflight), "started": u.started,
                                   "completed": u.completed, "failed": u.failed, "hangs": u.hangs}
                     for u in self.all_units if not u.desc.engine}
            return {"units": units, "device_resets": self.device_resets}

    # -- setup and the interrupt ----------------------------------------------------------------

    def _setup(self, u: CuUnit) -> None:
        """Under the lock: the unit's interrupt enables (after every reset), the ISR, the thread."""
        if u.ready:
            return
        u.ready = True
        if u.desc.int_enable:
            if not self._irq_connected:
                self._irq_connected = True
                self.port.connect_interrupt(self._isr)
            self.port.dla_reg_write_many([(u.desc.base + IER, ISR_DONE | ISR_READY), (u.desc.base + GIE, 1)])
        if self.mode == "threaded" and self._thread is None:
            self._thread = threading.Thread(target=self._service_loop, daemon=True, name="pydla-kmd-cu")
            self._thread.start()

    def _isr(self) -> None:
        """Top half: which units interrupt; clear their ISR and GLB bits; then the bottom half here if
        the scheduler is free (saving a thread handoff), else the service thread's."""
        status = 0
        # A unit's event between the read of its ISR and the write of GLB keeps its GLB bit set
        # without a new edge (the line is level-like): read GLB again until it is clear.
        for _ in range(8):
            pending = self.port.dla_reg_read(R.GLB_CU_INTR_STATUS)
            if not pending:
                break
            status |= pending
            for iid, u in self._by_id.items():
                if pending >> iid & 1:
                    isr = self.port.dla_reg_read(u.desc.base + ISR)
                    if isr:
                        self.port.dla_reg_write(u.desc.base + ISR, isr)  # toggle on write: clears them
            self.port.dla_reg_write(R.GLB_CU_INTR_STATUS, pending)
        if not status:
            return
        if self.mode != "threaded" or not self._lock.acquire(blocking=False):
            self._kick.set()  # the waiter (nested in its own register read) or the service thread
            return
        try:
            if not self._servicing and not self._closed:
                for iid, u in self._by_id.items():
                    if status >> iid & 1:
                        self._service(u)
        finally:
            self._lock.release()
        self._after()

    def _fence_moved(self) -> None:
        self._kick.set()

    def _service_loop(self) -> None:
        """Threaded mode: service units the ISR could not, polled units, and deadlines."""
        while not self._closed:
            with self._lock:
                polled = any(u.inflight or u.queue for u in self.all_units if not u.desc.int_enable)
                waiting = any(u.queue or u.inflight for u in self.all_units)
            self._kick.wait(POLL_NAP_S if polled else IDLE_NAP_S if waiting else 0.5)
            self._kick.clear()
            if self._closed:
                return
            with self._lock:
                for u in self.all_units:
                    if u.queue or u.inflight:
                        self._service(u)
                self._check_deadlines()
            self._after()

    # -- the execution models -------------------------------------------------------------------

    def _service(self, u: CuUnit) -> None:
        """Under the lock: handshake with the unit until nothing changes (bounded). Not re-entered:
        an interrupt raised inside one of its register reads only acknowledges."""
        if self._servicing:
            return
        self._servicing = True
        try:
            for _ in range(MAX_STEPS):
                if not self._step(u):
                    break
            self._tile_wait_ended(u)
        finally:
            self._servicing = False

    def _step(self, u: CuUnit) -> bool:
        desc, port = u.desc, self.port
        base, chain = desc.base, desc.control == "CHAIN"
        ctrl = port.dla_reg_read(base + CTRL)
        if ctrl & AP_DONE and u.inflight:
            # HS: the read cleared ap_done. CHAIN: ap_continue lets the next done show.
            ex = u.inflight.popleft()
            if chain:
                port.dla_reg_write(base + CTRL, AP_CONTINUE)
            self._complete(u, ex)
            if not u.inflight and desc.shave_tile is not None:
                self.owners.release(UNIT, (desc.shave_tile,))
            return True
        if self._reset_wanted or not u.queue or ctrl & AP_START:
            return False
        if len(u.inflight) >= (desc.pipeline_depth if chain else 1):
            return False
        ex = u.queue[0]
        blocked = ex.blocked()
        if isinstance(blocked, DlaError):
            u.queue.popleft()
            self._end(ex, blocked)
            return True
        if blocked:
            return False
        tile, who = desc.shave_tile, f"'{desc.name}' execution {ex.exec_id}"
        if tile is not None and not u.inflight and not self.owners.acquire(UNIT, (tile,), who):
            return False  # a SHAVE task list has the tile, or asked first: woken when it is free
        u.queue.popleft()
        # The arguments of the previous start were latched when it was taken (ap_start read 0).
        writes = [(base + ARGS + 4 * i, w) for i, w in enumerate(ex.words)]
        writes += [(base + CTX, ex.context.ctx), (base + CTRL, AP_START)]
        ex.state = RUNNING
        ex.started_at = time.monotonic()
        ex.deadline = ex.started_at + min(ex.timeout_ms, self.tdr_ms) / 1000
        u.inflight.append(ex)
        u.started += 1
        port.dla_reg_write_many(writes)
        return True

    def _complete(self, u: CuUnit, ex: CuExecution) -> None:
        """An execution's ap_done was read: its result is the unit's error register."""
        error = read_unit_error(self.port, u.desc, ex)
        u.completed += 1
        self._end(ex, error)

    def _end(self, ex: CuExecution, error: DlaError | None) -> None:
        for sem, _ in ex.pre_fences:
            sem.remove_listener(self._fence_moved)
        if error is not None and not ex.done:
            self.units[ex.cu.name].failed += 1
        ex.finish(error)

    # -- recovery -------------------------------------------------------------------------------

    def _check_deadlines(self) -> None:
        """Under the lock: a unit whose oldest execution is past its deadline is hung."""
        now = time.monotonic()
        for u in self.all_units:
            if u.inflight and now >= u.inflight[0].deadline:
                self._hung(u, now)

    def _hung(self, u: CuUnit, now: float) -> None:
        ex = u.inflight[0]
        ctrl = self.port.dla_reg_read(u.desc.base + CTRL)
        context = ex.context
        u.hangs += 1
        context.hangs += 1
        window = min(ex.timeout_ms, self.tdr_ms)
        message = (f"execution {ex.exec_id} of compute unit '{u.desc.name}' (context {context.ctx}) hung: "
                   f"not done {window} ms after its start (CTRL {ctrl:#x}; hang timeout: the driver's "
                   f"{self.tdr_ms} ms, the execution's {ex.timeout_ms} ms); the device is reset once idle")
        if context.hangs >= self.ban_after and context.banned is None:
            context.banned = f"its executions and jobs hung {context.hangs} times (the last: {message})"
            message += f"; context {context.ctx} is now banned after {context.hangs} hangs"
        log.warning("%s", message)
        self._end(ex, DlaError(NvError.Timeout, message))
        for other in u.inflight:  # the unit's pipeline is lost with the reset
            self._end(other, DlaError(NvError.Timeout,
                                      f"execution {other.exec_id} of '{u.desc.name}' was in the unit's "
                                      f"pipeline behind hung execution {ex.exec_id}"))
        u.inflight.clear()
        for queued in [q for q in u.queue if q.context is context]:
            u.queue.remove(queued)
            self._end(queued, DlaError(NvError.Timeout, f"aborted: execution {ex.exec_id} of context "
                                                        f"{context.ctx} hung on '{u.desc.name}' before it"))
        self._tile_wait_ended(u)  # its tile stays the unit's until the device reset
        self._reset_wanted = message

    def device_was_reset(self, reason: str) -> None:
        """The driver reset the whole device (its recovery ladder's last rung, after a DLA job hung):
        every unit's pipeline was cleared with it, so what was in flight fails now, naming the reason,
        instead of waiting out its own hang timeout; queued executions start once the units are set
        up again. Called under the driver's lock (taken before this one, as everywhere)."""
        with self._lock:
            lost = [(u, ex) for u in self.all_units for ex in u.inflight]
            for u, ex in lost:
                self._end(ex, DlaError(NvError.ResourceError,
                                       f"execution {ex.exec_id} of compute unit '{u.desc.name}' was lost: "
                                       f"the device was reset ({reason})"))
            for u in self.all_units:
                u.inflight.clear()
                u.ready = False
            self.owners.release(UNIT)  # their tiles with them
            self._reset_wanted = ""  # the reset a hung unit waited for has happened
            for u in self.all_units:
                if u.queue:
                    self._setup(u)
                    self._service(u)
        if lost:
            log.warning("device reset: %d compute-unit execution(s) lost (%s)", len(lost), reason)
        self._kick.set()

    def _after(self) -> None:
        """Outside the lock: a due device reset, once nothing is in flight (the driver checks that
        the DLA engine is idle under its own lock, taken first)."""
        if not self._reset_wanted:
            return
        with self._lock:
            if any(u.inflight for u in self.all_units):
                return
        if self._reset_device(self._do_reset):
            self._kick.set()

    def _do_reset(self) -> None:
        with self._lock:
            if not self._reset_wanted or any(u.inflight for u in self.all_units):
                return
            self.port.dla_reg_write(R.GLB_RESET, 1 << DEVICE_RESET_BIT)
            self.device_resets += 1
            log.warning("device reset for compute units: %s", self._reset_wanted)
            self._reset_wanted = ""
            self.owners.release(UNIT)  # a hung unit kept its tile until now
            for u in self.all_units:
                u.ready = False
            for u in self.all_units:
                if u.queue:
                    self._setup(u)
                    self._service(u)

    def _tile_wait_ended(self, u: CuUnit) -> None:
        """Under the lock: a ``shave_tile`` unit with nothing queued waits for its tile no more."""
        if not u.queue and u.desc.shave_tile is not None:
            self.owners.withdraw(UNIT, (u.desc.shave_tile,))
