"""The bytes a loadable puts in its memory, as the runtime lays them out before a task runs.

A memory-list entry with SET is filled from its contents (blob ``contents[i]`` at ``offsets[i]``,
``blob.size`` bytes; later contents over earlier ones, as the runtime copies them in order); the rest
of it is zero here. Only the window asked for is assembled, so a memory of gigabytes costs nothing.
A task's address-list index ``i`` names ``address_list[task.address_list[i]]``: a memory and an offset.

Usage::

    data = read_task_memory(lo, task, 0, 0, 40, "network descriptor")   # the network descriptor's bytes
"""

from __future__ import annotations

from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M


def read_memory(lo: M.NvdlaLoadable, mem_id: int, offset: int, size: int, what: str) -> bytes:
    """``size`` bytes at ``offset`` of memory ``mem_id`` as the loadable fills it; DlaError when they
    lie outside the memory or the memory is not filled by the loadable (no SET)."""
    if not 0 <= mem_id < len(lo.memory_list):
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: {what}: memory {mem_id} is not in the memory list "
                                         f"({len(lo.memory_list)} entries)")
    mem = lo.memory_list[mem_id]
    if offset < 0 or size < 0 or offset + size > mem.size:
        raise DlaError(NvError.InvalidSize, f"NVDLA Loadable: {what}: {size} bytes at offset {offset} of "
                                            f"memory "
                                            f"{mem_id} run past its end ({mem.size} bytes)")
    if not mem.flags & M.MemoryFlags.SET:
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: {what}: memory {mem_id} is not filled by the "
                                         f"loadable "
                                         f"(flags {int(mem.flags):#x} without SET)")
    out = bytearray(size)
    for name, at in zip(mem.contents, mem.offsets, strict=True):
        blob = lo.blob(name)
        if blob is None:
            raise DlaError(NvError.BadValue, f"NVDLA Loadable: {what}: memory {mem_id} names no blob "
                                             f"{name!r}")
        lo_end, hi_end = max(at, offset), min(at + blob.size, offset + size)
        if lo_end < hi_end:
            out[lo_end - offset:hi_end - offset] = blob.data[lo_end - at:hi_end - at]
    return bytes(out)


def task_address(lo: M.NvdlaLoadable, task: M.TaskListEntry, index: int, what: str) -> M.AddressListEntry:
    """The address-list entry behind a task's address index ``index`` (what a descriptor names)."""
    if not 0 <= index < len(task.address_list):
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: {what}: address index {index} is not in task "
                                         f"{task.id}'s address list ({len(task.address_list)} entries)")
    entry = task.address_list[index]
    if not 0 <= entry < len(lo.address_list):
        raise DlaError(NvError.BadValue, f"NVDLA Loadable: {what}: task {task.id}'s address index {index} "
                                         f"names "
                                         f"address-list entry {entry}, which does not exist")
    return lo.address_list[entry]


def read_task_memory(lo: M.NvdlaLoadable, task: M.TaskListEntry, index: int, offset: int, size: int,
                     what: str) -> bytes:
    """``size`` bytes at ``offset`` from a task's address index ``index`` (within the address-list
    entry's size when it gives one: 0 means up to the end of its memory)."""
    address = task_address(lo, task, index, what)
    if address.size and offset + size > address.size:
        raise DlaError(NvError.InvalidSize, f"NVDLA Loadable: {what}: {size} bytes at offset {offset} of "
                                            f"address "
                                            f"index {index} run past its {address.size} bytes")
    return read_memory(lo, address.mem_id, address.offset + offset, size, what)
