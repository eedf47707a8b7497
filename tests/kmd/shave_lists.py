"""Building SHAVE task lists for the KMD tests by hand, with the generated ctypes of dla_task.yaml.

A :class:`ListBuilder` holds the buffers of one context and the list's descriptors; ``addresses()``
writes the network descriptor (entry 0), the shave_list_desc_t (1), the kernel tasks (2) and the DMA
tasks (3) into buffers and returns the address list to submit. A ``mutate`` hook changes any
descriptor after it was filled, so each validation test breaks exactly one field.

Usage::

    lb = ListBuilder(kmd, ctx)
    x_in = lb.put(x)
    lb.dma(x_in, tile=0, cmx_offset=0, size=x.nbytes, to_cmx=True, update=[0])
    lb.act(0, "clamp", clamp_args(...), wait=[0], update=[1])
    lb.dma(out, tile=0, cmx_offset=0x1000, size=x.nbytes, to_cmx=False, wait=[1], update=[2])
    kmd.submit(ctx, lb.addresses(notify=[2])).wait(5000)
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated import shave as S
from pydla.kernels.build import kernel_elf
from pydla.kmd.driver import Kmd
from pydla.kmd.port import AddressEntry
from tests.hw.shave.host import Args, entry_offset

F16 = np.float16
DATA_OFFSET = int(S.ARGS_MAX_BYTES)
Mutate = Callable[[Any, Any, list[Any], list[Any]], None]  # (network, list, act descs, dma descs)


def h16(x: float) -> int:
    return int(np.array(x, F16).view(np.uint16))


def clamp_args(src: int, dst: int, shape: tuple[int, ...], dtype: Any, lo: float, hi: float) -> Args:
    """ClampParams for ``dtype`` data at CMX offsets ``src`` and ``dst``."""
    a = Args(S.ClampParams)
    a.memref("input", S.WIN_F + src, shape, dtype)
    a.memref("output", S.WIN_F + dst, shape, dtype)
    a.params.minVal, a.params.maxVal = h16(lo), h16(hi)
    return a


def _mask(barriers: Sequence[int]) -> int:
    m = 0
    for b in barriers:
        m |= 1 << b
    return m


class ListBuilder:
    """See the module docstring."""

    def __init__(self, kmd: Kmd, ctx: int) -> None:
        self.kmd, self.ctx = kmd, ctx
        self.entries: list[AddressEntry] = []
        for size in (ctypes.sizeof(T.dla_network_desc_t), ctypes.sizeof(T.shave_list_desc_t), 4096, 4096):
            self.entries.append(AddressEntry(kmd.bo_create(ctx, size)))
        self.acts: list[Any] = []
        self.dmas: list[Any] = []
        self.kernels: dict[str, int] = {}
        self.used: set[int] = set()
        self.runtimes: dict[bytes, int] = {}  # runtime ELF -> its entry

    # -- buffers -----------------------------------------------------------------------------------

    def alloc(self, size: int) -> int:
        """A new buffer of ``size`` bytes as an address-list entry; returns its index."""
        self.entries.append(AddressEntry(self.kmd.bo_create(self.ctx, max(size, 1))))
        return len(self.entries) - 1

    def existing(self, handle: int) -> int:
        """Buffer ``handle`` of the context (another task's, say) as an address-list entry."""
        self.entries.append(AddressEntry(handle))
        return len(self.entries) - 1

    def put(self, data: bytes | np.ndarray) -> int:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        index = self.alloc(len(raw))
        self.array(index)[:len(raw)] = np.frombuffer(raw, np.uint8)
        return index

    def array(self, index: int) -> np.ndarray:
        return self.kmd.bo_array(self.ctx, self.entries[index].handle)

    def write(self, index: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.array(index)[:len(raw)] = raw

    def read(self, index: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.array(index)[:n].view(dtype).reshape(shape).copy()

    def ref(self, index: int, size: int | None = None, offset: int = 0) -> Any:
        if size is None:
            size = len(self.array(index)) - offset
        return T.dla_mem_ref_t(address=index, offset=offset, size=size)

    def kernel(self, name: str, image: bytes | None = None) -> int:
        """The address-list entry of kernel ``name``'s ELF (the shipped one unless ``image``)."""
        if name not in self.kernels:
            self.kernels[name] = self.put(kernel_elf(name) if image is None else image)
        return self.kernels[name]

    # -- tasks -------------------------------------------------------------------------------------

    def act(self, tile: int, name: str, args: Args | bytes, *, wait: Sequence[int] = (),
            update: Sequence[int] = (), image: bytes | None = None, kernel_id: int | None = None) -> int:
        k = self.kernel(name, image)
        elf = bytes(self.array(k))
        d = T.shave_act_task_desc_t(kernel=self.ref(k), entry_offset=entry_offset(elf), tile=tile,
                                    wait_mask=_mask(wait), update_mask=_mask(update))
        d.kernel_id = len(self.kernels) if kernel_id is None else kernel_id
        raw = bytes(args)
        d.args = self.ref(self.put(raw), len(raw)) if raw else T.dla_mem_ref_t(address=-1)
        data = bytes(args.data) if isinstance(args, Args) else b""
        if data:
            d.data, d.data_offset = self.ref(self.put(data), len(data)), DATA_OFFSET
        else:
            d.data = T.dla_mem_ref_t(address=-1)
        self.acts.append(d)
        self.used.add(tile)
        return len(self.acts) - 1

    def dma(self, index: int, *, tile: int, cmx_offset: int, size: int, to_cmx: bool, offset: int = 0,
            wait: Sequence[int] = (), update: Sequence[int] = (), lines: int = 1,
            ddr_stride: int | None = None, cmx_stride: int | None = None) -> int:
        """A DMA task of ``lines`` lines of ``size`` bytes between entry ``index`` and the tile's CMX."""
        ds = size if ddr_stride is None else ddr_stride
        cs = size if cmx_stride is None else cmx_stride
        extent = (lines - 1) * ds + size
        d = T.shave_dma_task_desc_t(
            ddr=self.ref(index, extent, offset), tile=tile, cmx_offset=cmx_offset, line_size=size,
            line_repeat=lines, ddr_line_stride=ds, cmx_line_stride=cs, surf_repeat=1,
            direction=int(T.shave_dma_direction_e.TO_CMX if to_cmx else T.shave_dma_direction_e.FROM_CMX),
            wait_mask=_mask(wait), update_mask=_mask(update))
        self.dmas.append(d)
        return len(self.dmas) - 1

    # -- the list ----------------------------------------------------------------------------------

    def addresses(self, *, notify: Sequence[int], barriers: Sequence[int] | None = None,
                  stack: int = 16384, runtime: bytes | None = None,
                  mutate: Mutate | None = None) -> list[AddressEntry]:
        """Write the descriptors; the address list to submit. ``barriers`` defaults to every barrier a
        task names; every tile with a kernel task gets ``stack``; ``runtime``: the runtime kernel's
        ELF (the shipped one by default)."""
        image = kernel_elf("runtime") if runtime is None else runtime
        if image not in self.runtimes:
            self.runtimes[image] = self.put(image)
        if barriers is None:
            mask = 0
            for d in self.acts + self.dmas:
                mask |= d.wait_mask | d.update_mask
        else:
            mask = _mask(barriers)
        lst = T.shave_list_desc_t(runtime=self.ref(self.runtimes[image]),
                                  act_task_index=2 if self.acts else -1,
                                  dma_task_index=3 if self.dmas else -1, num_act_tasks=len(self.acts),
                                  num_dma_tasks=len(self.dmas), barrier_mask=mask, notify_mask=_mask(notify))
        for t in self.used:
            lst.stack_size[t] = stack
        net = T.dla_network_desc_t(operation_desc_index=-1, surface_desc_index=-1, dependency_graph_index=-1,
                                   lut_data_index=-1, shave_list_index=1)
        for b in range(len(net.op_head)):
            net.op_head[b] = -1
        acts = [T.shave_act_task_desc_t.from_buffer_copy(bytes(d)) for d in self.acts]
        dmas = [T.shave_dma_task_desc_t.from_buffer_copy(bytes(d)) for d in self.dmas]
        net.num_addresses = len(self.entries)
        if mutate is not None:
            mutate(net, lst, acts, dmas)
        self._write(2, b"".join(bytes(d) for d in acts))
        self._write(3, b"".join(bytes(d) for d in dmas))
        self._write(0, bytes(net))
        self._write(1, bytes(lst))
        return list(self.entries)

    def _write(self, index: int, raw: bytes) -> None:
        arr = self.array(index)
        if len(raw) > len(arr):
            self.entries[index] = AddressEntry(self.kmd.bo_create(self.ctx, len(raw)))
            arr = self.array(index)
        arr[:] = 0
        arr[:len(raw)] = np.frombuffer(raw, np.uint8)


def seed_list(kmd: Kmd, ctx: int, x: np.ndarray, lo: float, hi: float, tile: int = 0,
              out_offset: int = 0x40000) -> tuple[ListBuilder, int, list[AddressEntry]]:
    """The seed scenario: DMA DDR->CMX updates b0; clamp on ``tile`` waits b0, updates b1; DMA
    CMX->DDR waits b1, updates b2 (the notify barrier). Returns the builder, the output's entry and
    the address list."""
    lb = ListBuilder(kmd, ctx)
    src, out = lb.put(x), lb.alloc(x.nbytes)
    lb.dma(src, tile=tile, cmx_offset=0, size=x.nbytes, to_cmx=True, update=[0])
    lb.act(tile, "clamp", clamp_args(0, out_offset, x.shape, x.dtype.type, lo, hi), wait=[0], update=[1])
    lb.dma(out, tile=tile, cmx_offset=out_offset, size=x.nbytes, to_cmx=False, wait=[1], update=[2])
    return lb, out, lb.addresses(notify=[2])
