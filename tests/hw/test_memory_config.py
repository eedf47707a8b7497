"""Device memory, the IOMMU as the device sees it, and device configurations.

Accesses are made by the device itself (BDMA copies programmed through registers): a fault must show up
as the MMU-fault interrupt, never as a host exception. Host-side API misuse raises DlaError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.hw.device import VirtualDevice
from pydla.target.config import PAGE, bundled_configs, load_config, parse_config
from tests.hw.regs import MMU_FAULT_BIT, Cube, bdma_op, done_bit, error_bit, pdp_op, raw_config, status

OK = done_bit("BDMA", 0)
FAULT = error_bit("BDMA", 0) | MMU_FAULT_BIT


@pytest.fixture
def dev() -> Any:
    device = VirtualDevice(parse_config(raw_config(memory_bytes=1 << 20, contexts=3)))
    yield device
    device.close()


def copy(dev: VirtualDevice, ctx: int, src: int, dst: int, n: int) -> int:
    """One BDMA copy of ``n`` bytes in group 0 after a block reset; returns the interrupt status."""
    dev.reg_write(R.GLB_RESET, 1 << 31)
    bdma_op(dev, src, dst, ctx, line_size=n, group=0)
    return status(dev)


def fault_address(dev: VirtualDevice) -> int:
    return dev.reg_read(R.GLB_MMU_FAULT_ADDR_LO) | dev.reg_read(R.GLB_MMU_FAULT_ADDR_HI) << 32


# -- the IOMMU as the device sees it -------------------------------------------------------------------


def test_guard_page_after_each_mapping(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    a, b, scratch = (dev.memory.allocate(PAGE) for _ in range(3))
    ia, ib, iscratch = (dev.iommu.map(ctx, bo) for bo in (a, b, scratch))
    assert ia % PAGE == 0 and ib % PAGE == 0
    assert ib >= ia + 2 * PAGE, "a guard page separates two mappings"
    a.array[:] = 1
    b.array[:] = 2
    # The last 16 bytes of a: fine. One byte more runs past the end; the guard page is not mapped.
    assert copy(dev, ctx, ia + PAGE - 16, iscratch, 16) == OK
    assert (scratch.array[:16] == 1).all()
    assert copy(dev, ctx, ia + PAGE - 15, iscratch, 16) == FAULT
    assert "runs past the end" in dev.log[-1]
    assert fault_address(dev) == ia + PAGE - 15
    assert copy(dev, ctx, ia + PAGE, iscratch, 1) == FAULT
    assert "not mapped" in dev.log[-1]
    assert fault_address(dev) == ia + PAGE
    assert copy(dev, ctx, ib - 1, iscratch, 1) == FAULT
    assert dev.reg_read(R.GLB_MMU_FAULT_CTX) == ctx
    assert dev.reg_read(R.GLB_MMU_FAULT_BLOCK) == int(dla_block_e.BDMA)
    # A write that would run into the guard page changes nothing.
    scratch.array[:] = 9
    assert copy(dev, ctx, iscratch, ia + PAGE - 8, 16) == FAULT
    assert (a.array == 1).all() and (b.array == 2).all()


def test_mapping_smaller_than_a_page_ends_at_its_size(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    small, scratch = dev.memory.allocate(100), dev.memory.allocate(PAGE)
    i_small, i_scratch = dev.iommu.map(ctx, small), dev.iommu.map(ctx, scratch)
    assert copy(dev, ctx, i_small, i_scratch, 100) == OK
    assert copy(dev, ctx, i_small, i_scratch, 101) == FAULT
    assert copy(dev, ctx, i_small + 100, i_scratch, 1) == FAULT


def test_mapping_with_offset_and_size(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    bo, scratch = dev.memory.allocate(3 * PAGE), dev.memory.allocate(PAGE)
    bo.array[:] = np.arange(3 * PAGE) // PAGE + 1  # page n holds n + 1
    window = dev.iommu.map(ctx, bo, offset=PAGE, size=PAGE)
    i_scratch = dev.iommu.map(ctx, scratch)
    assert copy(dev, ctx, window, i_scratch, PAGE) == OK
    assert (scratch.array == 2).all()
    assert copy(dev, ctx, window + PAGE - 1, i_scratch, 2) == FAULT
    m = next(m for m in dev.iommu.mappings(ctx) if m.iova == window)
    assert (m.size, m.offset, m.bo) == (PAGE, PAGE, bo)


def test_unmap_then_access_faults(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    bo, scratch = dev.memory.allocate(PAGE), dev.memory.allocate(PAGE)
    iova, i_scratch = dev.iommu.map(ctx, bo), dev.iommu.map(ctx, scratch)
    assert copy(dev, ctx, iova, i_scratch, 8) == OK
    dev.iommu.unmap(ctx, iova)
    assert copy(dev, ctx, iova, i_scratch, 8) == FAULT
    assert fault_address(dev) == iova
    with pytest.raises(DlaError) as e:
        dev.iommu.unmap(ctx, iova)
    assert e.value.code == NvError.BadParameter
    with pytest.raises(DlaError):
        dev.iommu.unmap(ctx, i_scratch + 8)  # not the start of a mapping
    # A new mapping of the same buffer gets a new address; the old one stays unmapped.
    again = dev.iommu.map(ctx, bo)
    assert again != iova
    assert copy(dev, ctx, again, i_scratch, 8) == OK
    assert copy(dev, ctx, iova, i_scratch, 8) == FAULT


def test_freed_buffer_still_mapped_faults(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    bo, scratch = dev.memory.allocate(PAGE), dev.memory.allocate(PAGE)
    iova, i_scratch = dev.iommu.map(ctx, bo), dev.iommu.map(ctx, scratch)
    dev.memory.free(bo)
    assert copy(dev, ctx, iova, i_scratch, 8) == FAULT
    assert "freed" in dev.log[-1]
    with pytest.raises(DlaError) as e:
        dev.memory.free(bo)
    assert e.value.code == NvError.BadParameter


@pytest.mark.parametrize(("offset", "line_stride"), [(2, 8), (0, 6)], ids=["address", "stride"])
def test_misaligned_cube_is_a_bad_config(dev: VirtualDevice, offset: int, line_stride: int) -> None:
    ctx = dev.iommu.create_context()
    bo = dev.memory.allocate(PAGE)
    bo.array[:] = 0xA5
    iova = dev.iommu.map(ctx, bo)
    src = Cube(iova + offset, (1, 2, 2), line_stride, 16, np.dtype(np.float32), offset)
    dst = Cube(iova + 256, (1, 1, 1), 4, 4, np.dtype(np.float32), 256)
    pdp_op(dev, src, dst, ctx, group=0)
    assert status(dev) == error_bit("PDP", 0)
    assert dev.reg_read(R.PDP_S_ERROR) == R.dla_hw_error_e.BAD_CONFIG
    assert "aligned" in dev.log[-1]
    assert (bo.array[256:260] == 0xA5).all()


def test_bdma_moves_bytes_at_any_alignment(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    bo = dev.memory.allocate(PAGE)
    bo.array[:] = np.arange(PAGE) % 253
    iova = dev.iommu.map(ctx, bo)
    dev.reg_write(R.GLB_RESET, 1 << 31)
    bdma_op(dev, iova + 3, iova + 1001, ctx, line_size=7, lines=3, src_line_stride=11, dst_line_stride=13)
    assert status(dev) == OK
    for line in range(3):
        got = bo.array[1001 + 13 * line:1001 + 13 * line + 7]
        assert np.array_equal(got, (np.arange(7) + 3 + 11 * line) % 253)


def test_destroyed_context_faults(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    bo = dev.memory.allocate(PAGE)
    iova = dev.iommu.map(ctx, bo)
    assert copy(dev, ctx, iova, iova + 64, 8) == OK
    dev.iommu.destroy_context(ctx)
    assert copy(dev, ctx, iova, iova + 64, 8) == FAULT
    assert "no such context" in dev.log[-1]
    with pytest.raises(DlaError) as e:
        dev.iommu.destroy_context(ctx)
    assert e.value.code == NvError.BadParameter
    with pytest.raises(DlaError):
        dev.iommu.map(ctx, bo)
    with pytest.raises(DlaError):
        dev.iommu.mappings(ctx)


def test_context_limit(dev: VirtualDevice) -> None:
    ctxs = [dev.iommu.create_context() for _ in range(3)]
    assert len(set(ctxs)) == 3 and 0 not in ctxs
    assert sorted(dev.iommu.contexts) == sorted(ctxs)
    with pytest.raises(DlaError) as e:
        dev.iommu.create_context()
    assert e.value.code == NvError.ResourceError
    dev.iommu.destroy_context(ctxs[1])
    new = dev.iommu.create_context()
    assert new not in (ctxs[0], ctxs[2], 0)


def test_memory_limit(dev: VirtualDevice) -> None:
    big = dev.memory.allocate((1 << 20) - 100)
    assert dev.memory.used == (1 << 20) - 100
    last = dev.memory.allocate(100)
    with pytest.raises(DlaError) as e:
        dev.memory.allocate(1)
    assert e.value.code == NvError.InsufficientMemory
    dev.memory.free(last)
    assert dev.memory.used == (1 << 20) - 100
    again = dev.memory.allocate(100)
    assert again.handle != last.handle
    assert dev.memory.get(big.handle) is big
    assert {b.handle for b in dev.memory.buffers} == {big.handle, again.handle}
    with pytest.raises(DlaError) as e:
        dev.memory.get(last.handle)
    assert e.value.code == NvError.BadParameter


@pytest.mark.parametrize("size", [0, -1, 1 << 41, 4.0])
def test_allocate_bad_sizes(dev: VirtualDevice, size: Any) -> None:
    with pytest.raises(DlaError) as e:
        dev.memory.allocate(size)
    assert e.value.code == NvError.BadParameter


@pytest.mark.parametrize(("offset", "size"), [(0, PAGE + 1), (PAGE, 1), (-1, 10), (0, 0), (10, -5),
                                              (PAGE - 10, 11)])
def test_map_bounds_errors(dev: VirtualDevice, offset: int, size: int) -> None:
    ctx = dev.iommu.create_context()
    bo = dev.memory.allocate(PAGE)
    with pytest.raises(DlaError) as e:
        dev.iommu.map(ctx, bo, offset=offset, size=size)
    assert e.value.code == NvError.BadParameter
    assert dev.iommu.mappings(ctx) == []


def test_io_address_space_exhaustion() -> None:
    dev = VirtualDevice(parse_config(raw_config(iova_size=5 * PAGE)))
    ctx = dev.iommu.create_context()
    bo = dev.memory.allocate(PAGE)
    dev.iommu.map(ctx, bo)  # a page and its guard page
    dev.iommu.map(ctx, bo)
    with pytest.raises(DlaError) as e:
        dev.iommu.map(ctx, bo)
    assert e.value.code == NvError.InsufficientMemory
    # Another context has its own space.
    other = dev.iommu.create_context()
    dev.iommu.map(other, bo)


def test_contexts_have_separate_spaces(dev: VirtualDevice) -> None:
    c1, c2 = dev.iommu.create_context(), dev.iommu.create_context()
    a, b = dev.memory.allocate(PAGE), dev.memory.allocate(PAGE)
    a.array[:] = 1
    b.array[:] = 2
    ia, ib = dev.iommu.map(c1, a), dev.iommu.map(c2, b)
    assert ia == ib  # the same address, in two spaces
    scratch1, scratch2 = dev.memory.allocate(PAGE), dev.memory.allocate(PAGE)
    s1, s2 = dev.iommu.map(c1, scratch1), dev.iommu.map(c2, scratch2)
    assert copy(dev, c1, ia, s1, 8) == OK and (scratch1.array[:8] == 1).all()
    assert copy(dev, c2, ib, s2, 8) == OK and (scratch2.array[:8] == 2).all()


# -- configurations ------------------------------------------------------------------------------------


def test_bundled_configs() -> None:
    assert {"full", "small"} <= set(bundled_configs())
    full, small = load_config("full"), load_config("small")
    assert full.name == "full" and small.name == "small"
    assert full.blocks == tuple(dla_block_e)
    assert small.blocks == (dla_block_e.CONV, dla_block_e.SDP, dla_block_e.PDP, dla_block_e.CDP)
    assert set(full.precisions) == set(small.precisions) == {dla_precision_e.FP32, dla_precision_e.FP16}
    assert (full.instances, small.instances) == (2, 1)
    assert small.has_block("pdp") and small.has_block(dla_block_e.CONV)
    assert not small.has_block("RUBIK") and not small.has_block(dla_block_e.BDMA)
    assert full.block_mask == 0b111111 and small.block_mask == 0b011110
    assert load_config(full) is full


def test_load_config_from_a_json_file(tmp_path: Path) -> None:
    raw = raw_config(name="mine", blocks=["BDMA", "PDP"], precisions=["FP16"], instances=3, hw_version=7)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(raw))
    for source in (path, str(path)):
        cfg = load_config(source)
        assert cfg.name == "mine" and cfg.instances == 3 and cfg.hw_version == 7
        assert cfg.blocks == (dla_block_e.BDMA, dla_block_e.PDP)
        assert cfg.precisions == (dla_precision_e.FP16,)
    dev = VirtualDevice(str(path), instance=2)
    assert dev.reg_read(R.GLB_HW_VERSION) == 7
    assert dev.reg_read(R.GLB_CONFIG) == 0b1001


def test_load_config_errors(tmp_path: Path) -> None:
    with pytest.raises(DlaError) as e:
        load_config("no-such-config")
    assert e.value.code == NvError.BadParameter and "no-such-config" in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DlaError) as e:
        load_config(bad)
    assert e.value.code == NvError.BadValue and "JSON" in str(e.value)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(raw_config(instances=0)))
    with pytest.raises(DlaError) as e:
        load_config(wrong)
    assert "instances" in str(e.value) and str(wrong) in str(e.value)


def _without(key: str) -> dict[str, Any]:
    raw = raw_config()
    del raw[key]
    return raw


PARSE_ERRORS = {
    # name: (raw, words the message must contain)
    "not_an_object": ([1, 2], ["JSON object"]),
    "unknown_field": (raw_config(colour="blue"), ["unknown field", "colour"]),
    "missing_contexts": (_without("contexts"), ["missing", "contexts"]),
    "missing_blocks": (_without("blocks"), ["missing", "blocks"]),
    "null_field": (raw_config(name=None), ["missing", "name"]),
    "instances_string": (raw_config(instances="2"), ["instances", "int"]),
    "contexts_bool": (raw_config(contexts=True), ["contexts", "int"]),
    "blocks_string": (raw_config(blocks="CONV"), ["blocks", "list"]),
    "memory_float": (raw_config(memory_bytes=1e9), ["memory_bytes", "int"]),
    "unknown_block": (raw_config(blocks=["CONV", "SDP", "NPU"]), ["blocks", "NPU"]),
    "unknown_precision": (raw_config(precisions=["INT8"]), ["precisions", "INT8"]),
    "conv_without_sdp": (raw_config(blocks=["CONV", "PDP"]), ["blocks", "CONV needs SDP"]),
    "instances_zero": (raw_config(instances=0), ["instances", "1..16"]),
    "instances_17": (raw_config(instances=17), ["instances"]),
    "blocks_empty": (raw_config(blocks=[]), ["blocks"]),
    "blocks_duplicate": (raw_config(blocks=["PDP", "PDP"]), ["blocks", "distinct"]),
    "precisions_empty": (raw_config(precisions=[]), ["precisions"]),
    "hw_version_negative": (raw_config(hw_version=-1), ["hw_version"]),
    "memory_too_small": (raw_config(memory_bytes=100), ["memory_bytes"]),
    "contexts_zero": (raw_config(contexts=0), ["contexts"]),
    "iova_base_unaligned": (raw_config(iova_base=PAGE + 1), ["iova_base"]),
    "iova_base_zero": (raw_config(iova_base=0), ["iova_base"]),
    "iova_size_too_big": (raw_config(iova_size=1 << 48), ["iova_size"]),
}


@pytest.mark.parametrize("case", list(PARSE_ERRORS))
def test_parse_config_rejections_name_the_field(case: str) -> None:
    raw, words = PARSE_ERRORS[case]
    with pytest.raises(DlaError) as e:
        parse_config(raw, "test config")
    assert e.value.code == NvError.BadValue
    for word in words:
        assert word in str(e.value), (word, str(e.value))
    assert "test config" in str(e.value)


def test_parse_config_accepts_lower_case_names() -> None:
    cfg = parse_config(raw_config(blocks=["bdma", "Conv", "sdp"], precisions=["fp32"]))
    assert cfg.blocks == (dla_block_e.BDMA, dla_block_e.CONV, dla_block_e.SDP)
    assert cfg.precisions == (dla_precision_e.FP32,)


def test_device_instances_follow_the_config(tmp_path: Path) -> None:
    with pytest.raises(DlaError) as e:
        VirtualDevice("full", instance=5)
    assert e.value.code == NvError.BadParameter
    with pytest.raises(DlaError) as e:
        VirtualDevice("full", mode="fast")
    assert e.value.code == NvError.BadParameter
    assert VirtualDevice("full", instance=1).instance == 1
    cfg = parse_config(raw_config(instances=16))
    assert VirtualDevice(cfg, instance=15).instance == 15


def test_buffer_on_shared_memory_sees_another_mapping() -> None:
    import fcntl
    import mmap
    import os

    from pydla.hw.memory import DeviceMemory
    from pydla.target.config import load_config

    memory = DeviceMemory(load_config("full"))
    memfd = os.memfd_create("test-bo", os.MFD_ALLOW_SEALING)
    os.ftruncate(memfd, 4096)
    fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    other = mmap.mmap(memfd, 4096)  # what the client maps
    fd = os.dup(memfd)
    os.close(memfd)
    bo = memory.allocate(4096, fd=fd)  # the device's buffer owns fd
    assert bo.fd == fd and memory.allocate(16).fd == -1
    bo.array[:4] = [1, 2, 3, 4]
    assert other[:4] == bytes([1, 2, 3, 4])
    other[8:10] = b"ok"
    assert bytes(bo.array[8:10]) == b"ok"
    other.close()
    memory.free(bo)
    assert bo.fd == -1
    with pytest.raises(OSError):
        os.fstat(fd)
    # On failure the descriptor is closed too (the caller handed it over).
    fd2 = os.memfd_create("x")
    with pytest.raises(DlaError):
        memory.allocate(0, fd=fd2)
    with pytest.raises(OSError):
        os.fstat(fd2)


def test_views_are_reused_only_while_their_mapping_lasts() -> None:
    from pydla.hw.memory import DeviceMemory, MmuFault
    from pydla.target.config import load_config

    memory = DeviceMemory(load_config("full"))
    iommu = memory.iommu
    ctx = iommu.create_context()
    bo = memory.allocate(4096)
    iova = iommu.map(ctx, bo)
    f32 = np.dtype(np.float32)
    v = iommu.view(ctx, iova, (4, 4), (16, 4), f32)
    assert iommu.view(ctx, iova, (4, 4), (16, 4), f32) is v  # the same cubes, run after run
    assert iommu.view(ctx, iova, (2, 4), (16, 4), f32) is not v
    v[0, 0] = 3.5
    assert bo.array[:4].view(np.float32)[0] == 3.5
    iommu.unmap(ctx, iova)
    with pytest.raises(MmuFault, match="not mapped"):
        iommu.view(ctx, iova, (4, 4), (16, 4), f32)
    other = memory.allocate(4096)
    iova2 = iommu.map(ctx, other)
    w = iommu.view(ctx, iova2, (4, 4), (16, 4), f32)
    memory.free(other)  # freed under its mapping: the device faults, it never sees stale memory
    with pytest.raises(MmuFault, match="freed"):
        iommu.view(ctx, iova2, (4, 4), (16, 4), f32)
    assert w is not v
