"""Mounting a FUSE file system with mount(2) through ctypes, and taking it down again.

No libfuse and no fusermount: the caller needs CAP_SYS_ADMIN (root) and ``/dev/fuse``.

Usage::

    check_mountpoint(path, "fuse.pydla")  # clears our own stale mount; refuses others, non-empty dirs
    fd = open_fuse_device()
    mount_fuse(fd, path, "pydla")
    ...
    unmount(path)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import stat
import tempfile
import threading
from functools import lru_cache
from typing import NamedTuple

from pydla.linux.fuse_context import log

MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2
FUSE_DEVICE = "/dev/fuse"
FUSECTL_DIR = "/sys/fs/fuse/connections"


class FuseMountError(OSError):
    """Mounting (or preparing to mount) failed; ``errno`` says why, the message what to do.

    Usage: ``except FuseMountError as e: print(e.errno, e)``
    """

    def __init__(self, err: int, message: str) -> None:
        super().__init__(err, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class StaleMountError(FuseMountError):
    """The mount point is a FUSE mount whose daemon is gone (stat gives ENOTCONN)."""


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    libc.mount.restype = ctypes.c_int
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.umount2.restype = ctypes.c_int
    return libc


def _mount(source: str, target: str, fstype: str, flags: int, data: str | None) -> None:
    rc = _libc().mount(source.encode(), os.fsencode(target), fstype.encode(), flags,
                       None if data is None else data.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount({source!r}, {target!r}, {fstype!r}): {os.strerror(err)}")


def resolve_mountpoint(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)`` that never stats ``path`` itself when it is a mount point.

    Resolving a mount point looks up the mounted file system's root: for a FUSE mount that is a
    request to its server, which never comes back when the server is stopped. Mount points are
    directories (never symlinks) and mountinfo lists them resolved, so when the resolved parent
    joined with the last name is one, that is the answer.

    Usage: ``real = resolve_mountpoint("mnt")``
    """
    absolute = os.path.abspath(os.fspath(path))
    head, tail = os.path.split(absolute)
    candidate = os.path.join(os.path.realpath(head), tail) if tail else absolute
    if any(m.mount_point == candidate for m in list_mounts()):
        return candidate
    return os.path.realpath(candidate)


def check_mountpoint(path: str, own_fstype: str | None = None, *, probe_timeout: float = 2.0) -> int:
    """Raise unless ``path`` is an existing, empty directory that is not a mount point; returns how
    many stale mounts of ``own_fstype`` it cleared from it first.

    A FUSE mount whose server died without unmounting (a daemon killed with SIGKILL) stays until it
    is unmounted: a directory listing there answers ENOTCONN (stat may not, from cached attributes).
    When its type is ``own_fstype`` (``fuse.pydla``: ours) it is detached with umount2(MNT_DETACH)
    and logged; anything else raises StaleMountError with the command that clears it. A live mount,
    or one whose server does not answer within ``probe_timeout`` seconds, is never touched.

    Usage: ``check_mountpoint("/run/pydla", "fuse.pydla")``
    """
    real = resolve_mountpoint(path)
    cleared = 0
    while (found := find_mount(real)) is not None:
        fstype = found[2]
        state = _probe_listing(real, probe_timeout)
        if state == "dead" and own_fstype is not None and fstype == own_fstype and cleared < 8:
            try:
                unmount(real)
            except OSError as e:
                raise StaleMountError(e.errno or errno.EPERM,
                                      f"{path} is a stale mount of {fstype} (its daemon is gone) and "
                                      f"could not be cleared ({os.strerror(e.errno or 0)}): run "
                                      f"`umount -l {path}` as root and start again") from None
            cleared += 1
            log.warning("cleared a stale %s mount at %s: its daemon had exited without unmounting",
                        fstype, path)
            continue
        if state == "dead":
            raise StaleMountError(errno.ENOTCONN, f"{path} is a stale FUSE mount of type {fstype} (its "
                                  f"daemon is gone); clear it with `umount -l {path}` and start again")
        if state == "hung":
            raise FuseMountError(errno.EBUSY, f"{path} is a mount of type {fstype} whose server does not "
                                 f"answer within {probe_timeout:g} s (stopped or hung); stop it, or run "
                                 f"`umount -l {path}` if it is yours")
        if own_fstype is not None and fstype == own_fstype:
            raise FuseMountError(errno.EBUSY, f"{path} is served by a running daemon already "
                                 f"(`pydla devices {path}` shows it): stop that one first, or choose "
                                 "another directory")
        raise FuseMountError(errno.EBUSY, f"{path} is already a mount point (type {fstype}): choose "
                             "another directory")
    try:
        st = os.stat(path)
    except OSError as e:
        raise FuseMountError(e.errno or errno.EINVAL, f"mount point {path}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise FuseMountError(errno.ENOTDIR, f"mount point {path} is not a directory")
    try:
        entries = sorted(os.listdir(path))
    except OSError as e:
        raise FuseMountError(e.errno or errno.EACCES, f"mount point {path}: {e.strerror}") from None
    if entries:
        # Mounting would hide these files for as long as the mount lives.
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise FuseMountError(errno.ENOTEMPTY, f"mount point {path} is not empty (it holds {shown}); "
                             "the served files would hide them: give an empty directory "
                             f"(`mkdir` a new one) or empty this one")
    return cleared


def _probe_listing(path: str, timeout: float) -> str:
    """"live", "dead" (ENOTCONN / ECONNABORTED) or "hung": what listing ``path`` answers.

    A listing, not a stat: after its server died, a FUSE mount may still answer stat from the
    attributes the kernel cached, but every directory open is a request. It runs in a helper thread
    so that a stopped server cannot block the caller longer than ``timeout``."""
    result: list[str] = []

    def probe() -> None:
        try:
            os.listdir(path)
            result.append("live")
        except OSError as e:
            result.append("dead" if e.errno in (errno.ENOTCONN, errno.ECONNABORTED) else "live")

    t = threading.Thread(target=probe, name="pydla-mount-probe", daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else "hung"


def _unescape(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


class MountEntry(NamedTuple):
    """One line of /proc/self/mountinfo: where, which file system type and source, device number."""

    mount_point: str
    fstype: str
    source: str
    major: int
    minor: int


def list_mounts(fstype: str | None = None) -> list[MountEntry]:
    """The mounts this process sees (of type ``fstype`` only, if given), in mount order. Reading
    mountinfo never sends a request to any FUSE server.

    Usage: ``[m.mount_point for m in list_mounts("fuse.pydla")]``
    """
    found: list[MountEntry] = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 7 or "-" not in fields[6:]:
                continue
            rest = fields[fields.index("-", 6) + 1:]
            major, _, minor = fields[2].partition(":")
            kind = rest[0] if rest else ""
            if fstype is not None and kind != fstype:
                continue
            with contextlib.suppress(ValueError):
                found.append(MountEntry(_unescape(fields[4]), kind, _unescape(rest[1]) if len(rest) > 1
                                        else "", int(major), int(minor)))
    return found


def find_mount(path: str) -> tuple[int, int, str] | None:
    """(major, minor, fstype) of the topmost mount at ``path``, or None; read from mountinfo.

    ``path`` must already be canonical (``os.path.realpath``, resolved before mounting): resolving it
    here would stat the mount, which sends the server a request. Reading /proc/self/mountinfo never
    touches the mount itself, so this is safe for a server to call on its own mount point.

    Usage: ``_, conn_id, fstype = find_mount(os.path.realpath(path))``
    """
    here = [m for m in list_mounts() if m.mount_point == path]
    return (here[-1].major, here[-1].minor, here[-1].fstype) if here else None


def open_fuse_device() -> int:
    """Open /dev/fuse read-write, close-on-exec; a clear FuseMountError when it is not there.

    Usage: ``fd = open_fuse_device()``
    """
    try:
        return os.open(FUSE_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        why = "is missing (FUSE not in this kernel or container)" if e.errno == errno.ENOENT else \
              f"cannot be opened: {e.strerror}"
        raise FuseMountError(e.errno or errno.ENODEV, f"{FUSE_DEVICE} {why}") from None


def mount_fuse(devfd: int, mountpoint: str, name: str, *, allow_other: bool = True,
               default_permissions: bool = False) -> None:
    """mount(2) a FUSE file system of type ``fuse.<name>`` at ``mountpoint`` served through ``devfd``.

    Flags MS_NOSUID|MS_NODEV; the root is a directory owned by the caller's uid/gid.

    Usage: ``mount_fuse(fd, "/run/pydla", "pydla")``
    """
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"file system name {name!r}: use letters, digits, '-', '_' or '.'")
    opts = [f"fd={devfd}", "rootmode=40000", f"user_id={os.getuid()}", f"group_id={os.getgid()}"]
    if allow_other:
        opts.append("allow_other")
    if default_permissions:
        opts.append("default_permissions")
    try:
        _mount(name, mountpoint, f"fuse.{name}", MS_NOSUID | MS_NODEV, ",".join(opts))
    except OSError as e:
        hint = " (mounting FUSE without fusermount needs CAP_SYS_ADMIN, i.e. root)" \
            if e.errno == errno.EPERM else ""
        raise FuseMountError(e.errno or errno.EIO, f"{e.strerror}{hint}") from None


def unmount(mountpoint: str) -> bool:
    """umount2(MNT_DETACH): True when something was unmounted, False when it was not a mount.

    Usage: ``unmount("/run/pydla")``
    """
    if _libc().umount2(os.fsencode(mountpoint), MNT_DETACH) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOENT):
        return False
    raise OSError(err, f"umount2({mountpoint!r}, MNT_DETACH): {os.strerror(err)}")


def abort_connection(conn_id: int) -> bool:
    """Abort FUSE connection ``conn_id`` (the mount's device minor) through the fusectl file system.

    Aborting fails every request in flight with ECONNABORTED, later ones with ENOTCONN, and wakes the
    server's readers with ENODEV: the one way to stop a server whose files are still open. When
    fusectl is not mounted at /sys/fs/fuse/connections it is mounted on a private temporary
    directory for the write and unmounted again. Returns False when the connection is already gone.

    Usage: ``abort_connection(find_mount(path)[1])``
    """
    def write_abort(base: str) -> bool:
        try:
            with open(os.path.join(base, str(conn_id), "abort"), "w") as f:
                f.write("1")
            return True
        except FileNotFoundError:
            return False

    if os.path.isdir(os.path.join(FUSECTL_DIR, str(conn_id))):
        return write_abort(FUSECTL_DIR)
    with tempfile.TemporaryDirectory(prefix="pydla-fusectl-") as tmp:
        _mount("fusectl", tmp, "fusectl", MS_NOSUID | MS_NODEV, None)
        try:
            return write_abort(tmp)
        finally:
            unmount(tmp)
