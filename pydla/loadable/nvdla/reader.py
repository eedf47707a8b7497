"""Reading an NVDLA Loadable: bytes -> :class:`~pydla.loadable.nvdla.model.NvdlaLoadable`.

Three steps, each refusing with a DlaError that names the field and the value: the FlatBuffer is
verified (verify.py: offsets, vtables, vectors, strings); the flatc-generated code reads it into plain
dataclasses, each enum checked; then the loadable's own rules are checked (checks.py: format version
0.7.x, ids, the indices between its lists, offsets and sizes within their memory, blobs).

Usage::

    lo = read_nvdla_loadable(Path("BDMA_L0_0_fbuf").read_bytes())
    print(lo.version, len(lo.task_list))
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, TypeVar

from pydla.errors import DlaError, NvError, file_error
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.checks import check_loadable
from pydla.loadable.nvdla.generated import loadable_generated as _generated
from pydla.loadable.nvdla.verify import verify

G: Any = _generated  # flatc's code is untyped
E = TypeVar("E", bound=enum.IntEnum)


def looks_like_nvdla_loadable(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes, at least 8) can start an NVDLA Loadable: a root offset
    that points inside the first 64 KiB at a 4-aligned table, whose vtable offset is small. An ELF,
    JSON or ONNX file does not (their first four bytes make a huge or unaligned offset)."""
    if len(head) < 8:
        return False
    root = int.from_bytes(head[:4], "little")
    return 8 <= root < 65536 and root % 4 == 0 and head[:4] != b"\x7fELF"


def _enum(cls: type[E], value: int, where: str) -> E:
    try:
        return cls(value)
    except ValueError:
        names = ", ".join(f"{m.name} {m.value}" for m in cls)
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: {where}: {cls.__name__} {value} is not one of "
                                         f"{names}") from None


def _text(raw: bytes | None, where: str) -> str:
    try:
        return (raw or b"").decode("utf-8")
    except UnicodeDecodeError as e:
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: {where}: not UTF-8 ({e.reason} at byte "
                                         f"{e.start})") from None


def _ints(table: Any, name: str) -> tuple[int, ...]:
    """A vector of scalars as a tuple (empty when absent)."""
    if getattr(table, f"{name}IsNone")():
        return ()
    return tuple(int(v) for v in getattr(table, f"{name}AsNumpy")())


def _version(v: Any) -> M.Version:
    return M.Version(int(v.Major()), int(v.Minor()), int(v.SubMinor()))


def _blob(b: Any, where: str) -> M.Blob:
    data = b"" if b.DataIsNone() else b.DataAsNumpy().tobytes()
    version = b.Version()
    return M.Blob(name=_text(b.Name(), f"{where}.name"), size=int(b.Size()),
                  interface=_enum(M.Interface, b.Interface(), f"{where}.interface"),
                  sub_interface=int(b.SubInterface()),
                  version=_version(version) if version is not None else M.Version(0, 0, 0), data=data)


def _memory(m: Any, where: str) -> M.MemoryListEntry:
    flags = int(m.Flags())
    unknown = flags & ~int(sum(M.MemoryFlags))
    if unknown:
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: {where}.flags: {flags:#x} has unknown bits "
                                         f"{unknown:#x} (ALLOC 1, SET 2, INPUT 4, OUTPUT 8, DEBUG 16)")
    contents = tuple(_text(m.Contents(i), f"{where}.contents[{i}]") for i in range(m.ContentsLength()))
    return M.MemoryListEntry(
        id=int(m.Id()), size=int(m.Size()), domain=_enum(M.MemoryDomain, m.Domain(), f"{where}.domain"),
        flags=M.MemoryFlags(flags), alignment=int(m.Alignment()), contents=contents,
        offsets=_ints(m, "Offsets"), bind_id=int(m.BindId()), tensor_desc_id=int(m.TensorDescId()))


def _task(t: Any, where: str) -> M.TaskListEntry:
    return M.TaskListEntry(id=int(t.Id()), interface=_enum(M.Interface, t.Interface(), f"{where}.interface"),
                           instance=int(t.Instance()), address_list=_ints(t, "AddressList"),
                           pre_actions=_ints(t, "PreActions"), post_actions=_ints(t, "PostActions"))


def _event(e: Any, where: str) -> M.EventListEntry:
    return M.EventListEntry(id=int(e.Id()), type=_enum(M.EventType, e.Type(), f"{where}.type"),
                            target=int(e.Target()), val=int(e.Val()),
                            op=_enum(M.EventOp, e.Op(), f"{where}.op"))


def _tensor(t: Any, where: str) -> M.TensorDescListEntry:
    strides = tuple(int(getattr(t, f"Stride{i}")()) for i in range(M.NUM_STRIDES))
    return M.TensorDescListEntry(
        name=_text(t.Name(), f"{where}.name"), id=int(t.Id()), mem_id=int(t.MemId()), size=int(t.Size()),
        offset=int(t.Offset()), data_format=_enum(M.DataFormat, t.DataFormat(), f"{where}.data_format"),
        data_type=_enum(M.DataType, t.DataType(), f"{where}.data_type"),
        data_category=_enum(M.DataCategory, t.DataCategory(), f"{where}.data_category"),
        pixel_format=_enum(M.PixelFormat, t.PixelFormat(), f"{where}.pixel_format"),
        pixel_mapping=_enum(M.PixelMapping, t.PixelMapping(), f"{where}.pixel_mapping"),
        n=int(t.N()), c=int(t.C()), h=int(t.H()), w=int(t.W()), strides=strides)


def _reloc(r: Any, where: str) -> M.RelocListEntry:
    return M.RelocListEntry(address_id=int(r.AddressId()), write_id=int(r.WriteId()), offset=int(r.Offset()),
                            interface=_enum(M.Interface, r.Interface(), f"{where}.interface"),
                            sub_interface=int(r.SubInterface()), reloc_type=int(r.RelocType()))


def _list(root: Any, name: str, key: str, make: Any) -> tuple[Any, ...]:
    count = getattr(root, f"{name}Length")()
    get = getattr(root, name)
    return tuple(make(get(i), f"{key}[{i}]") for i in range(count))


def parse(buf: bytes) -> M.NvdlaLoadable:
    """The loadable's tables as dataclasses, after the FlatBuffer is verified; its cross-references
    are not checked yet (read_nvdla_loadable does that)."""
    verify(buf)
    root = G.Loadable.GetRootAs(buf, 0)
    return M.NvdlaLoadable(
        version=_version(root.Version()),
        task_list=_list(root, "TaskList", "task_list", _task),
        memory_list=_list(root, "MemoryList", "memory_list", _memory),
        address_list=_list(root, "AddressList", "address_list", lambda a, w: M.AddressListEntry(
            int(a.Id()), int(a.MemId()), int(a.Offset()), int(a.Size()))),
        event_list=_list(root, "EventList", "event_list", _event),
        blobs=_list(root, "Blobs", "blobs", _blob),
        tensor_desc_list=_list(root, "TensorDescList", "tensor_desc_list", _tensor),
        reloc_list=_list(root, "RelocList", "reloc_list", _reloc),
        submit_list=_list(root, "SubmitList", "submit_list",
                          lambda s, w: M.SubmitListEntry(int(s.Id()), _ints(s, "TaskId"))))


def read_nvdla_loadable(data: bytes | bytearray | memoryview | str | Path) -> M.NvdlaLoadable:
    """An NVDLA Loadable from its bytes (or a path), every table checked; DlaError when it is not one.

    Usage: ``lo = read_nvdla_loadable("BDMA_L0_0_fbuf")``
    """
    if isinstance(data, (str, Path)):
        path = Path(data)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise file_error(path, e) from e
    lo = parse(bytes(data))
    check_loadable(lo)
    return lo
