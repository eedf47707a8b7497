"""Fixtures for the SHAVE tests: a full device (two tiles) in deterministic mode and its test host.

The device runs every kernel's machine code (``shave.emulation`` "exact"): these tests are about
the kernels and the tiles. tests/hw/shave/test_hle.py compares the default "fast" mode with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from pydla.hw.device import VirtualDevice
from pydla.target.config import DeviceConfig, load_config
from tests.hw.shave.host import Host


def config(emulation: str = "exact", name: str = "full") -> DeviceConfig:
    """Configuration ``name`` with its SHAVE tiles in emulation mode ``emulation``."""
    cfg = load_config(name)
    assert cfg.shave is not None
    return dataclasses.replace(cfg, shave=dataclasses.replace(cfg.shave, emulation=emulation))


@pytest.fixture
def dev() -> Iterator[VirtualDevice]:
    device = VirtualDevice(config("exact"), mode="deterministic")
    yield device
    device.close()


@pytest.fixture
def host(dev: VirtualDevice) -> Host:
    return Host(dev)
