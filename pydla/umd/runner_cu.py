"""An NPU run of a run recipe whose kernel's instance is a compute unit other than the DLA engine: the
runner starts that unit, as XRT's ``xrt::run`` on that kernel does, with the run's arguments and
constants as the unit's arguments in argidx order (a buffer as its device address, two argument
words; an int constant one word; a float constant its float32 bits); the kernel's control code is not
used.

The argidx of a run's arguments and constants together must be 0..n-1, each once (a kernel's
arguments have no gaps); a unit that declares its arguments (XRT's kernel metadata) must get that many.

Usage (inside :class:`pydla.umd.runner.Runner`)::

    unit = unit_of_run(run, kernel, info)          # None: the run is DLA control code
    if unit is not None:
        step = CuStep(run, unit)
        args = step.arguments(mem_of)              # NvDlaSubmitCu's args
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydla.errors import DlaError, NvError
from pydla.loadable.recipe import Argument, Kernel, Run
from pydla.portability.interface import NvDlaDeviceInfo, NvDlaMemHandle


def unit_of_run(run: Run, kernel: Kernel | None, info: NvDlaDeviceInfo | None) -> str | None:
    """The compute unit ("kernel:instance") NPU run ``run`` starts, when its kernel's instance is a
    unit other than the DLA engine; None when it runs DLA control code (the engine's unit, or a port
    that does not say which of its units is the engine)."""
    if kernel is None or info is None or info.engine_unit is None:
        return None
    unit = info.compute_unit(kernel.instance)
    return None if unit is None or unit == info.engine_unit else unit


@dataclass
class CuStep:
    """An NPU run that starts compute unit ``unit``."""

    run: Run
    unit: str

    def check(self, info: NvDlaDeviceInfo) -> None:
        """The run's argidx are 0..n-1 without gaps or repeats, its constants numbers, and as many as
        the unit declares; DlaError naming the run otherwise."""
        what = f"npu run '{self.run.name}' on compute unit '{self.unit}'"
        indices = sorted([a.argidx for a in self.run.arguments] + [c.argidx for c in self.run.constants])
        if indices != list(range(len(indices))):
            raise DlaError(NvError.BadValue,
                           f"{what}: its arguments and constants have argidx {indices}; a compute unit's "
                           f"arguments are 0..{len(indices) - 1}, each once")
        for c in self.run.constants:
            if c.type not in ("int", "float"):
                raise DlaError(NvError.NotSupported, f"{what}: constant at argidx {c.argidx} is a {c.type}: "
                                                     "a compute unit's arguments are buffers and numbers")
        declared = info.compute_unit_args(self.unit)
        if declared is not None and len(declared) != len(indices):
            raise DlaError(NvError.CountMismatch, f"{what}: {len(indices)} arguments, the unit takes "
                                                  f"{len(declared)} ({', '.join(declared)})")

    def arguments(self, mem_of: Callable[[Argument], tuple[NvDlaMemHandle, int, int]]) -> list[Any]:
        """NvDlaSubmitCu's arguments in argidx order: ``mem_of(argument)`` gives a buffer's (memory,
        start, end), its byte range checked by the runner."""
        by_index: dict[int, Any] = {}
        for a in self.run.arguments:
            mem, start, end = mem_of(a)
            by_index[a.argidx] = (mem, start, end - start)
        for c in self.run.constants:
            by_index[c.argidx] = _word(c.value, c.type, f"npu run '{self.run.name}' constant {c.argidx}")
        return [by_index[i] for i in range(len(by_index))]


def _word(value: Any, kind: str, what: str) -> int:
    if kind == "float":
        try:
            return int.from_bytes(struct.pack("<f", float(value)), "little")
        except OverflowError:
            raise DlaError(NvError.BadValue, f"{what}: {value!r} does not fit a float32") from None
    if type(value) is not int or not -(1 << 31) <= value < 1 << 32:
        raise DlaError(NvError.BadValue, f"{what}: {value!r} is not a 32-bit integer")
    return value & 0xFFFFFFFF
