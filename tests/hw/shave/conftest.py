"""Fixtures for the SHAVE tests: a full device (two tiles) in deterministic mode and its test host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pydla.hw.device import VirtualDevice
from tests.hw.shave.host import Host


@pytest.fixture
def dev() -> Iterator[VirtualDevice]:
    device = VirtualDevice("full", mode="deterministic")
    yield device
    device.close()


@pytest.fixture
def host(dev: VirtualDevice) -> Host:
    return Host(dev)
