"""The ioctl commands of the pydla KMD on Linux and the errno <-> NvError mapping both sides share.

A command is ``_IOWR('d', nr, struct)`` with ``nr`` from ``dla_ioctl_e`` and the argument struct of
the ``dla_uapi`` binary contract (``pydla/deviceapi/specs/dla_uapi.yaml``; C header
``pydla/dla_uapi.h``). FUSE passes "restricted" ioctls only: direction and size come from the command
number alone, so every command carries its struct in and out.

Usage::

    cmd = COMMANDS[U.dla_ioctl_e.BO_CREATE]
    fcntl.ioctl(fd, cmd, buf, True)
"""

from __future__ import annotations

import ctypes
import errno
from typing import Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import NvError

IOC_MAGIC = ord("d")
_IOC_WRITE, _IOC_READ = 1, 2
MAX_ADDRESSES = 4096
MAX_FENCES = 64

STRUCTS: dict[int, Any] = {
    U.dla_ioctl_e.HANDSHAKE: U.dla_handshake_t, U.dla_ioctl_e.GET_PARAM: U.dla_get_param_t,
    U.dla_ioctl_e.BO_CREATE: U.dla_bo_create_t, U.dla_ioctl_e.BO_INFO: U.dla_bo_info_t,
    U.dla_ioctl_e.BO_DESTROY: U.dla_bo_destroy_t, U.dla_ioctl_e.SUBMIT: U.dla_submit_t,
    U.dla_ioctl_e.WAIT: U.dla_wait_t, U.dla_ioctl_e.SYNC_CREATE: U.dla_sync_create_t,
    U.dla_ioctl_e.SYNC_SIGNAL: U.dla_sync_signal_t, U.dla_ioctl_e.SYNC_QUERY: U.dla_sync_query_t,
    U.dla_ioctl_e.SYNC_DESTROY: U.dla_sync_destroy_t, U.dla_ioctl_e.PREPARE: U.dla_prepare_t,
    U.dla_ioctl_e.SUBMIT_PREPARED: U.dla_submit_prepared_t,
    U.dla_ioctl_e.RELEASE_PREPARED: U.dla_release_prepared_t,
    U.dla_ioctl_e.RING_SETUP: U.dla_ring_setup_t,
    U.dla_ioctl_e.CU_OPEN: U.dla_cu_context_t, U.dla_ioctl_e.CU_CLOSE: U.dla_cu_context_t,
    U.dla_ioctl_e.CU_REG_READ: U.dla_cu_reg_t, U.dla_ioctl_e.CU_REG_WRITE: U.dla_cu_reg_t,
    U.dla_ioctl_e.CU_STREAM_WRITE: U.dla_cu_stream_t, U.dla_ioctl_e.CU_STREAM_READ: U.dla_cu_stream_t,
    U.dla_ioctl_e.CU_QUERY: U.dla_cu_query_t, U.dla_ioctl_e.CU_SUBMIT: U.dla_cu_submit_t,
    U.dla_ioctl_e.PREPARE_ARGS: U.dla_prepare_args_t,
    U.dla_ioctl_e.TRACE_START: U.dla_trace_start_t, U.dla_ioctl_e.TRACE_READ: U.dla_trace_read_t,
    U.dla_ioctl_e.TRACE_STOP: U.dla_trace_read_t, U.dla_ioctl_e.CU_ARGS: U.dla_cu_args_t,
    U.dla_ioctl_e.PREPARE_NVDLA: U.dla_prepare_nvdla_t,
}
INLINE_FENCES = 4  # fences SUBMIT_PREPARED carries in its struct, each way
MAX_STREAM_BYTES = 1 << 20  # the most one CU_STREAM_WRITE / CU_STREAM_READ moves
MAX_STREAM_TIMEOUT_MS = 3_600_000  # a stream call's timeout (the KMD's bound; one WAIT takes less)
MAX_CU_ARGS = 64  # CU_SUBMIT's arguments (a buffer is two words; the KMD bounds the words too)
MAX_SCALARS = 64  # PREPARE_ARGS's scalar arguments (the KMD's own bound: pydla.kmd.cu.MAX_SCALARS)


def iowr(nr: int, size: int) -> int:
    """``_IOWR(IOC_MAGIC, nr, size)`` as <asm-generic/ioctl.h> encodes it."""
    return ((_IOC_READ | _IOC_WRITE) << 30) | (size << 16) | (IOC_MAGIC << 8) | nr


COMMANDS: dict[int, int] = {int(nr): iowr(int(nr), ctypes.sizeof(s)) for nr, s in STRUCTS.items()}
BY_COMMAND: dict[int, int] = {cmd: nr for nr, cmd in COMMANDS.items()}

# What a failed request answers (the daemon) and what a client makes of an errno; the message rides
# along in LAST_ERROR (GET_PARAM) or in the WAIT struct.
ERRNO: dict[NvError, int] = {
    NvError.BadParameter: errno.EINVAL, NvError.BadValue: errno.EINVAL, NvError.InvalidSize: errno.EINVAL,
    NvError.CountMismatch: errno.EINVAL, NvError.InvalidAddress: errno.EFAULT,
    NvError.InsufficientMemory: errno.ENOMEM, NvError.Busy: errno.EBUSY, NvError.Timeout: errno.ETIMEDOUT,
    NvError.NotSupported: errno.EOPNOTSUPP, NvError.InvalidState: errno.EBADFD,
    NvError.VersionMismatch: errno.EPROTO, NvError.Disconnected: errno.ECONNABORTED,
    NvError.ResourceError: errno.EIO, NvError.NotInitialized: errno.EPROTO,
}
NVERROR: dict[int, NvError] = {
    errno.EINVAL: NvError.BadParameter, errno.EPERM: NvError.BadParameter, errno.ENOENT: NvError.BadParameter,
    errno.EFAULT: NvError.InvalidAddress, errno.ENOMEM: NvError.InsufficientMemory, errno.EBUSY: NvError.Busy,
    errno.ETIMEDOUT: NvError.Timeout, errno.EOPNOTSUPP: NvError.NotSupported,
    errno.EBADFD: NvError.InvalidState, errno.EPROTO: NvError.VersionMismatch,
    errno.ENOTTY: NvError.NotSupported,
    errno.ECONNABORTED: NvError.Disconnected, errno.ENOTCONN: NvError.Disconnected,
    errno.EINTR: NvError.Disconnected, errno.EIO: NvError.IoctlFailed, errno.EBADF: NvError.BadParameter,
    errno.EDQUOT: NvError.InsufficientMemory, errno.EAGAIN: NvError.Busy,
}


def text(value: str, size: int) -> bytes:
    """``value`` as a NUL-terminated field of ``size`` bytes (cut at a character boundary)."""
    raw = value.encode("utf-8", "replace")[:size - 1]
    return raw.decode("utf-8", "ignore").encode()


def untext(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
