"""The UMD tests run three times: over headless devices (the engine scheduler in the host's KMD), over
headed ones (the same scheduler on the device's microcontroller, reached through the device-API
mailbox), and over headless devices without their command processor (the per-operation path, the
reference). The composition root (:mod:`pydla.platform`) is where devices are built: each run
changes every configuration it loads, so the tests themselves do not change."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

import pydla.platform
from pydla.target.config import DeviceConfig, load_config


@pytest.fixture(autouse=True, params=["headless", "headed", "per-op"])
def kmd_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "headed":
        def headed(config: Any = "full") -> DeviceConfig:
            return dataclasses.replace(load_config(config), headed=True)

        monkeypatch.setattr(pydla.platform, "load_config", headed)
    elif request.param == "per-op":
        def per_operation(config: Any = "full") -> DeviceConfig:
            return dataclasses.replace(load_config(config), command_processor=False)

        monkeypatch.setattr(pydla.platform, "load_config", per_operation)
    yield str(request.param)
