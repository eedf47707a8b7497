"""The NVDLA Loadable reader, writer and checks, on loadables pydla's own writer builds."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from pydla import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.generated import loadable_generated as G
from pydla.loadable.nvdla.layout import TABLES
from pydla.loadable.nvdla.reader import looks_like_nvdla_loadable, read_nvdla_loadable
from pydla.loadable.nvdla.samples import REGRESSION_INTERFACE, bdma_loadable, conv_sdp_loadable
from pydla.loadable.nvdla.writer import _camel, write_nvdla_loadable


@pytest.fixture(params=["conv-sdp", "conv-sdp-int16-0.10", "bdma"])
def sample(request) -> M.NvdlaLoadable:
    return {"conv-sdp": conv_sdp_loadable, "bdma": bdma_loadable,
            "conv-sdp-int16-0.10": lambda: conv_sdp_loadable(REGRESSION_INTERFACE,
                                                             int16=True)}[request.param]()


def test_round_trip(sample: M.NvdlaLoadable) -> None:
    blob = write_nvdla_loadable(sample)
    assert looks_like_nvdla_loadable(blob)
    back = read_nvdla_loadable(blob)
    assert back == sample
    assert write_nvdla_loadable(back) == blob


def test_every_field_round_trips() -> None:
    """Each field with a value unlike its default, so that no slot is silently dropped or swapped."""
    lo = conv_sdp_loadable()
    tensor = dataclasses.replace(lo.tensor_desc_list[0], data_format=M.DataFormat.NCxHWx,
                                 data_type=M.DataType.HALF, data_category=M.DataCategory.IMAGE,
                                 pixel_format=M.PixelFormat.A8B8G8R8,
                                 pixel_mapping=M.PixelMapping.INVALID_PIXEL_MAP,
                                 n=2, strides=(1, 2, 3, 4, 5, 6, 7, 8), offset=16, size=64, name="prob")
    event = M.EventListEntry(0, M.EventType.EVENTTYPE2, target=7, val=0xDEADBEEF, op=M.EventOp.SIGNAL)
    reloc = M.RelocListEntry(address_id=1, write_id=2, offset=8, interface=M.Interface.DLA1, sub_interface=4,
                             reloc_type=2)
    memory = list(lo.memory_list)
    memory[6] = dataclasses.replace(memory[6], alignment=4096, domain=M.MemoryDomain.SRAM)
    lo = dataclasses.replace(lo, tensor_desc_list=(tensor,), event_list=(event,), reloc_list=(reloc,),
                             memory_list=tuple(memory))
    assert read_nvdla_loadable(write_nvdla_loadable(lo)) == lo


def test_layout_matches_the_generated_code() -> None:
    """The verifier's field list (layout.py) is flatc's: each generated Add function writes the slot
    the layout says, with the width it says."""
    widths = {"Uint8": 1, "Uint16": 2, "Uint32": 4, "Uint64": 8, "Int16": 2, "Int32": 4}

    class Recorder:
        def __getattr__(self, name: str):
            def record(slot: int, value: int, default: int) -> None:
                self.seen = (name, slot)
            return record

    for table, fields in TABLES.items():
        for slot, f in enumerate(fields):
            rec = Recorder()
            getattr(G, f"{table}Add{_camel(f.name)}")(rec, 1)
            method, seen_slot = rec.seen
            assert seen_slot == slot, (table, f.name)
            if f.kind in ("string", "vector", "strings", "tables"):
                assert method == "PrependUOffsetTRelativeSlot", (table, f.name)
            elif f.kind == "struct":
                assert method == "PrependStructSlot"
            else:
                kind = method.removeprefix("Prepend").removesuffix("Slot")
                assert widths[kind] == {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i16": 2, "i32": 4}[f.kind]


def _bad(lo: M.NvdlaLoadable, code: NvError, fragment: str) -> None:
    with pytest.raises(DlaError) as e:
        read_nvdla_loadable(write_nvdla_loadable(lo, check=False))
    assert e.value.code == code, str(e.value)
    assert fragment in str(e.value)


def _replace(lo: M.NvdlaLoadable, list_name: str, index: int, **changes) -> M.NvdlaLoadable:
    items = list(getattr(lo, list_name))
    items[index] = dataclasses.replace(items[index], **changes)
    return dataclasses.replace(lo, **{list_name: tuple(items)})


@pytest.mark.parametrize(("list_name", "index", "changes", "code", "fragment"), [
    ("task_list", 0, {"address_list": (0, 1, 99)}, NvError.BadValue,
     "task_list[0].address_list[2]: 99 is not"),
    ("task_list", 0, {"post_actions": (3,)}, NvError.BadValue, "task_list[0].post_actions[0]: 3 is not"),
    ("task_list", 0, {"interface": M.Interface.NONE}, NvError.NotSupported, "task_list[0].interface: NONE"),
    ("task_list", 0, {"id": 1}, NvError.BadValue, "task_list[0].id: 1"),
    ("address_list", 4, {"mem_id": 40}, NvError.BadValue, "address_list[4].mem_id: 40"),
    ("address_list", 4, {"offset": 1, "size": 1 << 20}, NvError.InvalidSize,
     "address_list[4]: offset 1 + size"),
    ("memory_list", 4, {"contents": ("nope",)}, NvError.BadValue, "no blob is called 'nope'"),
    ("memory_list", 4, {"offsets": (1 << 40,)}, NvError.InvalidSize,
     "memory_list[4].offsets[0]: offset 1099511627776"),
    ("memory_list", 4, {"offsets": ()}, NvError.CountMismatch, "0 offsets for 1 contents"),
    ("memory_list", 4, {"alignment": 3}, NvError.BadValue, "alignment: 3 is not a power of two"),
    ("memory_list", 6, {"flags": M.MemoryFlags.INPUT | M.MemoryFlags.OUTPUT}, NvError.BadValue, "both INPUT"),
    ("memory_list", 6, {"tensor_desc_id": 5}, NvError.BadValue, "tensor_desc_id: 5 is not"),
    ("memory_list", 6, {"bind_id": 1}, NvError.BadValue, "output bind ids [1]"),
    ("blobs", 0, {"size": 41}, NvError.InvalidSize, "blobs[0].size: 41 bytes declared, 40 in its data"),
    ("blobs", 1, {"name": "m0_NetworkDesc_i0"}, NvError.BadValue, "name of an earlier blob"),
    ("submit_list", 0, {"task_id": (1,)}, NvError.BadValue, "submit_list[0].task_id[0]: 1 is not a task"),
    ("tensor_desc_list", 0, {"size": 1 << 33}, NvError.InvalidSize, "tensor_desc_list[0]: offset 0 + size"),
    ("tensor_desc_list", 0, {"c": -1}, NvError.BadValue, "tensor_desc_list[0].c: -1 is negative"),
])
def test_cross_references_are_checked(list_name, index, changes, code, fragment) -> None:
    _bad(_replace(conv_sdp_loadable(), list_name, index, **changes), code, fragment)


def test_version_mismatch_says_which_side_is_newer() -> None:
    lo = dataclasses.replace(conv_sdp_loadable(), version=M.Version(0, 8, 0))
    _bad(lo, NvError.VersionMismatch, "loadable format 0.8.0: this reader reads 0.7.x (the loadable is newer")
    sub_minor = dataclasses.replace(conv_sdp_loadable(), version=M.Version(0, 7, 3))
    assert read_nvdla_loadable(write_nvdla_loadable(sub_minor)).version == M.Version(0, 7, 3)


def test_enum_values_are_checked() -> None:
    blob = bytearray(write_nvdla_loadable(conv_sdp_loadable()))
    lo = read_nvdla_loadable(bytes(blob))
    # data_type of the tensor: rewrite its byte through a loadable whose value is out of the enum
    bad = _replace(lo, "tensor_desc_list", 0, data_type=M.DataType.INT8)
    raw = bytearray(write_nvdla_loadable(bad))
    tensor = G.Loadable.GetRootAs(bytes(raw), 0).TensorDescList(0)
    pos = tensor._tab.Pos + tensor._tab.Offset(16)  # data_type is field 6: vtable entry 4 + 2 * 6
    raw[pos] = 9
    with pytest.raises(DlaError, match=r"tensor_desc_list\[0\].data_type: DataType 9 is not one of") as e:
        read_nvdla_loadable(bytes(raw))
    assert e.value.code == NvError.BadValue


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda b: b[:6], "too short"),
    (lambda b: struct.pack("<I", len(b) + 4) + b[4:], "past the end"),
    (lambda b: b"\0\0\0\0" + b[4:], "root: offset at 0 is 0"),
    (lambda b: b[:len(b) // 2], "past the end"),
])
def test_broken_buffers_are_refused(edit, fragment) -> None:
    blob = write_nvdla_loadable(conv_sdp_loadable())
    with pytest.raises(DlaError, match=fragment):
        read_nvdla_loadable(edit(blob))


def test_a_vtable_pointing_back_at_its_table_and_a_shared_table_flood_end() -> None:
    """A cyclic offset (a vector entry pointing at the root table) is read as the type its place says
    and ends; a vector whose entries all point at one table is bounded by the buffer's size."""
    blob = bytearray(write_nvdla_loadable(bdma_loadable()))
    root = G.Loadable.GetRootAs(bytes(blob), 0)
    vec = root._tab.Vector(root._tab.Offset(6))  # task_list
    root_pos = struct.unpack_from("<I", blob, 0)[0]
    struct.pack_into("<I", blob, vec, (root_pos - vec) % (1 << 32))  # task_list[0] -> back to the root
    with pytest.raises(DlaError):
        read_nvdla_loadable(bytes(blob))
    # 2000 memory entries that are all the first one, whose contents are 2000 strings: 4 million
    # strings to check in a buffer of ~100 KiB; refused once the walk has reached as many tables and
    # strings as the buffer could hold unshared
    lo = bdma_loadable()
    first = dataclasses.replace(lo.memory_list[0], contents=("m0_NetworkDesc_i0",) * 2000,
                                offsets=(0,) * 2000)
    memory = (first, *(dataclasses.replace(lo.memory_list[0], id=i) for i in range(1, 2000)))
    flood = bytearray(write_nvdla_loadable(dataclasses.replace(lo, memory_list=memory), check=False))
    root = G.Loadable.GetRootAs(bytes(flood), 0)
    vec = root._tab.Vector(root._tab.Offset(8))  # memory_list
    target = vec + struct.unpack_from("<I", flood, vec)[0]  # memory_list[0]: written first, lies last
    for i in range(2000):
        at = vec + 4 * i
        struct.pack_into("<I", flood, at, target - at)
    with pytest.raises(DlaError, match="more tables and strings than") as e:
        read_nvdla_loadable(bytes(flood))
    assert e.value.code == NvError.InvalidSize


def test_files_that_are_not_nvdla_loadables() -> None:
    assert not looks_like_nvdla_loadable(b"\x7fELF\x02\x01\x01\x00")
    assert not looks_like_nvdla_loadable(b'{"header": 1}')
    assert not looks_like_nvdla_loadable(b"\x08\x07\x12\x07pytorch")
    with pytest.raises(DlaError) as e:
        read_nvdla_loadable("/nonexistent/model_fbuf")
    assert e.value.code == NvError.FileNotFound
