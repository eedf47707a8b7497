"""CPU libraries as shared libraries: the C ABI of pydla/cpu_library_api.h, built with cc here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.umd.cpu import CpuLibraries
from tests.umd.native import build_sample_library


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("native")
    (d / "umd").mkdir()
    build_sample_library(d / "umd")
    return d


@pytest.fixture
def libs(library_dir: Path, monkeypatch: pytest.MonkeyPatch) -> CpuLibraries:
    monkeypatch.setenv("PYDLA_LIBRARY_PATH", str(library_dir))
    return CpuLibraries()


def test_buffers_float_and_int_constants_reach_the_c_function(libs: CpuLibraries) -> None:
    fn = libs.lookup("umd/libsample.so", "affine")
    assert fn.num_args == 4
    src = np.arange(6, dtype=np.float32)
    dst = np.zeros(8, np.float32)
    fn.callable([src.view(np.uint8), dst.view(np.uint8)[:24], 2.5, -1])
    np.testing.assert_array_equal(dst, [*(src * 2.5 - 1), 0, 0])


def test_a_sub_buffer_and_a_string_constant(libs: CpuLibraries) -> None:
    fn = libs.lookup("umd/libsample.so", "tag")
    buf = np.full(16, 0xAA, np.uint8)
    fn.callable([buf[4:12], "héllo"])
    assert bytes(buf[4:12]) == "héllo".encode().ljust(8, b"\0")
    assert (buf[:4] == 0xAA).all() and (buf[12:] == 0xAA).all()


def test_a_failing_function_raises_its_code_and_message(libs: CpuLibraries) -> None:
    fn = libs.lookup("umd/libsample.so", "fail")
    with pytest.raises(DlaError, match=r"'fail' of 'umd/libsample.so' failed \(10\): asked to fail") as e:
        fn.callable([int(NvError.InvalidSize)])
    assert e.value.code == NvError.InvalidSize
    with pytest.raises(DlaError) as e:
        fn.callable([12345])  # not an NvError value
    assert e.value.code == NvError.ResourceError


def test_missing_function_and_arguments_without_a_c_form(libs: CpuLibraries) -> None:
    with pytest.raises(DlaError, match=r"'umd/libsample\.so' has no function 'nope'") as e:
        libs.lookup("umd/libsample.so", "nope")
    assert e.value.code == NvError.NotSupported
    fn = libs.lookup("umd/libsample.so", "affine")
    with pytest.raises(DlaError, match="argument 2: None has no C form"):
        fn.callable([np.zeros(4, np.uint8), np.zeros(4, np.uint8), None, 0])
    with pytest.raises(DlaError, match="does not fit in 64 bits") as e:
        fn.callable([np.zeros(4, np.uint8), np.zeros(4, np.uint8), 1.0, 1 << 70])
    assert e.value.code == NvError.BadValue
    with pytest.raises(DlaError, match="must be contiguous"):
        fn.callable([np.zeros(8, np.uint8)[::2], np.zeros(4, np.uint8), 1.0, 0])


def test_loaded_once_and_library_errors(libs: CpuLibraries, library_dir: Path, tmp_path: Path) -> None:
    assert libs.load("umd/libsample.so") is libs.load("umd/libsample.so")
    (tmp_path / "garbage.so").write_bytes(b"not an ELF")
    with pytest.raises(DlaError, match="failed to load") as e:
        CpuLibraries(allow_unsafe_paths=True).load(str(tmp_path / "garbage.so"))
    assert e.value.code == NvError.FileReadFailed
    with pytest.raises(DlaError, match="not allowed"):
        CpuLibraries().load(str(library_dir / "umd" / "libsample.so"))
