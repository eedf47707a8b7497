"""The command buffer of the device's command processor (dla_task's ``command_buffer`` module, GLB
``cp_*`` registers): a prepared job as one command, written by the driver, read by the device.

Layout: a :class:`~pydla.deviceapi.generated.dla_task.dla_cp_header_t` at offset 0, then
``num_commands`` :class:`~pydla.deviceapi.generated.dla_task.dla_cp_command_t` at ``command_offset``,
then each command's register image (``image_words`` pairs of u32: register offset in its block's
window, value) and consumer list (u32 command indices). A command is one operation; a CONV operation
and the SDP operation its result flies to are two commands, the first flagged ``FLYING_PAIR``, and
run as one. The commands are in an order the device can run them in, one after the other: every
consumer comes after its producer, and each command's ``dependency_count`` is the number of
commands listing it.

:func:`build` is the driver's side: from a validated :class:`~pydla.firmware.graph.TaskGraph`, each
operation's image exactly the register writes :func:`pydla.firmware.program.program_operation`
makes (addresses resolved through ``dla_read_dma_address``). :func:`parse` is the device's: every
offset, count, register and index checked; a malformed buffer raises :class:`CmdBufError` naming
the field (a ``cp_field_e``), its value and the command, never an IndexError.

Usage::

    data = build(port, task, graph)            # bytes, written once into the driver's memory
    job = parse(data, {int(b) for b in blocks})  # on the device, at the doorbell
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware.graph import TaskGraph
from pydla.firmware.interface import FirmwarePortability, TaskDesc
from pydla.firmware.program import Program, register_writes

MAGIC = 0x50434C44  # 'DLCP'
VERSION = 1
MAX_COMMANDS = 65535
MAX_IMAGE_WORDS = 1024
MAX_BYTES = 64 << 20  # a command buffer the device reads at most
HEADER_SIZE = ctypes.sizeof(T.dla_cp_header_t)
COMMAND_SIZE = ctypes.sizeof(T.dla_cp_command_t)
FLYING_PAIR = int(T.dla_cp_flag_e.FLYING_PAIR)
WINDOW = R.CONV_S_STATUS - R.BDMA_S_STATUS  # a block's register window
D_START = R.BDMA_D_OP_ENABLE - R.BDMA_S_STATUS  # the D registers start with op_enable
F = R.cp_field_e
_CONV, _SDP = int(dla_block_e.CONV), int(dla_block_e.SDP)
_COMMAND = struct.Struct("<HBBIIHHI12x")
assert _COMMAND.size == COMMAND_SIZE


class CmdBufError(Exception):
    """A malformed command buffer: ``field`` (a cp_field_e), its ``value``, the ``command`` it was
    found at (-1: the header)."""

    def __init__(self, field: R.cp_field_e, value: int, command: int, detail: str) -> None:
        super().__init__(f"{'header' if command < 0 else f'command {command}'}: {field.name} = {value}: "
                         f"{detail}")
        self.field = field
        self.value = value
        self.command = command


@dataclass(frozen=True)
class Command:
    """One parsed command: the operation, its block, its image as word indices in the block's
    window and values, the commands it signals, and whether the next command is its flying SDP."""

    op_index: int
    block: int
    pair: bool
    words: npt.NDArray[np.intp]
    values: npt.NDArray[np.uint32]
    consumers: tuple[int, ...]
    dependency_count: int


def units(graph: TaskGraph) -> list[tuple[int, ...]]:
    """The operations in an order they can run in, one after the other: a CONV operation and its
    flying SDP as one unit (CONV first), each block's operations in chain order, every consumer
    after its producer. Ties go to the lowest operation index (the order is reproducible)."""
    ops = graph.operations
    node = list(range(len(ops)))  # a CONV operation joins its SDP's node
    for op in ops:
        if op.fused_parent != -1:
            node[op.fused_parent] = op.index
    members: dict[int, list[int]] = {}
    for i in range(len(ops)):
        members.setdefault(node[i], []).append(i)
    edges: dict[int, set[int]] = {n: set() for n in members}
    for op in ops:
        for c in op.consumers:
            if node[op.index] != node[c.index]:
                edges[node[op.index]].add(node[c.index])
    for chain in graph.chains.values():
        for a, b in itertools.pairwise(chain):
            if node[a] != node[b]:
                edges[node[a]].add(node[b])
    indegree = dict.fromkeys(members, 0)
    for targets in edges.values():
        for t in targets:
            indegree[t] += 1
    ready = [(min(members[n]), n) for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order: list[tuple[int, ...]] = []
    while ready:
        _, n = heapq.heappop(ready)
        # CONV first: its SDP member is the node itself
        order.append(tuple(sorted(members[n], key=lambda i: ops[i].block != dla_block_e.CONV)))
        for t in sorted(edges[n]):
            indegree[t] -= 1
            if indegree[t] == 0:
                heapq.heappush(ready, (min(members[t]), t))
    if len(order) != len(members):  # load_task refused a cycle: this would be a bug
        raise ValueError("the task's dependency graph has a cycle")
    return order


def build(port: FirmwarePortability, task: TaskDesc, graph: TaskGraph) -> bytes:
    """The command buffer of ``task`` (validated as ``graph``). Raises DlaError as programming the
    operations would (an address that does not resolve)."""
    ops = graph.operations
    order = [i for unit in units(graph) for i in unit]
    position = {op_index: k for k, op_index in enumerate(order)}
    pair_of = {op.fused_parent: op.index for op in ops if op.fused_parent != -1}
    consumers: list[list[int]] = [[] for _ in order]
    deps = [0] * len(order)
    for k, i in enumerate(order):
        for c in ops[i].consumers:
            if pair_of.get(i) == c.index or pair_of.get(c.index) == i:
                continue  # inside a flying pair: they run as one
            consumers[k].append(position[c.index])
            deps[position[c.index]] += 1
    images = []
    for i in order:
        program = graph.programs.get(i)
        if program is None:  # the same writes, and cached the same way, as program_operation's
            program = graph.programs[i] = Program.of(register_writes(port, task, ops[i]))
        base = R.BDMA_S_STATUS + WINDOW * int(ops[i].block)
        pairs = np.empty((len(program.addresses), 2), dtype="<u4")
        pairs[:, 0] = program.addresses - np.uint32(base)
        pairs[:, 1] = program.values
        images.append(pairs.tobytes())
    at = HEADER_SIZE + COMMAND_SIZE * len(order)
    commands, tail = [], []
    for k, i in enumerate(order):
        image_at = at
        at += len(images[k])
        consumer_at = at
        at += 4 * len(consumers[k])
        flags = FLYING_PAIR if ops[i].block == dla_block_e.CONV else 0
        commands.append(_COMMAND.pack(i, int(ops[i].block), flags, image_at, len(images[k]) // 8, deps[k],
                                      len(consumers[k]), consumer_at))
        tail.append(images[k] + struct.pack(f"<{len(consumers[k])}I", *consumers[k]))
    header = T.dla_cp_header_t(magic=MAGIC, version=VERSION, num_commands=len(order),
                               command_offset=HEADER_SIZE, task_ops=len(ops))
    return bytes(header) + b"".join(commands) + b"".join(tail)


def parse(data: bytes, blocks: set[int]) -> tuple[Command, ...]:
    """The commands of the command buffer ``data`` for a device with ``blocks`` (dla_block_e values),
    every field checked (see the module docstring); CmdBufError names the first malformed one."""
    size = len(data)
    if not HEADER_SIZE <= size <= MAX_BYTES:
        raise CmdBufError(F.SIZE, size, -1, f"a command buffer holds {HEADER_SIZE}..{MAX_BYTES} bytes")
    header = T.dla_cp_header_t.from_buffer_copy(data, 0)
    if header.magic != MAGIC:
        raise CmdBufError(F.MAGIC, header.magic, -1, f"must be {MAGIC:#x}")
    if header.version != VERSION:
        raise CmdBufError(F.VERSION, header.version, -1, f"this device reads version {VERSION}")
    n, at = header.num_commands, header.command_offset
    if not 1 <= n <= MAX_COMMANDS:
        raise CmdBufError(F.NUM_COMMANDS, n, -1, f"must be 1..{MAX_COMMANDS}")
    if at % 4 or at < HEADER_SIZE or at + n * COMMAND_SIZE > size:
        raise CmdBufError(F.COMMAND_OFFSET, at, -1,
                          f"{n} commands of {COMMAND_SIZE} bytes from there do not fit in {size} bytes")
    raw = [_COMMAND.unpack_from(data, at + k * COMMAND_SIZE) for k in range(n)]
    incoming = [0] * n
    commands = []
    for k, (op_index, block, flags, image_at, words, deps, num_consumers, consumer_at) in enumerate(raw):
        if block not in blocks:
            raise CmdBufError(F.BLOCK, block, k, "not a block of this device")
        if not 1 <= words <= MAX_IMAGE_WORDS or image_at % 4 or image_at + 8 * words > size:
            raise CmdBufError(F.IMAGE, image_at, k, f"{words} register writes (1..{MAX_IMAGE_WORDS}) from "
                                                    f"there do not fit in {size} bytes")
        pairs = np.frombuffer(data, dtype="<u4", count=2 * words, offset=image_at).reshape(words, 2)
        offsets = pairs[:, 0]
        bad = (offsets % 4 != 0) | (offsets <= D_START) | (offsets >= WINDOW)
        if bad.any():
            value = int(offsets[int(np.argmax(bad))])
            raise CmdBufError(F.REGISTER, value, k, f"not a D register of the block (above op_enable, "
                                                    f"below {WINDOW:#x}, 4-byte aligned)")
        if consumer_at % 4 or consumer_at + 4 * num_consumers > size:
            raise CmdBufError(F.CONSUMERS, consumer_at, k, f"{num_consumers} consumers from there do not "
                                                           f"fit in {size} bytes")
        targets = struct.unpack_from(f"<{num_consumers}I", data, consumer_at)
        for t in targets:
            if not k < t < n:
                raise CmdBufError(F.CONSUMER, t, k, f"a consumer must be a later command (below {n})")
            incoming[t] += 1
        pair = bool(flags & FLYING_PAIR)
        if pair != (block == _CONV) or (pair and (k + 1 >= n or raw[k + 1][1] != _SDP)):
            raise CmdBufError(F.PAIR, flags, k, "a CONV command, and only one, is FLYING_PAIR, followed by "
                                                "the SDP command its result flies to")
        commands.append(Command(op_index, block, pair, (offsets >> 2).astype(np.intp),
                                pairs[:, 1].copy(), targets, deps))
    for k, c in enumerate(commands):
        if c.dependency_count != incoming[k]:
            raise CmdBufError(F.DEPENDENCY, c.dependency_count, k,
                              f"{incoming[k]} earlier commands list it as a consumer")
    return tuple(commands)
