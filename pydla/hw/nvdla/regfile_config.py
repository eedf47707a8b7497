"""What an NVDLA register file needs of its hardware configuration: the register map, the blocks that
answer, and the values of the configuration ROM (CFGROM, the newer map only).

nv_full is the nvdlav1 hardware (map ``nvdla_v1_regs``, no CFGROM); the configurations of nvdla/hw's
``spec/defs`` on the newer branches use ``nvdla_v2_regs``. A block a configuration lacks (BDMA and
RUBIK outside nv_full, CVIF without a secondary memory, the error controller GEC, which only the
nvdlav1 hardware connects) does not answer: its window reads 0 like any unmapped address.

The ROM is a list of unit descriptors; its values follow from the configuration's parameters
(:func:`rom_values`). NVIDIA built the ROM of nv_small only (its RTL and the register map's reset
values); pydla's nv_small ROM is that one word for word, and every other configuration's ROM is made
by the same encoding from its ``spec/defs`` parameters (see docs/development/nvdla/registers.md).

Usage::

    cfg = regfile_config("nv_small")
    cfg.regmap.NAME, "BDMA" in cfg.blocks           # "nvdla_v2_regs", False
    hex(cfg.rom["NVDLA_CFGROM_CFGROM_CDMA_BASE_ATOMIC_C_0"])   # 0x8
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType

from pydla.deviceapi.generated import nvdla_v1_regs, nvdla_v2_regs
from pydla.errors import DlaError, NvError

ALL_BLOCKS = ("CFGROM", "GLB", "GEC", "MCIF", "CVIF", "BDMA", "CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC",
              "SDP_RDMA", "SDP", "PDP_RDMA", "PDP", "CDP_RDMA", "CDP", "RBK")
_CORE = frozenset({"GLB", "MCIF", "CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC", "SDP_RDMA", "SDP", "PDP_RDMA",
                   "PDP", "CDP_RDMA", "CDP"})
INT8_TYPES = 0x10  # the ROM's data-type mask of the INT8 configurations (NVIDIA's nv_small ROM)
IMAGE_FORMATS_PACKED, IMAGE_FORMATS_SEMI = 0x0CFFF001, 0x3
CDMA_ID, SDP_ID, PDP_ID, CDP_ID = 3, 9, 0xB, 0xD  # the ROM's unit ids


@dataclass(frozen=True)
class RomParams:
    """The parameters of a configuration that its CFGROM describes (nvdla/hw ``spec/defs``)."""

    atomic_c: int  # MAC_ATOMIC_C_SIZE
    atomic_k: int  # MAC_ATOMIC_K_SIZE
    atomic_m: int  # MEMORY_ATOMIC_SIZE
    cbuf_banks: int
    cbuf_bank_width: int
    cbuf_bank_depth: int
    sdp_lut: bool
    sdp_ew: bool
    sdp_bs_throughput: int
    sdp_bn_throughput: int
    sdp_ew_throughput: int  # 0 without the Y stage
    pdp_throughput: int
    cdp_throughput: int
    cif_width: int  # bytes of the primary memory interface
    cif_latency: int  # cycles
    cif_burst_max: int
    address_width: int
    secondary_memory: bool


@dataclass(frozen=True)
class RegfileConfig:
    """One configuration as its register file sees it."""

    name: str
    regmap: ModuleType  # pydla.deviceapi.generated.nvdla_v1_regs or nvdla_v2_regs
    blocks: frozenset[str]
    rom: dict[str, int]  # CFGROM register name -> value (empty on the nvdlav1 map)


_V2 = {
    # nv_small's ROM is NVIDIA's (latency 50 and bursts of 4, where its spec/defs say 64 and 1).
    "nv_small": RomParams(8, 8, 8, 32, 8, 512, False, False, 1, 1, 0, 1, 1, 8, 0x32, 4, 32, False),
    "nv_small_256": RomParams(32, 8, 8, 32, 32, 128, False, False, 1, 1, 0, 1, 1, 8, 64, 1, 32, False),
    "nv_small_256_full": RomParams(32, 8, 8, 32, 32, 128, True, True, 2, 2, 1, 1, 1, 8, 64, 4, 32, True),
    "nv_medium_512": RomParams(32, 16, 16, 32, 32, 512, False, False, 4, 4, 0, 2, 2, 16, 256, 4, 64, False),
    "nv_medium_1024_full": RomParams(32, 32, 32, 32, 32, 512, True, True, 8, 8, 2, 4, 4, 32, 1024, 4, 64,
                                     True),
    "nv_large": RomParams(64, 32, 32, 16, 64, 512, True, True, 16, 16, 4, 8, 8, 32, 1024, 1, 64, True),
}
NAMES = ("nv_full", *_V2)


def rom_values(p: RomParams) -> dict[str, int]:
    """The CFGROM words of a configuration with parameters ``p``, by register name."""
    sdp_caps = (p.sdp_lut << 2) | (1 << 3) | (1 << 4) | (p.sdp_ew << 5)  # LUT, BS, BN, EW
    cbuf = {"CBUF_BANK_NUM": p.cbuf_banks, "CBUF_BANK_WIDTH": p.cbuf_bank_width,
            "CBUF_BANK_DEPTH": p.cbuf_bank_depth}
    units: list[tuple[str, int, dict[str, int]]] = [
        ("CIF", 0x180002, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, "BASE_WIDTH": p.cif_width,
                           "BASE_LATENCY": p.cif_latency, "BASE_BURST_LENGTH_MAX": p.cif_burst_max << 5,
                           "BASE_MEM_ADDR_WIDTH": p.address_width << 5}),
        ("CDMA", 0x340003, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0x10, "BASE_FEATURE_TYPES": INT8_TYPES,
                            "BASE_WEIGHT_TYPES": INT8_TYPES, "BASE_ATOMIC_C": p.atomic_c,
                            "BASE_ATOMIC_K": p.atomic_k, "BASE_ATOMIC_M": p.atomic_m,
                            **{f"BASE_{k}": v for k, v in cbuf.items()}, "MULTI_BATCH_MAX": 0,
                            "IMAGE_IN_FORMATS_PACKED": IMAGE_FORMATS_PACKED,
                            "IMAGE_IN_FORMATS_SEMI": IMAGE_FORMATS_SEMI}),
        ("CBUF", 0x180004, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, **{f"BASE_{k}": v for k, v in cbuf.items()},
                            "BASE_CDMA_ID": CDMA_ID}),
        ("CSC", 0x300005, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0x10, "BASE_FEATURE_TYPES": INT8_TYPES,
                           "BASE_WEIGHT_TYPES": INT8_TYPES, "BASE_ATOMIC_C": p.atomic_c,
                           "BASE_ATOMIC_K": p.atomic_k, "BASE_ATOMIC_M": p.atomic_m,
                           **{f"BASE_{k}": v for k, v in cbuf.items()}, "BASE_CDMA_ID": CDMA_ID,
                           "MULTI_BATCH_MAX": 0}),
        *((cmac, 0x1C0006, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0x10, "BASE_FEATURE_TYPES": INT8_TYPES,
                             "BASE_WEIGHT_TYPES": INT8_TYPES, "BASE_ATOMIC_C": p.atomic_c,
                             "BASE_ATOMIC_K": p.atomic_k, "BASE_CDMA_ID": CDMA_ID})
           for cmac in ("CMAC_A", "CMAC_B")),
        ("CACC", 0x200007, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, "BASE_FEATURE_TYPES": INT8_TYPES,
                            "BASE_WEIGHT_TYPES": INT8_TYPES, "BASE_ATOMIC_C": p.atomic_c,
                            "BASE_ATOMIC_K": p.atomic_k, "BASE_CDMA_ID": CDMA_ID, "MULTI_BATCH_MAX": 0}),
        ("SDP_RDMA", 0xE0008, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, "BASE_ATOMIC_M": p.atomic_m,
                               "BASE_SDP_ID": SDP_ID}),
        ("SDP", 0x200009, {"CAP_INCOMPAT": 0, "CAP_COMPAT": sdp_caps, "BASE_FEATURE_TYPES": INT8_TYPES,
                           "BASE_WEIGHT_TYPES": INT8_TYPES, "BASE_CDMA_ID": CDMA_ID, "MULTI_BATCH_MAX": 0,
                           "BS_THROUGHPUT": p.sdp_bs_throughput, "BN_THROUGHPUT": p.sdp_bn_throughput,
                           "EW_THROUGHPUT": p.sdp_ew_throughput}),
        ("PDP_RDMA", 0xE000A, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, "BASE_ATOMIC_M": p.atomic_m,
                               "BASE_PDP_ID": PDP_ID}),
        ("PDP", 0x10000B, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, "BASE_FEATURE_TYPES": INT8_TYPES,
                           "BASE_THROUGHPUT": p.pdp_throughput}),
        ("CDP_RDMA", 0xE000C, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, "BASE_ATOMIC_M": p.atomic_m,
                               "BASE_CDP_ID": CDP_ID}),
        ("CDP", 0x10000D, {"CAP_INCOMPAT": 0, "CAP_COMPAT": 0, "BASE_FEATURE_TYPES": INT8_TYPES,
                           "BASE_THROUGHPUT": p.cdp_throughput}),
    ]
    rom = {"CFGROM_HW_VERSION": 0x10001, "CFGROM_GLB_DESC": 0x1}
    for unit, desc, words in units:
        rom[f"CFGROM_{unit}_DESC"] = desc
        rom.update({f"CFGROM_{unit}_{k}": v for k, v in words.items()})
    rom["CFGROM_END_OF_LIST"] = 0
    return {f"NVDLA_CFGROM_{k}_0": v for k, v in rom.items()}


@functools.cache
def regfile_config(name: str) -> RegfileConfig:
    """The register file's view of the NVDLA configuration ``name`` (nvdla/hw's names)."""
    if name == "nv_full":
        return RegfileConfig(name, nvdla_v1_regs, _CORE | {"GEC", "CVIF", "BDMA", "RBK"}, {})
    params = _V2.get(name)
    if params is None:
        raise DlaError(NvError.BadParameter,
                       f"NVDLA configuration {name!r} is unknown (known: {', '.join(NAMES)})")
    blocks = _CORE | {"CFGROM"} | ({"CVIF"} if params.secondary_memory else set())
    return RegfileConfig(name, nvdla_v2_regs, frozenset(blocks), rom_values(params))
