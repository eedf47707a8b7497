"""The daemon's buffer-object commands: BO_CREATE, BO_INFO, BO_DESTROY.

Buffer memory is the client's own memfd, which the daemon takes with pidfd_getfd (see
:mod:`pydla.uapi.shm`): a client never holds a way to reach another's buffers. A new buffer counts
against the file's quotas (buffers and bytes: EDQUOT beyond) before anything reaches the KMD; its
size is 1..the device memory, its descriptor a sealed memfd of at least that size (EINVAL otherwise,
EBADF when the caller has no such descriptor).

Usage (inside :class:`~pydla.linux.daemon.KmdDaemon`)::

    self._handlers.update(BufferHandlers(self).handlers())
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.linux.clients import Client
from pydla.linux.fuse_context import FuseError, RequestContext
from pydla.linux.process_memory import take_process_fd
from pydla.uapi.shm import check_shared_fd

if TYPE_CHECKING:
    from pydla.linux.daemon import KmdDaemon


class BufferHandlers:
    """The handlers; ``daemon`` provides the client table and the device memory's size."""

    def __init__(self, daemon: KmdDaemon) -> None:
        self.daemon = daemon
        self.clients = daemon.clients

    def handlers(self) -> dict[int, Callable[[Client, RequestContext, Any], int]]:
        """For the daemon's table."""
        e = U.dla_ioctl_e
        return {e.BO_CREATE: self.create, e.BO_INFO: self.info, e.BO_DESTROY: self.destroy}

    def create(self, client: Client, ctx: RequestContext, a: Any) -> int:
        size, limit = int(a.size), self.daemon.memory_bytes
        if not 0 < size <= limit:
            raise FuseError(errno.EINVAL, f"BO_CREATE: size {size} (1..{limit})")
        self.clients.reserve(client, size)
        try:
            try:
                fd = take_process_fd(ctx.pid, int(a.fd))
            except OSError as e:
                raise FuseError(errno.EBADF, f"BO_CREATE: descriptor {a.fd} of process {ctx.pid}: "
                                             f"{os.strerror(e.errno or 0)}") from None
            try:
                check_shared_fd(fd, size)
            except ValueError as e:
                os.close(fd)
                raise FuseError(errno.EINVAL, f"BO_CREATE: descriptor {a.fd}: {e}") from None
            handle = client.kmd.bo_create(client.ctx, size, fd=fd)  # owns fd from here on
        except BaseException:
            self.clients.unreserve(client, size)
            raise
        a.handle, a.fd = self.clients.add_buffer(client, handle, size), -1
        a.iova = client.kmd.bo_iova(client.ctx, handle)
        return 0

    def info(self, client: Client, ctx: RequestContext, a: Any) -> int:
        handle = self.clients.buffer(client, a.handle)
        a.size = client.kmd.bo_size(client.ctx, handle)
        a.iova = client.kmd.bo_iova(client.ctx, handle)
        return 0

    def destroy(self, client: Client, ctx: RequestContext, a: Any) -> int:
        handle = self.clients.buffer(client, a.handle)
        client.kmd.bo_destroy(client.ctx, handle)  # Busy while a job uses it
        self.clients.drop_buffer(client, a.handle)
        return 0
