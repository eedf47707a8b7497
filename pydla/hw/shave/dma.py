"""The SHAVE DMA engine: its task list, executed in order, each task after its barriers fired.

A DmaTask copies ``surf_repeat`` surfaces of ``line_repeat`` lines of ``line_size`` bytes between
device memory (through the IOMMU, in the context latched with the push: a view checked against one
mapping) and a tile's CMX slice (checked against WIN_F). Its update barriers are produced and its
wait barriers consumed when the copy is done.

Usage::

    dma = Dma(iommu, barriers, cmx_of, tiles=2, cmx_bytes=...)
    dma.push(Pushed(ctx, iova, 1))
    while dma.step(): pass                 # ShaveFault when a task fails
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import shave as S
from pydla.hw.memory import Iommu, MmuFault
from pydla.hw.shave.barriers import Barriers
from pydla.hw.shave.faults import E, ShaveFault
from pydla.hw.shave.tasks import Endpoint, Pushed, read_dma_task


class Dma:
    def __init__(self, iommu: Iommu, barriers: Barriers, cmx_of: Callable[[int], npt.NDArray[np.uint8]],
                 tiles: int, cmx_bytes: int) -> None:
        self.iommu = iommu
        self.barriers = barriers
        self.cmx_of = cmx_of
        self.tiles = tiles
        self.cmx_bytes = cmx_bytes
        self.fifo: collections.deque[Pushed] = collections.deque()
        self._head: tuple[S.DmaTask, Endpoint, Endpoint] | None = None
        self.reset()

    def reset(self) -> None:
        self.fifo.clear()
        self._head = None
        self.done = 0
        self.seq = 0
        self.error = 0
        self.error_task = 0
        self.error_addr = 0

    def push(self, pushed: Pushed) -> None:
        if len(self.fifo) >= S.FIFO_DEPTH:
            raise ShaveFault(E.FIFO_FULL, f"DMA: push of {pushed.addr:#x} to a full FIFO "
                                          f"({S.FIFO_DEPTH} tasks)", addr=pushed.addr)
        self.fifo.append(pushed)

    def step(self) -> bool:
        """Execute the head task if its barriers fired; True if one was executed."""
        if self.error or not self.fifo:
            return False
        pushed = self.fifo[0]
        if self._head is None:
            self._head = read_dma_task(self.iommu, pushed, self.tiles, self.cmx_bytes, self.barriers)
        task, src, dst = self._head
        if not self.barriers.ready(task.wait_mask):
            return False
        shape = (task.surf_repeat, task.line_repeat, task.line_size)
        source = self._view(pushed, src, shape, (task.src_surf_stride, task.src_line_stride))
        target = self._view(pushed, dst, shape, (task.dst_surf_stride, task.dst_line_stride))
        target[...] = source  # numpy copies through a temporary when the two overlap
        self.fifo.popleft()
        self._head = None
        who = f"DmaTask {pushed.seq}"
        self.barriers.produce(task.update_mask, who)
        self.barriers.consume(task.wait_mask, who)
        self.done = (self.done + 1) & 0xFFFFFFFF
        return True

    def _view(self, pushed: Pushed, end: Endpoint, shape: tuple[int, int, int],
              strides: tuple[int, int]) -> npt.NDArray[np.uint8]:
        full = (strides[0], strides[1], 1)
        if end.tile is None:
            try:
                return self.iommu.view(pushed.ctx, end.addr, shape, full, np.uint8)
            except MmuFault as e:
                raise ShaveFault(E.MMU_FAULT, f"DmaTask {pushed.seq}: {e}", addr=e.address) from None
        cmx = self.cmx_of(end.tile)
        view: npt.NDArray[np.uint8] = np.ndarray(shape, dtype=np.uint8, buffer=cmx, offset=end.addr,
                                                 strides=full)
        return view
