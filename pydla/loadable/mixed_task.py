"""A task of DLA operations and a SHAVE task list that run side by side, synchronised by barriers.

The VPUX software layers give each DPU workload (variant) its own wait and update barriers, so that
an ACT SHAVE kernel post-processes a workload as soon as that workload is done. Here a DLA operation
may name the barriers of the SHAVE task list beside it in the same task: it is enabled once its wait
barriers fired, and updates its update barriers when it completes; the list's DMA and kernel tasks
wait on and update the same barriers (:mod:`pydla.firmware.shave_check` checks them together).

The task's address list: entries 0..4 are the DLA task's (network, dependency graph, operations,
surfaces, LUTs), 5..8 the list's (``.shave.list``, ``.shave.act``, ``.shave.dma``, ``.shave.args``),
9 the operations' ``dla_op_barrier_desc_t`` (``.dla.barriers``), then the buffers
(:data:`pydla.elf.controlcode.MIXED_SECTIONS`).

Usage::

    tb = TaskBuilder(); conv = tb.conv(...); sdp = tb.sdp(conv, y)
    sb = ShaveTaskBuilder(tiles, cmx_bytes, barriers); sb.runtime(rt)
    produced = sb.barrier()
    sb.dma(y_rows, tile=0, cmx_offset=0, to_cmx=True, line_size=n, wait=[produced], update=[loaded])
    mixed = MixedTask(tb, sb)
    mixed.barriers(sdp.index, update=[produced])       # the SDP's result lets the DMA start
    built = mixed.build()                              # .load(kmd, ctx) / .control_code(arguments)
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.task_layout import SURFACE_DESC_SIZE
from pydla.elf.controlcode import MIXED_SECTIONS, R_DLA_ARG_INDEX16
from pydla.errors import DlaError, NvError
from pydla.loadable.shave_task import ARGS_ENTRY, ShaveTaskBuilder, _mask
from pydla.loadable.task_types import DESCRIPTORS, FIXED_ENTRIES, BuiltTask
from pydla.loadable.taskbuilder import TaskBuilder

LIST_ENTRY, ACT_ENTRY, DMA_ENTRY, MIXED_ARGS_ENTRY, BARRIERS_ENTRY = range(FIXED_ENTRIES, FIXED_ENTRIES + 5)
FIRST_BUFFER = len(MIXED_SECTIONS)
_SHAVE_OFFSET = LIST_ENTRY - 1  # the list's own entries 1..4 move to 5..8


@dataclass
class BuiltMixedTask(BuiltTask):
    """A built mixed task: ``load`` as any built task; its control code has :data:`MIXED_SECTIONS`."""

    relocations: list[tuple[str, int, str]] = field(default_factory=list)  # section, offset, buffer

    def control_code(self, arguments: dict[str, int]) -> bytes:
        """This task as a control-code ELF whose buffer ``name`` is run argument ``arguments[name]``."""
        from pydla.elf.writer import ElfWriter

        offsets = [off for _, off in self.addresses[:FIRST_BUFFER]]
        ends = [*offsets[1:], len(self.descriptors)]
        w = ElfWriter()
        for name, start, end in zip(MIXED_SECTIONS, offsets, ends, strict=True):
            w.add_section(name, self.descriptors[start:end], align=64)
        for name, _ in self.addresses[FIRST_BUFFER:]:
            if name not in arguments:
                raise DlaError(NvError.BadParameter, f"control code: buffer '{name}' is not a run argument")
            w.add_symbol(name, None, value=arguments[name], absolute=True)
        for section, offset, buffer in self.relocations:
            w.add_relocation(section, offset=offset, rel_type=R_DLA_ARG_INDEX16, symbol=buffer)
        return w.build()


class MixedTask:
    """See the module docstring: the DLA operations of ``tb`` beside the SHAVE task list of ``sb``."""

    def __init__(self, tb: TaskBuilder, sb: ShaveTaskBuilder) -> None:
        self.tb = tb
        self.sb = sb
        self.waits: dict[int, int] = {}
        self.updates: dict[int, int] = {}

    def barriers(self, op: int, wait: Sequence[int] = (), update: Sequence[int] = ()) -> None:
        """Operation ``op`` of ``tb`` waits on ``wait`` and updates ``update`` (barriers of ``sb``)."""
        if not 0 <= op < len(self.tb.ops):
            raise DlaError(NvError.BadParameter,
                           f"operation {op} is not one of the task's {len(self.tb.ops)}")
        what = f"operation {op}"
        self.waits[op] = self.waits.get(op, 0) | _mask(wait, self.sb.barriers, what)
        self.updates[op] = self.updates.get(op, 0) | _mask(update, self.sb.barriers, what)

    def build(self) -> BuiltMixedTask:
        dla = self.tb.build()
        dla_waits = 0
        for w in self.waits.values():
            dla_waits |= w
        shave = self.sb.build(dla_waits)
        names = list(dict.fromkeys([n for n, _ in dla.addresses[FIXED_ENTRIES:]] +
                                   [n for n, _ in shave.addresses[ARGS_ENTRY + 1:]]))
        index = {name: FIRST_BUFFER + i for i, name in enumerate(names)}
        relocations: list[tuple[str, int, str]] = []
        dla_parts = _split(dla.descriptors, [off for _, off in dla.addresses[:FIXED_ENTRIES]])
        shave_parts = _split(shave.descriptors, [off for _, off in shave.addresses[:ARGS_ENTRY + 1]])
        # The DLA part: its network names the list and the new address count; surfaces their buffers.
        net = T.dla_network_desc_t.from_buffer_copy(dla_parts[0])
        net.shave_list_index = LIST_ENTRY
        net.num_addresses = FIRST_BUFFER + len(names)
        surfaces = bytearray(dla_parts[3])
        dla_names = [n for n, _ in dla.addresses[FIXED_ENTRIES:]]
        for op in dla.operations:
            base = op.index * SURFACE_DESC_SIZE
            for field_name, _ in op.surface._fields_:
                sub = getattr(op.surface, field_name)
                if hasattr(sub, "address") and sub.address >= FIXED_ENTRIES:
                    at = base + getattr(type(op.surface), field_name).offset + type(sub).address.offset
                    buffer = dla_names[sub.address - FIXED_ENTRIES]
                    ctypes.c_int16.from_buffer(surfaces, at).value = index[buffer]
                    relocations.append((".dla.surfaces", at, buffer))
        # The list's part: its entries move up by 4, its buffers are renumbered.
        sections = {name: bytearray(part) for name, part in zip(
            (".shave.list", ".shave.act", ".shave.dma", ".shave.args"), shave_parts[1:], strict=True)}
        for section, offset, buffer in shave.relocations:
            ctypes.c_int16.from_buffer(sections[section], offset).value = index[buffer]
            relocations.append((section, offset, buffer))
        lst = T.shave_list_desc_t.from_buffer(sections[".shave.list"])
        for name in ("act_task_index", "dma_task_index"):
            if getattr(lst, name) != -1:
                setattr(lst, name, getattr(lst, name) + _SHAVE_OFFSET)
        lst.op_barrier_index = BARRIERS_ENTRY
        act_size = ctypes.sizeof(T.shave_act_task_desc_t)
        for i in range(len(self.sb.acts)):
            d = T.shave_act_task_desc_t.from_buffer(sections[".shave.act"], i * act_size)
            for ref in (d.args, d.data):
                if ref.address == ARGS_ENTRY:
                    ref.address = MIXED_ARGS_ENTRY
        ops = (T.dla_op_barrier_desc_t * len(dla.operations))()
        for op in dla.operations:
            ops[op.index].wait_mask = self.waits.get(op.index, 0)
            ops[op.index].update_mask = self.updates.get(op.index, 0)
        parts = [bytes(net), *dla_parts[1:3], bytes(surfaces), dla_parts[4],
                 *(bytes(s) for s in sections.values()), bytes(ops)]
        offsets, blob = [], bytearray()
        for part in parts:
            blob += b"\0" * (-len(blob) % 64)
            offsets.append(len(blob))
            blob += part
        buffers = {DESCRIPTORS: len(blob)}
        for built in (dla, shave):
            for name, size in built.buffers.items():
                if name != DESCRIPTORS:
                    buffers[name] = max(size, buffers.get(name, 0))
        return BuiltMixedTask(bytes(blob), buffers, [(DESCRIPTORS, off) for off in offsets] +
                              [(name, 0) for name in names], list(dla.operations), relocations)


def _split(blob: bytes, offsets: list[int]) -> list[bytes]:
    ends = [*offsets[1:], len(blob)]
    return [blob[a:b] for a, b in zip(offsets, ends, strict=True)]
