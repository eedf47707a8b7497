"""The Linux port's handles: an open device file (:class:`LinuxDevice`, what NvDlaOpen returns; its
ioctls, the version handshake, GET_PARAM and the submission ring it sets up on first use), a buffer
object mapped into this process (:class:`LinuxMem`) and a sync object (:class:`LinuxSemaphore`).

A refused ioctl is a DlaError carrying the daemon's reason (LAST_ERROR); a daemon that died gives
NvError Disconnected, never a hang. :func:`checked_device` is the one check every part of
:class:`~pydla.portability.linux.LinuxPort` makes of a handle it is given.

Usage (inside the Linux port)::

    device = LinuxDevice(port, 0, Path("/run/pydla/dla0"))
    num = device.param(U.dla_param_e.NUM_DEVICES)
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla._version import __version__
from pydla.deviceapi.generated import dla_uapi as U
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.errors import DlaError, NvError
from pydla.portability.interface import NvDlaDeviceInfo, NvDlaMemHandle
from pydla.portability.linux_handle import OpeningPort, query_compute_units
from pydla.portability.linux_ring import ClientRing
from pydla.uapi.ioctl import COMMANDS, NVERROR, text, untext


class LinuxSemaphore:
    """A sync object of the daemon, owned by one open device file."""

    def __init__(self, device: LinuxDevice, sync: int) -> None:
        self.device, self.sync = device, sync
        self.destroyed = False
        self.reached = -1  # a value known to be reached: waiting for it needs no WAIT

    def note_reached(self, value: int) -> None:
        """SUBMIT said so, or this port signalled it: a timeline only goes up."""
        self.reached = max(self.reached, value)


class LinuxMem(NvDlaMemHandle):
    """A buffer object of the daemon, mapped into this process."""

    def __init__(self, device: LinuxDevice, handle: int, size: int, iova: int, mapping: mmap.mmap) -> None:
        self.device, self.handle = device, handle
        self._size, self._iova = size, iova
        self._map: mmap.mmap | None = mapping
        self._array: npt.NDArray[np.uint8] = np.frombuffer(mapping, dtype=np.uint8, count=size)

    @property
    def size(self) -> int:
        return self._size

    @property
    def device_address(self) -> int:
        return self._iova

    @property
    def mapped(self) -> bool:
        """False once freed (or its device closed)."""
        return self._map is not None

    def bytes_view(self) -> npt.NDArray[np.uint8]:
        if self._map is None or self.device.fd < 0:
            raise DlaError(NvError.InvalidState,
                           f"memory handle {self.handle} was freed or its device closed")
        return self._array

    def unmap(self) -> None:
        """Forget the mapping (freed, or the device closed)."""
        # numpy views keep the mapping exported; it is unmapped when the last of them goes.
        self._map = None
        self._array = np.zeros(0, dtype=np.uint8)


_STALE_ERRNOS = (errno.ENOTCONN, errno.ECONNABORTED)


def names_a_device_file(path: Path) -> bool:
    """Whether ``path`` is a device file (an existing non-directory, or a missing dla0, dla1...)
    rather than the directory a daemon serves."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as e:
        if e.errno in _STALE_ERRNOS:
            raise _stale(path, path) from None
        return re.fullmatch(r"dla\d+", path.name) is not None


def _stale(path: Path, directory: Path) -> DlaError:
    return DlaError(NvError.Disconnected,
                    f"{path}: the KMD daemon serving {directory} is gone (a stale mount); "
                    f"`pydla kmd --mount {directory}` clears it and serves again")


def _open_error(path: Path, directory: Path, e: OSError) -> DlaError:
    """Why a device file did not open, and what to run about it."""
    if e.errno in _STALE_ERRNOS:
        return _stale(path, directory)
    code = NvError.DeviceNotFound if e.errno == errno.ENOENT else NvError.Disconnected
    return DlaError(code, f"{path}: {e.strerror} (is `pydla kmd --mount {directory}` running? "
                          f"`pydla devices` lists the daemons)")


def checked_device(port: object, h: Any) -> LinuxDevice:
    """``h`` as an open device file of ``port``, else BadParameter (not one) or InvalidState (closed)."""
    if not isinstance(h, LinuxDevice) or h.port is not port:
        raise DlaError(NvError.BadParameter, "not a handle from this port's NvDlaOpen")
    if h.fd < 0:
        raise DlaError(NvError.InvalidState, f"{h.path}: the device was closed")
    return h


class LinuxDevice:
    """An open device file: what NvDlaOpen returns."""

    def __init__(self, port: OpeningPort, select: int, path: Path) -> None:
        self.port, self.select, self.path = port, select, path
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise _open_error(path, port.directory, e) from None
        self.mems: dict[int, LinuxMem] = {}
        # The compute-unit contexts this handle holds: closed by CU_CLOSE before the file, because
        # the daemon learns of a close(2) asynchronously (a FUSE release), after NvDlaClose returned.
        self.cu_contexts: set[str] = set()
        self.lock = threading.Lock()  # guards mems, fd and the ring against a concurrent close
        self._ring: ClientRing | None = None
        self._ring_tried = not port.use_ring
        try:
            self.daemon_version = self._handshake()
            self.daemon_pid = self.param(U.dla_param_e.DAEMON_PID)
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            raise

    def ioctl(self, nr: int, args: Any, *, again: tuple[int, ...] = (),
              codes: dict[int, NvError] = NVERROR) -> Any:
        """Issue command ``nr`` with ``args`` (its struct), which the daemon's answer overwrites.
        None when it failed with an errno in ``again`` (for the caller to repeat); another errno is
        a DlaError with the daemon's reason, its code from ``codes``."""
        if self.fd < 0:
            raise DlaError(NvError.InvalidState, f"{self.path}: the device was closed")
        buf = bytearray(bytes(args))
        name = U.dla_ioctl_e(nr).name
        try:
            fcntl.ioctl(self.fd, COMMANDS[nr], buf, True)
        except OSError as e:
            if e.errno in again:
                return None
            code = codes.get(e.errno or 0, NvError.IoctlFailed)
            if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                raise DlaError(NvError.Disconnected, f"{self.path}: {name}: the KMD daemon is gone "
                                                     f"({e.strerror})") from None
            reason = (self.last_error() if e.errno != errno.EINTR else "") or e.strerror or ""
            if not reason.startswith(name + ":"):
                reason = f"{name}: {reason}"
            raise DlaError(code, f"{self.path}: {reason}") from None
        return type(args).from_buffer_copy(buf)

    def last_error(self) -> str:
        """The daemon's reason for this file's last refused request (LAST_ERROR); "" if unknown."""
        try:
            buf = bytearray(bytes(U.dla_get_param_t(param=U.dla_param_e.LAST_ERROR)))
            fcntl.ioctl(self.fd, COMMANDS[U.dla_ioctl_e.GET_PARAM], buf, True)
            return untext(bytes(U.dla_get_param_t.from_buffer_copy(buf).text))
        except OSError:
            return ""

    def param(self, which: int) -> int:
        return int(self.ioctl(U.dla_ioctl_e.GET_PARAM, U.dla_get_param_t(param=which)).value)

    def param_text(self, which: int) -> str:
        return untext(bytes(self.ioctl(U.dla_ioctl_e.GET_PARAM, U.dla_get_param_t(param=which)).text))

    def needs(self, version: tuple[int, int], what: str, feature: str) -> None:
        """NotSupported unless the daemon speaks uAPI ``version`` or newer (``feature`` needs it)."""
        if self.daemon_version[:2] < version:
            have = ".".join(map(str, self.daemon_version))
            raise DlaError(NvError.NotSupported, f"{what}: the daemon speaks uAPI {have}; {feature} "
                                                 f"{version[0]}.{version[1]} (run the same pydla on both "
                                                 "sides)")

    def _handshake(self) -> tuple[int, int, int]:
        """Agree on the uAPI version; returns the daemon's."""
        mine = U.dla_handshake_t(major=U.VERSION[0], minor=U.VERSION[1], patch=U.VERSION[2],
                                 layout_hash64=U.LAYOUT_HASH64, package_version=text(__version__, 32))
        theirs = self.ioctl(U.dla_ioctl_e.HANDSHAKE, mine)
        version = (theirs.major, theirs.minor, theirs.patch)
        if theirs.major != U.VERSION[0] or (version == U.VERSION and theirs.layout_hash64 != U.LAYOUT_HASH64):
            ours = ".".join(map(str, U.VERSION))
            daemons = ".".join(map(str, version))
            raise DlaError(NvError.VersionMismatch,
                           f"{self.path}: uAPI {ours} (layout {U.LAYOUT_HASH64:016x}, pydla {__version__}) "
                           f"here, {daemons} (layout {theirs.layout_hash64:016x}, pydla "
                           f"{untext(bytes(theirs.package_version))}) in the daemon: run the same pydla on "
                           "both sides")
        return version

    def info(self) -> NvDlaDeviceInfo:
        """What the daemon reports of this file's device (GET_PARAM)."""
        p = U.dla_param_e
        block_mask = self.param(p.BLOCK_MASK)
        # PRECISION_MASK came with uAPI 2.2; an older daemon's device is taken to compute in every
        # precision (its KMD still refuses what its device lacks).
        precision_mask = self.param(p.PRECISION_MASK) if self.daemon_version[:2] >= (2, 2) else ~0
        units = query_compute_units(self)  # uAPI 2.5 (none from an older daemon); arguments 2.9
        return NvDlaDeviceInfo(
            self.param(p.DEVICE_INDEX), self.param(p.NUM_DEVICES), self.param_text(p.CONFIG_NAME),
            self.param(p.HW_VERSION), tuple(b for b in dla_block_e if block_mask >> int(b) & 1),
            tuple(q for q in dla_precision_e if precision_mask >> int(q) & 1), self.param(p.MEMORY_BYTES),
            tuple(cu.name for cu in units), tuple(cu.arguments for cu in units),
            next((cu.name for cu in units if cu.engine), None))

    def ring(self) -> ClientRing | None:
        """This file's submission ring, set up on first use; None without one (see the port)."""
        if not self._ring_tried:
            with self.lock:
                if not self._ring_tried and self.fd >= 0:
                    self._ring = ClientRing.open(self)
                    self._ring_tried = True
        ring = self._ring
        return None if ring is None or ring.broken else ring

    def close(self) -> None:
        with self.lock:
            if self.fd < 0:
                return
            fd, self.fd = self.fd, -1
            mems, self.mems = list(self.mems.values()), {}
            ring, self._ring, self._ring_tried = self._ring, None, True
        for m in mems:
            m.unmap()
        os.close(fd)  # the daemon aborts this context's jobs and frees its buffers
        if ring is not None:
            ring.close()
