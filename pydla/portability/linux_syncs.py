"""The Linux port's sync objects and fences (a part of :class:`~pydla.portability.linux.LinuxPort`):
semaphores are the daemon's sync objects (SYNC_CREATE ... SYNC_DESTROY); a fence wait looks at the
file's submission ring first (a ring job that signals it answers there), then asks the daemon with
WAIT ioctls of at most ``WAIT_SLICE_MS`` each, so that a dead daemon is noticed within a slice.

Usage (inside the Linux port)::

    sem = port.syncs.create_semaphore(device, 0)
    fence = NvDlaFence(sem, 1)
    device, f = checked_fence(port, fence)      # what the port checks of every fence it is given
    port.syncs.wait_fence(device, fence, f, 1000)
"""

from __future__ import annotations

import errno
import time
from typing import Any

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError, WaitTimeout
from pydla.portability.interface import NvDlaFence
from pydla.portability.linux_device import LinuxDevice, LinuxSemaphore, checked_device
from pydla.portability.linux_ring import RING_WAIT_S
from pydla.uapi.ioctl import text, untext

WAIT_SLICE_MS = 1000  # one WAIT ioctl waits at most this long, so a dead daemon is noticed


def checked_fence(port: object, fence: NvDlaFence) -> tuple[LinuxDevice, Any]:
    """The open device of ``fence``'s semaphore and the uAPI's dla_fence_t for it (all checked)."""
    if not isinstance(fence, NvDlaFence):
        raise DlaError(NvError.BadParameter, f"fence: an NvDlaFence, not {fence!r:.80}")
    sem = fence.semaphore
    if not isinstance(sem, LinuxSemaphore) or sem.device.port is not port:
        raise DlaError(NvError.BadParameter, "fence: its semaphore is not one of this port's")
    if sem.destroyed:
        raise DlaError(NvError.BadParameter, f"fence: sync object {sem.sync} was destroyed")
    value = fence.value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise DlaError(NvError.BadParameter, f"fence value {fence.value!r} must be 0..2^64-1")
    return checked_device(port, sem.device), U.dla_fence_t(sync=sem.sync, value=fence.value)


class LinuxSyncs:
    """The sync objects of one port's open device files."""

    def __init__(self, port: object) -> None:
        """``port``: the port whose device files' fences this part takes (compared by identity)."""
        self.port = port

    def create_semaphore(self, device: LinuxDevice, value: int = 0) -> LinuxSemaphore:
        """NvDlaCreateSemaphore on an open ``device``."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
            raise DlaError(NvError.BadParameter, f"semaphore value {value!r} must be 0..2^64-1")
        created = device.ioctl(U.dla_ioctl_e.SYNC_CREATE, U.dla_sync_create_t(initial=value))
        return LinuxSemaphore(device, created.sync)

    def destroy_semaphore(self, semaphore: Any) -> None:
        """NvDlaDestroySemaphore: idempotent, and a no-op once its device is closed."""
        if not isinstance(semaphore, LinuxSemaphore) or semaphore.device.port is not self.port:
            raise DlaError(NvError.BadParameter, "NvDlaDestroySemaphore: not one of this port's semaphores")
        with semaphore.device.lock:
            if semaphore.destroyed or semaphore.device.fd < 0:
                return
            semaphore.destroyed = True
        semaphore.device.ioctl(U.dla_ioctl_e.SYNC_DESTROY, U.dla_sync_destroy_t(sync=semaphore.sync))

    def fence(self, fence: NvDlaFence) -> tuple[LinuxDevice, Any]:
        """:func:`checked_fence` of this part's port."""
        return checked_fence(self.port, fence)

    def fence_array(self, fences: list[NvDlaFence]) -> Any:
        """The uAPI's array of dla_fence_t for ``fences`` (at least one element, for its address)."""
        array = (U.dla_fence_t * max(1, len(fences)))()
        for j, f in enumerate(fences):
            array[j] = self.fence(f)[1]
        return array

    def inline_fences(self, args: Any, pre_fences: list[NvDlaFence], post_fences: list[NvDlaFence]) -> None:
        """Fill the fence arrays a struct carries inline (its counts are the caller's, checked)."""
        for j, f in enumerate(pre_fences):
            args.pre_fences[j] = self.fence(f)[1]
        for j, f in enumerate(post_fences):
            args.post_fences[j] = self.fence(f)[1]

    @staticmethod
    def note_completed(post_fences: list[NvDlaFence]) -> None:
        """The daemon said the job already ended: its post-fences are known to be reached."""
        for f in post_fences:
            f.semaphore.note_reached(f.value)

    def wait_fence(self, device: LinuxDevice, fence: NvDlaFence, f: Any, timeout_ms: float) -> None:
        """NvDlaWaitFence for ``fence``, checked (:func:`checked_fence`) as ``device`` and ``f`` (see
        the module)."""
        if fence.semaphore.reached >= f.value:
            return  # already known to be reached
        ring = device.ring()
        if ring is not None and ring.wait_fence(fence.semaphore, f.value,
                                                min(RING_WAIT_S, timeout_ms / 1000)):
            return  # a ring job that signals it ended well
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            args = U.dla_wait_t(fence=f, timeout_ms=min(left_ms, WAIT_SLICE_MS))
            # EINTR: a signal reached this thread (its handler has run); EAGAIN: this file has as
            # many WAITs in progress as the daemon allows. Both: again, with the time that is left.
            done = device.ioctl(U.dla_ioctl_e.WAIT, args, again=(errno.EINTR, errno.EAGAIN))
            if done is None:
                if left_ms == 0:
                    raise WaitTimeout(NvError.Timeout, f"fence (sync {f.sync}, value {f.value}) not "
                                                       f"reached within {timeout_ms} ms")
                time.sleep(0.001)
                continue
            if done.status == 0:
                return
            if done.status == NvError.Timeout and not self._failed(device, f):
                if time.monotonic() < deadline:
                    continue  # the daemon bounds one WAIT (MAX_WAIT_MS); ours is longer
            elif done.status == NvError.Timeout:
                # The task that was to signal the fence failed with Timeout (the driver declared it
                # hung): its diagnosis, not a generic "not reached". This WAIT's answer may be its own
                # limit, reached as the hang was declared: the diagnosis is then in the next answer.
                failed = device.ioctl(U.dla_ioctl_e.WAIT, U.dla_wait_t(fence=f, timeout_ms=0),
                                      again=(errno.EINTR, errno.EAGAIN))
                if failed is not None and failed.status == NvError.Timeout:
                    done = failed
                raise DlaError(NvError.Timeout, untext(bytes(done.message)))
            known = done.status in NvError._value2member_map_
            code = NvError(done.status) if known else NvError.ResourceError
            if code == NvError.Timeout:
                raise WaitTimeout(code, f"fence (sync {f.sync}, value {f.value}) not reached within "
                                        f"{timeout_ms} ms")
            raise DlaError(code, untext(bytes(done.message)))

    @staticmethod
    def _failed(device: LinuxDevice, f: Any) -> bool:
        """Whether the daemon's sync object behind fence ``f`` failed (a WAIT answers NvError Timeout
        both when its own time ran out and when the task failed with Timeout)."""
        query = device.ioctl(U.dla_ioctl_e.SYNC_QUERY, U.dla_sync_query_t(sync=f.sync))
        return bool(query.status) and int(query.value) < int(f.value)

    @staticmethod
    def signal_fence(device: LinuxDevice, fence: NvDlaFence, f: Any) -> None:
        """NvDlaSignalFence for ``fence``, checked as ``device`` and ``f``."""
        device.ioctl(U.dla_ioctl_e.SYNC_SIGNAL, U.dla_sync_signal_t(fence=f))
        fence.semaphore.note_reached(f.value)

    @staticmethod
    def fail_fence(device: LinuxDevice, f: Any, error: DlaError) -> None:
        """NvDlaFailFence: the daemon's sync object behind ``f`` fails with ``error``'s code and
        message."""
        device.ioctl(U.dla_ioctl_e.SYNC_SIGNAL, U.dla_sync_signal_t(fence=f, status=int(error.code),
                                                                    message=text(error.message, 192)))

    @staticmethod
    def semaphore_value(device: LinuxDevice, f: Any) -> int:
        """NvDlaGetSemaphoreValue: the daemon's value of the sync object behind ``f`` (SYNC_QUERY)."""
        return int(device.ioctl(U.dla_ioctl_e.SYNC_QUERY, U.dla_sync_query_t(sync=f.sync)).value)
