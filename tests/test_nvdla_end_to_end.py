"""NVDLA Loadables through the whole stack, no test double: the UMD's NVDLA runner, the in-process
port, the KMD, the engine scheduler's NVDLA front-end programming NVDLA's registers, and the NVDLA
device computing on its memory. Loadables made by pydla's writer (always), and NVIDIA's regression
tests through `pydla conformance nvdla` when ../shared/nvdla-regression is there."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import pydla
from pydla.cli import main
from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla.samples import REGRESSION_INTERFACE, bdma_loadable
from pydla.loadable.nvdla.writer import write_nvdla_loadable
from tests.hw.nvdla.nvdla_run import folder
from tests.test_conformance_nvdla import BDMA_GOLDEN, regression_like_bdma


def test_a_bdma_loadable_runs_on_the_nvdla_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "BDMA_L0_0_fbuf"
    model.write_bytes(write_nvdla_loadable(regression_like_bdma(0x5A)))
    assert main(["run", str(model), "--config", "nv_full", "--dump-image", str(tmp_path / "img")]) == 0
    # NVIDIA's BDMA_L0_0 golden with the first byte the source now holds
    assert (tmp_path / "img" / "o_000000.dimg").read_bytes() == BDMA_GOLDEN[:-1] + b"\x5a"
    capsys.readouterr()
    for config in ("nv_small", "nv_large"):  # configurations without a BDMA: refused, naming it
        assert main(["run", str(model), "--config", config]) == 1
        assert (f"task 1: operation 0 needs the BDMA block, which device '{config}' does not have "
                "[NotSupported]") in capsys.readouterr().err


def test_the_conformance_command_on_a_folder_of_writer_made_tests(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    test = tmp_path / "BDMA_L0_0"
    test.mkdir()
    (test / "BDMA_L0_0_fbuf").write_bytes(write_nvdla_loadable(regression_like_bdma()))
    import hashlib

    (test / "lead.md5").write_text(hashlib.md5(BDMA_GOLDEN).hexdigest() + "  o_000000.dimg\n")
    code = main(["conformance", "nvdla", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "BDMA_L0_0 (nv_full) ... pass" in out and "1 of 1 passed" in out, out
    assert struct.unpack("<I", BDMA_GOLDEN[8:12]) == (40,)  # the 2018 format number


def test_nvidias_regression_tests_pass_byte_for_byte(capsys: pytest.CaptureFixture[str]) -> None:
    base = folder()
    if base is None:
        pytest.skip("NVIDIA's regression folder is not here (../shared/nvdla-regression, or "
                    "$PYDLA_NVDLA_REGRESSION)")
    code = main(["conformance", "nvdla", str(base)])
    out = capsys.readouterr().out
    assert code == 0 and "10 of 10 passed" in out, out


def test_a_rebound_or_freed_output_is_noticed_on_the_device() -> None:
    with pydla.createRuntime(config="nv_full") as rt:
        rt.load(write_nvdla_loadable(bdma_loadable(REGRESSION_INTERFACE)))
        first, second = rt.allocateSystemMemory(2048), rt.allocateSystemMemory(2048)
        rt.bindOutputTensor(0, first)
        rt.submit()
        assert bytes(first.bytes_view()) == bytes(range(256)) * 8
        first.bytes_view()[:] = 0
        rt.bindOutputTensor(0, second)
        rt.submit()
        assert bytes(second.bytes_view()) == bytes(range(256)) * 8
        assert not any(first.bytes_view())  # the old binding is not written any more
        rt.freeSystemMemory(second)  # the KMD drops the prepared task; its memory is gone
        with pytest.raises(DlaError) as e:
            rt.submit()
        assert e.value.code == NvError.BadParameter and "already freed (NvDlaFreeMem)" in e.value.message
        rt.bindOutputTensor(0, first)
        rt.submit()
        assert bytes(first.bytes_view()) == bytes(range(256)) * 8
