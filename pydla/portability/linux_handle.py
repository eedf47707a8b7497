"""What the parts below an open device file of the Linux port use of it (:class:`DeviceFile`: the
submission ring, the compute-unit query), what an open device file uses of its port
(:class:`OpeningPort`), and the compute-unit query itself (NUM_CUS, CU_QUERY, CU_ARGS), which
:class:`~pydla.portability.linux_device.LinuxDevice` runs when probed. Protocols, so that those
modules need not import the modules that make the objects (no import circle among the port's
modules).

Usage: ``units = query_compute_units(device)`` (``device`` an open
:class:`~pydla.portability.linux_device.LinuxDevice`)
"""

from __future__ import annotations

import ctypes
import errno
from pathlib import Path
from typing import Any, Protocol

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import CuDesc
from pydla.uapi.ioctl import NVERROR, untext


class DeviceFile(Protocol):
    """An open device file as the ring and the compute-unit query use it."""

    @property
    def path(self) -> Path: ...
    @property
    def daemon_version(self) -> tuple[int, int, int]: ...
    def ioctl(self, nr: int, args: Any, *, again: tuple[int, ...] = (),
              codes: dict[int, NvError] = NVERROR) -> Any: ...
    def param(self, which: int) -> int: ...
    def last_error(self) -> str: ...


class OpeningPort(Protocol):
    """What opening a device file reads of its port: the directory its errors name, and whether the
    file tries the submission ring."""

    @property
    def directory(self) -> Path: ...
    @property
    def use_ring(self) -> bool: ...


class ReachedValue(Protocol):
    """A sync object as the ring's fence waits see it: the value known to be reached."""

    @property
    def reached(self) -> int: ...
    def note_reached(self, value: int) -> None: ...


CONTROL = {U.dla_cu_control_e.AP_CTRL_HS: "HS", U.dla_cu_control_e.AP_CTRL_CHAIN: "CHAIN",
           U.dla_cu_control_e.AP_CTRL_NONE: "NONE"}


CU_NVERROR = {**NVERROR, errno.EPERM: NvError.InvalidState}  # EPERM: the CU commands' InvalidState


def cu_ioctl(device: DeviceFile, nr: int, args: Any) -> Any:
    """``device.ioctl`` with EPERM (the CU commands' answer to InvalidState) as NvError InvalidState."""
    return device.ioctl(nr, args, codes=CU_NVERROR)


def query_compute_units(device: DeviceFile) -> tuple[CuDesc, ...]:
    """The IP_LAYOUT of ``device``'s instance as the daemon's KMD has it (NUM_CUS, CU_QUERY); none
    from a daemon older than uAPI 2.5."""
    if device.daemon_version[:2] < (2, 5):
        return ()
    units = []
    for i in range(device.param(U.dla_param_e.NUM_CUS)):
        q = device.ioctl(U.dla_ioctl_e.CU_QUERY, U.dla_cu_query_t(index=i))
        units.append(CuDesc(untext(bytes(q.name)), CONTROL.get(q.control, "HS"), int(q.base), int(q.window),
                            bool(q.int_enable), int(q.interrupt_id), int(q.pipeline_depth), bool(q.engine),
                            arguments=_arguments(device, i)))
    return tuple(units)


def _arguments(device: DeviceFile, index: int) -> tuple[str, ...] | None:
    """The argument names unit ``index`` declares (uAPI 2.9: CU_ARGS); None when it declares none or
    the daemon is older."""
    if device.daemon_version[:2] < (2, 9):
        return None
    q = device.ioctl(U.dla_ioctl_e.CU_ARGS, U.dla_cu_args_t(index=index))
    if not q.declared:
        return None
    field = type(q).names  # a char array: read as raw bytes (its value stops at the first NUL)
    raw = ctypes.string_at(ctypes.addressof(q) + field.offset, field.size)
    names = tuple(n.decode("utf-8", "replace") for n in raw.split(b"\0")[:q.count])
    if len(names) != q.count or any(not n for n in names):
        raise DlaError(NvError.InvalidState, f"CU_ARGS: the daemon's answer for unit {index} holds "
                                             f"{len([n for n in names if n])} names, not its count {q.count}")
    return names
