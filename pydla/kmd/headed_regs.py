"""Headed mode: where the host finds the microcontroller's registers on its device.

pydla's own devices have them in GLB (``mcu_*`` of dla_regs, the mailbox interrupt in intr_status
bit 28, the device reset in GLB reset); an NVDLA device in the nvdla_mcu window past NVDLA's register
space (``PYDLA_MCU_*``, the mailbox interrupt in its own INTR_STATUS, the device reset the platform's
register of :class:`~pydla.firmware.interface.NvdlaFacts`). The driver picks by what its device
information says (an ``nvdla`` section or not).

Usage::

    regs = mcu_registers(info)
    port.dla_reg_write(regs.doorbell, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import nvdla_mcu as M
from pydla.errors import DlaError, NvError
from pydla.firmware.engine import DEVICE_RESET_BIT
from pydla.firmware.interface import KmdDeviceInfo


@dataclass(frozen=True)
class McuRegisters:
    """The microcontroller's registers (byte addresses) and the bits the host uses."""

    mbox_base_lo: int
    mbox_base_hi: int
    mbox_ctx: int
    mbox_size: int
    doorbell: int
    status: int
    reset: int
    intr_status: int  # write 1 to clear
    mailbox_bit: int  # the firmware posted, in intr_status
    device_reset: int  # the register that resets the whole device, and the value that does
    device_reset_value: int


DLA_MCU = McuRegisters(R.GLB_MCU_MBOX_BASE_LO, R.GLB_MCU_MBOX_BASE_HI, R.GLB_MCU_MBOX_CTX,
                       R.GLB_MCU_MBOX_SIZE, R.GLB_MCU_DOORBELL, R.GLB_MCU_STATUS, R.GLB_MCU_RESET,
                       R.GLB_INTR_STATUS, 1 << 28, R.GLB_RESET, 1 << DEVICE_RESET_BIT)


def mcu_registers(info: KmdDeviceInfo) -> McuRegisters:
    """The registers of ``info``'s device: GLB's, or an NVDLA device's nvdla_mcu window."""
    if info.nvdla is None:
        return DLA_MCU
    if info.nvdla.reset_register is None:
        raise DlaError(NvError.NotSupported, f"device '{info.name}': a headed NVDLA device needs the "
                                             "platform's reset register (NvdlaFacts.reset_register)")
    return McuRegisters(M.PYDLA_MCU_MBOX_BASE_LO, M.PYDLA_MCU_MBOX_BASE_HI, M.PYDLA_MCU_MBOX_CTX,
                        M.PYDLA_MCU_MBOX_SIZE, M.PYDLA_MCU_DOORBELL, M.PYDLA_MCU_STATUS, M.PYDLA_MCU_RESET,
                        M.PYDLA_MCU_INTR_STATUS, 1, info.nvdla.reset_register, 1)
