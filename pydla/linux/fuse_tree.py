"""The directory a FuseServer shows: one flat directory of named files, and the FUSE requests that only
look at it (LOOKUP, GETATTR, SETATTR, STATFS, OPENDIR, READDIR). The files never change while the
server runs, so every reply is built once.

A file's mode is its handler's ``file_mode`` attribute when it has one (a read-only status file:
0o444), else the server's default.

Usage::

    tree = FuseTree({"dla0": handler}, file_mode=0o666, attr_timeout=10.0)
    entry = tree.lookup(hdr, payload)
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import time
from collections.abc import Mapping
from typing import Any

from pydla.linux import fuse_protocol as fp
from pydla.linux.fuse_context import FileHandler, FuseError


class Node:
    """One inode: the root directory (nodeid 1) or a file."""

    __slots__ = ("attr", "entry", "handler", "is_dir", "name", "nodeid")

    def __init__(self, nodeid: int, name: str, handler: FileHandler | None, mode: int,
                 attr_timeout: float) -> None:
        self.nodeid, self.name, self.handler = nodeid, name, handler
        self.is_dir = stat.S_ISDIR(mode)
        now = int(time.time())
        a = fp.fuse_attr(ino=nodeid, mode=mode, nlink=2 if self.is_dir else 1, uid=os.getuid(),
                         gid=os.getgid(), atime=now, mtime=now, ctime=now, blksize=4096)
        secs, nsec = int(attr_timeout), int((attr_timeout % 1) * 1e9)
        self.attr = bytes(fp.fuse_attr_out(attr_valid=secs, attr_valid_nsec=nsec, attr=a))
        self.entry = bytes(fp.fuse_entry_out(nodeid=nodeid, generation=1, entry_valid=secs,
                                             attr_valid=secs, entry_valid_nsec=nsec,
                                             attr_valid_nsec=nsec, attr=a))


def payload(data: memoryview, cls: type[Any]) -> Any:
    """The fixed-size argument ``cls`` at the start of ``data``, or EINVAL if it is too short."""
    if len(data) < ctypes.sizeof(cls):
        raise FuseError(errno.EINVAL, f"{cls.__name__}: {len(data)} bytes, need {ctypes.sizeof(cls)}")
    return cls.from_buffer_copy(data[:ctypes.sizeof(cls)])


class FuseTree:
    """The root directory and its files (see the module docstring)."""

    def __init__(self, files: Mapping[str, FileHandler], *, file_mode: int, attr_timeout: float,
                 max_write: int) -> None:
        self.max_write = max_write
        self.nodes: dict[int, Node] = {
            fp.FUSE_ROOT_ID: Node(fp.FUSE_ROOT_ID, "", None, stat.S_IFDIR | 0o755, attr_timeout)}
        self.by_name: dict[bytes, Node] = {}
        for i, fname in enumerate(sorted(files)):
            if not fname or fname in (".", "..") or "/" in fname or "\0" in fname \
                    or len(os.fsencode(fname)) > 255:
                raise ValueError(f"file name {fname!r}: must be 1..255 bytes without '/' or NUL")
            mode = getattr(files[fname], "file_mode", file_mode)
            node = Node(fp.FUSE_ROOT_ID + 1 + i, fname, files[fname], stat.S_IFREG | (mode & 0o777),
                        attr_timeout)
            self.nodes[node.nodeid] = node
            self.by_name[os.fsencode(fname)] = node

    def node(self, nodeid: int) -> Node:
        node = self.nodes.get(nodeid)
        if node is None:
            raise FuseError(errno.ENOENT, f"no node {nodeid}")
        return node

    def lookup(self, hdr: fp.fuse_in_header, data: memoryview) -> bytes:
        if hdr.nodeid != fp.FUSE_ROOT_ID:
            raise FuseError(errno.ENOTDIR if hdr.nodeid in self.nodes else errno.ENOENT)
        raw = bytes(data[:257])
        end = raw.find(b"\0")
        if end < 0:
            raise FuseError(errno.ENAMETOOLONG if len(raw) > 256 else errno.EINVAL, "unterminated name")
        node = self.by_name.get(raw[:end])
        if node is None:
            raise FuseError(errno.ENOENT)
        return node.entry

    def getattr(self, hdr: fp.fuse_in_header, data: memoryview) -> bytes:
        return self.node(hdr.nodeid).attr

    def setattr(self, hdr: fp.fuse_in_header, data: memoryview) -> bytes:
        self.node(hdr.nodeid)
        raise FuseError(errno.EPERM, "the files' attributes are fixed")

    def statfs(self, hdr: fp.fuse_in_header, data: memoryview) -> bytes:
        return bytes(fp.fuse_statfs_out(st=fp.fuse_kstatfs(bsize=4096, frsize=4096, namelen=255,
                                                            files=len(self.nodes))))

    def opendir(self, hdr: fp.fuse_in_header, data: memoryview) -> bytes:
        if not self.node(hdr.nodeid).is_dir:
            raise FuseError(errno.ENOTDIR)
        return bytes(fp.fuse_open_out(fh=0))

    def readdir(self, hdr: fp.fuse_in_header, data: memoryview) -> bytes:
        arg = payload(data, fp.fuse_read_in)
        if hdr.nodeid != fp.FUSE_ROOT_ID:
            raise FuseError(errno.ENOTDIR)
        entries = [(fp.FUSE_ROOT_ID, b".", stat.S_IFDIR), (fp.FUSE_ROOT_ID, b"..", stat.S_IFDIR)]
        entries += [(n.nodeid, name, stat.S_IFREG) for name, n in self.by_name.items()]
        out, limit = bytearray(), min(arg.size, self.max_write)
        # The offset is ours: the index of the next entry, as returned in fuse_dirent.off.
        for i in range(min(arg.offset, len(entries)), len(entries)):
            ino, name, mode = entries[i]
            size = fp.dirent_size(len(name))
            if len(out) + size > limit:
                break
            d = bytes(fp.fuse_dirent(ino=ino, off=i + 1, namelen=len(name), type=mode >> 12))
            out += (d + name).ljust(size, b"\0")
        return bytes(out)
