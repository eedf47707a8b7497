"""Headed mode, the host's side: the driver's engine is a proxy that talks device-API messages.

On a headed device (GLB mcu_status RUNNING: a microcontroller runs the engine scheduler, see
:mod:`pydla.hw.mcu`) the KMD keeps what it always keeps (contexts, buffers, the job queue, fences,
the watchdog and the recovery ladder: :mod:`pydla.kmd.driver`) and hands tasks to
:class:`HeadedEngine` instead of :class:`~pydla.kmd.engine.Engine`. It answers the same calls
(:class:`~pydla.kmd.engine_api.EngineApi`) through the mailbox (:mod:`pydla.kmd.headed_ring`):

- ``dla_engine_init``: allocate the mailbox in a context of the KMD's own, describe it in GLB
  mcu_mbox_*, wait for ATTACHED, and run the version handshake (version_query): a firmware whose
  device API is incompatible fails the open with NvError VersionMismatch naming both versions and
  the side to upgrade;
- ``dla_execute_task``: write the task's address list into a slot of the lists area and send
  ``task_submit_list_cmd`` (not waiting: its response comes with the events);
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
from pydla.deviceapi.runtime import Message, MessageType, decode
from pydla.deviceapi.version import ContractVersion
from pydla.errors import DlaError, NvError
from pydla.kmd.context import MAX_ADDRESSES
from pydla.kmd.engine import DEVICE_RESET_BIT, Engine, engine_depth
from pydla.kmd.engine_api import EngineApi, RunState, stuck_text
from pydla.kmd.graph import TaskGraph, load_task
from pydla.kmd.headed_handshake import check_firmware, nv_error, status_name
from pydla.kmd.headed_ring import ENTRY_SIZE, Layout, Ring, RingError
from pydla.kmd.port import KmdDeviceInfo, KmdPortability, TaskDesc

log = logging.getLogger("pydla.kmd")

MAILBOX_BIT = 1 << 28
NO_OP = 0xFFFF
SLOT_BYTES = MAX_ADDRESSES * ENTRY_SIZE
_ATTACHED = int(R.mcu_status_e.ATTACHED)
_STOPPED = int(R.mcu_status_e.STOPPED)
_OK = int(api.dla_status_e.OK)


def make_engine(port: KmdPortability, info: KmdDeviceInfo, *, rpc_timeout_ms: int = 2000) -> EngineApi:
    """The driver's engine: the proxy to the firmware on a headed device, else the engine itself."""
    if info.headed:
        return HeadedEngine(port, info, rpc_timeout_ms=rpc_timeout_ms)
    return Engine(port, info)


class HeadedRun(RunState):
    """A task the firmware runs, as the host tracks it."""

    __slots__ = ("slot",)

    def __init__(self, task: TaskDesc, graph: TaskGraph, on_finish: Callable[[RunState], None] | None,
                 slot: int) -> None:
        super().__init__(task, graph, on_finish)
        self.slot = slot


class FirmwareHung(DlaError):
    """The firmware did not answer in time; it was reset (see :meth:`HeadedEngine._firmware_hung`)."""


class HeadedEngine:
    """The engine of a headed device, reached through the mailbox. See the module docstring."""

    # The interrupting thread may run the driver's bottom half: the firmware raises the mailbox
    # interrupt only once it let go of its own lock (pydla.hw.mcu.controller), so a message the
    # bottom half sends (an abort) is served, not deadlocked.
    bottom_half_on_irq = True
    live_progress = False  # progress costs a message: the watchdog asks at its deadline only

    def __init__(self, port: KmdPortability, info: KmdDeviceInfo, *, rpc_timeout_ms: int = 2000) -> None:
        self.port = port
        self.config = info
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
        self._inflight: list[HeadedRun] = []
        self._by_id: dict[int, HeadedRun] = {}
        self._submits: dict[int, HeadedRun] = {}  # tag -> run whose submit is not answered yet
        self._awaited: set[int] = set()
        self._responses: dict[int, Message] = {}
        self._events: collections.deque[Message] = collections.deque()
        self._ended: collections.deque[HeadedRun] = collections.deque()
        self._tag = 0
        slots = self.depth + 2
        self.layout = Layout.default(slots * SLOT_BYTES)
        self._free_slots = list(range(slots))
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
            if task.addresses is not self._last_list:  # a prepared job submits the same list again
                entries = np.array([(e.iova + e.offset, e.size) for e in task.addresses], dtype="<u8")
                self._last_list, self._last_entries = task.addresses, entries.view(np.uint8).reshape(-1)
            mem[at:at + n * ENTRY_SIZE] = self._last_entries
            run = HeadedRun(task, graph, on_finish, slot)
            tag = self._next_tag()
            self._submits[tag] = run
            self._by_id[task.task_id] = run
            self._inflight.append(run)
            self.cu_events.append(("START", task.task_id))
            msg = api.task_submit_list_cmd.new(tag=tag, address_list=iova + at, task_id=task.task_id,
                                               num_addresses=n, context_id=task.ctx)
            with contextlib.suppress(FirmwareHung):  # the run then failed with the firmware's reset
                self._send(msg, f"the submit of task {task.task_id}")
            return run

    def dla_isr_handler(self) -> int:
        """GLB intr_status bit 28: the firmware posted responses or events. Only recorded here (this
        runs on the thread that raised the interrupt, maybe the firmware's own)."""
        if not self.port.dla_reg_read(R.GLB_INTR_STATUS) & MAILBOX_BIT:
            return 0
        self.port.dla_reg_write(R.GLB_INTR_STATUS, MAILBOX_BIT)
        with self.events_arrived:
            self._irqs += 1
            self.events_arrived.notify_all()
        return 0

    def dla_process_events(self) -> int:
        """Read what the firmware posted; end the runs it reports ended. Returns how many events."""
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
        if not pending and self._rsp is not None and self._evt is not None:
            pending = int(self._rsp.unread() != 0) + int(self._evt.unread() != 0)
        return pending

    def wait_for_events(self, timeout: float) -> None:
        with self.events_arrived:
            if not self._irqs:
                self.events_arrived.wait(timeout)

    def wake(self) -> None:
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
                self.port.dla_reg_write(R.GLB_MCU_MBOX_SIZE, 0)
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
        for reg, value in ((R.GLB_MCU_MBOX_BASE_LO, iova & 0xFFFFFFFF), (R.GLB_MCU_MBOX_BASE_HI, iova >> 32),
                           (R.GLB_MCU_MBOX_CTX, ctx), (R.GLB_MCU_MBOX_SIZE, self.layout.size)):
            self.port.dla_reg_write(reg, value)
        deadline = time.monotonic() + self.rpc_timeout_ms / 1000
        while True:
            status = self.port.dla_reg_read(R.GLB_MCU_STATUS)
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
            self.port.dla_reg_write(R.GLB_MCU_DOORBELL, 1)
            if time.monotonic() >= deadline:
                self._firmware_hung(what)
            time.sleep(0.0005)
        self.port.dla_reg_write(R.GLB_MCU_DOORBELL, 1)

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
                            self.events_arrived.wait(min(left, 0.002))
            finally:
                self._awaited.discard(tag)

    def _drain(self) -> None:
        """Take every response and event the firmware posted (each checked; a bad one is skipped)."""
        for ring, kind in ((self._rsp, MessageType.RESPONSE), (self._evt, MessageType.EVENT)):
            while ring is not None:
                try:
                    data = ring.read()
                    if data is None:
                        break
                    msg = decode(api.API, data, allow_longer=True)
                    if msg.MSG_TYPE != kind:
                        raise DlaError(NvError.BadValue, f"a {msg.MSG_TYPE.name} ({type(msg).__name__}) in "
                                                         f"the {kind.name.lower()} ring")
                except RingError as e:  # the ring was skipped to its head (or a bad head is ignored)
                    self.stats["bad_messages"] += 1
                    log.warning("headed mode: the device firmware's ring is corrupt: %s", e)
                    break
                except DlaError as e:
                    self.stats["bad_messages"] += 1
                    log.warning("headed mode: the device firmware posted a bad message: %s", e)
                    continue
                if kind == MessageType.EVENT:
                    self._events.append(msg)
                    continue
                tag = int(msg.header.command.tag)
                run = self._submits.pop(tag, None)
                if run is not None:
                    self._submitted(run, msg)
                elif tag in self._awaited:
                    self._responses[tag] = msg
                else:
                    self.stats["bad_messages"] += 1
                    log.warning("headed mode: a response to no command (tag %d): %r", tag, msg)

    def _submitted(self, run: HeadedRun, rsp: Any) -> None:
        self._free_slots.append(run.slot)
        if not isinstance(rsp, api.task_submit_list_rsp):
            rsp_status, code, op = int(api.dla_status_e.BAD_MESSAGE), int(NvError.BadValue), NO_OP
        else:
            rsp_status, code, op = int(rsp.status), int(rsp.nv_error), int(rsp.op_index)
        if rsp_status == _OK or run.finished:
            return
        self.stats["refusals"] += 1
        where = f" at {run.graph.operations[op].name}" if op < len(run.graph.operations) else ""
        run.error = DlaError(nv_error(code), f"task {run.task.task_id}: the device firmware refused it: "
                                        f"{status_name(rsp_status)} ({nv_error(code).name}){where}")
        self._ended.append(run)

    def _event(self, evt: Any) -> None:
        if isinstance(evt, api.task_failed_evt):
            run = self._by_id.get(int(evt.task_id))
            if run is not None and not run.finished and run.error is None:
                run.error = self._failure(run, evt)
        elif isinstance(evt, api.task_done_evt):
            run = self._by_id.get(int(evt.task_id))
            if run is None or run.finished:
                return  # aborted by the host already, or not one of ours
            run.completed = int(evt.ops_completed)
            if int(evt.status) != _OK and run.error is None:
                run.error = DlaError(NvError.ResourceError, f"task {run.task.task_id}: the device firmware "
                                                            f"ended it with {status_name(int(evt.status))}")
            self._end(run, run.error)
        elif isinstance(evt, api.error_evt) and int(evt.context_id) == 0xFFFF:
            self.stats["refusals"] += 1
            log.warning("headed mode: the device firmware refused message id %d (tag %d): %s",
                        int(evt.op_index), int(evt.task_id), status_name(int(evt.status)))

    def _failure(self, run: HeadedRun, evt: Any) -> DlaError:
        """The error of a failed run, worded as the headless engine words it."""
        ops, op, hw = run.graph.operations, int(evt.op_index), int(evt.hw_error)
        code = nv_error(int(evt.nv_error))
        if op < len(ops) and hw:
            known = R.dla_hw_error_e._value2member_map_.get(hw)
            name = known.name if known is not None else str(hw)
            message = f"task {run.task.task_id}: {ops[op].name} failed on the device: {name}"
            if hw == R.dla_hw_error_e.MMU_FAULT:
                message += (f" (access to {int(evt.fault_address):#x} outside the mappings of context "
                            f"{run.task.ctx})")
            return DlaError(code, message)
        where = f" at {ops[op].name}" if op < len(ops) else ""
        return DlaError(code, f"task {run.task.task_id}: the device firmware failed it{where}: "
                              f"{status_name(int(evt.status))} ({code.name})")

    def _end(self, run: HeadedRun, error: DlaError | None) -> None:
        if run.finished:
            return
        run.error = error
        run.finished = True
        if run in self._inflight:
            self._inflight.remove(run)
        self._by_id.pop(run.task.task_id, None)
        self.cu_events.append(("DONE", run.task.task_id))
        if run.on_finish is not None:
            run.on_finish(run)

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
        self.port.dla_reg_write(R.GLB_MCU_RESET, 1)
        self.port.dla_reg_write(R.GLB_RESET, 1 << DEVICE_RESET_BIT)
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

