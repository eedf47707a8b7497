"""What the in-process port (:mod:`pydla.portability.inprocess`) hands out: sessions (NvDlaOpen's
handles), their memory handles, semaphores and prepared tasks; and the compute-unit names it passes
to the KMD.

Usage::

    session = Session(port, 0, kmd)           # InProcessPort.NvDlaOpen
    mem = InProcessMem(session, kmd.bo_create(session.ctx, 4096))
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.kmd.driver import Kmd
from pydla.kmd.sync import TimelineSemaphore
from pydla.kmd.trace import KmdTrace
from pydla.portability.interface import NvDlaMemHandle, NvDlaPort


class InProcessMem(NvDlaMemHandle):
    """A buffer object of a session's context, as NvDlaGetMem returns it."""

    def __init__(self, session: Session, handle: int) -> None:
        self.session = session
        self.handle = handle
        self.nbytes = session.kmd.bo_size(session.ctx, handle)
        # The host mapping, looked up once: a view keeps the mapping alive, so after a free this
        # array is still memory-safe; `usable` (False once freed or closed) is what refuses its use.
        self._array = session.kmd.bo_array(session.ctx, handle)
        self.host_bytes = self._array.data  # for the port's fast paths of NvDlaMemRead / NvDlaMemWrite
        self.usable = True

    @property
    def size(self) -> int:
        return self.nbytes

    @property
    def device_address(self) -> int:
        return self.session.kmd.bo_iova(self.session.ctx, self.handle)

    def bytes_view(self) -> npt.NDArray[np.uint8]:
        if not self.usable:
            raise DlaError(NvError.InvalidState,
                           f"memory handle {self.handle} was freed or its session closed")
        return self._array


class Session:
    """What NvDlaOpen returns: a context on one device instance."""

    def __init__(self, port: NvDlaPort, select: int, kmd: Kmd) -> None:
        self.port = port
        self.select = select
        self.kmd = kmd
        self.ctx = kmd.open_context()
        self.mems: dict[int, InProcessMem] = {}
        self.semaphores: weakref.WeakSet[TimelineSemaphore] = weakref.WeakSet()  # gone when unused
        self.traces: list[KmdTrace] = []  # trace rings it started (stopped when it closes)
        self.closed = False


class SessionSemaphore(TimelineSemaphore):
    """A semaphore from NvDlaCreateSemaphore: it knows its session and whether it was destroyed
    (checked at every fence use: attributes, not set lookups)."""

    def __init__(self, value: int, session: Session) -> None:
        super().__init__(value)
        self.session = session
        self.destroyed = False


class PreparedHandle:
    """The in-process port's handle to a prepared task: the KMD's prepared-job id in a session."""

    __slots__ = ("prep_id", "session")

    def __init__(self, session: Session, prep_id: int) -> None:
        self.session = session
        self.prep_id = prep_id


def unit_name(session: Session, cu: Any, what: str) -> str:
    """A compute unit named by its index in the IP_LAYOUT (XRT's cu_index) becomes its name; a name
    goes to the KMD as it is (the KMD checks it)."""
    if isinstance(cu, int) and not isinstance(cu, bool):
        units = session.kmd.compute_units
        if not 0 <= cu < len(units):
            raise DlaError(NvError.BadParameter, f"{what}: compute unit index {cu}: the device has "
                                                 f"{len(units)} (0..{len(units) - 1})")
        return units[cu].name
    return cu  # type: ignore[no-any-return]  # the KMD checks what it is
