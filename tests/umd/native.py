"""Building the C CPU libraries of the tests (tests/umd/data/*.c) with the system compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pydla.umd.cpu_native import include_dirs

SOURCE = Path(__file__).parent / "data" / "sample_cpulib.c"


def build_sample_library(out_dir: Path, name: str = "libsample.so", source: Path = SOURCE) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH to build the sample CPU library")
    out = out_dir / name
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-std=c11",
                    *(f"-I{d}" for d in include_dirs()), str(source), "-o", str(out)], check=True, timeout=60)
    return out
