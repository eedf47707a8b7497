"""How a task is laid out, beyond the generated structs: which operation and surface descriptor each
block uses, the slot every operation takes (the largest of each kind, as the network descriptor's
op_desc_size and surface_desc_size say), and an entry of its address list. The task encoder (the
loadable side) writes by it and the KMD reads by it: one declaration for both.

Usage::

    from pydla.deviceapi.task_layout import OP_DESC, OP_DESC_SIZE
    desc = OP_DESC[dla_block_e.PDP].from_buffer_copy(blob, OP_DESC_SIZE * index)
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e

OP_DESC: dict[dla_block_e, Any] = {
    dla_block_e.BDMA: T.dla_bdma_op_desc_t, dla_block_e.CONV: T.dla_conv_op_desc_t,
    dla_block_e.SDP: T.dla_sdp_op_desc_t, dla_block_e.PDP: T.dla_pdp_op_desc_t,
    dla_block_e.CDP: T.dla_cdp_op_desc_t, dla_block_e.RUBIK: T.dla_rubik_op_desc_t,
}
SURFACE_DESC: dict[dla_block_e, Any] = {
    dla_block_e.BDMA: T.dla_bdma_surface_desc_t, dla_block_e.CONV: T.dla_conv_surface_desc_t,
    dla_block_e.SDP: T.dla_sdp_surface_desc_t, dla_block_e.PDP: T.dla_pdp_surface_desc_t,
    dla_block_e.CDP: T.dla_pdp_surface_desc_t, dla_block_e.RUBIK: T.dla_pdp_surface_desc_t,
}
OP_DESC_SIZE = max(ctypes.sizeof(t) for t in OP_DESC.values())
SURFACE_DESC_SIZE = max(ctypes.sizeof(t) for t in SURFACE_DESC.values())


@dataclass(frozen=True)
class AddressEntry:
    """One entry of a task's address list: a buffer of the submitting context, an offset, and the
    bytes from there the task may use (None: to the end of the buffer; a sub-buffer otherwise)."""

    handle: int
    offset: int = 0
    size: int | None = None
