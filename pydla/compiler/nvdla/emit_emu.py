"""The EMU1 task of an INT8 NVDLA Loadable: a softmax ending the network, run on the CPU by NVIDIA's
runtime emulator (its 2019 interface: 24-byte operation containers with the input and output scale
factors, INT8 buffers), after the DLA task (it waits for the DLA task's event).

Usage (by :func:`pydla.compiler.nvdla.emit.emit_loadable`)::

    tasks.append(emu_task(emitter, softmax_ops))
"""

from __future__ import annotations

import struct
from typing import Any

from pydla.compiler.nvdla.layout import cube_strides
from pydla.compiler.nvdla.plan import SoftmaxOp
from pydla.loadable.nvdla import model as M

EMU_OP = struct.Struct("<B3xffB11x")  # op_type, input and output scale factors, axis: 24 bytes
EMU_BUFFER = struct.Struct("<hIIHHHHII")  # emu_buffer_desc: index, offset, size, format, w, h, c, strides
EMU_INT8, EMU_INT8_8 = 0, 1  # INT8 in 32-byte or in 8-byte atoms
EMU_SOFTMAX = 1
DESC_SIZE = 256


def emu_task(e: Any, ops: list[SoftmaxOp]) -> M.TaskListEntry:
    """The EMU1 task running ``ops``: its address list names its network descriptor, operation list,
    buffer list, then the buffers the operations read and write."""
    atom = e.facts.atom
    fmt = EMU_INT8_8 if atom == 8 else EMU_INT8
    names: list[str] = []
    for op in ops:
        for ref in (op.src, op.dst):
            if ref.buffer not in names:
                names.append(ref.buffer)
    containers = b"".join(EMU_OP.pack(EMU_SOFTMAX, op.in_scale, op.out_scale, 1) for op in ops)
    descs = b""
    for op in ops:
        for ref in (op.src, op.dst):
            c, h, w = e.plan.shape(ref)
            line, surf, size = cube_strides(e.plan.buffers[ref.buffer].shape[0], h, w, atom)
            descs += EMU_BUFFER.pack(
                3 + names.index(ref.buffer), (ref.c0 // atom) * surf, size, fmt, w, h, c, line, surf
            ).ljust(DESC_SIZE, b"\0")
    net = struct.pack("<hhH", 1, 2, len(ops)).ljust(DESC_SIZE, b"\0")
    own = [
        e.mem.constant(name, raw, interface=M.Interface.EMU1)
        for name, raw in (("EMUNetworkDesc", net), ("EMUOpList", containers), ("EMUBufferList", descs))
    ]
    own += [e.address[name] for name in names]
    return M.TaskListEntry(1, M.Interface.EMU1, -1, tuple(own), (1,), ())
