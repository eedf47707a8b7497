"""NVDLA's firmware descriptors in pydla's engine scheduler (``dla_interface``: network, dependency
graph, operation, surface and LUT descriptors, reached through the task's address list).

One scheduler: :mod:`~pydla.firmware.nvdla.decode` reads and checks a DLA task's descriptors into
the scheduler's own :class:`~pydla.firmware.graph.TaskGraph` (dependency counts, consumer events,
per-block chains, the fused CONV->SDP pair); :mod:`~pydla.firmware.nvdla.checks` checks every field
the programming uses; :mod:`~pydla.firmware.nvdla.processors` is the register side
(:class:`~pydla.firmware.processors.Processors` for NVDLA's map: group selection through S_POINTER,
the register writes of :mod:`~pydla.firmware.nvdla.program_conv` and
:mod:`~pydla.firmware.nvdla.program_blocks`, OP_EN order, the GLB interrupt status).
docs/development/nvdla/firmware.md says what NVIDIA's firmware does and the submit contract.

Usage::

    task = TaskDesc(1, ctx, addresses, nvdla_interface=(0, 10, 0))
    engine = Engine(port, info)            # info.nvdla: NvdlaFacts -> NVDLA's register programming
    engine.dla_engine_init()
    engine.dla_execute_task(task)          # decoded by pydla.firmware.nvdla.decode
"""
