"""NVDLA's register side of the engine scheduler: what NVIDIA's firmware writes and reads around an
operation (``scheduler.c`` dla_program_operation / dla_enable_operation, each processor's
``set_producer``, ``enable``, ``is_ready``, ``engine_isr.c``), for the map of the configuration.

- Group selection: a processor takes first the group its CONSUMER pointer names (BDMA: group 1 if
  group 0 is busy); its RDMA (SDP, PDP) likewise from the RDMA's own pointer, CDP's RDMA the CDP's.
- Program: the done interrupts unmasked, ``S_POINTER.PRODUCER`` = the group in every sub-block (CONV:
  CACC, CMAC_A, CMAC_B, CSC, CDMA), then the block's registers, in one ``dla_reg_write_words`` (the
  register image is made once per operation and group: it depends only on the descriptors, the task's
  addresses and the groups); BDMA queues each transfer once a slot is free.
- Enable: the producer pointers again, then ``D_OP_ENABLE`` (CONV: after CBUF's flush, CACC, CMAC_A,
  CMAC_B, CSC, CDMA in that order; SDP/PDP/CDP: the RDMA first when it takes part); BDMA:
  ``CFG_LAUNCH0/1``. An SDP fed by a CONV is enabled before it by the graph's events (OP_PROGRAMMED /
  OP_ENABLED), not here.
- ISR: ``GLB.S_INTR_STATUS`` read and written back (write 1 to clear); CACC done completes a CONV,
  CDMA's data and weight done are the events CDMA_DT_DONE and CDMA_WT_DONE.
- Ready: an SDP or CDP operation with a LUT waits while the block's other group holds an operation
  with another LUT (the LUT RAM is not double-buffered); a BDMA operation waits for the other group
  (its transfers share one queue).
NVDLA reports no operation failure and has no block reset: a hung operation is the watchdog's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_interface as I
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.firmware.graph import Operation
from pydla.firmware.interface import FirmwarePortability, NvdlaFacts, TaskDesc
from pydla.firmware.nvdla.program_blocks import (
    bdma_transfers,
    program_cdp,
    program_pdp,
    program_rubik,
    program_sdp,
    sdp_needs_rdma,
)
from pydla.firmware.nvdla.program_conv import program_conv
from pydla.firmware.nvdla.regs import Writes, address, pack, register_map
from pydla.firmware.processors import IDLE, RUNNING, WAITING, HwEvent, Processors

BLOCKS: dict[dla_block_e, tuple[str, ...]] = {  # the sub-blocks whose groups an operation takes
    dla_block_e.BDMA: (), dla_block_e.CONV: ("CACC", "CMAC_A", "CMAC_B", "CSC", "CDMA"),
    dla_block_e.SDP: ("SDP",), dla_block_e.PDP: ("PDP",), dla_block_e.CDP: ("CDP",),
    dla_block_e.RUBIK: ("RBK",)}
RDMA = {dla_block_e.SDP: "SDP_RDMA", dla_block_e.PDP: "PDP_RDMA", dla_block_e.CDP: "CDP_RDMA"}
DONE_BIT = {dla_block_e.SDP: 0, dla_block_e.CDP: 2, dla_block_e.PDP: 4, dla_block_e.BDMA: 6,
            dla_block_e.RUBIK: 8, dla_block_e.CONV: 20}  # GLB interrupt bit of group 0 (CONV: CACC)
CDMA_DAT_BIT, CDMA_WT_BIT = 16, 18
MASK_NAME = {dla_block_e.SDP: "SDP", dla_block_e.CDP: "CDP", dla_block_e.PDP: "PDP",
             dla_block_e.BDMA: "BDMA", dla_block_e.RUBIK: "RUBIK"}
MAX_POLLS = 10_000  # reads of a status register before the wait is given up (every wait is bounded)
HW = int(I.dla_mem_e.HW)
Words = tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]  # addresses, values


def words(writes: Sequence[tuple[int, int]]) -> Words:
    """``(address, value)`` writes as the two arrays ``dla_reg_write_words`` takes."""
    return (np.array([a for a, _ in writes], np.uint32), np.array([v for _, v in writes], np.uint32))


def _needs_rdma(op: Operation) -> bool:
    if op.block == dla_block_e.SDP:
        return sdp_needs_rdma(op.op, op.surface)
    if op.block == dla_block_e.PDP:
        return bool(op.surface.src_data.type != HW)
    return op.block == dla_block_e.CDP


class NvdlaProcessors(Processors):
    """NVDLA's register map (``facts.register_map``), programmed as NVIDIA's firmware does."""

    has_trace = False
    max_depth = 1  # as NVIDIA's KMD: one task at a time (the RDMA groups and the context are per task)

    def __init__(self, facts: NvdlaFacts, config: object) -> None:
        self.facts = facts
        self.regs = register_map(facts.register_map)
        self.intr_status = address(self.regs, "GLB", "S_INTR_STATUS")
        self.intr_mask = address(self.regs, "GLB", "S_INTR_MASK")
        self._rdma_next: dict[dla_block_e, int] = {}
        self._rdma_group: dict[int, int] = {}  # operation index -> its RDMA's group (this task)
        # the enable writes by (block, group, RDMA group or None): the pointers, then D_OP_ENABLE
        self._enables: dict[tuple[dla_block_e, int, int | None], Words] = {}

    # -- helpers ------------------------------------------------------------------------------------

    def _pointer(self, block: str, group: int) -> tuple[int, int]:
        return address(self.regs, block, "S_POINTER"), pack(self.regs, block, "S_POINTER",
                                                            {"PRODUCER": group}, block)

    def _poll(self, port: FirmwarePortability, block: str, reg: str, field: str, what: str) -> int:
        info = self.regs.REGISTER_INFO[f"NVDLA_{block}_{reg}_0"].field(field)
        addr = address(self.regs, block, reg)
        for _ in range(MAX_POLLS):
            value = info.get(port.dla_reg_read(addr))
            if value:
                return int(value)
        raise DlaError(NvError.Timeout, f"{what}: {block}.{reg}.{field} stayed 0 for {MAX_POLLS} reads")

    def _producers(self, op: Operation, group: int) -> list[tuple[int, int]]:
        writes = [self._pointer(b, group) for b in BLOCKS[op.block]]
        rdma = RDMA.get(op.block)
        if rdma is not None and op.index in self._rdma_group:
            writes.append(self._pointer(rdma, self._rdma_group[op.index]))
        return writes

    # -- Processors -------------------------------------------------------------------------------

    def init(self, port: FirmwarePortability) -> None:
        port.dla_reg_write(self.intr_status, 0xFFFFFFFF)  # write 1 to clear: nothing pending

    def consumer_group(self, port: FirmwarePortability, block: dla_block_e) -> int:
        if block == dla_block_e.BDMA:
            status = port.dla_reg_read(address(self.regs, "BDMA", "STATUS"))
            return 1 if self.regs.REGISTER_INFO["NVDLA_BDMA_STATUS_0"].field("GRP0_BUSY").get(status) else 0
        return port.dla_reg_read(address(self.regs, BLOCKS[block][0], "S_POINTER")) >> 16 & 1

    def start_task(self, port: FirmwarePortability, blocks: Sequence[dla_block_e], ctx: int) -> None:
        if self.facts.context_register is not None:  # the platform's SMMU: this task's address space
            port.dla_reg_write(self.facts.context_register, ctx)
        self._rdma_group = {}
        self._rdma_next = {b: port.dla_reg_read(address(self.regs, RDMA[b], "S_POINTER")) >> 16 & 1
                           for b in blocks if b in RDMA}

    def ready(self, op: Operation, other: Operation | None) -> bool:
        if other is None:
            return True
        if op.block == dla_block_e.BDMA:
            return False
        return op.lut is None or other.lut is None or other.lut_address == op.lut_address

    def _unmask(self, port: FirmwarePortability, block: dla_block_e) -> None:
        name = MASK_NAME.get(block)
        if name is None:
            return
        mask = port.dla_reg_read(self.intr_mask)
        port.dla_reg_write(self.intr_mask, mask & ~(3 << DONE_BIT[block]))

    def program(self, port: FirmwarePortability, task: TaskDesc, op: Operation, group: int,
                programs: dict[int, Any]) -> None:
        block = op.block
        rdma = RDMA.get(block)
        if rdma is not None and _needs_rdma(op):
            g = group if block == dla_block_e.CDP else self._rdma_next.get(block, group)
            self._rdma_group[op.index] = g
            self._rdma_next[block] = g ^ 1
        if block == dla_block_e.BDMA:
            self._program_bdma(port, task, op, programs)
            return
        if block == dla_block_e.CONV:
            for sub in BLOCKS[block]:
                status = port.dla_reg_read(address(self.regs, sub, "S_STATUS"))
                if status >> (16 * group) & 3:
                    raise DlaError(NvError.Busy, f"task {task.task_id}: {op.name}: {sub} group {group} is "
                                                 "not idle")
        self._unmask(port, block)
        images = programs.get(op.index)
        if images is None:
            images = programs[op.index] = {"writes": self._writes(port, task, op)}
        key = (group, self._rdma_group.get(op.index))
        image = images.get(key)
        if image is None:  # the pointers, then the registers: one image per group
            image = images[key] = words(self._producers(op, group) + images["writes"])
        port.dla_reg_write_words(*image)

    def _writes(self, port: FirmwarePortability, task: TaskDesc, op: Operation) -> list[tuple[int, int]]:
        w = Writes(self.regs, port, task, op)
        if op.block == dla_block_e.CONV:
            program_conv(w, op.op, op.surface, self.facts.atom)
        elif op.block == dla_block_e.SDP:
            program_sdp(w, op.op, op.surface, op.lut)
        elif op.block == dla_block_e.PDP:
            program_pdp(w, op.op, op.surface)
        elif op.block == dla_block_e.CDP:
            program_cdp(w, op.op, op.surface, op.lut)
        else:
            program_rubik(w, op.op, op.surface)
        return w.writes

    def _program_bdma(self, port: FirmwarePortability, task: TaskDesc, op: Operation,
                      programs: dict[int, Any]) -> None:
        transfers = programs.get(op.index)
        if transfers is None:
            made = bdma_transfers(Writes(self.regs, port, task, op), op.surface)
            transfers = programs[op.index] = [words(w) for w in made]
        for image in transfers:
            self._poll(port, "BDMA", "STATUS", "FREE_SLOT", f"task {task.task_id}: {op.name}")
            port.dla_reg_write_words(*image)
        self._unmask(port, dla_block_e.BDMA)

    def enable(self, port: FirmwarePortability, op: Operation, group: int) -> bool:
        block = op.block
        if block == dla_block_e.BDMA:
            if op.surface.num_transfers == 0:
                return True
            port.dla_reg_write(address(self.regs, "BDMA", f"CFG_LAUNCH{group}"),
                               pack(self.regs, "BDMA", f"CFG_LAUNCH{group}", {f"GRP{group}_LAUNCH": 1},
                                    op.name))
            return False
        if block == dla_block_e.CONV:
            self._poll(port, "CDMA", "S_CBUF_FLUSH_STATUS", "FLUSH_DONE", op.name)
        key = (block, group, self._rdma_group.get(op.index))
        image = self._enables.get(key)
        if image is None:  # depends on the block and the groups only: made once each
            writes = self._producers(op, group)
            rdma = RDMA.get(block)
            if rdma is not None and op.index in self._rdma_group:
                writes.append((address(self.regs, rdma, "D_OP_ENABLE"), 1))
            writes += [(address(self.regs, sub, "D_OP_ENABLE"), 1) for sub in BLOCKS[block]]
            image = self._enables[key] = words(writes)
        port.dla_reg_write_words(*image)
        return False

    def isr(self, port: FirmwarePortability) -> tuple[list[HwEvent], tuple[int, int, int] | None]:
        status = port.dla_reg_read(self.intr_status)
        if not status:
            return [], None
        port.dla_reg_write(self.intr_status, status)
        events = []
        conv = int(dla_block_e.CONV)
        for g in (0, 1):
            if status >> (CDMA_WT_BIT + g) & 1:
                events.append(HwEvent(conv, g, False, int(I.dla_op_event_e.CDMA_WT_DONE)))
            if status >> (CDMA_DAT_BIT + g) & 1:
                events.append(HwEvent(conv, g, False, int(I.dla_op_event_e.CDMA_DT_DONE)))
        for block, bit in DONE_BIT.items():
            for g in (0, 1):
                if status >> (bit + g) & 1:
                    events.append(HwEvent(int(block), g, False))
        return events, None

    def error_code(self, port: FirmwarePortability, block: dla_block_e) -> int:
        return 0  # NVDLA reports no failure (no failed event is ever made)

    def reset(self, port: FirmwarePortability, blocks: Sequence[dla_block_e]) -> None:
        """NVDLA has no per-block reset: the platform's reset of the whole device (one task runs at a
        time: nothing else is lost), or, without one, the groups a failed task leaves are abandoned."""
        self.reset_device(port)

    def reset_device(self, port: FirmwarePortability) -> None:
        if self.facts.reset_register is not None:
            port.dla_reg_write(self.facts.reset_register, 1)

    def group_states(self, port: FirmwarePortability, block: dla_block_e) -> tuple[int, int]:
        if block == dla_block_e.BDMA:
            info = self.regs.REGISTER_INFO["NVDLA_BDMA_STATUS_0"]
            status = port.dla_reg_read(address(self.regs, "BDMA", "STATUS"))
            return (RUNNING if info.field("GRP0_BUSY").get(status) else IDLE,
                    RUNNING if info.field("GRP1_BUSY").get(status) else IDLE)
        status = port.dla_reg_read(address(self.regs, BLOCKS[block][0], "S_STATUS"))
        states = []
        for g in (0, 1):
            state = status >> (16 * g) & 3
            states.append(RUNNING if state == 1 else WAITING if state == 2 else IDLE)
        return states[0], states[1]
