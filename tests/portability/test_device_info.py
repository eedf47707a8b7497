"""NvDlaGetDeviceInfo: what a device is, as its driver knows it, through the port (in-process: the
KMD's answer; Linux: GET_PARAM); and the runner checking a loadable against it at load time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import pydla
from pydla import DlaError, NvError
from pydla.platform import Platform, open_port
from pydla.portability.inprocess import InProcessPort
from pydla.portability.interface import NvDlaDeviceInfo, NvDlaPort
from pydla.target.config import load_config, parse_config


@pytest.fixture(scope="module")
def blob() -> bytes:
    from pydla.compiler.api import compile_model
    from pydla.demo import build_demo_model

    return compile_model(build_demo_model()).blob  # a convolution, pooling (PDP), ...


def _no_pdp() -> object:
    small = load_config("small")
    return parse_config({
        "name": "no-pdp", "description": "", "instances": 1, "hw_version": 7, "blocks": ["CONV", "SDP"],
        "precisions": ["FP32"], "memory_bytes": small.memory_bytes, "contexts": 4, "iova_base": 1 << 28,
        "iova_size": 1 << 32})


@pytest.mark.parametrize("name", ["full", "small"])
def test_the_in_process_port_reports_what_the_configuration_says(name: str) -> None:
    config = load_config(name)
    with open_port("inprocess", name) as port:
        infos = [port.NvDlaGetDeviceInfo(i) for i in range(port.NvDlaGetMaxDevices())]
        for i, info in enumerate(infos):
            assert info == NvDlaDeviceInfo(i, config.instances, config.name, config.hw_version, config.blocks,
                                           config.precisions, config.memory_bytes,
                                           tuple(cu.name for cu in config.ip_layout),
                                           # the vector add's model declares its arguments
                                           tuple(("a", "b", "out", "n") if cu.name == "vadd:vadd" else None
                                                 for cu in config.ip_layout), engine_unit="dla_engine:dla")
        assert infos[0].compute_units[0] == "dla_engine:dla"
        assert infos[0].has_compute_unit("dla") and infos[0].has_compute_unit("noop:noop_hs")
        assert not infos[0].has_compute_unit("DPU")
        assert infos[0].compute_unit_args("vadd") == ("a", "b", "out", "n")
        assert infos[0].compute_unit_args("noop_hs") is None
        assert infos[0].compute_unit("scale") == "scale_i16:scale" and infos[0].compute_unit("DPU") is None
        assert infos[0].has_block("pdp") and infos[0].has_precision("FP16")
        assert infos[0].has_block("RUBIK") == (name == "full")
        with pytest.raises(DlaError) as e:
            port.NvDlaGetDeviceInfo(config.instances)
        assert e.value.code == NvError.DeviceNotFound


def test_a_port_that_does_not_report_says_not_supported() -> None:
    class Silent(InProcessPort):
        NvDlaGetDeviceInfo = NvDlaPort.NvDlaGetDeviceInfo

    with Silent(Platform(), owns_platform=True) as port, pytest.raises(DlaError) as e:
        port.NvDlaGetDeviceInfo(0)
    assert e.value.code == NvError.NotSupported


def test_load_refuses_a_network_the_device_cannot_run(blob: bytes) -> None:
    with pydla.createRuntime(config=_no_pdp()) as rt, pytest.raises(DlaError) as e:  # type: ignore[arg-type]
        rt.load(blob)
    assert e.value.code == NvError.NotSupported
    assert "needs the PDP block(s), which device config 'no-pdp' does not have" in e.value.message


def test_without_device_information_the_driver_refuses_it_at_submit(blob: bytes) -> None:
    class Silent(InProcessPort):
        NvDlaGetDeviceInfo = NvDlaPort.NvDlaGetDeviceInfo

    with pydla.createRuntime(Silent(Platform(_no_pdp()), owns_platform=True)) as rt:  # type: ignore[arg-type]
        rt.load(blob)  # nothing to check against
        for i in range(rt.getNumInputTensors()):
            rt.bindInputTensor(i, rt.allocateSystemMemory(rt.getInputTensorDesc(i).size))
        for i in range(rt.getNumOutputTensors()):
            rt.bindOutputTensor(i, rt.allocateSystemMemory(rt.getOutputTensorDesc(i).size))
        with pytest.raises(DlaError, match="needs the PDP block") as e:
            rt.submit()
        assert e.value.code == NvError.NotSupported


def test_the_linux_port_reports_the_same_through_get_param(tmp_path: Path) -> None:
    from tests.linux.conftest import fuse_unavailable

    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    from pydla.linux import unmount
    from pydla.linux.daemon import KmdDaemon
    from pydla.portability.linux import LinuxPort

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    daemon = KmdDaemon("full", mode="deterministic")
    server = daemon.serve(mnt)
    try:
        with LinuxPort(mnt) as linux, open_port("inprocess", "full") as inprocess:
            h = linux.NvDlaOpen(1)  # learnt on the opened file
            assert linux.NvDlaGetDeviceInfo(1) == inprocess.NvDlaGetDeviceInfo(1)
            assert linux.NvDlaGetDeviceInfo(0) == inprocess.NvDlaGetDeviceInfo(0)  # on a file opened to ask
            linux.NvDlaClose(h)
        deadline = time.monotonic() + 10
        while daemon.counts()["clients"]:  # the files opened to ask were closed, as NvDlaOpen's was
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        server.stop(timeout=5.0)
        daemon.close()
        unmount(str(mnt))
