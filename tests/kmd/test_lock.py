"""The driver's lock records its owner explicitly (pydla.kmd.lock), instead of the interrupt's thread
asking the lock's private state (RLock._is_owned) whether it is inside the driver."""

from __future__ import annotations

import threading

from pydla.kmd.lock import OwnedLock


def _in_thread(fn):  # type: ignore[no-untyped-def]
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(5)
    assert not t.is_alive()
    return out[0]


def test_the_owner_is_known_and_the_lock_is_reentrant() -> None:
    lock = OwnedLock()
    assert not lock.held_by_caller()
    with lock:
        assert lock.held_by_caller()
        assert _in_thread(lock.held_by_caller) is False  # another thread is not the owner
        assert _in_thread(lambda: lock.acquire(blocking=False)) is False
        with lock:  # reentrant: the owner takes it again
            assert lock.held_by_caller()
        assert lock.held_by_caller()  # still held once
    assert not lock.held_by_caller()

    def take_and_ask() -> bool:
        assert lock.acquire(blocking=False)  # free again: another thread takes it, and owns it
        try:
            return lock.held_by_caller()
        finally:
            lock.release()

    assert _in_thread(take_and_ask) is True


def test_the_driver_asks_its_own_record() -> None:
    import inspect

    from pydla.kmd import driver
    from pydla.platform import probe

    assert "_is_owned" not in inspect.getsource(driver)  # no private member of the lock's
    for config, records in (("full-headed", True), ("small", False)):  # headless, nothing asks
        probed = probe(config)
        try:
            assert isinstance(probed.kmd._lock, OwnedLock) == records
        finally:
            probed.close()
