"""The Linux side is built of parts, not mixins: the client port (pydla/portability/linux*.py), the
daemon and its FUSE server (pydla/linux/) stay in modules under 500 lines and classes of one concern
each; LinuxPort keeps every function of the portability interface, answered by its own parts."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import pydla
from pydla.linux.daemon import KmdDaemon
from pydla.linux.fuse_server import FuseServer
from pydla.portability.interface import NvDlaPort
from pydla.portability.linux import LinuxPort

PACKAGE = Path(pydla.__file__).parent
MODULES = sorted([*(PACKAGE / "portability").glob("linux*.py"), *(PACKAGE / "linux").glob("*.py")])
MAX_LINES = 500
MAX_METHODS = 25  # LinuxPort aside: the portability interface defines its methods


def _classes(path: Path) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.ClassDef)]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_stays_under_500_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) < MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_class_has_one_concern(path: Path) -> None:
    crowded = {c.name: n for c in _classes(path) if c.name != "LinuxPort"
               if (n := sum(isinstance(b, ast.FunctionDef) for b in c.body)) > MAX_METHODS}
    assert not crowded


def test_the_port_the_daemon_and_the_server_hold_parts_instead_of_mixing_them_in() -> None:
    assert LinuxPort.__bases__ == (NvDlaPort,)
    assert KmdDaemon.__bases__ == (object,) and FuseServer.__bases__ == (object,)
    mixins = [c.name for p in MODULES for c in _classes(p) if c.name.endswith(("Methods", "Mixin"))]
    assert not mixins


def test_the_linux_port_defines_every_function_of_the_interface() -> None:
    interface = {n for n, _ in inspect.getmembers(NvDlaPort, inspect.isfunction) if n.startswith("NvDla")}
    own = {n for n, v in vars(LinuxPort).items() if n.startswith("NvDla") and inspect.isfunction(v)}
    # What the interface implements once for every port (memory views, host allocation, time,
    # logging) stays the interface's; everything that talks to the daemon is the Linux port's own.
    shared = {"NvDlaMemMap", "NvDlaMemUnmap", "NvDlaMemRead", "NvDlaMemWrite", "NvDlaDebugPrintf",
              "NvDlaAlloc", "NvDlaFree", "NvDlaSleepMS", "NvDlaGetTimeMS"}
    assert interface - shared <= own
    assert len(interface - shared) == 27  # the devices, memory, semaphores, tasks, CUs, traces
