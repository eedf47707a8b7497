"""Compute units: the control block of XRT's kernel execution models (:mod:`.unit`) and the models
that compute (:mod:`.models`, where a driver developer's own model starts: subclass
:class:`ComputeUnitModel`). The IP_LAYOUT entries that declare them, and the model interface a
configuration is checked against, are the target's (:mod:`pydla.target.ip_layout`,
:mod:`pydla.target.cu_model`); ``ComputeUnitModel``, ``CuArgs`` and ``CuError`` are named here too,
where a driver developer writing a model imports them.

Usage: ``from pydla.hw.cu import ComputeUnitModel``
"""

from __future__ import annotations

from pydla.hw.cu.models import CuMemory
from pydla.hw.cu.unit import CuEvent
from pydla.target.cu_model import ComputeUnitModel, CuArgs, CuError

__all__ = ["ComputeUnitModel", "CuArgs", "CuError", "CuEvent", "CuMemory"]
