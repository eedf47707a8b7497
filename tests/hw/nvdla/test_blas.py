"""The device's GEMMs run with numpy's OpenBLAS on one thread, and the number of threads comes back."""

from __future__ import annotations

import threading

import pytest

from pydla.hw.nvdla import blas


@pytest.fixture
def api() -> tuple[object, object]:
    found = blas.openblas()
    if found is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS listed in /proc/self/maps")
    return found


def test_one_thread_inside_and_the_setting_given_back(api: tuple[object, object]) -> None:
    setter, getter = blas.openblas() or (None, None)
    assert setter is not None and getter is not None
    setter(2)
    try:
        with blas.single_threaded():
            assert getter() == 1
            with blas.single_threaded():
                assert getter() == 1
            assert getter() == 1  # the inner exit does not give back what the outer took
        assert getter() == 2
        with pytest.raises(RuntimeError), blas.single_threaded():
            raise RuntimeError("a kernel failed")
        assert getter() == 2
    finally:
        setter(2)


def test_overlapping_uses_from_threads_leave_the_first_setting(api: tuple[object, object]) -> None:
    setter, getter = blas.openblas() or (None, None)
    assert setter is not None and getter is not None
    setter(2)
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with blas.single_threaded():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(10)
        with blas.single_threaded():  # entered while the other thread holds one thread
            assert getter() == 1
        assert getter() == 1  # the other thread is still inside
        leave.set()
        t.join(10)
        assert not t.is_alive() and getter() == 2
    finally:
        leave.set()
        t.join(10)
        setter(2)


def test_a_forked_child_gets_its_own_pool() -> None:
    import os

    parent = blas.host_pool(1)
    assert blas.host_pool(1) is parent
    pid = os.fork()
    if pid == 0:  # the child: a pool of its own, whose thread runs
        ok = False
        try:
            child = blas.host_pool(1)
            ok = child is not parent and child.submit(lambda: 7).result(timeout=10) == 7
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
