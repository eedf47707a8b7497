"""SHAVE kernel tasks in the device's trace ring: each a compute-unit execution of its tile's unit
(``shave:tile0``, ``shave:tile1`` in the IP_LAYOUT), so a timeline shows one track per tile; a
faulting kernel's end carries its error."""

from __future__ import annotations

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import shave as S
from pydla.deviceapi.generated import trace as T
from pydla.deviceapi.trace import HEADER_SIZE, TraceRing, read_ring
from pydla.hw.trace_out import ERROR, LAYER
from tests.hw.shave.host import Args, Host, cmx
from tests.hw.shave.test_scenario import run_clamp

RING_BYTES = 1 << 16


def attach(host: Host, mask: int) -> tuple[int, int]:
    """A trace ring in the host's context; (its IOVA, its size)."""
    iova = host.alloc(RING_BYTES)
    ring = TraceRing.create(RING_BYTES - HEADER_SIZE, T.API)
    host.write(iova, bytes(ring.buffer))
    for reg, value in ((R.GLB_TRACE_BASE_LO, iova & 0xFFFFFFFF), (R.GLB_TRACE_BASE_HI, iova >> 32),
                       (R.GLB_TRACE_CTX, host.ctx), (R.GLB_TRACE_MASK, mask), (R.GLB_TRACE_SIZE, RING_BYTES)):
        host.w(reg, value)
    return iova, RING_BYTES


def events(host: Host, ring: tuple[int, int]) -> list[tuple[str, dict[str, object]]]:
    raw = np.frombuffer(host.read(*ring), np.uint8)
    return [(e.name, e.record.to_dict()) for e in read_ring(raw.data, T.API).events
            if e.name.startswith("cu_")]


def unit_of(host: Host, name: str) -> int:
    return next(i for i, cu in enumerate(host.dev.config.ip_layout) if cu.name == name)


def test_kernel_tasks_are_executions_of_their_tiles_units(host: Host) -> None:
    ring = attach(host, LAYER)
    for tile in (0, 1):
        host.start_tile(tile)
        x = np.linspace(-3, 3, 64).astype(np.float16)
        np.testing.assert_array_equal(run_clamp(host, x, -1, 1, tile=tile), np.clip(x, -1, 1))
    got = events(host, ring)
    units = [unit_of(host, "shave:tile0"), unit_of(host, "shave:tile1")]
    assert [(n, d["unit"]) for n, d in got] == [("cu_start", units[0]), ("cu_end", units[0]),
                                                ("cu_start", units[1]), ("cu_end", units[1])]
    ends = [d for n, d in got if n == "cu_end"]
    assert all(int(d["duration_ns"]) > 0 and d["hw_error"] == 0 for d in ends)  # type: ignore[call-overload]


def test_a_faulting_kernel_ends_with_its_error(host: Host) -> None:
    ring = attach(host, LAYER | ERROR)
    host.start_tile(0)
    a = Args(S.ActivationParams)
    a.memref("input", 0x40000000, (16,), np.float32)  # outside every window
    a.memref("output", cmx(0x1000), (16,), np.float32)
    a.params.op = S.shave_activation_e.EXP
    host.kernel(0, "activation", a)
    got = events(host, ring)
    assert [n for n, _ in got] == ["cu_start", "cu_end"]
    assert got[1][1]["hw_error"] == int(R.shave_error_e.READ_FAULT)


def test_nothing_is_written_while_tracing_is_off(host: Host) -> None:
    iova = host.alloc(RING_BYTES)
    host.start_tile(0)
    run_clamp(host, np.ones(8, np.float16), 0, 1)
    assert not any(host.read(iova, RING_BYTES))
