"""The trace ring the device writes: set up through GLB registers, events by class, refusals, overflow."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import trace as T
from pydla.deviceapi.trace import HEADER_SIZE, TraceRing, read_ring
from pydla.hw.device import VirtualDevice
from pydla.hw.trace_out import ERROR, INTERRUPT, LAYER, REG_WRITE
from pydla.kmd.driver import Kmd
from tests.kmd.support import conv_sdp_pdp, pdp_chain

RING_BYTES = 1 << 16


@pytest.fixture
def rig() -> Iterator[tuple[VirtualDevice, Kmd]]:
    dev = VirtualDevice("full")
    kmd = Kmd(VirtualDevicePort(dev))
    yield dev, kmd
    kmd.close()
    dev.close()


def attach(dev: VirtualDevice, kmd: Kmd, mask: int, size: int = RING_BYTES,
           header: bool = True) -> np.ndarray:
    """A ring in a context of its own, its header written, the device told where it is."""
    ctx = kmd.open_context()
    handle = kmd.bo_create(ctx, size)
    iova, memory = kmd.bo_iova(ctx, handle), kmd.bo_array(ctx, handle)
    if header:
        ring = TraceRing.create(size - HEADER_SIZE, T.API)
        memory[:len(ring.buffer)] = np.frombuffer(ring.buffer, np.uint8)
    for reg, value in ((R.GLB_TRACE_BASE_LO, iova & 0xFFFFFFFF), (R.GLB_TRACE_BASE_HI, iova >> 32),
                       (R.GLB_TRACE_CTX, ctx), (R.GLB_TRACE_MASK, mask), (R.GLB_TRACE_SIZE, size)):
        dev.reg_write(reg, value)
    return memory


def run_case(kmd: Kmd, case_factory=conv_sdp_pdp, seed: int = 0) -> int:  # type: ignore[no-untyped-def]
    ctx = kmd.open_context()
    case = case_factory()
    loaded = case.load(kmd, ctx)
    expected = case.feed(kmd, ctx, loaded, seed)
    kmd.submit(ctx, loaded.addresses).wait(5000)
    case.check(kmd, ctx, loaded, expected)
    return ctx


def names(memory: np.ndarray) -> list[str]:
    return [e.name for e in read_ring(memory.data, T.API).events]


def test_operations_and_interrupts_are_written_as_they_happen(rig) -> None:  # type: ignore[no-untyped-def]
    dev, kmd = rig
    memory = attach(dev, kmd, LAYER | INTERRUPT)
    ctx = run_case(kmd)
    events = read_ring(memory.data, T.API).events
    ops = [(e.name, e.record.to_dict()) for e in events if e.name.startswith("op_")]
    assert [(n, d["block"]) for n, d in ops] == [
        ("op_start", "CONV"), ("op_start", "SDP"), ("op_end", "CONV"), ("op_end", "SDP"), ("op_start", "PDP"),
        ("op_end", "PDP")]
    assert all(d["context_id"] == ctx and d["seq"] == 0 and d["group"] == 0 for _, d in ops)
    ends = [e for e in events if e.name == "op_end"]
    assert all(e.record.duration_ns > 0 and e.record.hw_error == 0 for e in ends)
    starts = {e.record.block: e.timestamp_ns for e in events if e.name == "op_start"}
    assert all(e.timestamp_ns >= starts[e.record.block] for e in ends)
    # CONV+SDP done, then PDP done; one at the end of the job on the command processor's path
    assert [e.name for e in events].count("interrupt") == (1 if dev.cp.present else 2)
    run_case(kmd, seed=1)
    again = [e.record.seq for e in read_ring(memory.data, T.API).events if e.name == "op_start"]
    assert again == [0, 0, 0, 1, 1, 1]  # each block counts its operations


def test_the_mask_selects_the_classes(rig) -> None:  # type: ignore[no-untyped-def]
    dev, kmd = rig
    memory = attach(dev, kmd, INTERRUPT)
    run_case(kmd)
    assert set(names(memory)) == {"interrupt"}
    dev.reg_write(R.GLB_TRACE_MASK, REG_WRITE)
    run_case(kmd, pdp_chain)
    writes = [e for e in read_ring(memory.data, T.API).events if e.name == "reg_write"]
    if dev.cp.present:  # the host writes the command processor's registers, no block's
        assert any(e.record.address == R.GLB_CP_DOORBELL for e in writes)
    else:
        assert writes and {e.record.to_dict()["block"] for e in writes} >= {"PDP"}
        assert any(e.record.address == R.GLB_TRACE_MASK or e.record.address == R.PDP_D_OP_ENABLE
                   for e in writes)
    dev.reg_write(R.GLB_TRACE_MASK, 0)
    before = len(names(memory))
    run_case(kmd)
    assert len(names(memory)) == before  # off: nothing written


def test_a_failed_operation_is_an_op_end_with_its_error_and_an_error_event(rig) -> None:  # type: ignore[no-untyped-def]
    dev, kmd = rig
    memory = attach(dev, kmd, LAYER | ERROR)
    ctx = kmd.open_context()
    case = pdp_chain(1)
    loaded = case.load(kmd, ctx)
    case.feed(kmd, ctx, loaded, 0)
    dev.inject_error("PDP")
    with pytest.raises(Exception, match="BAD_CONFIG"):
        kmd.submit(ctx, loaded.addresses).wait(5000)
    events = read_ring(memory.data, T.API).events
    end = next(e for e in events if e.name == "op_end")
    assert end.record.hw_error == int(R.dla_hw_error_e.BAD_CONFIG)
    error = next(e for e in events if e.name == "error")
    assert error.record.to_dict()["block"] == "PDP" and error.record.to_dict()["status"] == "ERROR"


@pytest.mark.parametrize("problem", ["unmapped", "no header", "too small"])
def test_a_ring_the_device_cannot_use_is_refused_and_nothing_is_written(rig, problem: str) -> None:  # type: ignore[no-untyped-def]
    dev, kmd = rig
    if problem == "unmapped":
        for reg, value in ((R.GLB_TRACE_BASE_LO, 0x1234000), (R.GLB_TRACE_CTX, 7), (R.GLB_TRACE_MASK, LAYER),
                           (R.GLB_TRACE_SIZE, RING_BYTES)):
            dev.reg_write(reg, value)
        words = "MMU fault"
    elif problem == "no header":
        attach(dev, kmd, LAYER, header=False)
        words = "magic"
    else:
        attach(dev, kmd, LAYER, size=RING_BYTES)
        dev.reg_write(R.GLB_TRACE_SIZE, HEADER_SIZE - 8)
        words = "less than its header"
    assert "refused" in dev.log[-1] and words in dev.log[-1], dev.log[-1]
    assert dev.trace_mask == 0
    run_case(kmd)  # the device works on, untraced


def test_a_full_ring_drops_the_oldest_and_counts_them(rig) -> None:  # type: ignore[no-untyped-def]
    dev, kmd = rig
    memory = attach(dev, kmd, LAYER, size=HEADER_SIZE + 512)
    for seed in range(4):
        run_case(kmd, seed=seed)
    result = read_ring(memory.data, T.API)
    assert result.dropped > 0
    assert result.events and result.events[-1].name == "op_end"


def test_a_device_reset_stops_tracing(rig) -> None:  # type: ignore[no-untyped-def]
    dev, kmd = rig
    memory = attach(dev, kmd, LAYER)
    dev.reg_write(R.GLB_RESET, 1 << 31)
    assert dev.reg_read(R.GLB_TRACE_SIZE) == 0 and dev.trace_mask == 0
    run_case(kmd)
    assert names(memory) == []


def test_compute_unit_executions_are_traced(rig) -> None:  # type: ignore[no-untyped-def]
    dev, kmd = rig
    memory = attach(dev, kmd, LAYER)
    ctx = kmd.open_context()
    for _ in range(2):
        kmd.cu_submit(ctx, "noop_hs", []).wait(5000)
    events = [e for e in read_ring(memory.data, T.API).events if e.name.startswith("cu_")]
    unit = [cu.name for cu in dev.config.ip_layout].index("noop:noop_hs")
    assert [(e.name, e.record.execution, e.record.unit) for e in events] == [
        ("cu_start", 1, unit), ("cu_end", 1, unit), ("cu_start", 2, unit), ("cu_end", 2, unit)]
    latency_ns = dev.config.compute_unit("noop_hs").latency_cycles * 1000 / dev.config.clock_mhz
    assert all(e.record.duration_ns == latency_ns for e in events if e.name == "cu_end")


def test_every_event_has_a_generated_switch_and_the_device_uses_it() -> None:
    """The trace contract's switches (TRACE_<EVENT>_CLASS in the C header) name a class of the
    register map's trace_class_e for every event, and the device files its events under them."""
    classes = {int(c) for c in R.trace_class_e}
    for event in T.API.trace_events.values():
        assert getattr(T, f"{event.__name__.upper()}_CLASS") in classes, event.__name__
    assert T.OP_START_CLASS == T.OP_END_CLASS == T.CU_START_CLASS == T.CU_END_CLASS == LAYER
    assert (T.INTERRUPT_CLASS, T.ERROR_CLASS, T.REG_WRITE_CLASS) == (INTERRUPT, ERROR, REG_WRITE)


@pytest.mark.parametrize("capacity", [64, 200, 4096])
def test_the_device_writes_what_the_reference_writer_writes(capacity: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """RingWriter (the device's fast writer) against TraceRing, byte for byte, through laps, pads and
    drops: random events into rings small enough to wrap many times."""
    import random
    import time

    from pydla.hw import trace_out

    clock = iter(range(10**6, 10**9, 7))
    monkeypatch.setattr(time, "monotonic_ns", lambda: next(clock))
    reference = TraceRing.create(capacity, T.API)
    buffer = bytearray(reference.buffer)
    writer = trace_out.RingWriter(memoryview(buffer))
    rng = random.Random(capacity)
    kinds = [(trace_out._OP_START, T.op_start), (trace_out._OP_END, T.op_end), (trace_out._ERROR, T.error),
             (trace_out._INTERRUPT, T.interrupt), (trace_out._REG_WRITE, T.reg_write),
             (trace_out._CU_START, T.cu_start), (trace_out._CU_END, T.cu_end)]
    stamps = iter(range(10**6, 10**9, 7))
    for _ in range(500):
        kind, cls = rng.choice(kinds)
        values = [rng.randrange(1 << (8 * size)) for size in
                  (getattr(cls, f[0]).size for f in cls._fields_)]
        writer.put(kind, *values)
        reference.emit(cls(*values), next(stamps))
        assert bytes(buffer) == bytes(reference.buffer)
    contents = read_ring(bytes(buffer), T.API)
    assert contents.dropped > 0 or capacity == 4096
