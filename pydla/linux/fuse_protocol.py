"""The kernel FUSE wire protocol: opcodes, flags and structures, as ctypes.

Names follow the kernel's ``include/uapi/linux/fuse.h`` (struct ``fuse_in_header`` is
``fuse_in_header`` here, ``FUSE_IOCTL`` is ``FUSE_IOCTL``). Only what a server of a flat directory of
ioctl-driven files needs is declared. Every structure is little-endian native layout with explicit
padding, as in the header, and its size is asserted below so that a typo cannot change the wire format.

Usage::

    hdr = fuse_in_header.from_buffer_copy(buf, 0)
    if hdr.opcode == FUSE_IOCTL: arg = fuse_ioctl_in.from_buffer_copy(buf, IN_HEADER_SIZE)
"""

from __future__ import annotations

import ctypes
import enum
import struct

u16, u32, u64, i32 = ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32

#: FUSE_KERNEL_VERSION: the major version this server speaks.
FUSE_KERNEL_VERSION = 7
#: The newest minor this server knows the layouts of (7.45: kernel 6.18). The reply carries
#: min(kernel minor, this): every structure used here has the same layout from 7.23 on.
FUSE_KERNEL_MINOR_VERSION = 45
#: Oldest kernel minor accepted: 7.23 gave fuse_init_out its 64-byte form and time_gran.
FUSE_MIN_KERNEL_MINOR = 23
FUSE_ROOT_ID = 1
FUSE_MIN_READ_BUFFER = 8192
#: Bit 0 of an INTERRUPT request's unique: the unique of the request it interrupts, with this bit.
FUSE_INT_REQ_BIT = 1


class FuseOpcode(enum.IntEnum):
    """``enum fuse_opcode``."""

    FUSE_LOOKUP = 1
    FUSE_FORGET = 2  # no reply
    FUSE_GETATTR = 3
    FUSE_SETATTR = 4
    FUSE_READLINK = 5
    FUSE_SYMLINK = 6
    FUSE_MKNOD = 8
    FUSE_MKDIR = 9
    FUSE_UNLINK = 10
    FUSE_RMDIR = 11
    FUSE_RENAME = 12
    FUSE_LINK = 13
    FUSE_OPEN = 14
    FUSE_READ = 15
    FUSE_WRITE = 16
    FUSE_STATFS = 17
    FUSE_RELEASE = 18
    FUSE_FSYNC = 20
    FUSE_SETXATTR = 21
    FUSE_GETXATTR = 22
    FUSE_LISTXATTR = 23
    FUSE_REMOVEXATTR = 24
    FUSE_FLUSH = 25
    FUSE_INIT = 26
    FUSE_OPENDIR = 27
    FUSE_READDIR = 28
    FUSE_RELEASEDIR = 29
    FUSE_FSYNCDIR = 30
    FUSE_GETLK = 31
    FUSE_SETLK = 32
    FUSE_SETLKW = 33
    FUSE_ACCESS = 34
    FUSE_CREATE = 35
    FUSE_INTERRUPT = 36  # no reply expected (only EAGAIN to requeue it)
    FUSE_BMAP = 37
    FUSE_DESTROY = 38
    FUSE_IOCTL = 39
    FUSE_POLL = 40
    FUSE_NOTIFY_REPLY = 41  # no reply: it answers a FUSE_NOTIFY_RETRIEVE the server sent
    FUSE_BATCH_FORGET = 42  # no reply
    FUSE_FALLOCATE = 43
    FUSE_READDIRPLUS = 44
    FUSE_RENAME2 = 45
    FUSE_LSEEK = 46
    FUSE_COPY_FILE_RANGE = 47
    FUSE_SETUPMAPPING = 48
    FUSE_REMOVEMAPPING = 49
    FUSE_SYNCFS = 50
    FUSE_TMPFILE = 51
    FUSE_STATX = 52


#: Opcodes the kernel expects no reply to (a reply would be an error on the device).
NO_REPLY_OPCODES = frozenset({FuseOpcode.FUSE_FORGET, FuseOpcode.FUSE_BATCH_FORGET,
                              FuseOpcode.FUSE_INTERRUPT, FuseOpcode.FUSE_NOTIFY_REPLY})

# INIT flags (fuse_init_in.flags / fuse_init_out.flags); bits 32.. go to flags2 with FUSE_INIT_EXT.
FUSE_ASYNC_READ = 1 << 0
FUSE_BIG_WRITES = 1 << 5
FUSE_PARALLEL_DIROPS = 1 << 18
FUSE_ABORT_ERROR = 1 << 21
FUSE_MAX_PAGES = 1 << 22
FUSE_INIT_EXT = 1 << 30

# fuse_open_out.open_flags
FOPEN_DIRECT_IO = 1 << 0
FOPEN_KEEP_CACHE = 1 << 1
FOPEN_NONSEEKABLE = 1 << 2
FOPEN_CACHE_DIR = 1 << 3
FOPEN_STREAM = 1 << 4
FOPEN_NOFLUSH = 1 << 5
FOPEN_PASSTHROUGH = 1 << 7

# fuse_ioctl_in.flags
FUSE_IOCTL_COMPAT = 1 << 0
FUSE_IOCTL_UNRESTRICTED = 1 << 1
FUSE_IOCTL_RETRY = 1 << 2
FUSE_IOCTL_32BIT = 1 << 3
FUSE_IOCTL_DIR = 1 << 4
FUSE_IOCTL_COMPAT_X32 = 1 << 5

#: A restricted ioctl's size comes from the 14-bit _IOC size field of the command number.
IOCTL_MAX_RESTRICTED_SIZE = (1 << 14) - 1


class _Struct(ctypes.Structure):
    _pack_ = 8


class fuse_in_header(_Struct):
    _fields_ = [("len", u32), ("opcode", u32), ("unique", u64), ("nodeid", u64), ("uid", u32),
                ("gid", u32), ("pid", u32), ("total_extlen", u16), ("padding", u16)]


class fuse_out_header(_Struct):
    _fields_ = [("len", u32), ("error", i32), ("unique", u64)]


class fuse_attr(_Struct):
    _fields_ = [("ino", u64), ("size", u64), ("blocks", u64), ("atime", u64), ("mtime", u64),
                ("ctime", u64), ("atimensec", u32), ("mtimensec", u32), ("ctimensec", u32),
                ("mode", u32), ("nlink", u32), ("uid", u32), ("gid", u32), ("rdev", u32),
                ("blksize", u32), ("flags", u32)]


class fuse_kstatfs(_Struct):
    _fields_ = [("blocks", u64), ("bfree", u64), ("bavail", u64), ("files", u64), ("ffree", u64),
                ("bsize", u32), ("namelen", u32), ("frsize", u32), ("padding", u32),
                ("spare", u32 * 6)]


class fuse_init_in(_Struct):
    """The 64-byte form (7.36+); older kernels send only the first 16 bytes (up to ``flags``)."""

    _fields_ = [("major", u32), ("minor", u32), ("max_readahead", u32), ("flags", u32),
                ("flags2", u32), ("unused", u32 * 11)]


#: fuse_init_in up to and including ``flags``: what every kernel since 7.6 sends.
FUSE_COMPAT_INIT_IN_SIZE = 16


class fuse_init_out(_Struct):
    _fields_ = [("major", u32), ("minor", u32), ("max_readahead", u32), ("flags", u32),
                ("max_background", u16), ("congestion_threshold", u16), ("max_write", u32),
                ("time_gran", u32), ("max_pages", u16), ("map_alignment", u16), ("flags2", u32),
                ("max_stack_depth", u32), ("request_timeout", u16), ("unused", u16 * 11)]


class fuse_entry_out(_Struct):
    _fields_ = [("nodeid", u64), ("generation", u64), ("entry_valid", u64), ("attr_valid", u64),
                ("entry_valid_nsec", u32), ("attr_valid_nsec", u32), ("attr", fuse_attr)]


class fuse_getattr_in(_Struct):
    _fields_ = [("getattr_flags", u32), ("dummy", u32), ("fh", u64)]


class fuse_attr_out(_Struct):
    _fields_ = [("attr_valid", u64), ("attr_valid_nsec", u32), ("dummy", u32), ("attr", fuse_attr)]


class fuse_open_in(_Struct):
    _fields_ = [("flags", u32), ("open_flags", u32)]


class fuse_open_out(_Struct):
    _fields_ = [("fh", u64), ("open_flags", u32), ("backing_id", i32)]


class fuse_release_in(_Struct):
    _fields_ = [("fh", u64), ("flags", u32), ("release_flags", u32), ("lock_owner", u64)]


class fuse_flush_in(_Struct):
    _fields_ = [("fh", u64), ("unused", u32), ("padding", u32), ("lock_owner", u64)]


class fuse_read_in(_Struct):
    _fields_ = [("fh", u64), ("offset", u64), ("size", u32), ("read_flags", u32),
                ("lock_owner", u64), ("flags", u32), ("padding", u32)]


class fuse_write_in(_Struct):
    _fields_ = [("fh", u64), ("offset", u64), ("size", u32), ("write_flags", u32),
                ("lock_owner", u64), ("flags", u32), ("padding", u32)]


class fuse_statfs_out(_Struct):
    _fields_ = [("st", fuse_kstatfs)]


class fuse_access_in(_Struct):
    _fields_ = [("mask", u32), ("padding", u32)]


class fuse_interrupt_in(_Struct):
    _fields_ = [("unique", u64)]


class fuse_ioctl_in(_Struct):
    _fields_ = [("fh", u64), ("flags", u32), ("cmd", u32), ("arg", u64), ("in_size", u32),
                ("out_size", u32)]


class fuse_ioctl_out(_Struct):
    _fields_ = [("result", i32), ("flags", u32), ("in_iovs", u32), ("out_iovs", u32)]


class fuse_dirent(_Struct):
    """Followed by ``namelen`` bytes of name, the whole padded to 8 bytes (FUSE_DIRENT_ALIGN)."""

    _fields_ = [("ino", u64), ("off", u64), ("namelen", u32), ("type", u32)]


IN_HEADER_SIZE = ctypes.sizeof(fuse_in_header)
OUT_HEADER_SIZE = ctypes.sizeof(fuse_out_header)
#: The read buffer must hold fuse_in_header + fuse_write_in + max_write (fs/fuse/dev.c checks it).
READ_BUFFER_OVERHEAD = IN_HEADER_SIZE + ctypes.sizeof(fuse_write_in)

# struct.Struct twins of the structures on the ioctl hot path: unpacking a tuple costs a fraction of
# building a ctypes object. Their sizes are asserted equal to the ctypes layouts below.
IN_HEADER = struct.Struct("<IIQQIIIHH")  # fuse_in_header
IOCTL_IN = struct.Struct("<QIIQII")  # fuse_ioctl_in
OUT_HEADER_IOCTL_OUT = struct.Struct("<IiQiIII")  # fuse_out_header + fuse_ioctl_out
assert IN_HEADER.size == ctypes.sizeof(fuse_in_header) and IOCTL_IN.size == ctypes.sizeof(fuse_ioctl_in)
assert OUT_HEADER_IOCTL_OUT.size == ctypes.sizeof(fuse_out_header) + ctypes.sizeof(fuse_ioctl_out)

_SIZES = {fuse_in_header: 40, fuse_out_header: 16, fuse_attr: 88, fuse_kstatfs: 80, fuse_init_in: 64,
          fuse_init_out: 64, fuse_entry_out: 128, fuse_getattr_in: 16, fuse_attr_out: 104,
          fuse_open_in: 8, fuse_open_out: 16, fuse_release_in: 24, fuse_flush_in: 24, fuse_read_in: 40,
          fuse_write_in: 40, fuse_statfs_out: 80, fuse_access_in: 8, fuse_interrupt_in: 8,
          fuse_ioctl_in: 32, fuse_ioctl_out: 16, fuse_dirent: 24}
for _cls, _size in _SIZES.items():
    assert ctypes.sizeof(_cls) == _size, (_cls.__name__, ctypes.sizeof(_cls), _size)


def dirent_size(namelen: int) -> int:
    """FUSE_DIRENT_SIZE: a fuse_dirent with a name of ``namelen`` bytes, padded to 8.

    Usage: ``dirent_size(4) == 32``
    """
    return (ctypes.sizeof(fuse_dirent) + namelen + 7) & ~7


# Linux _IOC encoding (asm-generic/ioctl.h): nr 8 bits, type 8, size 14, dir 2.
IOC_NONE, IOC_WRITE, IOC_READ = 0, 1, 2


def IOC(direction: int, typ: int, nr: int, size: int) -> int:
    """_IOC(dir, type, nr, size): an ioctl command number.

    Usage: ``cmd = IOWR(ord("d"), 1, 64)``
    """
    if not (0 <= direction <= 3 and 0 <= typ <= 0xFF and 0 <= nr <= 0xFF
            and 0 <= size <= IOCTL_MAX_RESTRICTED_SIZE):
        raise ValueError(f"_IOC({direction}, {typ}, {nr}, {size}): a field is out of range")
    return (direction << 30) | (size << 16) | (typ << 8) | nr


def IOWR(typ: int, nr: int, size: int) -> int:
    """_IOWR(type, nr, size). Usage: ``IOWR(ord("d"), 3, 64)``"""
    return IOC(IOC_READ | IOC_WRITE, typ, nr, size)


def IOR(typ: int, nr: int, size: int) -> int:
    """_IOR(type, nr, size). Usage: ``IOR(ord("d"), 2, 8)``"""
    return IOC(IOC_READ, typ, nr, size)


def IOW(typ: int, nr: int, size: int) -> int:
    """_IOW(type, nr, size). Usage: ``IOW(ord("d"), 4, 16)``"""
    return IOC(IOC_WRITE, typ, nr, size)


def ioc_decode(cmd: int) -> tuple[int, int, int, int]:
    """(dir, type, nr, size) of an ioctl command number.

    Usage: ``direction, typ, nr, size = ioc_decode(cmd)``
    """
    return (cmd >> 30) & 3, (cmd >> 8) & 0xFF, cmd & 0xFF, (cmd >> 16) & IOCTL_MAX_RESTRICTED_SIZE
