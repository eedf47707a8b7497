"""An NVDLA operation as the register writes NVIDIA's firmware makes for it (tests only: the KMD's own
firmware lives in pydla/firmware/nvdla/).

From the block kernels' parameters (which tests/hw/nvdla/nvdla_run.py derives from a loadable's
descriptors as the firmware does, docs/development/nvdla/firmware.md) to ``(address, value)`` writes
in the firmware's order: unmask the done interrupts, select the producer group of every block of the
operation (``S_POINTER``), write each block's D registers field by field (NVDLA's field names: a
dataclass field ``kernel_width`` is the bit field ``KERNEL_WIDTH``; addresses as their HIGH and LOW
registers; an address, a stride or a byte count written whole, the register keeping its field's
bits), the LUT through ``S_LUT_ACCESS_CFG``/``S_LUT_ACCESS_DATA``, then the enables: the RDMA before
its core block, a convolution's CACC, CMAC_A, CMAC_B, CSC, CDMA; BDMA's transfers each with
``CFG_OP``, then ``CFG_LAUNCH0/1``.

Usage::

    writes = operation_writes(V2, "PDP", pdp_params, group=0)
    for address, value in writes:
        dev.reg_write(address, value)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from pydla.hw.nvdla import pdp
from pydla.hw.nvdla.bdma import BdmaParams
from pydla.hw.nvdla.cdp_params import CdpParams
from pydla.hw.nvdla.conv_params import ConvParams
from pydla.hw.nvdla.rubik import RubikParams
from pydla.hw.nvdla.sdp_params import SdpParams

Writes = list[tuple[int, int]]
BYTE_VALUE = re.compile(r"(_ADDR_LOW(_[01])?|_ADDR|_STRIDE(_[01])?|_BYTES)$")
_RDMA = ("SDP", "PDP", "CDP")
# GLB S_INTR_MASK bits of each processor's done interrupts (groups 0 and 1)
DONE_BITS = {"SDP": 0x3, "CDP": 0xC, "PDP": 0x30, "BDMA": 0xC0, "RUBIK": 0x300, "CONV": 0x3F0000}


def _fields(params: Any, *skip: str) -> dict[str, int]:
    return {f.name.upper(): getattr(params, f.name) for f in dataclasses.fields(params) if f.name not in skip}


def _split(address: int, name: str, suffix: str = "") -> dict[str, int]:
    return {f"{name}_LOW{suffix}": address & 0xFFFFFFFF, f"{name}_HIGH{suffix}": address >> 32}


def _registers(regs: ModuleType, block: str) -> list[Any]:
    """The D registers of ``block`` and its LUT's S registers, in address order (not D_OP_ENABLE, not the
    LUT's access port, not read-only ones)."""
    prefix = f"NVDLA_{block}_"
    out = []
    for name, info in regs.REGISTER_INFO.items():
        rest = name[len(prefix):]
        if not name.startswith(prefix) or (block in _RDMA and rest.startswith("RDMA_")):
            continue
        if not (rest.startswith("D_") or rest.startswith("S_LUT_")) or rest.startswith("D_OP_ENABLE") \
                or rest.startswith("S_LUT_ACCESS") or not info.write_mask:
            continue
        out.append(info)
    return sorted(out, key=lambda i: i.address)


def block_writes(regs: ModuleType, block: str, values: Mapping[str, int]) -> Writes:
    """Every register of ``block`` holding a bit field named in ``values``, with those fields set (the
    rest at their reset values)."""
    writes = []
    for info in _registers(regs, block):
        hits = [b for b in info.bits if b.name in values]
        if not hits:
            continue
        word = info.reset
        for b in hits:
            value = int(values[b.name])
            if len(info.bits) == 1 and b.lsb > 0 and BYTE_VALUE.search(b.name):
                word = value & 0xFFFFFFFF  # a byte value: the register keeps its field's bits
            else:
                word = b.put(word, value & ((1 << b.width) - 1))
        writes.append((info.address, word))
    return writes


def lut_writes(regs: ModuleType, block: str, le: tuple[int, ...], lo: tuple[int, ...]) -> Writes:
    """The LE then the LO table through the LUT access port (entries auto-increment)."""
    cfg = regs.REGISTER_INFO[f"NVDLA_{block}_S_LUT_ACCESS_CFG_0"]
    data = regs.REGISTERS[f"NVDLA_{block}_S_LUT_ACCESS_DATA_0"]
    writes: Writes = []
    for table_id, table in ((0, le), (1, lo)):
        if not table:
            continue
        word = cfg.field("LUT_TABLE_ID").put(cfg.field("LUT_ACCESS_TYPE").put(0, 1), table_id)
        writes.append((cfg.address, word))
        writes += [(data, entry & 0xFFFF) for entry in table]
    return writes


def _pointer(regs: ModuleType, blocks: tuple[str, ...], group: int) -> Writes:
    return [(regs.REGISTERS[f"NVDLA_{b}_S_POINTER_0"], group) for b in blocks]


def _enable(regs: ModuleType, blocks: tuple[str, ...]) -> Writes:
    return [(regs.REGISTERS[f"NVDLA_{b}_D_OP_ENABLE_0"], 1) for b in blocks]


def operation_writes(regs: ModuleType, processor: str, params: Any, group: int = 0,
                     unmask: bool = True) -> Writes:
    """The writes that program and enable one operation of ``processor`` in register group ``group``."""
    writes: Writes = []
    if unmask:
        info = regs.REGISTER_INFO["NVDLA_GLB_S_INTR_MASK_0"]
        writes.append((info.address, info.reset & ~DONE_BITS[processor] & 0xFFFFFFFF))
    if processor == "BDMA":
        return writes + _bdma(regs, params, group)
    values, enables, tables = _PROGRAM[processor](params)
    blocks = tuple(values)
    writes += _pointer(regs, blocks, group)
    for block, fields in values.items():
        writes += block_writes(regs, block, fields)
    for block, (le, lo) in tables.items():
        writes += lut_writes(regs, block, le, lo)
    return writes + _pointer(regs, blocks, group) + _enable(regs, enables)


# (block -> its field values, the blocks to enable in order, block -> its LUT tables (LE, LO))
Tables = tuple[tuple[int, ...], tuple[int, ...]]
Program = tuple[dict[str, dict[str, int]], tuple[str, ...], dict[str, Tables]]


def _pdp(p: pdp.PdpParams) -> Program:
    values = {**_fields(p, "src_base_addr", "dst_base_addr"), **_split(p.src_base_addr, "SRC_BASE_ADDR"),
              **_split(p.dst_base_addr, "DST_BASE_ADDR")}
    rdma = p.flying_mode == pdp.OFF_FLYING
    return {"PDP_RDMA": values, "PDP": values}, ("PDP_RDMA", "PDP") if rdma else ("PDP",), {}


def _sdp(p: SdpParams) -> Program:
    skip = ("src_base_addr", "dst_base_addr", "bs", "bn", "ew", "brdma", "nrdma", "erdma", "lut")
    values = {**_fields(p, *skip),
              **_split(p.src_base_addr, "SRC_BASE_ADDR"), **_split(p.dst_base_addr, "DST_BASE_ADDR")}
    values["SRC_RAM_TYPE"] = p.src_ram_type
    for stage in ("bs", "bn", "ew"):
        values.update({f"{stage}_{k}".upper(): v for k, v in _fields(getattr(p, stage)).items()})
    values.update({f"LUT_{k}": v for k, v in _fields(p.lut, "le_table", "lo_table").items()})
    for dma, stage in (("brdma", "bs"), ("nrdma", "bn"), ("erdma", "ew")):
        d = getattr(p, dma)
        values.update({f"{dma}_{k}".upper(): getattr(d, k)
                       for k in ("disable", "data_use", "data_size", "data_mode", "ram_type")})
        values.update({f"{stage}_LINE_STRIDE".upper(): d.line_stride,
                       f"{stage}_SURFACE_STRIDE".upper(): d.surface_stride,
                       **_split(d.base_addr, f"{stage}_BASE_ADDR".upper())})
    rdma = not p.flying_mode or not (p.brdma.disable and p.nrdma.disable and p.erdma.disable)
    tables = {"SDP": (p.lut.le_table, p.lut.lo_table)} if p.lut.le_table or p.lut.lo_table else {}
    return {"SDP_RDMA": values, "SDP": values}, ("SDP_RDMA", "SDP") if rdma else ("SDP",), tables


def _cdp(p: CdpParams) -> Program:
    values = {**_fields(p, "src_base_addr", "dst_base_addr", "lut"),
              **_split(p.src_base_addr, "SRC_BASE_ADDR"), **_split(p.dst_base_addr, "DST_BASE_ADDR"),
              "INPUT_DATA_TYPE": p.input_data,
              **{f"LUT_{k}": v for k, v in _fields(p.lut, "le_table", "lo_table").items()}}
    tables = {"CDP": (p.lut.le_table, p.lut.lo_table)} if p.lut.le_table or p.lut.lo_table else {}
    return {"CDP_RDMA": values, "CDP": values}, ("CDP_RDMA", "CDP"), tables


def _rubik(p: RubikParams) -> Program:
    values = {**_fields(p, "dain_addr", "daout_addr"), **_split(p.dain_addr, "DAIN_ADDR"),
              **_split(p.daout_addr, "DAOUT_ADDR")}
    return {"RBK": values}, ("RBK",), {}


def _conv(p: ConvParams) -> Program:
    """Each of the five blocks from its own parameters (CDMA's IN_PRECISION is the memory's, CSC's the
    processing one), in the firmware's order: CACC, CMAC_A, CMAC_B, CSC, CDMA."""
    c = p.cdma
    cdma = {**_fields(c, "datain_addr_0", "datain_addr_1", "weight_addr", "wgs_addr", "wmb_addr"),
            **_split(c.weight_addr, "WEIGHT_ADDR"), **_split(c.wgs_addr, "WGS_ADDR"),
            **_split(c.wmb_addr, "WMB_ADDR"), **_split(c.datain_addr_0, "DATAIN_ADDR", "_0"),
            **_split(c.datain_addr_1, "DATAIN_ADDR", "_1")}
    blocks = {"CACC": _fields(p.cacc), "CMAC_A": _fields(p.cmac_a), "CMAC_B": _fields(p.cmac_b),
              "CSC": _fields(p.csc), "CDMA": cdma}
    return blocks, tuple(blocks), {}


_PROGRAM: dict[str, Any] = {"PDP": _pdp, "SDP": _sdp, "CDP": _cdp, "RUBIK": _rubik, "CONV": _conv}


def _bdma(regs: ModuleType, p: BdmaParams, group: int) -> Writes:
    writes: Writes = []
    for t in p.transfers:
        for reg, value in (("CFG_SRC_ADDR_LOW", t.src_addr & 0xFFFFFFFF),
                           ("CFG_SRC_ADDR_HIGH", t.src_addr >> 32),
                           ("CFG_DST_ADDR_LOW", t.dst_addr & 0xFFFFFFFF),
                           ("CFG_DST_ADDR_HIGH", t.dst_addr >> 32),
                           ("CFG_LINE", t.line_size), ("CFG_LINE_REPEAT", t.line_repeat),
                           ("CFG_SRC_LINE", t.src_line), ("CFG_DST_LINE", t.dst_line),
                           ("CFG_SURF_REPEAT", t.surf_repeat), ("CFG_SRC_SURF", t.src_surf),
                           ("CFG_DST_SURF", t.dst_surf), ("CFG_CMD", t.src_ram_type | (t.dst_ram_type << 1)),
                           ("CFG_OP", 1)):
            writes.append((regs.REGISTERS[f"NVDLA_BDMA_{reg}_0"], value))
    return [*writes, (regs.REGISTERS[f"NVDLA_BDMA_CFG_LAUNCH{group}_0"], 1)]
