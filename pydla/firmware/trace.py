"""Tasks in the device's trace ring, as the engine schedulers record them.

The device writes a ``task_start`` and a ``task_end`` entry into its trace ring (see
:mod:`pydla.hw.trace_out`) when told to through the GLB ``trace_task_*`` registers: the task's id
and context, and the number of operations (start) or the task's ``dla_status_e`` (end). The engine
scheduler (:class:`pydla.firmware.engine.Engine`, on the host or the microcontroller) and the host's
SHAVE engine (:class:`pydla.kmd.shave_run.ShaveEngine`) do so only while their ``trace_tasks`` flag
is set: the driver's trace with the TASK class sets it on the host's engines
(:class:`pydla.kmd.trace.KmdTrace`), and the firmware sets its own from the device's mask at each
submit. Untraced, a task costs no register access more.

Usage::

    trace_task(port, task, TASK_START, len(graph.operations))
    trace_task(port, task, TASK_END, end_status(run.error, aborted=False))
"""

from __future__ import annotations

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_status_e
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import FirmwarePortability, TaskDesc

TASK_START, TASK_END = 1, 2  # GLB trace_task_cmd bits 3:0 (dla_regs.yaml)
_U32 = 0xFFFFFFFF
_STATUS_OF_CODE = {NvError.Timeout: int(dla_status_e.TIMEOUT),
                   NvError.InvalidAddress: int(dla_status_e.MMU_FAULT)}


def trace_task(port: FirmwarePortability, task: TaskDesc, cmd: int, info: int) -> None:
    """Have the device write task_start (``cmd`` TASK_START, ``info`` the number of operations) or
    task_end (TASK_END, ``info`` the dla_status_e) of ``task`` into its trace ring: three register
    writes in one call (four for a task id past 32 bits: trace_task_hi reads 0 after each command)."""
    task_id = task.task_id
    command = (R.GLB_TRACE_TASK_INFO, info & _U32), (R.GLB_TRACE_TASK_CMD, cmd | (task.ctx & 0xFFFF) << 16)
    if task_id <= _U32:
        port.dla_reg_write_many(((R.GLB_TRACE_TASK_LO, task_id), *command))
    else:
        port.dla_reg_write_many(((R.GLB_TRACE_TASK_LO, task_id & _U32),
                                 (R.GLB_TRACE_TASK_HI, task_id >> 32 & _U32), *command))


def end_status(error: DlaError | None, aborted: bool) -> int:
    """The dla_status_e of a task that ended with ``error`` (``aborted``: by the driver)."""
    if error is None:
        return int(dla_status_e.OK)
    status = _STATUS_OF_CODE.get(error.code)
    if status is not None:
        return status
    return int(dla_status_e.ABORTED if aborted else dla_status_e.ERROR)
