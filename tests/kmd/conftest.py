"""Fixtures of the KMD tests: devices and drivers that are closed after each test.

Every test that builds its driver with ``make_kmd`` (or ``kmd_full``) runs three times: headless (the
engine scheduler in the host's KMD), headed (the same scheduler on the device's microcontroller,
the KMD talking to it through the device-API mailbox), and headless on the per-operation path (the
device's command processor switched off, as ``"engine": {"command_processor": false}`` does: one
host round trip per operation, the reference the command processor must agree with). A test that
inspects what only a headless driver has (the engine's TaskRun state, the exact register trace of
the host's programming) is marked ``@pytest.mark.headless_only`` with the reason, and runs headless
only (on both paths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.target.config import DeviceConfig, load_config
from tests.kmd.support import MakeKmd


@pytest.fixture(params=["headless", "headed", "per-op"])
def kmd_mode(request: pytest.FixtureRequest) -> str:
    """Where the engine scheduler runs: on the host (headless, and per-op: headless without the
    device's command processor) or on the device's microcontroller (headed)."""
    if request.param == "headed" and request.node.get_closest_marker("headless_only") is not None:
        pytest.skip("headless only: " + str(request.node.get_closest_marker("headless_only").args[0]))
    return str(request.param)


def with_mode(config: str | DeviceConfig, mode: str) -> DeviceConfig:
    """``config`` (a configuration or a bundled one's name), headed when ``mode`` says so."""
    loaded = load_config(config)
    if mode == "per-op":
        return dataclasses.replace(loaded, command_processor=False)
    return dataclasses.replace(loaded, headed=mode == "headed")


@pytest.fixture
def make_kmd(kmd_mode: str) -> Iterator[MakeKmd]:
    """``make_kmd(config="full", mode="deterministic", **kmd_kwargs) -> (device, kmd)``."""
    made: list[tuple[VirtualDevice, Kmd]] = []

    def make(config: str | DeviceConfig = "full", mode: str = "deterministic",
             **kwargs: object) -> tuple[VirtualDevice, Kmd]:
        dev = VirtualDevice(with_mode(config, kmd_mode), mode=mode)
        kmd = Kmd(VirtualDevicePort(dev), **kwargs)  # type: ignore[arg-type]
        made.append((dev, kmd))
        return dev, kmd

    yield make
    for dev, kmd in reversed(made):
        kmd.close()
        dev.close()


@pytest.fixture
def kmd_full(make_kmd: MakeKmd) -> tuple[VirtualDevice, Kmd]:
    """A driver over a deterministic "full" device."""
    return make_kmd()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "headless_only(reason): the test inspects what only a headless "
                                       "driver has; it does not run headed")
