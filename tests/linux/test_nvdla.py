"""NVDLA Loadables through the Linux port (uAPI 2.10): a client process's NvDlaSubmit of an NVDLA task
goes as PREPARE_NVDLA (its firmware interface version), SUBMIT_PREPARED and RELEASE_PREPARED to the KMD
daemon, whose KMD runs it on the NVDLA device, headless and headed. A client and a daemon of different
uAPI minor versions refuse, naming the version and what to upgrade. Loadables made by pydla's writer."""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_uapi as U
from pydla.linux import unmount
from pydla.linux.daemon import KmdDaemon
from pydla.loadable.nvdla.writer import write_nvdla_loadable
from pydla.portability.interface import NvDlaTask
from tests.linux.conftest import fuse_unavailable
from tests.test_conformance_nvdla import BDMA_GOLDEN, regression_like_bdma

CLIENT_TIMEOUT = 120


@pytest.fixture(params=["nv_full", "nv_full-headed"])
def nvdla_daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[KmdDaemon, Path]]:
    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    d = KmdDaemon(request.param, default_timeout_ms=20_000)
    server = d.serve(mnt)
    try:
        yield d, mnt
    finally:
        server.stop(timeout=5.0)
        d.close()
        unmount(str(mnt))


def _client(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_an_nvdla_loadable_runs_through_the_daemon(nvdla_daemon: tuple[KmdDaemon, Path],
                                                   tmp_path: Path) -> None:
    d, mnt = nvdla_daemon
    model = tmp_path / "BDMA_L0_0_fbuf"
    model.write_bytes(write_nvdla_loadable(regression_like_bdma()))
    out = _client(f"""
import pydla
from pydla.umd.nvdla_app import run_app
with pydla.createRuntime("linux", path={str(mnt)!r}) as rt:
    rt.load({str(model)!r})
    for _ in range(2):
        print(run_app(rt)[0][1].hex())
""")
    assert out.split() == [BDMA_GOLDEN.hex()] * 2
    # the daemon's KMD ran two NVDLA tasks (prepared, submitted, released)
    assert sum(len(c.prepared) for k in d.kmds for c in k.open_contexts.by_id.values()) == 0


def test_the_conformance_command_through_the_linux_port(nvdla_daemon: tuple[KmdDaemon, Path],
                                                        tmp_path: Path) -> None:
    d, mnt = nvdla_daemon
    test = tmp_path / "tests" / "BDMA_L0_0"
    test.mkdir(parents=True)
    (test / "BDMA_L0_0_fbuf").write_bytes(write_nvdla_loadable(regression_like_bdma()))
    (test / "lead.md5").write_text(hashlib.md5(BDMA_GOLDEN).hexdigest() + "  o_000000.dimg\n")
    out = _client(f"""
import sys
from pydla.cli import main
sys.exit(main(["conformance", "nvdla", {str(tmp_path / "tests")!r}, "--port", "linux:{mnt}"]))
""")
    assert "BDMA_L0_0 (nv_full) ... pass" in out and "1 of 1 passed" in out, out
    # the daemon's device ran it: said when it is not the configuration the test's name gives
    assert (" on nv_full-headed)" in out) == (d.platform.name == "nv_full-headed"), out


def test_an_older_daemon_is_told_to_upgrade_and_an_older_client_is_refused(
        nvdla_daemon: tuple[KmdDaemon, Path]) -> None:
    _, mnt = nvdla_daemon
    from pydla.portability.linux import LinuxPort

    port = LinuxPort(str(mnt))
    try:
        h = port.NvDlaOpen(0)
        mem, _ = port.NvDlaGetMem(h, 4096)
        task = NvDlaTask([(mem, 0)], nvdla_interface=(0, 12, 0))
        h.daemon_version = (2, 9, 0)  # as a daemon of uAPI 2.9 answers the handshake
        with pytest.raises(DlaError) as e:
            port.NvDlaSubmit(h, [task])
        assert e.value.code == NvError.NotSupported
        assert e.value.message == ("NvDlaPrepareTask: the daemon speaks uAPI 2.9.0; an NVDLA task (its "
                                   "firmware interface version) needs uAPI 2.10 (run the same pydla on both "
                                   "sides)")
        h.daemon_version = U.VERSION
        # a client of uAPI 2.9 knows no PREPARE_NVDLA: its NVDLA task goes as a plain PREPARE, which the
        # KMD refuses, naming what is missing (never run with a guessed descriptor layout)
        handle = port.buffers.address_array(h, [(mem, 0)], "test")[0].handle
        addresses = (U.dla_address_t * 1)(U.dla_address_t(handle=handle, offset=0, size=0))
        with pytest.raises(DlaError) as e:
            h.ioctl(U.dla_ioctl_e.PREPARE, U.dla_prepare_t(addresses=ctypes.addressof(addresses),
                                                          num_addresses=1))
        assert "an NVDLA task needs its firmware interface version (nvdla_interface" in e.value.message
        # nonzero reserved fields of PREPARE_NVDLA: EINVAL naming them
        with pytest.raises(DlaError) as e:
            h.ioctl(U.dla_ioctl_e.PREPARE_NVDLA, U.dla_prepare_nvdla_t(
                addresses=ctypes.addressof(addresses), num_addresses=1, interface_minor=12, reserved=1))
        assert e.value.code == NvError.BadParameter and "reserved = 1" in e.value.message
        # an interface the KMD does not read: EOPNOTSUPP naming it
        with pytest.raises(DlaError) as e:
            h.ioctl(U.dla_ioctl_e.PREPARE_NVDLA, U.dla_prepare_nvdla_t(
                addresses=ctypes.addressof(addresses), num_addresses=1, interface_minor=9))
        assert e.value.code == NvError.NotSupported and "firmware interface 0.9.0" in e.value.message
        port.NvDlaFreeMem(h, mem)
        port.NvDlaClose(h)
    finally:
        port.close()
