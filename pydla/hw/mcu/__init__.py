"""The microcontroller of a headed device (the NVDLA design's "headed" implementation).

:mod:`pydla.hw.mcu.controller` is the microcontroller (its GLB registers, interrupt and where its
firmware runs), :mod:`pydla.hw.mcu.firmware` the firmware (the engine scheduler of
:mod:`pydla.firmware`, the one the host KMD runs headless, behind the device-API mailbox),
:mod:`pydla.hw.mcu.port` the firmware's KMD portability layer.
"""

from pydla.hw.mcu.controller import Microcontroller

__all__ = ["Microcontroller"]
