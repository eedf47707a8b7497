"""The engine scheduler's side of the device's command processor (GLB ``cp_*``): a task whose driver
made a command buffer (:mod:`pydla.firmware.cmdbuf`, ``TaskDesc.command_buffer``) is submitted with
one doorbell write and ends with one interrupt, instead of one round trip per operation
(:mod:`pydla.firmware.engine` calls these).

Usage::

    ring(port, run, None)                # its turn came: the device runs the whole task
    if status(port) == FAILED: index = failed_op(port)   # at its interrupt
"""

from __future__ import annotations

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.firmware.cmdbuf import units
from pydla.firmware.interface import FirmwarePortability
from pydla.firmware.processors import IDLE, Processors
from pydla.firmware.task_run import TaskRun

DONE, FAILED, BAD_BUFFER = int(R.cp_status_e.DONE), int(R.cp_status_e.FAILED), int(R.cp_status_e.BAD_BUFFER)
_PRESENT = int(R.cp_status_e.PRESENT)


def present(port: FirmwarePortability, hw: Processors) -> bool:
    """Whether the device has a command processor: pydla's register map, cp_status bit 31."""
    return type(hw) is Processors and bool(port.dla_reg_read(R.GLB_CP_STATUS) & _PRESENT)


def ring(port: FirmwarePortability, run: TaskRun, written: tuple[int, int, int] | None) -> None:
    """Submit ``run``'s command buffer: its address, context and size (unless ``written``, what the
    engine wrote last, is the same: the registers keep their values), then the doorbell."""
    where = run.task.command_buffer
    assert where is not None
    if where == written:
        port.dla_reg_write(R.GLB_CP_DOORBELL, 1)
        return
    ctx, iova, size = where
    port.dla_reg_write_many(((R.GLB_CP_BASE_LO, iova & 0xFFFFFFFF), (R.GLB_CP_BASE_HI, iova >> 32),
                             (R.GLB_CP_CTX, ctx), (R.GLB_CP_SIZE, size), (R.GLB_CP_DOORBELL, 1)))


def status(port: FirmwarePortability) -> int:
    """How the job ended: cp_status's state bits (a cp_status_e)."""
    return port.dla_reg_read(R.GLB_CP_STATUS) & 0xF


def failed_op(port: FirmwarePortability) -> int:
    """The operation that failed (cp_status FAILED), or the command the buffer was refused at."""
    return port.dla_reg_read(R.GLB_CP_FAILED_OP)


def bad_buffer(port: FirmwarePortability, run: TaskRun, at: int) -> DlaError:
    """The error of a job whose command buffer the device found malformed (cp_error_field, _value)."""
    field = port.dla_reg_read(R.GLB_CP_ERROR_FIELD)
    value = port.dla_reg_read(R.GLB_CP_ERROR_VALUE)
    known = R.cp_field_e._value2member_map_.get(field)
    where = "header" if at == 0xFFFFFFFF else f"command {at}"
    return DlaError(NvError.BadValue, f"task {run.task.task_id}: the device refused its command buffer: "
                                      f"{where}: {known.name if known is not None else field} = {value}")


def progress(port: FirmwarePortability) -> int:
    """Commands of the job that runs completed (cp_progress)."""
    return port.dla_reg_read(R.GLB_CP_PROGRESS)


def mark_stuck(port: FirmwarePortability, hw: Processors, run: TaskRun) -> None:
    """Note in ``run`` the operations the command processor stopped at (the unit after the
    cp_progress commands completed), in the groups their blocks report busy, and its progress: what
    the watchdog's report of a stuck task reads (:mod:`pydla.firmware.engine_watch`)."""
    done = progress(port)
    order = [unit for unit in units(run.graph) for _ in unit]  # each command's unit
    run.completed = min(done, len(order))
    if done >= len(order):
        return
    for i in order[done]:
        block: dla_block_e = run.graph.operations[i].block
        states = hw.group_states(port, block)
        for g in (0, 1):
            if states[g] != IDLE and block in run.busy:
                run.busy[block][g] = i
