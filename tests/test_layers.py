"""The packages that two sides of a boundary both read import nothing above them: the device
descriptions (pydla.target), the Linux uAPI (pydla.uapi), the SHAVE kernels (pydla.kernels: the
compiler's custom kernels reach no Session through them); the compiler and the loadable side read
the target, not the virtual device; the Linux port does not load the daemon's package."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable
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
    # the engine scheduler, shared by the host KMD and the device's microcontroller
    "firmware": ("pydla.errors", "pydla.deviceapi"),
}
# The packages whose modules import one another without a circle (the others' module circles are
# issue 29's remaining work: hw.nvdla, linux, firmware, compiler, loadable, testing; hw's own modules
# and subpackages import one another without a circle since the microcontroller and the probe see the
# device through the protocols of hw/device_view.py, portability's since the Linux port's parts see
# their port and device file through protocols: linux_submit.SubmitPort, linux_cu.CuPort,
# portability/linux_handle.py).
ACYCLIC_INSIDE = ("target", "uapi", "kernels", "deviceapi", "trace", "elf", "umd", "composition", "kmd",
                  "hw.mcu", "hw.shave", "hw.cu", "portability")


def _pydla_imports(path: Path) -> set[str]:
    """Every pydla module ``path`` imports, also inside functions and under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: a relative import ({node.lineno}); pydla's imports are absolute")
    return {m for m in found if m == "pydla" or m.startswith("pydla.")}


def _module_name(path: Path) -> str:
    parts = ("pydla", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph(group: Callable[[str], str | None]) -> dict[str, set[str]]:
    """The import graph between the groups ``group`` puts pydla's modules in (None: left out), an
    import of a name inside a module counted as an import of that module."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        source = group(name)
        if source is None:
            continue
        for imported in _pydla_imports(path):
            while imported not in modules:  # pydla.x.y.Name -> pydla.x.y
                imported = imported.rpartition(".")[0]
            target = group(imported)
            if target is not None and target != source:
                graph.setdefault(source, set()).add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each a strongly connected part of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = [stack.pop()]
            while part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_of(module: str) -> str:
    """pydla.compiler.lower -> pydla.compiler; a module of pydla itself (pydla.session) is its own."""
    return ".".join(module.split(".")[:2])


def test_no_circle_between_packages() -> None:
    # A package that reaches up to one that imports it: compiler <-> compile_cache, compiler <->
    # loadable, compiler <-> model_info, deviceapi <-> trace were such circles; so was ort_values ->
    # session_ort -> ort_values among the modules of pydla itself (a type-only import).
    assert _circles(_graph(_package_of)) == []


@pytest.mark.parametrize("package", ACYCLIC_INSIDE)
def test_no_circle_between_the_modules_of(package: str) -> None:
    # target.cu_model <-> target.ip_layout was one (type-only: a circle for a reader all the same)
    prefix = f"pydla.{package}."
    assert _circles(_graph(lambda m: m if m.startswith(prefix) else None)) == []


def test_the_circle_finder_finds_circles() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from pydla.trace.cli import decode\n")
    assert _pydla_imports(module) == {"pydla.trace.cli", "pydla.trace.cli.decode"}


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
