"""The loadable side and the compiler depend on no runtime layer (DESIGN.md, "Contracts live with the
contracts"): the task encoder and the CPU library's operator tables are the loadable's, the speed
rules the compiler follows are the device configuration's; the KMD and the UMD agree with them."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import pydla
from pydla.loadable import cpuops, taskbuilder

PACKAGE = Path(pydla.__file__).parent
RUNTIME_LAYERS = ("pydla.kmd", "pydla.umd", "pydla.portability", "pydla.linux")


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, also those inside functions."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [alias.name for alias in node.names]
            found.append((node.module, names))
            found += [(f"{node.module}.{name}", []) for name in names]  # from pydla import kmd
    return found


@pytest.mark.parametrize("side", ["compiler", "loadable"])
def test_no_runtime_layer_is_imported(side: str) -> None:
    bad = [f"{path.relative_to(PACKAGE)}: {module}"
           for path in sorted((PACKAGE / side).rglob("*.py"))
           for module, _ in _imports(path)
           if module.startswith(RUNTIME_LAYERS)]
    assert not bad


def test_the_compiler_reads_speed_rules_from_its_config_not_from_hw_constants() -> None:
    bad = [f"{path.relative_to(PACKAGE)}: {module} {names}"
           for path in sorted((PACKAGE / "compiler").rglob("*.py"))
           for module, names in _imports(path)
           if module.startswith("pydla.hw") and any(n.isupper() or "tap_major" in n for n in names)]
    assert not bad


def test_descriptor_layout_is_the_one_the_kmd_reads() -> None:
    """One declaration (the contract's task_layout), read by the KMD and written by the encoder."""
    from pydla.deviceapi import task_layout
    from pydla.deviceapi.generated import dla_task as T
    from pydla.firmware import graph

    assert graph.OP_DESC is task_layout.OP_DESC and graph.SURFACE_DESC is task_layout.SURFACE_DESC
    tb = taskbuilder.TaskBuilder()
    x, y = tb.cube("x", (1, 4, 4)), tb.cube("y", (1, 2, 2))
    tb.pdp(x, y, kernel=(2, 2), stride=(2, 2))
    net = T.dla_network_desc_t.from_buffer_copy(tb.build().descriptors)
    assert (net.op_desc_size, net.surface_desc_size) == (task_layout.OP_DESC_SIZE,
                                                         task_layout.SURFACE_DESC_SIZE)


def test_task_addresses_carry_the_fields_of_the_kmd_address_entries() -> None:
    from pydla.kmd.port import AddressEntry

    def fields(cls: type) -> list[tuple[str, object]]:
        return [(f.name, f.default) for f in dataclasses.fields(cls)]

    assert fields(taskbuilder.TaskAddress) == fields(AddressEntry)


def test_a_built_task_loads_into_any_allocator_and_runs_on_the_kmd() -> None:
    import numpy as np

    from pydla.composition.virtual_port import VirtualDevicePort
    from pydla.hw.device import VirtualDevice
    from pydla.kmd.driver import Kmd

    tb = taskbuilder.TaskBuilder()
    x, y = tb.cube("x", (2, 4, 4)), tb.cube("y", (2, 4, 4))
    tb.sdp(x, y, act="relu")
    kmd = Kmd(VirtualDevicePort(VirtualDevice("full", mode="deterministic")))
    try:
        ctx = kmd.open_context()
        loaded = tb.build().load(kmd, ctx)
        assert all(isinstance(a, taskbuilder.TaskAddress) for a in loaded.addresses)
        data = np.linspace(-1, 1, 32, dtype=np.float32)
        kmd.bo_array(ctx, loaded.handles["x"])[:] = data.view(np.uint8)
        kmd.submit(ctx, loaded.addresses, timeout_ms=5000).wait(5000)
        got = kmd.bo_array(ctx, loaded.handles["y"])[:data.nbytes].view(np.float32)
        np.testing.assert_array_equal(got, np.maximum(data, 0))
    finally:
        kmd.close()


def test_the_cpu_library_implements_exactly_the_declared_operators() -> None:
    from pydla.umd import cpumath

    assert tuple(cpumath.UNARY) == cpuops.UNARY_OPS
    assert tuple(cpumath.REDUCE) == cpuops.REDUCE_OPS
    assert tuple(cpumath.COMPARE) == cpuops.COMPARE_OPS
    assert set(cpuops.INTEGER_REDUCE_OPS) <= set(cpuops.REDUCE_OPS)
    for table in (cpuops.UNARY_OPS, cpuops.REDUCE_OPS, cpuops.COMPARE_OPS, cpuops.ARGMAX_OPS):
        assert len(set(table)) == len(table)


def test_an_implementation_table_that_strays_from_the_contract_is_refused() -> None:
    from pydla.umd import cpumath

    with pytest.raises(RuntimeError, match=r"\['Extra'\].*\['Exp'\]"):
        cpumath._implement("UNARY", ("Exp", "Log"), {"Log": abs, "Extra": abs})
    assert list(cpumath._implement("T", ("b", "a"), {"a": 1, "b": 2})) == ["b", "a"]
