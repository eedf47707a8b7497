"""Control-code ELF: one NPU task's descriptors, and where they are patched when buffers are bound.

Sections ``.dla.network``, ``.dla.graph``, ``.dla.ops``, ``.dla.surfaces`` and ``.dla.luts`` hold
the task descriptors (``specs/dla_task.yaml``) exactly as the KMD reads them. A SHAVE task list
(the VPUX software layers' ActKernelRuntime, ActKernelTask and DMA lists) has ``.dla.network``
then ``.shave.list``, ``.shave.act``, ``.shave.dma`` and ``.shave.args`` (the invocations' argument
buffers) in the same five address-list entries (:data:`SHAVE_SECTIONS`). Every descriptor
field that names a buffer holds an address-list index; the UMD's address list for a submit puts
the task's own descriptor sections first (entries 0..4) and the run's arguments after them, in an
order it chooses. So each such field is a relocation in ``.rela.dla.<section>``: type
``R_DLA_ARG_INDEX16`` at the field's offset, against the symbol of the argument it names (symbol
value = the argument's argidx), to be replaced by that argument's index in the address list, as XRT
patches control code by argument name.

Patching works on a per-run copy of the pristine sections (so re-binding never sees an earlier
patch) and bounds-checks every location.

Usage::

    elf = built.control_code({"x": 0, "w": 1, "y": 2})        # a TaskBuilder task; name -> argidx
    code = ControlCode(elf)
    parts = code.patch({0: 5, 1: 6, 2: 7})                    # argidx -> address-list index
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any

from pydla.elf.reader import ElfReader
from pydla.errors import DlaError, NvError

SECTIONS = (".dla.network", ".dla.graph", ".dla.ops", ".dla.surfaces", ".dla.luts")
SHAVE_SECTIONS = (".dla.network", ".shave.list", ".shave.act", ".shave.dma", ".shave.args")
# DLA operations beside a SHAVE list (pydla.loadable.mixed_task): both, then the operations' barriers.
MIXED_SECTIONS = (*SECTIONS, *SHAVE_SECTIONS[1:], ".dla.barriers")
R_DLA_ARG_INDEX16 = 1
FIXED_ENTRIES = len(SECTIONS)
_I16 = struct.Struct("<h")


@dataclass(frozen=True)
class Patch:
    section: str
    offset: int
    argidx: int
    name: str


class ControlCode:
    """A checked control-code ELF; :meth:`patch` gives the descriptor sections for an address list.
    ``layout`` names its five descriptor sections in address-list order (:data:`SECTIONS`, or
    :data:`SHAVE_SECTIONS` for a SHAVE task list: ``is_shave``)."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str = "control code") -> None:
        self.what = what
        self.elf = ElfReader(data, what=what)
        self.is_shave = self.elf.has_section(SHAVE_SECTIONS[1])
        self.is_mixed = self.is_shave and self.elf.has_section(SECTIONS[1])  # DLA operations too
        self.layout = MIXED_SECTIONS if self.is_mixed else SHAVE_SECTIONS if self.is_shave else SECTIONS
        self.fixed_entries = len(self.layout)  # the address list's entries before the arguments
        for name in self.layout:
            if not self.elf.has_section(name):
                raise DlaError(NvError.BadValue, f"{what}: section '{name}' is missing")
        self.sections = {name: self.elf.section(name) for name in self.layout}
        self.arguments: dict[str, int] = {}
        for sym in self.elf.symbols():
            if sym.name:
                self.arguments[sym.name] = sym.value
        self.patches: list[Patch] = []
        for name in self.layout:
            size = len(self.sections[name])
            for rel in self.elf.relocations(name):
                if rel.rel_type != R_DLA_ARG_INDEX16:
                    raise DlaError(NvError.BadValue, f"{what}: relocation type {rel.rel_type} at "
                                                     f"{name}+{rel.offset} is unknown")
                if rel.symbol is None or not rel.symbol.name:
                    raise DlaError(NvError.BadValue, f"{what}: relocation at {name}+{rel.offset} names "
                                                     "no argument")
                if rel.offset + 2 > size:
                    raise DlaError(NvError.BadValue, f"{what}: relocation at {name}+{rel.offset} is "
                                                     f"outside the section ({size} bytes)")
                self.patches.append(Patch(name, rel.offset, rel.symbol.value, rel.symbol.name))

    def op_types(self) -> list[int]:
        """The op_type of each operation (dla_block_e values), as the network descriptor counts them
        (none for a SHAVE task list)."""
        from pydla.deviceapi.generated import dla_task

        if self.is_shave and not self.is_mixed:
            return []
        net_size = ctypes.sizeof(dla_task.dla_network_desc_t)
        common = ctypes.sizeof(dla_task.dla_common_op_desc_t)
        network, graph = self.sections[".dla.network"], self.sections[".dla.graph"]
        if len(network) < net_size:
            raise DlaError(NvError.BadValue, f"{self.what}: '.dla.network' holds {len(network)} bytes, "
                                             f"the network descriptor needs {net_size}")
        n = dla_task.dla_network_desc_t.from_buffer_copy(network[:net_size]).num_operations
        if n * common > len(graph):
            raise DlaError(NvError.BadValue, f"{self.what}: {n} operations do not fit '.dla.graph' "
                                             f"({len(graph)} bytes)")
        return [dla_task.dla_common_op_desc_t.from_buffer_copy(graph[i * common:(i + 1) * common]).op_type
                for i in range(n)]

    def shapes(self) -> list[str]:
        """Per operation, what its surface descriptor says it reads and writes, as ``CxHxW`` cubes
        ("src 8x4x4 -> dst 8x2x2"; "" where the descriptor holds no cube): for profiles and logs."""
        from pydla.deviceapi.generated import dla_task
        from pydla.deviceapi.generated.device_api import dla_block_e

        if self.is_shave and not self.is_mixed:
            return []
        network = dla_task.dla_network_desc_t.from_buffer_copy(
            self.sections[".dla.network"][:ctypes.sizeof(dla_task.dla_network_desc_t)])
        surfaces, size = self.sections[".dla.surfaces"], network.surface_desc_size
        out = []
        for i, op_type in enumerate(self.op_types()):
            name = dla_block_e(op_type).name.lower() if op_type in dla_block_e._value2member_map_ else ""
            cls = getattr(dla_task, f"dla_{name}_surface_desc_t", None)
            if cls is None or size < ctypes.sizeof(cls) or (i + 1) * size > len(surfaces):
                out.append("")
                continue
            desc = cls.from_buffer_copy(surfaces[i * size:i * size + ctypes.sizeof(cls)])
            cubes = []
            for field in ("src", "dst"):  # a data cube (CONV's weights are a memory reference)
                cube: Any = getattr(desc, field, None)
                if hasattr(cube, "channels"):
                    cubes.append(f"{field} {cube.channels}x{cube.height}x{cube.width}")
            out.append(" -> ".join(cubes))
        return out

    @property
    def argidxs(self) -> list[int]:
        return sorted(set(self.arguments.values()))

    def patch(self, index_of: dict[int, int]) -> dict[str, bytes]:
        """Copies of the descriptor sections with every argument reference replaced by
        ``index_of[argidx]`` (an address-list index >= :attr:`fixed_entries`, < 32768)."""
        out = {name: bytearray(data) for name, data in self.sections.items()}
        for p in self.patches:
            if p.argidx not in index_of:
                raise DlaError(NvError.BadParameter,
                               f"{self.what}: argument '{p.name}' (argidx {p.argidx}) is not bound")
            index = index_of[p.argidx]
            if not self.fixed_entries <= index < 1 << 15:
                raise DlaError(NvError.BadParameter,
                               f"{self.what}: address-list index {index} for argument '{p.name}' must "
                               f"be {self.fixed_entries}..32767")
            _I16.pack_into(out[p.section], p.offset, index)
        return {name: bytes(data) for name, data in out.items()}
