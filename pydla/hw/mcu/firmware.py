"""The microcontroller's firmware: the engine scheduler behind the device-API mailbox.

What runs here is the engine scheduler the host KMD runs headless (:mod:`pydla.firmware`),
unchanged: :class:`pydla.firmware.engine.Engine` (dla_engine_init, dla_execute_task,
dla_isr_handler, dla_process_events) over the firmware's portability layer
(:mod:`pydla.hw.mcu.port`), and :func:`pydla.firmware.graph.load_task` validating each task from the
firmware's own copy of its descriptors, with a cache of validated tasks
(:class:`pydla.hw.mcu.prepared.PreparedTasks`: a task's resolved address list and graph are reused
only under the same mappings and while every byte they were read from is unchanged), so a repeated
task is not validated again.

Around it, the mailbox (:mod:`pydla.firmware.headed_ring`): commands are taken from the command ring
and each is answered in the response ring; task_failed_evt and task_done_evt go to the event ring. The
firmware trusts nothing it reads: every message is checked against its header and its generated
layout; every field (context, task id, address list, sizes, reset scope) against what it points
into. A message it does not know, a malformed one or one out of order is answered with an error
status (its own response when it has a status field, else an ``error_evt`` whose ``context_id`` is
0xFFFF, ``task_id`` the message's tag and ``op_index`` its id), never with an exception.

``api`` is the generated device-API module the firmware is built with: a test builds firmware from an
older or a newer spec to exercise the host's version check.

A task's own messages (its submit, the response, its task_done event) are unpacked and packed with
one struct each in the rings (:mod:`pydla.firmware.headed_codec`) when ``api`` lays them out as the
codec expects; the checks are the same either way (:meth:`Firmware._submit`).

Tracing: the engine records its tasks (task_start/task_end, through the GLB ``trace_task_*``
registers) when the device's trace mask has TASK, read from the device at each submit (the
microcontroller sits beside the mask). The firmware's log lines (what it refused, and why; a mailbox
it could not take) are kept in :attr:`Firmware.log` and written as ``log`` events of the trace ring
while the mask has LOG.
"""

from __future__ import annotations

import collections
import struct
import time
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.deviceapi.generated import device_api
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.runtime import Message, MessageType, decode
from pydla.errors import DlaError, NvError
from pydla.firmware.engine import Engine, TaskRun
from pydla.firmware.engine_api import RunState
from pydla.firmware.headed_codec import nvdla_version, wire
from pydla.firmware.headed_ring import ENTRY_SIZE, Layout, Ring, RingError, counters
from pydla.firmware.interface import MAX_ADDRESSES, TaskDesc
from pydla.hw.mcu.cmdbufs import FirmwareCommandBuffers
from pydla.hw.mcu.prepared import PreparedTasks
from pydla.hw.memory import BufferObject, MmuFault
from pydla.hw.trace_out import LOG_WARNING, TASK

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydla.hw.mcu.board import Board

NO_OP = 0xFFFF
MAX_COMMANDS_PER_STEP = 64  # a flood of commands cannot starve the engine's events
_COMMON = struct.Struct("<IHB")
_COMMAND = int(MessageType.COMMAND)
_STATUS_OF = {NvError.InvalidAddress: "MMU_FAULT", NvError.Timeout: "TIMEOUT"}
# Commands that gained fields in a minor version: the first field appended since device_api 1.1, which a
# host of that version sends the command without (Firmware._older_host).
APPENDED = {"task_submit_list_cmd": "nvdla_task"}


@dataclass
class _Mailbox:
    mem: np.ndarray[Any, np.dtype[np.uint8]]
    ctx: int
    base: int
    layout: Layout
    cmd: Ring
    rsp: Ring
    evt: Ring


class Firmware:
    """One boot of the firmware (a reset of the microcontroller makes a new one)."""

    def __init__(self, board: Board, write: Callable[[int, int], None],
                 api: ModuleType = device_api) -> None:
        self.board = board
        self.iommu = board.iommu
        self.api = api
        self.isr: Callable[[], object] | None = None
        self.port = board.port(write, self._connect)
        self.info = board.info()  # what the firmware knows of the device it runs on
        self.engine = Engine(self.port, self.info)
        self.engine.dla_engine_init()
        self.cache = PreparedTasks(board.iommu, self.info)
        # The tasks' command buffers, when the device has a command processor (pydla.hw.mcu.cmdbufs)
        self.cmdbufs = FirmwareCommandBuffers(board.memory if self.engine.cp else None, board.iommu,
                                              {int(b) for b in self.info.blocks})
        self.wire = wire(api)  # None: this API's task messages take the generic path
        self.mailbox: _Mailbox | None = None
        self.handshaken = False
        self.runs: dict[int, tuple[TaskRun, int]] = {}  # task id -> (run, start time)
        self.irqs = self.irqs_seen = 0  # block interrupts taken (the microcontroller counts them)
        self.aborted: set[int] = set()
        # Where an address list is in the mailbox's context, kept under the same mappings:
        # (address, entries) -> (generation, buffer, offset).
        self._lists: dict[tuple[int, int], tuple[int | None, BufferObject, int]] = {}
        self._ended: list[TaskRun] = []
        self.refused = 0  # messages answered with an error status
        self.log: collections.deque[str] = collections.deque(maxlen=64)  # its last log lines
        status_e = getattr(api, "dla_status_e", device_api.dla_status_e)
        self.status = status_e
        self._responses: dict[int, type[Message]] = {
            cls.COMMAND.MSG_ID: cls for cls in api.API.messages.values()
            if cls.MSG_TYPE == MessageType.RESPONSE and cls.COMMAND is not None}
        handlers: dict[str, Callable[[Any], Message | None]] = {
            "version_query_cmd": self._version_query, "task_submit_cmd": self._task_submit_v1,
            "task_submit_list_cmd": self._task_submit, "abort_cmd": self._abort, "reset_cmd": self._reset,
            "task_status_cmd": self._task_status}
        self._handlers = {getattr(api, name).MSG_ID: h for name, h in handlers.items() if hasattr(api, name)}

    def _connect(self, handler: Callable[[], object] | None) -> None:
        self.isr = handler

    def log_line(self, text: str, level: int = LOG_WARNING) -> None:
        """A line of the firmware's log: kept, and a ``log`` event of the trace ring while LOG is on."""
        self.log.append(text)
        self.board.trace_log(level, f"mcu: {text}")

    def _names(self, status: int, code: int) -> str:
        known = self.status._value2member_map_.get(int(status))
        status_name = known.name if known is not None else str(int(status))
        return f"{status_name} ({NvError(code).name if code in NvError._value2member_map_ else code})"

    # -- the mailbox --------------------------------------------------------------------------------

    def attach(self, base: int, ctx: int, size: int) -> str | None:
        """Take the mailbox the host described in GLB mcu_mbox_*; the reason when it is refused."""
        self.mailbox = None
        self.handshaken = False
        if not 0 < size <= 1 << 26:
            return f"mcu_mbox_size {size} must be 1..{1 << 26}"
        try:
            bo, offset = self.iommu.translate(ctx, base, size)
            mem = bo.array[offset:offset + size]
            layout = Layout.read(mem)
        except MmuFault as e:
            self.log_line(f"mailbox at {base:#x} refused: {e}")
            return f"mailbox at {base:#x} in context {ctx}: {e}"
        except DlaError as e:
            self.log_line(f"mailbox at {base:#x} refused: {e.message}")
            return e.message
        self.mailbox = _Mailbox(mem, ctx, base, layout, Ring(mem, layout.cmd, producer=False),
                                Ring(mem, layout.rsp, producer=True), Ring(mem, layout.evt, producer=True))
        return None

    def step(self) -> bool:
        """Take the waiting commands, act on the engine's events, post what ended. True when
        something was posted (the microcontroller then raises the host's mailbox interrupt)."""
        box = self.mailbox
        if box is None:
            self.engine.dla_process_events()  # runs of a detached mailbox still end
            self._ended.clear()
            return False
        posted = False
        cmd = box.cmd
        for _ in range(MAX_COMMANDS_PER_STEP):
            if cmd.words[cmd.head_word] == cmd.count:
                break  # (nothing written since: the usual end, without a call)
            try:
                data = cmd.read()
            except RingError as e:  # the ring was skipped to the host's head: nothing more to take
                posted |= self._error_evt(0, NO_OP, self.status.BAD_MESSAGE, e.code)
                break
            if data is None:
                break
            posted |= self._command(box, data)
            posted |= self._post_ended()
        self.irqs_seen = self.irqs  # the interrupts taken so far: the pass below sees what they said
        self.engine.dla_process_events()
        return self._post_ended() or posted

    def settled(self) -> bool:
        """Whether another step now would find nothing to do: no command waits, and every interrupt
        the microcontroller took came before the last step's pass over the engine's events."""
        if self.irqs_seen != self.irqs:
            return False
        cmd = self.mailbox.cmd if self.mailbox is not None else None
        return cmd is None or cmd.words[cmd.head_word] == cmd.count

    def _post(self, ring: Ring, msg: Message) -> bool:
        if ring.write(bytes(msg)):
            return True
        if ring is not None and self.mailbox is not None and ring is self.mailbox.evt:
            self._dropped_event()
        return False

    def _dropped_event(self) -> None:
        if self.mailbox is not None:
            words = counters(self.mailbox.mem)
            words[7] = int(words[7]) + 1  # evt_dropped: the host learns what it missed

    def _command(self, box: _Mailbox, data: bytes) -> bool:
        size, msg_id, msg_type = _COMMON.unpack_from(data)
        w = self.wire
        if w is not None and msg_id == w.submit_id and size == w.submit.size == len(data) \
                and msg_type == _COMMAND and self.handshaken:
            # A task's submit, laid out as the codec expects: the generic path's checks, one struct.
            v = w.submit.unpack(data)
            task_id = v[6]
            status, code, op = self._submit(task_id, v[9], v[8], v[5], nvdla_version(*v[12:16]))
            return box.rsp.write_packed(w.submit_rsp, *w.submit_rsp_head, *v[:5], task_id, status, code, op,
                                        0)
        tag = int.from_bytes(data[8:16], "little")
        api = self.api.API
        cls = api.messages.get(msg_id)
        if cls is None or cls.MSG_TYPE != MessageType.COMMAND or msg_type != int(MessageType.COMMAND):
            status = self.status.NOT_SUPPORTED if cls is None else self.status.BAD_MESSAGE
            return self._error_evt(tag, msg_id, status, NvError.NotSupported)
        data = self._older_host(cls, data)
        try:
            msg = decode(api, data, allow_longer=True)  # a newer host may append fields
        except DlaError as e:
            return self._reject(box, cls, data, self.status.BAD_MESSAGE, e.code)
        if not self.handshaken and cls is not getattr(self.api, "version_query_cmd", None):
            return self._reject(box, cls, data, self.status.OUT_OF_ORDER, NvError.InvalidState)
        handler = self._handlers.get(msg_id)
        if handler is None:
            return self._reject(box, cls, data, self.status.NOT_SUPPORTED, NvError.NotSupported)
        reply = handler(msg)
        return reply is not None and self._post(box.rsp, reply)

    def _older_host(self, cls: type[Message], data: bytes) -> bytes:
        """A command as a host of an older minor version sends it, without the fields appended since
        (:data:`APPENDED`): those read 0, as that host means (an NVDLA task needs them: a host that
        cannot send them cannot submit one). Any other size is left to the decoder's check."""
        first = APPENDED.get(cls.__name__)
        field = getattr(cls, first, None) if first is not None else None
        if field is None or len(data) != field.offset or _COMMON.unpack_from(data)[0] != field.offset:
            return data
        padded = bytearray(data.ljust(cls.SIZE, b"\0"))
        struct.pack_into("<I", padded, 0, cls.SIZE)
        return bytes(padded)

    def _reject(self, box: _Mailbox, cls: type[Message], data: bytes, status: int, code: int) -> bool:
        """Answer a command with an error status: in its own response when that has a status field."""
        self.refused += 1
        rsp = self._responses.get(cls.MSG_ID)
        names = {f[0] for f in rsp._fields_} if rsp is not None else set()
        if rsp is None or "status" not in names:
            return self._error_evt(int.from_bytes(data[8:16], "little"), cls.MSG_ID, status, code)
        self.log_line(f"refused {cls.__name__}: {self._names(status, code)}")
        command = cls.from_buffer_copy(data[:cls.SIZE].ljust(cls.SIZE, b"\0"))
        fields: dict[str, int] = {"status": int(status)}
        if "nv_error" in names:
            fields["nv_error"] = int(code)
        if "op_index" in names:
            fields["op_index"] = NO_OP
        if "task_id" in names:
            fields["task_id"] = int(getattr(command, "task_id", 0))
        return self._post(box.rsp, rsp.answer(command, **fields))

    def _error_evt(self, tag: int, msg_id: int, status: int, code: int) -> bool:
        """A message the firmware refused and cannot answer in a response of its own."""
        self.refused += 1
        cls = self.api.API.messages.get(msg_id)
        self.log_line(f"refused {cls.__name__ if cls is not None else f'message {msg_id}'}: "
                      f"{self._names(status, code)}")
        if self.mailbox is None or not hasattr(self.api, "error_evt"):
            return False
        evt = self.api.error_evt.new(timestamp_ns=time.monotonic_ns(), task_id=tag, fault_address=int(code),
                                     status=int(status), op_index=msg_id & 0xFFFF, context_id=0xFFFF)
        return self._post(self.mailbox.evt, evt)

    # -- commands ----------------------------------------------------------------------------------

    def _version_query(self, cmd: Any) -> Message:
        api = self.api
        self.handshaken = True
        major, minor, patch = api.VERSION
        version = api.api_version_t(layout_hash=api.LAYOUT_HASH64, major=major, minor=minor, patch=patch)
        reply: Message = api.version_query_rsp.answer(
            cmd, api=version, hw_version=self.port.dla_reg_read(R.GLB_HW_VERSION),
            num_blocks=len(self.info.blocks), num_contexts=self.info.contexts)
        return reply

    def _task_submit_v1(self, cmd: Any) -> Message:
        # A task needs its address list (task_submit_list_cmd); one address cannot describe it.
        reply: Message = self.api.task_submit_rsp.answer(cmd, task_id=cmd.task_id,
                                                         status=int(self.status.NOT_SUPPORTED))
        self.refused += 1
        self.log_line(f"refused task_submit_cmd of task {cmd.task_id}: an address list is needed")
        return reply

    def _task_submit(self, cmd: Any) -> Message:
        task_id = int(cmd.task_id)
        fields = [int(getattr(cmd, name, 0)) for name in ("nvdla_task", "nvdla_major", "nvdla_minor",
                                                           "nvdla_sub_minor")]
        status, code, op = self._submit(task_id, int(cmd.context_id), int(cmd.num_addresses),
                                        int(cmd.address_list), nvdla_version(*fields))
        reply: Message = self.api.task_submit_list_rsp.answer(cmd, task_id=task_id, status=status,
                                                              nv_error=code, op_index=op)
        return reply

    def _submit(self, task_id: int, ctx: int, n: int, address_list: int,
                nvdla_interface: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
        """Check a task's submit and start it: (status, NVDLA error code, operation) to answer.
        ``nvdla_interface``: an NVDLA task's firmware interface version (None: pydla's own task)."""
        st = self.status
        box = self.mailbox
        assert box is not None
        iommu = self.iommu
        generation = iommu.generation(ctx)
        if task_id in self.runs or not 0 < n <= MAX_ADDRESSES or ctx == box.ctx or generation is None:
            return self._refuse(task_id, st.BAD_PARAMETER, NvError.BadParameter)
        if len(self.engine.inflight) >= self.engine.depth:
            return self._refuse(task_id, st.BUSY, NvError.Busy)
        size = n * ENTRY_SIZE
        mailbox_generation = iommu.generation(box.ctx)
        where = self._lists.get((address_list, n))
        if where is None or where[0] != mailbox_generation:
            try:
                bo, offset = iommu.translate(box.ctx, address_list, size)
            except MmuFault:
                return self._refuse(task_id, st.MMU_FAULT, NvError.InvalidAddress)  # the list itself
            if len(self._lists) >= 64:
                self._lists.clear()
            where = self._lists[(address_list, n)] = (mailbox_generation, bo, offset)
        _, bo, offset = where
        raw = bo.array[offset:offset + size].tobytes()  # the firmware's copy
        try:
            # Resolved and validated from the firmware's own reads (or kept: same mappings, every
            # byte read unchanged).
            prepared = self.cache.get(self.port, ctx, raw, task_id, generation, nvdla_interface)
            self.engine.trace_tasks = bool(self.board.trace_mask() & TASK)  # no bus access
            desc = TaskDesc(task_id, ctx, prepared.addresses, nvdla_interface=nvdla_interface)
            desc.command_buffer = self.cmdbufs.get(self.port, desc, prepared.graph, box.ctx)
            run = self.engine.dla_execute_task(desc, prepared.graph, self._on_finish)
        except DlaError as e:
            self.log_line(f"task {task_id}: {e.message}")
            return self._refuse(task_id, st.BUSY if e.code == NvError.Busy else st.BAD_PARAMETER, e.code)
        # Held until its events are posted (also when it failed while being programmed).
        self.runs[task_id] = (run, time.monotonic_ns())
        return int(st.OK), 0, NO_OP

    def _refuse(self, task_id: int, status: int, code: int) -> tuple[int, int, int]:
        self.refused += 1
        self.log_line(f"refused task {task_id}: {self._names(status, code)}")
        return int(status), int(code), NO_OP

    def _on_finish(self, run: RunState) -> None:
        assert isinstance(run, TaskRun)
        self._ended.append(run)

    def _post_ended(self) -> bool:
        """task_failed_evt (when it failed) and task_done_evt for each run that ended."""
        posted = False
        box = self.mailbox
        while self._ended:
            run = self._ended.pop(0)
            task_id = run.task.task_id
            _, started = self.runs.pop(task_id, (run, time.monotonic_ns()))
            if task_id in self.aborted:
                self.aborted.discard(task_id)
                status = int(self.status.ABORTED)
            elif run.error is None:
                status = int(self.status.OK)
            else:
                status = int(getattr(self.status, _STATUS_OF.get(run.error.code, "ERROR")))
            if box is None:
                continue
            now = time.monotonic_ns()
            failed = run.error is not None and status != self.status.ABORTED
            if failed and run.error is not None and hasattr(self.api, "task_failed_evt"):
                op, hw, fault = run.failed if run.failed is not None else (NO_OP, 0, 0)
                block = int(run.graph.operations[op].block) if op != NO_OP else 0
                posted |= self._post(box.evt, self.api.task_failed_evt.new(
                    timestamp_ns=now, task_id=task_id, fault_address=fault, status=status,
                    nv_error=int(run.error.code), hw_error=hw, op_index=op, context_id=run.task.ctx,
                    block=block))
            w = self.wire
            if w is None:
                posted |= self._post(box.evt, self.api.task_done_evt.new(
                    timestamp_ns=now, task_id=task_id, duration_ns=now - started, status=status,
                    ops_completed=run.completed, context_id=run.task.ctx))
            elif box.evt.write_packed(w.done, *w.done_head, now, task_id, now - started, status,
                                      run.completed, run.task.ctx):
                posted = True
            else:
                self._dropped_event()
        return posted

    def _abort(self, cmd: Any) -> Message:
        task_id, ctx = int(cmd.task_id), int(cmd.context_id)
        if task_id:
            held = self.runs.get(task_id)
            targets = [held[0]] if held is not None and held[0].task.ctx == ctx else []
        else:
            targets = [r for r, _ in self.runs.values() if r.task.ctx == ctx]
        for run in targets:
            self.aborted.add(run.task.task_id)
            error = DlaError(NvError.InvalidState, f"task {run.task.task_id}: aborted by the host")
            self.engine.abort(run, error)
        status = self.status.OK if targets else self.status.OUT_OF_ORDER
        reply: Message = self.api.abort_rsp.answer(cmd, aborted=len(targets), status=int(status))
        return reply

    def _reset(self, cmd: Any) -> Message:
        api, st = self.api, self.status
        scope, mask = int(cmd.scope), int(cmd.engine_mask)
        present = 0
        for b in self.info.blocks:
            present |= 1 << int(b)
        if scope == api.reset_scope_e.DEVICE:
            busy = self.engine.reset_device()
        elif scope == api.reset_scope_e.ENGINE and mask and not mask & ~present:
            busy = self.engine.reset_blocks([b for b in self.info.blocks if mask >> int(b) & 1])
        else:
            self.refused += 1
            self.log_line(f"refused reset_cmd: scope {scope}, engine mask {mask:#x}")
            refused: Message = api.reset_rsp.answer(cmd, status=int(st.BAD_PARAMETER), **self._busy_field(0))
            return refused
        busy_mask = 0
        for b in busy:
            busy_mask |= 1 << int(b)
        reply: Message = api.reset_rsp.answer(cmd, status=int(st.ERROR if busy else st.OK),
                                              **self._busy_field(busy_mask))
        return reply

    def _busy_field(self, mask: int) -> dict[str, int]:
        names = {f[0] for f in self.api.reset_rsp._fields_}
        return {"busy_mask": mask} if "busy_mask" in names else {}

    def _task_status(self, cmd: Any) -> Message:
        api, st = self.api, self.status
        held = self.runs.get(int(cmd.task_id))
        if held is None or held[0].finished:
            reply: Message = api.task_status_rsp.answer(cmd, task_id=cmd.task_id, status=int(st.OUT_OF_ORDER),
                                                        first_running=NO_OP, first_waiting=NO_OP)
            return reply
        run = held[0]
        running, waiting = self.engine.watch.stuck_operations(run)
        reply = api.task_status_rsp.answer(
            cmd, task_id=cmd.task_id, status=int(st.OK), ops_completed=run.completed,
            ops_total=len(run.graph.operations), running=len(running), waiting=len(waiting),
            first_running=running[0][0] if running else NO_OP,
            first_waiting=waiting[0][0] if waiting else NO_OP)
        return reply
