"""Options for the whole test suite."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--port", action="append", default=[], metavar="MODULE:FACTORY",
        help="run tests/conformance against this portability layer: a callable (a class or a function) "
             "returning an NvDlaPort, e.g. mypackage.myport:MyPort; repeatable. Default: pydla's in-process "
             "port and, where FUSE can be mounted, its Linux port")
