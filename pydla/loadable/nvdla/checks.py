"""The NVDLA Loadable's own rules, checked on the parsed tables (what the runtime will rely on).

- the format version is 0.7.x (NVIDIA's runtime reads 0.7; another major or minor is refused, saying
  which side is newer);
- ids are list positions (0..n-1: the runtime indexes its lists by id) and there is at least one task,
  memory entry and submit entry (NVIDIA's runtime loads nothing less);
- every reference between the lists: a task's address-list entries, its pre and post actions (events),
  an address entry's memory, a submit entry's tasks, a tensor's and a relocation's memory and address,
  a memory entry's tensor descriptor;
- every place within its memory: address entries, tensors, SET contents (blob size at its offset),
  relocations; contents and offsets pair up; a SET content names a blob; blob names are unique and a
  blob holds the ``size`` bytes it declares; alignments are powers of two;
- bind ids: per direction 0..n-1, each once; INPUT and OUTPUT not both; SET with ALLOC and not on a
  bindable memory (the runtime would not fill it); tasks for DLA1 or EMU1 with at most
  NVDLA_MAX_BUFFERS_PER_TASK address-list entries, a DLA task with at least one (its network
  descriptor).

Each failure is a DlaError naming the field and its value.

Usage::

    check_loadable(lo)    # raises DlaError or returns None
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M

MAX_BUFFERS_PER_TASK = 6144  # NVDLA_MAX_BUFFERS_PER_TASK (dla_interface.yaml's constant)


def _bad(where: str, message: str, code: NvError = NvError.BadValue) -> DlaError:
    return DlaError(code, f"NVDLA Loadable: {where}: {message}")


def check_version(v: M.Version) -> None:
    if (v.major, v.minor) == (M.FORMAT_MAJOR, M.FORMAT_MINOR):
        return
    newer = (v.major, v.minor) > (M.FORMAT_MAJOR, M.FORMAT_MINOR)
    side = "the loadable is newer than this reader" if newer else "the loadable is older than this reader"
    raise _bad("version", f"loadable format {v}: this reader reads {M.FORMAT_MAJOR}.{M.FORMAT_MINOR}.x "
                          f"({side}; recompile it with an NVDLA compiler that writes 0.7)",
               NvError.VersionMismatch)


def _ids(items: Sequence[Any], key: str) -> None:
    for i, item in enumerate(items):
        if item.id != i:
            raise _bad(f"{key}[{i}].id", f"{item.id}: ids are list positions (0..{len(items) - 1}), "
                                         "the runtime finds entries by them")


def _index(value: int, count: int, where: str, what: str) -> None:
    if not 0 <= value < count:
        raise _bad(where, f"{value} is not a {what} ({count} entr{'y' if count == 1 else 'ies'})")


def _within(offset: int, size: int, limit: int, where: str, what: str) -> None:
    if offset + size > limit:
        raise _bad(where, f"offset {offset} + size {size} runs past the end of {what} ({limit} bytes)",
                   NvError.InvalidSize)


def _tasks(lo: M.NvdlaLoadable) -> None:
    for i, t in enumerate(lo.task_list):
        where = f"task_list[{i}]"
        if t.interface not in (M.Interface.DLA1, M.Interface.EMU1):
            raise _bad(f"{where}.interface", f"{t.interface.name}: a task runs on DLA1 or EMU1",
                       NvError.NotSupported)
        if t.instance < -1:
            raise _bad(f"{where}.instance", f"{t.instance}: -1 (any) or an engine instance")
        if len(t.address_list) > MAX_BUFFERS_PER_TASK:
            raise _bad(f"{where}.address_list", f"{len(t.address_list)} entries, more than "
                                                f"NVDLA_MAX_BUFFERS_PER_TASK {MAX_BUFFERS_PER_TASK}",
                       NvError.InvalidSize)
        if not t.address_list:
            raise _bad(f"{where}.address_list", "empty: entry 0 holds the task's network descriptor")
        for j, a in enumerate(t.address_list):
            _index(a, len(lo.address_list), f"{where}.address_list[{j}]", "address-list entry")
        for name, actions in (("pre_actions", t.pre_actions), ("post_actions", t.post_actions)):
            for j, e in enumerate(actions):
                _index(e, len(lo.event_list), f"{where}.{name}[{j}]", "event-list entry")


def _blobs(lo: M.NvdlaLoadable) -> None:
    seen: set[str] = set()
    for i, b in enumerate(lo.blobs):
        where = f"blobs[{i}]"
        if b.name in seen:
            raise _bad(f"{where}.name", f"{b.name!r} is the name of an earlier blob too")
        seen.add(b.name)
        if b.size > len(b.data):
            raise _bad(f"{where}.size", f"{b.size} bytes declared, {len(b.data)} in its data",
                       NvError.InvalidSize)


def _memory(lo: M.NvdlaLoadable) -> None:
    bind_ids: dict[str, dict[int, int]] = {"INPUT": {}, "OUTPUT": {}}
    for i, m in enumerate(lo.memory_list):
        where = f"memory_list[{i}]"
        if m.alignment & (m.alignment - 1):
            raise _bad(f"{where}.alignment", f"{m.alignment} is not a power of two")
        if len(m.contents) != len(m.offsets):
            raise _bad(f"{where}.offsets", f"{len(m.offsets)} offsets for {len(m.contents)} contents",
                       NvError.CountMismatch)
        direction = [d for d in ("INPUT", "OUTPUT") if m.flags & M.MemoryFlags[d]]
        if len(direction) == 2:
            raise _bad(f"{where}.flags", f"{int(m.flags):#x}: both INPUT and OUTPUT")
        if direction:
            ids = bind_ids[direction[0]]
            if m.bind_id in ids:
                raise _bad(f"{where}.bind_id", f"{direction[0].lower()} bind id {m.bind_id} is memory_list"
                                               f"[{ids[m.bind_id]}]'s too")
            ids[m.bind_id] = i
            _index(m.tensor_desc_id, len(lo.tensor_desc_list), f"{where}.tensor_desc_id", "tensor descriptor")
        if not m.flags & M.MemoryFlags.SET:
            continue
        if not m.flags & M.MemoryFlags.ALLOC or direction:
            raise _bad(f"{where}.flags", f"{int(m.flags):#x}: SET needs ALLOC and a memory that is not bound "
                                         "(the runtime fills no other)")
        for j, (name, offset) in enumerate(zip(m.contents, m.offsets, strict=True)):
            blob = lo.blob(name)
            if blob is None:
                raise _bad(f"{where}.contents[{j}]", f"no blob is called {name!r}")
            _within(offset, blob.size, m.size, f"{where}.offsets[{j}]", f"memory {i} (blob {name!r})")
    for kind, ids in bind_ids.items():
        if ids and sorted(ids) != list(range(len(ids))):
            raise _bad("memory_list", f"{kind.lower()} bind ids {sorted(ids)}: they must be "
                                      f"0..{len(ids) - 1}")


def _addresses(lo: M.NvdlaLoadable) -> None:
    for i, a in enumerate(lo.address_list):
        where = f"address_list[{i}]"
        _index(a.mem_id, len(lo.memory_list), f"{where}.mem_id", "memory-list entry")
        _within(a.offset, a.size, lo.memory_list[a.mem_id].size, where, f"memory {a.mem_id}")


def _others(lo: M.NvdlaLoadable) -> None:
    for i, s in enumerate(lo.submit_list):
        for j, task in enumerate(s.task_id):
            _index(task, len(lo.task_list), f"submit_list[{i}].task_id[{j}]", "task")
    for i, t in enumerate(lo.tensor_desc_list):
        where = f"tensor_desc_list[{i}]"
        _index(t.mem_id, len(lo.memory_list), f"{where}.mem_id", "memory-list entry")
        _within(t.offset, t.size, lo.memory_list[t.mem_id].size, where, f"memory {t.mem_id}")
        for name in ("n", "c", "h", "w"):
            if getattr(t, name) < 0:
                raise _bad(f"{where}.{name}", f"{getattr(t, name)} is negative")
    for i, r in enumerate(lo.reloc_list):
        where = f"reloc_list[{i}]"
        _index(r.address_id, len(lo.address_list), f"{where}.address_id", "address-list entry")
        _index(r.write_id, len(lo.memory_list), f"{where}.write_id", "memory-list entry")
        _within(r.offset, 4, lo.memory_list[r.write_id].size, f"{where}.offset", f"memory {r.write_id}")


def check_loadable(lo: M.NvdlaLoadable) -> None:
    """DlaError naming the first field that breaks a rule of the module's list."""
    check_version(lo.version)
    for key, count in (("task_list", len(lo.task_list)), ("memory_list", len(lo.memory_list)),
                       ("submit_list", len(lo.submit_list))):
        if count == 0:
            raise _bad(key, "empty: a loadable has at least one task, memory entry and submit entry")
    for key in ("task_list", "memory_list", "address_list", "event_list", "tensor_desc_list", "submit_list"):
        _ids(getattr(lo, key), key)
    _blobs(lo)
    _tasks(lo)
    _memory(lo)
    _addresses(lo)
    _others(lo)
