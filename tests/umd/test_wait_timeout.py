"""A wait that ran out of time is told apart by its type (pydla.errors.WaitTimeout), not by its
message, from a run that failed with NvError Timeout (a hung task): the runtime keeps the memory of
a pending run in use and lets a failed run's go."""

from __future__ import annotations

import pytest

from pydla import DlaError, NvError
from pydla.errors import WaitTimeout
from pydla.platform import open_port
from pydla.portability.interface import NvDlaFence
from pydla.umd.runtime import IRuntime, _ended
from pydla.umd.sync import ISync


@pytest.fixture
def rt():  # type: ignore[no-untyped-def]
    with IRuntime(open_port("inprocess", "small"), owns_port=True) as runtime:
        yield runtime


def test_a_fence_not_reached_is_a_wait_timeout(rt: IRuntime) -> None:
    sync = rt.createSync()
    with pytest.raises(WaitTimeout) as e:
        sync.wait(0)
    assert e.value.code == NvError.Timeout and "not reached within 0 ms" in e.value.message
    assert not _ended(sync)
    sync.signal()
    assert _ended(sync)


def test_a_run_that_failed_with_timeout_ended_whatever_its_message_says(rt: IRuntime) -> None:
    sem = rt.port.NvDlaCreateSemaphore(rt.handle)
    sync = ISync(rt.port, sem, 1, owned=True)
    # A hang's diagnosis may quote another wait's words; it is still the run's end, not a pending wait.
    failure = DlaError(NvError.Timeout, "task 7 hung: its input fence was not reached within 2000 ms")
    rt.port.NvDlaFailFence(NvDlaFence(sem, 1), failure)
    with pytest.raises(DlaError) as e:
        sync.wait(0)
    assert type(e.value) is DlaError and e.value.code == NvError.Timeout
    assert _ended(sync)  # (classified by its text, it was taken for a pending run)
