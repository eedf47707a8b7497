"""Compute units: IP_LAYOUT entries (:mod:`.layout`), the control block of XRT's kernel execution
models (:mod:`.unit`) and the models that compute (:mod:`.models`, where a driver developer's own
model starts: subclass :class:`ComputeUnitModel`).

The names below are imported on first use: the device configuration imports :mod:`.layout`, and
:mod:`.models` needs device memory, which needs the configuration.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"ComputeUnitInfo": "layout", "parse_ip_layout": "layout", "xclbin_ip_layout": "layout",
          "ComputeUnitModel": "models", "CuArgs": "models", "CuError": "models", "CuMemory": "models",
          "CuEvent": "unit"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pydla.hw.cu' has no attribute {name!r}")
    return getattr(importlib.import_module(f"pydla.hw.cu.{module}"), name)
