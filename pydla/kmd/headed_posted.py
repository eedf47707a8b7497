"""Headed mode, the host's side: what the firmware posted, read and acted on.

:class:`PostedMessages` is the part of :class:`pydla.kmd.headed.HeadedEngine` that drains the
response and event rings (each message checked: a bad one is counted and skipped), matches
responses to their commands, and ends the runs the firmware reports ended, with the error worded as
the headless engine words it. A task's submit response and its ``task_done_evt`` are read with one
struct each (:mod:`pydla.firmware.headed_codec`); everything else is decoded as generated records.
"""

from __future__ import annotations

import collections
import logging
import struct
from collections.abc import Callable
from typing import Any

from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.runtime import Message, MessageType, decode
from pydla.errors import DlaError, NvError
from pydla.firmware.engine_api import RunState
from pydla.firmware.graph import TaskGraph
from pydla.firmware.headed_codec import wire
from pydla.firmware.headed_ring import Ring, RingError
from pydla.firmware.interface import TaskDesc
from pydla.kmd.headed_handshake import nv_error, status_name

log = logging.getLogger("pydla.kmd")

NO_OP = 0xFFFF
_OK = int(api.dla_status_e.OK)
_WIRE = wire(api)  # the host's own device API: the task messages' structs (headed_codec)
assert _WIRE is not None, "device_api's task messages are not laid out as pydla.firmware.headed_codec expects"
_SUBMIT_RSP, _SUBMIT_RSP_ID = _WIRE.submit_rsp, _WIRE.submit_rsp_id
_DONE, _DONE_ID = _WIRE.done, _WIRE.done_id
_RESPONSE, _EVENT = int(MessageType.RESPONSE), int(MessageType.EVENT)
_HEADER = struct.Struct("<IHB")  # a message's size, id and type


class HeadedRun(RunState):
    """A task the firmware runs, as the host tracks it."""

    __slots__ = ("slot",)

    def __init__(self, task: TaskDesc, graph: TaskGraph, on_finish: Callable[[RunState], None] | None,
                 slot: int) -> None:
        super().__init__(task, graph, on_finish)
        self.slot = slot


class PostedMessages:
    """See the module docstring; the state it works on is the engine's."""

    stats: dict[str, int]
    cu_events: collections.deque[tuple[str, int]]
    _rsp: Ring | None
    _evt: Ring | None
    _events: collections.deque[Message | tuple[int, ...]]
    _ended: collections.deque[HeadedRun]
    _submits: dict[int, HeadedRun]
    _awaited: set[int]
    _responses: dict[int, Any]
    _free_slots: list[int]
    _by_id: dict[int, HeadedRun]
    _inflight: list[HeadedRun]

    def _drain(self) -> None:
        """Take every response and event the firmware posted (each checked; a bad one is skipped)."""
        for ring, kind in ((self._rsp, MessageType.RESPONSE), (self._evt, MessageType.EVENT)):
            # (the head against this side's count first: most passes find a ring empty)
            while ring is not None and ring.words[ring.head_word] != ring.count:
                try:
                    found = ring.peek()
                    if found is None:
                        break
                    buf, at, size = found
                    if self._fast(kind, buf, at, size):
                        ring.consume()
                        continue
                    data = bytes(buf[at:at + size])
                    ring.consume()
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
                self._response(int(msg.header.command.tag), msg)

    def _fast(self, kind: MessageType, buf: Any, at: int, size: int) -> bool:
        """A task's submit response or task_done event of exactly its size, taken with one struct (its
        fields as the generic path reads them); False for anything else (the generic path's)."""
        size_field, msg_id, msg_type = _HEADER.unpack_from(buf, at)
        if kind == MessageType.RESPONSE:
            if msg_id != _SUBMIT_RSP_ID or size != size_field or size != _SUBMIT_RSP.size \
                    or msg_type != _RESPONSE:
                return False
            v = _SUBMIT_RSP.unpack_from(buf, at)
            self._response(v[8], v)
            return True
        if msg_id != _DONE_ID or size != size_field or size != _DONE.size or msg_type != _EVENT:
            return False
        self._events.append(_DONE.unpack_from(buf, at))
        return True

    def _response(self, tag: int, rsp: Any) -> None:
        run = self._submits.pop(tag, None)
        if run is not None:
            self._submitted(run, rsp)
        elif tag in self._awaited:
            self._responses[tag] = rsp
        else:
            self.stats["bad_messages"] += 1
            log.warning("headed mode: a response to no command (tag %d): %r", tag, rsp)

    def _submitted(self, run: HeadedRun, rsp: Any) -> None:
        """``rsp``: the response to the submit of ``run``, decoded, or its values (a tuple: the fast path)."""
        self._free_slots.append(run.slot)
        if type(rsp) is tuple:
            rsp_status, code, op = rsp[10], rsp[11], rsp[12]
        elif not isinstance(rsp, api.task_submit_list_rsp):
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
        if type(evt) is tuple:  # a task_done_evt's values (the fast path)
            self._done(evt[5], evt[7], evt[8])
        elif isinstance(evt, api.task_failed_evt):
            run = self._by_id.get(int(evt.task_id))
            if run is not None and not run.finished and run.error is None:
                run.error = self._failure(run, evt)
        elif isinstance(evt, api.task_done_evt):
            self._done(int(evt.task_id), int(evt.status), int(evt.ops_completed))
        elif isinstance(evt, api.error_evt) and int(evt.context_id) == 0xFFFF:
            self.stats["refusals"] += 1
            log.warning("headed mode: the device firmware refused message id %d (tag %d): %s",
                        int(evt.op_index), int(evt.task_id), status_name(int(evt.status)))

    def _done(self, task_id: int, status: int, ops_completed: int) -> None:
        run = self._by_id.get(task_id)
        if run is None or run.finished:
            return  # aborted by the host already, or not one of ours
        run.completed = ops_completed
        if status != _OK and run.error is None:
            run.error = DlaError(NvError.ResourceError, f"task {run.task.task_id}: the device firmware "
                                                        f"ended it with {status_name(status)}")
        self._end(run, run.error)

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

