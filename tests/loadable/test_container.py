"""The loadable container: round trip, zero-copy weights, one test per malformed case, and its NPU
task run through the KMD from the file alone."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import loadable as L
from pydla.elf.controlcode import FIXED_ENTRIES, SECTIONS
from pydla.elf.writer import SHDR
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.kmd.port import AddressEntry
from pydla.loadable.container import FORMAT_VERSION, Loadable, LoadableWriter
from pydla.loadable.taskbuilder import TaskBuilder
from pydla.target.config import load_config, parse_config

RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)
ARGS = {"x": 0, "w": 1, "b": 2, "y": 3, "z": 4}


def build_writer() -> LoadableWriter:
    tb = TaskBuilder()
    x, y, z = tb.cube("x", (3, 8, 8)), tb.cube("y", (4, 8, 8)), tb.cube("z", (4, 4, 4))
    conv = tb.conv(x, tb.weights("w", W.shape), weight_shape=W.shape, pads=(1, 1, 1, 1))
    tb.sdp(conv, y, bias=tb.weights("b", B.shape), act="relu")
    tb.pdp(y, z, kernel=(2, 2), stride=(2, 2))
    built = tb.build()
    lw = LoadableWriter("full")
    lw.set_recipe({
        "header": {"device": "full", "version": "1.0.0"},
        "resources": {
            "buffers": [{"name": "x", "type": "input"}, {"name": "w", "type": "weight"},
                        {"name": "b", "type": "weight"}, {"name": "y", "type": "internal", "size": 1024},
                        {"name": "z", "type": "output"}],
            "kernels": [{"name": "task0", "instance": "dla", "ctrlcode": "task0"}]},
        "execution": {"runs": [{"name": "task0", "arguments": [
            {"name": n, "argidx": i} for n, i in ARGS.items()]}]},
    })
    lw.add_weights("w", W.tobytes())
    lw.add_weights("b", B.tobytes())
    for name, kind in (("x", "input"), ("w", "weight"), ("b", "weight"), ("y", "internal"), ("z", "output")):
        lw.add_memory(name, kind, built.buffers[name])
    lw.add_tensor("x", 0, (1, 3, 8, 8), L.dla_data_type_e.FLOAT32, "input", 0)
    lw.add_tensor("z", 4, (1, 4, 4, 4), L.dla_data_type_e.FLOAT32, "output", 0)
    lw.add_control_code("task0", built.control_code(ARGS))
    return lw


@pytest.fixture(scope="module")
def blob() -> bytes:
    return build_writer().build()


def test_round_trip_and_readelf(blob: bytes, tmp_path: Path) -> None:
    lo = Loadable.open(blob)
    assert lo.format_version == FORMAT_VERSION and lo.device == "full"
    assert [t.name for t in lo.tensors("input")] == ["x"] and lo.tensors("output")[0].dims == (1, 4, 4, 4)
    assert lo.memory["y"].kind == "internal" and lo.memory["w"].size == W.nbytes
    np.testing.assert_array_equal(np.frombuffer(lo.weights("w"), np.float32).reshape(W.shape), W)
    assert lo.blocks_needed() == {"CONV", "SDP", "PDP"}
    assert lo.elf.section_offset(".pydla.weights") % 4096 == 0
    assert set(lo.contracts) == {"dla_task", "dla_regs", "loadable"}
    if shutil.which("readelf"):
        path = tmp_path / "m.dla"
        path.write_bytes(blob)
        result = subprocess.run(["readelf", "-S", "-n", "-W", str(path)], capture_output=True, text=True)
        assert result.returncode == 0 and result.stderr == ""
        assert ".pydla.ctrl.task0" in result.stdout and ".pydla.weights" in result.stdout


def test_open_maps_the_file_and_weights_are_not_copied(blob: bytes, tmp_path: Path) -> None:
    path = tmp_path / "m.dla"
    path.write_bytes(blob)
    lo = Loadable.open(path)
    view = lo.weights("b")
    assert isinstance(view, memoryview) and view.readonly
    assert np.frombuffer(view, np.float32).tolist() == B.tolist()
    # A view of the mapping: its buffer is the mmap the loadable holds, not a bytes copy.
    assert type(view.obj).__name__ == "mmap"


def _shdr(blob: bytes, name: str) -> int:
    lo = Loadable.open(blob)
    index = lo.elf.section_names.index(name) + 1
    return int.from_bytes(blob[0x28:0x30], "little") + index * SHDR.size


def _set(blob: bytes, pos: int, data: bytes) -> bytes:
    out = bytearray(blob)
    out[pos:pos + len(data)] = data
    return bytes(out)


def _rewrite(change) -> bytes:
    lw = build_writer()
    change(lw)
    return lw.build()


MALFORMED = {
    "truncated": (lambda b: b[: len(b) // 2], "section header table", NvError.BadValue),
    "offset-past-end": (lambda b: _set(b, _shdr(b, ".pydla.memory") + 24, (len(b) - 4).to_bytes(8, "little")),
                        "runs past", NvError.BadValue),
    "overlap": (lambda b: _set(b, _shdr(b, ".pydla.memory") + 24,
                               Loadable.open(b).elf.section_offset(".pydla.tensors").to_bytes(8, "little")),
                "overlaps", NvError.BadValue),
    "not-elf": (lambda b: b"PK" + b[2:], "not an ELF file", NvError.BadValue),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_bytes(blob: bytes, case: str) -> None:
    mutate, fragment, code = MALFORMED[case]
    with pytest.raises(DlaError) as e:
        Loadable.open(mutate(blob))
    assert fragment in str(e.value) and e.value.code == code


def test_newer_major_format_names_both_versions(monkeypatch) -> None:
    import pydla.loadable.container as c

    monkeypatch.setattr(c, "FORMAT_VERSION", (2, 1, 0))
    newer = build_writer().build()
    monkeypatch.undo()
    with pytest.raises(DlaError) as e:
        Loadable.open(newer)
    assert e.value.code == NvError.VersionMismatch
    mine = ".".join(map(str, c.FORMAT_VERSION))
    assert "2.1.0" in str(e.value) and mine in str(e.value) and "upgrade pydla" in str(e.value)


def test_older_minor_format_loads(monkeypatch) -> None:
    import pydla.loadable.container as c

    monkeypatch.setattr(c, "FORMAT_VERSION", (1, 0, 0))
    older = build_writer().build()
    monkeypatch.setattr(c, "FORMAT_VERSION", (1, 3, 0))
    assert Loadable.open(older).format_version == (1, 0, 0)


def test_a_version_that_is_not_semver_is_refused_naming_its_note(monkeypatch) -> None:
    """Found by fuzzing behind the digests: the message said "version '1.1' is not
    MAJOR.MINOR.PATCH", naming neither the file nor the note."""
    import pydla.loadable.container as c
    from pydla.deviceapi.generated import dla_task

    monkeypatch.setattr(c, "FORMAT_VERSION", (1, 1))
    bad_format = build_writer().build()
    monkeypatch.undo()
    with pytest.raises(DlaError, match=r"^m\.dla: \.note\.pydla note 1 \(the loadable format\): version "
                                       r"'1\.1' is not MAJOR\.MINOR\.PATCH \[BadValue\]$") as e:
        Loadable(bad_format, "m.dla")
    assert e.value.code == NvError.BadValue
    monkeypatch.setattr(dla_task, "VERSION", (1, 8))
    bad_contract = build_writer().build()
    monkeypatch.undo()
    with pytest.raises(DlaError, match=r"^m\.dla: contract note is malformed: version '1\.8' is not "
                                       r"MAJOR\.MINOR\.PATCH \[BadValue\]$"):
        Loadable(bad_contract, "m.dla")


def test_contract_hash_mismatch_is_rejected(monkeypatch) -> None:
    from pydla.deviceapi.generated import dla_task

    monkeypatch.setattr(dla_task, "LAYOUT_HASH64", dla_task.LAYOUT_HASH64 ^ 1)
    other = build_writer().build()
    monkeypatch.undo()
    with pytest.raises(DlaError) as e:
        Loadable.open(other)
    assert e.value.code == NvError.VersionMismatch and "dla_task" in str(e.value)


def test_missing_section() -> None:
    def drop_ctrl(lw: LoadableWriter) -> None:
        lw.ctrl = {"other": lw.ctrl["task0"]}

    with pytest.raises(DlaError, match=r"no section '\.pydla\.ctrl\.task0'"):
        Loadable.open(_rewrite(drop_ctrl))


def test_recipe_naming_an_unknown_buffer() -> None:
    def change(lw: LoadableWriter) -> None:
        assert lw.recipe is not None
        lw.recipe["execution"]["runs"][0]["arguments"][0]["name"] = "nope"

    with pytest.raises(DlaError, match="no buffer 'nope'"):
        Loadable.open(_rewrite(change))


def test_memory_list_disagreeing_with_the_recipe() -> None:
    def change(lw: LoadableWriter) -> None:
        lw.memory[3].size = 2048  # y: the recipe says 1024

    with pytest.raises(DlaError, match="disagree") as e:
        Loadable.open(_rewrite(change))
    assert e.value.code == NvError.CountMismatch


def test_tensor_size_mismatch() -> None:
    def change(lw: LoadableWriter) -> None:
        lw.tensors[1].size = 8  # z spans 256 bytes

    with pytest.raises(DlaError, match="less than its dims") as e:
        Loadable.open(_rewrite(change))
    assert e.value.code == NvError.InvalidSize


def test_an_empty_tensor_spans_nothing() -> None:
    """Since contract 1.3.0 a dimension may be 0: the tensor has no element and may have size 0."""
    def change(lw: LoadableWriter) -> None:
        lw.tensors[1].dims[0] = 0
        lw.tensors[1].size = 0

    z = Loadable.open(_rewrite(change)).tensors()[1]
    assert z.dims[0] == 0 and z.size == 0


def test_tensor_outside_its_buffer() -> None:
    def change(lw: LoadableWriter) -> None:
        lw.tensors[0].offset = 100

    with pytest.raises(DlaError, match="exceeds buffer 'x'"):
        Loadable.open(_rewrite(change))


def test_weights_outside_their_section() -> None:
    def change(lw: LoadableWriter) -> None:
        lw.memory[1].weights_offset = 1 << 20

    with pytest.raises(DlaError, match=r"outside '\.pydla\.weights'"):
        Loadable.open(_rewrite(change))


def test_device_without_a_needed_block(blob: bytes) -> None:
    raw = {**load_config("small").__dict__}
    no_pdp = parse_config({
        "name": "no-pdp", "description": "", "instances": 1, "hw_version": 1,
        "blocks": ["CONV", "SDP"], "precisions": ["FP32"], "memory_bytes": raw["memory_bytes"],
        "contexts": 4, "iova_base": 1 << 28, "iova_size": 1 << 32})
    Loadable.open(blob).check_device(load_config("full"))
    with pytest.raises(DlaError, match="needs the PDP block") as e:
        Loadable.open(blob).check_device(no_pdp)
    assert e.value.code == NvError.NotSupported


def test_the_npu_task_runs_from_the_file_alone(blob: bytes) -> None:
    lo = Loadable.open(blob)
    dev = VirtualDevice("full")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        ctx = kmd.open_context()
        run = lo.recipe.runs[0]
        code = lo.control_code(run.name)
        handles = {}
        for name, m in lo.memory.items():
            handles[name] = kmd.bo_create(ctx, m.size)
            if m.kind == "weight":
                kmd.bo_array(ctx, handles[name])[:] = np.frombuffer(lo.weights(name), np.uint8)
        order = [a.argidx for a in run.arguments]
        parts = code.patch({argidx: FIXED_ENTRIES + i for i, argidx in enumerate(order)})
        addresses = []
        for section in SECTIONS:
            data = parts[section] or b"\0" * 8
            h = kmd.bo_create(ctx, len(data))
            kmd.bo_array(ctx, h)[:] = np.frombuffer(data, np.uint8)
            addresses.append(AddressEntry(h))
        addresses += [AddressEntry(handles[a.name], a.offset) for a in run.arguments]
        x = RNG.standard_normal((3, 8, 8)).astype(np.float32)
        kmd.bo_array(ctx, handles["x"])[:] = x.view(np.uint8).ravel()
        kmd.submit(ctx, addresses, timeout_ms=2000).wait(5000)
        z = kmd.bo_array(ctx, handles["z"]).view(np.float32).reshape(4, 4, 4)
        xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
        cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))
        y = np.maximum(np.einsum("chwij,kcij->khw", cols, W) + B[:, None, None], 0)
        np.testing.assert_allclose(z, y.reshape(4, 4, 2, 4, 2).max(axis=(2, 4)), rtol=1e-5, atol=1e-5)
    finally:
        kmd.close()
        dev.close()


def test_info_command(blob: bytes, tmp_path: Path, capsys) -> None:
    import json

    from pydla.cli import main

    path = tmp_path / "m.dla"
    path.write_bytes(blob)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "npu task task0: 3 operations (CONV 1, PDP 1, SDP 1)" in out
    assert "input  0  x" in out and ".pydla.weights" in out
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["npu_tasks"][0]["per_block"] == {"CONV": 1, "SDP": 1, "PDP": 1}
    assert info["memory_total"]["weight"] == W.nbytes + B.nbytes
    assert main(["info", str(tmp_path / "missing.dla")]) == 1


# -- integrity: the section digests -------------------------------------------------------------------


def _section_span(blob: bytes, name: str) -> tuple[int, int]:
    from pydla.elf.reader import ElfReader

    info = ElfReader(blob).section_info(name)
    return int(info["sh_offset"]), int(info["sh_size"])


@pytest.mark.parametrize("name", [".pydla.weights", ".pydla.recipe", ".pydla.tensors", ".pydla.memory",
                                  ".pydla.ctrl.task0"])
def test_a_changed_byte_in_any_section_is_refused_naming_it(name: str) -> None:
    blob = bytearray(build_writer().build())
    offset, size = _section_span(bytes(blob), name)
    blob[offset + size // 2] ^= 0x01  # one bit, in the middle
    with pytest.raises(DlaError) as e:
        Loadable.open(bytes(blob))
    assert e.value.code == NvError.BadValue
    assert f"section '{name}' is corrupt: its SHA-256 is" in e.value.message


def test_the_notes_are_covered_too() -> None:
    blob = bytearray(build_writer().build())
    offset, size = _section_span(bytes(blob), ".note.pydla")
    at = bytes(blob).index(b"full", offset, offset + size)
    blob[at:at + 4] = b"smal"  # the device note: 'full' -> 'smal' (a config that does not exist)
    with pytest.raises(DlaError, match=r"\(format, contracts, device\) do not match their digest"):
        Loadable.open(bytes(blob))


def test_a_loadable_without_digests_is_refused_with_the_fix(monkeypatch) -> None:
    import pydla.loadable.container as c

    monkeypatch.setattr(c, "NT_DIGESTS", 99)  # written under another note type: note 4 is missing
    old = build_writer().build()
    monkeypatch.undo()
    with pytest.raises(DlaError, match=r"note 4 \(section digests\) is missing: the loadable was written by "
                                       r"an older pydla; compile the model again"):
        Loadable.open(old)


def test_a_section_added_afterwards_is_refused() -> None:
    from pydla.elf.reader import ElfReader
    from pydla.elf.writer import ElfWriter

    blob = build_writer().build()
    reader = ElfReader(blob)
    w = ElfWriter()
    for name in reader.section_names:
        if name in ("", ".shstrtab"):
            continue
        info = reader.section_info(name)
        w.add_section(name, bytes(reader.section(name, str(info["sh_type"]))),
                      sh_type=7 if info["sh_type"] == "SHT_NOTE" else 1, align=int(info["sh_addralign"]) or 1)
    w.add_section(".pydla.extra", b"\x00" * 16)
    with pytest.raises(DlaError, match=r"section '\.pydla\.extra' has no digest"):
        Loadable.open(w.build())
