"""Headed mode: the microcontroller's firmware behind the mailbox, the host's proxy, the version
handshake with firmware built from other specs, hostile mailbox traffic, a hung firmware."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generate import outputs_for
from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.spec import bundled_specs_dir
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.kmd.headed import HeadedEngine
from pydla.testing.mailbox import MailboxClient
from tests.kmd.support import conv_sdp_pdp, single_pdp

ST = api.dla_status_e
HOST = f"host KMD has device_api {'.'.join(map(str, api.VERSION))}"


@pytest.fixture
def headed() -> Iterator[VirtualDevice]:
    dev = VirtualDevice("full-headed")
    yield dev
    dev.close()


def _run(kmd: Kmd, seed: int = 1) -> dict[str, np.ndarray]:
    ctx = kmd.open_context()
    case = conv_sdp_pdp()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed)
    kmd.submit(ctx, loaded.addresses).wait(5000)
    case.check(kmd, ctx, loaded, expected)
    return case.result(kmd, ctx, loaded)


def test_the_status_register_says_who_runs_the_scheduler(headed: VirtualDevice) -> None:
    status = headed.reg_read(R.GLB_MCU_STATUS)
    assert status & R.mcu_status_e.RUNNING and not status & R.mcu_status_e.ATTACHED
    assert status >> 16 == api.VERSION[0]
    headless = VirtualDevice("full")
    try:
        assert headless.reg_read(R.GLB_MCU_STATUS) == 0 and headless.mcu is None
    finally:
        headless.close()


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_headed_and_headless_give_the_same_bits(mode: str) -> None:
    results = []
    for config in ("full", "full-headed"):
        dev = VirtualDevice(config, mode=mode)
        kmd = Kmd(VirtualDevicePort(dev))
        try:
            assert isinstance(kmd.engine, HeadedEngine) == (config == "full-headed")
            results.append(_run(kmd))
            if config == "full-headed":
                assert kmd.engine.firmware_version is not None
                assert kmd.engine.firmware_version.version == api.VERSION
                assert dev.reg_read(R.GLB_MCU_STATUS) & R.mcu_status_e.ATTACHED
        finally:
            kmd.close()
            dev.close()
    for name, value in results[0].items():
        assert np.array_equal(value, results[1][name]), name


def test_the_firmware_validates_a_repeated_task_once(headed: VirtualDevice) -> None:
    kmd = Kmd(VirtualDevicePort(headed))
    try:
        ctx = kmd.open_context()
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        for seed in range(3):
            expected = case.feed(kmd, ctx, loaded, seed)
            kmd.submit(ctx, loaded.addresses).wait(5000)
            case.check(kmd, ctx, loaded, expected)
        assert headed.mcu is not None
        cache = headed.mcu.firmware.cache
        assert (cache.misses, cache.hits) == (1, 2)
    finally:
        kmd.close()


def _find(messages: list, cls: type) -> object:
    found = [m for m in messages if isinstance(m, cls)]
    assert found, f"no {cls.__name__} among {messages}"
    return found[-1]


def test_bad_and_out_of_order_messages_get_error_statuses(headed: VirtualDevice) -> None:
    box = MailboxClient(headed)
    # before the handshake
    rsp = box.call(api.task_status_cmd.new(task_id=5))
    assert rsp.status == ST.OUT_OF_ORDER
    assert box.call(api.version_query_cmd.new()).api.major == api.VERSION[0]
    # an id the firmware does not know
    box.send_raw(bytes(16)[:0] + (16).to_bytes(4, "little") + (0x7FFF).to_bytes(2, "little") + b"\x01\x00"
                 + (77).to_bytes(8, "little"))
    evt = _find(box.receive(0.5), api.error_evt)
    assert (evt.status, evt.op_index, evt.task_id, evt.context_id) == (ST.NOT_SUPPORTED, 0x7FFF, 77, 0xFFFF)
    # a response where a command belongs
    box.send_raw(bytes(api.abort_rsp.new()))
    assert _find(box.receive(0.5), api.error_evt).status == ST.BAD_MESSAGE
    # a known command with the wrong size in its header
    wrong = bytearray(api.task_status_cmd.new(tag=9, task_id=1))
    wrong[0:4] = (16).to_bytes(4, "little")
    box.send_raw(bytes(wrong[:16]))
    assert _find(box.receive(0.5), api.task_status_rsp).status == ST.BAD_MESSAGE
    # a size that cannot be framed: the ring is skipped, and the firmware goes on
    box.send_raw(bytes(8))
    assert _find(box.receive(0.5), api.error_evt).status == ST.BAD_MESSAGE
    assert box.call(api.version_query_cmd.new()).api.minor == api.VERSION[1]
    # fields the firmware checks
    assert box.call(api.task_submit_list_cmd.new(task_id=1, num_addresses=0)).status == ST.BAD_PARAMETER
    assert box.call(api.task_submit_list_cmd.new(task_id=1, num_addresses=1, context_id=999)).status \
        == ST.BAD_PARAMETER
    assert box.call(api.task_submit_list_cmd.new(task_id=1, num_addresses=1, context_id=box.ctx)).status \
        == ST.BAD_PARAMETER  # the mailbox's own context
    ctx = box.port.dla_create_context()
    unmapped = box.call(api.task_submit_list_cmd.new(task_id=1, num_addresses=4, context_id=ctx,
                                                     address_list=0x10))
    assert (unmapped.status, unmapped.nv_error) == (ST.MMU_FAULT, NvError.InvalidAddress)
    assert box.call(api.reset_cmd.new(scope=9)).status == ST.BAD_PARAMETER
    assert box.call(api.reset_cmd.new(scope=api.reset_scope_e.ENGINE, engine_mask=1 << 20)).status \
        == ST.BAD_PARAMETER
    assert box.call(api.task_submit_cmd.new(task_id=3)).status == ST.NOT_SUPPORTED
    assert box.call(api.abort_cmd.new(task_id=12345, context_id=ctx)).status == ST.OUT_OF_ORDER
    assert headed.reg_read(R.GLB_MCU_STATUS) & R.mcu_status_e.RUNNING  # never stopped
    assert headed.mcu is not None and headed.mcu.firmware.refused >= 10


def test_a_mailbox_the_firmware_cannot_use_is_refused(headed: VirtualDevice) -> None:
    box = MailboxClient(headed)
    box.mem[0] ^= 0xFF  # the magic
    box.port.dla_reg_write(R.GLB_MCU_MBOX_SIZE, box.layout.size)
    assert not headed.reg_read(R.GLB_MCU_STATUS) & R.mcu_status_e.ATTACHED
    assert headed.mcu is not None and "magic" in (headed.mcu.attach_error or "")
    box.port.dla_reg_write(R.GLB_MCU_MBOX_CTX, 4242)  # no such context
    box.port.dla_reg_write(R.GLB_MCU_MBOX_SIZE, box.layout.size)
    assert "context 4242" in (headed.mcu.attach_error or "")


# -- the version handshake with firmware built from other specs ------------------------------------


def _firmware_api(tmp_path: Path, version: str, extra_message: bool = False) -> ModuleType:
    """The device-API Python generated from the bundled spec with another version (and a message more);
    version 1.1.x: without what 1.2 appended (task_submit_list_cmd's nvdla_task and version)."""
    specs = tmp_path / f"specs-{version}-{extra_message}"
    shutil.copytree(bundled_specs_dir() / "device_api", specs / "device_api")
    if version.startswith("1.1."):
        control = specs / "device_api" / "control.yaml"
        control.write_text("".join(line for line in control.read_text().splitlines(keepends=True)
                                   if "Name: nvdla_" not in line))
    text = (bundled_specs_dir() / "device_api.yaml").read_text()
    (specs / "device_api.yaml").write_text(re.sub(r"\nVersion: .*\n", f"\nVersion: {version}\n", text))
    if extra_message:
        with (specs / "device_api" / "events.yaml").open("a") as f:
            f.write("  - Name: heartbeat_evt\n    Id: 67\n    Type: Event\n    Fields:\n"
                    "      - {Name: uptime_ns, Type: u64}\n")
    out = tmp_path / f"gen-{version}-{extra_message}"
    (output,) = outputs_for(specs / "device_api.yaml", out, ("python",))
    output.path.parent.mkdir(parents=True, exist_ok=True)
    output.path.write_text(output.text)
    name = f"_fw_device_api_{version.replace('.', '_')}_{int(extra_message)}"
    spec = importlib.util.spec_from_file_location(name, output.path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _open_with(tmp_path: Path, version: str, extra: bool = False) -> tuple[VirtualDevice, Kmd | DlaError]:
    dev = VirtualDevice("full-headed")
    assert dev.mcu is not None
    dev.mcu.flash(_firmware_api(tmp_path, version, extra))
    try:
        return dev, Kmd(VirtualDevicePort(dev))
    except DlaError as e:
        return dev, e


def test_an_older_firmware_is_refused_naming_both_versions(tmp_path: Path) -> None:
    dev, result = _open_with(tmp_path, "1.0.0")
    dev.close()
    assert isinstance(result, DlaError) and result.code == NvError.VersionMismatch
    assert HOST in result.message and "firmware has 1.0.0" in result.message
    assert "upgrade the device firmware" in result.message


def test_a_newer_major_firmware_is_refused_asking_for_a_newer_host(tmp_path: Path) -> None:
    dev, result = _open_with(tmp_path, "2.0.0")
    dev.close()
    assert isinstance(result, DlaError) and result.code == NvError.VersionMismatch
    assert HOST in result.message and "2.0.0" in result.message
    assert "upgrade the host KMD" in result.message


def test_the_same_version_with_another_layout_is_refused(tmp_path: Path) -> None:
    dev, result = _open_with(tmp_path, ".".join(map(str, api.VERSION)), extra=True)
    dev.close()
    assert isinstance(result, DlaError) and "layout mismatch" in result.message


def test_a_newer_minor_firmware_is_accepted_and_runs(tmp_path: Path) -> None:
    dev, kmd = _open_with(tmp_path, "1.3.0", extra=True)
    try:
        assert isinstance(kmd, Kmd), kmd
        assert isinstance(kmd.engine, HeadedEngine) and kmd.engine.firmware_version is not None
        assert kmd.engine.firmware_version.version == (1, 3, 0)
        _run(kmd)
        kmd.close()
    finally:
        dev.close()


# -- a hung firmware --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_a_hung_firmware_is_caught_by_the_host_and_reset(mode: str) -> None:
    dev = VirtualDevice("full-headed", mode=mode)
    kmd = Kmd(VirtualDevicePort(dev), tdr_ms=200)
    try:
        assert dev.mcu is not None and isinstance(kmd.engine, HeadedEngine)
        ctx = kmd.open_context()
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        case.feed(kmd, ctx, loaded, 1)
        dev.mcu.inject_hang()
        job = kmd.submit(ctx, loaded.addresses)
        with pytest.raises(DlaError) as hung:
            job.wait(10_000)
        assert hung.value.code == NvError.Timeout
        assert "the device firmware did not answer" in hung.value.message
        assert "microcontroller and the device were reset" in hung.value.message
        assert kmd.engine.stats["firmware_resets"] == 1
        # the firmware was restarted and attached again: the next job runs
        assert not dev.mcu.hung
        expected = case.feed(kmd, ctx, loaded, 2)
        kmd.submit(ctx, loaded.addresses).wait(5000)
        case.check(kmd, ctx, loaded, expected)
    finally:
        kmd.close()
        dev.close()


def test_a_corrupt_response_ring_is_counted_and_skipped_not_followed(headed: VirtualDevice) -> None:
    """What the device writes is not trusted either: a head that went backwards, a message size that
    cannot be, a message of the wrong kind: the host counts them and goes on."""
    from pydla.firmware.headed_ring import counters

    kmd = Kmd(VirtualDevicePort(headed))
    try:
        engine = kmd.engine
        assert isinstance(engine, HeadedEngine) and engine._mbox is not None
        words = counters(engine._mbox[3])
        words[3] = 0  # rsp_head behind what the host consumed (the handshake's response)
        engine.dla_process_events()
        words[3] = int(words[4]) + 8  # a head past a message whose size field is 0
        engine.dla_process_events()
        assert engine.stats["bad_messages"] == 2
        _run(kmd)  # the host skipped what it could not read, and the firmware goes on
    finally:
        kmd.close()


def test_the_firmware_validates_its_own_copy_of_the_descriptors(headed: VirtualDevice) -> None:
    """Headed, the host's validation at prepare does not vouch for the memory the firmware reads when
    the task starts: descriptors made invalid in between are refused by the firmware itself (its
    copy, its check), and the driver serves the next task."""
    from tests.kmd.support import Descriptors

    kmd = Kmd(VirtualDevicePort(headed))
    try:
        ctx = kmd.open_context()
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        prep = kmd.prepare(ctx, loaded.addresses)  # type: ignore[arg-type]
        live = Descriptors.loaded(case.built, kmd, ctx, loaded)
        original = live.surface(0).src.address
        live.surface(0).src.address = 99  # invalid now, after the host validated it
        with pytest.raises(DlaError) as refused:
            kmd.submit_prepared(ctx, prep).wait(5000)
        assert refused.value.code == NvError.BadParameter
        assert "the device firmware refused it: BAD_PARAMETER" in refused.value.message
        live.surface(0).src.address = original
        expected = case.feed(kmd, ctx, loaded, 1)
        kmd.submit_prepared(ctx, prep).wait(5000)
        case.check(kmd, ctx, loaded, expected)
    finally:
        kmd.close()
