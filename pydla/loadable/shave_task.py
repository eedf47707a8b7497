"""The SHAVE task-list encoder and reader: the VPUX software layers' task lists as a pydla task.

A SHAVE task list is one task of the run recipe, in the same control-code form as a DLA task
(:mod:`pydla.elf.controlcode`, :data:`~pydla.elf.controlcode.SHAVE_SECTIONS`): its network
descriptor's ``shave_list_index`` names the ``shave_list_desc_t`` (``ActKernelRuntime``: the runtime
kernel and the per-tile stacks), followed by the ``ActKernelTask`` array, the DMA task array and the
invocations' argument buffers (each a black box to the runtime). Kernel ELFs (``KernelData``) are
buffers of the recipe, usually constant ones from the loadable's weights; an invocation names a
byte range of one (a ``KernelDataReference``). Every buffer reference is a relocated address-list
index, patched when buffers are bound, as for DLA tasks.

Barriers are numbered by the builder (:meth:`ShaveTaskBuilder.barrier`); each fires once per run.
The builder gives every task that updates no barrier the list's *done* barrier, so the list ends
(the KMD's notify barrier) when all of its tasks have.

Usage::

    sb = ShaveTaskBuilder(tiles=2, cmx_bytes=256 << 10)
    sb.runtime(sb.ref("rt", len(runtime_elf)))
    b0, b1 = sb.barrier(), sb.barrier()
    sb.dma(sb.ref("x", 256), tile=0, cmx_offset=0, to_cmx=True, line_size=256, update=[b0])
    sb.invoke(sb.ref("clamp", len(clamp_elf)), entry_offset=0, args=params, tile=0, wait=[b0],
              update=[b1])
    sb.dma(sb.ref("y", 256), tile=0, cmx_offset=256, to_cmx=False, line_size=256, wait=[b1])
    built = sb.build()
    loaded = built.load(kmd, ctx, existing={"rt": rt_handle, ...})
    kmd.submit(ctx, loaded.addresses).wait()
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated import shave as S
from pydla.elf.controlcode import R_DLA_ARG_INDEX16, SHAVE_SECTIONS, ControlCode
from pydla.errors import DlaError, NvError
from pydla.kernels.image import KernelImage
from pydla.kernels.invocation import Invocation
from pydla.kernels.memref import DEFAULT_STACK
from pydla.loadable.taskbuilder import DESCRIPTORS, BuiltTask, Ref

ARGS_ENTRY = 4  # the .shave.args section's address-list entry
_ARG_ALIGN = 16


@dataclass
class KernelTaskPlan:
    """A kernel invocation being built (an ActKernelTask)."""

    kernel: Ref
    entry_offset: int
    args: bytes
    tile: int
    kernel_id: int
    data: Ref | bytes | None  # a buffer's bytes, or bytes kept with the arguments
    data_offset: int
    wait: int
    update: int
    name: str = ""


@dataclass
class DmaTaskPlan:
    """A DMA task being built: ``ddr`` is the device-memory side."""

    ddr: Ref
    to_cmx: bool
    tile: int
    cmx_offset: int
    line_size: int
    line_repeat: int
    ddr_line_stride: int
    cmx_line_stride: int
    surf_repeat: int
    ddr_surf_stride: int
    cmx_surf_stride: int
    wait: int
    update: int


def _mask(barriers: Sequence[int], limit: int, what: str) -> int:
    mask = 0
    for b in barriers:
        if not (isinstance(b, int) and 0 <= b < limit):
            raise DlaError(NvError.BadParameter,
                           f"{what}: barrier {b!r} is not one of the list's 0..{limit - 1}")
        mask |= 1 << b
    return mask


@dataclass
class BuiltShaveTask(BuiltTask):
    """A built SHAVE task list: as :class:`~pydla.loadable.taskbuilder.BuiltTask` (``load`` writes
    it into a context's buffers), with its own control-code form."""

    relocations: list[tuple[str, int, str]] = field(default_factory=list)  # section, offset, buffer

    def control_code(self, arguments: dict[str, int]) -> bytes:
        """This list as a control-code ELF whose buffer ``name`` is run argument ``arguments[name]``."""
        from pydla.elf.writer import ElfWriter

        offsets = [off for _, off in self.addresses[:ARGS_ENTRY + 1]]
        ends = [*offsets[1:], len(self.descriptors)]
        w = ElfWriter()
        for name, start, end in zip(SHAVE_SECTIONS, offsets, ends, strict=True):
            w.add_section(name, self.descriptors[start:end], align=64)
        for name, _ in self.addresses[ARGS_ENTRY + 1:]:
            if name not in arguments:
                raise DlaError(NvError.BadParameter, f"control code: buffer '{name}' is not a run argument")
            w.add_symbol(name, None, value=arguments[name], absolute=True)
        for section, offset, buffer in self.relocations:
            w.add_relocation(section, offset=offset, rel_type=R_DLA_ARG_INDEX16, symbol=buffer)
        return w.build()


class ShaveTaskBuilder:
    """See the module docstring. ``tiles``, ``cmx_bytes`` and ``barriers``: the device's, so that a
    list that cannot run there is refused while it is built."""

    def __init__(self, tiles: int, cmx_bytes: int, barriers: int = int(S.MAX_BARRIERS)) -> None:
        if not 0 < tiles <= S.MAX_TILES:
            raise DlaError(NvError.BadParameter, f"tiles = {tiles}: a SHAVE task list needs 1..{S.MAX_TILES}")
        self.tiles = tiles
        self.cmx_bytes = cmx_bytes
        self.max_barriers = min(barriers, int(S.MAX_BARRIERS))
        self.buffers: dict[str, int] = {}
        self.acts: list[KernelTaskPlan] = []
        self.dmas: list[DmaTaskPlan] = []
        self.stacks: dict[int, int] = {}
        self.runtime_ref: Ref | None = None
        self.barriers = 0

    def __bool__(self) -> bool:
        return bool(self.acts or self.dmas)

    # -- buffers and barriers ----------------------------------------------------------------------

    def buffer(self, name: str, size: int) -> str:
        """Declare (or grow) run-argument buffer ``name`` to at least ``size`` bytes."""
        if name == DESCRIPTORS:
            raise DlaError(NvError.BadParameter, f"buffer name '{DESCRIPTORS}' is reserved")
        self.buffers[name] = max(self.buffers.get(name, 0), size)
        return name

    def ref(self, buffer: str, size: int, offset: int = 0) -> Ref:
        self.buffer(buffer, offset + size)
        return Ref(buffer, offset, size)

    def barrier(self) -> int:
        """A new barrier; the last one the device has is kept for the list's end."""
        if self.barriers >= self.max_barriers - 1:
            raise DlaError(NvError.InsufficientMemory,
                           f"the SHAVE task list uses all {self.max_barriers - 1} barriers it may: split it")
        self.barriers += 1
        return self.barriers - 1

    def runtime(self, elf: Ref, stacks: dict[int, int] | None = None) -> None:
        """The runtime kernel's ELF (ActKernelRuntime) and per-tile stack sizes (default 8 KiB)."""
        self.runtime_ref = elf
        self.stacks.update(stacks or {})

    # -- tasks ------------------------------------------------------------------------------------

    def invoke(self, kernel: Ref, *, entry_offset: int, args: bytes, tile: int, kernel_id: int = 0,
               data: Ref | bytes | None = None, data_offset: int = int(S.ARGS_MAX_BYTES),
               wait: Sequence[int] = (), update: Sequence[int] = (), name: str = "") -> int:
        """An ActKernelTask: call ``kernel`` (an ELF) at WIN_D + ``entry_offset`` with ``args`` on
        ``tile``; ``data`` (a buffer's bytes, or bytes kept with the arguments) is copied to
        WIN_E + ``data_offset`` (a kernel's static dims and strides live there). Returns its index in
        the kernel task list."""
        what = f"kernel task {len(self.acts)}"
        self._check_tile(tile, what)
        if len(args) > S.ARGS_MAX_BYTES:
            raise DlaError(NvError.InvalidSize,
                           f"{what}: {len(args)} argument bytes, at most {S.ARGS_MAX_BYTES}")
        masks = _mask(wait, self.barriers, what), _mask(update, self.barriers, what)
        self.acts.append(KernelTaskPlan(kernel, entry_offset, bytes(args), tile, kernel_id, data, data_offset,
                                        *masks, name))
        return len(self.acts) - 1

    def dma(self, ddr: Ref, *, tile: int, cmx_offset: int, to_cmx: bool, line_size: int,
            line_repeat: int = 1, ddr_line_stride: int | None = None, cmx_line_stride: int | None = None,
            surf_repeat: int = 1, ddr_surf_stride: int | None = None, cmx_surf_stride: int | None = None,
            wait: Sequence[int] = (), update: Sequence[int] = ()) -> int:
        """A DMA task between ``ddr`` and the tile's CMX slice at ``cmx_offset`` (dense unless strides
        are given). Returns its index in the DMA task list."""
        what = f"DMA task {len(self.dmas)}"
        self._check_tile(tile, what)
        dls = line_size if ddr_line_stride is None else ddr_line_stride
        cls = line_size if cmx_line_stride is None else cmx_line_stride
        dss = dls * line_repeat if ddr_surf_stride is None else ddr_surf_stride
        css = cls * line_repeat if cmx_surf_stride is None else cmx_surf_stride
        cmx_extent = (surf_repeat - 1) * css + (line_repeat - 1) * cls + line_size
        if cmx_offset < 0 or cmx_offset + cmx_extent > self.cmx_bytes:
            raise DlaError(NvError.InvalidSize, f"{what}: CMX bytes {cmx_offset}..{cmx_offset + cmx_extent} "
                                                f"are outside the tile's {self.cmx_bytes}")
        self.buffer(ddr.buffer, ddr.offset + ddr.size)
        masks = _mask(wait, self.barriers, what), _mask(update, self.barriers, what)
        self.dmas.append(DmaTaskPlan(ddr, to_cmx, tile, cmx_offset, line_size, line_repeat, dls, cls,
                                     surf_repeat, dss, css, *masks))
        return len(self.dmas) - 1

    def _check_tile(self, tile: int, what: str) -> None:
        if not (isinstance(tile, int) and 0 <= tile < self.tiles):
            raise DlaError(NvError.BadParameter, f"{what}: tile {tile!r} is not one of 0..{self.tiles - 1}")

    # -- encoding ---------------------------------------------------------------------------------

    def build(self, dla_waits: int = 0) -> BuiltShaveTask:
        """Encode the list and lay out its descriptors. ``dla_waits``: the barriers DLA operations
        beside the list wait on (:mod:`pydla.loadable.mixed_task`; a task updating one of them is
        waited for)."""
        if not self.acts and not self.dmas:
            raise DlaError(NvError.BadParameter, "the SHAVE task list has no tasks")
        if self.runtime_ref is None:
            raise DlaError(NvError.InvalidState, "the SHAVE task list has no runtime kernel: call runtime()")
        for r in [self.runtime_ref, *(a.kernel for a in self.acts),
                  *(a.data for a in self.acts if isinstance(a.data, Ref))]:
            self.buffer(r.buffer, r.offset + r.size)
        done = self.max_barriers - 1
        tasks: list[KernelTaskPlan | DmaTaskPlan] = [*self.acts, *self.dmas]
        waited = dla_waits
        for t in tasks:
            waited |= t.wait
        for t in tasks:
            if not t.update & waited:  # nothing waits for it: the list's end does
                t.update |= 1 << done
        # Beside DLA operations every task may lead into one: the task's end is theirs, no notify.
        notify = 1 << done if any(t.update >> done & 1 for t in tasks) else 0
        names = list(self.buffers)
        index = {name: ARGS_ENTRY + 1 + i for i, name in enumerate(names)}
        relocations: list[tuple[str, int, str]] = []

        def mem_ref(ref: Ref | None, section: str, base: int) -> Any:
            if ref is None:
                return T.dla_mem_ref_t(address=-1)
            relocations.append((section, base + T.dla_mem_ref_t.address.offset, ref.buffer))
            return T.dla_mem_ref_t(address=index[ref.buffer], offset=ref.offset, size=ref.size)

        args_blob = bytearray()
        acts = (T.shave_act_task_desc_t * max(len(self.acts), 1))()
        size = ctypes.sizeof(T.shave_act_task_desc_t)
        for i, a in enumerate(self.acts):
            d = acts[i]
            base = i * size
            d.kernel = mem_ref(a.kernel, ".shave.act", base + T.shave_act_task_desc_t.kernel.offset)
            args_blob += b"\0" * (-len(args_blob) % _ARG_ALIGN)
            d.args = T.dla_mem_ref_t(address=ARGS_ENTRY if a.args else -1, offset=len(args_blob),
                                     size=len(a.args))
            args_blob += a.args
            if isinstance(a.data, bytes):
                args_blob += b"\0" * (-len(args_blob) % _ARG_ALIGN)
                d.data = T.dla_mem_ref_t(address=ARGS_ENTRY, offset=len(args_blob), size=len(a.data))
                args_blob += a.data
            else:
                d.data = mem_ref(a.data, ".shave.act", base + T.shave_act_task_desc_t.data.offset)
            d.entry_offset, d.data_offset = a.entry_offset, a.data_offset
            d.tile, d.kernel_id = a.tile, a.kernel_id
            d.wait_mask, d.update_mask = a.wait, a.update
        dmas = (T.shave_dma_task_desc_t * max(len(self.dmas), 1))()
        size = ctypes.sizeof(T.shave_dma_task_desc_t)
        direction = T.shave_dma_direction_e
        for i, m in enumerate(self.dmas):
            e = dmas[i]
            e.ddr = mem_ref(m.ddr, ".shave.dma", i * size + T.shave_dma_task_desc_t.ddr.offset)
            e.direction = int(direction.TO_CMX if m.to_cmx else direction.FROM_CMX)
            for name in ("tile", "cmx_offset", "line_size", "line_repeat", "ddr_line_stride",
                         "cmx_line_stride", "surf_repeat", "ddr_surf_stride", "cmx_surf_stride"):
                setattr(e, name, getattr(m, name))
            e.wait_mask, e.update_mask = m.wait, m.update
        used = {a.tile for a in self.acts}
        lst = T.shave_list_desc_t(
            act_task_index=2 if self.acts else -1, dma_task_index=3 if self.dmas else -1,
            num_act_tasks=len(self.acts), num_dma_tasks=len(self.dmas),
            barrier_mask=(1 << self.barriers) - 1 | notify, notify_mask=notify, op_barrier_index=-1)
        lst.runtime = mem_ref(self.runtime_ref, ".shave.list", T.shave_list_desc_t.runtime.offset)
        for tile in range(self.tiles):
            lst.stack_size[tile] = self.stacks.get(tile, DEFAULT_STACK) if tile in used else 0
        net = T.dla_network_desc_t(operation_desc_index=-1, surface_desc_index=-1, dependency_graph_index=-1,
                                   lut_data_index=-1, num_addresses=ARGS_ENTRY + 1 + len(names),
                                   shave_list_index=1)
        for b in range(len(net.op_head)):
            net.op_head[b] = -1
        parts = [bytes(net), bytes(lst), bytes(acts), bytes(dmas), bytes(args_blob) or b"\0" * 8]
        offsets, blob = [], bytearray()
        for part in parts:
            blob += b"\0" * (-len(blob) % 64)
            offsets.append(len(blob))
            blob += part
        return BuiltShaveTask(bytes(blob), {DESCRIPTORS: len(blob), **self.buffers},
                              [(DESCRIPTORS, off) for off in offsets] + [(name, 0) for name in names], [],
                              relocations)


# -- reading a SHAVE control code back (pydla info) ---------------------------------------------------

def task_list(tiles: int, cmx_bytes: int, barriers: int, runtime: Ref, kernel: Ref, image: KernelImage,
              inv: Invocation, inputs: Sequence[Ref], outputs: Sequence[Ref], *, kernel_id: int = 0,
              name: str = "") -> ShaveTaskBuilder:
    """The SHAVE task list of one call of a custom kernel (:func:`pydla.kernels.plan_invocation`) on
    tile 0: each input DMA'd into CMX, the kernel, each output DMA'd back; barriers between.

    Usage: ``sb = task_list(2, 2 << 20, 32, runtime_ref, kernel_ref, image, inv, [x_ref], [y_ref])``
    """
    sb = ShaveTaskBuilder(tiles, cmx_bytes, barriers)
    sb.runtime(runtime, {0: inv.stack})
    loaded, computed = sb.barrier(), sb.barrier()
    for ref, at in zip(inputs, inv.inputs, strict=True):
        sb.dma(ref, tile=0, cmx_offset=at, to_cmx=True, line_size=ref.size, update=[loaded])
    sb.invoke(kernel, entry_offset=image.entry_offset, args=inv.args, tile=0, data=inv.data,
              data_offset=inv.data_offset, kernel_id=kernel_id, wait=[loaded] if inputs else [],
              update=[computed], name=name)
    for ref, at in zip(outputs, inv.outputs, strict=True):
        sb.dma(ref, tile=0, cmx_offset=at, to_cmx=False, line_size=ref.size, wait=[computed])
    return sb


def describe(code: ControlCode) -> dict[str, Any]:
    """What a SHAVE task list holds, by name: its runtime and stacks, its kernel tasks (kernel buffer,
    tile, barriers, argument bytes), its DMA tasks and its barriers (producers, consumers).
    Raises DlaError when a section is too short for what the list descriptor counts."""
    sections = code.sections
    names = {value: name for name, value in code.arguments.items()}
    patched = {(p.section, p.offset): p.name for p in code.patches}

    def read(section: str, cls: Any, i: int) -> Any:
        data = sections[section]
        size = ctypes.sizeof(cls)
        if (i + 1) * size > len(data):
            raise DlaError(NvError.BadValue, f"{code.what}: '{section}' holds {len(data)} bytes, entry {i} "
                                             f"needs {(i + 1) * size}")
        return cls.from_buffer_copy(bytes(data[i * size:(i + 1) * size]))

    def ref_name(section: str, offset: int, ref: Any) -> str:
        if ref.address < 0:
            return ""
        name = patched.get((section, offset + T.dla_mem_ref_t.address.offset))
        return name or names.get(ref.address, f"entry {ref.address}")

    # A list written before op_barrier_index (dla_task 1.9.0) is 4 bytes shorter: it reads as none.
    raw = bytes(sections[".shave.list"])
    legacy = T.shave_list_desc_t.op_barrier_index.offset
    if legacy <= len(raw) < ctypes.sizeof(T.shave_list_desc_t):
        raw = raw.ljust(ctypes.sizeof(T.shave_list_desc_t), b"\xff")
    sections = {**sections, ".shave.list": memoryview(raw)}
    lst = read(".shave.list", T.shave_list_desc_t, 0)
    producers: dict[int, int] = {}
    consumers: dict[int, int] = {}

    def count(wait: int, update: int) -> None:
        for b in range(32):
            if wait >> b & 1:
                consumers[b] = consumers.get(b, 0) + 1
            if update >> b & 1:
                producers[b] = producers.get(b, 0) + 1

    acts = []
    size = ctypes.sizeof(T.shave_act_task_desc_t)
    for i in range(lst.num_act_tasks):
        a = read(".shave.act", T.shave_act_task_desc_t, i)
        count(a.wait_mask, a.update_mask)
        kernel = ref_name(".shave.act", i * size + T.shave_act_task_desc_t.kernel.offset, a.kernel)
        acts.append({"kernel": kernel,
                     "kernel_id": a.kernel_id, "tile": a.tile, "entry_offset": a.entry_offset,
                     "args_bytes": a.args.size, "wait": _bits(a.wait_mask), "update": _bits(a.update_mask)})
    dmas = []
    size = ctypes.sizeof(T.shave_dma_task_desc_t)
    for i in range(lst.num_dma_tasks):
        d = read(".shave.dma", T.shave_dma_task_desc_t, i)
        count(d.wait_mask, d.update_mask)
        dmas.append({"buffer": ref_name(".shave.dma", i * size + T.shave_dma_task_desc_t.ddr.offset, d.ddr),
                     "offset": d.ddr.offset, "direction": "to_cmx" if d.direction == 0 else "from_cmx",
                     "tile": d.tile, "cmx_offset": d.cmx_offset,
                     "bytes": d.line_size * d.line_repeat * d.surf_repeat,
                     "wait": _bits(d.wait_mask), "update": _bits(d.update_mask)})
    operations = []  # a task with DLA operations beside its list: their barriers
    if ".dla.barriers" in sections:
        size = ctypes.sizeof(T.dla_op_barrier_desc_t)
        for i in range(len(sections[".dla.barriers"]) // size):
            o = read(".dla.barriers", T.dla_op_barrier_desc_t, i)
            count(o.wait_mask, o.update_mask)
            operations.append({"operation": i, "wait": _bits(o.wait_mask), "update": _bits(o.update_mask)})
    barriers = [{"barrier": b, "producers": producers.get(b, 0), "consumers": consumers.get(b, 0),
                 "notify": bool(lst.notify_mask >> b & 1)} for b in _bits(lst.barrier_mask)]
    return {"runtime": ref_name(".shave.list", T.shave_list_desc_t.runtime.offset, lst.runtime),
            "stacks": {t: lst.stack_size[t] for t in range(len(lst.stack_size)) if lst.stack_size[t]},
            "kernel_tasks": acts, "dma_tasks": dmas, "operations": operations, "barriers": barriers}


def _bits(mask: int) -> list[int]:
    return [b for b in range(32) if mask >> b & 1]
