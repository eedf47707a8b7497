"""NvDlaMemGetSize through the Linux port: 0 for a buffer of another LinuxPort (even on the same
daemon), of a closed device file, or freed (the conformance suite has the general cases)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pydla.linux import unmount
from pydla.linux.daemon import KmdDaemon
from pydla.portability.linux import LinuxPort
from tests.linux.conftest import fuse_unavailable


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[Path]:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    daemon = KmdDaemon("full")
    server = daemon.serve(mnt)
    try:
        yield mnt
    finally:
        server.stop(timeout=5.0)
        daemon.close()
        unmount(str(mnt))


def test_mem_get_size_is_0_for_another_ports_or_a_closed_files_buffer(mnt: Path) -> None:
    mine, theirs = LinuxPort(mnt), LinuxPort(mnt)
    try:
        h, h2 = mine.NvDlaOpen(0), theirs.NvDlaOpen(0)
        mem, _ = mine.NvDlaGetMem(h, 4096)
        mem2, _ = theirs.NvDlaGetMem(h2, 64)
        assert (mine.NvDlaMemGetSize(mem), theirs.NvDlaMemGetSize(mem2)) == (4096, 64)
        assert (theirs.NvDlaMemGetSize(mem), mine.NvDlaMemGetSize(mem2)) == (0, 0)
        other_file = mine.NvDlaOpen(0)
        kept, _ = mine.NvDlaGetMem(other_file, 128)
        mine.NvDlaClose(other_file)
        assert (mine.NvDlaMemGetSize(kept), mine.NvDlaMemGetSize(mem)) == (0, 4096)
        mine.NvDlaFreeMem(h, mem)
        assert mine.NvDlaMemGetSize(mem) == 0
    finally:
        mine.close()
        theirs.close()


def test_freeing_a_buffer_twice_says_it_was_freed(mnt: Path) -> None:
    """It said "memory handle is not one of this session's", as for another client's buffer."""
    from pydla import DlaError

    port, other = LinuxPort(mnt), LinuxPort(mnt)
    try:
        h, h2 = port.NvDlaOpen(0), other.NvDlaOpen(0)
        mem, _ = port.NvDlaGetMem(h, 4096)
        theirs, _ = other.NvDlaGetMem(h2, 64)
        port.NvDlaFreeMem(h, mem)
        with pytest.raises(DlaError) as e:
            port.NvDlaFreeMem(h, mem)
        assert e.value.message == "NvDlaFreeMem: the memory was already freed (NvDlaFreeMem)"
        with pytest.raises(DlaError) as e:
            port.NvDlaFreeMem(h, theirs)
        assert e.value.message == "NvDlaFreeMem: memory handle is not one of this session's"
    finally:
        port.close()
        other.close()
