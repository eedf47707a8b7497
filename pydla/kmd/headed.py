"""Headed mode, the host's side: the driver's engine is a proxy that talks device-API messages.

On a headed device (GLB mcu_status RUNNING, or on an NVDLA configuration PYDLA_MCU_STATUS: a
microcontroller runs the engine scheduler, see :mod:`pydla.hw.mcu`; where its registers are:
:mod:`pydla.kmd.headed_regs`) the KMD keeps what it always keeps (contexts, buffers, the job queue, fences,
the watchdog and the recovery ladder: :mod:`pydla.kmd.driver`) and hands tasks to
:class:`HeadedEngine` instead of :class:`~pydla.firmware.engine.Engine`. It answers the same calls
(:class:`~pydla.firmware.engine_api.EngineApi`) through the mailbox (:mod:`pydla.firmware.headed_ring`):

- ``dla_engine_init``: allocate the mailbox in a context of the KMD's own, describe it in GLB
  mcu_mbox_*, wait for ATTACHED, and run the version handshake (version_query): a firmware whose
  device API is incompatible fails the open with NvError VersionMismatch naming both versions and
  the side to upgrade;
- ``dla_execute_task``: write the task's address list into a slot of the lists area and send
  ``task_submit_list_cmd`` (not waiting: its response comes with the events), with an NVDLA task's
  firmware interface version (device_api 1.2; an older firmware is refused for NVDLA tasks);
- ``dla_isr_handler``: GLB intr_status bit 28 (the firmware posted); ``dla_process_events`` reads the
  response and event rings and ends runs on ``task_done_evt`` (with the error ``task_failed_evt``
  described, worded as the headless engine words it);
- ``abort``, ``describe_stuck``/``progress`` (``task_status``), ``reset_blocks``/``reset_device``
  (``reset_cmd``): messages awaited with a timeout.

A firmware that does not answer within that timeout is hung: the microcontroller and the device are
reset (``mcu_reset`` and the GLB device reset), the runs it held fail with NvError Timeout saying so,
and the mailbox is attached and the handshake run again. Nothing the device writes is trusted: a
malformed ring or message is counted (:attr:`HeadedEngine.stats`) and skipped.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.runtime import Message
from pydla.deviceapi.version import ContractVersion
from pydla.errors import DlaError, NvError
from pydla.firmware.engine import Engine, engine_depth
from pydla.firmware.engine_api import EngineApi, RunState, stuck_text
from pydla.firmware.graph import TaskGraph, load_task
from pydla.firmware.headed_codec import nvdla_fields, wire
from pydla.firmware.headed_ring import ENTRY_SIZE, Layout, Ring
from pydla.firmware.interface import MAX_ADDRESSES, KmdDeviceInfo, TaskDesc
from pydla.kmd.headed_handshake import check_firmware, check_nvdla_firmware
from pydla.kmd.headed_posted import HeadedRun, PostedMessages
from pydla.kmd.headed_regs import mcu_registers
from pydla.kmd.port import KmdPortability

log = logging.getLogger("pydla.kmd")

MAILBOX_BIT = 1 << 28
NO_OP = 0xFFFF
SLOT_BYTES = MAX_ADDRESSES * ENTRY_SIZE
_ATTACHED = int(R.mcu_status_e.ATTACHED)
_STOPPED = int(R.mcu_status_e.STOPPED)
_OK = int(api.dla_status_e.OK)
_WIRE = wire(api)  # the host's own device API: the task messages' structs (headed_codec)
assert _WIRE is not None, "device_api's task messages are not laid out as pydla.firmware.headed_codec expects"
_SUBMIT, _SUBMIT_HEAD = _WIRE.submit, _WIRE.submit_head


def make_engine(port: KmdPortability, info: KmdDeviceInfo, *, rpc_timeout_ms: int = 2000) -> EngineApi:
    """The driver's engine: the proxy to the firmware on a headed device, else the engine itself."""
    if info.headed:
        return HeadedEngine(port, info, rpc_timeout_ms=rpc_timeout_ms)
    return Engine(port, info)


class FirmwareHung(DlaError):
    """The firmware did not answer in time; it was reset (see :meth:`HeadedEngine._firmware_hung`)."""


class HeadedEngine(PostedMessages):
    """The engine of a headed device, reached through the mailbox. See the module docstring."""

    # The interrupting thread may run the driver's bottom half: the firmware raises the mailbox
    # interrupt only once it let go of its own lock (pydla.hw.mcu.controller), so a message the
    # bottom half sends (an abort) is served, not deadlocked.
    bottom_half_on_irq = True
    live_progress = False  # progress costs a message: the watchdog asks at its deadline only

    def __init__(self, port: KmdPortability, info: KmdDeviceInfo, *, rpc_timeout_ms: int = 2000) -> None:
        self.port = port
        self.config = info
        self.regs = mcu_registers(info)  # GLB mcu_*, or an NVDLA device's nvdla_mcu window
        self.depth = engine_depth(info)
        self.rpc_timeout_ms = rpc_timeout_ms
        self.listening = False
        self.cu_events: collections.deque[tuple[str, int]] = collections.deque(maxlen=256)
        self.on_device_reset: Callable[[str], None] | None = None
        self.firmware_version: ContractVersion | None = None
        self.stats = {"bad_messages": 0, "refusals": 0, "firmware_resets": 0}
        self._lock = threading.RLock()
        self._irq_lock = threading.Lock()
        self.events_arrived = threading.Condition(self._irq_lock)
        self._irqs = 0
        self._waiters = 0  # threads awaiting a response (_call): the ISR notifies only when there are
        self._ringing = 0  # the thread in dla_execute_task's doorbell write, while it is there
        self._inflight: list[HeadedRun] = []
        self._by_id: dict[int, HeadedRun] = {}
        self._submits: dict[int, HeadedRun] = {}  # tag -> run whose submit is not answered yet
        self._awaited: set[int] = set()
        self._responses: dict[int, Any] = {}
        self._events: collections.deque[Message | tuple[int, ...]] = collections.deque()
        self._ended: collections.deque[HeadedRun] = collections.deque()
        self._tag = 0
        slots = self.depth + 2
        self.layout = Layout.default(slots * SLOT_BYTES)
        self._free_slots = list(range(slots))
        self._slot_lists: list[object] = [None] * slots  # the address list each slot holds (identity)
        self._mbox: tuple[int, Any, int, np.ndarray[Any, np.dtype[np.uint8]]] | None = None
        self._cmd: Ring | None = None
        self._rsp: Ring | None = None
        self._evt: Ring | None = None
        self._initialised = False
        self._broken: DlaError | None = None
        self._last_list: object = None
        self._last_entries = np.zeros(0, dtype=np.uint8)

    # -- the EngineApi ------------------------------------------------------------------------------

    @property
    def inflight(self) -> Sequence[RunState]:
        return self._inflight

    @property
    def current(self) -> RunState | None:
        return self._inflight[0] if self._inflight else None

    def dla_engine_init(self, priv_data: object = None) -> int:
        with self._lock:
            if self._initialised:
                return 0
            self.port.connect_interrupt(self.dla_isr_handler)
            try:
                self._attach()
            except BaseException:
                self.port.disconnect_interrupt(self.dla_isr_handler)
                self.close()
                raise
            self._initialised = True
            return 0

    def dla_execute_task(self, task: TaskDesc, graph: TaskGraph | None = None,
                         on_finish: Callable[[RunState], None] | None = None) -> RunState:
        if graph is None:
            graph = load_task(self.port, task, self.config)
        nvdla = nvdla_fields(task.nvdla_interface)
        if nvdla[0]:
            check_nvdla_firmware(self.firmware_version, task.task_id)
        with self._lock:
            if self._broken is not None:
                raise self._broken
            if not self._initialised:
                raise DlaError(NvError.NotInitialized, "dla_engine_init was not called")
            if len(self._inflight) >= self.depth or not self._free_slots:
                raise DlaError(NvError.Busy, f"{self.depth} tasks (the engine's pipeline depth) are in "
                                             "flight on this device")
            assert self._mbox is not None
            _, _, iova, mem = self._mbox
            slot = self._free_slots.pop()
            at = self.layout.lists.offset + slot * SLOT_BYTES
            n = len(task.addresses)
            if self._slot_lists[slot] is not task.addresses:  # (a prepared job's list: often there already)
                if task.addresses is not self._last_list:
                    entries = np.array([(e.iova + e.offset, e.size) for e in task.addresses], dtype="<u8")
                    self._last_list, self._last_entries = task.addresses, entries.view(np.uint8).reshape(-1)
                mem[at:at + n * ENTRY_SIZE] = self._last_entries
                self._slot_lists[slot] = task.addresses
            run = HeadedRun(task, graph, on_finish, slot)
            self._tag += 1
            tag = self._tag
            self._submits[tag] = run
            self._by_id[task.task_id] = run
            self._inflight.append(run)
            self.cu_events.append(("START", task.task_id))
            values = (*_SUBMIT_HEAD, tag, iova + at, task.task_id, 0, n, task.ctx, 0, 0, *nvdla)
            assert self._cmd is not None
            if self._cmd.write_packed(_SUBMIT, *values):
                self._ringing = threading.get_ident()  # (see dla_isr_handler)
                try:
                    self.port.dla_reg_write(self.regs.doorbell, 1)
                finally:
                    self._ringing = 0
                return run
            # The ring is full: wait for the firmware to take commands (or reset it: the run then
            # failed with the firmware's reset).
            with contextlib.suppress(FirmwareHung):
                self._send(api.task_submit_list_cmd.from_buffer_copy(_SUBMIT.pack(*values)),
                           f"the submit of task {task.task_id}")
            return run

    def barriers_fired(self) -> None:
        """Barriers the firmware's held DLA operations wait on fired (the host takes the SHAVE
        interrupt): the doorbell runs the firmware's event pass, which looks at them again."""
        with self._lock:
            if self._initialised and self._broken is None:
                self.port.dla_reg_write(R.GLB_MCU_DOORBELL, 1)

    def dla_isr_handler(self) -> int:
        """GLB intr_status bit 28: the firmware posted responses or events. Only recorded here (this
        runs on the thread that raised the interrupt, maybe the firmware's own), and RPC waiters
        woken; the driver's bottom half takes the events, as headless.

        Except when the firmware ran in this very thread, inside :meth:`dla_execute_task`'s doorbell
        write (an idle firmware runs in the ringing thread; this thread holds the engine's lock): what
        it posted is read now. The submit's response then needs no one else, and :meth:`wake` skips
        waking the driver's service thread for it, a thread handoff per task saved."""
        regs = self.regs
        if not self.port.dla_reg_read(regs.intr_status) & regs.mailbox_bit:
            return 0
        self.port.dla_reg_write(regs.intr_status, regs.mailbox_bit)
        if self._ringing == threading.get_ident():
            self._drain()
            return 0
        with self._irq_lock:
            self._irqs += 1
            if self._waiters:
                self.events_arrived.notify_all()
        return 0

    def dla_process_events(self) -> int:
        """Read what the firmware posted; end the runs it reports ended. Returns how many events."""
        if not self.pending_events():
            return 0  # (the driver asks before and after each start: most often nothing came)
        with self._lock:
            with self._irq_lock:
                self._irqs = 0
            self._drain()
            count = 0
            while self._ended or self._events:
                count += 1
                if self._ended:
                    run = self._ended.popleft()
                    self._end(run, run.error)
                    continue
                self._event(self._events.popleft())
            return count

    def pending_events(self) -> int:
        pending = self._irqs + len(self._ended) + len(self._events)
        rsp, evt = self._rsp, self._evt
        if not pending and rsp is not None and evt is not None:
            pending = (rsp.words[rsp.head_word] != rsp.count) + (evt.words[evt.head_word] != evt.count)
        return pending

    def wait_for_events(self, timeout: float) -> None:
        with self.events_arrived:
            if not self._irqs:
                self.events_arrived.wait(timeout)  # (not counted in _waiters: the ISR wakes no one)

    def _wait(self, timeout: float) -> None:
        """Under events_arrived: wait for a response (the ISR, or a wake) at most ``timeout`` s."""
        self._waiters += 1
        try:
            self.events_arrived.wait(timeout)
        finally:
            self._waiters -= 1

    def wake(self) -> None:
        if self._ringing == threading.get_ident() and not self._ended and not self._events:
            return  # this thread's doorbell interrupt, taken whole by dla_isr_handler: nothing to do
        with self.events_arrived:
            self.events_arrived.notify_all()

    def abort(self, run: RunState, error: DlaError) -> None:
        """Abort ``run`` on the firmware (which resets its blocks) and end it with ``error``."""
        assert isinstance(run, HeadedRun)
        with self._lock:
            if run.finished:
                return
            run.error = error  # what it ends with, also if the firmware must be reset meanwhile
            try:
                self._call(api.abort_cmd.new(task_id=run.task.task_id, context_id=run.task.ctx),
                           api.abort_rsp, f"the abort of task {run.task.task_id}")
            except FirmwareHung:
                return
            if not run.finished:
                self._end(run, error)

    def progress(self, run: RunState) -> int | None:
        rsp = self._status(run)
        if rsp is None:
            return None
        if int(rsp.status) != _OK:
            # Not held: it ended and its task_done_evt is on its way; counted as progress once (one
            # more window), so a task the firmware lost still runs into the ladder after it.
            return run.completed + 1
        run.completed = int(rsp.ops_completed)
        return run.completed

    def describe_stuck(self, run: RunState) -> str:
        rsp = self._status(run)
        if rsp is None:
            return "the device firmware did not answer: the microcontroller and the device were reset"
        if int(rsp.status) != _OK:
            return f"the device firmware no longer holds task {run.task.task_id}"
        ops = run.graph.operations

        def name(index: int) -> list[str]:
            return [ops[index].name] if index < len(ops) else []

        return stuck_text(len(ops), int(rsp.ops_completed), name(int(rsp.first_running)),
                          name(int(rsp.first_waiting)), int(rsp.running), int(rsp.waiting))

    def reset_blocks(self, blocks: Sequence[dla_block_e]) -> list[dla_block_e]:
        mask = 0
        for b in blocks:
            mask |= 1 << int(b)
        return self._reset(mask, api.reset_scope_e.ENGINE, "the reset of blocks "
                           + ", ".join(b.name for b in blocks))

    def reset_device(self) -> list[dla_block_e]:
        return self._reset(0, api.reset_scope_e.DEVICE, "the device reset")

    def close(self) -> None:
        """Let the firmware go of the mailbox and free it."""
        with self._lock:
            if self._mbox is None:
                return
            ctx, bo, _, _ = self._mbox
            self._mbox = None
            try:
                self.port.dla_reg_write(self.regs.mbox_size, 0)
                self.port.dla_free(bo)
                self.port.dla_destroy_context(ctx)
            except DlaError as e:
                log.warning("headed mode: releasing the mailbox: %s", e)

    # -- the mailbox ------------------------------------------------------------------------------

    def _attach(self) -> None:
        """Describe the mailbox to the microcontroller, wait until it takes it, run the handshake."""
        if self._mbox is None:
            ctx = self.port.dla_create_context()
            bo = self.port.dla_alloc(self.layout.size)
            iova = self.port.dla_map(ctx, bo)
            self._mbox = (ctx, bo, iova, bo.array)
        ctx, _, iova, mem = self._mbox
        self.layout.write_header(mem)
        self._cmd = Ring(mem, self.layout.cmd, producer=True)
        self._rsp = Ring(mem, self.layout.rsp, producer=False)
        self._evt = Ring(mem, self.layout.evt, producer=False)
        self._free_slots = list(range(self.depth + 2))  # nothing is in flight on a new attachment
        self._slot_lists = [None] * (self.depth + 2)
        regs = self.regs
        for reg, value in ((regs.mbox_base_lo, iova & 0xFFFFFFFF), (regs.mbox_base_hi, iova >> 32),
                           (regs.mbox_ctx, ctx), (regs.mbox_size, self.layout.size)):
            self.port.dla_reg_write(reg, value)
        deadline = time.monotonic() + self.rpc_timeout_ms / 1000
        while True:
            status = self.port.dla_reg_read(regs.status)
            if status & _STOPPED:
                raise DlaError(NvError.InvalidState, f"the device's microcontroller stopped (mcu_status "
                                                     f"{status:#x}); write mcu_reset to restart it")
            if status & _ATTACHED:
                break
            if time.monotonic() >= deadline:
                raise DlaError(NvError.Timeout, "the device's microcontroller did not take the mailbox "
                                                f"within {self.rpc_timeout_ms} ms (mcu_status {status:#x})")
            time.sleep(0.0005)
        rsp = self._call(api.version_query_cmd.new(), api.version_query_rsp, "the version query",
                         recover=False)
        self.firmware_version = check_firmware(rsp, status >> 16)

    def _next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def _send(self, msg: Message, what: str) -> None:
        """Put a command into the ring and ring the doorbell (a full ring: the firmware is not taking
        commands; it is given the RPC timeout, then reset)."""
        assert self._cmd is not None
        deadline = time.monotonic() + self.rpc_timeout_ms / 1000
        while not self._cmd.write(bytes(msg)):
            self.port.dla_reg_write(self.regs.doorbell, 1)
            if time.monotonic() >= deadline:
                self._firmware_hung(what)
            time.sleep(0.0005)
        self.port.dla_reg_write(self.regs.doorbell, 1)

    def _call(self, msg: Message, rsp_cls: type[Message], what: str, *, recover: bool = True) -> Any:
        """Send ``msg`` and wait for its response (of type ``rsp_cls``) within the RPC timeout."""
        with self._lock:
            tag = self._next_tag()
            msg.header.tag = tag
            self._awaited.add(tag)
            try:
                self._send(msg, what)
                deadline = time.monotonic() + self.rpc_timeout_ms / 1000
                while True:
                    self._drain()
                    rsp = self._responses.pop(tag, None)
                    if rsp is not None:
                        if not isinstance(rsp, rsp_cls):
                            raise DlaError(NvError.BadValue, f"the device firmware answered {what} with "
                                                             f"{type(rsp).__name__}, not {rsp_cls.__name__}")
                        return rsp
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if not recover:
                            raise DlaError(NvError.Timeout, f"the device firmware did not answer {what} "
                                                            f"within {self.rpc_timeout_ms} ms")
                        self._firmware_hung(what)
                    with self.events_arrived:
                        if not self._irqs:
                            self._wait(min(left, 0.002))
            finally:
                self._awaited.discard(tag)

    def _status(self, run: RunState) -> Any:
        try:
            return self._call(api.task_status_cmd.new(task_id=run.task.task_id), api.task_status_rsp,
                              f"the status query of task {run.task.task_id}")
        except FirmwareHung:
            return None

    def _reset(self, mask: int, scope: int, what: str) -> list[dla_block_e]:
        try:
            rsp = self._call(api.reset_cmd.new(engine_mask=mask, scope=int(scope)), api.reset_rsp, what)
        except FirmwareHung:
            return []  # the device was reset with the microcontroller
        busy = int(rsp.busy_mask)
        return [b for b in dla_block_e if busy >> int(b) & 1]

    def _firmware_hung(self, what: str) -> None:
        """The ladder's last rung for the firmware: reset it and the device, fail what it held, attach
        again. Raises FirmwareHung (the caller's message was lost with it)."""
        self.stats["firmware_resets"] += 1
        reason = f"the device firmware did not answer {what} within {self.rpc_timeout_ms} ms"
        log.error("headed mode: %s: resetting the microcontroller and the device", reason)
        self.port.dla_reg_write(self.regs.reset, 1)
        self.port.dla_reg_write(self.regs.device_reset, self.regs.device_reset_value)
        self._submits.clear()
        self._responses.clear()
        self._events.clear()
        self._ended.clear()
        for run in list(self._inflight):
            self._end(run, run.error or DlaError(
                NvError.Timeout, f"task {run.task.task_id} failed: {reason}; the microcontroller and the "
                                 "device were reset"))
        if self.on_device_reset is not None:
            self.on_device_reset(reason)
        try:
            self._attach()
        except DlaError as e:
            self._broken = DlaError(e.code, f"headed mode: after a firmware reset: {e.message}")
            raise self._broken from None
        raise FirmwareHung(NvError.Timeout, f"{reason}: the microcontroller and the device were reset")

