"""The UMD tests run twice: over headless devices (the engine scheduler in the host's KMD) and over
headed ones (the same scheduler on the device's microcontroller, reached through the device-API
mailbox). The composition root (:mod:`pydla.platform`) is where devices are built: the headed run
makes every configuration it loads headed, so the tests themselves do not change."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

import pydla.platform
from pydla.target.config import DeviceConfig, load_config


@pytest.fixture(autouse=True, params=["headless", "headed"])
def kmd_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "headed":
        def headed(config: Any = "full") -> DeviceConfig:
            return dataclasses.replace(load_config(config), headed=True)

        monkeypatch.setattr(pydla.platform, "load_config", headed)
    yield str(request.param)
