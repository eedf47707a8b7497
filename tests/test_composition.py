"""The composition root (DESIGN.md, "The execution path"): one place builds devices, KMDs and ports;
no port builds a device itself; no layer reads another layer's configuration object; the KMD reaches
its device only through its portability layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import pydla
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.firmware.interface import KmdDeviceInfo
from pydla.kmd.driver import Kmd
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


def _pydla_imports(*folders: str) -> list[tuple[str, str]]:
    """(module, imported pydla module) of every module under ``folders``, relative imports resolved."""
    found = []
    for path in _modules(*folders):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(".".join(parts), a.name) for a in node.names if a.name.split(".")[0] == "pydla"]
            elif isinstance(node, ast.ImportFrom):
                base = (parts if rel.name == "__init__" else parts[:-1])[:len(parts) - node.level] \
                    if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                if module.split(".")[0] == "pydla":
                    found += [(".".join(parts), module)]
                    found += [(".".join(parts), f"{module}.{a.name}") for a in node.names
                              if (PACKAGE.parent / module.replace(".", "/") / f"{a.name}.py").exists()]
    return found


def test_the_firmware_imports_only_the_contracts() -> None:
    """The engine scheduler is firmware (NVDLA's kmd/firmware): the host KMD and the microcontroller
    both run it, so it may import the generated contracts and the errors, nothing of either."""
    allowed = ("pydla.deviceapi", "pydla.errors", "pydla.firmware")
    bad = [f"{m} imports {t}" for m, t in _pydla_imports("firmware") if not t.startswith(allowed)]
    assert not bad
    assert _pydla_imports("firmware"), "the check found the firmware's imports"


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("hw", ("pydla.kmd", "pydla.composition", "pydla.platform", "pydla.portability", "pydla.umd")),
    ("kmd", ("pydla.hw", "pydla.composition", "pydla.platform", "pydla.portability", "pydla.umd")),
    ("portability", ("pydla.platform", "pydla.composition", "pydla.umd", "pydla.hw")),
    ("umd", ("pydla.platform", "pydla.composition", "pydla.kmd", "pydla.hw")),
])
def test_no_layer_imports_one_above_it_or_the_composition_root(layer: str,
                                                                forbidden: tuple[str, ...]) -> None:
    """The device does not import its driver; the driver sees its device only through its port; the
    UMD and the ports are handed their dependencies by the composition root, never reach up for it
    (nor for ``pydla`` itself)."""
    bad = [f"{m} imports {t}" for m, t in _pydla_imports(layer) if t == "pydla" or t.startswith(forbidden)]
    assert not bad


def test_the_kmd_buffer_objects_are_its_own_and_only_their_port_maps_them() -> None:
    from pydla.hw.device import VirtualDevice
    from pydla.kmd.bo import BufferObject

    device = VirtualDevice("small")
    port, other = VirtualDevicePort(device), VirtualDevicePort(VirtualDevice("small"))
    try:
        ctx = port.dla_create_context()
        bo = port.dla_alloc(64)
        assert type(bo) is BufferObject and bo.size == 64 and bo.array.size == 64
        bo.array[:4] = [1, 2, 3, 4]
        iova = port.dla_map(ctx, bo)
        assert bytes(device.iommu.view(ctx, iova, (4,), (1,), np.uint8)) == b"\x01\x02\x03\x04"
        with pytest.raises(pydla.DlaError) as e:
            port.dla_map(ctx, BufferObject(bo.handle, 64, bo.array, memory=object()))
        assert e.value.code == pydla.NvError.BadParameter and "not one of this port's" in e.value.message
        port.dla_unmap(ctx, iova)
        port.dla_free(bo)
        assert bo.array.size == 0 and device.memory.buffers == []  # the mapping of freed memory is gone
        with pytest.raises(pydla.DlaError, match="is not allocated"):
            port.dla_free(bo)
        port.dla_destroy_context(ctx)
    finally:
        device.close()
        other.device.close()


def test_a_port_is_given_its_platform_and_closes_it_only_when_it_owns_it() -> None:
    from pydla.platform import open_port
    from pydla.portability.inprocess import InProcessPort

    platform = Platform("small")
    try:
        shared = InProcessPort(platform)
        shared.NvDlaOpen(0)
        shared.close()  # its session's context is released; the platform it was given lives on
        assert platform.probe(0).kmd.contexts == []
        own = open_port("inprocess", "small")
        assert isinstance(own, InProcessPort)
        own.NvDlaOpen(0)
        own.close()  # the devices open_port built for it go with it
        with pytest.raises(pydla.DlaError, match="the platform was closed"):
            own.platform.probe(0)
    finally:
        platform.close()


def test_create_runtime_is_the_composition_roots() -> None:
    """The UMD is handed its port: pydla.createRuntime builds it at the composition root, and
    IRuntime takes one it is given."""
    import inspect

    from pydla.platform import createRuntime
    from pydla.umd import runtime

    assert pydla.createRuntime is createRuntime and not hasattr(runtime, "createRuntime")
    assert list(inspect.signature(runtime.IRuntime).parameters)[:1] == ["port"]
    with createRuntime(config="small") as rt:
        assert rt.getMaxDevices() == 1 and type(rt.port).__name__ == "InProcessPort"
