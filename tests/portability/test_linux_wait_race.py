"""LinuxPort.NvDlaWaitFence when a WAIT's own limit and the driver's hang declaration land together:
the client reports the hang's diagnosis, not the WAIT's generic "not reached" (a race seen once in a
loaded full-suite run of tests/linux/test_daemon.py's hang-diagnosis test)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pydla.deviceapi.generated import dla_uapi as U
from pydla.errors import DlaError, NvError
from pydla.portability.linux import LinuxPort


class ScriptedDevice:
    """Answers the port's ioctls from a script: (kind, answer) in order."""

    def __init__(self, script: list[tuple[int, Any]]) -> None:
        self.script = script
        self.asked: list[tuple[int, int | None]] = []

    def ring(self) -> None:
        return None

    def ioctl(self, kind: int, args: Any, again: tuple[int, ...] = ()) -> Any:
        self.asked.append((kind, getattr(args, "timeout_ms", None)))
        expected, answer = self.script.pop(0)
        assert kind == expected, (kind, expected)
        return answer


def _wait_answer(status: int, message: str) -> Any:
    return SimpleNamespace(status=status, message=message.encode())


def test_a_wait_that_ends_at_its_own_limit_as_the_hang_is_declared_reports_the_diagnosis() -> None:
    generic = "fence (sync 3, value 1) not reached within 1000 ms"
    diagnosis = "task 7: hung: no operation completed for 2000 ms; blocks CONV were reset"
    device = ScriptedDevice([
        (U.dla_ioctl_e.WAIT, _wait_answer(NvError.Timeout, generic)),  # its own limit...
        (U.dla_ioctl_e.SYNC_QUERY, SimpleNamespace(status=NvError.Timeout, value=0)),  # ...and failed
        (U.dla_ioctl_e.WAIT, _wait_answer(NvError.Timeout, diagnosis)),  # the failure's answer
    ])
    port = object.__new__(LinuxPort)
    port._fence = lambda fence: (device, U.dla_fence_t(sync=3, value=1))  # type: ignore[method-assign]
    fence = SimpleNamespace(semaphore=SimpleNamespace(reached=0))
    with pytest.raises(DlaError) as e:
        port.NvDlaWaitFence(fence, 60_000)  # type: ignore[arg-type]
    assert e.value.code == NvError.Timeout and e.value.message == diagnosis
    assert device.asked[-1] == (U.dla_ioctl_e.WAIT, 0) and not device.script
