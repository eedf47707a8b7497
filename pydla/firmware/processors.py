"""What the engine scheduler does to the hardware, apart from scheduling: one implementation per
register map.

The scheduler (:mod:`pydla.firmware.engine`) decides *when* an operation is programmed into a group,
enabled and completed, from the dependency graph; a :class:`Processors` says *how*: which group a
block takes first (its consumer pointer), the register writes that program and enable an operation,
what the interrupt status means, how blocks are reset and what their status registers say. pydla's
own register map is :class:`PydlaProcessors`; NVDLA's (``nvdla_v1_regs``/``nvdla_v2_regs``, as
NVIDIA's firmware programs it) is :class:`pydla.firmware.nvdla.processors.NvdlaProcessors`.
:func:`processors_for` picks the one of a device.

Usage::

    hw = processors_for(config)          # from the device's description (KmdDeviceInfo.nvdla)
    hw.init(port)                        # dla_engine_init's part
    hw.program(port, task, op, group, graph.programs)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware.graph import Operation
from pydla.firmware.interface import FirmwarePortability, TaskDesc
from pydla.firmware.program import ERROR, POINTER, STATUS, enable_operation, program_operation

MMU_FAULT_BIT = 31
CP_INTR_BIT = 12  # GLB intr_status: the command processor's job ended (cp_status)
CP_EVENT = 0xFF  # HwEvent.block of that event: not a block's
DEVICE_RESET_BIT = 31  # of GLB_RESET, as the register map (dla_regs.yaml) declares
SHAVE_INTR_MASK = 1 << 29  # GLB intr_status: the SHAVE tiles interrupt, not the engine's
OP_COMPLETED = int(T.dla_event_e.OP_COMPLETED)
IDLE, WAITING, RUNNING = range(3)  # what group_states reports of a register group


@dataclass(slots=True)
class HwEvent:
    """What the ISR found: an operation of ``block`` in ``group`` completed (``event``
    OP_COMPLETED), failed, or signalled another event (NVDLA's CDMA_WT_DONE, CDMA_DT_DONE)."""

    block: int
    group: int
    failed: bool
    event: int = OP_COMPLETED


def block_mask(blocks: Sequence[dla_block_e]) -> int:
    """The GLB reset register's bits for ``blocks`` (bit b resets block b)."""
    mask = 0
    for b in blocks:
        mask |= 1 << int(b)
    return mask


class Processors:
    """pydla's own register map (dla_regs): what :class:`~pydla.firmware.engine.Engine` writes and reads.
    Subclasses override every method for another map."""

    # Whether the device's trace ring (pydla's GLB trace registers) exists.
    has_trace = True
    # How many tasks may be in flight at once (the engine's pipeline depth is at most this).
    max_depth = 1 << 16

    def init(self, port: FirmwarePortability) -> None:
        """Mask nothing, clear every pending interrupt."""
        port.dla_reg_write(R.GLB_INTR_MASK, 0)
        port.dla_reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)

    def consumer_group(self, port: FirmwarePortability, block: dla_block_e) -> int:
        """The group ``block`` runs next (its S_POINTER consumer bit)."""
        return port.dla_reg_read(POINTER[block]) >> 16 & 1

    def start_task(self, port: FirmwarePortability, blocks: Sequence[dla_block_e], ctx: int) -> None:
        """The task of context ``ctx`` is about to program ``blocks`` (nothing to do on pydla's map:
        each operation carries its context, D_CTX_ID)."""

    def ready(self, op: Operation, other: Operation | None) -> bool:
        """Whether ``op`` may be programmed while ``other`` holds the block's other group."""
        return True

    def program(self, port: FirmwarePortability, task: TaskDesc, op: Operation, group: int,
                programs: dict[int, object]) -> None:
        program_operation(port, task, op, group, programs)  # type: ignore[arg-type]

    def enable(self, port: FirmwarePortability, op: Operation, group: int) -> bool:
        """Enable ``op`` in ``group``; True when it completed at once (no interrupt will say so)."""
        enable_operation(port, op, group)
        return False

    def isr(self, port: FirmwarePortability) -> tuple[list[HwEvent], tuple[int, int, int] | None]:
        """Read and clear the interrupt status: the events, and an MMU fault (address, context, block)."""
        # Bit 29 is the SHAVE tiles' (pydla.kmd.shave_run clears it after SHAVE_INTR_STATUS): left set.
        status = port.dla_reg_read(R.GLB_INTR_STATUS) & ~SHAVE_INTR_MASK
        if not status:
            return [], None
        port.dla_reg_write(R.GLB_INTR_STATUS, status)
        fault = None
        if status >> MMU_FAULT_BIT & 1:
            lo = port.dla_reg_read(R.GLB_MMU_FAULT_ADDR_LO)
            hi = port.dla_reg_read(R.GLB_MMU_FAULT_ADDR_HI)
            ctx = port.dla_reg_read(R.GLB_MMU_FAULT_CTX)
            blk = port.dla_reg_read(R.GLB_MMU_FAULT_BLOCK)
            fault = ((hi << 32) | lo, ctx, blk)
        events = []
        if status >> CP_INTR_BIT & 1:
            events.append(HwEvent(CP_EVENT, 0, False))
        for b in range(len(dla_block_e)):
            if not status >> (2 * b) & 0x30003:
                continue  # no done or error bit of this block: the common case, checked once
            for g in (0, 1):
                if status >> (2 * b + g) & 1:
                    events.append(HwEvent(b, g, False))
                if status >> (16 + 2 * b + g) & 1:
                    events.append(HwEvent(b, g, True))
        return events, fault

    def error_code(self, port: FirmwarePortability, block: dla_block_e) -> int:
        """The block's S_ERROR (a dla_hw_error_e) after a failure event."""
        return port.dla_reg_read(ERROR[block])

    def reset(self, port: FirmwarePortability, blocks: Sequence[dla_block_e]) -> None:
        port.dla_reg_write(R.GLB_RESET, block_mask(blocks))

    def reset_device(self, port: FirmwarePortability) -> None:
        port.dla_reg_write(R.GLB_RESET, 1 << DEVICE_RESET_BIT)

    def group_states(self, port: FirmwarePortability, block: dla_block_e) -> tuple[int, int]:
        """Each group's state: IDLE, WAITING (enabled, not started) or RUNNING."""
        status = port.dla_reg_read(STATUS[block])
        out = []
        for g in (0, 1):
            state = status >> (16 * g) & 3
            out.append(RUNNING if state == R.group_state_e.RUNNING else
                       WAITING if state == R.group_state_e.ENABLED else IDLE)
        return out[0], out[1]


PYDLA = Processors()


def processors_for(config: object) -> Processors:
    """The register programming of the device ``config`` describes: NVDLA's when it has NVDLA facts
    (:class:`pydla.firmware.interface.NvdlaFacts`), else pydla's own."""
    facts = getattr(config, "nvdla", None)
    if facts is None:
        return PYDLA
    from pydla.firmware.nvdla.processors import NvdlaProcessors
    return NvdlaProcessors(facts, config)
