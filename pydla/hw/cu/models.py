"""What a compute unit computes: the built-in models, device memory as a model sees it, and building
a unit's model (the interface a model implements, and the check a configuration gets when it loads,
are the target's: :mod:`pydla.target.cu_model`).

The device wraps a model in the AXI4-Lite control block of XRT's kernel execution models
(:mod:`pydla.hw.cu.unit`): the model never sees ap_start or ap_done, only its work.

- A **memory-mapped** model (``memory_mapped = True``; AP_CTRL_HS or AP_CTRL_CHAIN) does one
  execution in :meth:`ComputeUnitModel.execute`, from the argument registers the host wrote before
  ap_start (latched when the start was accepted) and device memory reached through the IOMMU in the
  context the host wrote to the unit's ``ctx`` register.
- A **stream** model (``memory_mapped = False``; AP_CTRL_NONE) turns bytes of its input stream into
  bytes of its output stream in :meth:`ComputeUnitModel.process`, with scalar parameters in its
  argument registers (written with register writes only, as xclRegWrite does).

A configuration names a built-in model (``noop``, ``vadd``, ``scale_i16``) or its own class as
``"model": "python:package.module:ClassName"``; every other key of the IP_LAYOUT entry reaches the
model's constructor as ``params``.

Usage::

    class Double(ComputeUnitModel):
        def execute(self, args, memory):
            src = memory.array(args.u64(0), args.u32(4), np.float32)
            memory.array(args.u64(2), args.u32(4), np.float32)[:] = 2 * src
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.memory import Iommu, MmuFault
from pydla.target.cu_model import (
    ComputeUnitModel,
    CuArgs,
    UnitMemory,
    unknown_model,
    user_model_class,
)

if TYPE_CHECKING:
    from pydla.target.ip_layout import ComputeUnitInfo


class CuMemory:
    """Device memory as a unit sees it: in one IOMMU context, every access translated and
    bounds-checked (an access outside the context's mappings raises :class:`MmuFault`, which the
    device turns into the unit's ``error`` register, never into a host exception)."""

    def __init__(self, iommu: Iommu, ctx: int) -> None:
        self.iommu = iommu
        self.ctx = ctx

    def array(self, address: int, count: int, dtype: Any) -> npt.NDArray[Any]:
        """``count`` elements of ``dtype`` at device address ``address``, as a writable numpy view."""
        if count <= 0:
            raise MmuFault(self.ctx, address, 0, f"element count {count} must be > 0")
        itemsize = np.dtype(dtype).itemsize
        return self.iommu.view(self.ctx, address, (count,), (itemsize,), dtype)

    def read(self, address: int, size: int) -> bytes:
        return self.array(address, size, np.uint8).tobytes()

    def write(self, address: int, data: bytes) -> None:
        self.array(address, len(data), np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)


class NoOp(ComputeUnitModel):
    """Does nothing; takes its latency (what the execution models' tests and benchmarks drive)."""

    def execute(self, args: CuArgs, memory: UnitMemory) -> None:
        return None


class VectorAdd(ComputeUnitModel):
    """out = a + b on float32 arrays. Arguments: a (words 0-1), b (2-3), out (4-5): device
    addresses; n (word 6): the element count."""

    arguments = ("a", "b", "out", "n")

    def execute(self, args: CuArgs, memory: UnitMemory) -> None:
        n = args.u32(6)
        if n == 0:
            return
        a = memory.array(args.u64(0), n, np.float32)
        b = memory.array(args.u64(2), n, np.float32)
        out = memory.array(args.u64(4), n, np.float32)
        np.add(a, b, out=out)


class ScaleInt16(ComputeUnitModel):
    """A stream of int16 samples: y = saturate(round(x * scale + offset)). Scalar arguments
    (float32 bits): scale (word 0, 1.0 after reset), offset (word 1, 0.0)."""

    memory_mapped = False
    granule = 2

    def reset_args(self) -> dict[int, int]:
        return {0: struct.unpack("<I", struct.pack("<f", 1.0))[0], 1: 0}

    def process(self, data: bytes, args: CuArgs) -> bytes:
        x = np.frombuffer(data, dtype="<i2").astype(np.float64)
        with np.errstate(all="ignore"):
            y = np.rint(x * args.f32(0) + args.f32(1))
        y = np.nan_to_num(y, nan=0.0)
        return np.clip(y, -32768, 32767).astype("<i2").tobytes()


BUILTIN: dict[str, type[ComputeUnitModel]] = {"noop": NoOp, "vadd": VectorAdd, "scale_i16": ScaleInt16}


def model_class(info: ComputeUnitInfo, where: str) -> type[ComputeUnitModel]:
    """The class an entry's ``model`` names: a built-in, or ``python:package.module:ClassName``."""
    name = info.model
    if name == "shave_tile":  # a SHAVE tile as an HS unit (its own module: it knows the tiles)
        from pydla.hw.cu.shave_tile import ShaveTileUnit

        return ShaveTileUnit
    if not name.startswith("python:"):
        cls = BUILTIN.get(name)
        if cls is None:
            raise unknown_model(name, where)
        return cls
    return user_model_class(name, where)


def create_model(info: ComputeUnitInfo) -> ComputeUnitModel:
    cls = model_class(info, f"compute unit '{info.name}'")
    try:
        return cls(info, dict(info.params))
    except DlaError:
        raise
    except Exception as e:
        raise DlaError(NvError.BadValue,
                       f"compute unit '{info.name}': model {info.model!r} failed to start: "
                       f"{type(e).__name__}: {e}") from e
