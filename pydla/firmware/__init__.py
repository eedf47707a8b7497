"""The engine scheduler: firmware shared by the host KMD (headless) and the device's microcontroller (headed).

As NVDLA's software keeps it in ``kmd/firmware``, the scheduler is written once against one
interface and runs wherever a port to that interface exists: in the host's kernel-mode driver
(:mod:`pydla.kmd`, which programs the blocks itself), or on the microcontroller beside the device
(:mod:`pydla.hw.mcu`, which the host then reaches through device-API messages). It imports only the
generated contracts (:mod:`pydla.deviceapi`), :mod:`pydla.errors`, the standard library and numpy.

Modules, and their counterparts in NVDLA's firmware:

- :mod:`~pydla.firmware.interface` (``include/nvdla_interface.h``): the portability functions the
  scheduler calls (``dla_reg_*``, ``dla_read_*_address``, ``dla_data_*``, the interrupt hookup),
  the task descriptor and the device's description;
- :mod:`~pydla.firmware.engine` (``engine.c``, ``engine_isr.c``, ``scheduler.c``):
  ``dla_engine_init``, ``dla_execute_task``, ``dla_isr_handler``, ``dla_process_events``;
  :mod:`~pydla.firmware.engine_api`: what a driver uses of an engine, in both modes;
- :mod:`~pydla.firmware.graph` (``scheduler.c``'s reading of the network, operation and surface
  descriptors): a task's descriptors copied and validated into an immutable dependency graph,
  each operation's surfaces checked by :mod:`~pydla.firmware.surfaces`;
  :mod:`~pydla.firmware.shave` and :mod:`~pydla.firmware.shave_check`: the same for a SHAVE task
  list, and for the barriers between a task's DLA operations and the list beside them;
- :mod:`~pydla.firmware.program` (``bdma.c``, ``conv.c``, ``sdp.c``, ``pdp.c``, ``cdp.c``,
  ``rubik.c``): per-block programming of one operation into a register group;
- :mod:`~pydla.firmware.trace`: tasks recorded in the device's trace ring;
- :mod:`~pydla.firmware.headed_ring` and :mod:`~pydla.firmware.headed_codec`: the headed mailbox
  (its layout, its rings, the per-task messages' packing), which both sides speak.

Usage::

    from pydla.firmware.engine import Engine
    engine = Engine(port, info)          # port: a FirmwarePortability; info: what the device is
    engine.dla_engine_init()
    run = engine.dla_execute_task(task)  # validated, then scheduled; the ISR and events do the rest
"""
