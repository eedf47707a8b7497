"""Headed NVDLA configurations (nv_full-headed, nv_small-headed, nv_large-headed): the engine scheduler's
NVDLA front end runs as firmware on the NVDLA device's microcontroller, the host KMD reaches it through
the device-API mailbox in the nvdla_mcu window, and NVDLA Loadables give the same bytes as headless.
Loadables made by pydla's own writer (the suite needs no NVIDIA files)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pydla
from pydla import DlaError, NvError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.conformance import conformance
from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.generated import dla_interface as I
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import nvdla_mcu as M
from pydla.hw.nvdla_device import NvdlaDevice
from pydla.kmd.driver import Kmd
from pydla.kmd.headed import HeadedEngine
from pydla.loadable.nvdla import model as M_
from pydla.loadable.nvdla import samples
from pydla.loadable.nvdla.writer import write_nvdla_loadable
from pydla.platform import Platform, Probed
from pydla.portability.inprocess import InProcessPort
from pydla.umd.nvdla_app import image_bytes, run_app
from tests.firmware.test_nvdla_firmware import _two_op_loadable
from tests.hw.mcu.test_headed import _firmware_api
from tests.test_conformance_nvdla import BDMA_GOLDEN, regression_like_bdma

RUNNING, ATTACHED = int(R.mcu_status_e.RUNNING), int(R.mcu_status_e.ATTACHED)


@pytest.fixture
def headed() -> Iterator[NvdlaDevice]:
    dev = NvdlaDevice("nv_full-headed")
    yield dev
    dev.close()


def test_the_mcu_window_says_who_runs_the_scheduler(headed: NvdlaDevice) -> None:
    assert headed.mcu is not None and headed.config.headed
    status = headed.reg_read(M.PYDLA_MCU_STATUS)
    assert status & RUNNING and not status & ATTACHED and status >> 16 == api.VERSION[0]
    errors = headed.bus_errors
    headed.reg_write(M.PYDLA_MCU_INTR_MASK, 1 << 40)  # not a 32-bit value: counted, nothing changes
    assert headed.mcu.bus_errors == 1 and headed.reg_read(M.PYDLA_MCU_INTR_MASK) == 0
    assert headed.bus_errors == errors
    headless = NvdlaDevice("nv_full")
    try:
        assert headless.mcu is None
        assert headless.reg_read(M.PYDLA_MCU_STATUS) == 0 and headless.bus_errors == 1  # no such register
    finally:
        headless.close()


def _port(config: str, mode: str = "deterministic") -> InProcessPort:
    return InProcessPort(Platform(config, mode=mode), owns_platform=True)


def _run(port: Any, loadable: bytes, runs: int = 1) -> bytes:
    """The first output's image, as the runtime application writes it; with ``runs`` > 1 the loadable is
    submitted again on the same bindings (outputs zeroed in between), each run giving the same bytes."""
    with pydla.createRuntime(port) as rt:
        rt.load(loadable)
        if runs == 1:
            return run_app(rt)[0][1]
        mems = [rt.allocateSystemMemory(rt.getInputTensorDesc(i).size)
                for i in range(rt.getNumInputTensors())]
        for i, mem in enumerate(mems):
            mem.bytes_view()[:] = 0
            rt.bindInputTensor(i, mem)
        desc = rt.getOutputTensorDesc(0)
        out = rt.allocateSystemMemory(desc.size)
        rt.bindOutputTensor(0, out)
        images = []
        for _ in range(runs):
            out.bytes_view()[:] = 0
            rt.submit()
            images.append(image_bytes(desc, out.bytes_view().tobytes()))
    assert all(i == images[0] for i in images)
    return images[0]


def _cdp_then_pdp() -> M_.NvdlaLoadable:
    """A CDP and a PDP on one 8x8x32 INT8 cube, the PDP waiting for the CDP's completion (a dependency
    across blocks), the source not zero."""
    lo = _two_op_loadable(((1, I.dla_op_e.PDP, 0),))
    src = bytes((i * 37 + 5) & 0xFF for i in range(8 * 8 * 32))
    blobs = tuple(dataclasses.replace(b, data=src) if b.name == "m4_Src_i4" else b for b in lo.blobs)
    return dataclasses.replace(lo, blobs=blobs)


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
@pytest.mark.parametrize("sample", ["cdp_then_pdp", "bdma"])
def test_headed_and_headless_give_the_same_bytes(mode: str, sample: str) -> None:
    lo = {"cdp_then_pdp": _cdp_then_pdp, "bdma": samples.bdma_loadable}[sample]()
    data = write_nvdla_loadable(lo)
    images = []
    for config in ("nv_full", "nv_full-headed"):
        port = _port(config, mode)
        try:
            images.append(_run(port, data, runs=2))
            probed = port.platform.probed  # type: ignore[attr-defined]
            engine = probed[0].kmd.engine
            assert isinstance(engine, HeadedEngine) == (config == "nv_full-headed")
            if isinstance(engine, HeadedEngine):
                mcu = probed[0].device.mcu
                assert mcu is not None and mcu.firmware.refused == 0
                cache = mcu.firmware.cache  # the firmware validated the NVDLA task once, then reused it
                assert (cache.misses, cache.hits) == (1, 1)
                assert probed[0].device.reg_read(M.PYDLA_MCU_STATUS) & ATTACHED
        finally:
            port.close()
    assert images[0] == images[1] and len(images[0]) > 36
    if sample == "cdp_then_pdp":  # the PDP's 1x1 pooling of the source, as the .dimg gathers it
        first = [0x05, 0xA5, 0x45, 0xE5, 0x85, 0x25, 0xC5, 0x65]
        assert np.frombuffer(images[1][36:44], np.uint8).tolist() == first


def test_the_bdma_regression_image_headed_is_nvidias_golden() -> None:
    port = _port("nv_full-headed")
    try:
        assert _run(port, write_nvdla_loadable(regression_like_bdma())) == BDMA_GOLDEN
    finally:
        port.close()


def test_a_task_the_configuration_cannot_run_is_refused_as_headless() -> None:
    data = write_nvdla_loadable(regression_like_bdma())
    for config in ("nv_small", "nv_small-headed"):
        port = _port(config)
        try:
            with pytest.raises(DlaError) as e:
                _run(port, data)
            assert e.value.code == NvError.NotSupported
            assert e.value.message == (f"task 1: operation 0 needs the BDMA block, which device '{config}' "
                                       "does not have")
        finally:
            port.close()


def test_the_conformance_command_runs_headed(tmp_path: Path) -> None:
    from pydla.cli import main

    test = tmp_path / "BDMA_L0_0"
    test.mkdir()
    (test / "BDMA_L0_0_fbuf").write_bytes(write_nvdla_loadable(regression_like_bdma()))
    (test / "lead.md5").write_text(hashlib.md5(BDMA_GOLDEN).hexdigest() + "  o_000000.dimg\n")
    out = io.StringIO()
    assert conformance(tmp_path, headed=True, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("BDMA_L0_0 (nv_full-headed) ... pass (") and lines[1] == "1 of 1 passed"
    with pytest.raises(DlaError) as e:
        conformance(tmp_path, headed=True, config="nv_full", out=out)
    assert e.value.code == NvError.BadParameter and "name a headed configuration" in e.value.message
    assert main(["conformance", "nvdla", str(tmp_path), "--headed"]) == 0


class _OneDevice:
    """The in-process port's drivers: one probed device (a test built its firmware)."""

    def __init__(self, probed: Probed) -> None:
        self._probed = probed
        self.name, self.instances = probed.device.config.name, 1

    def probe(self, instance: int) -> Probed:
        return self._probed

    def close(self) -> None:
        self._probed.close()


def test_a_firmware_of_device_api_1_1_runs_no_nvdla_task_and_says_what_to_upgrade(tmp_path: Path) -> None:
    dev = NvdlaDevice("nv_full-headed")
    assert dev.mcu is not None
    dev.mcu.flash(_firmware_api(tmp_path, "1.1.0"))
    port = InProcessPort(_OneDevice(Probed(dev, Kmd(VirtualDevicePort(dev)))), owns_platform=True)
    try:
        with pytest.raises(DlaError) as e:
            _run(port, write_nvdla_loadable(regression_like_bdma()))
        assert e.value.code == NvError.VersionMismatch
        assert ("the device firmware has 1.1.0, which lacks task_submit_list's nvdla_task (an NVDLA task's "
                "firmware interface version). The host KMD is newer: upgrade the device firmware to "
                "device_api >= 1.2.0") in e.value.message
    finally:
        port.close()


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_a_hung_firmware_is_reset_with_the_nvdla_device_and_the_next_run_passes(mode: str) -> None:
    platform = Platform("nv_full-headed", mode=mode, tdr_ms=200)
    port = InProcessPort(platform, owns_platform=True)
    data = write_nvdla_loadable(regression_like_bdma())
    try:
        dev = platform.probe(0).device
        assert isinstance(dev, NvdlaDevice) and dev.mcu is not None
        resets = []
        real_reset = dev.reset
        dev.reset = lambda: (resets.append(1), real_reset())[1]  # type: ignore[method-assign]
        dev.mcu.inject_hang()
        with pytest.raises(DlaError) as hung:
            _run(port, data)
        assert hung.value.code == NvError.Timeout
        assert "the device firmware did not answer" in hung.value.message
        assert "microcontroller and the device were reset" in hung.value.message
        engine = platform.probe(0).kmd.engine
        assert isinstance(engine, HeadedEngine) and engine.stats["firmware_resets"] == 1
        assert resets and not dev.mcu.hung  # PYDLA_CTL_RESET reset NVDLA; the firmware restarted
        assert _run(port, data) == BDMA_GOLDEN
    finally:
        port.close()


def test_an_older_host_s_submit_without_the_nvdla_fields_is_taken_as_pydla_s_own_task() -> None:
    """A host of device_api 1.1 sends task_submit_list_cmd without the four fields 1.2 appended: the
    firmware reads them as 0 (one of pydla's own tasks) and runs it; a shorter message stays refused."""
    from pydla.deviceapi.generated import dla_regs as DR
    from pydla.hw.device import VirtualDevice
    from pydla.testing.mailbox import pooling_task_in_lists

    dev = VirtualDevice("full-headed")
    try:
        box, ctx, lists, count = pooling_task_in_lists(dev)
        for task_id, size, status in ((7, 44, api.dla_status_e.OK), (8, 40, api.dla_status_e.BAD_MESSAGE)):
            submit = bytearray(bytes(api.task_submit_list_cmd.new(tag=task_id, address_list=box.iova + lists,
                                                                  task_id=task_id, num_addresses=count,
                                                                  context_id=ctx))[:size])
            submit[:4] = size.to_bytes(4, "little")
            box.send_raw(bytes(submit))
            answers = box.receive(wait_s=2.0)
            rsp = [m for m in answers if isinstance(m, api.task_submit_list_rsp)]
            assert [(int(m.task_id), int(m.status)) for m in rsp] == [(task_id, int(status))], answers
        assert dev.mcu is not None and dev.mcu.firmware.refused == 1
        assert box.status() & DR.mcu_status_e.RUNNING
    finally:
        dev.close()


def test_a_prepared_nvdla_task_keeps_its_interface_version_for_the_firmware() -> None:
    """Through NvDlaPrepareTask and NvDlaSubmitPrepared (as the Linux port submits): the KMD's prepared
    job carries the interface version to each submit, which the headed firmware decodes with."""
    port = _port("nv_full-headed")

    def via_prepared(h: Any, tasks: list[Any]) -> list[Any]:
        statuses = []
        for task in tasks:
            prepared = port.NvDlaPrepareTask(h, task)
            statuses.append(port.NvDlaSubmitPrepared(h, prepared, task.pre_fences, task.post_fences))
            port.NvDlaReleaseTask(h, prepared)
        return statuses

    port.NvDlaSubmit = via_prepared  # type: ignore[method-assign]
    try:
        assert _run(port, write_nvdla_loadable(regression_like_bdma())) == BDMA_GOLDEN
    finally:
        port.close()
