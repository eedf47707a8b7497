"""What the virtual device says of itself to the software that probes it.

A driver learns its device once, at probe time (:class:`pydla.firmware.interface.KmdDeviceInfo`):
its instance, how it runs, its configuration's name, hardware version, blocks, precisions, memory,
contexts and limits, its IP_LAYOUT as compute-unit entries, and whether a microcontroller runs the
engine scheduler (GLB mcu_status). The host's port over the device
(:class:`pydla.composition.virtual_port.VirtualDevicePort`) answers ``dla_get_device_info`` with it,
and the microcontroller's firmware (:mod:`pydla.hw.mcu.firmware`) reads the same.

Usage::

    info = device_info(VirtualDevice("full"))
    info.blocks, info.compute_units[0].name
"""

from __future__ import annotations

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import nvdla_mcu as M
from pydla.deviceapi.generated import nvdla_smmu as S
from pydla.firmware.interface import CuDesc, KmdDeviceInfo, NvdlaFacts
from pydla.hw.cu.models import model_class
from pydla.hw.device_view import ProbedDevice


def device_info(device: ProbedDevice) -> KmdDeviceInfo:
    """``device`` as a driver probing it learns it (see the module docstring)."""
    config = device.config
    return KmdDeviceInfo(device.instance, device.mode, config.name, config.hw_version, config.blocks,
                         config.precisions, config.memory_bytes, config.contexts,
                         config.max_bytes_per_op, config.max_kernel, config.max_stride,
                         tuple(CuDesc(cu.name, cu.m_ip_control[len("AP_CTRL_"):], cu.m_base_address,
                                      cu.window, bool(cu.m_int_enable), cu.m_interrupt_id,
                                      cu.pipeline_depth, cu.is_engine,
                                      cu.param("tile") if cu.model == "shave_tile" else None,
                                      None if cu.is_engine else model_class(cu, cu.name).arguments)
                               for cu in config.ip_layout),
                         headed=_headed(device),
                         nvdla=NvdlaFacts.of(config.nvdla, S.PYDLA_SMMU_CTX, S.PYDLA_CTL_RESET)
                         if config.nvdla is not None else None)


def _headed(device: ProbedDevice) -> bool:
    """Whether a microcontroller runs the engine scheduler: GLB mcu_status on pydla's devices; on an
    NVDLA device the nvdla_mcu window's STATUS, which only a headed one has."""
    if device.config.nvdla is None:
        return bool(device.reg_read(R.GLB_MCU_STATUS) & R.mcu_status_e.RUNNING)
    return device.mcu is not None and bool(device.reg_read(M.PYDLA_MCU_STATUS) & R.mcu_status_e.RUNNING)
