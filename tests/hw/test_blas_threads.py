"""pydla.hw.blas_threads: PYDLA_BLAS_THREADS, and the thread count the policy gives the library."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pydla.hw import blas, blas_threads
from pydla.hw.blas_threads import RESAMPLE_S, ThreadPolicy, parse_setting, threads_for


def test_parse_setting() -> None:
    assert parse_setting(None) is None
    assert parse_setting("") is None
    assert parse_setting(" Auto ") is None
    assert parse_setting("1") == 1
    assert parse_setting(" 4 ") == 4
    for bad in ("0", "-1", "two", "1.5", "2000"):
        with pytest.warns(RuntimeWarning, match="PYDLA_BLAS_THREADS"):
            assert parse_setting(bad) is None


def test_threads_for_counts_the_cores_others_leave_idle() -> None:
    assert threads_for(2.0, 2) == 2  # idle machine: the library's count
    assert threads_for(1.8, 2) == 2  # a little background work does not cost a thread
    assert threads_for(1.7, 2) == 1  # 0.3 of a core taken: the second thread would wait its turns
    assert threads_for(0.0, 2) == 1  # at least one
    assert threads_for(8.0, 4) == 4  # at most the library's own count
    assert threads_for(2.9, 4) == 3


class Machine:
    """A clock, the system's busy seconds, this process's own and the load average, as set."""

    def __init__(self) -> None:
        self.now, self.busy, self.own, self.load = 100.0, 1000.0, 10.0, 0.5
        self.sets: list[int] = []

    def policy(self, setting: str | None, default: int = 2, cores: int = 2) -> ThreadPolicy:
        return ThreadPolicy(self.sets.append, default, setting, cores=cores, clock=lambda: self.now,
                            busy=lambda: self.busy, own=lambda: self.own, load=lambda: self.load)

    def run(self, seconds: float, others: float, ours: float) -> None:
        """``seconds`` pass; other processes use ``others`` cores, this one ``ours``."""
        self.now += seconds
        self.busy += (others + ours) * seconds
        self.own += ours * seconds


def test_idle_machine_never_touches_the_library() -> None:
    m = Machine()
    p = m.policy(None)
    for _ in range(10):
        p.before_product()
        m.run(RESAMPLE_S, others=0.1, ours=2.0)  # our own two threads do not count against us
    assert m.sets == [] and p.current == 2


def test_busy_machine_gets_one_thread_and_idle_again_gets_them_back() -> None:
    m = Machine()
    m.load = 4.0  # before the first interval the load average decides: above the 2 cores
    p = m.policy(None)
    p.before_product()
    assert m.sets == [1]
    m.run(RESAMPLE_S / 2, others=1.5, ours=1.0)
    p.before_product()  # not re-decided within RESAMPLE_S
    assert m.sets == [1]
    m.run(RESAMPLE_S / 2, others=1.5, ours=1.0)
    p.before_product()
    assert m.sets == [1]  # still busy: nothing set again
    m.run(RESAMPLE_S, others=0.0, ours=1.0)
    p.before_product()
    assert m.sets == [1, 2] and p.current == 2
    m.run(RESAMPLE_S, others=0.5, ours=2.0)
    p.before_product()
    assert m.sets == [1, 2, 1]


def test_without_proc_stat_the_load_average_decides() -> None:
    m = Machine()
    p = ThreadPolicy(m.sets.append, 2, None, cores=2, clock=lambda: m.now, busy=lambda: None,
                     own=lambda: m.own, load=lambda: m.load)
    m.load = 2.5
    p.before_product()
    m.load = 1.0
    m.run(RESAMPLE_S, 0, 0)
    p.before_product()
    assert m.sets == [1, 2]


def test_a_fixed_setting_is_applied_once_within_the_librarys_count() -> None:
    m = Machine()
    m.load = 9.0
    p = m.policy("1")
    assert m.sets == [1]
    for _ in range(5):
        m.run(RESAMPLE_S, others=0.0, ours=1.0)
        p.before_product()
    assert m.sets == [1]
    m2 = Machine()
    m2.policy("8", default=2)
    assert m2.sets == []  # 8 asked, the library made 2: it stays at 2


@pytest.mark.skipif(blas.SGEMM is None or blas.SGEMM.threads is None,
                    reason="numpy's OpenBLAS sgemm (with its thread functions) was not found")
def test_the_setting_reaches_the_library() -> None:
    # numpy's own instance (PYDLA_BLAS_CORE=numpy), whose count numpy's matmul shows too.
    code = ("from pydla.hw import blas; import ctypes; s = blas.SGEMM; "
            "lib = ctypes.CDLL(blas._candidates()[0]); "
            "get = next(getattr(lib, g) for _, g in blas._THREAD_SYMBOLS if hasattr(lib, g)); "
            "print(s.threads.fixed, s.threads.current, get())")
    env = {**os.environ, "PYDLA_BLAS_THREADS": "1", "OPENBLAS_NUM_THREADS": "2", "PYDLA_BLAS_CORE": "numpy"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1", "1"]
    env["PYDLA_BLAS_THREADS"] = "auto"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "2", "2"]  # nothing set before a product
    env["PYDLA_BLAS_THREADS"] = "many"
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0 and "PYDLA_BLAS_THREADS='many'" in out.stderr


def test_system_samplers_read_this_machine() -> None:
    busy = blas_threads.system_busy_seconds()
    if sys.platform.startswith("linux"):
        assert busy is not None and busy > 0
    assert blas_threads.own_cpu_seconds() > 0
