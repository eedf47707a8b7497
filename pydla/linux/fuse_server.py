"""A FUSE server over /dev/fuse, by hand: a flat directory of files whose ioctls go to Python handlers.

Clients use the files with plain ``open(2)`` and ``ioctl(2)``; the kernel turns each call into a FUSE
request with the caller's pid/uid/gid, and a pool of threads reading the same /dev/fuse descriptor
answers it. A handler that blocks (a WAIT) holds only its own thread: when every reader is busy
another one is started (up to ``max_threads``), and extra idle ones retire. FUSE_INTERRUPT (the
caller got a signal, e.g. SIGKILL) reaches the handler through ``ctx.interrupted``.

Every request gets exactly one reply, errors included (a handler that raises answers EIO), except
FORGET, BATCH_FORGET, NOTIFY_REPLY and INTERRUPT, to which the kernel expects none.

Usage::

    with FuseServer("/run/pydla", {"dla0": handler}) as server:   # mounts, serves, unmounts
        ...
    FuseServer("/run/pydla", files).run()   # as a daemon: until SIGTERM/SIGINT
"""

from __future__ import annotations

import atexit
import errno
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydla.linux import fuse_protocol as fp
from pydla.linux.fuse_context import FileHandler, FuseError, InFlight, RequestContext, log
from pydla.linux.fuse_files import OpenFiles
from pydla.linux.fuse_mount import (
    FuseMountError,
    abort_connection,
    check_mountpoint,
    find_mount,
    mount_fuse,
    open_fuse_device,
    resolve_mountpoint,
    unmount,
)
from pydla.linux.fuse_tree import FuseTree

Op = fp.FuseOpcode

class FuseServer:
    """Serve ``files`` (name -> FileHandler) as ``mountpoint/<name>``; ioctls go to the handlers.

    ``threads`` readers wait on /dev/fuse (at least that many stay idle while others run handlers,
    at most ``max_threads`` exist). Needs root (CAP_SYS_ADMIN) and /dev/fuse. Handlers must never
    touch this mount themselves (the request would wait for a thread that is waiting for it).

    Usage::

        server = FuseServer("/run/pydla", {"dla0": h0, "dla1": h1}, threads=4).start()
        fd = os.open("/run/pydla/dla0", os.O_RDWR)     # in a client process
        server.stop()
    """

    def __init__(self, mountpoint: str | os.PathLike[str], files: Mapping[str, FileHandler], *,
                 threads: int = 4, max_threads: int = 64, name: str = "pydla", file_mode: int = 0o666,
                 allow_other: bool = True, default_permissions: bool = False,
                 max_write: int = 1 << 16, attr_timeout: float = 10.0) -> None:
        if not 1 <= threads <= max_threads:
            raise ValueError(f"threads={threads}, max_threads={max_threads}: need 1 <= threads <= max")
        if not 4096 <= max_write <= 1 << 20:
            raise ValueError(f"max_write={max_write}: must be within 4096..1048576")
        self.mountpoint = resolve_mountpoint(mountpoint)
        self.given_path = os.fspath(mountpoint)  # as the user wrote it, for messages
        self.cleared_stale = 0
        self.name, self.threads, self.max_threads = name, threads, max_threads
        self._allow_other, self._default_permissions = allow_other, default_permissions
        self._max_write = max_write
        # fs/fuse/dev.c refuses reads into buffers smaller than this (EINVAL).
        self._bufsize = max(fp.FUSE_MIN_READ_BUFFER, fp.READ_BUFFER_OVERHEAD + max_write)
        # Its parts: the directory (requests that only look at it), the requests in flight (where
        # interrupts go), the open files (requests that reach the files' handlers).
        self._lock = threading.Lock()
        self._tree = tree = FuseTree(files, file_mode=file_mode, attr_timeout=attr_timeout,
                                     max_write=max_write)
        self._requests = InFlight(self._lock)
        self._in_flight, self._early_interrupts = self._requests.requests, self._requests.early  # views
        self._files = open_files = OpenFiles(tree, self._lock, self._requests)
        self._ops: dict[int, Callable[[fp.fuse_in_header, memoryview], bytes | None]] = {
            Op.FUSE_INIT: self._op_init, Op.FUSE_DESTROY: self._op_empty,
            Op.FUSE_LOOKUP: tree.lookup, Op.FUSE_GETATTR: tree.getattr,
            Op.FUSE_SETATTR: tree.setattr, Op.FUSE_OPEN: open_files.open, Op.FUSE_READ: open_files.read,
            Op.FUSE_RELEASE: open_files.release, Op.FUSE_FLUSH: self._op_empty,
            Op.FUSE_OPENDIR: tree.opendir, Op.FUSE_READDIR: tree.readdir,
            Op.FUSE_RELEASEDIR: self._op_empty, Op.FUSE_ACCESS: self._op_empty,
            Op.FUSE_STATFS: tree.statfs}  # FUSE_IOCTL: its own path in _process
        self._readers_done = threading.Condition(self._lock)
        self._fd = -1
        self._running = False
        self._stopping = False
        self._stop_requested = threading.Event()
        self._init_done = threading.Event()
        self._ready = False  # INIT answered
        self._init_error: str | None = None
        self._proto_minor = 0
        self._conn_id: int | None = None
        self._readers: set[threading.Thread] = set()
        self._idle = 0

    # -- life cycle ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between a successful start() and stop()."""
        return self._running

    @property
    def open_handles(self) -> int:
        """How many opens of the files are not released yet. Usage: ``assert server.open_handles == 0``"""
        return len(self._files)

    @property
    def reader_threads(self) -> int:
        """How many reader threads exist now."""
        with self._lock:
            return len(self._readers)

    def start(self, timeout: float = 5.0) -> FuseServer:
        """Mount and serve; returns once the kernel's INIT is answered. Usage: ``server.start()``

        A stale mount of this server's own type (``fuse.<name>``: a server killed without unmounting)
        is cleared first (``cleared_stale`` counts them). Raises FuseMountError for a non-empty
        directory, a live mount, or a stale mount of another type (StaleMountError, with the command
        that clears it); messages name the directory as it was given.
        """
        if self._running:
            raise RuntimeError(f"server on {self.mountpoint} is already running")
        self.cleared_stale = check_mountpoint(self.given_path, f"fuse.{self.name}")
        fd = open_fuse_device()
        try:
            mount_fuse(fd, self.mountpoint, self.name, allow_other=self._allow_other,
                       default_permissions=self._default_permissions)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._running, self._stopping = fd, True, False
        self._requests.stopping = False
        self._stop_requested.clear()
        self._init_done.clear()
        self._ready = False
        self._early_interrupts.clear()
        with self._lock:
            for _ in range(self.threads):
                self._spawn_locked()
        found = find_mount(self.mountpoint)
        self._conn_id = found[1] if found else None
        atexit.register(self._atexit)
        if not self._init_done.wait(timeout) or self._init_error:
            why = self._init_error or f"the kernel sent no INIT within {timeout} s"
            self.stop()
            raise FuseMountError(errno.EPROTO, f"FUSE on {self.mountpoint}: {why}")
        log.info("serving %s (%d files, protocol 7.%d, conn %s)", self.mountpoint,
                 len(self._tree.by_name), self._proto_minor, self._conn_id)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Interrupt waiting handlers, unmount, abort the connection if files are still open, join
        the threads, close /dev/fuse, and release every open handle left. Never hangs.

        Usage: ``server.stop()``
        """
        with self._lock:
            if not self._running or self._stopping:
                return
            self._stopping = self._requests.stopping = True
        deadline = time.monotonic() + timeout
        try:
            unmount(self.mountpoint)
        except OSError as e:
            log.warning("%s", e)
        # With no file open, unmounting ended the connection and the readers wake with ENODEV
        # (poll reports POLLERR). Otherwise the connection lives on: abort it, so that the readers
        # wake and the clients get ECONNABORTED/ENOTCONN instead of waiting for us forever.
        if not self._connection_dead() and self._conn_id is not None:
            try:
                abort_connection(self._conn_id)
            except OSError as e:
                log.warning("aborting FUSE connection %s: %s", self._conn_id, e)
        # Only now wake the handlers that wait: their callers already got ECONNABORTED, and a
        # caller answered earlier could not come back with a new request that we would serve.
        self._requests.interrupt_all()
        me = threading.current_thread()  # stop() called by a handler: do not wait for ourselves
        with self._readers_done:
            self._readers_done.wait_for(lambda: not self._readers - {me},
                                        max(0.0, deadline - time.monotonic()))
            stuck = len(self._readers - {me})
        handles = self._files.take_all()
        if stuck:
            # Closing the descriptor under a thread still in read() could let it read a reused
            # descriptor number later: leave it open and say so.
            log.error("%d FUSE reader threads did not stop; /dev/fuse fd %d left open", stuck, self._fd)
        else:
            os.close(self._fd)
        self._fd = -1
        for h in handles:
            self._files.call_release(h, RequestContext(0, Op.FUSE_RELEASE, h.node.nodeid, 0, 0, 0,
                                                       h.node.name))
        self._running = False
        self._stop_requested.set()
        atexit.unregister(self._atexit)
        log.info("stopped serving %s", self.mountpoint)

    def request_stop(self) -> None:
        """Make run() return (safe from signal handlers and other threads)."""
        self._stop_requested.set()

    def run(self, install_signal_handlers: bool = True) -> None:
        """Serve until SIGTERM/SIGINT or request_stop(), then stop (unmounting). For the daemon.

        Usage: ``FuseServer(path, files).run()``
        """
        previous: dict[signal.Signals, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.request_stop())
        try:
            if not self._running:
                self.start()
            while not self._stop_requested.wait(0.5):
                pass
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def __enter__(self) -> FuseServer:
        return self.start() if not self._running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _atexit(self) -> None:
        try:
            self.stop(timeout=1.0)
        except Exception:  # at exit, unmounting is what matters
            unmount(self.mountpoint)

    def _connection_dead(self) -> bool:
        p = select.poll()
        p.register(self._fd, select.POLLIN)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))

    # -- reader threads --------------------------------------------------------------------------

    def _spawn_locked(self) -> None:
        t = threading.Thread(target=self._reader, name=f"fuse-{self.name}", daemon=True)
        self._readers.add(t)
        self._idle += 1
        t.start()

    def _reader(self) -> None:
        buf = bytearray(self._bufsize)
        view = memoryview(buf)
        me = threading.current_thread()
        idle = True  # counted in self._idle
        try:
            while True:
                try:
                    n = os.readv(self._fd, [buf])
                except OSError as e:
                    if e.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT) and not self._stopping:
                        continue  # the request vanished (interrupted before it was read): next
                    if e.errno not in (errno.ENODEV, errno.EBADF):
                        log.error("reading /dev/fuse: %s; reader exits", e)
                    return
                with self._lock:
                    self._idle -= 1
                    idle = False
                    if self._idle == 0 and len(self._readers) < self.max_threads and not self._stopping:
                        self._spawn_locked()  # every reader busy: one more, so nobody waits on us
                try:
                    self._process(view[:n])
                except Exception:  # _process answers everything; this is a last resort
                    log.exception("FUSE request processing failed")
                with self._lock:
                    if self._idle >= self.threads:
                        return  # enough idle readers: retire this one
                    self._idle += 1
                    idle = True
        finally:
            with self._readers_done:
                self._idle -= idle
                self._readers.discard(me)
                self._readers_done.notify_all()

    # -- requests ---------------------------------------------------------------------------------

    def _reply(self, unique: int, err: int = 0, payload: bytes | None = None) -> bool:
        size = fp.OUT_HEADER_SIZE + (len(payload) if payload else 0)
        hdr = bytes(fp.fuse_out_header(len=size, error=-err, unique=unique))
        try:
            self._write([hdr, payload] if payload else [hdr])
            return True
        except OSError as e:
            self._write_failed(unique, e)
            return False

    def _write_failed(self, unique: int, e: OSError) -> None:
        # ENOENT: the kernel no longer waits for this request (aborted); ENODEV: unmounted.
        level = log.debug if e.errno in (errno.ENOENT, errno.ENODEV, errno.EBADF) else log.error
        level("replying to request %d: %s", unique, e)

    def _write(self, parts: list[bytes]) -> None:
        os.writev(self._fd, parts)

    def _process(self, data: memoryview) -> None:
        """Answer one request read from /dev/fuse (``data`` is exactly what read returned)."""
        if len(data) < fp.IN_HEADER_SIZE:
            log.error("FUSE request of %d bytes is shorter than its header; dropped", len(data))
            return
        length, opcode, unique, nodeid, uid, gid, pid, _, _ = fp.IN_HEADER.unpack_from(data)
        if length != len(data):
            log.error("FUSE request %d: header says %d bytes, read %d", unique, length, len(data))
            self._reply(unique, errno.EIO)
            return
        if opcode in fp.NO_REPLY_OPCODES:
            if opcode == Op.FUSE_INTERRUPT and len(data) >= fp.IN_HEADER_SIZE + 8:
                interrupted = fp.fuse_interrupt_in.from_buffer_copy(data, fp.IN_HEADER_SIZE).unique
                self._requests.interrupt(interrupted)
            return
        try:
            if opcode == Op.FUSE_IOCTL and self._ready:  # the hot path, without ctypes objects
                parts = self._files.ioctl(unique, nodeid, uid, gid, pid, data)
                try:
                    self._write(parts)
                except OSError as e:
                    self._write_failed(unique, e)
                return
            if not self._ready and opcode != Op.FUSE_INIT:
                raise FuseError(errno.EIO, "request before INIT")
            op = self._ops.get(opcode)
            if op is None:
                raise FuseError(errno.ENOSYS)
            out = op(fp.fuse_in_header.from_buffer_copy(data[:fp.IN_HEADER_SIZE]),
                     data[fp.IN_HEADER_SIZE:])
        except FuseError as e:
            self._reply(unique, e.errno)
        except Exception:
            log.exception("FUSE request %d (opcode %d) failed", unique, opcode)
            self._reply(unique, errno.EIO)
        else:
            if not self._reply(unique, 0, out) and opcode == Op.FUSE_OPEN and out:
                # Nobody received this handle (the request was aborted): nobody will release it.
                h = self._files.forget(fp.fuse_open_out.from_buffer_copy(out).fh)
                if h is not None:
                    self._files.call_release(h, RequestContext(unique, Op.FUSE_RELEASE, h.node.nodeid,
                                                         0, 0, 0, h.node.name))

    def _op_init(self, hdr: fp.fuse_in_header, payload: memoryview) -> bytes:
        if len(payload) < fp.FUSE_COMPAT_INIT_IN_SIZE:
            raise FuseError(errno.EINVAL, "short INIT")
        arg = fp.fuse_init_in.from_buffer_copy(bytes(payload[:64]).ljust(64, b"\0"))
        if arg.major > fp.FUSE_KERNEL_VERSION:
            # Per fuse.h: answer with our major only and wait for a new INIT.
            return bytes(fp.fuse_init_out(major=fp.FUSE_KERNEL_VERSION,
                                          minor=fp.FUSE_KERNEL_MINOR_VERSION))
        if arg.major < fp.FUSE_KERNEL_VERSION or arg.minor < fp.FUSE_MIN_KERNEL_MINOR:
            self._init_error = (f"kernel FUSE protocol {arg.major}.{arg.minor} is older than 7."
                                f"{fp.FUSE_MIN_KERNEL_MINOR}, the oldest this server speaks")
            self._init_done.set()
            raise FuseError(errno.EPROTO, self._init_error)
        self._proto_minor = min(arg.minor, fp.FUSE_KERNEL_MINOR_VERSION)
        out = fp.fuse_init_out(major=fp.FUSE_KERNEL_VERSION, minor=self._proto_minor,
                               max_readahead=arg.max_readahead,
                               flags=arg.flags & (fp.FUSE_BIG_WRITES | fp.FUSE_PARALLEL_DIROPS),
                               max_background=64, congestion_threshold=48,
                               max_write=self._max_write, time_gran=1)
        self._ready = True
        self._init_done.set()
        return bytes(out)

    def _op_empty(self, hdr: fp.fuse_in_header, payload: memoryview) -> None:
        return None
