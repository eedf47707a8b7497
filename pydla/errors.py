"""The error codes of the stack and the one exception every layer raises for expected failures.

The numeric values are NVDLA's ``NvDlaError`` codes, so that a code printed by pydla means the same
thing to someone who knows the C stack. Codes pydla adds live in the 0x000F0000 range.

Usage::

    try:
        rt.load(blob)
    except pydla.DlaError as e:
        print(e.code.name, e)
"""

from __future__ import annotations

import enum
import os


class NvError(enum.IntEnum):
    """Error codes, as NVDLA's ``NvDlaError`` (``NvDlaError_<Name>``)."""

    NvSuccess = 0x00000000
    NotImplemented = 0x00000001
    NotSupported = 0x00000002
    NotInitialized = 0x00000003
    BadParameter = 0x00000004
    Timeout = 0x00000005
    InsufficientMemory = 0x00000006
    ReadOnlyAttribute = 0x00000007
    InvalidState = 0x00000008
    InvalidAddress = 0x00000009
    InvalidSize = 0x0000000A
    BadValue = 0x0000000B
    AlreadyAllocated = 0x0000000D
    Busy = 0x0000000E
    ResourceError = 0x0000000F
    CountMismatch = 0x00000010
    OverFlow = 0x00000011
    Disconnected = 0x00000012
    FileNotFound = 0x00000013
    DeviceNotFound = 0x00000015
    SurfaceNotSupported = 0x00010003
    FileWriteFailed = 0x00030000
    FileReadFailed = 0x00030001
    EndOfFile = 0x00030002
    FileOperationFailed = 0x00030003
    IoctlFailed = 0x0003000F
    ModuleNotPresent = 0x000A000E
    # pydla's own codes.
    VersionMismatch = 0x000F0001


class DlaError(Exception):
    """An expected failure: ``code`` says what kind, the message says what and where.

    Usage: ``raise DlaError(NvError.BadParameter, "tensor 2: size 12 exceeds buffer of 8 bytes")``
    """

    def __init__(self, code: NvError, message: str) -> None:
        super().__init__(message)
        self.code = NvError(code)
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} [{self.code.name}]"

    def __reduce__(self) -> tuple[type[DlaError], tuple[NvError, str]]:
        return (type(self), (self.code, self.message))


class WaitTimeout(DlaError):
    """NvError Timeout of a wait whose own time ran out: what it waits for may still happen (a fence
    not reached yet). Told apart by its type from a DlaError whose code is Timeout because the awaited
    work failed so (a task the driver declared hung), which is final.

    Usage: ``except WaitTimeout: pending = True``
    """


def file_error(path: object, e: OSError, *, flag: str | None = None, writing: bool = False) -> DlaError:
    """The DlaError for a file that cannot be read (or, with ``writing``, written), worded one way by
    every command and API. ``flag`` is the option or parameter that named the file (``--trace``,
    ``-o``): the message then starts with it, as the user wrote it.

    Reading: "PATH: no such file" (FileNotFound), "PATH: a directory, not a file", "PATH: cannot
    read: <the system's reason>" (FileReadFailed). Writing: "PATH: the directory DIR does not
    exist", "PATH: a directory, not a file", "PATH: cannot write: <reason>" (FileWriteFailed).

    Usage: ``except OSError as e: raise file_error(path, e, flag="--trace", writing=True) from e``
    """
    label = f"{flag} {path}" if flag else f"{path}"
    reason = (e.strerror or str(e)).lower() if isinstance(e, PermissionError) else (e.strerror or str(e))
    if writing:
        if isinstance(e, FileNotFoundError):
            parent = os.path.dirname(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else ""
            return DlaError(NvError.FileWriteFailed, f"{label}: the directory {parent or '.'} does not exist")
        if isinstance(e, IsADirectoryError):
            return DlaError(NvError.FileWriteFailed, f"{label}: a directory, not a file")
        return DlaError(NvError.FileWriteFailed, f"{label}: cannot write: {reason}")
    if isinstance(e, FileNotFoundError):
        return DlaError(NvError.FileNotFound, f"{label}: no such file")
    if isinstance(e, IsADirectoryError):
        return DlaError(NvError.FileReadFailed, f"{label}: a directory, not a file")
    return DlaError(NvError.FileReadFailed, f"{label}: cannot read: {reason}")
