"""Options for the whole test suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--port", action="append", default=[], metavar="MODULE:FACTORY",
        help="run tests/conformance against this portability layer: a callable (a class or a function) "
             "returning an NvDlaPort, e.g. mypackage.myport:MyPort; repeatable. Default: pydla's in-process "
             "port and, where FUSE can be mounted, its Linux port")


def pytest_configure(config: pytest.Config) -> None:
    """A ``--port`` that cannot be imported is one line before any test runs (it was a traceback per
    conformance test)."""
    from tests.conformance.conftest import BUILTIN, port_factory

    for spec in config.getoption("--port"):
        if spec not in BUILTIN:
            port_factory(spec)


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Models compiled by the tests (pydla.Session on an ONNX model) go to a temporary cache, not
    the user's (~/.cache/pydla)."""
    old = os.environ.get("PYDLA_CACHE_DIR")
    os.environ["PYDLA_CACHE_DIR"] = str(tmp_path_factory.mktemp("pydla-cache"))
    yield
    if old is None:
        os.environ.pop("PYDLA_CACHE_DIR", None)
    else:
        os.environ["PYDLA_CACHE_DIR"] = old
