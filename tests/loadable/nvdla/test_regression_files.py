"""NVIDIA's ten KMD regression loadables and their golden images (skipped without the folder)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from pydla.cli import main
from pydla.loadable.nvdla.descriptors import decode_dla_task
from pydla.loadable.nvdla.dimg import read_dimg, write_dimg
from pydla.loadable.nvdla.reader import read_nvdla_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable

TESTS = ["BDMA_L0_0", "CDP_L0_0", "CDP_L0_0_small", "CONV_D_L0_0", "CONV_D_L0_0_small", "PDP_L0_0",
         "PDP_L0_0_small", "RBK_L0_0", "SDP_X1_L0_0", "SDP_X1_L0_0_small"]
BLOCK = {"BDMA": ["BDMA"], "CDP": ["CDP"], "CONV": ["CONV", "SDP"], "PDP": ["PDP"], "RBK": ["RUBIK"],
         "SDP": ["SDP"]}


@pytest.mark.parametrize("test", TESTS)
def test_reads_decodes_and_writes_back(regression, test: str) -> None:
    raw = (regression / test / f"{test}_fbuf").read_bytes()
    lo = read_nvdla_loadable(raw)
    assert str(lo.version) == "0.7.0" and len(lo.task_list) == 1
    net = decode_dla_task(lo, lo.task_list[0])
    assert [op.block.name for op in net.operations] == BLOCK[test.split("_")[0]]
    assert str(net.interface_version) == "0.10.0"
    assert "INT8" in net.operations[0].precision or not test.endswith("_small")  # nv_small is INT8 only
    again = write_nvdla_loadable(lo)
    assert read_nvdla_loadable(again) == lo
    assert write_nvdla_loadable(read_nvdla_loadable(again)) == again
    output = lo.outputs()
    assert len(output) == 1 and lo.tensor_desc_list[output[0].tensor_desc_id].mem_id == output[0].id


@pytest.mark.parametrize("test", TESTS)
def test_golden_images_read_and_write_back(regression, test: str) -> None:
    raw = (regression / test / "o_000000.dimg").read_bytes()
    assert hashlib.md5(raw).hexdigest() in (regression / test / "lead.md5").read_text()
    img = read_dimg(raw)
    assert write_dimg(img) == raw
    lo = read_nvdla_loadable((regression / test / f"{test}_fbuf").read_bytes())
    tensor = lo.tensor_desc_list[0]
    assert (img.width, img.height, img.channel) == (tensor.w, tensor.h, tensor.c) or test == "BDMA_L0_0"
    assert img.dtype.itemsize == (2 if tensor.data_type.name == "INT16" else 1)


def test_pydla_info_and_validate(regression, capsys) -> None:
    path = regression / "CONV_D_L0_0" / "CONV_D_L0_0_fbuf"
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "NVDLA Loadable 0.7.0 (93268 bytes)" in out
    assert "op 0 CONV  INT16        8x8x128 @5 -> 8x8x32 (on the fly), weights 3x3x128 @4" in out
    assert "signals 1 on OP_PROGRAMMED" in out and "fused to 0" in out
    assert main(["info", "--json", str(path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tasks"][0]["network"]["operations"][1]["block"] == "SDP"
    assert main(["validate", str(path)]) == 0
    assert "valid NVDLA Loadable 0.7.0 (1 tasks, 2 DLA operations" in capsys.readouterr().out
    assert main(["info", str(regression / "CDP_L0_0" / "o_000000.dimg")]) == 0
    assert "DlaImage D_F16_CxHWx_x16_I" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("flatc") is None and not shutil.os.path.exists(
    shutil.os.path.join(shutil.os.path.dirname(shutil.sys.executable),
                        "flatc")), reason="flatc not installed")
def test_flatc_reads_what_pydla_writes_as_nvidias_original(regression, tmp_path) -> None:
    """flatc (the C++ FlatBuffers reader NVIDIA's runtime is built on) sees the same loadable in the
    original and in pydla's rewrite."""
    from pydla.loadable.nvdla.codegen import SCHEMA, find_flatc

    flatc = find_flatc()
    assert flatc is not None
    raw = (regression / "CDP_L0_0" / "CDP_L0_0_fbuf").read_bytes()
    (tmp_path / "a_fbuf").write_bytes(raw)
    (tmp_path / "b_fbuf").write_bytes(write_nvdla_loadable(read_nvdla_loadable(raw)))
    docs = []
    for name in ("a_fbuf", "b_fbuf"):
        subprocess.run([flatc, "--json", "--strict-json", "--raw-binary", "-o", str(tmp_path), str(SCHEMA),
                        "--",
                        str(tmp_path / name)], check=True, capture_output=True)
        docs.append(json.loads((tmp_path / f"{name}.json").read_text()))
    assert docs[0] == docs[1]
