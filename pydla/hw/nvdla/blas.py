"""The host threads of the device's kernels: numpy's OpenBLAS held to one thread while a block runs, and
a pool of our own threads, one per further core, that large GEMMs share.

Why (measured on this project's 2 cores shared with other processes, load average 5-6): QDQ
ResNet-18 224 on nv_small took a median 887-1436 ms per run with OpenBLAS's two threads and 267-336 ms
with one. OpenBLAS's workers busy-wait for their share; when one is descheduled, the caller waits for
it for the scheduler's time slice, once per GEMM (a 49x4608x512 float32 GEMM: 2 ms on one thread, up to
188 ms on two). On an idle machine two threads are at best 1.5x faster on the largest GEMMs, which
does not make up for it.

OpenBLAS is found as threadpoolctl finds it: the library numpy loaded (listed in ``/proc/self/maps``),
and its ``openblas_set_num_threads`` under the names numpy's wheels (``scipy_openblas*``) and
distributions export. Elsewhere (no ``/proc``, another BLAS) :func:`single_threaded` changes nothing.
The setting is the process's: nested and concurrent uses are counted, the first sets one thread and
the last gives back the number found.

Our own threads instead wait for each other once per GEMM, and sleep while they
wait (:func:`host_pool`, :func:`host_workers`).

Usage::

    with single_threaded():
        out = cols @ weights
    future = host_pool(host_workers()).submit(np.matmul, a[half:], b)
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

MAX_THREADS = 4  # host threads one kernel uses at most
WAIT_TIMEOUT = 600.0  # seconds: a share of a kernel that takes longer is reported, not waited for
_PREFIXES = ("scipy_openblas", "openblas")
_SUFFIXES = ("64_", "_64", "")
_lock = threading.Lock()
_depth = 0
_saved = 0


def _maps() -> list[str]:
    try:
        text = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    found = {line.split(maxsplit=5)[-1] for line in text.splitlines() if "openblas" in line.lower()}
    return sorted(p for p in found if p.startswith("/"))


@functools.cache
def openblas() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """(set_num_threads, get_num_threads) of the OpenBLAS numpy uses, or None."""
    import numpy  # noqa: F401  (numpy's BLAS must be loaded to be listed)

    for path in _maps():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in _PREFIXES:
            for suffix in _SUFFIXES:
                setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype = [ctypes.c_int], None
                    getter.argtypes, getter.restype = [], ctypes.c_int
                    return setter, getter
    return None


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the body with numpy's OpenBLAS on one thread (see the module's description)."""
    global _depth, _saved
    api = openblas()
    if api is None:
        yield
        return
    setter, getter = api
    with _lock:
        if _depth == 0:
            _saved = getter()
            if _saved != 1:
                setter(1)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved != 1:
                setter(_saved)


def host_workers() -> int:
    """Threads besides the caller that share a large kernel: one per further core this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(0, min(cores, MAX_THREADS) - 1)


def host_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads for the device's kernels (a forked child, whose copy of
    the parent's pool has no threads, makes its own)."""
    return _pool(workers, os.getpid())


@functools.cache
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="pydla-nvdla")
