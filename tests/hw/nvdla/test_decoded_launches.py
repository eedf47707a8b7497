"""Decoded launches kept by their register bytes (NvdlaEngine.decoded): decoded once for the same
registers, anew for other registers; memory read, translated and checked at every execution."""

from __future__ import annotations

import dataclasses

import numpy as np

from pydla.hw.nvdla.pdp import PdpParams
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.surface import Cube, scatter
from pydla.hw.nvdla_device import NvdlaDevice
from tests.hw.nvdla.device_arena import DeviceArena

INT8 = Precision.INT8
PDP_DONE = 0x30  # GLB S_INTR_STATUS: PDP group 0 and 1


def _max_pool(src: Cube, dst: Cube) -> PdpParams:
    return PdpParams(
        cube_in_width=src.width - 1, cube_in_height=src.height - 1, cube_in_channel=src.channel - 1,
        cube_out_width=dst.width - 1, cube_out_height=dst.height - 1, cube_out_channel=dst.channel - 1,
        pooling_method=1, kernel_width=1, kernel_height=1, kernel_stride_width=1, kernel_stride_height=1,
        pad_left=0, pad_top=0, pad_right=0, pad_bottom=0, input_data=0, src_base_addr=src.address,
        src_line_stride=src.line_stride, src_surface_stride=src.surf_stride, dst_base_addr=dst.address,
        dst_line_stride=dst.line_stride, dst_surface_stride=dst.surf_stride)


def _pooled(x: np.ndarray) -> np.ndarray:
    c, h, w = x.shape
    out: np.ndarray = x.reshape(c, h // 2, 2, w // 2, 2).max(axis=(2, 4))
    return out


def _run(arena: DeviceArena, params: PdpParams, group: int) -> None:
    arena.program("PDP", params, group)
    arena.dev.reg_write(arena.regs.NVDLA_GLB_S_INTR_STATUS_0, PDP_DONE)


def test_the_same_registers_decode_once_and_read_memory_at_every_run() -> None:
    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (11, 6, 8), dtype=np.int8)
    src, dst = arena.cube(8, 6, 11, INT8, x), arena.cube(4, 3, 11, INT8)
    params = _max_pool(src, dst)
    _run(arena, params, 0)
    assert np.array_equal(arena.get(dst), _pooled(x))
    assert (dev.engine.decoded.misses, dev.engine.decoded.hits) == (1, 0)
    y = rng.integers(-128, 128, (11, 6, 8), dtype=np.int8)  # new data, the same registers
    scatter(arena.memory, src, dev.target, y, "test")
    _run(arena, params, 1)  # the other group, the same bytes
    assert np.array_equal(arena.get(dst), _pooled(y))
    assert (dev.engine.decoded.misses, dev.engine.decoded.hits) == (1, 1)
    other = arena.cube(4, 3, 11, INT8)
    _run(arena, dataclasses.replace(params, dst_base_addr=other.address), 0)  # other registers
    assert np.array_equal(arena.get(other), _pooled(y))
    assert (dev.engine.decoded.misses, dev.engine.decoded.hits, len(dev.engine.decoded)) == (2, 1, 2)
    assert (dev.ops_done, dev.ops_failed) == (3, 0)


def test_a_mapping_removed_after_decoding_faults_at_the_next_run() -> None:
    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    params = _max_pool(src, dst)
    _run(arena, params, 0)
    dev.iommu.unmap(arena.ctx, dst.address)
    _run(arena, params, 1)
    assert dev.engine.decoded.hits == 1  # decoded from the cache, refused at the memory
    assert (dev.ops_done, dev.ops_failed) == (1, 1) and "not mapped" in dev.errors[-1]
    assert dev.fault[0] == dst.address


def test_registers_a_block_refuses_are_refused_at_every_run() -> None:
    dev = NvdlaDevice("nv_small")
    arena = DeviceArena(dev)
    src, dst = arena.cube(8, 6, 11, INT8), arena.cube(4, 3, 11, INT8)
    bad = dataclasses.replace(_max_pool(src, dst), input_data=3)  # no such precision
    for group in (0, 1):
        _run(arena, bad, group)
    assert (dev.ops_done, dev.ops_failed, dev.engine.decoded.hits) == (0, 2, 1)
    assert "INPUT_DATA: precision code 3" in dev.errors[-1]
    dev.reset()
    assert len(dev.engine.decoded) == 0
