"""Contexts of the KMD: a client's device address space, its buffer objects, its prepared jobs.

A context is one address space of the device (made and released through the port); its buffer
objects are allocated and mapped into it through the port too, and known to the client by handles
that are never reused within the context. An address list a client submits is checked here, entry
by entry, against the buffers it names, and resolved to them. The driver (:mod:`pydla.kmd.driver`)
holds its lock around every function of this module, and keeps its open contexts in a
:class:`ContextTable`.

Usage::

    context = Context(port.dla_create_context())
    handle = create_buffer(port, context, 4096)
    resolved = resolve(context, [AddressEntry(handle)], "task 1")
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydla.errors import DlaError, NvError
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import MAX_ADDRESSES, ResolvedEntry
from pydla.kmd.bo import BufferObject
from pydla.kmd.port import AddressEntry, KmdPortability


@dataclass
class Buffer:
    """A buffer object of a context and where the context's address space maps it."""

    bo: BufferObject
    iova: int


@dataclass
class PreparedJob:
    """A task validated once (:meth:`Kmd.prepare`): its resolved address list and the KMD's own copy
    of its descriptors (the graph). Submitting it again skips nothing that could have changed: the
    graph is the KMD's copy, not the client's memory, and the job is dropped when a buffer it uses
    is destroyed."""

    prep_id: int
    handles: frozenset[int]
    addresses: list[ResolvedEntry]
    graph: TaskGraph
    scalars: tuple[tuple[int, int], ...] = ()
    nvdla_interface: tuple[int, int, int] | None = None  # an NVDLA task's (a headed firmware decodes it)


@dataclass
class Context:
    """A client's device context: its address space (ctx id), its buffer objects by handle, and
    its prepared jobs by id."""

    ctx: int
    buffers: dict[int, Buffer] = field(default_factory=dict)
    next_handle: int = 1
    prepared: dict[int, PreparedJob] = field(default_factory=dict)
    next_prepared: int = 1
    hangs: int = 0  # its jobs the watchdog declared hung
    banned: str | None = None  # why its submits are refused (see pydla.kmd.recovery)


class ContextTable:
    """The driver's open contexts by id, and whether the driver was closed (then no context opens
    and none is used any more). Used under the driver's lock."""

    def __init__(self) -> None:
        self.by_id: dict[int, Context] = {}
        self.closed = False

    def check_open(self) -> None:
        """NvError InvalidState once the driver was closed."""
        if self.closed:
            raise DlaError(NvError.InvalidState, "the driver was closed")

    def get(self, ctx: int) -> Context:
        """Open context ``ctx``; else NvError BadParameter."""
        context = self.by_id.get(ctx)
        if context is None:
            raise DlaError(NvError.BadParameter, f"context {ctx} is not open")
        return context


def check_not_banned(context: Context) -> None:
    """Refuse work of a banned context (its jobs' and executions' submits alike)."""
    if context.banned is not None:
        raise DlaError(NvError.InvalidState, f"context {context.ctx} is banned: {context.banned}; close it "
                                             "and open a new one")


def buffer_of(context: Context, handle: int) -> Buffer:
    buf = context.buffers.get(handle)
    if buf is None:
        raise DlaError(NvError.BadParameter, f"handle {handle} is not a buffer of context {context.ctx}")
    return buf


def create_buffer(port: KmdPortability, context: Context, size: int, fd: int | None = None) -> int:
    """A new buffer object of ``size`` bytes (or the shared memory ``fd``, which it then owns) mapped
    into ``context``; returns its handle."""
    bo = port.dla_alloc(size, fd)
    try:
        iova = port.dla_map(context.ctx, bo)
    except DlaError:
        port.dla_free(bo)
        raise
    handle = context.next_handle
    context.next_handle += 1
    context.buffers[handle] = Buffer(bo, iova)
    return handle


def destroy_buffer(port: KmdPortability, context: Context, handle: int) -> None:
    """Unmap and free buffer ``handle``, and drop the prepared jobs that use it."""
    buf = buffer_of(context, handle)
    port.dla_unmap(context.ctx, buf.iova)
    port.dla_free(buf.bo)
    del context.buffers[handle]
    context.prepared = {k: p for k, p in context.prepared.items() if handle not in p.handles}


def release_context(port: KmdPortability, context: Context) -> None:
    """Free every buffer of ``context`` and release its address space (its mappings go with it)."""
    for buf in context.buffers.values():
        port.dla_free(buf.bo)
    context.buffers.clear()
    port.dla_destroy_context(context.ctx)


def resolve(context: Context, addresses: list[AddressEntry], what: str) -> list[ResolvedEntry]:
    """Each entry checked against its buffer, and resolved to it."""
    if not 0 < len(addresses) <= MAX_ADDRESSES:
        raise DlaError(NvError.BadParameter,
                       f"address list of {len(addresses)} entries: must hold 1..{MAX_ADDRESSES}")
    resolved = []
    for i, entry in enumerate(addresses):
        buf = context.buffers.get(entry.handle)
        if buf is None:
            raise DlaError(NvError.BadParameter,
                           f"{what}: address {i}: handle {entry.handle} is not a "
                           f"buffer of context {context.ctx}")
        for value, name in ((entry.offset, "offset"), (entry.size, "size")):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise DlaError(NvError.BadParameter,
                               f"{what}: address {i}: {name} {value!r} is not an integer")
        if not 0 <= entry.offset < buf.bo.size:
            raise DlaError(NvError.BadParameter,
                           f"{what}: address {i}: offset {entry.offset} is outside "
                           f"buffer {entry.handle} ({buf.bo.size} bytes)")
        if entry.size is not None and not 0 < entry.size <= buf.bo.size - entry.offset:
            raise DlaError(NvError.InvalidSize,
                           f"{what}: address {i}: size {entry.size} at offset {entry.offset} "
                           f"is outside buffer {entry.handle} ({buf.bo.size} bytes)")
        resolved.append(ResolvedEntry(buf.bo, buf.iova, entry.offset, entry.size))
    return resolved
