"""Control-code ELFs: built from a TaskBuilder task, patched for an address list of the UMD's choosing,
and run through the KMD with the right numbers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.elf.controlcode import FIXED_ENTRIES, SECTIONS, ControlCode
from pydla.elf.writer import ElfWriter
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.kmd.port import AddressEntry
from pydla.loadable.taskbuilder import TaskBuilder

ARGS = {"x": 0, "y": 1, "z": 2}


def task():
    tb = TaskBuilder()
    x, y, z = tb.cube("x", (2, 4, 4)), tb.cube("y", (2, 4, 4)), tb.cube("z", (2, 2, 2))
    tb.sdp(x, y, act="relu")
    tb.pdp(y, z, kernel=(2, 2), stride=(2, 2))
    return tb.build()


def test_control_code_sections_symbols_and_relocations(tmp_path: Path) -> None:
    built = task()
    code = ControlCode(built.control_code(ARGS))
    assert code.arguments == ARGS
    # SDP src, dst; PDP src, dst: four address fields, each a relocation against its argument.
    assert sorted((p.name, p.argidx) for p in code.patches) == [("x", 0), ("y", 1), ("y", 1), ("z", 2)]
    assert all(p.section == ".dla.surfaces" for p in code.patches)
    if shutil.which("readelf"):
        path = tmp_path / "task.elf"
        path.write_bytes(built.control_code(ARGS))
        result = subprocess.run(["readelf", "-a", "-W", str(path)], capture_output=True, text=True)
        assert result.returncode == 0 and result.stderr == ""
        assert ".rela.dla.surfaces" in result.stdout and "ABS" in result.stdout


def test_patching_uses_a_fresh_copy_each_time() -> None:
    code = ControlCode(task().control_code(ARGS))
    first = code.patch({0: 5, 1: 6, 2: 7})
    second = code.patch({0: 9, 1: 8, 2: 7})
    import struct

    for p in code.patches:
        assert struct.unpack_from("<h", first[p.section], p.offset)[0] == {0: 5, 1: 6, 2: 7}[p.argidx]
        assert struct.unpack_from("<h", second[p.section], p.offset)[0] == {0: 9, 1: 8, 2: 7}[p.argidx]
    assert bytes(code.sections[".dla.surfaces"]) != second[".dla.surfaces"]


def test_patch_rejects_unbound_and_out_of_range() -> None:
    code = ControlCode(task().control_code(ARGS))
    with pytest.raises(DlaError, match="argument 'z'") as e:
        code.patch({0: 5, 1: 6})
    assert e.value.code == NvError.BadParameter
    with pytest.raises(DlaError, match=r"must be 5\.\.32767"):
        code.patch({0: 1, 1: 6, 2: 7})
    with pytest.raises(DlaError, match=r"must be 5\.\.32767"):
        code.patch({0: 5, 1: 6, 2: 40000})


def test_missing_section_and_bad_relocations_are_rejected() -> None:
    w = ElfWriter()
    for name in SECTIONS[:-1]:
        w.add_section(name, b"\0" * 8)
    with pytest.raises(DlaError, match=r"'\.dla\.luts' is missing"):
        ControlCode(w.build())
    w = ElfWriter()
    for name in SECTIONS:
        w.add_section(name, b"\0" * 8)
    w.add_symbol("x", None, value=0, absolute=True)
    w.add_relocation(".dla.surfaces", offset=7, rel_type=1, symbol="x")
    with pytest.raises(DlaError, match="outside the section"):
        ControlCode(w.build())
    w2 = ElfWriter()
    for name in SECTIONS:
        w2.add_section(name, b"\0" * 8)
    w2.add_relocation(".dla.surfaces", offset=0, rel_type=9)
    with pytest.raises(DlaError, match="type 9"):
        ControlCode(w2.build())


def test_patched_control_code_runs_through_the_kmd() -> None:
    built = task()
    code = ControlCode(built.control_code(ARGS))
    dev = VirtualDevice("full")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        ctx = kmd.open_context()
        # The UMD's address list: the five descriptor sections, then arguments in an order of its own.
        order = [2, 0, 1]
        index_of = {argidx: FIXED_ENTRIES + i for i, argidx in enumerate(order)}
        parts = code.patch(index_of)
        addresses = []
        for name in SECTIONS:
            data = parts[name] or b"\0" * 8
            h = kmd.bo_create(ctx, len(data))
            kmd.bo_array(ctx, h)[:len(data)] = np.frombuffer(data, np.uint8)
            addresses.append(AddressEntry(h))
        sizes = {"x": 128, "y": 128, "z": 32}
        names = {v: k for k, v in ARGS.items()}
        handles = {}
        for argidx in order:
            handles[names[argidx]] = kmd.bo_create(ctx, sizes[names[argidx]])
            addresses.append(AddressEntry(handles[names[argidx]]))
        x = np.random.default_rng(2).standard_normal((2, 4, 4)).astype(np.float32)
        kmd.bo_array(ctx, handles["x"])[:] = x.view(np.uint8).ravel()
        kmd.submit(ctx, addresses, timeout_ms=2000).wait(5000)
        z = kmd.bo_array(ctx, handles["z"]).view(np.float32).reshape(2, 2, 2)
        expected = np.maximum(x, 0).reshape(2, 2, 2, 2, 2).max(axis=(2, 4))
        np.testing.assert_allclose(z, expected)
    finally:
        kmd.close()
        dev.close()
