"""Fixtures of the KMD tests: devices and drivers that are closed after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pydla.hw.config import DeviceConfig
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from tests.kmd.support import MakeKmd


@pytest.fixture
def make_kmd() -> Iterator[MakeKmd]:
    """``make_kmd(config="full", mode="deterministic", **kmd_kwargs) -> (device, kmd)``."""
    made: list[tuple[VirtualDevice, Kmd]] = []

    def make(config: str | DeviceConfig = "full", mode: str = "deterministic",
             **kwargs: object) -> tuple[VirtualDevice, Kmd]:
        dev = VirtualDevice(config, mode=mode)
        kmd = Kmd(dev, **kwargs)  # type: ignore[arg-type]
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
