"""The driver and the ports stay readable: no module of pydla/kmd or pydla/portability over 500 lines,
no class of pydla/kmd over 25 methods (the driver is entry points over parts, not a god class; the
ports' classes are exempt: the NVDLA portability interface defines their methods)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PYDLA = Path(__file__).resolve().parents[2] / "pydla"
MAX_LINES = 500
MAX_METHODS = 25
MODULES = sorted([*PYDLA.glob("kmd/*.py"), *PYDLA.glob("portability/*.py")])


def _methods(cls: ast.ClassDef) -> int:
    return sum(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in cls.body)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_module_is_under_the_line_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.name}: {lines} lines; split it by concern"


@pytest.mark.parametrize("path", sorted(PYDLA.glob("kmd/*.py")), ids=lambda p: p.name)
def test_kmd_classes_are_under_the_method_limit(path: Path) -> None:
    big = {node.name: _methods(node) for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.ClassDef) and _methods(node) > MAX_METHODS}
    assert not big, f"{path.name}: {big}; give the class parts it owns"


def test_the_driver_is_entry_points_over_parts() -> None:
    from pydla.kmd.driver import Kmd

    assert Kmd.__bases__ == (object,)  # no mixin
    assert _methods(next(node for node in ast.parse((PYDLA / "kmd/driver.py").read_text()).body
                         if isinstance(node, ast.ClassDef) and node.name == "Kmd")) <= MAX_METHODS
