"""The port under test: pydla's in-process and Linux ports, or the integrator's (``--port``).

``pytest tests/conformance --port mypackage.myport:MyPort`` imports ``MyPort`` and calls it with no
arguments for each test; it must return a fresh :class:`~pydla.portability.interface.NvDlaPort` with
at least one device instance of a configuration that has the SDP and PDP blocks. A ``close()`` method,
if the port has one, is called after the test.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pydla.portability.interface import NvDlaPort

# inprocess-per-op: the in-process port over a device without its command processor (the
# per-operation path, which the command processor must agree with)
BUILTIN = ("inprocess", "inprocess-per-op", "linux")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "port" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--port") or list(BUILTIN)
        metafunc.parametrize("port_spec", chosen, indirect=True)


@pytest.fixture
def port_spec(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def port_factory(spec: str) -> Callable[[], Any]:
    """The callable ``--port MODULE:FACTORY`` names; pytest.UsageError (one line, before any test
    runs) when it is malformed, its module does not import, or the module has no such name."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise pytest.UsageError(f"--port {spec!r}: expected MODULE:FACTORY, e.g. mypackage.myport:MyPort")
    try:
        target: Any = importlib.import_module(module)
    except Exception as e:  # ImportError, or the module's own error while it is imported
        raise pytest.UsageError(f"--port {spec}: cannot import {module}: {type(e).__name__}: {e}") from None
    for part in name.split("."):
        if not hasattr(target, part):
            raise pytest.UsageError(f"--port {spec}: {module} has no {name}")
        target = getattr(target, part)
    if not callable(target):
        raise pytest.UsageError(f"--port {spec}: {name} is a {type(target).__name__}, not a class or "
                                "a function returning an NvDlaPort")
    return target  # type: ignore[no-any-return]


@pytest.fixture
def port(port_spec: str, tmp_path: Path) -> Iterator[NvDlaPort]:
    opened: list[Any] = []
    if port_spec == "inprocess":
        from pydla.platform import open_port

        made: Any = open_port("inprocess", "full")
    elif port_spec == "inprocess-per-op":
        import dataclasses

        from pydla.platform import open_port
        from pydla.target.config import load_config

        made = open_port("inprocess", dataclasses.replace(load_config("full"), command_processor=False))
    elif port_spec == "linux":
        from pydla.linux import unmount
        from pydla.linux.daemon import KmdDaemon
        from tests.linux.conftest import fuse_unavailable

        reason = fuse_unavailable()
        if reason:
            pytest.skip(f"Linux port: {reason}")
        from pydla.portability.linux import LinuxPort

        mnt = tmp_path / "mnt"
        mnt.mkdir()
        daemon = KmdDaemon("full")
        server = daemon.serve(mnt)
        opened += [lambda: server.stop(timeout=5.0), daemon.close, lambda: unmount(str(mnt))]
        made = LinuxPort(mnt)
    else:
        made = port_factory(port_spec)()
    if not isinstance(made, NvDlaPort):
        raise pytest.UsageError(f"--port {port_spec}: returned {type(made).__name__}, not an NvDlaPort")
    try:
        yield made
    finally:
        close = getattr(made, "close", None)
        if callable(close):
            close()
        for undo in opened:
            undo()
