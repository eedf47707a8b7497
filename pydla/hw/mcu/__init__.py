"""The microcontroller of a headed device (the NVDLA design's "headed" implementation).

:mod:`pydla.hw.mcu.controller` is the microcontroller (its registers, interrupt and where its
firmware runs) on pydla's own devices (GLB mcu_*), :mod:`pydla.hw.mcu.nvdla` the same on an NVDLA
configuration's device (the nvdla_mcu window, NVDLA's interrupt to the firmware),
:mod:`pydla.hw.mcu.firmware` the firmware (the engine scheduler of :mod:`pydla.firmware`, the one the
host KMD runs headless, behind the device-API mailbox), :mod:`pydla.hw.mcu.board` what the firmware
reaches of its device, :mod:`pydla.hw.mcu.port` the firmware's KMD portability layer.
"""

from pydla.hw.mcu.controller import Microcontroller

__all__ = ["Microcontroller"]
