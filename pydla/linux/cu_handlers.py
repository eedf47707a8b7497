"""The daemon's compute-unit ioctls (uAPI 2.5, CU_SUBMIT 2.6): CU contexts (XRT's xclOpenContext /
xclCloseContext), register access under an exclusive one (xclRegRead / xclRegWrite), the streams of
AP_CTRL_NONE units, the IP_LAYOUT (CU_QUERY), and executions of HS / CHAIN units (CU_SUBMIT, XRT's
xrt::run::start): at most :data:`MAX_CU_ARGS` arguments, each buffer one of the caller's own (ENOENT
otherwise, as SUBMIT answers) with its offset and size inside it, the fences the caller's sync
objects (at most 4 each, in the struct).

Every field is checked here before anything reaches the KMD: the unit's name (NUL-terminated UTF-8
naming a unit of the device) or index, the flags, reserved words, the register offset (4-byte
aligned, inside the unit's window), the stream's size (at most :data:`MAX_STREAM_BYTES`), address and
timeout. The KMD then decides what only it knows (who holds the unit), and its refusals become errnos
as the issue asks: Busy -> EBUSY, InvalidState -> EPERM (no exclusive context, a second
context, a close without one); a write to the DLA engine's own unit -> EOPNOTSUPP (the KMD's
NotSupported: its control block is the driver's; it may be opened and read). A
stream call blocks its request thread at most the daemon's ``max_wait_ms`` and counts against the
file's WAIT quota (EAGAIN beyond). A file
that is closed, or whose process dies, loses its CU contexts with its KMD context (RELEASE).

Usage (inside :class:`~pydla.linux.daemon.KmdDaemon`)::

    self._handlers.update(cu_handlers(self))
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CuDesc
from pydla.kmd.cu import REGS_END, CuArg, CuBuffer
from pydla.linux.clients import Client
from pydla.linux.fuse_context import FuseError, RequestContext
from pydla.linux.process_memory import read_process_memory, write_process_memory
from pydla.linux.submit_handlers import read_array
from pydla.uapi.ioctl import (
    ERRNO,
    INLINE_FENCES,
    MAX_CU_ARGS,
    MAX_STREAM_BYTES,
    MAX_STREAM_TIMEOUT_MS,
    text,
)

if TYPE_CHECKING:
    from pydla.linux.daemon import KmdDaemon

T = TypeVar("T")
CONTROL = {"HS": U.dla_cu_control_e.AP_CTRL_HS, "CHAIN": U.dla_cu_control_e.AP_CTRL_CHAIN,
           "NONE": U.dla_cu_control_e.AP_CTRL_NONE}
CU_ERRNO = {NvError.InvalidState: errno.EPERM}  # the CU commands' own answers, before ERRNO's


def cu_handlers(daemon: KmdDaemon) -> dict[int, Callable[[Client, RequestContext, Any], int]]:
    """The CU commands' handlers, for the daemon's table."""
    h = CuHandlers(daemon)
    e = U.dla_ioctl_e
    return {e.CU_OPEN: h.open, e.CU_CLOSE: h.close, e.CU_REG_READ: h.reg_read, e.CU_REG_WRITE: h.reg_write,
            e.CU_STREAM_WRITE: h.stream_write, e.CU_STREAM_READ: h.stream_read, e.CU_QUERY: h.query,
            e.CU_SUBMIT: h.submit, e.CU_ARGS: h.arguments}


def _kmd(command: str, call: Callable[[], T]) -> T:
    """``call()`` into the KMD; its refusal as the CU commands' errno, its message named by command."""
    try:
        return call()
    except DlaError as e:
        code = CU_ERRNO.get(e.code, ERRNO.get(e.code, errno.EIO))
        message = e.message if e.message.startswith(command) else f"{command}: {e.message}"
        raise FuseError(code, message) from None


class CuHandlers:
    """The handlers; ``daemon`` provides the quotas, the wait bound and the clients' KMDs."""

    def __init__(self, daemon: KmdDaemon) -> None:
        self.daemon = daemon

    # -- checks ----------------------------------------------------------------------------------

    @staticmethod
    def unit(client: Client, a: Any, command: str) -> CuDesc:
        """The unit ``a`` names: its name field (NUL-terminated UTF-8, a unit's ``kernel:instance``
        or instance) or, when that is empty, its index field."""
        field = type(a).name
        raw = ctypes.string_at(ctypes.addressof(a) + field.offset, field.size)
        if b"\0" not in raw:
            raise FuseError(errno.EINVAL, f"{command}: name is not NUL-terminated within {field.size} bytes")
        encoded = raw.split(b"\0", 1)[0]
        try:
            name = encoded.decode("utf-8")
        except UnicodeDecodeError:
            raise FuseError(errno.EINVAL, f"{command}: name {encoded!r} is not UTF-8") from None
        units = client.kmd.compute_units
        if not name:
            if not 0 <= a.index < len(units):
                raise FuseError(errno.ENOENT, f"{command}: index {a.index}: the device has {len(units)} "
                                              f"compute units (0..{len(units) - 1})")
            unit: CuDesc = units[a.index]
            return unit
        for desc in units:
            if name in (desc.name, desc.instance):
                return desc
        names = ", ".join(d.name for d in units) or "none"
        raise FuseError(errno.ENOENT, f"{command}: name {name!r} is not a compute unit of the device "
                                      f"(it has: {names})")

    # -- CU contexts -----------------------------------------------------------------------------

    def open(self, client: Client, ctx: RequestContext, a: Any) -> int:
        desc = self.unit(client, a, "CU_OPEN")
        if a.flags & ~int(U.dla_cu_flags_e.EXCLUSIVE):
            raise FuseError(errno.EINVAL, f"CU_OPEN: flags {a.flags:#x}: only EXCLUSIVE (1) is defined")
        exclusive = bool(a.flags & U.dla_cu_flags_e.EXCLUSIVE)
        _kmd("CU_OPEN", lambda: client.kmd.cu_open_context(client.ctx, desc.name, exclusive=exclusive))
        return 0

    def close(self, client: Client, ctx: RequestContext, a: Any) -> int:
        desc = self.unit(client, a, "CU_CLOSE")
        if a.flags:
            raise FuseError(errno.EINVAL, f"CU_CLOSE: flags {a.flags:#x} must be 0")
        _kmd("CU_CLOSE", lambda: client.kmd.cu_close_context(client.ctx, desc.name))
        return 0

    # -- registers -------------------------------------------------------------------------------

    def _reg(self, client: Client, a: Any, command: str) -> CuDesc:
        desc = self.unit(client, a, command)
        if a.reserved:
            raise FuseError(errno.EINVAL, f"{command}: reserved {a.reserved:#x} must be 0")
        limit = min(REGS_END, desc.window)
        if a.offset % 4 or a.offset >= limit:
            raise FuseError(errno.EINVAL, f"{command}: offset {a.offset:#x} must be a multiple of 4 in "
                                          f"0..{limit - 4:#x} (compute unit '{desc.name}')")
        return desc

    def reg_read(self, client: Client, ctx: RequestContext, a: Any) -> int:
        desc = self._reg(client, a, "CU_REG_READ")
        a.value = _kmd("CU_REG_READ", lambda: client.kmd.cu_reg_read(client.ctx, desc.name, int(a.offset)))
        return 0

    def reg_write(self, client: Client, ctx: RequestContext, a: Any) -> int:
        desc = self._reg(client, a, "CU_REG_WRITE")
        value, offset = int(a.value), int(a.offset)
        _kmd("CU_REG_WRITE", lambda: client.kmd.cu_reg_write(client.ctx, desc.name, offset, value))
        return 0

    # -- streams ---------------------------------------------------------------------------------

    def _stream(self, client: Client, a: Any, command: str) -> tuple[CuDesc, int, int]:
        """The unit, the size and the timeout the daemon waits (every field checked)."""
        desc = self.unit(client, a, command)
        if desc.control != "NONE":
            raise FuseError(errno.EOPNOTSUPP, f"{command}: compute unit '{desc.name}' is "
                                              f"AP_CTRL_{desc.control}: only AP_CTRL_NONE units have streams")
        if not 0 < a.size <= MAX_STREAM_BYTES:
            raise FuseError(errno.EINVAL, f"{command}: size {a.size} (1..{MAX_STREAM_BYTES}; larger "
                                          "transfers repeat the call)")
        if not 0 < a.timeout_ms <= MAX_STREAM_TIMEOUT_MS:
            raise FuseError(errno.EINVAL,
                            f"{command}: timeout_ms {a.timeout_ms} (1..{MAX_STREAM_TIMEOUT_MS})")
        if a.data == 0 or a.data + a.size > 1 << 64:
            raise FuseError(errno.EFAULT,
                            f"{command}: data {a.data:#x} + size {a.size}: not an address range")
        a.moved = 0
        return desc, int(a.size), min(int(a.timeout_ms), self.daemon.max_wait_ms)

    def _counted(self, client: Client, command: str, call: Callable[[], T]) -> T:
        """``call()`` counted as one of the file's WAITs in progress (the daemon's quota)."""
        return self.daemon.clients.counted(client, command, call, "WAITs and stream calls")

    def stream_write(self, client: Client, ctx: RequestContext, a: Any) -> int:
        desc, size, timeout_ms = self._stream(client, a, "CU_STREAM_WRITE")
        try:
            data = read_process_memory(ctx.pid, int(a.data), size, MAX_STREAM_BYTES)
        except OSError as e:
            raise FuseError(errno.EFAULT, f"CU_STREAM_WRITE: data at {a.data:#x} ({size} bytes): "
                                          f"{os.strerror(e.errno or 0)}") from None
        kmd, name = client.kmd, desc.name
        self._counted(client, "CU_STREAM_WRITE", lambda: _kmd("CU_STREAM_WRITE", lambda: kmd.cu_stream_write(
            client.ctx, name, data, timeout_ms=timeout_ms)))
        a.moved = size
        return 0

    def stream_read(self, client: Client, ctx: RequestContext, a: Any) -> int:
        desc, size, timeout_ms = self._stream(client, a, "CU_STREAM_READ")
        address = int(a.data)
        try:  # the destination is checked writable before any byte leaves the stream
            write_process_memory(ctx.pid, address, bytes(size), MAX_STREAM_BYTES)
        except OSError as e:
            raise FuseError(errno.EFAULT, f"CU_STREAM_READ: data at {address:#x} ({size} bytes): "
                                          f"{os.strerror(e.errno or 0)}") from None
        kmd, name = client.kmd, desc.name
        out = self._counted(client, "CU_STREAM_READ", lambda: _kmd(
            "CU_STREAM_READ", lambda: kmd.cu_stream_read(client.ctx, name, size, timeout_ms=timeout_ms)))
        try:
            write_process_memory(ctx.pid, address, out, MAX_STREAM_BYTES)
        except OSError as e:  # the caller unmapped it meanwhile: the bytes are lost, and it is told so
            raise FuseError(errno.EFAULT, f"CU_STREAM_READ: {len(out)} bytes read from '{desc.name}' "
                                          f"could not be written at {address:#x}: "
                                          f"{os.strerror(e.errno or 0)}") from None
        a.moved = len(out)
        return 0

    # -- the IP_LAYOUT ---------------------------------------------------------------------------

    def query(self, client: Client, ctx: RequestContext, a: Any) -> int:
        units = client.kmd.compute_units
        if not 0 <= a.index < len(units):
            raise FuseError(errno.ENOENT, f"CU_QUERY: index {a.index}: the device has {len(units)} compute "
                                          f"units (NUM_CUS)")
        d = units[a.index]
        a.control, a.name, a.base, a.window = CONTROL[d.control], text(d.name, 64), d.base, d.window
        a.interrupt_id, a.int_enable, a.pipeline_depth = d.interrupt_id, int(d.int_enable), d.pipeline_depth
        a.engine, a.reserved = int(d.engine), 0
        return 0

    def arguments(self, client: Client, ctx: RequestContext, a: Any) -> int:
        units = client.kmd.compute_units
        if not 0 <= a.index < len(units):
            raise FuseError(errno.ENOENT, f"CU_ARGS: index {a.index}: the device has {len(units)} compute "
                                          f"units (NUM_CUS)")
        if a.reserved:
            raise FuseError(errno.EINVAL, f"CU_ARGS: reserved {a.reserved:#x} must be 0")
        names = units[a.index].arguments
        packed = b"".join(n.encode("utf-8") + b"\0" for n in names or ())
        if len(packed) > type(a).names.size:  # the model's declaration does not fit the struct
            raise FuseError(errno.E2BIG, f"CU_ARGS: compute unit '{units[a.index].name}' declares "
                                         f"{len(packed)} bytes of argument names (at most "
                                         f"{type(a).names.size})")
        a.declared, a.count = int(names is not None), len(names or ())
        ctypes.memmove(ctypes.addressof(a) + type(a).names.offset, packed, len(packed))
        return 0

    # -- executions (XRT's xrt::run::start) --------------------------------------------------------

    def submit(self, client: Client, ctx: RequestContext, a: Any) -> int:
        command = "CU_SUBMIT"
        desc = self.unit(client, a, command)
        if desc.engine:
            raise FuseError(errno.EOPNOTSUPP, f"{command}: compute unit '{desc.name}' is the DLA engine: "
                                              "SUBMIT runs its tasks")
        if desc.control == "NONE":
            raise FuseError(errno.EOPNOTSUPP, f"{command}: compute unit '{desc.name}' is AP_CTRL_NONE: it "
                                              "is never started (use its streams)")
        if not (0 <= a.num_pre_fences <= INLINE_FENCES and 0 <= a.num_post_fences <= INLINE_FENCES):
            raise FuseError(errno.EINVAL, f"{command}: num_pre_fences {a.num_pre_fences}, num_post_fences "
                                          f"{a.num_post_fences} (at most {INLINE_FENCES} each)")
        daemon = self.daemon
        entries = read_array(ctx, a.args, a.num_args, U.dla_cu_arg_t, MAX_CU_ARGS, "arguments",
                                     command)
        args = [self._argument(client, i, e) for i, e in enumerate(entries)]
        pre, post = daemon.syncs.inline_fences(client, a)
        timeout = int(a.timeout_ms) or None
        ex = _kmd(command, lambda: client.kmd.cu_submit(client.ctx, desc.name, args, timeout_ms=timeout,
                                                        pre_fences=pre, post_fences=post))
        a.exec_id = ex.exec_id
        a.completed = int(ex.done and ex.error is None)
        return 0

    def _argument(self, client: Client, i: int, e: Any) -> CuArg:
        """Argument ``i`` (a dla_cu_arg_t) as the KMD takes it, every field checked."""
        where = f"CU_SUBMIT: argument {i}"
        if e.kind == U.dla_cu_arg_kind_e.WORD:
            if e.offset or e.size:
                raise FuseError(errno.EINVAL, f"{where}: a WORD has offset {e.offset} and size {e.size}: 0")
            return int(e.value)
        if e.kind != U.dla_cu_arg_kind_e.BUFFER:
            raise FuseError(errno.EINVAL, f"{where}: kind {e.kind} (WORD 1 or BUFFER 2)")
        try:
            handle = self.daemon.clients.buffer(client, int(e.value))
        except FuseError as err:
            raise FuseError(err.errno, f"{where}: {err.message}") from None
        size = client.kmd.bo_size(client.ctx, handle)
        if not e.offset < size:
            raise FuseError(errno.EINVAL, f"{where}: offset {e.offset} is outside buffer object {e.value} "
                                          f"({size} bytes)")
        if e.size > size - e.offset:
            raise FuseError(errno.EINVAL, f"{where}: size {e.size} at offset {e.offset} is outside buffer "
                                          f"object {e.value} ({size} bytes)")
        return CuBuffer(handle, int(e.offset), int(e.size) or None)
