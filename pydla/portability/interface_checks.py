"""The argument checks every port of the NVDLA portability layer shares (:mod:`pydla.portability.interface`
re-exports them): what NvDlaFreeMem, NvDlaSubmit, NvDlaSubmitPrepared and NvDlaSubmitCu are given, by
type; timeouts; memory ranges; and the one wording of a memory handle a port cannot use.

Usage::

    from pydla.portability.interface import check_timeout_ms
    timeout_ms = check_timeout_ms(timeout_ms, "createRuntime: timeout_ms")
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.portability.interface_types import NvDlaCuArg, NvDlaMemHandle, NvDlaPreparedTask, NvDlaTask


def check_free_args(mem: NvDlaMemHandle, pData: Any, size: Any, what: str = "NvDlaFreeMem") -> None:  # noqa: N803
    """NvDlaFreeMem's ``pData`` and ``size`` against the allocation of ``mem``: ``pData`` must
    start where the buffer's host view starts (the view NvDlaGetMem returned, or a view of the
    same bytes), ``size`` must be the size allocated; None is not checked. Else BadParameter."""
    if size is not None and (type(size) is not int or size != mem.size):
        raise DlaError(NvError.BadParameter, f"{what}: size {size!r} is not the {mem.size} bytes allocated")
    if pData is None:
        return
    try:
        address = np.frombuffer(pData, np.uint8).__array_interface__["data"][0]
    except (TypeError, ValueError, AttributeError, BufferError):
        raise DlaError(NvError.BadParameter, f"{what}: pData {type(pData).__name__} is not the host view "
                                             "NvDlaGetMem returned (a buffer)") from None
    expected = mem.bytes_view().__array_interface__["data"][0]
    if address != expected:
        raise DlaError(NvError.BadParameter, f"{what}: pData at 0x{address:x} is not the host view "
                                             f"NvDlaGetMem returned for this memory (at 0x{expected:x})")


def check_task(task: Any, what: str) -> NvDlaTask:
    """``task`` if it is an NvDlaTask whose address list is a list or tuple and whose scalars are a
    list of ``(argidx, value)`` integer pairs (their values are the driver's to judge); else
    BadParameter."""
    if not isinstance(task, NvDlaTask) or not isinstance(task.address_list, (list, tuple)):
        raise DlaError(NvError.BadParameter, f"{what}: an NvDlaTask with an address list, not {task!r:.80}")
    scalars = task.scalars
    if not isinstance(scalars, (list, tuple)) or not all(
            isinstance(s, tuple) and len(s) == 2 and type(s[0]) is int and type(s[1]) is int
            for s in scalars):
        raise DlaError(NvError.BadParameter, f"{what}: scalars must be a list of (argidx, value) integer "
                                             f"pairs, not {scalars!r:.80}")
    return task


def check_prepared_submit(prepared: Any, pre_fences: Any, post_fences: Any, priority: Any,
                          timeout_ms: Any, what: str) -> None:
    """The arguments of NvDlaSubmitPrepared, by type (their values are the driver's to judge; each
    fence is checked where the port resolves it)."""
    if not isinstance(prepared, NvDlaPreparedTask):
        raise DlaError(NvError.BadParameter, f"{what}: not from NvDlaPrepareTask: {prepared!r:.80}")
    for fences, name in ((pre_fences, "pre_fences"), (post_fences, "post_fences")):
        if not isinstance(fences, (list, tuple)):
            raise DlaError(NvError.BadParameter, f"{what}: {name} must be a list of NvDlaFence, "
                                                 f"not {fences!r:.80}")
    if type(priority) is not int:
        raise DlaError(NvError.BadParameter, f"{what}: priority {priority!r} is not an integer")
    if timeout_ms is not None and type(timeout_ms) is not int:
        raise DlaError(NvError.BadParameter, f"{what}: timeout_ms {timeout_ms!r} is not an integer")


def memory_handle_error(what: str, *, freed: bool) -> DlaError:
    """The error for a memory handle a port cannot use, worded one way by every port: one of this
    session's that was freed ("the memory was already freed"), or one that never was this session's.

    Usage: ``raise memory_handle_error("NvDlaFreeMem", freed=mem.session is session)``
    """
    if freed:
        return DlaError(NvError.BadParameter, f"{what}: the memory was already freed (NvDlaFreeMem)")
    return DlaError(NvError.BadParameter, f"{what}: memory handle is not one of this session's")


MAX_TIMEOUT_MS = 3_600_000  # the driver's limit on a job's timeout (an hour)


def check_timeout_ms(value: Any, what: str, *, minimum: int = 1, maximum: int = MAX_TIMEOUT_MS) -> int:
    """A timeout in milliseconds as the API takes it: an int (a numpy integer too; not a bool, a
    float or a string) in ``minimum..maximum``; else BadParameter naming ``what`` (the parameter as
    the caller wrote it, e.g. "Session: timeout_ms") and the value.

    Usage: ``timeout_ms = check_timeout_ms(timeout_ms, "createRuntime: timeout_ms")``
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DlaError(NvError.BadParameter, f"{what} {value!r} is not an integer (milliseconds)")
    if not minimum <= value <= maximum:
        raise DlaError(NvError.BadParameter, f"{what} {value}: {minimum}..{maximum} (milliseconds)")
    return int(value)


def check_cu_args(args: Any, what: str) -> list[NvDlaCuArg]:
    """NvDlaSubmitCu's ``args``, by type: each an int of 32 bits (negative ones as int32), or a
    ``(mem, offset)`` / ``(mem, offset, size)`` tuple of a memory handle and ints (whose values and
    owner the port and the driver check). Else BadParameter naming the argument."""
    if not isinstance(args, (list, tuple)):
        raise DlaError(NvError.BadParameter, f"{what}: args must be a list, not {type(args).__name__}")
    for i, arg in enumerate(args):
        if type(arg) is int:
            if not -(1 << 31) <= arg < 1 << 32:
                raise DlaError(NvError.BadParameter, f"{what}: argument {i}: {arg} does not fit 32 bits")
        elif (not isinstance(arg, tuple) or len(arg) not in (2, 3) or not isinstance(arg[0], NvDlaMemHandle)
              or any(type(v) is not int for v in arg[1:])):
            raise DlaError(NvError.BadParameter,
                           f"{what}: argument {i}: {arg!r:.80} is neither a 32-bit int nor (mem, offset) / "
                           "(mem, offset, size) of NvDlaGetMem memory")
    return list(args)


def check_range(mem: NvDlaMemHandle, offset: int, size: int, what: str) -> None:
    """``size`` bytes at ``offset`` of ``mem`` are inside it; else InvalidSize naming ``what``."""
    if offset < 0 or size < 0 or offset + size > mem.size:
        raise DlaError(NvError.InvalidSize,
                       f"{what}: offset {offset} + size {size} is outside the {mem.size}-byte buffer")
