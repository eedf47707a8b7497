"""NVDLA's functional blocks as NVIDIA's C model computes them, bit for bit, in numpy.

Each block is a module with a frozen dataclass of its register-level parameters (field names are
NVDLA's register field names in lower case) and an ``execute(params, memory, target)`` function that
reads its inputs from a :class:`~pydla.hw.nvdla.memory.NvdlaMemory` and writes its outputs back.
Nothing here knows registers, descriptors or loadables: the device's register file decodes its
registers into these parameters, and tests build them directly.

Usage::

    from pydla.hw.nvdla import bdma, memory, target
    mem = memory.ByteMemory(1 << 16)
    bdma.execute(bdma.BdmaParams(transfers=(...,)), mem, target.NV_FULL)
"""
