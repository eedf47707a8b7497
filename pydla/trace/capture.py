"""Trace one runtime: the device's ring through the portability layer, the host's spans through the
runner, and what they say together (a Perfetto timeline, a profile).

Usage::

    rt = pydla.createRuntime(); rt.load("model.dla")
    capture = Capture(rt)                       # starts the device's ring and the host's spans
    ...                                         # bind, submit
    result = capture.finish()                   # stops both
    result.write_chrome("out.json"); print(result.profile_text())
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import trace as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.trace import RingContents, read_ring
from pydla.errors import DlaError, NvError, file_error
from pydla.trace.host import HostTrace
from pydla.trace.profile import format_profile, profile
from pydla.trace.timeline import CuRun, DeviceOp, Mark, StepOps, attribute, chrome_trace, device_work

DEFAULT_RING = 8 << 20
# What a timeline needs; REG_WRITE is left out by default (one event per register write).
DEFAULT_MASK = int(R.trace_class_e.TASK | R.trace_class_e.LAYER | R.trace_class_e.INTERRUPT
                   | R.trace_class_e.ERROR | R.trace_class_e.LOG)


@dataclass
class TraceResult:
    """What a capture found: the ring as read, the host's spans, and the device's work named."""

    ring: bytes
    contents: RingContents
    host: HostTrace
    ops: list[DeviceOp]
    units: list[CuRun]
    marks: list[Mark]
    named: int
    unit_names: list[str] = field(default_factory=list)
    device_name: str = "device"

    def chrome(self) -> dict[str, Any]:
        return chrome_trace(self.host, self.ops, self.units, self.marks, unit_names=self.unit_names,
                            device_name=self.device_name, dropped=self.contents.dropped)

    def write_chrome(self, path: str | os.PathLike[str]) -> None:
        """Write the Perfetto / Chrome trace JSON (open it at https://ui.perfetto.dev)."""
        try:
            Path(path).write_text(json.dumps(self.chrome()))
        except OSError as e:
            raise file_error(path, e, writing=True) from None

    def write_ring(self, path: str | os.PathLike[str]) -> None:
        """Write the ring's bytes as read (for ``pydla trace RING``)."""
        try:
            Path(path).write_bytes(self.ring)
        except OSError as e:
            raise file_error(path, e, writing=True) from None

    def profile_text(self, limit: int = 40) -> str:
        rows, steps = profile(self.ops, self.host, self.units, self.unit_names)
        text = format_profile(rows, steps, limit=limit)
        unnamed = len(self.ops) - self.named
        if self.contents.dropped:
            text += f"\n{self.contents.dropped} device events were dropped (a larger ring keeps them)"
        if unnamed:
            text += f"\n{unnamed} device operations are not this network's (another client's) or not named"
        return text


class Capture:
    """Trace runtime ``rt`` from now until :meth:`finish` (see the module docstring)."""

    def __init__(self, rt: Any, *, size: int = DEFAULT_RING, mask: int = DEFAULT_MASK) -> None:
        runner = getattr(rt, "runner", None)
        if runner is None:
            raise DlaError(NvError.InvalidState, "tracing a runtime needs a loaded network: load one first")
        self.rt = rt
        self.runner = runner
        self.host = HostTrace()
        self.steps = _steps(runner)
        self.trace = rt.port.NvDlaTraceStart(rt.handle, size, mask)
        runner.tracer = self.host
        self._result: TraceResult | None = None

    def finish(self) -> TraceResult:
        """Stop tracing; what it found. Idempotent."""
        if self._result is not None:
            return self._result
        self.runner.tracer = None
        ring = self.rt.port.NvDlaTraceStop(self.rt.handle, self.trace)
        contents = read_ring(ring, T.API)
        ops, units, marks = device_work(contents.events)
        named = attribute(ops, self.steps, self.trace.context_id)
        info = _device_info(self.rt)
        self._result = TraceResult(ring, contents, self.host, ops, units, marks, named,
                                   list(getattr(info, "compute_units", ())), getattr(info, "name", "device"))
        return self._result


def _steps(runner: Any) -> list[StepOps]:
    """Per step of the runner, in order: what its control code runs (CPU steps: nothing)."""
    out = []
    for step in runner.steps:
        code = getattr(runner.lo, "control_code", None)
        if not hasattr(step, "descriptors") or code is None:
            out.append(StepOps(step.run.name, ()))
            continue
        control = code(step.run.name)
        blocks = [dla_block_e(t).name if t in dla_block_e._value2member_map_ else str(t)
                  for t in control.op_types()]
        shapes = control.shapes()
        out.append(StepOps(step.run.name, tuple((i, b, shapes[i]) for i, b in enumerate(blocks))))
    return out


def _device_info(rt: Any) -> Any:
    try:
        return rt.port.NvDlaGetDeviceInfo(getattr(rt, "device", 0))
    except DlaError:
        return None
