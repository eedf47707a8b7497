"""The composition root (DESIGN.md, "The execution path"): one place builds devices, KMDs and ports;
no port builds a device itself; no layer reads another layer's configuration object; the KMD reaches
its device only through its portability layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pydla
from pydla.kmd.driver import Kmd
from pydla.kmd.port import KmdDeviceInfo
from pydla.kmd.port_virtual import VirtualDevicePort
from pydla.platform import Platform, probe
from pydla.target.config import load_config

PACKAGE = Path(pydla.__file__).parent


def _modules(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (PACKAGE / f).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _calls(path: Path, name: str) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name]


@pytest.mark.parametrize("layer", ["umd", "portability", "linux"])
def test_ports_and_the_umd_neither_build_devices_nor_read_their_configuration(layer: str) -> None:
    bad = [f"{p.relative_to(PACKAGE)}: {m}" for p in _modules(layer) for m in _imports(p)
           if m.startswith(("pydla.hw.device", "pydla.target.config"))]
    assert not bad


def test_only_the_composition_root_builds_devices_and_drivers() -> None:
    builders = {f"{p.relative_to(PACKAGE)}: {name}" for p in _modules("umd", "portability", "linux", "kmd")
                for name in ("VirtualDevice", "Kmd") if _calls(p, name)}
    assert not builders
    assert _calls(PACKAGE / "platform.py", "VirtualDevice") and _calls(PACKAGE / "platform.py", "Kmd")


def test_the_kmd_reaches_its_device_only_through_its_port() -> None:
    for path in _modules("kmd"):
        if path.name == "port_virtual.py":  # the in-process port is where the device is reached
            continue
        used = re.search(r"\bdevice\.(iommu|memory|reg_\w+|config|mode|instance)\b", path.read_text())
        assert not used, path


def test_the_kmd_learns_its_device_from_the_port() -> None:
    probed = probe("small", mode="step")
    try:
        config = load_config("small")
        assert isinstance(probed.kmd.port, VirtualDevicePort)
        info = probed.kmd.info
        assert info == KmdDeviceInfo(0, "step", "small", config.hw_version, config.blocks,
                                     config.precisions, config.memory_bytes, config.contexts,
                                     compute_units=info.compute_units)
        assert [cu.name for cu in info.compute_units] == [cu.name for cu in config.ip_layout]
        ctx = probed.kmd.open_context()
        h = probed.kmd.bo_create(ctx, 100)
        assert probed.device.iommu.mappings(ctx)[0].iova == probed.kmd.bo_iova(ctx, h)
        probed.kmd.close_context(ctx)
        assert probed.device.memory.buffers == [] and probed.device.iommu.contexts == []
    finally:
        probed.close()


def test_a_platform_builds_each_instance_once_and_closes_them() -> None:
    platform = Platform("full", mode="deterministic")
    first = platform.probe(1)
    assert platform.probe(1) is first and platform.probed == [first]
    assert [p.device.instance for p in platform.probe_all()] == [0, 1]
    platform.close()
    with pytest.raises(pydla.DlaError, match="closed"):
        platform.probe(0)
    with pytest.raises(pydla.DlaError, match="closed"):
        first.kmd.open_context()


def test_a_driver_over_an_explicit_port() -> None:
    from pydla.hw.device import VirtualDevice

    device = VirtualDevice("small")
    kmd = Kmd(VirtualDevicePort(device))
    try:
        assert kmd.info.instance == 0 and kmd.info.mode == "deterministic"
    finally:
        kmd.close()
        device.close()
