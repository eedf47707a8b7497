"""NVDLA's firmware descriptors (dla_interface.yaml -> ctypes, C, C++): NVDLA's sizes and offsets,
the C header compiled and compared with ctypes field by field, and every pydla header together."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from pydla.deviceapi import generate
from pydla.deviceapi.generated import dla_interface as I
from tests.deviceapi.test_generated import _compile_and_compare, needs_cc

# sizeof() of NVDLA's structs as its firmware is built (packed, 4-byte aligned), and the union
# containers the operation and surface descriptor slots are made of.
NVDLA_SIZES = {
    "dla_network_desc": 40, "dla_consumer": 4, "dla_common_op_desc": 36, "dla_roi_array_desc": 8,
    "dla_roi_desc": 16, "dla_bdma_transfer_desc": 32, "dla_bdma_surface_desc": 644, "dla_bdma_op_desc": 4,
    "dla_bdma_stat_desc": 12, "dla_cvt_param": 8, "dla_data_cube": 32, "dla_conv_surface_desc": 172,
    "dla_conv_op_desc": 92, "dla_conv_stat_desc": 40, "dla_lut_offset": 2, "dla_float_data": 4,
    "dla_slope": 4, "dla_lut_param": 700, "dla_sdp_surface_desc": 160, "dla_sdp_cvt": 16, "dla_sdp_op": 32,
    "dla_sdp_op_desc": 116, "dla_sdp_stat_desc": 44, "dla_pdp_surface_desc": 64, "dla_pdp_op_desc": 52,
    "dla_pdp_stat_desc": 20, "dla_cdp_surface_desc": 64, "dla_cdp_op_desc": 24, "dla_cdp_stat_desc": 44,
    "dla_rubik_surface_desc": 64, "dla_rubik_op_desc": 4, "dla_rubik_stat_desc": 12, "dla_task_status": 16,
    # firmware interfaces 0.10 and 0.11: data cubes without an offset
    "dla_data_cube_v0_11": 28, "dla_conv_surface_desc_v0_11": 152, "dla_sdp_surface_desc_v0_11": 140,
    "dla_pdp_surface_desc_v0_11": 56, "dla_cdp_surface_desc_v0_11": 56, "dla_rubik_surface_desc_v0_11": 56,
}
OP_DESCS = ("dla_bdma_op_desc", "dla_conv_op_desc", "dla_sdp_op_desc", "dla_pdp_op_desc", "dla_cdp_op_desc",
            "dla_rubik_op_desc")
SURFACE_DESCS = tuple(n.replace("_op_", "_surface_") for n in OP_DESCS)
SURFACE_DESCS_V0_11 = tuple(f"{n}_v0_11" for n in SURFACE_DESCS if "bdma" not in n)
STAT_DESCS = tuple(n.replace("_op_", "_stat_") for n in OP_DESCS)


@pytest.mark.parametrize(("name", "size"), NVDLA_SIZES.items())
def test_sizes_are_nvdlas(name: str, size: int) -> None:
    assert ctypes.sizeof(getattr(I, name)) == size


def test_container_sizes_are_the_largest_member() -> None:
    assert I.DLA_OPERATION_CONTAINER_SIZE == max(ctypes.sizeof(getattr(I, n)) for n in OP_DESCS) == 116
    assert I.DLA_SURFACE_CONTAINER_SIZE == max(ctypes.sizeof(getattr(I, n)) for n in SURFACE_DESCS) == 644
    # the same slots before interface 0.12: BDMA's descriptor (no cubes) is the largest either way
    assert max(ctypes.sizeof(getattr(I, n)) for n in SURFACE_DESCS_V0_11) < 644
    assert I.DLA_STAT_CONTAINER_SIZE == max(ctypes.sizeof(getattr(I, n)) for n in STAT_DESCS) == 44


def test_offsets_nvdla_firmware_reads() -> None:
    """A few offsets where packing matters (NVDLA's structs are packed: no padding anywhere)."""
    assert I.dla_conv_op_desc.pad_val.offset == 74
    assert I.dla_conv_op_desc.in_cvt.offset == 76
    assert I.dla_conv_surface_desc.offset_u.offset == 160
    assert I.dla_conv_surface_desc.in_line_uv_stride.offset == 168
    assert I.dla_conv_surface_desc_v0_11.offset_u.offset == 140
    assert I.dla_data_cube_v0_11.size.offset == 4 and I.dla_data_cube.size.offset == 8
    assert I.dla_lut_param.linear_exp_offset.offset == 644
    assert I.dla_lut_param.linear_exp_start.offset == 648
    assert I.dla_lut_param.linear_exp_underflow_slope.offset == 680
    assert I.dla_lut_param.method.offset == 699
    assert I.dla_network_desc.op_head.offset == 16
    assert I.dla_network_desc.num_operations.offset == 30
    assert I.dla_common_op_desc.consumers.offset == 8
    assert I.dla_sdp_op_desc.x1_op.offset == 20
    assert I.dla_pdp_op_desc.padding_value.offset == 24
    assert I.dla_bdma_surface_desc.transfers.offset == 4


@needs_cc
def test_c_header_compiles_and_matches_ctypes(tmp_path: Path) -> None:
    _compile_and_compare(tmp_path, generate.include_dir(), [I], ["dla_interface"])


@needs_cc
def test_every_pydla_header_compiles_together_with_nvdlas_names(tmp_path: Path) -> None:
    """NVDLA's macro names (PRECISION_FP16, DLA_OP_RUBIK, WEIGHT_FORMAT_COMPRESSED, ...) beside pydla's
    own headers: no name is defined twice."""
    headers = sorted(p.name for p in (generate.include_dir() / "pydla").glob("*.h"))
    src = tmp_path / "all.c"
    src.write_text("".join(f'#include "pydla/{h}"\n' for h in headers)
                   + "#include <stdio.h>\nint main(void) { printf(\"%d %d %d %d %d %d %d %d %d %d %d\", "
                     "PRECISION_FP16, DLA_OP_RUBIK, WEIGHT_FORMAT_COMPRESSED, POOL_MODE_MAX, POOL_SIZE_3, "
                     "ACTIVATION_PRELU, SDP_ALU_OP_EQL, FORMAT_FEATURE, LUT_PRI_LINEAR_ONLY, "
                     "DLA_OP_EVENT_CDMA_DT_DONE, (int)sizeof(dla_network_desc)); return 0; }\n")
    exe = tmp_path / "all"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I",
                    str(generate.include_dir()),
                    str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out == "2 5 1 1 2 3 3 36 1 5 40"  # NVDLA's values


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_cpp_header_compiles(tmp_path: Path) -> None:
    src = tmp_path / "x.cpp"
    src.write_text('#include "pydla/dla_interface.hpp"\n#include "pydla/dla_task.hpp"\n'
                   "static_assert(sizeof(::pydla::dla_interface::dla_lut_param) == 700, \"lut\");\nint "
                   "main() { return 0; }\n")
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-I", str(generate.include_dir()), "-c",
                    str(src),
                    "-o", str(tmp_path / "x.o")], check=True, capture_output=True, text=True)
