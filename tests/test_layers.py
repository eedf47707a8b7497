"""The packages that two sides of a boundary both read import nothing above them: the device
descriptions (pydla.target), the Linux uAPI (pydla.uapi), the SHAVE kernels (pydla.kernels: the
compiler's custom kernels reach no Session through them); the compiler and the loadable side read
the target, not the virtual device; the Linux port does not load the daemon's package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pydla

PACKAGE = Path(pydla.__file__).parent
# package -> the pydla modules it may import (prefixes), besides its own
ALLOWED = {
    "target": ("pydla.errors", "pydla.deviceapi.generated"),
    "uapi": ("pydla.errors", "pydla.deviceapi.generated"),
    # pydla.files: the command line's output checks (only errors and the standard library below it)
    "kernels": ("pydla.errors", "pydla.files", "pydla.deviceapi", "pydla.elf", "pydla.target"),
}


def _pydla_imports(path: Path) -> set[str]:
    """Every pydla module ``path`` imports, also inside functions and under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {m for m in found if m == "pydla" or m.startswith("pydla.")}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_shared_package_imports_nothing_above_it(package: str) -> None:
    allowed = (*ALLOWED[package], f"pydla.{package}")
    bad = sorted(f"{p.relative_to(PACKAGE)}: {m}" for p in (PACKAGE / package).rglob("*.py")
                 for m in _pydla_imports(p) if not m.startswith(allowed))
    assert not bad


@pytest.mark.parametrize("side", ["compiler", "loadable"])
def test_the_compiler_and_the_loadable_side_read_the_target_not_the_device(side: str) -> None:
    bad = sorted(f"{p.relative_to(PACKAGE)}: {m}" for p in (PACKAGE / side).rglob("*.py")
                 for m in _pydla_imports(p) if m.startswith("pydla.hw"))
    assert not bad


def test_the_linux_port_imports_nothing_of_the_daemon() -> None:
    bad = sorted(f"{p.relative_to(PACKAGE)}: {m}" for p in (PACKAGE / "portability").glob("linux*.py")
                 for m in _pydla_imports(p) if m.startswith("pydla.linux"))
    assert not bad
    loaded = subprocess.run([sys.executable, "-c", "import sys, pydla.portability.linux; "
                             "print(*sorted(m for m in sys.modules if m.startswith('pydla.')))"],
                            capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert "pydla.portability.linux" in loaded and "pydla.uapi.ioctl" in loaded
    assert not [m for m in loaded if m == "pydla.linux" or m.startswith("pydla.linux.")]
