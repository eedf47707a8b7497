"""The headed mailbox's per-task messages as precompiled structs, for both sides of the mailbox.

Every task costs three messages: ``task_submit_list_cmd`` (host to firmware), its
``task_submit_list_rsp`` and a ``task_done_evt`` (firmware to host). Built and read as generated
ctypes records they cost a Python call per field; packed and unpacked with one ``struct`` each
(derived from the generated layout: :func:`pydla.deviceapi.packing.record_struct`) straight in the
ring's memory (:meth:`pydla.firmware.headed_ring.Ring.write_packed`,
:meth:`~pydla.firmware.headed_ring.Ring.peek`) they cost one. Every other message, and these when
a side was built from a device API whose layout of them differs (a firmware of another version),
takes the generic path (``decode``, ``Message.new``).

The value order is the layout's; :func:`wire` checks it against the order the code below assumes
and gives None when they differ, so a spec change can only turn the shortcut off, never misread.

Usage::

    w = wire(device_api)
    nvdla = nvdla_fields((0, 12, 0))   # an NVDLA task of interface 0.12.0; None: pydla's own
    ring.write_packed(w.submit, *w.submit_head, tag, address_list, task_id, 0, n, ctx, 0, 0, *nvdla)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import ModuleType

from pydla.deviceapi.packing import record_struct
from pydla.errors import DlaError, NvError

_COMMON = ("header.common.size", "header.common.id", "header.common.type", "header.common.flags")
SUBMIT_FIELDS = (*_COMMON, "header.tag", "address_list", "task_id", "timeout_us", "num_addresses",
                 "context_id", "priority", "flags", "nvdla_task", "nvdla_major", "nvdla_minor",
                 "nvdla_sub_minor")
SUBMIT_RSP_FIELDS = (*_COMMON, "header.command.common.size", "header.command.common.id",
                     "header.command.common.type", "header.command.common.flags", "header.command.tag",
                     "task_id", "status", "nv_error", "op_index", "reserved")
DONE_FIELDS = (*_COMMON, "header.timestamp_ns", "task_id", "duration_ns", "status", "ops_completed",
               "context_id")


def nvdla_fields(version: tuple[int, int, int] | None) -> tuple[int, int, int, int]:
    """A task submit's ``nvdla_task, nvdla_major, nvdla_minor, nvdla_sub_minor`` for an NVDLA task of
    firmware interface ``version`` (None: one of pydla's own tasks, all 0). DlaError when a part does
    not fit its byte."""
    if version is None:
        return 0, 0, 0, 0
    if len(version) != 3 or not all(isinstance(v, int) and 0 <= v <= 0xFF for v in version):
        raise DlaError(NvError.BadParameter, f"nvdla_interface {version!r}: must be three integers 0..255 "
                                             "(major, minor, sub_minor)")
    return 1, version[0], version[1], version[2]


def nvdla_version(task: int, major: int, minor: int, sub_minor: int) -> tuple[int, int, int] | None:
    """The firmware interface version a task submit carries (None: one of pydla's own tasks)."""
    return (major, minor, sub_minor) if task else None


@dataclass(frozen=True)
class Wire:
    """The three structs, each message's id and size, and the header values each starts with."""

    submit: struct.Struct
    submit_id: int
    submit_head: tuple[int, int, int, int]
    submit_rsp: struct.Struct
    submit_rsp_id: int
    submit_rsp_head: tuple[int, int, int, int]
    done: struct.Struct
    done_id: int
    done_head: tuple[int, int, int, int]


def wire(api: ModuleType) -> Wire | None:
    """The structs of device-API module ``api`` (a generated ``device_api``), or None when it lacks
    one of the messages or lays one out otherwise than the order above."""
    structs, ids, heads = [], [], []
    for name, fields in (("task_submit_list_cmd", SUBMIT_FIELDS), ("task_submit_list_rsp", SUBMIT_RSP_FIELDS),
                         ("task_done_evt", DONE_FIELDS)):
        cls = getattr(api, name, None)
        if cls is None:
            return None
        try:
            st, names = record_struct(cls)
        except ValueError:
            return None
        if names != fields:
            return None
        structs.append(st)
        ids.append(int(cls.MSG_ID))
        heads.append((st.size, int(cls.MSG_ID), int(cls.MSG_TYPE), 0))
    return Wire(structs[0], ids[0], heads[0], structs[1], ids[1], heads[1], structs[2], ids[2], heads[2])
