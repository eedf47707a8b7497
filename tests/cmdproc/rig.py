"""Two rigs side by side: the same task on a device with the command processor (``full``) and on one
without (the per-operation path, the reference), with what the tests compare: outputs, the trace
ring's per-operation events, the register state after the job, the error a failure gives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import trace as TR
from pydla.deviceapi.trace import HEADER_SIZE, TraceRing, read_ring
from pydla.errors import DlaError
from pydla.hw.device import VirtualDevice
from pydla.hw.trace_out import ERROR, LAYER
from pydla.kmd.driver import Job, Kmd
from pydla.loadable.taskbuilder import LoadedTask
from pydla.target.config import DeviceConfig, load_config
from tests.kmd.support import Case, per_operation

RING_BYTES = 1 << 18


@dataclass
class Rig:
    """A device, its driver, a trace ring, and a case loaded in a context of its own."""

    dev: VirtualDevice
    kmd: Kmd
    ring: np.ndarray
    ctx: int = 0
    case: Case | None = None
    loaded: LoadedTask | None = None
    errors: list[DlaError] = field(default_factory=list)
    failed_events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @classmethod
    def make(cls, config: str | DeviceConfig, mode: str = "deterministic", **kmd_args: Any) -> Rig:
        dev = VirtualDevice(load_config(config), mode=mode)
        kmd = Kmd(VirtualDevicePort(dev), **kmd_args)
        ring_ctx = kmd.open_context()
        handle = kmd.bo_create(ring_ctx, RING_BYTES)
        iova, memory = kmd.bo_iova(ring_ctx, handle), kmd.bo_array(ring_ctx, handle)
        header = TraceRing.create(RING_BYTES - HEADER_SIZE, TR.API)
        memory[:len(header.buffer)] = np.frombuffer(header.buffer, np.uint8)
        for reg, value in ((R.GLB_TRACE_BASE_LO, iova & 0xFFFFFFFF), (R.GLB_TRACE_BASE_HI, iova >> 32),
                           (R.GLB_TRACE_CTX, ring_ctx), (R.GLB_TRACE_MASK, LAYER | ERROR),
                           (R.GLB_TRACE_SIZE, RING_BYTES)):
            dev.reg_write(reg, value)
        return cls(dev, kmd, memory)

    def load(self, case: Case) -> None:
        self.ctx = self.kmd.open_context()
        self.case = case
        self.loaded = case.load(self.kmd, self.ctx)

    def run(self, seed: int, *, prepared: int | None = None, wait_ms: int = 10_000) -> Job:
        assert self.case is not None and self.loaded is not None
        self.case.feed(self.kmd, self.ctx, self.loaded, seed)
        job = (self.kmd.submit(self.ctx, self.loaded.addresses) if prepared is None
               else self.kmd.submit_prepared(self.ctx, prepared))
        try:
            job.wait(wait_ms)
        except DlaError as e:
            self.errors.append(e)
        return job

    def outputs(self) -> dict[str, np.ndarray]:
        assert self.case is not None and self.loaded is not None
        return self.case.result(self.kmd, self.ctx, self.loaded)

    def op_events(self) -> list[tuple[str, dict[str, Any]]]:
        """The trace ring's op_start, op_end and error events, without their times."""
        out = []
        for e in read_ring(self.ring.data, TR.API).events:
            if e.name in ("op_start", "op_end", "error"):
                record = e.record.to_dict()
                record.pop("duration_ns", None)
                out.append((e.name, record))
        return out

    def registers(self) -> dict[str, Any]:
        """Every block's register groups (its configuration registers), S registers and counts."""
        state = self.dev.state
        out: dict[str, Any] = {"ops_done": state.ops_done, "fault": state.fault}
        for b in state.blocks.values():
            out[b.kind.name] = (bytes(b.groups[0][:b.regs_size]), bytes(b.groups[1][:b.regs_size]),
                                b.producer, b.consumer, tuple(b.state), b.ops_done, b.error, b.error_group)
        return out

    def close(self) -> None:
        self.kmd.close()
        self.dev.close()


def pair(mode: str = "deterministic", headed: bool = False, **kmd_args: Any) -> tuple[Rig, Rig]:
    """(command processor, per operation) rigs of the ``full`` configuration (``full-headed``: the
    microcontroller's firmware submits to the command processor)."""
    config = "full-headed" if headed else "full"
    cp = Rig.make(config, mode, **kmd_args)
    assert cp.dev.cp.present
    reference = Rig.make(per_operation(config), mode, **kmd_args)
    assert not reference.dev.cp.present
    return cp, reference
