"""The open files of a FuseServer and the requests that reach their handlers: OPEN, READ, RELEASE and
IOCTL (the hot path: parsed with struct, no ctypes objects). Each handler runs with its request
registered in flight (:class:`~pydla.linux.fuse_context.InFlight`), so that FUSE_INTERRUPT reaches it.

An ioctl handler's answer is checked before it is sent: an int32 result (a negative one is its errno;
ENOSYS becomes ENOTTY, because after one ENOSYS the kernel refuses every later ioctl on the mount) and
at most the caller's ``out_size`` bytes.

Usage (inside the server)::

    files = OpenFiles(tree, lock, in_flight)
    parts = files.ioctl(unique, nodeid, uid, gid, pid, data)     # what to write to /dev/fuse
"""

from __future__ import annotations

import errno
import itertools
import threading

from pydla.linux import fuse_protocol as fp
from pydla.linux.fuse_context import FuseError, InFlight, RequestContext, log
from pydla.linux.fuse_tree import FuseTree, Node
from pydla.linux.fuse_tree import payload as fuse_payload

Op = fp.FuseOpcode


class Open:
    """One open of a file: its node and the state its handler's ``open`` returned."""

    __slots__ = ("node", "state")

    def __init__(self, node: Node, state: object) -> None:
        self.node, self.state = node, state


class OpenFiles:
    """The opens not released yet, by the handle (``fh``) the kernel was given."""

    def __init__(self, tree: FuseTree, lock: threading.Lock, in_flight: InFlight) -> None:
        self._tree, self._lock, self._in_flight = tree, lock, in_flight
        self._handles: dict[int, Open] = {}
        self._fh_counter = itertools.count(1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._handles)

    def forget(self, fh: int) -> Open | None:
        """Take open ``fh`` out of the table (its OPEN's reply was not received: nobody releases it)."""
        with self._lock:
            return self._handles.pop(fh, None)

    def take_all(self) -> list[Open]:
        """Every open, taken out of the table (the server stops: it releases them)."""
        with self._lock:
            handles, self._handles = list(self._handles.values()), {}
        return handles

    def _context(self, hdr: fp.fuse_in_header, node: Node, flags: int) -> RequestContext:
        return RequestContext(hdr.unique, hdr.opcode, hdr.nodeid, hdr.uid, hdr.gid, hdr.pid,
                              node.name, flags, self._lock)

    def open(self, hdr: fp.fuse_in_header, payload: memoryview) -> bytes:
        arg = fuse_payload(payload, fp.fuse_open_in)
        node = self._tree.node(hdr.nodeid)
        if node.handler is None:
            raise FuseError(errno.EISDIR)
        handler = node.handler
        ctx = self._context(hdr, node, arg.flags)
        state = self._in_flight.call(ctx, lambda: handler.open(ctx))
        with self._lock:
            fh = next(self._fh_counter)
            self._handles[fh] = Open(node, state)
        # Direct I/O: no page cache for these files; nonseekable: there is no file position.
        return bytes(fp.fuse_open_out(fh=fh, open_flags=fp.FOPEN_DIRECT_IO | fp.FOPEN_NONSEEKABLE))

    def read(self, hdr: fp.fuse_in_header, payload: memoryview) -> bytes:
        """A file whose handler has ``read(fh, ctx, offset, size) -> bytes`` can be read (a status
        document); the device files cannot (EINVAL, as read(2) on an object unsuitable for reading)."""
        arg = fuse_payload(payload, fp.fuse_read_in)
        h = self._handles.get(arg.fh)  # a single dict read: atomic, no lock needed
        if h is None or h.node.nodeid != hdr.nodeid:
            raise FuseError(errno.EBADF, f"no open file {arg.fh}")
        reader = getattr(h.node.handler, "read", None)
        if reader is None:
            raise FuseError(errno.EINVAL, f"{h.node.name} cannot be read")
        ctx = self._context(hdr, h.node, arg.flags)
        data = self._in_flight.call(ctx, lambda: reader(h.state, ctx, int(arg.offset), int(arg.size)))
        return bytes(data[:arg.size])

    def release(self, hdr: fp.fuse_in_header, payload: memoryview) -> None:
        arg = fuse_payload(payload, fp.fuse_release_in)
        h = self.forget(arg.fh)
        if h is None:
            raise FuseError(errno.EBADF, f"no open file {arg.fh}")
        self.call_release(h, self._context(hdr, h.node, arg.flags))

    @staticmethod
    def call_release(h: Open, ctx: RequestContext) -> None:
        """The handler's ``release`` of open ``h``; a close cannot fail (its exception is logged)."""
        assert h.node.handler is not None
        try:
            h.node.handler.release(h.state, ctx)
        except Exception:  # a close cannot fail; the handler's bug is logged
            log.exception("release of %s (pid %d) raised", h.node.name, ctx.pid)

    def ioctl(self, unique: int, nodeid: int, uid: int, gid: int, pid: int,
              data: memoryview) -> list[bytes]:
        """The reply (header and payload) to IOCTL request ``data`` (see the module)."""
        start = fp.IN_HEADER_SIZE + fp.IOCTL_IN.size
        if len(data) < start:
            raise FuseError(errno.EINVAL, f"IOCTL request of {len(data)} bytes")
        fh, flags, cmd, _arg, in_size, out_size = fp.IOCTL_IN.unpack_from(data, fp.IN_HEADER_SIZE)
        if flags & (fp.FUSE_IOCTL_DIR | fp.FUSE_IOCTL_UNRESTRICTED):
            raise FuseError(errno.ENOTTY, "ioctl on the directory, or unrestricted")
        if in_size != len(data) - start or out_size > fp.IOCTL_MAX_RESTRICTED_SIZE:
            raise FuseError(errno.EINVAL, f"ioctl sizes in={in_size} ({len(data) - start} sent) "
                            f"out={out_size}")
        h = self._handles.get(fh)  # a single dict read: atomic, no lock needed
        if h is None or h.node.nodeid != nodeid or h.node.handler is None:
            raise FuseError(errno.EBADF, f"no open file {fh}")
        ctx = RequestContext(unique, Op.FUSE_IOCTL, nodeid, uid, gid, pid, h.node.name, flags, self._lock)
        self._in_flight.enter(ctx)  # registered, so that FUSE_INTERRUPT finds it
        try:
            result, out = h.node.handler.ioctl(h.state, ctx, cmd, bytes(data[start:]), out_size)
        except FuseError as e:
            if e.errno == errno.ENOSYS:  # one ENOSYS would disable ioctls on the whole mount
                raise FuseError(errno.ENOTTY, e.message) from None
            raise
        finally:
            self._in_flight.leave(unique)
        if type(result) is not int or result >= 1 << 31:
            raise TypeError(f"ioctl handler returned result {result!r}: want an int32")
        if result < 0:
            raise FuseError(errno.ENOTTY if -result == errno.ENOSYS else -result)
        if type(out) is not bytes:
            out = bytes(out)
        if len(out) > out_size:
            raise ValueError(f"ioctl handler returned {len(out)} bytes, caller takes {out_size}")
        size = fp.OUT_HEADER_SIZE + 16 + len(out)
        return [fp.OUT_HEADER_IOCTL_OUT.pack(size, 0, unique, result, 0, 0, 0), out]
