"""The device's decoded-operation cache never uses a stale decode: data changes are seen, and a
change of mappings (unmap, free and reallocate, another context at the same address) or a reset
decodes anew."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from tests.hw.regs import MMU_FAULT_BIT, Arena, done_bit, error_bit, pdp_op, status

IDLE = int(R.group_state_e.IDLE)


@pytest.fixture
def dev() -> VirtualDevice:
    return VirtualDevice("full", mode="deterministic")


def _clear(dev: VirtualDevice) -> None:
    dev.reg_write(R.GLB_INTR_STATUS, 0xFFFFFFFF)


def _pool(x: np.ndarray) -> np.ndarray:
    c, h, w = x.shape
    result: np.ndarray = x.reshape(c, h // 2, 2, w // 2, 2).max(axis=(2, 4))
    return result


def test_same_registers_decode_once_and_see_new_data(dev: VirtualDevice) -> None:
    arena = Arena(dev)
    x = np.random.default_rng(0).standard_normal((2, 4, 4)).astype(np.float32)
    src, dst = arena.put(x), arena.cube((2, 2, 2))
    for i in range(3):
        arena.view(src)[...] = x + i  # new data, the same registers
        pdp_op(dev, src, dst, arena.ctx, group=0 if i % 2 == 0 else 1)
        np.testing.assert_array_equal(arena.get(dst), _pool(x + i))
        _clear(dev)
    # groups 0 and 1 hold the same bytes: one decode, two reuses
    assert (dev.decoded.misses, dev.decoded.hits) == (1, 2)


def test_unmapped_destination_faults_instead_of_writing_through_a_stale_view(dev: VirtualDevice) -> None:
    arena = Arena(dev)
    x = np.ones((1, 4, 4), np.float32)
    src = arena.put(x)
    out_bo = dev.memory.allocate(4096)
    out_iova = dev.iommu.map(arena.ctx, out_bo)
    dst = arena.cube((1, 2, 2))
    dst = type(dst)(out_iova, dst.shape, dst.line_stride, dst.surf_stride, dst.dtype, 0)
    pdp_op(dev, src, dst, arena.ctx, group=0)
    assert status(dev) & done_bit("PDP", 0)
    np.testing.assert_array_equal(out_bo.array[:16].view(np.float32), np.ones(4, np.float32))
    _clear(dev)
    dev.iommu.unmap(arena.ctx, out_iova)
    dev.memory.free(out_bo)
    replacement = dev.memory.allocate(4096)  # new memory, not mapped at the old address
    replacement.array[:] = 0x5A
    pdp_op(dev, src, dst, arena.ctx, group=1)  # the same register bytes as before
    bits = status(dev)
    assert bits & error_bit("PDP", 1) and bits & MMU_FAULT_BIT
    assert not bits & done_bit("PDP", 1)
    assert (replacement.array == 0x5A).all()


def test_another_context_at_the_same_address_gets_its_own_decode(dev: VirtualDevice) -> None:
    a, b = Arena(dev), Arena(dev)
    assert a.iova == b.iova and a.ctx != b.ctx  # each context's space starts at the same IOVA
    xa = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    xb = -xa
    src_a, dst_a = a.put(xa), a.cube((1, 2, 2))
    src_b, dst_b = b.put(xb), b.cube((1, 2, 2))
    assert (src_a.addr, dst_a.addr) == (src_b.addr, dst_b.addr)
    pdp_op(dev, src_a, dst_a, a.ctx, group=0)
    pdp_op(dev, src_b, dst_b, b.ctx, group=1)
    np.testing.assert_array_equal(a.get(dst_a), _pool(xa))
    np.testing.assert_array_equal(b.get(dst_b), _pool(xb))
    assert dev.decoded.misses == 2


def test_a_new_mapping_in_the_context_decodes_again(dev: VirtualDevice) -> None:
    arena = Arena(dev)
    x = np.ones((1, 4, 4), np.float32)
    src, dst = arena.put(x), arena.cube((1, 2, 2))
    pdp_op(dev, src, dst, arena.ctx, group=0)
    _clear(dev)
    before = dev.iommu.generation(arena.ctx)
    extra = dev.memory.allocate(64)
    dev.iommu.map(arena.ctx, extra)
    assert dev.iommu.generation(arena.ctx) != before
    pdp_op(dev, src, dst, arena.ctx, group=1)
    assert (dev.decoded.misses, dev.decoded.hits) == (2, 0)
    np.testing.assert_array_equal(arena.get(dst), _pool(x))


def test_a_destroyed_context_never_matches_a_new_one(dev: VirtualDevice) -> None:
    first = Arena(dev)
    generation = dev.iommu.generation(first.ctx)
    dev.iommu.destroy_context(first.ctx)
    assert dev.iommu.generation(first.ctx) is None
    second = Arena(dev)
    assert dev.iommu.generation(second.ctx) != generation


def test_reset_empties_the_cache(dev: VirtualDevice) -> None:
    arena = Arena(dev)
    x = np.ones((1, 4, 4), np.float32)
    src, dst = arena.put(x), arena.cube((1, 2, 2))
    pdp_op(dev, src, dst, arena.ctx, group=0)
    assert len(dev.decoded) == 1
    dev.reg_write(R.GLB_RESET, 1 << 31)
    assert len(dev.decoded) == 0
    arena.view(src)[...] = 2
    pdp_op(dev, src, dst, arena.ctx, group=0)
    np.testing.assert_array_equal(arena.get(dst), np.full((1, 2, 2), 2, np.float32))
    assert dev.decoded.misses == 2


def test_a_bad_configuration_is_reported_every_time_and_never_kept(dev: VirtualDevice) -> None:
    arena = Arena(dev)
    src, dst = arena.put(np.ones((1, 4, 4), np.float32)), arena.cube((1, 3, 3))  # wrong output size
    for group in (0, 1):
        pdp_op(dev, src, dst, arena.ctx, group=group)
        assert status(dev) & error_bit("PDP", group)
        _clear(dev)
    assert len(dev.decoded) == 0


@pytest.mark.parametrize("act", ["relu", "clamp", "none"])
@pytest.mark.parametrize("shift", [0, 1, -1, 16])  # elements: the same place, overlapping either way, apart
def test_sdp_activation_from_memory_with_overlapping_source_and_destination(dev: VirtualDevice, act: str,
                                                                            shift: int) -> None:
    """SDP's one-call activation path reads all of its source before writing an overlapping
    destination, as the general path (which copies the source first) does."""
    from tests.hw.regs import Cube, program

    arena = Arena(dev)
    x = np.random.default_rng(shift + 5).standard_normal((2, 2, 4)).astype(np.float32)
    base = arena.alloc(4 * 64, align=64) + 4 * 24
    src = Cube(arena.iova + base, x.shape, 16, 32, np.dtype(np.float32), base)
    dst = Cube(src.addr + 4 * shift, x.shape, 16, 32, np.dtype(np.float32), base + 4 * shift)
    arena.view(src)[...] = x
    kinds = {"relu": R.sdp_act_e.RELU, "clamp": R.sdp_act_e.CLAMP, "none": R.sdp_act_e.NONE}
    program(dev, "SDP", group=0, ctx_id=arena.ctx, precision=int(R.dla_precision_e.FP32),
            out_precision=int(R.dla_precision_e.FP32), src_mode=int(R.sdp_src_mode_e.MEMORY), src=src,
            dst=dst, act=int(kinds[act]), act_min=-0.5, act_max=0.5, op_enable=1)
    assert status(dev) & done_bit("SDP", 0)
    expect = {"relu": np.maximum(x, 0), "clamp": np.clip(x, -0.5, 0.5), "none": x}[act]
    np.testing.assert_array_equal(arena.get(dst), expect)


def test_a_change_of_mappings_drops_that_contexts_decodes_only(dev: VirtualDevice) -> None:
    """Nothing decoded keeps a freed buffer's memory alive: an unmap (or free, or a destroyed
    context) drops the decodes of that context, and only those."""
    a, b = Arena(dev), Arena(dev)
    x = np.ones((1, 4, 4), np.float32)
    pdp_op(dev, a.put(x), a.cube((1, 2, 2)), a.ctx, group=0)
    pdp_op(dev, b.put(x), b.cube((1, 2, 2)), b.ctx, group=1)
    assert len(dev.decoded) == 2
    dev.iommu.unmap(a.ctx, a.iova)
    assert len(dev.decoded) == 1
    dev.iommu.destroy_context(b.ctx)
    assert len(dev.decoded) == 0
