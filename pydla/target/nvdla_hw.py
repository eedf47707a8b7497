"""The NVDLA part of a device configuration: ``"nvdla": {"hw": "nv_full", "register_map": "nvdla_v1", ...}``.

A configuration with this section is one of NVDLA's hardware configurations (nvdla/hw ``spec/defs``):
its device implements NVDLA's register map and computes as NVIDIA's C model does (pydla.hw's NVDLA
device), not pydla's own register map. The section states the facts a driver, a compiler and the
device need: the configuration's name in nvdla/hw (``hw``), the register map (``nvdla_v1``, the
nvdlav1 hardware's, or ``nvdla_v2``, the newer one with a configuration ROM), the precisions (NVDLA's:
INT8, INT16, FP16), the memory atom and the MAC array (atomic C x K), the convolution buffer (banks,
bank width in bytes, bank depth in entries), the SDP's stages, weight compression, Winograd, the
largest batch, the address width, and the on-chip SRAM behind the secondary memory interface (CVIF;
0 without one: nvdla/hw fixes the interface, the SoC the SRAM's size, so the size is pydla's choice).
Which blocks exist is the configuration's ``blocks`` list (BDMA and RUBIK on nv_full only).

Usage::

    cfg = load_config("nv_small")
    cfg.nvdla.register_map, cfg.nvdla.atom_bytes, cfg.nvdla.precisions   # "nvdla_v2", 8, ("INT8",)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydla.errors import DlaError, NvError

REGISTER_MAPS = ("nvdla_v1", "nvdla_v2")
PRECISIONS = ("INT8", "INT16", "FP16")  # NVDLA's data types (dla_precision in its descriptors: 0, 1, 2)
_POWERS = (1, 2, 4, 8, 16, 32, 64, 128)
_MAX_SRAM = 1 << 30


@dataclass(frozen=True)
class NvdlaHwConfig:
    """The checked ``nvdla`` section (see the module docstring)."""

    hw: str
    register_map: str
    precisions: tuple[str, ...]
    atom_bytes: int
    mac_atomic_c: int
    mac_atomic_k: int
    cbuf_banks: int
    cbuf_bank_width: int
    cbuf_bank_depth: int
    sdp_x1: bool
    sdp_x2: bool
    sdp_y: bool
    sdp_lut: bool
    weight_compression: bool
    winograd: bool
    max_batch: int
    address_bits: int
    sram_bytes: int

    @property
    def cbuf_bytes(self) -> int:
        """The convolution buffer's size: banks x width x depth."""
        return self.cbuf_banks * self.cbuf_bank_width * self.cbuf_bank_depth

    @property
    def macs(self) -> int:
        """INT8 multiply-accumulate units: atomic C x atomic K."""
        return self.mac_atomic_c * self.mac_atomic_k


_INTS: dict[str, tuple[Callable[[int], bool], str]] = {
         "atom_bytes": (lambda v: v in (8, 16, 32, 64), "8, 16, 32 or 64"),
         "mac_atomic_c": (lambda v: v in _POWERS[2:], "a power of two 4..128"),
         "mac_atomic_k": (lambda v: v in _POWERS[2:], "a power of two 4..128"),
         "cbuf_banks": (lambda v: v in _POWERS[1:] or v == 32, "a power of two 2..32"),
         "cbuf_bank_width": (lambda v: v in (*_POWERS[3:], 256), "a power of two 8..256"),
         "cbuf_bank_depth": (lambda v: v in (64, 128, 256, 512, 1024), "a power of two 64..1024"),
         "max_batch": (lambda v: 1 <= v <= 32, "1..32"),
         "address_bits": (lambda v: v in (32, 40, 48, 64), "32, 40, 48 or 64"),
         "sram_bytes": (lambda v: v == 0 or (4096 <= v <= _MAX_SRAM and v % 4096 == 0),
                        f"0 (none) or a multiple of 4096 up to {_MAX_SRAM}")}
_BOOLS = ("sdp_x1", "sdp_x2", "sdp_y", "sdp_lut", "weight_compression", "winograd")


def parse_nvdla(raw: Any, source: str) -> NvdlaHwConfig | None:
    """The checked ``nvdla`` section, or None when ``raw`` is None (not an NVDLA configuration)."""
    if raw is None:
        return None
    where = f"{source}: 'nvdla'"
    if not isinstance(raw, dict):
        raise DlaError(NvError.BadValue, f"{where} must be an object, not {raw!r}")
    known = {"hw", "register_map", "precisions", *_INTS, *_BOOLS}
    unknown, missing = sorted(set(raw) - known), sorted(known - set(raw))
    if unknown:
        raise DlaError(NvError.BadValue, f"{where} has unknown field(s) {', '.join(unknown)}")
    if missing:
        raise DlaError(NvError.BadValue, f"{where} lacks field(s) {', '.join(missing)}")
    hw = raw["hw"]
    if not isinstance(hw, str) or not hw.isidentifier():
        raise DlaError(NvError.BadValue, f"{where}.hw = {hw!r} must be nvdla/hw's name of the configuration")
    if raw["register_map"] not in REGISTER_MAPS:
        raise DlaError(NvError.BadValue, f"{where}.register_map = {raw['register_map']!r} must be one of "
                                         f"{', '.join(REGISTER_MAPS)}")
    precisions = raw["precisions"]
    if not isinstance(precisions, list) or not precisions or any(p not in PRECISIONS for p in precisions) \
            or len(set(precisions)) != len(precisions):
        raise DlaError(NvError.BadValue, f"{where}.precisions = {precisions!r} must list distinct ones of "
                                         f"{', '.join(PRECISIONS)}")
    for key, (ok, rule) in _INTS.items():
        value = raw[key]
        if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
            raise DlaError(NvError.BadValue, f"{where}.{key} = {value!r} must be {rule}")
    for key in _BOOLS:
        if not isinstance(raw[key], bool):
            raise DlaError(NvError.BadValue, f"{where}.{key} must be true or false, not {raw[key]!r}")
    if raw["mac_atomic_c"] < raw["atom_bytes"]:
        raise DlaError(NvError.BadValue, f"{where}.mac_atomic_c = {raw['mac_atomic_c']} must be at least "
                                         f"atom_bytes ({raw['atom_bytes']})")
    if (raw["sdp_y"] or raw["sdp_lut"]) and not raw["sdp_x1"]:
        raise DlaError(NvError.BadValue, f"{where}: an SDP with Y or its LUT has X1 too (sdp_x1 true)")
    if raw["sdp_lut"] and not raw["sdp_y"]:
        raise DlaError(NvError.BadValue, f"{where}.sdp_lut: the LUT is in the Y stage (sdp_y true)")
    return NvdlaHwConfig(
        hw=hw, register_map=raw["register_map"], precisions=tuple(precisions), atom_bytes=raw["atom_bytes"],
        mac_atomic_c=raw["mac_atomic_c"], mac_atomic_k=raw["mac_atomic_k"], cbuf_banks=raw["cbuf_banks"],
        cbuf_bank_width=raw["cbuf_bank_width"], cbuf_bank_depth=raw["cbuf_bank_depth"], sdp_x1=raw["sdp_x1"],
        sdp_x2=raw["sdp_x2"], sdp_y=raw["sdp_y"], sdp_lut=raw["sdp_lut"],
        weight_compression=raw["weight_compression"], winograd=raw["winograd"], max_batch=raw["max_batch"],
        address_bits=raw["address_bits"], sram_bytes=raw["sram_bytes"])
