"""Headed mode's per-task shortcuts: messages packed in the rings, the firmware's prepared tasks, the
interrupt routing. Each must say exactly what the generic path says."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.runtime import decode
from pydla.firmware.headed_codec import nvdla_fields, nvdla_version, wire
from pydla.firmware.headed_ring import Layout, Ring
from pydla.hw.device import VirtualDevice
from pydla.hw.mcu.prepared import merge_reads
from pydla.hw.memory import BufferObject
from pydla.kmd.driver import Kmd
from tests.kmd.support import single_pdp


def test_packed_messages_are_the_generated_records_bytes_also_when_they_wrap() -> None:
    w = wire(api)
    assert w is not None
    layout = Layout.default(4096, cmd=1024)
    mem = np.zeros(layout.size, np.uint8)
    layout.write_header(mem)
    producer = Ring(mem, layout.cmd, producer=True)
    consumer = Ring(mem, layout.cmd, producer=False)
    for i in range(100):  # 48 bytes a message in a 1024-byte ring: it wraps, at every offset of 8
        nvdla = nvdla_fields((0, 10 + i % 3, i % 2) if i % 2 else None)  # an NVDLA task every other one
        values = (*w.submit_head, i, 0x1000 + i, 7 * i, 0, 3, 5, 0, 0, *nvdla)
        assert producer.write_packed(w.submit, *values)
        found = consumer.peek()
        assert found is not None
        buf, at, size = found
        assert size == w.submit.size and w.submit.unpack_from(buf, at) == values
        consumer.consume()
        msg = decode(api.API, w.submit.pack(*values))
        assert bytes(msg) == bytes(api.task_submit_list_cmd.new(
            tag=i, address_list=0x1000 + i, task_id=7 * i, num_addresses=3, context_id=5, nvdla_task=i % 2,
            nvdla_major=0, nvdla_minor=(10 + i % 3) * (i % 2), nvdla_sub_minor=i % 2))
        assert nvdla_version(*w.submit.unpack_from(buf, at)[12:]) == ((0, 10 + i % 3, 1) if i % 2 else None)
    assert consumer.peek() is None


def test_a_full_ring_refuses_a_packed_message() -> None:
    w = wire(api)
    assert w is not None
    layout = Layout.default(4096, cmd=512)
    mem = np.zeros(layout.size, np.uint8)
    layout.write_header(mem)
    ring = Ring(mem, layout.cmd, producer=True)
    written = 0
    while ring.write_packed(w.submit, *w.submit_head, written, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0):
        written += 1
    assert written == 512 // 48


def test_an_api_laid_out_otherwise_takes_the_generic_path() -> None:
    class Other:
        task_submit_list_cmd = api.task_submit_list_rsp  # another layout under the name

    assert wire(Other) is None  # type: ignore[arg-type]


def test_reads_merge_into_spans_per_buffer() -> None:
    a, b = BufferObject(1, 1 << 16), BufferObject(2, 1 << 16)
    a.array[:] = np.arange(1 << 16, dtype=np.uint32).view(np.uint8)[:1 << 16]
    spans = merge_reads([(a, 0, 64), (b, 100, 8), (a, 64, 32), (a, 8000, 16), (a, 200, 8)], gap=4096)
    got = sorted((s.bo.handle, s.start, len(s.data)) for s in spans)
    assert got == [(1, 0, 208), (1, 8000, 16), (2, 100, 8)]
    assert all(s.data == s.bo.array[s.start:s.start + len(s.data)].tobytes() for s in spans)


def test_a_changed_mapping_makes_the_firmware_validate_again() -> None:
    dev = VirtualDevice("full-headed")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        ctx = kmd.open_context()
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        for seed in range(2):
            expected = case.feed(kmd, ctx, loaded, seed)
            kmd.submit(ctx, loaded.addresses).wait(5000)
            case.check(kmd, ctx, loaded, expected)
        assert dev.mcu is not None
        cache = dev.mcu.firmware.cache
        assert (cache.misses, cache.hits) == (1, 1)
        other = kmd.bo_create(ctx, 4096)  # a new mapping in the task's context: a new generation
        expected = case.feed(kmd, ctx, loaded, 3)
        kmd.submit(ctx, loaded.addresses).wait(5000)
        case.check(kmd, ctx, loaded, expected)
        assert (cache.misses, cache.hits) == (2, 1)
        kmd.bo_destroy(ctx, other)
    finally:
        kmd.close()
        dev.close()


@pytest.mark.parametrize("headed", [False, True])
def test_block_interrupts_reach_the_host_only_headless(headed: bool) -> None:
    from pydla.deviceapi.generated import dla_regs as R

    dev = VirtualDevice("full-headed" if headed else "full")
    seen: list[int] = []
    dev.connect_irq(lambda: seen.append(dev.reg_read(R.GLB_INTR_STATUS)))  # before the driver's ISR
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        ctx = kmd.open_context()
        case = single_pdp()
        loaded = case.load(kmd, ctx)
        expected = case.feed(kmd, ctx, loaded, 0)
        kmd.submit(ctx, loaded.addresses).wait(5000)
        case.check(kmd, ctx, loaded, expected)
        assert seen
        if headed:  # the mailbox's bit 28, never a block's done bit alone
            assert all(status & 1 << 28 for status in seen), [hex(s) for s in seen]
        else:
            assert any(status & 0x1FFF for status in seen)  # a block's done bit, or the command processor's
    finally:
        kmd.close()
        dev.close()
