"""NVIDIA's regression folder for the tests that read its files (skipped without it)."""

from __future__ import annotations

import pytest

from pydla.testing.fuzz_nvdla import REGRESSION_ENV, regression_dir


@pytest.fixture(scope="session")
def regression():
    folder = regression_dir()
    if folder is None:
        pytest.skip(f"NVIDIA's regression folder is not here (../shared/nvdla-regression beside the "
                    f"repository, "
                    f"or ${REGRESSION_ENV})")
    return folder
