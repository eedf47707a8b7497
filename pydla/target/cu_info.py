"""One compute unit as a device configuration's IP_LAYOUT declares it (XRT's ``ip_data`` fields and
pydla's), the type the configuration parser (:mod:`pydla.target.ip_layout`), the compute-unit models
(:mod:`pydla.target.cu_model`) and the device's units all take.

Usage: ``cu = load_config("full").ip_layout[1]; (cu.kernel, cu.instance, cu.m_ip_control)``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENGINE_MODEL = "engine"  # the DLA engine itself: declared, run by the existing engine path


@dataclass(frozen=True)
class ComputeUnitInfo:
    """One IP_LAYOUT entry. ``params`` holds the model's own parameters (sorted key, value pairs)."""

    name: str
    m_type: str
    m_int_enable: int
    m_interrupt_id: int
    m_ip_control: str
    m_base_address: int
    window: int
    model: str
    pipeline_depth: int = 1
    latency_cycles: int = 1000
    fifo_bytes: int = 65536
    chunk_bytes: int = 4096
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def m_name(self) -> str:
        return self.name

    @property
    def kernel(self) -> str:
        return self.name.split(":", 1)[0]

    @property
    def instance(self) -> str:
        return self.name.split(":", 1)[1]

    @property
    def is_engine(self) -> bool:
        return self.model == ENGINE_MODEL

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def xclbin_entry(self) -> dict[str, str]:
        """The entry as ``xclbinutil --dump-section IP_LAYOUT:json`` writes it (every value a string)."""
        return {"m_type": self.m_type, "m_int_enable": str(self.m_int_enable),
                "m_interrupt_id": str(self.m_interrupt_id), "m_ip_control": self.m_ip_control,
                "m_base_address": f"{self.m_base_address:#x}", "m_name": self.name}
