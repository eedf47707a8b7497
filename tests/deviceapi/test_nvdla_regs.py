"""NVDLA's two register maps as declared contracts (nvdla_v1_regs: nvdlav1 / nv_full; nvdla_v2_regs: the
newer hardware with its CFGROM): checked against the facts written down in
docs/development/nvdla/registers.md (block bases, every register of its per-block tables with its
fields and values, the fields that differ between the maps), against each other, and the C and C++
headers compiled with every size, offset and constant compared to the Python module."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from pydla.deviceapi import generate
from pydla.deviceapi.generated import nvdla_v1_regs as V1
from pydla.deviceapi.generated import nvdla_v2_regs as V2
from pydla.deviceapi.registers import RegisterBits, RegisterInfo
from pydla.deviceapi.runtime import Record

DOC = Path(__file__).resolve().parents[2] / "docs" / "development" / "nvdla" / "registers.md"
MAPS = {"nvdla_v1_regs": V1, "nvdla_v2_regs": V2}
WINDOW = 0x1000
ABSENT = "\N{EN DASH}"  # the page's mark of a block a map does not have


def _section(title: str) -> str:
    """From ``title`` to the next level-2 heading."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:end if end >= 0 else len(text)]


def _rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:]  # without the header


def _bases() -> dict[str, tuple[int | None, ...]]:
    return {block: tuple(None if v == ABSENT else int(v, 16) for v in (v1, v2))
            for block, v1, v2 in _rows(_section("## Block base addresses"))}


def _base(mod: ModuleType, block: str) -> int:
    return min(a for n, a in mod.REGISTERS.items() if n.startswith(f"NVDLA_{block}_")
               and not any(n.startswith(f"NVDLA_{block}_{other}_") for other in ("RDMA",)))


def test_block_bases_are_the_documented_ones() -> None:
    bases = _bases()
    assert len(bases) == 18
    for block, (b1, b2) in bases.items():
        for mod, base in ((V1, b1), (V2, b2)):
            names = [n for n in mod.REGISTERS if n.startswith(f"NVDLA_{block}_")]
            if base is None:
                assert not names, block
                continue
            window = [mod.REGISTERS[n] for n in names if mod.REGISTERS[n] // WINDOW == base // WINDOW]
            assert min(window) == base, (block, mod.NAME)
    assert V1.nvdla_v1_regs_t.SIZE == 17 * WINDOW and V2.nvdla_v2_regs_t.SIZE == 18 * WINDOW


_FIELD = re.compile(r"^(\w+)\[(\d+)(?::(\d+))?\](?: \((.*)\))?$")


def _doc_fields(cell: str) -> dict[str, tuple[int, int, dict[str, int]]]:
    out = {}
    for part in cell.split("; "):
        m = _FIELD.match(part)
        assert m is not None, part
        name, hi, lo, values = m.groups()
        lsb = int(lo if lo is not None else hi)
        named = dict((k, int(v)) for k, v in (kv.split("=") for kv in values.split(", "))) if values else {}
        out[name] = (lsb, int(hi) - lsb + 1, named)
    return out


def _doc_blocks() -> list[tuple[str, int, list[list[str]]]]:
    text = _section("## Registers used by the firmware")
    out = []
    for m in re.finditer(r"^### (\w+) \(block base (0x[0-9a-f]+) in this map\)\n(.*?)(?=^### |\Z)", text,
                         re.M | re.S):
        out.append((m.group(1), int(m.group(2), 16), _rows(m.group(3))))
    return out


def test_every_documented_register_and_field_of_the_v1_map() -> None:
    blocks = _doc_blocks()
    assert len(blocks) == 14
    checked = 0
    for block, base, rows in blocks:
        for offset, register, cell in rows:
            info = V1.REGISTER_INFO[f"NVDLA_{block}_{register}_0"]
            assert info.address == base + int(offset, 16), register
            doc = _doc_fields(cell)
            # (the page leaves out long value lists, such as CDMA's 36 pixel formats)
            fields = {b.name: (b.lsb, b.width, dict(b.values) if doc.get(b.name, (0, 0, {}))[2] else {})
                      for b in info.bits}
            assert fields == doc, f"{block}.{register}"
            checked += 1
    assert checked >= 300


def test_the_documented_differences_are_the_only_ones() -> None:
    """registers.md's table of fields that differ between the maps, and every other register and field
    the same at the same offset in its block (CFGROM is the newer map's alone)."""
    documented: dict[tuple[str, str, str], tuple[str, ...]] = {}
    text = _section("## Address and stride registers")
    for block, register, change in _rows(text[text.index("Registers whose fields differ"):]):
        for part in change.split("; "):
            m = re.fullmatch(r"(\w+) \[([\d:]+)\] → \[([\d:]+)\]", part)
            assert m is not None, part
            documented[(block, register, m.group(1))] = (m.group(2), m.group(3))
    assert len(documented) == 56
    bases = _bases()
    found: dict[tuple[str, str, str], tuple[str, ...]] = {}
    for name, info in V1.REGISTER_INFO.items():
        block = next(b for b, (b1, _) in bases.items() if b1 is not None and b1 == info.address & ~0xFFF)
        b2 = bases[block][1]
        assert b2 is not None
        other = V2.REGISTER_INFO[name]
        assert other.address == b2 + (info.address & 0xFFF) and other.double == info.double, name
        register = name[len(f"NVDLA_{block}_"):-2]
        for a, b in zip(info.bits, other.bits, strict=True):
            assert (a.name, a.access, a.values) == (b.name, b.access, b.values), name
            if (a.lsb, a.width) != (b.lsb, b.width):
                found[(block, register, a.name)] = tuple(f"{x.lsb + x.width - 1}:{x.lsb}" for x in (a, b))
    assert found == documented
    only_v2 = sorted({n.split("_")[1] for n in set(V2.REGISTER_INFO) - set(V1.REGISTER_INFO)})
    assert only_v2 == ["CFGROM"]


def test_double_buffered_registers_are_the_d_registers_of_blocks_with_groups() -> None:
    for mod in MAPS.values():
        grouped = {n.rsplit("_S_POINTER_0", 1)[0] for n in mod.REGISTER_INFO if n.endswith("_S_POINTER_0")}
        assert len(grouped) == 12  # CDMA CSC CMAC_A CMAC_B CACC SDP_RDMA SDP PDP_RDMA PDP CDP_RDMA CDP RBK
        for name, info in mod.REGISTER_INFO.items():
            prefix = max((g for g in grouped if name.startswith(g + "_")), key=len, default=None)
            expected = prefix is not None and name[len(prefix) + 1:].startswith("D_")
            assert info.double == expected, name


def test_interrupt_bits_reset_values_and_access() -> None:
    for mod, glb in ((V1, 0), (V2, 0x1000)):
        status = mod.REGISTER_INFO["NVDLA_GLB_S_INTR_STATUS_0"]
        assert status.address == glb + 0xC and status.clear_mask == 0x3F03FF and status.write_mask == 0
        assert mod.REGISTER_INFO["NVDLA_GLB_S_INTR_SET_0"].write_only_mask == 0x3F03FF
        assert mod.REGISTER_INFO["NVDLA_GLB_S_INTR_MASK_0"].reset == 0
        assert mod.REGISTER_INFO["NVDLA_GLB_S_NVDLA_HW_VERSION_0"].reset == 0x303031  # configurations.md
        bits = {b.name: b.lsb for b in status.bits}
        assert (bits["SDP_DONE_STATUS0"], bits["RUBIK_DONE_STATUS1"], bits["CDMA_DAT_DONE_STATUS0"],
                bits["CACC_DONE_STATUS1"]) == (0, 9, 16, 21)  # registers.md's bit table
        consumer = mod.REGISTER_INFO["NVDLA_CDMA_S_POINTER_0"].field("CONSUMER")
        assert (consumer.lsb, consumer.access) == (16, "r")
    assert V1.REGISTER_INFO["NVDLA_BDMA_STATUS_0"].reset == 0x114  # 20 free slots, idle
    assert V1.REGISTER_INFO["NVDLA_CDMA_D_MISC_CFG_0"].reset == 0x1100  # INT16 in and processing
    assert V2.REGISTER_INFO["NVDLA_CFGROM_CFGROM_CDMA_BASE_ATOMIC_C_0"].reset == 8  # nv_small's MAC
    sdp = V2.nvdla_v2_sdp_d_dp_bs_cfg_bits.of(V2.REGISTER_INFO["NVDLA_SDP_D_DP_BS_CFG_0"].reset)
    assert (sdp.bs_bypass, sdp.bs_alu_bypass) == (1, 1)  # the newer map resets the stages bypassed


def test_typed_views_of_a_block() -> None:
    regs = V1.nvdla_v1_pdp_t()
    regs.d_pooling_kernel_cfg.kernel_width = 2
    regs.d_pooling_kernel_cfg.kernel_stride_height = 1
    word = int.from_bytes(bytes(regs)[0x34:0x38], "little")
    assert word == (2 << 0) | (1 << 20)
    assert V1.nvdla_v1_pdp_t.d_pooling_kernel_cfg.offset == V1.NVDLA_PDP_D_POOLING_KERNEL_CFG_0 - 0xD000
    assert isinstance(regs.d_pooling_kernel_cfg, RegisterBits)


def _structs(mod: ModuleType) -> list[type[Record]]:
    return [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, Record)
            and not issubclass(v, RegisterBits) and v.__module__ == mod.__name__]


def _constants(info: RegisterInfo, c_prefix: str) -> dict[str, int]:
    """Every C constant of a register: NVDLA_CDMA_... is NVDLA_V1_CDMA_... in C (no namespaces there)."""
    name = c_prefix + info.name[len("NVDLA_"):]
    out = {name: info.address, f"{name}_RESET_VAL": info.reset}
    for b in info.bits:
        out[f"{name}_{b.name}_SHIFT"] = b.lsb
        out[f"{name}_{b.name}_FIELD"] = b.mask
        out.update({f"{name}_{b.name}_{v}": value for v, value in b.values})
    return out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
@pytest.mark.parametrize("name", sorted(MAPS))
def test_c_header_matches_python(name: str, tmp_path: Path) -> None:
    mod = MAPS[name]
    expected: dict[str, int] = {}
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "pydla/{name}.h"', "int main(void) {"]
    for cls in _structs(mod):
        expected[f"sizeof.{cls.__name__}"] = cls.SIZE
        lines.append(f'printf("sizeof.{cls.__name__} %zu\\n", sizeof({cls.__name__}));')
        for entry in cls._fields_:
            expected[f"{cls.__name__}.{entry[0]}"] = getattr(cls, entry[0]).offset
            lines.append(f'printf("{cls.__name__}.{entry[0]} %zu\\n", offsetof({cls.__name__}, {entry[0]}));')
    for info in mod.REGISTER_INFO.values():
        for macro, value in _constants(info, "NVDLA_V1_" if mod is V1 else "NVDLA_V2_").items():
            expected[macro] = value
            lines.append(f'printf("{macro} %u\\n", (unsigned)({macro}));')
    (tmp_path / "m.c").write_text("\n".join([*lines, "return 0;", "}"]) + "\n")
    subprocess.run(["gcc", "-std=c11", "-O0", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I",
                    str(generate.include_dir()), str(tmp_path / "m.c"), "-o", str(tmp_path / "m")],
                   check=True)
    out = subprocess.run([str(tmp_path / "m")], check=True, capture_output=True, text=True).stdout
    assert {k: int(v) for k, v in (line.split() for line in out.splitlines())} == expected
    assert len(expected) > 3000


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_both_maps_compile_in_one_c_file(tmp_path: Path) -> None:
    """Each map's C names carry its map (NVDLA_V1_, NVDLA_V2_, nvdla_v1_*_t): both headers together."""
    (tmp_path / "both.c").write_text('#include "pydla/nvdla_v1_regs.h"\n#include "pydla/nvdla_v2_regs.h"\n'
                                     "int main(void) { return NVDLA_V1_CDMA_D_MISC_CFG_0 == 0x5014u && "
                                     "NVDLA_V2_CDMA_D_MISC_CFG_0 == 0x3014u ? 0 : 1; }\n")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(generate.include_dir()),
                    str(tmp_path / "both.c"), "-o", str(tmp_path / "both")], check=True)
    subprocess.run([str(tmp_path / "both")], check=True)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.parametrize("name", sorted(MAPS))
def test_cpp_header_compiles(name: str, tmp_path: Path) -> None:
    mod = MAPS[name]
    src = tmp_path / "u.cpp"
    src.write_text(f'#include "pydla/{name}.hpp"\nusing namespace pydla::{name};\n'
                   f"static_assert(sizeof({name}_t) == {getattr(mod, name + '_t').SIZE}, \"size\");\n"
                   f"static_assert(reg::NVDLA_CDMA_D_MISC_CFG_0 == {mod.NVDLA_CDMA_D_MISC_CFG_0}u, \"a\");\n"
                   "static_assert(reg::NVDLA_CDMA_D_MISC_CFG_0_IN_PRECISION_FIELD == 0x300u, \"mask\");\n"
                   "int main() { return 0; }\n")
    subprocess.run(["g++", "-std=c++11", "-Wall", "-Werror", "-fsyntax-only", "-I",
                    str(generate.include_dir()), str(src)], check=True)
