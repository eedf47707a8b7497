"""``pydla conformance nvdla`` and the runtime application's images (pydla.umd.nvdla_app), on NVDLA
Loadables pydla's own writer makes, run through the test port of tests/umd/nvdla_port.py."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import struct
from pathlib import Path

import numpy as np
import pytest

import pydla
from pydla.conformance import compare, configuration_of, conformance, find_tests
from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.samples import REGRESSION_INTERFACE, bdma_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable
from pydla.umd.nvdla_app import image_bytes, run_app
from pydla.umd.nvdla_runner import NvdlaTensorDesc
from tests.umd.nvdla_port import RecordingPort

# NVIDIA's golden image of BDMA_L0_0: the 1x1x1 INT8 tensor of its output, format 40 (2018 numbering).
BDMA_GOLDEN = (b"DIMG" + struct.pack("<8I", 0, 40, 1, 1, 1, 256, 2048, 2048) + b"\x72")


def regression_like_bdma(first: int = 0x72) -> M.NvdlaLoadable:
    """The sample BDMA loadable with BDMA_L0_0's tensor descriptor (strides 1, 256, 2048) and a
    source whose byte 0 is ``first``."""
    lo = bdma_loadable(REGRESSION_INTERFACE)
    src = bytes([first]) + bytes(range(1, 256)) + bytes(range(256)) * 7
    blobs = tuple(dataclasses.replace(b, data=src) if b.name == "m4_BDMASrc_i4" else b for b in lo.blobs)
    strides = (1, 256, 2048, 0, 0, 0, 0, 0)
    tensors = tuple(dataclasses.replace(t, strides=strides) for t in lo.tensor_desc_list)
    return dataclasses.replace(lo, blobs=blobs, tensor_desc_list=tensors)


def test_bdma_image_is_nvidias_golden_byte_for_byte() -> None:
    with pydla.createRuntime(RecordingPort().port) as rt:
        rt.load(write_nvdla_loadable(regression_like_bdma()))
        ((desc, image),) = run_app(rt)
    assert desc.dims == (1, 1, 1, 1) and image == BDMA_GOLDEN


def test_fp16_image_stable_hash_and_2018_format_number() -> None:
    desc = NvdlaTensorDesc("prob", 32, (1, 4, 1, 1), M.DataFormat.NCxHWx, M.DataType.HALF,
                           M.DataCategory.FEATURE,
                           M.PixelFormat.FEATURE, M.PixelMapping.PITCH_LINEAR, (2, 32, 32, 0, 0, 0, 0, 0), 0,
                           "output", 0)
    memory = np.zeros(16, np.uint16)
    memory[:4] = [0x7800, 0x7E00, 0x8000, 0x3C00]  # 32768.0, NaN, -0.0, 1.0
    image = image_bytes(desc, memory.tobytes())
    assert image[:36] == b"DIMG" + struct.pack("<8I", 0, 42, 1, 1, 4, 32, 32, 32)
    assert list(np.frombuffer(image[36:], "<u2")) == [0x0000, 0x77C0, 0x8000, 0x3C00]
    int16 = dataclasses.replace(desc, data_type=M.DataType.INT16)
    assert struct.unpack_from("<I", image_bytes(int16, memory.tobytes()), 8)[0] == 41
    with pytest.raises(DlaError) as e:
        image_bytes(dataclasses.replace(desc, data_type=M.DataType.FLOAT), memory.tobytes())
    assert e.value.code == NvError.NotSupported


def test_configuration_from_the_test_name() -> None:
    names = ("CDP_L0_0", "CDP_L0_0_small", "PDP_L0_0_large", "NN_L0_1_small_x", "NN_L0_0")
    assert [configuration_of(n) for n in names] == ["nv_full", "nv_small", "nv_large", "nv_small", "nv_full"]


def _suite(root: Path) -> None:
    """Three tests: one passing (golden image), one whose image differs at byte 36, one with only a
    lead.md5 in nvdla/sw's golden layout (<TEST>_<hash>/dla/)."""
    fbuf = write_nvdla_loadable(regression_like_bdma())
    for name in ("BDMA_L0_0", "BDMA_L0_1_small"):
        (root / name).mkdir(parents=True)
        (root / name / f"{name}_fbuf").write_bytes(fbuf)
    (root / "BDMA_L0_0" / "o_000000.dimg").write_bytes(BDMA_GOLDEN)
    (root / "BDMA_L0_0" / "lead.md5").write_text(f"{hashlib.md5(BDMA_GOLDEN).hexdigest()}  o_000000.dimg\n")
    (root / "BDMA_L0_1_small" / "o_000000.dimg").write_bytes(BDMA_GOLDEN[:36] + b"\x71")
    (root / "flatbufs" / "BDMA").mkdir(parents=True)
    (root / "flatbufs" / "BDMA" / "BDMA_L0_2_fbuf").write_bytes(fbuf)
    (root / "golden" / "BDMA_L0_2_9521de" / "dla").mkdir(parents=True)
    (root / "golden" / "BDMA_L0_2_9521de" / "dla" / "lead.md5").write_text("0" * 32 + "  o_000000.dimg\n")


def test_conformance_reports_each_test_and_the_first_differing_byte(tmp_path: Path) -> None:
    _suite(tmp_path)
    tests = find_tests(tmp_path)
    assert [(t.name, t.golden.relative_to(tmp_path).as_posix()) for t in tests] == [
        ("BDMA_L0_0", "BDMA_L0_0"), ("BDMA_L0_1_small", "BDMA_L0_1_small"),
        ("BDMA_L0_2", "golden/BDMA_L0_2_9521de/dla")]
    out = io.StringIO()
    failures = conformance(tmp_path, port=RecordingPort().port, out=out)
    lines = out.getvalue().splitlines()
    assert failures == 2 and len(lines) == 4
    assert lines[0].startswith("BDMA_L0_0 (nv_full) ... pass (")
    assert lines[1].startswith("BDMA_L0_1_small (nv_small) ... FAIL: byte 36 of 37 is 0x72, golden 0x71 (")
    assert lines[2].startswith(f"BDMA_L0_2 (nv_full) ... FAIL: md5 {hashlib.md5(BDMA_GOLDEN).hexdigest()}, "
                               f"golden {'0' * 32} (37 bytes; no o_000000.dimg to compare)")
    assert lines[3] == "1 of 3 passed; failed: BDMA_L0_1_small, BDMA_L0_2"
    out = io.StringIO()
    assert conformance(tmp_path, port=RecordingPort().port, select="L0_0$", out=out) == 0
    assert out.getvalue().splitlines()[-1] == "1 of 1 passed"


def test_conformance_errors_are_failures_not_crashes(tmp_path: Path) -> None:
    (tmp_path / "BAD_L0_0").mkdir()
    (tmp_path / "BAD_L0_0" / "BAD_L0_0_fbuf").write_bytes(b"\x10\x00\x00\x00" + b"\x00" * 12)
    (tmp_path / "BAD_L0_0" / "lead.md5").write_text("0" * 32 + "\n")
    out = io.StringIO()
    assert conformance(tmp_path, port=RecordingPort().port, out=out) == 1
    assert "BAD_L0_0 (nv_full) ... FAIL: error: NVDLA Loadable" in out.getvalue()
    with pytest.raises(DlaError) as e:
        conformance(tmp_path / "missing", out=out)
    assert e.value.code == NvError.FileReadFailed


def test_compare_wording() -> None:
    assert compare(b"ab", hashlib.md5(b"ab").hexdigest(), None) is None
    assert compare(b"ab", hashlib.md5(b"abc").hexdigest(), b"abc") == "2 bytes, golden 3 (equal up to byte 2)"
    assert compare(b"ab", None, None) == "no golden (lead.md5 or o_000000.dimg)"


def test_cli_help_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydla.cli import main

    with pytest.raises(SystemExit) as done:
        main(["conformance", "nvdla", "--help"])
    assert done.value.code == 0 and "_small: nv_small" in capsys.readouterr().out
    assert main(["conformance", "nvdla", str(tmp_path)]) == 1  # no tests: an error, said in one line
    assert "no NVDLA regression tests" in capsys.readouterr().err


def test_pydla_run_dumps_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    from pydla.cli import main

    port = RecordingPort()
    real = pydla.createRuntime
    seen = []

    def on_test_port(spec: object = None, config: object = "full", device: int = 0, **kw: object) -> object:
        seen.append(config)
        return real(port.port, device=device)

    monkeypatch.setattr(pydla, "createRuntime", on_test_port)
    model = tmp_path / "BDMA_L0_0_fbuf"
    model.write_bytes(write_nvdla_loadable(regression_like_bdma()))
    assert main(["run", str(model), "--dump-image", str(tmp_path / "img"), "--output-dir",
                 str(tmp_path / "npy")]) == 0
    assert seen == ["nv_full"]  # an NVDLA Loadable's default configuration
    assert (tmp_path / "img" / "o_000000.dimg").read_bytes() == BDMA_GOLDEN
    assert np.load(tmp_path / "npy" / "m5_BDMADst_i5.npy").tolist() == [[[0x72]]]
    assert "output m5_BDMADst_i5: int8 (1, 1, 1) (image format D_F8_CxHWx_x32_I)" in capsys.readouterr().out


def test_dump_image_is_for_nvdla_loadables_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydla.cli import main

    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07\x12\x00")
    assert main(["run", str(model), "--dump-image", str(tmp_path)]) == 1
    assert "--dump-image" in capsys.readouterr().err
